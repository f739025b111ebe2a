"""The produce endpoint's body reader (concatenated JSON in arbitrary chunks) and the reading
of one produce request into a record, and the delivery report written for it."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.rest.json_stream import JsonStream, JsonSyntaxError, ValueTooLarge
from api.rest.produce_payload import BadRecord, OutgoingRecord, ReportWriter, iso_instant, parse_request
from tests.scale import examples

# ---------------------------------------------------------------- the body reader

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(10**20), 10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
records = st.dictionaries(st.text(max_size=8), json_values, max_size=5)


def _read(body: bytes, cuts: list[int], max_value: int = 1 << 20) -> list[Any]:
    stream = JsonStream(max_value)
    out: list[Any] = []
    start = 0
    for cut in sorted(set(cuts)):
        out.extend(stream.feed(body[start:cut]))
        start = cut
    out.extend(stream.feed(body[start:]))
    out.extend(stream.close())
    return out


@given(
    values=st.lists(records, max_size=8),
    separators=st.lists(st.sampled_from(["", " ", "\n", "\r\n", "\t "]), min_size=8, max_size=8),
    indent=st.sampled_from([None, 1]),
    ascii_only=st.booleans(),
    data=st.data(),
)
@settings(max_examples=examples(300), deadline=None)
def test_any_chunking_of_concatenated_records_reads_the_same_records(
    values: list[dict[str, Any]], separators: list[str], indent: int | None, ascii_only: bool, data: st.DataObject
) -> None:
    body = "".join(
        json.dumps(v, indent=indent, ensure_ascii=ascii_only) + s for v, s in zip(values, separators, strict=False)
    )
    raw = body.encode()
    # Cuts anywhere, also inside numbers, literals, escapes and multi-byte UTF-8 characters.
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=12))
    assert _read(raw, cuts) == values


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 12.5e-3}',
        '{"a": true, "b": false, "c": null}',
        '{"a": "\\u00e9\\n"}',
        '{"a": "\\ud83d\\ude00"}',
        '{"a": -0.0}',
        "[1, 2]",
    ],
)
def test_every_cut_of_a_value_with_numbers_literals_and_escapes(text: str) -> None:
    raw = (text + text).encode()
    expected = [json.loads(text)] * 2
    for cut in range(len(raw) + 1):
        assert _read(raw, [cut]) == expected, cut


def test_bare_scalars_between_records_are_values_too() -> None:
    assert _read(b'{"a":1} 7 "x" {"b":2}', [9]) == [{"a": 1}, 7, "x", {"b": 2}]


@pytest.mark.parametrize("body", [b'{"a": x}', b'{"a":1}}', b'{"a" 1}', b'{"a": 1,}', b'{"a": "\xff"}'])
def test_bad_syntax_is_an_error(body: bytes) -> None:
    with pytest.raises(JsonSyntaxError):
        _read(body, [])


def test_a_body_that_ends_inside_a_value_is_an_error() -> None:
    with pytest.raises(JsonSyntaxError):
        _read(b'{"a": 1}{"b": [1, 2', [])


def test_records_before_a_syntax_error_are_read() -> None:
    stream = JsonStream(1 << 20)
    assert list(stream.feed(b'{"a":1}{"b":2}')) == [{"a": 1}, {"b": 2}]
    with pytest.raises(JsonSyntaxError):
        list(stream.feed(b'{"c": nope} and more text after it'))


def test_an_unfinished_value_is_held_only_up_to_the_bound() -> None:
    stream = JsonStream(1000)
    assert list(stream.feed(b'{"a": "' + b"x" * 900)) == []
    with pytest.raises(ValueTooLarge):
        list(stream.feed(b"x" * 200))


def test_a_complete_value_of_any_size_under_the_bound_is_read() -> None:
    big = {"value": {"type": "BINARY", "data": "A" * 50_000}}
    raw = json.dumps(big).encode()
    assert _read(raw, list(range(0, len(raw), 997)), max_value=60_000) == [big]


# ---------------------------------------------------------------- one produce request


def test_each_format_becomes_the_bytes_kafka_gets() -> None:
    record = parse_request(
        {
            "partition_id": 2,
            "headers": [{"name": "h1", "value": base64.b64encode(b"v1").decode()}, {"name": "h2", "value": None}],
            "key": {"type": "STRING", "data": "clé"},
            "value": {"type": "JSON", "data": {"b": [1, 2.5, None], "a": "é"}},
            "timestamp": "2021-02-05T19:14:42.123Z",
        }
    )
    assert record == OutgoingRecord(
        partition=2,
        key="clé".encode(),
        value='{"b":[1,2.5,null],"a":"é"}'.encode(),
        headers=(("h1", b"v1"), ("h2", None)),
        timestamp_ms=1612552482123,
        key_format="STRING",
        value_format="JSON",
    )
    binary = parse_request({"value": {"type": "BINARY", "data": base64.b64encode(bytes(range(256))).decode()}})
    assert binary.value == bytes(range(256)) and binary.key is None and binary.key_format is None


def test_null_and_missing_data_are_null_records() -> None:
    assert parse_request({}) == OutgoingRecord(None, None, None, (), None, None, None)
    record = parse_request({"key": {"type": "JSON", "data": None}, "value": {"type": "BINARY"}})
    assert (record.key, record.value, record.key_format, record.value_format) == (None, None, "JSON", "BINARY")
    assert parse_request({"value": {"type": "STRING", "data": ""}}).value == b""


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([1], "must be a JSON object"),
        ({"value": {"type": "BINARY", "data": "!!"}}, "data=!! is not a base64 string."),
        ({"value": {"type": "BINARY", "data": 1}}, "data=1 is not a base64 string."),
        ({"value": {"type": "STRING", "data": 5}}, "STRING data must be a JSON string"),
        ({"value": {"type": "AVRO", "data": "x"}}, "needs a Schema Registry"),
        ({"value": {"schema_id": 1, "data": 5}}, "needs a Schema Registry"),
        ({"value": {"data": "x"}}, "needs a Schema Registry"),
        ({"value": {"type": "XML", "data": "x"}}, "is not one of BINARY, JSON, STRING"),
        ({"value": {"type": "JSON", "data": 1, "extra": 1}}, "unknown field 'extra'"),
        ({"partition_id": -1}, "is not a partition id"),
        ({"partition_id": True}, "is not a partition id"),
        ({"partition_id": 2**31}, "is not a partition id"),
        ({"timestamp": "yesterday"}, "is not an ISO-8601 date-time"),
        ({"timestamp": "1969-12-31T23:59:59Z"}, "before 1970"),
        ({"headers": [{"name": "h", "value": "%%"}]}, "is not a base64 string."),
        ({"headers": [{"value": "aGk="}]}, "string name"),
        ({"headers": {"h": "v"}}, "headers must be a list"),
        ({"partition": 1}, "unknown field 'partition'"),
        ({"value": {"type": "STRING", "data": "\ud800"}}, "not valid Unicode"),
    ],
)
def test_requests_that_cannot_be_records(body: object, message: str) -> None:
    with pytest.raises(BadRecord, match=message.replace("(", r"\(").replace(".", r"\.")):
        parse_request(body)


def test_a_timestamp_without_a_zone_is_utc_and_offsets_are_honoured() -> None:
    assert parse_request({"timestamp": "2021-02-05T19:14:42"}).timestamp_ms == 1612552482000
    assert parse_request({"timestamp": "2021-02-05T20:14:42+01:00"}).timestamp_ms == 1612552482000


# ---------------------------------------------------------------- delivery reports


def test_reports_are_rest_proxy_shaped_json_lines() -> None:
    writer = ReportWriter("cluster-1", 'top"ic')
    record = parse_request({"key": {"type": "BINARY", "data": "Zm9vYmFy"}, "value": {"type": "JSON", "data": {"x": 1}}})
    line = writer.success(record, 1, 42, 1612552482000)
    assert line.endswith("}\r\n")
    assert json.loads(line) == {
        "error_code": 200,
        "cluster_id": "cluster-1",
        "topic_name": 'top"ic',
        "partition_id": 1,
        "offset": 42,
        "timestamp": "2021-02-05T19:14:42Z",
        "key": {"type": "BINARY", "size": 6},
        "value": {"type": "JSON", "size": 7},
    }
    bare = json.loads(writer.success(parse_request({}), 0, 0, None))
    assert "key" not in bare and "value" not in bare and "timestamp" not in bare
    assert json.loads(writer.error(40402, "Partition not found.")) == {
        "error_code": 40402,
        "message": "Partition not found.",
    }


def test_iso_instants_show_milliseconds_only_when_not_zero() -> None:
    assert iso_instant(0) == "1970-01-01T00:00:00Z"
    assert iso_instant(1612552482123) == "2021-02-05T19:14:42.123Z"
    assert iso_instant(1612552482005) == "2021-02-05T19:14:42.005Z"
