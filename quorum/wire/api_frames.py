"""The request and response frames of the apis whose codecs map kio's schemas one to one (the
admin apis, UpdateFeatures, the KIP-853 voter changes): one request schema per (api key,
version), read and written with kio's schemas.

Every function checks the version against `served` (api key -> (lowest, highest) version
served), so that a codec states its versions once. Decoding raises only WireError: once the
request header parsed, the error carries it (the caller answers the request with the error).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from quorum.raft.errors import ErrorCode
from quorum.wire._reader import MalformedError, entity_reader, read_request_body
from quorum.wire.codec import RequestHeaderInfo, WireError, _frame, _peek_header, _schema, _schema_or_raise

Served = Mapping[int, tuple[int, int]]  # api key -> (lowest, highest) version served


def request_schema(served: Served, api_key: int, api_version: int | None) -> tuple[type[Any], int]:
    """(request schema, version) to send `api_key` at: `api_version`, or the highest served.
    Raises WireError(UNSUPPORTED_VERSION) for a version not served."""
    low, high = served[api_key]
    version = high if api_version is None else api_version
    if not low <= version <= high:
        raise WireError(ErrorCode.UNSUPPORTED_VERSION, f"api {api_key} v{version} is not in {low}..{high}")
    return _schema_or_raise(api_key, version, True), version


def request_frame(
    cls: type[Any], body: Any, *, api_key: int, version: int, correlation_id: int, client_id: str | None
) -> bytes:
    """The complete request frame (length prefix, header, body) of `body`, an entity of `cls`."""
    header = cls.__header_schema__(
        request_api_key=api_key, request_api_version=version, correlation_id=correlation_id, client_id=client_id
    )
    return _frame(header, body)


def read_request(frame: bytes, served: Served, what: str) -> tuple[RequestHeaderInfo, Any]:
    """(header, kio body) of a request frame (without its length prefix) whose api key is one
    of `served` (`what` names them in the error otherwise). Bytes after the body are ignored,
    as Kafka does."""
    head = _peek_header(frame)
    limits = served.get(head.api_key)
    if limits is None:
        raise WireError(ErrorCode.INVALID_REQUEST, f"api {head.api_key} is not {what}", header=head)
    low, high = limits
    if not low <= head.api_version <= high:
        message = f"api {head.api_key} v{head.api_version} is not in {low}..{high}"
        raise WireError(ErrorCode.UNSUPPORTED_VERSION, message, header=head)
    cls = _schema(head.api_key, head.api_version, True)
    if cls is None:  # pragma: no cover - a served map lists only versions kio has
        raise WireError(ErrorCode.UNSUPPORTED_VERSION, "no schema", header=head)
    try:
        _, pos = entity_reader(cls.__header_schema__)(frame, 0)
        body = read_request_body(cls, frame, pos)
    except MalformedError as exc:
        message = f"malformed {cls.__name__} v{head.api_version}: {exc}"
        raise WireError(ErrorCode.INVALID_REQUEST, message, header=head) from exc
    return head, body


def response_schema(head: RequestHeaderInfo) -> type[Any]:
    """The response schema answering `head`'s request, at its version."""
    return _schema_or_raise(head.api_key, head.api_version, False)


def response_frame(cls: type[Any], head: RequestHeaderInfo, body: Any) -> bytes:
    """The complete response frame (length prefix, header, body) answering `head`'s request."""
    return _frame(cls.__header_schema__(correlation_id=head.correlation_id), body)


def read_response(api_key: int, api_version: int, frame: bytes) -> Any:
    """The kio body of a response frame (without its length prefix)."""
    cls = _schema(api_key, api_version, False)
    if cls is None:
        raise WireError(ErrorCode.UNSUPPORTED_VERSION, f"api {api_key} v{api_version} has no schema")
    try:
        _, pos = entity_reader(cls.__header_schema__)(frame, 0)
        body, _ = entity_reader(cls)(frame, pos)
    except MalformedError as exc:
        raise WireError(ErrorCode.INVALID_REQUEST, f"malformed {cls.__name__}: {exc}") from exc
    return body
