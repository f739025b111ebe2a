"""Hand-rolled Kafka primitives for the hot paths (Produce, Fetch) and request headers.

`Reader` walks a `memoryview` over one request frame and checks every length against the
bytes left before using it; it raises only `MalformedRequest`. Byte fields come back as
memoryview slices into the frame (no copy). `Writer` appends to one bytearray; records
that are file ranges (a fetch's) are not copied: the frame becomes a `SplicedResponse`
of encoded parts and ranges, sent with `os.sendfile`.

Kafka's two encodings: "legacy" (int16 string / int32 bytes and array lengths, -1 for
null) and "flexible" (KIP-482: unsigned varint lengths + 1, 0 for null, and a tagged
field section after every struct).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, TypeVar

from broker.kafka.spliced import SplicedResponse
from broker.log.file_range import FileRange
from quorum.frozen_init import fast_frozen_init

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

T = TypeVar("T")

_I8: Final = struct.Struct(">b")
_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_I64: Final = struct.Struct(">q")
_HEAD: Final = struct.Struct(">hhi")  # api_key, api_version, correlation_id
_HEAD_CLIENT: Final = struct.Struct(">hhih")  # ... and the client id's length


class MalformedRequest(ValueError):
    """The request bytes do not decode (truncated, lying lengths, bad varint, bad utf-8)."""


class Reader:
    __slots__ = ("buf", "end", "pos")

    def __init__(self, buf: memoryview, pos: int = 0) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf)

    def _need(self, n: int) -> int:
        pos = self.pos
        if n < 0 or pos + n > self.end:
            raise MalformedRequest(f"need {n} bytes at {pos}, {self.end - pos} left")
        self.pos = pos + n
        return pos

    def i8(self) -> int:
        v: int = _I8.unpack_from(self.buf, self._need(1))[0]
        return v

    def i16(self) -> int:
        v: int = _I16.unpack_from(self.buf, self._need(2))[0]
        return v

    def i32(self) -> int:
        v: int = _I32.unpack_from(self.buf, self._need(4))[0]
        return v

    def i64(self) -> int:
        v: int = _I64.unpack_from(self.buf, self._need(8))[0]
        return v

    def uvarint(self) -> int:
        """Kafka's unsigned varint: at most 5 bytes, at most 32 bits."""
        result = 0
        shift = 0
        buf = self.buf
        while True:
            if self.pos >= self.end:
                raise MalformedRequest("truncated varint")
            b = buf[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
            if shift >= 35:
                raise MalformedRequest("varint longer than 5 bytes")
        if result > 0xFFFFFFFF:
            raise MalformedRequest("varint above 32 bits")
        return result

    def _length(self, flexible: bool, wide: bool) -> int:
        """A length, -1 for null; `wide` = int32 in legacy form (bytes, arrays), else int16."""
        if flexible:
            return self.uvarint() - 1
        n = self.i32() if wide else self.i16()
        if n < -1:
            raise MalformedRequest(f"negative length {n}")
        return n

    def raw(self, n: int) -> memoryview:
        start = self._need(n)
        return self.buf[start : start + n]

    def string(self, flexible: bool) -> str | None:
        n = self._length(flexible, False)
        if n < 0:
            return None
        try:
            return str(self.raw(n), "utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedRequest("string is not utf-8") from exc

    def nonnull_string(self, flexible: bool) -> str:
        s = self.string(flexible)
        if s is None:
            raise MalformedRequest("null in a non-nullable string")
        return s

    def bytes_(self, flexible: bool) -> memoryview | None:
        n = self._length(flexible, True)
        return None if n < 0 else self.raw(n)

    def array(self, flexible: bool, item: Callable[[], T]) -> list[T]:
        """A non-nullable array (every array of the hand-decoded requests): null is
        malformed, as in Kafka's generated readers."""
        n = self._length(flexible, True)
        if n < 0:
            raise MalformedRequest("null in a non-nullable array")
        if n > self.end - self.pos:  # every item takes at least one byte
            raise MalformedRequest(f"array of {n} items in {self.end - self.pos} bytes")
        return [item() for _ in range(n)]

    def skip_tags(self) -> None:
        """Skip a tagged-field section (unknown tags are ignored, as Kafka does)."""
        count = self.uvarint()
        if count > self.end - self.pos:
            raise MalformedRequest("tagged-field count exceeds the bytes left")
        for _ in range(count):
            self.uvarint()
            self._need(self.uvarint())


class Writer:
    __slots__ = ("buf", "parts")

    def __init__(self, reserve_length: bool = True) -> None:
        # The 4-byte frame length is patched in by `frame()` / `response()`.
        self.buf = bytearray(4) if reserve_length else bytearray()
        # Finished parts before `buf` when file ranges were added (`file_range`).
        self.parts: list[bytearray | FileRange] = []

    def i8(self, v: int) -> None:
        self.buf += _I8.pack(v)

    def i16(self, v: int) -> None:
        self.buf += _I16.pack(v)

    def i32(self, v: int) -> None:
        self.buf += _I32.pack(v)

    def i64(self, v: int) -> None:
        self.buf += _I64.pack(v)

    def uvarint(self, v: int) -> None:
        buf = self.buf
        while v >= 0x80:
            buf.append((v & 0x7F) | 0x80)
            v >>= 7
        buf.append(v)

    def length(self, n: int, flexible: bool, wide: bool) -> None:
        if flexible:
            self.uvarint(n + 1)
        elif wide:
            self.i32(n)
        else:
            self.i16(n)

    def string(self, s: str | None, flexible: bool) -> None:
        if s is None:
            self.length(-1, flexible, False)
            return
        raw = s.encode()
        self.length(len(raw), flexible, False)
        self.buf += raw

    def bytes_(self, b: bytes | memoryview | None, flexible: bool) -> None:
        if b is None:
            self.length(-1, flexible, True)
            return
        self.length(len(b), flexible, True)
        self.buf += b

    def file_range(self, r: FileRange, flexible: bool) -> None:
        """A bytes field whose content is `r`, sent from the file (see `response`)."""
        self.length(len(r), flexible, True)
        self.parts.append(self.buf)
        self.parts.append(r)
        self.buf = bytearray()

    def no_tags(self) -> None:
        self.buf.append(0)

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


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int  # where the request body starts in the frame


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
