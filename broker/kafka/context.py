"""One request as the handlers see it, and the kio bridge for the non-hot apis.

Bodies of the non-hot apis are decoded with kio's generated schemas through the project's
defensive reader (`quorum.wire._reader`; never kio's native reader, which can abort the
process on hostile lengths) and answered with kio's writer at the request's version.
"""

from __future__ import annotations

import io
import sys
from builtins import memoryview  # a module global for mypyc: see RequestContext
from dataclasses import dataclass, fields
from functools import cache
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.serial import entity_writer

from broker.kafka.wire import MalformedRequest, RequestHeader, frame_response
from quorum.frozen_init import fast_frozen_init
from quorum.wire._reader import MalformedError, read_request_body

__all__ = ["RequestContext", "decode_body", "encode_body", "kio_error", "make", "nested", "response_type"]


# mypyc hands a native dataclass's field types to the dataclass decorator as objects, and
# loads a builtin one that mypyc does not know by name from the module's globals (KeyError:
# 'memoryview' at import without the import of it from builtins above).
@dataclass(frozen=True, slots=True, init=False)
class RequestContext:
    header: RequestHeader
    frame: memoryview  # the whole request frame, without its length prefix
    flexible: bool  # request header v2 / response header v1

    # Compiled with the module (the dataclass decorator's __init__ would run as Python there,
    # once per request); uncompiled, fast_frozen_init replaces it.
    def __init__(self, header: RequestHeader, frame: memoryview, flexible: bool) -> None:
        object.__setattr__(self, "header", header)
        object.__setattr__(self, "frame", frame)
        object.__setattr__(self, "flexible", flexible)

    @property
    def api_key(self) -> int:
        return self.header.api_key

    @property
    def version(self) -> int:
        return self.header.api_version


fast_frozen_init(RequestContext)  # not a decorator: mypyc makes a decorated class a Python class


@cache
def _request_type(api_key: int, version: int) -> type[Any]:
    cls: type[Any] = load_request_schema(api_key, version)
    return cls


@cache
def response_type(api_key: int, version: int) -> type[Any]:
    cls: type[Any] = load_response_schema(api_key, version)
    return cls


def nested(cls: type[Any], name: str) -> Any:
    """A nested entity class of a kio message (same module)."""
    return getattr(sys.modules[cls.__module__], name)


_FIELD_NAMES: dict[type[Any], frozenset[str]] = {}


def _field_names(cls: type[Any]) -> frozenset[str]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = frozenset(f.name for f in fields(cls))
    return names


def make(cls: type[Any], **values: Any) -> Any:
    """A kio entity from the values its version has (the others are dropped)."""
    names = _field_names(cls)
    return cls(**{k: v for k, v in values.items() if k in names})


def decode_body(ctx: RequestContext) -> Any:
    """The kio request entity of `ctx`; MalformedRequest on bad bytes (bytes after the body
    are ignored, as Kafka does: `read_request_body`)."""
    cls = _request_type(ctx.api_key, ctx.version)
    data = (
        ctx.frame.obj if isinstance(ctx.frame.obj, bytes) and len(ctx.frame.obj) == len(ctx.frame) else bytes(ctx.frame)
    )
    try:
        return read_request_body(cls, data, ctx.header.body_offset)
    except MalformedError as exc:
        raise MalformedRequest(str(exc)) from exc


_KIO_ERRORS = frozenset(int(c) for c in KioErrorCode)


def kio_error(code: int) -> KioErrorCode:
    return KioErrorCode(int(code)) if int(code) in _KIO_ERRORS else KioErrorCode.unknown_server_error


def encode_body(ctx: RequestContext, body: Any) -> bytes:
    """A complete response frame for `body` (a kio response entity of ctx's version)."""
    buf = io.BytesIO()
    entity_writer(type(body))(buf, body)
    return frame_response(ctx.header.correlation_id, ctx.flexible, buf.getbuffer())
