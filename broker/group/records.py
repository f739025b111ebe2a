"""The key/value records of `__consumer_offsets`, in Kafka's own schemas (byte for byte).

Every record of that topic has a key and (except tombstones) a value, each an int16 version
followed by the struct of that version:

- key version 0 or 1: OffsetCommitKey (group: string, topic: string, partition: int32);
  key version 2: GroupMetadataKey (group: string); key versions 3..8: KIP-848's
  consumer-group records (below), keyed by groupId: string (and memberId: string for 5, 7
  and 8). Keys are never flexible. Later key versions (share groups, ...) are unknown here.
- OffsetCommitValue versions 0..4 (4 is flexible): offset int64, leaderEpoch int32 (v3+,
  default -1), metadata string, commitTimestamp int64, expireTimestamp int64 (v1 only,
  default -1).
- GroupMetadataValue versions 0..4 (4 is flexible): protocolType string, generation int32,
  protocol string?, leader string?, currentStateTimestamp int64 (v2+, default -1), members
  [MemberMetadata]: memberId string, groupInstanceId string? (v3+, default null), clientId
  string, clientHost string, rebalanceTimeout int32 (v1+, default -1), sessionTimeout
  int32, subscription bytes, assignment bytes.

- KIP-848's consumer-group values, each of version 0 only, which is flexible:
  3 ConsumerGroupMetadataValue: epoch int32.
  4 ConsumerGroupPartitionMetadataValue: topics [TopicMetadata: topicId uuid, topicName
    string, numPartitions int32, partitionMetadata [partition int32, racks [string]]].
  5 ConsumerGroupMemberMetadataValue: instanceId string?, rackId string?, clientId string,
    clientHost string, subscribedTopicNames [string], subscribedTopicRegex string?,
    rebalanceTimeoutMs int32, serverAssignor string?, and tagged field 0
    classicMemberMetadata? (sessionTimeoutMs int32, supportedProtocols [name string,
    metadata bytes]), null by default.
  6 ConsumerGroupTargetAssignmentMetadataValue: assignmentEpoch int32.
  7 ConsumerGroupTargetAssignmentMemberValue: topicPartitions [topicId uuid, partitions [int32]].
  8 ConsumerGroupCurrentMemberAssignmentValue: memberEpoch int32, previousMemberEpoch int32,
    state int8, assignedPartitions and partitionsPendingRevocation [topicId uuid,
    partitions [int32]].
  partitionMetadata (racks, unused by Kafka's assignors since 4.0) and classicMemberMetadata
  (members of a consumer group that still speak the classic protocol, which pykraft does not
  mix in) are read, checked and dropped; they are written as their defaults (an empty list,
  no tag), as Kafka 4.0 writes the racks.

Legacy versions write strings with an int16 length, bytes and arrays with an int32 length
(-1 = null); flexible versions (KIP-482) write unsigned-varint lengths + 1 (0 = null) and a
tagged-field section after every struct (unknown tags are skipped on read, none written).

What Kafka 3.9 writes, and so `encode_*`: key version 1 for offsets, 2 for groups;
OffsetCommitValue version 3, or 1 when the commit carries an expire timestamp (version 1
has no leaderEpoch: it is dropped, as Kafka drops it); GroupMetadataValue version 3; key
versions 3..8 with value version 0 for the consumer-group records.
Fields absent from the version written are dropped (all of them are "ignorable" in the
schemas) and read back as their defaults.

Reading is as lenient as Kafka's generated readers: bytes after the struct are ignored.
Anything else that does not decode (truncated, lying lengths, null in a non-nullable field,
bad UTF-8, a version the schema does not have) raises `RecordSchemaError`, and only that.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, TypeAlias, overload
from uuid import UUID

from broker.kafka.wire import MalformedRequest, Reader, Writer
from quorum.frozen_init import fast_frozen_init

__all__ = [
    "CONSUMER_GROUP_KEY_VERSIONS",
    "CONSUMER_GROUP_VALUE_VERSION",
    "FLEXIBLE_FROM",
    "GROUP_KEY_VERSION",
    "GROUP_VALUE_VERSION",
    "MEMBER_KEY_TYPES",
    "OFFSET_KEY_VERSION",
    "OFFSET_VALUE_VERSION",
    "OFFSET_VALUE_VERSION_WITH_EXPIRE",
    "VALUE_VERSIONS",
    "ConsumerGroupCurrentMemberAssignmentKey",
    "ConsumerGroupCurrentMemberAssignmentValue",
    "ConsumerGroupKey",
    "ConsumerGroupMemberMetadataKey",
    "ConsumerGroupMemberMetadataValue",
    "ConsumerGroupMetadataKey",
    "ConsumerGroupMetadataValue",
    "ConsumerGroupPartitionMetadataKey",
    "ConsumerGroupPartitionMetadataValue",
    "ConsumerGroupTargetAssignmentMemberKey",
    "ConsumerGroupTargetAssignmentMemberValue",
    "ConsumerGroupTargetAssignmentMetadataKey",
    "ConsumerGroupTargetAssignmentMetadataValue",
    "ConsumerGroupValue",
    "GroupKey",
    "GroupValue",
    "MemberValue",
    "OffsetKey",
    "OffsetValue",
    "RecordKey",
    "RecordSchemaError",
    "RecordValue",
    "TopicMetadata",
    "TopicPartitions",
    "coordinator_partition",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_records",
    "encode_value",
    "group_of",
    "java_string_hash",
    "key_version",
    "written_value_version",
]

# The versions Kafka 3.9 writes (GroupCoordinatorRecordHelpers with MetadataVersion >= 2.3).
OFFSET_KEY_VERSION: Final = 1
GROUP_KEY_VERSION: Final = 2
OFFSET_VALUE_VERSION: Final = 3
OFFSET_VALUE_VERSION_WITH_EXPIRE: Final = 1
GROUP_VALUE_VERSION: Final = 3

# The versions the OffsetCommitValue and GroupMetadataValue schemas have; from FLEXIBLE_FROM
# on they are flexible.
VALUE_VERSIONS: Final = range(0, 5)
FLEXIBLE_FROM: Final = 4
# Key versions of KIP-848's consumer-group records (ConsumerGroupMetadataKey = 3 ..
# ConsumerGroupCurrentMemberAssignmentKey = 8) in Kafka 3.9.
CONSUMER_GROUP_KEY_VERSIONS: Final = range(3, 9)
# The only version of each consumer-group value schema; it is flexible.
CONSUMER_GROUP_VALUE_VERSION: Final = 0

_MAX_STRING_BYTES: Final = 0x7FFF  # Kafka's limit on a string field's UTF-8 length, both encodings
_UUID_BYTES: Final = 16
_CLASSIC_MEMBER_METADATA_TAG: Final = 0  # ConsumerGroupMemberMetadataValue's tagged field


class RecordSchemaError(ValueError):
    """Bytes that do not decode as a `__consumer_offsets` record, an unknown key or value
    version, or a value that cannot be encoded (a string over 32767 UTF-8 bytes, an int out
    of its field's range)."""


@dataclass(frozen=True, slots=True, init=False)
class OffsetKey:
    """OffsetCommitKey: the committed offset of one partition for one group."""

    group: str
    topic: str
    partition: int  # int32

    # Compiled with the module (the dataclass decorator's __init__ would run as Python there);
    # uncompiled, fast_frozen_init replaces it.
    def __init__(self, group: str, topic: str, partition: int) -> None:
        object.__setattr__(self, "group", group)
        object.__setattr__(self, "topic", topic)
        object.__setattr__(self, "partition", partition)


fast_frozen_init(OffsetKey)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True, init=False)
class OffsetValue:
    """OffsetCommitValue."""

    offset: int  # int64
    leader_epoch: int  # int32, -1 = none
    metadata: str
    commit_timestamp: int  # ms since the epoch
    expire_timestamp: int = -1  # ms since the epoch, -1 = none (only version 1 stores it)
    # In memory only, never encoded: where the record holding this value is in the partition
    # (its log offset when replayed; the shard's running count, in log order, when written by
    # this leader), -1 = unknown. Kafka's OffsetAndMetadata.recordOffset: a transaction's
    # offset replaces the committed one only when its record is the later one.
    position: int = field(default=-1, compare=False, repr=False)

    # Compiled with the module (the dataclass decorator's __init__ would run as Python there);
    # uncompiled, fast_frozen_init replaces it.
    def __init__(
        self,
        offset: int,
        leader_epoch: int,
        metadata: str,
        commit_timestamp: int,
        expire_timestamp: int = -1,
        position: int = -1,
    ) -> None:
        object.__setattr__(self, "offset", offset)
        object.__setattr__(self, "leader_epoch", leader_epoch)
        object.__setattr__(self, "metadata", metadata)
        object.__setattr__(self, "commit_timestamp", commit_timestamp)
        object.__setattr__(self, "expire_timestamp", expire_timestamp)
        object.__setattr__(self, "position", position)


fast_frozen_init(OffsetValue)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class GroupKey:
    """GroupMetadataKey: the metadata of a classic group."""

    group: str


fast_frozen_init(GroupKey)  # not a decorator: mypyc makes a decorated class a Python class


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


fast_frozen_init(MemberValue)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class GroupValue:
    """GroupMetadataValue."""

    protocol_type: str  # "" for a group without one
    generation: int  # int32
    protocol: str | None
    leader: str | None
    current_state_timestamp: int  # ms since the epoch, -1 = none; version 2+
    members: tuple[MemberValue, ...]


fast_frozen_init(GroupValue)  # not a decorator: mypyc makes a decorated class a Python class


# ---------------------------------------------------------------- KIP-848 consumer groups


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """ConsumerGroupPartitionMetadataValue.TopicMetadata: a subscribed topic as the group saw it."""

    topic_id: UUID
    topic_name: str
    num_partitions: int  # int32


fast_frozen_init(TopicMetadata)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class TopicPartitions:
    """Partitions of one topic (ConsumerGroupTargetAssignmentMemberValue.TopicPartition,
    ConsumerGroupCurrentMemberAssignmentValue.TopicPartitions)."""

    topic_id: UUID
    partitions: tuple[int, ...]  # int32 each, in the order given


fast_frozen_init(TopicPartitions)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataKey:
    """Key version 3: the group epoch of a consumer group."""

    group: str


fast_frozen_init(ConsumerGroupMetadataKey)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataValue:
    epoch: int  # int32: the group epoch


fast_frozen_init(ConsumerGroupMetadataValue)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataKey:
    """Key version 4: the metadata of the topics a consumer group subscribes to."""

    group: str


fast_frozen_init(ConsumerGroupPartitionMetadataKey)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataValue:
    topics: tuple[TopicMetadata, ...]


fast_frozen_init(ConsumerGroupPartitionMetadataValue)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataKey:
    """Key version 5: one member's subscription."""

    group: str
    member_id: str


fast_frozen_init(ConsumerGroupMemberMetadataKey)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataValue:
    instance_id: str | None  # KIP-345 static membership
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]  # Kafka writes them sorted
    subscribed_topic_regex: str | None
    server_assignor: str | None  # None = the group's default assignor
    rebalance_timeout_ms: int  # int32, -1 = none


fast_frozen_init(ConsumerGroupMemberMetadataValue)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataKey:
    """Key version 6: the epoch of a consumer group's target assignment."""

    group: str


# not a decorator: mypyc makes a decorated class a Python class
fast_frozen_init(ConsumerGroupTargetAssignmentMetadataKey)


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataValue:
    assignment_epoch: int  # int32


# not a decorator: mypyc makes a decorated class a Python class
fast_frozen_init(ConsumerGroupTargetAssignmentMetadataValue)


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberKey:
    """Key version 7: one member's target assignment."""

    group: str
    member_id: str


# not a decorator: mypyc makes a decorated class a Python class
fast_frozen_init(ConsumerGroupTargetAssignmentMemberKey)


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberValue:
    topic_partitions: tuple[TopicPartitions, ...]


# not a decorator: mypyc makes a decorated class a Python class
fast_frozen_init(ConsumerGroupTargetAssignmentMemberValue)


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentKey:
    """Key version 8: one member's current assignment and epochs."""

    group: str
    member_id: str


# not a decorator: mypyc makes a decorated class a Python class
fast_frozen_init(ConsumerGroupCurrentMemberAssignmentKey)


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentValue:
    member_epoch: int  # int32
    previous_member_epoch: int  # int32
    state: int  # int8, Kafka's MemberState: 0 STABLE, 1 UNREVOKED_PARTITIONS, 2 UNRELEASED_PARTITIONS
    assigned_partitions: tuple[TopicPartitions, ...]
    partitions_pending_revocation: tuple[TopicPartitions, ...]


# not a decorator: mypyc makes a decorated class a Python class
fast_frozen_init(ConsumerGroupCurrentMemberAssignmentValue)


ConsumerGroupKey: TypeAlias = (
    ConsumerGroupMetadataKey
    | ConsumerGroupPartitionMetadataKey
    | ConsumerGroupMemberMetadataKey
    | ConsumerGroupTargetAssignmentMetadataKey
    | ConsumerGroupTargetAssignmentMemberKey
    | ConsumerGroupCurrentMemberAssignmentKey
)
ConsumerGroupValue: TypeAlias = (
    ConsumerGroupMetadataValue
    | ConsumerGroupPartitionMetadataValue
    | ConsumerGroupMemberMetadataValue
    | ConsumerGroupTargetAssignmentMetadataValue
    | ConsumerGroupTargetAssignmentMemberValue
    | ConsumerGroupCurrentMemberAssignmentValue
)
RecordKey: TypeAlias = OffsetKey | GroupKey | ConsumerGroupKey
RecordValue: TypeAlias = OffsetValue | GroupValue | ConsumerGroupValue

# Key version (the record type) of each consumer-group key; MEMBER_KEY_TYPES: the keys that
# also name a member (memberId after groupId).
_CONSUMER_GROUP_KEY_TYPES: Final[Mapping[int, type[ConsumerGroupKey]]] = {
    3: ConsumerGroupMetadataKey,
    4: ConsumerGroupPartitionMetadataKey,
    5: ConsumerGroupMemberMetadataKey,
    6: ConsumerGroupTargetAssignmentMetadataKey,
    7: ConsumerGroupTargetAssignmentMemberKey,
    8: ConsumerGroupCurrentMemberAssignmentKey,
}
_CONSUMER_GROUP_KEY_VERSION: Final[Mapping[type[ConsumerGroupKey], int]] = {
    t: v for v, t in _CONSUMER_GROUP_KEY_TYPES.items()
}
MEMBER_KEY_TYPES: Final = (
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupCurrentMemberAssignmentKey,
)


def group_of(key: RecordKey) -> str:
    """The group a record of `__consumer_offsets` belongs to (every key type names one)."""
    return key.group


def key_version(key: RecordKey) -> int:
    """The key version (the record type) Kafka 3.9 writes for `key`."""
    if isinstance(key, OffsetKey):
        return OFFSET_KEY_VERSION
    if isinstance(key, GroupKey):
        return GROUP_KEY_VERSION
    return _CONSUMER_GROUP_KEY_VERSION[type(key)]


# ---------------------------------------------------------------- encoding


def _string(w: Writer, s: str | None, flexible: bool) -> None:
    if s is None:
        w.length(-1, flexible, False)
        return
    raw = _utf8(s)
    w.length(len(raw), flexible, False)
    w.buf += raw


def _utf8(s: str) -> bytes:
    """A string field's bytes, within Kafka's limit (RecordSchemaError otherwise)."""
    try:
        raw = s.encode()
    except UnicodeEncodeError as exc:  # lone surrogates
        raise RecordSchemaError(f"string is not encodable as UTF-8: {exc}") from exc
    if len(raw) > _MAX_STRING_BYTES:
        raise RecordSchemaError(f"a string of {len(raw)} UTF-8 bytes is longer than {_MAX_STRING_BYTES}")
    return raw


_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_I64: Final = struct.Struct(">q")
_I64_PAIR: Final = struct.Struct(">qq")
_OFFSET_VALUE_HEAD: Final = struct.Struct(">hq")  # version, offset
_OFFSET_VALUE_HEAD_V3: Final = struct.Struct(">hqi")  # version, offset, leader epoch
# OffsetCommitValue v3 with an empty metadata string: version, offset, leader epoch, the
# string's length (0), commit timestamp; the bytes of the general layout, in one pack.
_OFFSET_VALUE_V3_NO_METADATA: Final = struct.Struct(">hqihq")
# The packs of the per-offset encoders, bound once: mypyc calls a bound method object
# directly, where `_I32.pack(...)` looks the method up on the Struct on every call.
_pack_i16: Final = _I16.pack
_pack_i32: Final = _I32.pack
_pack_offset_value_v3_no_metadata: Final = _OFFSET_VALUE_V3_NO_METADATA.pack


def _offset_key_prefix(group: str, topic: str) -> bytes:
    """OffsetCommitKey v1 up to its partition: version, group and topic (int16-length strings)."""
    g, t = _utf8(group), _utf8(topic)
    return b"".join((_pack_i16(OFFSET_KEY_VERSION), _pack_i16(len(g)), g, _pack_i16(len(t)), t))


def _offset_key_partition(key: OffsetKey) -> bytes:
    """OffsetCommitKey's last field: the partition (int32)."""
    try:
        return _pack_i32(key.partition)
    except struct.error as exc:
        raise RecordSchemaError(f"cannot encode {key!r}: {exc}") from exc


def _encode_offset_key(key: OffsetKey) -> bytes:
    """OffsetCommitKey v1: version, group, topic (int16-length strings), partition (int32)."""
    return _offset_key_prefix(key.group, key.topic) + _offset_key_partition(key)


def _encode_offset_value_fixed(v: OffsetValue, version: int) -> bytes:
    """OffsetCommitValue v0-3 (not flexible; 1 and 3 are the ones written): version, offset,
    leader epoch (v3), metadata (int16-length string), commit timestamp, expire timestamp
    (v1), packed in one join (v3 without metadata, what clients commit most: in one pack)."""
    try:
        if version == 3 and not v.metadata:
            return _pack_offset_value_v3_no_metadata(version, v.offset, v.leader_epoch, 0, v.commit_timestamp)
        metadata = _utf8(v.metadata)
        head = (_OFFSET_VALUE_HEAD_V3.pack(version, v.offset, v.leader_epoch) if version >= 3
                else _OFFSET_VALUE_HEAD.pack(version, v.offset))  # fmt: skip
        tail = _I64_PAIR.pack(v.commit_timestamp, v.expire_timestamp) if version == 1 else _I64.pack(v.commit_timestamp)
    except struct.error as exc:
        raise RecordSchemaError(f"cannot encode {v!r}: {exc}") from exc
    return b"".join((head, _pack_i16(len(metadata)), metadata, tail))


def _encode_offset_value(w: Writer, v: OffsetValue, version: int) -> None:
    """OffsetCommitValue v4+ (flexible); v0-3: `_encode_offset_value_fixed`."""
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


# The consumer-group values are flexible: compact strings and arrays, tagged fields.


def _topic_partitions(w: Writer, items: tuple[TopicPartitions, ...]) -> None:
    w.length(len(items), True, True)
    for tp in items:
        w.buf += tp.topic_id.bytes
        w.length(len(tp.partitions), True, True)
        for p in tp.partitions:
            w.i32(p)
        w.no_tags()


def _encode_consumer_group_value(w: Writer, v: ConsumerGroupValue) -> None:
    if isinstance(v, ConsumerGroupMetadataValue):
        w.i32(v.epoch)
    elif isinstance(v, ConsumerGroupPartitionMetadataValue):
        w.length(len(v.topics), True, True)
        for t in v.topics:
            w.buf += t.topic_id.bytes
            _string(w, t.topic_name, True)
            w.i32(t.num_partitions)
            w.length(0, True, True)  # partitionMetadata: no racks
            w.no_tags()
    elif isinstance(v, ConsumerGroupMemberMetadataValue):
        _string(w, v.instance_id, True)
        _string(w, v.rack_id, True)
        _string(w, v.client_id, True)
        _string(w, v.client_host, True)
        w.length(len(v.subscribed_topic_names), True, True)
        for name in v.subscribed_topic_names:
            _string(w, name, True)
        _string(w, v.subscribed_topic_regex, True)
        w.i32(v.rebalance_timeout_ms)
        _string(w, v.server_assignor, True)
        # classicMemberMetadata: null, its default, so not written
    elif isinstance(v, ConsumerGroupTargetAssignmentMetadataValue):
        w.i32(v.assignment_epoch)
    elif isinstance(v, ConsumerGroupTargetAssignmentMemberValue):
        _topic_partitions(w, v.topic_partitions)
    else:
        w.i32(v.member_epoch)
        w.i32(v.previous_member_epoch)
        w.i8(v.state)
        _topic_partitions(w, v.assigned_partitions)
        _topic_partitions(w, v.partitions_pending_revocation)
    w.no_tags()


# Tuples, not `A | B`: in an expression a union is a new object per evaluation (about
# 150 ns, a few hundred instructions, per call).
_CLASSIC_VALUES: Final = (OffsetValue, GroupValue)
_CLASSIC_KEYS: Final = (OffsetKey, GroupKey)


def _check_value_version(version: int, classic: bool, record: str) -> None:
    """`version` must be one the value schema has: 0..4 for offsets and classic groups
    (`classic`), 0 for the consumer-group records."""
    if version not in (VALUE_VERSIONS if classic else (CONSUMER_GROUP_VALUE_VERSION,)):
        raise RecordSchemaError(f"unknown value version {version} for {record}")


def encode_key(key: RecordKey) -> bytes:
    """The record key as Kafka 3.9 writes it (OffsetCommitKey v1, GroupMetadataKey v2, the
    consumer-group keys in their only versions, 3..8)."""
    if isinstance(key, OffsetKey):  # the hot one: every OffsetCommit
        return _encode_offset_key(key)
    w = Writer(reserve_length=False)
    try:
        w.i16(key_version(key))
        _string(w, key.group, False)
        if isinstance(key, MEMBER_KEY_TYPES):
            _string(w, key.member_id, False)
    except struct.error as exc:
        raise RecordSchemaError(f"cannot encode {key!r}: {exc}") from exc
    return bytes(w.buf)


def written_value_version(value: RecordValue) -> int:
    """The value version Kafka 3.9 writes for `value` (MetadataVersion >= 2.3)."""
    if isinstance(value, OffsetValue):
        return OFFSET_VALUE_VERSION_WITH_EXPIRE if value.expire_timestamp != -1 else OFFSET_VALUE_VERSION
    if isinstance(value, GroupValue):
        return GROUP_VALUE_VERSION
    return CONSUMER_GROUP_VALUE_VERSION


def encode_value(value: RecordValue, version: int | None = None) -> bytes:
    """The record value in `version` (default: the one Kafka 3.9 writes, see
    `written_value_version`). Fields the version lacks are dropped."""
    if version is None:
        version = written_value_version(value)
        if isinstance(value, OffsetValue):  # the hot one: every OffsetCommit (a written version: 1 or 3)
            return _encode_offset_value_fixed(value, version)
    _check_value_version(version, isinstance(value, _CLASSIC_VALUES), type(value).__name__)
    if isinstance(value, OffsetValue) and version < FLEXIBLE_FROM:
        return _encode_offset_value_fixed(value, version)
    w = Writer(reserve_length=False)
    w.i16(version)
    try:
        if isinstance(value, OffsetValue):
            _encode_offset_value(w, value, version)
        elif isinstance(value, GroupValue):
            _encode_group_value(w, value, version)
        else:
            _encode_consumer_group_value(w, value)
    except struct.error as exc:
        raise RecordSchemaError(f"cannot encode {value!r}: {exc}") from exc
    return bytes(w.buf)


def encode_records(records: Sequence[tuple[RecordKey, RecordValue | None]]) -> list[tuple[bytes, bytes | None]]:
    """`(encode_key(key), encode_value(value))` of each record, in order (None: a tombstone):
    the same bytes, with the (version, group, topic) prefix of consecutive offset keys of one
    group and topic (an OffsetCommit's partitions) encoded once."""
    out: list[tuple[bytes, bytes | None]] = []
    group: str | None = None  # the group and topic of `prefix`
    topic = ""
    prefix = b""
    for key, value in records:
        if isinstance(key, OffsetKey):
            if key.group != group or key.topic != topic:
                prefix = _offset_key_prefix(key.group, key.topic)
                group, topic = key.group, key.topic
            encoded_key = prefix + _offset_key_partition(key)
        else:
            encoded_key = encode_key(key)
        out.append((encoded_key, None if value is None else encode_value(value)))
    return out


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


def _read_uuid(r: Reader) -> UUID:
    return UUID(bytes=bytes(r.raw(_UUID_BYTES)))


def _version(r: Reader, what: str) -> int:
    try:
        return r.i16()
    except MalformedRequest as exc:
        raise RecordSchemaError(f"could not read the version of the {what}") from exc


def decode_key(data: bytes | memoryview) -> RecordKey:
    """A record key of any version Kafka 3.9 can have written (0..8)."""
    r = Reader(memoryview(data))
    version = _version(r, "key")
    try:
        if version in (0, 1):
            return OffsetKey(_read_string(r, False, "group"), _read_string(r, False, "topic"), r.i32())
        if version == 2:
            return GroupKey(_read_string(r, False, "group"))
        key_type = _CONSUMER_GROUP_KEY_TYPES.get(version)
        if key_type is not None:
            group = _read_string(r, False, "groupId")
            if issubclass(key_type, MEMBER_KEY_TYPES):
                return key_type(group, _read_string(r, False, "memberId"))
            return key_type(group)
    except MalformedRequest as exc:
        raise RecordSchemaError(f"could not read key version {version}: {exc}") from exc
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


def _read_tags(r: Reader, known: Mapping[int, Callable[[Reader], object]]) -> None:
    """A tagged-field section: the tags in `known` are read (each within its size, which it
    must fill exactly) and dropped; unknown tags are skipped, as Kafka does."""
    count = r.uvarint()
    if count > r.end - r.pos:
        raise MalformedRequest("tagged-field count exceeds the bytes left")
    for _ in range(count):
        tag = r.uvarint()
        data = r.raw(r.uvarint())
        read = known.get(tag)
        if read is not None:
            inner = Reader(data)
            read(inner)
            if inner.pos != inner.end:
                raise RecordSchemaError(f"tagged field {tag} had {inner.end - inner.pos} bytes after its value")


def _read_classic_member_metadata(r: Reader) -> None:
    """ConsumerGroupMemberMetadataValue.ClassicMemberMetadata (a nullable tagged struct: a
    varint 0 = null, else 1 and the struct), checked and dropped."""
    if r.uvarint() == 0:
        return
    r.i32()  # sessionTimeoutMs

    def protocol() -> None:
        _read_string(r, True, "name")
        _read_bytes(r, True, "metadata")
        r.skip_tags()

    r.array(True, protocol)  # supportedProtocols
    r.skip_tags()


def _read_topic_partitions(r: Reader) -> tuple[TopicPartitions, ...]:
    def item() -> TopicPartitions:
        topic_id = _read_uuid(r)
        partitions = tuple(r.array(True, r.i32))
        r.skip_tags()
        return TopicPartitions(topic_id, partitions)

    return tuple(r.array(True, item))


def _read_topic_metadata(r: Reader) -> TopicMetadata:
    topic_id = _read_uuid(r)
    name = _read_string(r, True, "topicName")
    num_partitions = r.i32()

    def partition_metadata() -> None:  # racks: read and dropped
        r.i32()
        r.array(True, lambda: _read_string(r, True, "racks"))
        r.skip_tags()

    r.array(True, partition_metadata)
    r.skip_tags()
    return TopicMetadata(topic_id, name, num_partitions)


def _decode_consumer_group_value(r: Reader, key: ConsumerGroupKey) -> ConsumerGroupValue:
    value: ConsumerGroupValue
    tags: Mapping[int, Callable[[Reader], object]] = {}
    if isinstance(key, ConsumerGroupMetadataKey):
        value = ConsumerGroupMetadataValue(r.i32())
    elif isinstance(key, ConsumerGroupPartitionMetadataKey):
        value = ConsumerGroupPartitionMetadataValue(tuple(r.array(True, lambda: _read_topic_metadata(r))))
    elif isinstance(key, ConsumerGroupMemberMetadataKey):
        instance_id = _read_nullable_string(r, True, "instanceId")
        rack_id = _read_nullable_string(r, True, "rackId")
        client_id = _read_string(r, True, "clientId")
        client_host = _read_string(r, True, "clientHost")
        names = tuple(r.array(True, lambda: _read_string(r, True, "subscribedTopicNames")))
        regex = _read_nullable_string(r, True, "subscribedTopicRegex")
        rebalance_timeout = r.i32()
        assignor = _read_nullable_string(r, True, "serverAssignor")
        value = ConsumerGroupMemberMetadataValue(
            instance_id, rack_id, client_id, client_host, names, regex, assignor, rebalance_timeout
        )
        tags = {_CLASSIC_MEMBER_METADATA_TAG: _read_classic_member_metadata}
    elif isinstance(key, ConsumerGroupTargetAssignmentMetadataKey):
        value = ConsumerGroupTargetAssignmentMetadataValue(r.i32())
    elif isinstance(key, ConsumerGroupTargetAssignmentMemberKey):
        value = ConsumerGroupTargetAssignmentMemberValue(_read_topic_partitions(r))
    else:
        epoch, previous, state = r.i32(), r.i32(), r.i8()
        assigned = _read_topic_partitions(r)
        value = ConsumerGroupCurrentMemberAssignmentValue(epoch, previous, state, assigned, _read_topic_partitions(r))
    _read_tags(r, tags)
    return value


@overload
def decode_value(key: OffsetKey, data: bytes | memoryview | None) -> OffsetValue | None: ...
@overload
def decode_value(key: GroupKey, data: bytes | memoryview | None) -> GroupValue | None: ...
@overload
def decode_value(
    key: ConsumerGroupMetadataKey, data: bytes | memoryview | None
) -> ConsumerGroupMetadataValue | None: ...
@overload
def decode_value(
    key: ConsumerGroupPartitionMetadataKey, data: bytes | memoryview | None
) -> ConsumerGroupPartitionMetadataValue | None: ...
@overload
def decode_value(
    key: ConsumerGroupMemberMetadataKey, data: bytes | memoryview | None
) -> ConsumerGroupMemberMetadataValue | None: ...
@overload
def decode_value(
    key: ConsumerGroupTargetAssignmentMetadataKey, data: bytes | memoryview | None
) -> ConsumerGroupTargetAssignmentMetadataValue | None: ...
@overload
def decode_value(
    key: ConsumerGroupTargetAssignmentMemberKey, data: bytes | memoryview | None
) -> ConsumerGroupTargetAssignmentMemberValue | None: ...
@overload
def decode_value(
    key: ConsumerGroupCurrentMemberAssignmentKey, data: bytes | memoryview | None
) -> ConsumerGroupCurrentMemberAssignmentValue | None: ...
@overload
def decode_value(key: RecordKey, data: bytes | memoryview | None) -> RecordValue | None: ...
def decode_value(key: RecordKey, data: bytes | memoryview | None) -> RecordValue | None:
    """The value of the record whose key is `key` (the value type that goes with the key
    type: an OffsetValue for an OffsetKey, ..., a ConsumerGroupCurrentMemberAssignmentValue
    for a ConsumerGroupCurrentMemberAssignmentKey), None for a tombstone (a null value)."""
    if data is None:
        return None
    r = Reader(memoryview(data))
    version = _version(r, "value")
    _check_value_version(version, isinstance(key, _CLASSIC_KEYS), type(key).__name__)
    try:
        if isinstance(key, OffsetKey):
            return _decode_offset_value(r, version)
        if isinstance(key, GroupKey):
            return _decode_group_value(r, version)
        return _decode_consumer_group_value(r, key)
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
