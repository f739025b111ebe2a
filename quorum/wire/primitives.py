"""Kafka's wire primitives, written by hand for the hot paths: `Reader` walks a `memoryview`
over one frame and checks every length against the bytes left before using it (it raises
only `MalformedRequest`; byte fields come back as memoryview slices, no copy); `Writer`
appends to one bytearray.

Kafka's two encodings: "legacy" (int16 string / int32 bytes and array lengths, -1 for
null) and "flexible" (KIP-482: unsigned varint lengths + 1, 0 for null, and a tagged
field section after every struct). The broker's client apis (`broker.kafka.wire`, whose
Writer adds records sent from files) and the quorum's Raft Fetch (`quorum.wire.fetch_direct`)
share them.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Final, TypeVar

__all__ = ["MalformedRequest", "Reader", "Writer"]

T = TypeVar("T")

_I8: Final = struct.Struct(">b")
_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_I64: Final = struct.Struct(">q")


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
    __slots__ = ("buf",)

    def __init__(self, reserve_length: bool = True) -> None:
        # The 4-byte frame length is patched in by `frame()`.
        self.buf = bytearray(4) if reserve_length else bytearray()

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

    def no_tags(self) -> None:
        self.buf.append(0)

    def frame(self) -> bytearray:
        """The buffer with its 4-byte length prefix filled in."""
        _I32.pack_into(self.buf, 0, len(self.buf) - 4)
        return self.buf
