"""A defensive, pure-Python reader for kio's generated protocol entities.

kio 0.6.5 parses with a Rust extension (`kio.serial.entity_reader`) that
pre-allocates every array from the length read off the wire: a compact-array
length above 2**32 (or a large legacy one) aborts the whole process with a Rust
allocation failure, which no `except` can catch. Network input must never be able
to do that, so this module walks the same kio dataclass schemas in Python instead,
checking every length against the bytes actually left before using it.

`entity_reader(Type)(buf, pos) -> (entity, new_pos)` mirrors kio's signature but
raises only `MalformedError` (a ValueError) for bad input. Unknown tagged fields are
skipped; error codes that kio's enum does not know are kept as plain ints.

Writing still goes through `kio.serial.entity_writer` (our own values, trusted).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from dataclasses import MISSING, Field, fields, is_dataclass
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode as KioErrorCode
from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import (  # kio's own schema introspection (pinned kio==0.6.5)
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

__all__ = ["MalformedError", "Reader", "entity_reader", "known_error_code", "read_request_body", "read_uvarint"]

Reader = Callable[[bytes | bytearray, int], tuple[Any, int]]


class MalformedError(ValueError):
    """The bytes do not decode as the expected schema."""


_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_F64 = struct.Struct(">d")

_KIO_ERROR_CODES = frozenset(int(code) for code in KioErrorCode)


def known_error_code(code: int) -> bool:
    """Whether kio's ErrorCode has `code` (kio's writer takes only those)."""
    return code in _KIO_ERROR_CODES


def _fixed(s: struct.Struct) -> Reader:
    size = s.size
    unpack_from = s.unpack_from

    def read(buf: bytes | bytearray, pos: int) -> tuple[Any, int]:
        if pos + size > len(buf):
            raise MalformedError("buffer exhausted")
        return unpack_from(buf, pos)[0], pos + size

    return read


_read_i8 = _fixed(_I8)
_read_i16 = _fixed(_I16)
_read_i32 = _fixed(_I32)
_read_i64 = _fixed(_I64)


def read_uvarint(buf: bytes | bytearray, pos: int) -> tuple[int, int]:
    """Kafka's unsigned varint: at most 5 bytes and at most 32 bits of value."""
    result = 0
    shift = 0
    end = len(buf)
    while True:
        if pos >= end:
            raise MalformedError("buffer exhausted in varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if shift >= 35:
            raise MalformedError("varint longer than 5 bytes")
    if result > 0xFFFFFFFF:
        raise MalformedError("varint exceeds 32 bits")
    return result, pos


def _read_bool(buf: bytes | bytearray, pos: int) -> tuple[Any, int]:
    if pos >= len(buf):
        raise MalformedError("buffer exhausted")
    return buf[pos] != 0, pos + 1


def _read_error_code(buf: bytes | bytearray, pos: int) -> tuple[Any, int]:
    value, pos = _read_i16(buf, pos)
    return (KioErrorCode(value) if value in _KIO_ERROR_CODES else value), pos


def _read_timedelta_i32(buf: bytes | bytearray, pos: int) -> tuple[Any, int]:
    value, pos = _read_i32(buf, pos)
    return timedelta(milliseconds=value), pos


def _read_timedelta_i64(buf: bytes | bytearray, pos: int) -> tuple[Any, int]:
    value, pos = _read_i64(buf, pos)
    try:
        return timedelta(milliseconds=value), pos
    except OverflowError as exc:
        raise MalformedError("timedelta out of range") from exc


def _read_uuid(buf: bytes | bytearray, pos: int) -> tuple[Any, int]:
    end = pos + 16
    if end > len(buf):
        raise MalformedError("buffer exhausted in uuid")
    raw = buf[pos:end]
    return (None if raw == bytes(16) else uuid.UUID(bytes=bytes(raw))), end


def _take(buf: bytes | bytearray, pos: int, length: int) -> tuple[bytes | bytearray, int]:
    end = pos + length
    if length < 0 or end > len(buf):
        raise MalformedError("buffer exhausted in string/bytes")
    return buf[pos:end], end


def _decode_utf8(raw: bytes | bytearray) -> str:
    try:
        return str(raw, "utf-8")  # bytes or a memoryview (a frame read without copies)
    except UnicodeDecodeError as exc:
        raise MalformedError("invalid utf-8 in string") from exc


def _compact_bytes(nullable: bool) -> Reader:
    def read(buf: bytes | bytearray, pos: int) -> tuple[Any, int]:
        n, pos = read_uvarint(buf, pos)
        if n == 0:
            if not nullable:
                raise MalformedError("null in non-nullable field")
            return None, pos
        return _take(buf, pos, n - 1)

    return read


def _legacy_bytes(nullable: bool) -> Reader:
    def read(buf: bytes | bytearray, pos: int) -> tuple[Any, int]:
        n, pos = _read_i32(buf, pos)
        if n < 0:
            if n != -1 or not nullable:
                raise MalformedError("bad bytes length")
            return None, pos
        return _take(buf, pos, n)

    return read


def _compact_string(nullable: bool) -> Reader:
    read_raw = _compact_bytes(nullable)

    def read(buf: bytes | bytearray, pos: int) -> tuple[Any, int]:
        raw, pos = read_raw(buf, pos)
        return (None if raw is None else _decode_utf8(raw)), pos

    return read


def _legacy_string(nullable: bool) -> Reader:
    def read(buf: bytes | bytearray, pos: int) -> tuple[Any, int]:
        n, pos = _read_i16(buf, pos)
        if n < 0:
            if n != -1 or not nullable:
                raise MalformedError("bad string length")
            return None, pos
        raw, pos = _take(buf, pos, n)
        return _decode_utf8(raw), pos

    return read


def _primitive_reader(kafka_type: str, flexible: bool, optional: bool) -> Reader:
    match kafka_type:
        case "int8":
            return _read_i8
        case "int16":
            return _read_i16
        case "int32":
            return _read_i32
        case "int64":
            return _read_i64
        case "uint8":
            return _fixed(_U8)
        case "uint16":
            return _fixed(_U16)
        case "uint32":
            return _fixed(_U32)
        case "uint64":
            return _fixed(_U64)
        case "float64":
            return _fixed(_F64)
        case "bool":
            return _read_bool
        case "error_code":
            return _read_error_code
        case "timedelta_i32":
            return _read_timedelta_i32
        case "timedelta_i64":
            return _read_timedelta_i64
        case "uuid":
            return _read_uuid
        case "string":
            return _compact_string(optional) if flexible else _legacy_string(optional)
        case "bytes" | "records":
            return _compact_bytes(optional) if flexible else _legacy_bytes(optional)
    raise NotImplementedError(f"no reader for kafka type {kafka_type!r}")


def _array_reader(item: Reader, flexible: bool, nullable: bool) -> Reader:
    def read(buf: bytes | bytearray, pos: int) -> tuple[Any, int]:
        if flexible:
            n, pos = read_uvarint(buf, pos)
            if n == 0:
                count = -1
            else:
                count = n - 1
        else:
            count, pos = _read_i32(buf, pos)
            if count < -1:
                raise MalformedError("negative array length")
        if count == -1:
            if not nullable:
                raise MalformedError("null array in non-nullable field")
            return None, pos
        # Every element of every schema we read takes at least one byte.
        if count > len(buf) - pos:
            raise MalformedError("array length exceeds the remaining bytes")
        items = []
        for _ in range(count):
            value, pos = item(buf, pos)
            items.append(value)
        return tuple(items), pos

    return read


def _nullable_entity(inner: Reader) -> Reader:
    # KIP-893 nullable structs: an int8 marker, -1 for null, 1 for present.
    def read(buf: bytes | bytearray, pos: int) -> tuple[Any, int]:
        marker, pos = _read_i8(buf, pos)
        if marker == -1:
            return None, pos
        if marker != 1:
            raise MalformedError("bad nullable-struct marker")
        return inner(buf, pos)

    return read


def _field_reader(field: Field[Any], flexible: bool, is_request_header: bool, is_tag: bool) -> Reader:
    if is_request_header and field.name == "client_id":
        return _legacy_string(True)  # Kafka keeps the legacy form even in header v2
    optional = is_optional(field)
    cls = classify_field(field)
    match cls:
        case PrimitiveField():
            return _primitive_reader(get_schema_field_type(field), flexible, optional)
        case PrimitiveTupleField():
            item = _primitive_reader(get_schema_field_type(field), flexible, False)
            return _array_reader(item, flexible, optional)
        case EntityField(entity_type):
            inner = entity_reader(entity_type)
            return _nullable_entity(inner) if optional and not is_tag else inner
        case EntityTupleField(entity_type):
            return _array_reader(entity_reader(entity_type), flexible, optional)
    raise NotImplementedError(f"unsupported field {field.name}")  # pragma: no cover


_READERS: dict[type[Any], Reader] = {}


def entity_reader(entity_type: type[Any]) -> Reader:
    """A reader for one kio entity class (request, response, header or nested)."""
    reader = _READERS.get(entity_type)
    if reader is None:
        reader = _READERS[entity_type] = _build_entity_reader(entity_type)
    return reader


def _build_entity_reader(entity_type: type[Any]) -> Reader:
    flexible = bool(entity_type.__flexible__)
    if not is_dataclass(entity_type):
        raise TypeError(f"{entity_type!r} is not a kio entity")
    is_request_header = entity_type.__name__ == "RequestHeader"
    regular: list[tuple[str, Reader]] = []
    tagged: dict[int, tuple[str, Reader]] = {}
    implicit: dict[str, Any] = {}
    for f in fields(entity_type):
        tag = get_field_tag(f)
        reader = _field_reader(f, flexible, is_request_header, tag is not None)
        if tag is None:
            regular.append((f.name, reader))
        else:
            if f.default is MISSING and f.default_factory is MISSING:
                # kio leaves some tagged fields without a dataclass default; its writer
                # omits them when they equal the implicit default, so we fill that in.
                implicit[f.name] = get_tagged_field_default(f)
            tagged[int(tag)] = (f.name, reader)

    def read(buf: bytes | bytearray, pos: int) -> tuple[Any, int]:
        values: dict[str, Any] = {}
        for name, reader in regular:
            values[name], pos = reader(buf, pos)
        if flexible:
            count, pos = read_uvarint(buf, pos)
            if count > len(buf) - pos:
                raise MalformedError("tagged-field count exceeds the remaining bytes")
            for _ in range(count):
                tag, pos = read_uvarint(buf, pos)
                size, pos = read_uvarint(buf, pos)
                end = pos + size
                if end > len(buf):
                    raise MalformedError("tagged field overruns the buffer")
                known = tagged.get(tag)
                if known is not None:
                    name, reader = known
                    # Bounded by the buffer either way; overrunning `end` is caught below.
                    values[name], used = reader(buf, pos)
                    if used != end:
                        raise MalformedError("tagged field size mismatch")
                pos = end
            for name, default in implicit.items():
                values.setdefault(name, default)
        return entity_type(**values), pos

    return read


def read_request_body(entity_type: type[Any], frame: bytes | bytearray, pos: int) -> Any:
    """The request body of `entity_type` that starts at `pos` of a request frame.

    Bytes after the body are ignored: that is Kafka's rule (a broker or controller parses
    a request from the front of its frame and never looks at what is left), and clients
    depend on it. librdkafka (at least up to 2.16) writes every flexible array count as a
    4-byte placeholder that it shrinks to a varint once the count is known, and does not
    shrink it for a Metadata v9+ request for all topics: the body starts `00 00 00 00`,
    which Kafka reads as a null topics array (all topics) and two false booleans with no
    tagged fields, leaving librdkafka's own three bytes unread.
    """
    body, _ = entity_reader(entity_type)(frame, pos)
    return body
