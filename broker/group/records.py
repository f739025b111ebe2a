"""The key/value records of `__consumer_offsets`, in Kafka's own schemas (byte for byte).

Every record of that topic has a key and (except tombstones) a value, each an int16 version
followed by the struct of that version:

- key version 0 or 1: OffsetCommitKey (group: string, topic: string, partition: int32);
  key version 2: GroupMetadataKey (group: string). Keys are never flexible.
  Key versions 3..8 are KIP-848's consumer-group records (and later ones other record
  types): not decoded here, `decode_key` raises `RecordSchemaError` naming the version.
- OffsetCommitValue versions 0..4 (4 is flexible): offset int64, leaderEpoch int32 (v3+,
  default -1), metadata string, commitTimestamp int64, expireTimestamp int64 (v1 only,
  default -1).
- GroupMetadataValue versions 0..4 (4 is flexible): protocolType string, generation int32,
  protocol string?, leader string?, currentStateTimestamp int64 (v2+, default -1), members
  [MemberMetadata]: memberId string, groupInstanceId string? (v3+, default null), clientId
  string, clientHost string, rebalanceTimeout int32 (v1+, default -1), sessionTimeout
  int32, subscription bytes, assignment bytes.

Legacy versions write strings with an int16 length, bytes and arrays with an int32 length
(-1 = null); flexible versions (KIP-482) write unsigned-varint lengths + 1 (0 = null) and a
tagged-field section after every struct (unknown tags are skipped on read, none written).

What Kafka 3.9 writes, and so `encode_*`: key version 1 for offsets, 2 for groups;
OffsetCommitValue version 3, or 1 when the commit carries an expire timestamp (version 1
has no leaderEpoch: it is dropped, as Kafka drops it); GroupMetadataValue version 3.
Fields absent from the version written are dropped (all of them are "ignorable" in the
schemas) and read back as their defaults.

Reading is as lenient as Kafka's generated readers: bytes after the struct are ignored.
Anything else that does not decode (truncated, lying lengths, null in a non-nullable field,
bad UTF-8, a version the schema does not have) raises `RecordSchemaError`, and only that.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from broker.kafka.wire import MalformedRequest, Reader, Writer

__all__ = [
    "CONSUMER_GROUP_KEY_VERSIONS",
    "FLEXIBLE_FROM",
    "GROUP_KEY_VERSION",
    "GROUP_VALUE_VERSION",
    "OFFSET_KEY_VERSION",
    "OFFSET_VALUE_VERSION",
    "OFFSET_VALUE_VERSION_WITH_EXPIRE",
    "VALUE_VERSIONS",
    "GroupKey",
    "GroupValue",
    "MemberValue",
    "OffsetKey",
    "OffsetValue",
    "RecordSchemaError",
    "coordinator_partition",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
    "java_string_hash",
    "written_value_version",
]

# The versions Kafka 3.9 writes (GroupCoordinatorRecordHelpers with MetadataVersion >= 2.3).
OFFSET_KEY_VERSION: Final = 1
GROUP_KEY_VERSION: Final = 2
OFFSET_VALUE_VERSION: Final = 3
OFFSET_VALUE_VERSION_WITH_EXPIRE: Final = 1
GROUP_VALUE_VERSION: Final = 3

# The versions each value schema has; from FLEXIBLE_FROM on they are flexible.
VALUE_VERSIONS: Final = range(0, 5)
FLEXIBLE_FROM: Final = 4
# Key versions of KIP-848's consumer-group records (ConsumerGroupMetadataKey = 3 ..
# ConsumerGroupCurrentMemberAssignmentKey = 8) in Kafka 3.9.
CONSUMER_GROUP_KEY_VERSIONS: Final = range(3, 9)

_MAX_STRING_BYTES: Final = 0x7FFF  # Kafka's limit on a string field's UTF-8 length, both encodings


class RecordSchemaError(ValueError):
    """Bytes that do not decode as a `__consumer_offsets` record, an unknown key or value
    version, or a value that cannot be encoded (a string over 32767 UTF-8 bytes, an int out
    of its field's range)."""


@dataclass(frozen=True, slots=True)
class OffsetKey:
    """OffsetCommitKey: the committed offset of one partition for one group."""

    group: str
    topic: str
    partition: int  # int32


@dataclass(frozen=True, slots=True)
class OffsetValue:
    """OffsetCommitValue."""

    offset: int  # int64
    leader_epoch: int  # int32, -1 = none
    metadata: str
    commit_timestamp: int  # ms since the epoch
    expire_timestamp: int = -1  # ms since the epoch, -1 = none (only version 1 stores it)


@dataclass(frozen=True, slots=True)
class GroupKey:
    """GroupMetadataKey: the metadata of a classic group."""

    group: str


@dataclass(frozen=True, slots=True)
class MemberValue:
    """GroupMetadataValue.MemberMetadata: one member of a classic group."""

    member_id: str
    group_instance_id: str | None  # KIP-345 static membership; version 3+
    client_id: str
    client_host: str
    rebalance_timeout_ms: int  # int32; version 1+, -1 when read from version 0
    session_timeout_ms: int  # int32
    subscription: bytes  # the protocol metadata, relayed untouched
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupValue:
    """GroupMetadataValue."""

    protocol_type: str  # "" for a group without one
    generation: int  # int32
    protocol: str | None
    leader: str | None
    current_state_timestamp: int  # ms since the epoch, -1 = none; version 2+
    members: tuple[MemberValue, ...]


# ---------------------------------------------------------------- encoding


def _string(w: Writer, s: str | None, flexible: bool) -> None:
    if s is None:
        w.length(-1, flexible, False)
        return
    try:
        raw = s.encode()
    except UnicodeEncodeError as exc:  # lone surrogates
        raise RecordSchemaError(f"string is not encodable as UTF-8: {exc}") from exc
    if len(raw) > _MAX_STRING_BYTES:
        raise RecordSchemaError(f"a string of {len(raw)} UTF-8 bytes is longer than {_MAX_STRING_BYTES}")
    w.length(len(raw), flexible, False)
    w.buf += raw


def _encode_offset_value(w: Writer, v: OffsetValue, version: int) -> None:
    flexible = version >= FLEXIBLE_FROM
    w.i64(v.offset)
    if version >= 3:
        w.i32(v.leader_epoch)
    _string(w, v.metadata, flexible)
    w.i64(v.commit_timestamp)
    if version == 1:
        w.i64(v.expire_timestamp)
    if flexible:
        w.no_tags()


def _encode_group_value(w: Writer, v: GroupValue, version: int) -> None:
    flexible = version >= FLEXIBLE_FROM
    _string(w, v.protocol_type, flexible)
    w.i32(v.generation)
    _string(w, v.protocol, flexible)
    _string(w, v.leader, flexible)
    if version >= 2:
        w.i64(v.current_state_timestamp)
    w.length(len(v.members), flexible, True)
    for m in v.members:
        _string(w, m.member_id, flexible)
        if version >= 3:
            _string(w, m.group_instance_id, flexible)
        _string(w, m.client_id, flexible)
        _string(w, m.client_host, flexible)
        if version >= 1:
            w.i32(m.rebalance_timeout_ms)
        w.i32(m.session_timeout_ms)
        w.bytes_(m.subscription, flexible)
        w.bytes_(m.assignment, flexible)
        if flexible:
            w.no_tags()
    if flexible:
        w.no_tags()


def encode_key(key: OffsetKey | GroupKey) -> bytes:
    """The record key as Kafka 3.9 writes it (OffsetCommitKey v1, GroupMetadataKey v2)."""
    w = Writer(reserve_length=False)
    try:
        if isinstance(key, OffsetKey):
            w.i16(OFFSET_KEY_VERSION)
            _string(w, key.group, False)
            _string(w, key.topic, False)
            w.i32(key.partition)
        else:
            w.i16(GROUP_KEY_VERSION)
            _string(w, key.group, False)
    except struct.error as exc:
        raise RecordSchemaError(f"cannot encode {key!r}: {exc}") from exc
    return bytes(w.buf)


def written_value_version(value: OffsetValue | GroupValue) -> int:
    """The value version Kafka 3.9 writes for `value` (MetadataVersion >= 2.3)."""
    if isinstance(value, OffsetValue):
        return OFFSET_VALUE_VERSION_WITH_EXPIRE if value.expire_timestamp != -1 else OFFSET_VALUE_VERSION
    return GROUP_VALUE_VERSION


def encode_value(value: OffsetValue | GroupValue, version: int | None = None) -> bytes:
    """The record value in `version` (default: the one Kafka 3.9 writes, see
    `written_value_version`). Fields the version lacks are dropped."""
    if version is None:
        version = written_value_version(value)
    if version not in VALUE_VERSIONS:
        raise RecordSchemaError(f"unknown value version {version}")
    w = Writer(reserve_length=False)
    w.i16(version)
    try:
        if isinstance(value, OffsetValue):
            _encode_offset_value(w, value, version)
        else:
            _encode_group_value(w, value, version)
    except struct.error as exc:
        raise RecordSchemaError(f"cannot encode {value!r}: {exc}") from exc
    return bytes(w.buf)


# ---------------------------------------------------------------- decoding


def _read_string(r: Reader, flexible: bool, field: str) -> str:
    s = _read_nullable_string(r, flexible, field)
    if s is None:
        raise RecordSchemaError(f"non-nullable field {field} was serialized as null")
    return s


def _read_nullable_string(r: Reader, flexible: bool, field: str) -> str | None:
    n = r.uvarint() - 1 if flexible else r.i16()
    if n < 0:
        if n != -1:
            raise RecordSchemaError(f"string field {field} had negative length {n}")
        return None
    if n > _MAX_STRING_BYTES:
        raise RecordSchemaError(f"string field {field} had invalid length {n}")
    try:
        return str(r.raw(n), "utf-8")
    except UnicodeDecodeError as exc:
        raise RecordSchemaError(f"string field {field} is not UTF-8") from exc


def _read_bytes(r: Reader, flexible: bool, field: str) -> bytes:
    b = r.bytes_(flexible)
    if b is None:
        raise RecordSchemaError(f"non-nullable field {field} was serialized as null")
    return bytes(b)


def _version(r: Reader, what: str) -> int:
    try:
        return r.i16()
    except MalformedRequest as exc:
        raise RecordSchemaError(f"could not read the version of the {what}") from exc


def decode_key(data: bytes | memoryview) -> OffsetKey | GroupKey:
    """A record key of any version Kafka can have written for the classic protocol."""
    r = Reader(memoryview(data))
    version = _version(r, "key")
    try:
        if version in (0, 1):
            return OffsetKey(_read_string(r, False, "group"), _read_string(r, False, "topic"), r.i32())
        if version == 2:
            return GroupKey(_read_string(r, False, "group"))
    except MalformedRequest as exc:
        raise RecordSchemaError(f"could not read key version {version}: {exc}") from exc
    if version in CONSUMER_GROUP_KEY_VERSIONS:
        raise RecordSchemaError(f"key version {version} is a consumer-group (KIP-848) record, not decoded")
    raise RecordSchemaError(f"unknown key version {version}")


def _decode_offset_value(r: Reader, version: int) -> OffsetValue:
    flexible = version >= FLEXIBLE_FROM
    offset = r.i64()
    leader_epoch = r.i32() if version >= 3 else -1
    metadata = _read_string(r, flexible, "metadata")
    commit_timestamp = r.i64()
    expire_timestamp = r.i64() if version == 1 else -1
    if flexible:
        r.skip_tags()
    return OffsetValue(offset, leader_epoch, metadata, commit_timestamp, expire_timestamp)


def _decode_member(r: Reader, version: int) -> MemberValue:
    flexible = version >= FLEXIBLE_FROM
    member_id = _read_string(r, flexible, "memberId")
    instance_id = _read_nullable_string(r, flexible, "groupInstanceId") if version >= 3 else None
    client_id = _read_string(r, flexible, "clientId")
    client_host = _read_string(r, flexible, "clientHost")
    rebalance_timeout = r.i32() if version >= 1 else -1
    session_timeout = r.i32()
    subscription = _read_bytes(r, flexible, "subscription")
    assignment = _read_bytes(r, flexible, "assignment")
    if flexible:
        r.skip_tags()
    return MemberValue(
        member_id, instance_id, client_id, client_host, rebalance_timeout, session_timeout, subscription, assignment
    )


def _decode_group_value(r: Reader, version: int) -> GroupValue:
    flexible = version >= FLEXIBLE_FROM
    protocol_type = _read_string(r, flexible, "protocolType")
    generation = r.i32()
    protocol = _read_nullable_string(r, flexible, "protocol")
    leader = _read_nullable_string(r, flexible, "leader")
    state_ts = r.i64() if version >= 2 else -1
    members = tuple(r.array(flexible, lambda: _decode_member(r, version)))
    if flexible:
        r.skip_tags()
    return GroupValue(protocol_type, generation, protocol, leader, state_ts, members)


def decode_value(key: OffsetKey | GroupKey, data: bytes | memoryview | None) -> OffsetValue | GroupValue | None:
    """The value of the record whose key is `key`: an OffsetValue for an OffsetKey, a
    GroupValue for a GroupKey, None for a tombstone (a null value)."""
    if data is None:
        return None
    r = Reader(memoryview(data))
    version = _version(r, "value")
    if version not in VALUE_VERSIONS:
        raise RecordSchemaError(f"unknown value version {version} for {type(key).__name__}")
    try:
        if isinstance(key, OffsetKey):
            return _decode_offset_value(r, version)
        return _decode_group_value(r, version)
    except MalformedRequest as exc:
        raise RecordSchemaError(f"could not read value version {version}: {exc}") from exc


# ---------------------------------------------------------------- the coordinator partition


def java_string_hash(s: str) -> int:
    """Java's `String.hashCode()`: s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code units,
    in 32-bit two's complement (the result is a signed int32)."""
    units = s.encode("utf-16-be", errors="surrogatepass")
    h = 0
    for (unit,) in struct.iter_unpack(">H", units):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def coordinator_partition(group_id: str, num_partitions: int) -> int:
    """The `__consumer_offsets` partition of a group, as Kafka computes it:
    `Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions`, where Utils.abs maps
    Integer.MIN_VALUE to 0."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions
