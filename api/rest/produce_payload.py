"""One produce request of the REST Proxy v3 records endpoint, read into a record to send,
and the delivery report written back for it.

A request is a JSON object (every field optional)::

    {"partition_id": 1,
     "headers": [{"name": "h", "value": "<base64 or null>"}],
     "key":   {"type": "BINARY", "data": "<base64>"},
     "value": {"type": "JSON", "data": {"any": "json"}},
     "timestamp": "2021-02-05T19:14:42Z"}

``type`` is BINARY (base64 text), JSON (any JSON, written compactly as UTF-8) or STRING
(text, written as UTF-8). A missing key or value, or ``data: null``, is a null key or
value. The schema formats (AVRO, JSONSCHEMA, PROTOBUF, or schema fields without a type)
need a Schema Registry, which pykraft does not run: they are refused per record, with 400.
A request that cannot be read is answered, per record, by ``{"error_code": 400,
"message": "Bad Request: ..."}``; the rest of the stream goes on.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from api.rest.models import INT32_MAX

FORMATS: Final = ("BINARY", "JSON", "STRING")
SCHEMA_FORMATS: Final = ("AVRO", "JSONSCHEMA", "PROTOBUF")
_SCHEMA_FIELDS: Final = ("subject", "subject_name_strategy", "schema_id", "schema_version", "schema")
_REQUEST_FIELDS: Final = frozenset({"partition_id", "headers", "key", "value", "timestamp"})
_DATA_FIELDS: Final = frozenset({"type", "data", *_SCHEMA_FIELDS})
_HEADER_FIELDS: Final = frozenset({"name", "value"})
_MAX_SHOWN = 40  # characters of a bad value quoted back in an error message


class BadRecord(ValueError):
    """A request that cannot become a record; the message is the report's, after "Bad Request: "."""


@dataclass(frozen=True, slots=True)
class OutgoingRecord:
    """A record to send, from one produce request."""

    partition: int | None  # None: the partitioner picks (murmur2 of the key, as Java's producer)
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp_ms: int | None  # None: now
    key_format: str | None  # None: the request had no key
    value_format: str | None


def parse_request(body: object) -> OutgoingRecord:
    """The record one request describes; raises `BadRecord`."""
    body = _object(body, _REQUEST_FIELDS, "a record", "")
    partition = body.get("partition_id")
    if partition is not None and (
        isinstance(partition, bool) or not isinstance(partition, int) or not 0 <= partition <= INT32_MAX
    ):
        raise BadRecord(f"partition_id={_shown(partition)} is not a partition id")
    key, key_format = _data(body.get("key"), "key")
    value, value_format = _data(body.get("value"), "value")
    return OutgoingRecord(
        partition=partition,
        key=key,
        value=value,
        headers=_headers(body.get("headers")),
        timestamp_ms=_timestamp(body.get("timestamp")),
        key_format=key_format,
        value_format=value_format,
    )


def _data(part: object, what: str) -> tuple[bytes | None, str | None]:
    if part is None:
        return None, None
    part = _object(part, _DATA_FIELDS, f"{what} (type and data)", f"{what}: ")
    fmt = part.get("type")
    data = part.get("data")
    if fmt is None:
        if any(part.get(field) is not None for field in _SCHEMA_FIELDS) or data is not None:
            raise BadRecord(
                f"{what}: a schema needs a Schema Registry, which this cluster does not run; "
                f"give type BINARY, JSON or STRING"
            )
        return None, None
    if fmt in SCHEMA_FORMATS:
        raise BadRecord(f"{what}: type {fmt} needs a Schema Registry, which this cluster does not run")
    if fmt not in FORMATS:
        raise BadRecord(f"{what}: type={_shown(fmt)} is not one of BINARY, JSON, STRING")
    for field in _SCHEMA_FIELDS:
        if part.get(field) is not None:
            raise BadRecord(f"{what}: {field} cannot be given with type {fmt}")
    if data is None:
        return None, fmt
    if fmt == "BINARY":
        return _base64(data, "data="), fmt
    if fmt == "STRING":
        if not isinstance(data, str):
            raise BadRecord(f"{what}: STRING data must be a JSON string, not {_json_kind(data)}")
        return _utf8(data, what), fmt
    return _utf8(json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False), what), fmt


def _utf8(text: str, what: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise BadRecord(f"{what}: the text is not valid Unicode (a lone surrogate escape)") from None


def _headers(headers: object) -> tuple[tuple[str, bytes | None], ...]:
    if headers is None:
        return ()
    if not isinstance(headers, list):
        raise BadRecord(f"headers must be a list, not {_json_kind(headers)}")
    out: list[tuple[str, bytes | None]] = []
    for header in headers:
        header = _object(header, _HEADER_FIELDS, "a header (name and value)", "header: ")
        name = header.get("name")
        if not isinstance(name, str):
            raise BadRecord("each header must have a string name")
        raw = header.get("value")
        out.append((name, None if raw is None else _base64(raw, f"header {_shown(name)}: value=")))
    return tuple(out)


def _object(value: object, fields: frozenset[str], what: str, prefix: str) -> dict[str, object]:
    """`value` as a JSON object with no field outside `fields`; raises `BadRecord`."""
    if not isinstance(value, dict):
        raise BadRecord(f"{prefix}{what} must be a JSON object, not {_json_kind(value)}")
    unknown = sorted(set(value) - fields)
    if unknown:
        raise BadRecord(f"{prefix}unknown field {unknown[0]!r}")
    return value


def _base64(text: object, label: str) -> bytes:
    """The bytes a base64 string stands for; `label` names it in the error ("data=")."""
    if isinstance(text, str):
        try:
            return base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            pass
    raise BadRecord(f"{label}{_shown(text)} is not a base64 string.")


def _timestamp(value: object) -> int | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadRecord(f"timestamp={_shown(value)} is not an ISO-8601 date-time")
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise BadRecord(f"timestamp={_shown(value)} is not an ISO-8601 date-time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    millis = int(moment.timestamp() * 1000)
    if millis < 0:
        raise BadRecord(f"timestamp={_shown(value)} is before 1970")
    return millis


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _shown(value: object) -> str:
    text = json.dumps(value, ensure_ascii=True) if not isinstance(value, str) else value
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."


# ---------------------------------------------------------------- delivery reports


def iso_instant(millis: int) -> str:
    """An epoch-milliseconds time as ISO-8601 UTC, milliseconds shown only when not zero."""
    moment = datetime.fromtimestamp(millis / 1000, tz=UTC)
    if millis % 1000:
        return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{millis % 1000:03d}Z"
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class ReportWriter:
    """Writes the delivery reports of one request's records, each followed by CRLF as the
    REST Proxy separates them. The topic and cluster parts are encoded once."""

    def __init__(self, cluster_id: str, topic: str) -> None:
        self._head = (
            '{"error_code":200,"cluster_id":'
            + json.dumps(cluster_id, ensure_ascii=True)
            + ',"topic_name":'
            + json.dumps(topic, ensure_ascii=True)
        )
        self._last_ms = -1
        self._last_iso = ""

    def success(self, record: OutgoingRecord, partition: int, offset: int, timestamp_ms: int | None) -> str:
        parts = [self._head, f',"partition_id":{partition},"offset":{offset}']
        if timestamp_ms is not None and timestamp_ms >= 0:
            if timestamp_ms != self._last_ms:
                self._last_ms, self._last_iso = timestamp_ms, iso_instant(timestamp_ms)
            parts.append(f',"timestamp":"{self._last_iso}"')
        if record.key_format is not None:
            parts.append(f',"key":{{"type":"{record.key_format}","size":{len(record.key or b"")}}}')
        if record.value_format is not None:
            parts.append(f',"value":{{"type":"{record.value_format}","size":{len(record.value or b"")}}}')
        parts.append("}\r\n")
        return "".join(parts)

    @staticmethod
    def error(code: int, message: str) -> str:
        return json.dumps({"error_code": code, "message": message}, ensure_ascii=True, separators=(",", ":")) + "\r\n"
