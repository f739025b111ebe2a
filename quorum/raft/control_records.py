"""The values of the KRaft log's control records, and the flexible-version primitives they use.

A control record's value is a small Kafka message in its "flexible" form (compact arrays
whose length is stored + 1, a tagged-field section after each struct): LeaderChangeMessage
(written by a new leader as the first record of its epoch), SnapshotHeaderRecord and
SnapshotFooterRecord (the first and last batches of a snapshot), all version 0 here; the
KIP-853 records KRaftVersionRecord and VotersRecord are in `quorum.raft.kraft_control`.

They live in the Raft room because the sans-IO core writes and reads them itself; the
storage room (`quorum.storage.record_batch`: the batches that carry them) imports the
varint primitives and `CorruptRecordError` from here, so each rule has one implementation.

The codecs are hand-written rather than built on kio's entity reader because that reader
aborts the whole process (Rust allocation failure) when a compact-array length is huge; we
must survive any input: every decoder returns or raises `CorruptRecordError`.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "CorruptRecordError",
    "LeaderChange",
    "SnapshotFooter",
    "SnapshotHeader",
    "decode_fixed_v0",
    "decode_leader_change",
    "decode_snapshot_footer",
    "decode_snapshot_header",
    "encode_leader_change",
    "encode_snapshot_footer",
    "encode_snapshot_header",
    "read_uvarint",
    "skip_tagged_fields",
    "uvarint_bytes",
]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HI = struct.Struct(">hi")
_HQ = struct.Struct(">hq")
_NO_TAGS = b"\x00"  # empty tagged-field section


class CorruptRecordError(ValueError):
    """A complete record batch (or control message) is invalid.

    `position` is the byte offset, in the buffer given to the decoder, of the
    start of the offending batch (None for control-message decoders).
    """

    def __init__(self, message: str, position: int | None = None) -> None:
        super().__init__(message if position is None else f"{message} (batch at byte {position})")
        self.position = position


# --------------------------------------------------------------------------- flexible-version primitives


def uvarint_bytes(value: int) -> bytes:
    """Unsigned LEB128 (Kafka's unsigned varint) of a non-negative int (at most 64 bits)."""
    if value < 0:
        raise ValueError(f"negative unsigned varint {value}")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_uvarint(data: bytes, pos: int, max_bytes: int) -> tuple[int, int]:
    """Read an unsigned LEB128 of at most `max_bytes` bytes; return (value, new pos).

    Raises CorruptRecordError if the varint is longer; IndexError if the buffer ends
    (callers turn that into CorruptRecordError).
    """
    result = 0
    shift = 0
    for _ in range(max_bytes):
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
    raise CorruptRecordError(f"varint longer than {max_bytes} bytes")


def skip_tagged_fields(data: bytes, p: int) -> int:
    """Skip the tagged-field section at `p` (count, then tag, size, bytes each); return the
    position after it. Raises CorruptRecordError, or IndexError if the buffer ends."""
    count, p = read_uvarint(data, p, 5)
    # Each tagged field takes at least 2 bytes (tag, size).
    if count > (len(data) - p) // 2:
        raise CorruptRecordError("bad tagged field count")
    for _ in range(count):
        _tag, p = read_uvarint(data, p, 5)
        length, p = read_uvarint(data, p, 5)
        if p + length > len(data):
            raise CorruptRecordError("tagged field runs past the message")
        p += length
    return p


# --------------------------------------------------------------------------- control messages


@dataclass(frozen=True, slots=True)
class LeaderChange:
    """Kafka's LeaderChangeMessage: the first record a new leader writes in its epoch."""

    leader_id: int
    voters: tuple[int, ...]
    granting_voters: tuple[int, ...]
    version: int = 0


@dataclass(frozen=True, slots=True)
class SnapshotHeader:
    """Kafka's SnapshotHeaderRecord; `last_contained_timestamp_ms` is the append time (ms)
    of the last log record contained in the snapshot."""

    last_contained_timestamp_ms: int
    version: int = 0


@dataclass(frozen=True, slots=True)
class SnapshotFooter:
    """Kafka's SnapshotFooterRecord (no fields besides its version)."""

    version: int = 0


def _uvarint_for_array(n: int) -> bytes:
    # Compact arrays store length + 1 (0 means null).
    return uvarint_bytes(n + 1)


def encode_leader_change(leader_id: int, voters: Sequence[int], granting_voters: Sequence[int]) -> bytes:
    """LeaderChangeMessage v0: Version int16, LeaderId int32, Voters and GrantingVoters as
    compact arrays of {VoterId int32, tagged fields}, then tagged fields."""
    parts = [_HI.pack(0, leader_id)]
    for group in (voters, granting_voters):
        parts.append(_uvarint_for_array(len(group)))
        for voter in group:
            parts.append(_I32.pack(voter))
            parts.append(_NO_TAGS)
    parts.append(_NO_TAGS)
    return b"".join(parts)


def _read_voters(data: bytes, p: int, version: int) -> tuple[tuple[int, ...], int]:
    raw, p = read_uvarint(data, p, 5)
    if raw == 0:
        raise CorruptRecordError("null voter array")
    n = raw - 1
    # v0 element: VoterId (4) + tags (>= 1); v1 adds VoterDirectoryId (16).
    element_min = 5 if version == 0 else 21
    if n > (len(data) - p) // element_min:
        raise CorruptRecordError("voter array longer than the message")
    voters: list[int] = []
    for _ in range(n):
        (voter,) = _I32.unpack_from(data, p)
        p += 4 if version == 0 else 20
        p = skip_tagged_fields(data, p)
        voters.append(voter)
    return tuple(voters), p


def _check_control_input(data: bytes | bytearray | memoryview) -> bytes:
    return data if type(data) is bytes else bytes(data)


def decode_leader_change(data: bytes | bytearray | memoryview) -> LeaderChange:
    """Decode a LeaderChangeMessage (v0, or v1 whose voter directory ids are dropped).

    Raises CorruptRecordError on any malformed input.
    """
    buf = _check_control_input(data)
    try:
        version, leader_id = _HI.unpack_from(buf, 0)
        if version not in (0, 1):
            raise CorruptRecordError(f"unsupported LeaderChangeMessage version {version}")
        voters, p = _read_voters(buf, 6, version)
        granting, p = _read_voters(buf, p, version)
        p = skip_tagged_fields(buf, p)
    except (IndexError, struct.error) as exc:
        raise CorruptRecordError(f"truncated LeaderChangeMessage: {exc}") from None
    if p != len(buf):
        raise CorruptRecordError("trailing bytes after LeaderChangeMessage")
    return LeaderChange(leader_id, voters, granting, version)


def encode_snapshot_header(last_contained_timestamp_ms: int) -> bytes:
    """SnapshotHeaderRecord v0: Version int16, LastContainedLogTimestamp int64, tagged fields."""
    return _HQ.pack(0, last_contained_timestamp_ms) + _NO_TAGS


def decode_fixed_v0(data: bytes | bytearray | memoryview, layout: struct.Struct, name: str) -> tuple[int, ...]:
    """The fields of a version-0 control record made of fixed-size fields (`layout`, its first
    field the record's Version) and then its tagged fields. Raises CorruptRecordError when it
    is truncated, of another version, or followed by more bytes."""
    buf = _check_control_input(data)
    try:
        fields: tuple[int, ...] = layout.unpack_from(buf, 0)
        p = skip_tagged_fields(buf, layout.size)
    except (IndexError, struct.error) as exc:
        raise CorruptRecordError(f"truncated {name}: {exc}") from None
    if fields[0] != 0:
        raise CorruptRecordError(f"unsupported {name} version {fields[0]}")
    if p != len(buf):
        raise CorruptRecordError(f"trailing bytes after {name}")
    return fields


def decode_snapshot_header(data: bytes | bytearray | memoryview) -> SnapshotHeader:
    version, timestamp = decode_fixed_v0(data, _HQ, "SnapshotHeaderRecord")
    return SnapshotHeader(timestamp, version)


def encode_snapshot_footer() -> bytes:
    """SnapshotFooterRecord v0: Version int16, tagged fields."""
    return _I16.pack(0) + _NO_TAGS


def decode_snapshot_footer(data: bytes | bytearray | memoryview) -> SnapshotFooter:
    (version,) = decode_fixed_v0(data, _I16, "SnapshotFooterRecord")
    return SnapshotFooter(version)
