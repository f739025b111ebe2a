"""Encoding of the LeaderChange control record a new leader appends at once.

Kafka's LeaderChangeMessage v0 (flexible): Version int16, LeaderId int32,
Voters [VoterId int32], GrantingVoters [VoterId int32], each struct and the
message ending in an empty tagged-field section. Pure bytes, no IO: the core
uses it to write the first record of its epoch.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class LeaderChange:
    leader_id: int
    voters: tuple[int, ...]
    granting_voters: tuple[int, ...]


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _voter_array(ids: Sequence[int]) -> bytes:
    # compact array: length+1, then each struct {VoterId int32, tagged fields (0)}
    return _uvarint(len(ids) + 1) + b"".join(_I32.pack(v) + b"\x00" for v in ids)


def encode_leader_change(leader_id: int, voters: Sequence[int], granting_voters: Sequence[int]) -> bytes:
    return (
        _I16.pack(0) + _I32.pack(leader_id) + _voter_array(voters) + _voter_array(granting_voters) + b"\x00"
    )


def _read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 28:
            raise ValueError("bad varint in LeaderChange record")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def _read_voters(data: bytes, pos: int) -> tuple[tuple[int, ...], int]:
    n, pos = _read_uvarint(data, pos)
    ids = []
    for _ in range(max(n - 1, 0)):
        if pos + 5 > len(data):
            raise ValueError("truncated LeaderChange record")
        ids.append(_I32.unpack_from(data, pos)[0])
        tags, pos = _read_uvarint(data, pos + 4)
        if tags:
            raise ValueError("unexpected tagged fields in LeaderChange voter")
    return tuple(ids), pos


def decode_leader_change(data: bytes) -> LeaderChange:
    if len(data) < 6:
        raise ValueError("truncated LeaderChange record")
    (leader_id,) = _I32.unpack_from(data, 2)
    voters, pos = _read_voters(data, 6)
    granting, pos = _read_voters(data, pos)
    return LeaderChange(leader_id=leader_id, voters=voters, granting_voters=granting)
