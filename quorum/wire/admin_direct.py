"""Direct codecs for the admin apis on the controller's write path: bytes to the typed values
of `quorum.controller.requests` and back, without kio's entities in between.

The general path (`admin_codec`: kio's schemas, `_reader`'s entities, then our typed values)
costs the active controller more CPU per IncrementalAlterConfigs than deciding the write
does. These functions read and write the same bytes for the common shape of a request and
of an answer, and give up (return None) on anything else: a tagged field, a null array or
string where the general path decides what it means, an unknown resource type or operation,
an error code kio does not know, bytes that run short. The general path then does it all
again and is the reference for every error; tests hold the two to the same results.
"""

from __future__ import annotations

import struct
from typing import Final

from quorum.controller.requests import (
    AlterConfigOp,
    AlterConfigOpType,
    AlterConfigsResource,
    ConfigResourceType,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from quorum.wire._reader import known_error_code

__all__ = ["decode_incremental_alter_configs", "encode_incremental_alter_configs_response", "known_error_code"]

_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_SIZE_AND_ID: Final = struct.Struct(">ii")
_FLEX_PLAIN_RESULT: Final = struct.Struct(">hBBB")  # error code, null string, resource type, uvarint
# A response frame's first bytes before the body's own: size and correlation id (both filled
# by _SIZE_AND_ID), the header's tagged fields when flexible, throttle_time_ms 0.
_LEGACY_HEAD: Final = bytes(12)
_FLEX_HEAD: Final = bytes(13)
# A flexible answer of one resource in the common shape (no message, a name under 127 bytes),
# up to the name: size, correlation id, the header's tagged fields (0), throttle_time_ms (0),
# the resources' compact length (2), then _FLEX_PLAIN_RESULT's fields.
_FLEX_ONE_PLAIN: Final = struct.Struct(">iiBiBhBBB")
_RESOURCE_TYPES: Final = {int(t): t for t in ConfigResourceType}
_OPS: Final = {int(o): o for o in AlterConfigOpType}


class _Short(Exception):
    """Not the common shape (or not enough bytes): the general path decides."""


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    value, shift = b & 0x7F, 7
    while True:
        pos += 1
        b = buf[pos]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos + 1
        shift += 7
        if shift > 28:
            raise _Short


def _compact_string(buf: bytes, pos: int) -> tuple[str | None, int]:
    n, pos = _uvarint(buf, pos)
    if n == 0:
        return None, pos
    end = pos + n - 1
    if end > len(buf):
        raise _Short
    return buf[pos:end].decode(), end


def _string(buf: bytes, pos: int) -> tuple[str | None, int]:
    (n,) = _I16.unpack_from(buf, pos)
    pos += 2
    if n < 0:
        if n != -1:
            raise _Short
        return None, pos
    end = pos + n
    if end > len(buf):
        raise _Short
    return buf[pos:end].decode(), end


def decode_incremental_alter_configs(frame: bytes, pos: int, version: int) -> IncrementalAlterConfigsRequest | None:
    """The IncrementalAlterConfigs v0/v1 body at `pos` of a request frame (after its header),
    or None when it is not the common shape (see the module's note)."""
    if version not in (0, 1):
        return None
    try:
        return _decode_iac(frame, pos, version >= 1)
    except (_Short, IndexError, struct.error, UnicodeDecodeError, KeyError):
        return None


def _array_length(buf: bytes, pos: int, flexible: bool) -> tuple[int, int]:
    """A non-nullable array's length (compact or int32) and the position after it; _Short for
    null, a negative length, or more items than bytes left."""
    if flexible:
        n, pos = _uvarint(buf, pos)
        n -= 1
    else:
        (n,) = _I32.unpack_from(buf, pos)
        pos += 4
    if n < 0 or n > len(buf) - pos:
        raise _Short
    return n, pos


def _decode_iac(buf: bytes, pos: int, flexible: bool) -> IncrementalAlterConfigsRequest:
    # The string readers are called by name (direct C calls once compiled), not through a
    # variable (a generic call with boxed arguments).
    n, pos = _array_length(buf, pos, flexible)
    resources = []
    for _ in range(n):
        rtype = _RESOURCE_TYPES[buf[pos]]  # int8; an unknown type: the general path rejects it
        name, pos = _compact_string(buf, pos + 1) if flexible else _string(buf, pos + 1)
        if name is None:
            raise _Short
        m, pos = _array_length(buf, pos, flexible)
        ops = []
        for _ in range(m):
            key, pos = _compact_string(buf, pos) if flexible else _string(buf, pos)
            if key is None:
                raise _Short
            op = _OPS[buf[pos]]
            value, pos = _compact_string(buf, pos + 1) if flexible else _string(buf, pos + 1)
            if flexible:
                if buf[pos]:
                    raise _Short  # tagged fields
                pos += 1
            ops.append(AlterConfigOp(key, op, value))
        if flexible:
            if buf[pos]:
                raise _Short
            pos += 1
        resources.append(AlterConfigsResource(rtype, name, tuple(ops)))
    validate_only = buf[pos]
    if validate_only > 1:
        raise _Short
    if flexible and buf[pos + 1]:
        raise _Short
    return IncrementalAlterConfigsRequest(tuple(resources), validate_only=bool(validate_only))


def _put_uvarint(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def encode_incremental_alter_configs_response(
    response: IncrementalAlterConfigsResponse, version: int, correlation_id: int
) -> bytes | None:
    """The complete response frame (length prefix, header, body) at v0/v1, or None when an
    error code is one kio does not know (the general path maps it) or a value does not fit."""
    if version not in (0, 1):
        return None
    try:
        return _encode_iac_response(response, version >= 1, correlation_id)
    except (struct.error, ValueError, UnicodeEncodeError):
        return None


def _encode_iac_response(
    response: IncrementalAlterConfigsResponse, flexible: bool, correlation_id: int
) -> bytes | None:
    resources = response.resources
    if flexible and len(resources) == 1:
        # One write's answer (a resource, no message): one pack, the name, the resource's and
        # the body's empty tagged fields; the same bytes as the loop below.
        one = resources[0]
        code = one.error_code
        if one.message is None and known_error_code(code):
            raw_name = one.resource_name.encode()
            if len(raw_name) < 0x7F:
                head = _FLEX_ONE_PLAIN.pack(
                    _FLEX_ONE_PLAIN.size - 4 + len(raw_name) + 2,
                    correlation_id,
                    0,
                    0,
                    2,
                    code,
                    0,
                    int(one.resource_type),
                    len(raw_name) + 1,
                )
                return head + raw_name + b"\0\0"
    # Frame: size (int32, filled last) and correlation id (int32); then, flexible, the
    # response header's empty tagged fields; then throttle_time_ms (int32, 0).
    out = bytearray(_FLEX_HEAD if flexible else _LEGACY_HEAD)
    if flexible:
        _put_uvarint(out, len(resources) + 1)
    else:
        out += _I32.pack(len(resources))
    for res in resources:
        code = res.error_code
        if not known_error_code(code):
            return None
        message = res.message
        name = res.resource_name.encode()
        if message is None and flexible and len(name) < 0x7F:
            # The common answer in one pack: error code, null message (0), resource type,
            # the name's length + 1 as a one-byte uvarint; then the name and no tagged fields.
            out += _FLEX_PLAIN_RESULT.pack(code, 0, int(res.resource_type), len(name) + 1)
            out += name
            out.append(0)
            continue
        out += _I16.pack(code)
        if message is None:
            out += b"\0" if flexible else b"\xff\xff"
        else:
            raw = message.encode()
            if flexible:
                _put_uvarint(out, len(raw) + 1)
            else:
                out += _I16.pack(len(raw))
            out += raw
        out.append(int(res.resource_type))
        if flexible:
            _put_uvarint(out, len(name) + 1)
            out += name
            out.append(0)  # the resource's tagged fields
        else:
            out += _I16.pack(len(name))
            out += name
    if flexible:
        out.append(0)  # the body's tagged fields
    _SIZE_AND_ID.pack_into(out, 0, len(out) - 4, correlation_id)
    return bytes(out)
