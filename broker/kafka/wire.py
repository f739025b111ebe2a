"""Hand-rolled Kafka primitives for the hot paths (Produce, Fetch) and request headers.

`Reader` and `MalformedRequest` are `quorum.wire.primitives`' (shared with the quorum's Raft
Fetch). `Writer` is its Writer with records that are file ranges (a fetch's), not copied:
the frame becomes a `SplicedResponse` of encoded parts and ranges, sent with `os.sendfile`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from broker.kafka.spliced import SplicedResponse
from broker.log.file_range import FileRange
from quorum.frozen_init import fast_frozen_init
from quorum.wire.primitives import MalformedRequest, Reader
from quorum.wire.primitives import Writer as _Writer

__all__ = [
    "MalformedRequest",
    "Reader",
    "RequestHeader",
    "Writer",
    "frame_response",
    "parse_request_header",
    "peek_api",
    "response_writer",
]

_I32: Final = struct.Struct(">i")
_HEAD: Final = struct.Struct(">hhi")  # api_key, api_version, correlation_id
_HEAD_CLIENT: Final = struct.Struct(">hhih")  # ... and the client id's length


class Writer(_Writer):
    """`quorum.wire.primitives.Writer` with records sent from files (`file_range`, `response`)."""

    __slots__ = ("parts",)

    def __init__(self, reserve_length: bool = True) -> None:
        # The 4-byte frame length is patched in by `frame()` / `response()`.
        super().__init__(reserve_length)
        # Finished parts before `buf` when file ranges were added (`file_range`).
        self.parts: list[bytearray | FileRange] = []

    def file_range(self, r: FileRange, flexible: bool) -> None:
        """A bytes field whose content is `r`, sent from the file (see `response`)."""
        self.length(len(r), flexible, True)
        self.parts.append(self.buf)
        self.parts.append(r)
        self.buf = bytearray()

    def frame(self) -> bytearray:
        """The buffer with its 4-byte length prefix filled in (no file ranges)."""
        if self.parts:
            raise ValueError("a frame with file ranges is sent as a SplicedResponse (Writer.response)")
        _I32.pack_into(self.buf, 0, len(self.buf) - 4)
        return self.buf

    def response(self) -> bytearray | SplicedResponse:
        """The frame: bytes, or a SplicedResponse when file ranges were added."""
        if not self.parts:
            return self.frame()
        parts = self.parts
        if self.buf:
            parts.append(self.buf)
        spliced = SplicedResponse(parts)
        first = parts[0]
        assert isinstance(first, bytearray)
        _I32.pack_into(first, 0, spliced.size - 4)
        return spliced


@dataclass(frozen=True, slots=True, init=False)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int  # where the request body starts in the frame

    # Compiled with the module (the dataclass decorator's __init__ would run as Python there);
    # uncompiled, fast_frozen_init replaces it.
    def __init__(
        self,
        api_key: int,
        api_version: int,
        correlation_id: int,
        client_id: str | None,
        body_offset: int,
    ) -> None:
        object.__setattr__(self, "api_key", api_key)
        object.__setattr__(self, "api_version", api_version)
        object.__setattr__(self, "correlation_id", correlation_id)
        object.__setattr__(self, "client_id", client_id)
        object.__setattr__(self, "body_offset", body_offset)


fast_frozen_init(RequestHeader)  # not a decorator: mypyc makes a decorated class a Python class


def parse_request_header(frame: memoryview, flexible: bool) -> RequestHeader:
    """Request header v1 (legacy) or v2 (flexible: + tagged fields). The client id keeps
    its legacy int16 form in both (Kafka's rule). The usual header (a client id, no tagged
    field) is read in place, every request; anything else through `Reader`."""
    size = len(frame)
    if size >= _HEAD_CLIENT.size:
        api_key, api_version, correlation_id, n = _HEAD_CLIENT.unpack_from(frame, 0)
        pos = _HEAD_CLIENT.size
        if 0 <= n <= size - pos and (not flexible or (pos + n < size and frame[pos + n] == 0)):
            try:
                client = str(frame[pos : pos + n], "utf-8")
            except UnicodeDecodeError as exc:
                raise MalformedRequest("string is not utf-8") from exc
            return RequestHeader(api_key, api_version, correlation_id, client, pos + n + (1 if flexible else 0))
    if size >= _HEAD.size:  # the fixed fields in one unpack
        api_key, api_version, correlation_id = _HEAD.unpack_from(frame, 0)
        r = Reader(frame, _HEAD.size)
    else:  # too short: the reader says so
        r = Reader(frame)
        api_key, api_version, correlation_id = r.i16(), r.i16(), r.i32()
    client_id = r.string(False)
    if flexible:
        r.skip_tags()
    return RequestHeader(api_key, api_version, correlation_id, client_id, r.pos)


def peek_api(frame: memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) of a frame, or MalformedRequest."""
    if len(frame) < _HEAD.size:
        raise MalformedRequest("frame shorter than a request header")
    key, version, corr = _HEAD.unpack_from(frame, 0)
    return int(key), int(version), int(corr)


def response_writer(correlation_id: int, flexible_header: bool) -> Writer:
    """A Writer holding the length placeholder and response header v0/v1; append the
    body, then `frame()`."""
    w = Writer()
    w.i32(correlation_id)
    if flexible_header:
        w.no_tags()
    return w


def frame_response(correlation_id: int, flexible_header: bool, body: bytes | bytearray | memoryview) -> bytes:
    """A complete response frame: length, response header v0 (correlation id) or v1
    (+ empty tagged fields), body."""
    head = _I32.pack(correlation_id) + (b"\0" if flexible_header else b"")
    return _I32.pack(len(head) + len(body)) + head + body
