"""KIP-848's consumer-group records of `__consumer_offsets` (key versions 3..8, value version 0):
Kafka's schemas byte for byte.

The golden bytes are written out by hand from Kafka's schemas
(group-coordinator/src/main/resources/common/message/ConsumerGroup*.json: the keys are not
flexible, every value is flexible: compact strings and arrays are varint length + 1, a uuid is
16 bytes, a tagged-field section ends every struct). `bytes.fromhex` skips the spaces that
separate the fields.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.group.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerGroupValue,
    GroupKey,
    OffsetKey,
    RecordSchemaError,
    TopicMetadata,
    TopicPartitions,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    group_of,
    key_version,
)

I8 = st.integers(-(2**7), 2**7 - 1)
I32 = st.integers(-(2**31), 2**31 - 1)
TEXT = st.text(max_size=20)
UUIDS = st.binary(min_size=16, max_size=16).map(lambda b: UUID(bytes=b))
TOPIC_PARTITIONS = st.lists(st.builds(TopicPartitions, UUIDS, st.lists(I32, max_size=6).map(tuple)), max_size=4).map(
    tuple
)

# (key strategy, value strategy) of each record type, in key-version order 3..8.
RECORD_TYPES = [
    (st.builds(ConsumerGroupMetadataKey, TEXT), st.builds(ConsumerGroupMetadataValue, I32)),
    (
        st.builds(ConsumerGroupPartitionMetadataKey, TEXT),
        st.builds(
            ConsumerGroupPartitionMetadataValue,
            st.lists(st.builds(TopicMetadata, UUIDS, TEXT, I32), max_size=4).map(tuple),
        ),
    ),
    (
        st.builds(ConsumerGroupMemberMetadataKey, TEXT, TEXT),
        st.builds(
            ConsumerGroupMemberMetadataValue,
            st.none() | TEXT,
            st.none() | TEXT,
            TEXT,
            TEXT,
            st.lists(TEXT, max_size=4).map(tuple),
            st.none() | TEXT,
            st.none() | TEXT,
            I32,
        ),
    ),
    (
        st.builds(ConsumerGroupTargetAssignmentMetadataKey, TEXT),
        st.builds(ConsumerGroupTargetAssignmentMetadataValue, I32),
    ),
    (
        st.builds(ConsumerGroupTargetAssignmentMemberKey, TEXT, TEXT),
        st.builds(ConsumerGroupTargetAssignmentMemberValue, TOPIC_PARTITIONS),
    ),
    (
        st.builds(ConsumerGroupCurrentMemberAssignmentKey, TEXT, TEXT),
        st.builds(ConsumerGroupCurrentMemberAssignmentValue, I32, I32, I8, TOPIC_PARTITIONS, TOPIC_PARTITIONS),
    ),
]
records = st.one_of(*(st.tuples(k, v) for k, v in RECORD_TYPES))

U = UUID("00010203-0405-0607-0809-0a0b0c0d0e0f")
U_HEX = "000102030405060708090a0b0c0d0e0f"


# ------------------------------------------------------------------ round trips


@given(records)
def test_every_record_type_round_trips(record: tuple[ConsumerGroupKey, ConsumerGroupValue]) -> None:
    key, value = record
    raw_key, raw_value = encode_key(key), encode_value(value)
    assert decode_key(raw_key) == key
    assert decode_value(key, raw_value) == value
    assert struct.unpack_from(">h", raw_key)[0] == key_version(key)
    assert raw_value[:2] == b"\x00\x00"  # the only value version, and the one Kafka 3.9 writes
    assert encode_value(value, 0) == raw_value
    assert decode_value(key, None) is None  # a tombstone


def test_key_versions_and_group_of_every_key_type() -> None:
    keys = [
        OffsetKey("g", "t", 0),
        GroupKey("g"),
        ConsumerGroupMetadataKey("g"),
        ConsumerGroupPartitionMetadataKey("g"),
        ConsumerGroupMemberMetadataKey("g", "m"),
        ConsumerGroupTargetAssignmentMetadataKey("g"),
        ConsumerGroupTargetAssignmentMemberKey("g", "m"),
        ConsumerGroupCurrentMemberAssignmentKey("g", "m"),
    ]
    assert [key_version(k) for k in keys] == list(range(1, 9))
    assert {group_of(k) for k in keys} == {"g"}


# ------------------------------------------------------------------ golden bytes (by hand)


def check(key: ConsumerGroupKey, golden_key: str, value: ConsumerGroupValue, golden_value: str) -> None:
    raw_key, raw_value = bytes.fromhex(golden_key), bytes.fromhex(golden_value)
    assert encode_key(key) == raw_key
    assert decode_key(raw_key) == key
    assert encode_value(value) == raw_value
    assert decode_value(key, raw_value) == value


def test_golden_consumer_group_metadata() -> None:
    check(
        ConsumerGroupMetadataKey("grp"),
        "0003 0003 677270",  # key version 3, groupId "grp" (int16 length)
        ConsumerGroupMetadataValue(epoch=10),
        "0000 0000000a 00",  # value version 0, epoch 10, no tagged fields
    )


def test_golden_consumer_group_partition_metadata() -> None:
    key = ConsumerGroupPartitionMetadataKey("grp")
    value = ConsumerGroupPartitionMetadataValue((TopicMetadata(U, "orders", 6),))
    check(
        key,
        "0004 0003 677270",
        value,
        "0000"
        "02"  # 1 topic (compact array: n + 1)
        f"{U_HEX}"  # topicId
        "07 6f7264657273"  # topicName "orders" (compact: length + 1)
        "00000006"  # numPartitions
        "01"  # partitionMetadata: empty
        "00"  # the topic's tagged fields
        "00",  # the value's tagged fields
    )
    # Racks, as Kafka 3.9 writes them (partition 0 on rack "r1"), are read and dropped.
    with_racks = bytes.fromhex(f"0000 02 {U_HEX} 07 6f7264657273 00000006 02 00000000 02 03 7231 00 00 00")
    assert decode_value(key, with_racks) == value


def test_golden_consumer_group_member_metadata() -> None:
    key = ConsumerGroupMemberMetadataKey("grp", "m-1")
    value = ConsumerGroupMemberMetadataValue(
        instance_id=None,
        rack_id="r1",
        client_id="c",
        client_host="/h",
        subscribed_topic_names=("a", "b"),
        subscribed_topic_regex=None,
        server_assignor="uniform",
        rebalance_timeout_ms=300_000,
    )
    golden = (
        "0000"
        "00"  # instanceId null
        "03 7231"  # rackId "r1"
        "02 63"  # clientId "c"
        "03 2f68"  # clientHost "/h"
        "03 02 61 02 62"  # subscribedTopicNames ["a", "b"]
        "00"  # subscribedTopicRegex null
        "000493e0"  # rebalanceTimeoutMs 300000
        "08 756e69666f726d"  # serverAssignor "uniform"
        "00"  # no tagged fields (classicMemberMetadata null)
    )
    check(key, "0005 0003 677270 0003 6d2d31", value, golden)  # groupId "grp", memberId "m-1"

    # classicMemberMetadata (tag 0) of a member on the classic protocol: read and dropped.
    classic = (
        "01"  # not null
        "00002710"  # sessionTimeoutMs 10000
        "02 06 72616e6765 03 0102 00"  # supportedProtocols [{name "range", metadata 0102}]
        "00"  # the struct's tagged fields
    )  # 17 bytes
    untagged = golden[:-2]
    assert decode_value(key, bytes.fromhex(untagged + "01 00 11" + classic)) == value  # 1 field: tag 0, 17 bytes
    assert decode_value(key, bytes.fromhex(untagged + "01 00 01 00")) == value  # present but null
    # A tagged field Kafka does not know (tag 5, 2 bytes) is skipped.
    assert decode_value(key, bytes.fromhex(untagged + "01 05 02 abcd")) == value
    # The struct must fill its size exactly, and decode.
    with pytest.raises(RecordSchemaError, match="tagged field 0 had 1 bytes after its value"):
        decode_value(key, bytes.fromhex(untagged + "01 00 12" + classic + "ff"))
    with pytest.raises(RecordSchemaError):
        decode_value(key, bytes.fromhex(untagged + "01 00 10" + classic[:-2]))
    with pytest.raises(RecordSchemaError, match="name was serialized as null"):
        decode_value(key, bytes.fromhex(untagged + "01 00 0c 01 00002710 02 00 03 0102 00 00"))


def test_golden_consumer_group_target_assignment_metadata() -> None:
    check(
        ConsumerGroupTargetAssignmentMetadataKey("grp"),
        "0006 0003 677270",
        ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch=5),
        "0000 00000005 00",
    )


def test_golden_consumer_group_target_assignment_member() -> None:
    check(
        ConsumerGroupTargetAssignmentMemberKey("grp", "m-1"),
        "0007 0003 677270 0003 6d2d31",
        ConsumerGroupTargetAssignmentMemberValue((TopicPartitions(U, (0, 2)),)),
        f"0000 02 {U_HEX} 03 00000000 00000002 00 00",  # 1 topic: id, partitions [0, 2], tags; tags
    )


def test_golden_consumer_group_current_member_assignment() -> None:
    check(
        ConsumerGroupCurrentMemberAssignmentKey("grp", "m-1"),
        "0008 0003 677270 0003 6d2d31",
        ConsumerGroupCurrentMemberAssignmentValue(
            member_epoch=5,
            previous_member_epoch=4,
            state=1,  # UNREVOKED_PARTITIONS
            assigned_partitions=(TopicPartitions(U, (1,)),),
            partitions_pending_revocation=(),
        ),
        "0000"
        "00000005"  # memberEpoch
        "00000004"  # previousMemberEpoch
        "01"  # state (int8)
        f"02 {U_HEX} 02 00000001 00"  # assignedPartitions [{topicId, [1]}]
        "01"  # partitionsPendingRevocation: empty
        "00",
    )


# ------------------------------------------------------------------ bad bytes and values

KEYS = [
    ConsumerGroupMetadataKey("g"),
    ConsumerGroupPartitionMetadataKey("g"),
    ConsumerGroupMemberMetadataKey("g", "m"),
    ConsumerGroupTargetAssignmentMetadataKey("g"),
    ConsumerGroupTargetAssignmentMemberKey("g", "m"),
    ConsumerGroupCurrentMemberAssignmentKey("g", "m"),
]


@pytest.mark.parametrize("key", KEYS, ids=lambda k: type(k).__name__)
@pytest.mark.parametrize("version", [-1, 1, 4, 32767])
def test_unknown_value_versions(key: ConsumerGroupKey, version: int) -> None:
    with pytest.raises(RecordSchemaError, match=f"unknown value version {version} for {type(key).__name__}"):
        decode_value(key, struct.pack(">h", version) + bytes(40))


def test_unknown_value_versions_are_refused_on_encode() -> None:
    with pytest.raises(RecordSchemaError, match="unknown value version 1"):
        encode_value(ConsumerGroupMetadataValue(1), 1)


def test_nulls_in_non_nullable_fields() -> None:
    with pytest.raises(RecordSchemaError, match="groupId was serialized as null"):
        decode_key(b"\x00\x03\xff\xff")
    with pytest.raises(RecordSchemaError, match="memberId was serialized as null"):
        decode_key(b"\x00\x05\x00\x01g\xff\xff")
    member = ConsumerGroupMemberMetadataKey("g", "m")
    with pytest.raises(RecordSchemaError, match="clientId was serialized as null"):
        decode_value(member, bytes.fromhex("0000 00 00 00 01 01 00 ffffffff 00 00"))
    with pytest.raises(RecordSchemaError, match="null in a non-nullable array"):  # subscribedTopicNames
        decode_value(member, bytes.fromhex("0000 00 00 01 01 00 00 ffffffff 00 00"))
    with pytest.raises(RecordSchemaError, match="topicName was serialized as null"):
        decode_value(ConsumerGroupPartitionMetadataKey("g"), bytes.fromhex(f"0000 02 {U_HEX} 00 00000001 01 00 00"))


def test_out_of_range_values_are_refused_on_encode() -> None:
    with pytest.raises(RecordSchemaError):
        encode_value(ConsumerGroupCurrentMemberAssignmentValue(1, 0, 128, (), ()))  # state is an int8
    with pytest.raises(RecordSchemaError):
        encode_value(ConsumerGroupTargetAssignmentMemberValue((TopicPartitions(U, (2**31,)),)))
    with pytest.raises(RecordSchemaError):
        encode_value(ConsumerGroupMetadataValue(-(2**31) - 1))
    with pytest.raises(RecordSchemaError, match="longer than 32767"):
        encode_key(ConsumerGroupMemberMetadataKey("g", "m" * 32768))
    with pytest.raises(RecordSchemaError, match="UTF-8"):
        encode_value(ConsumerGroupPartitionMetadataValue((TopicMetadata(U, "\udc00", 1),)))


@settings(max_examples=300)
@given(records, st.data())
def test_every_truncation_raises_schema_error(
    record: tuple[ConsumerGroupKey, ConsumerGroupValue], data: st.DataObject
) -> None:
    key, value = record
    raw_key, raw_value = encode_key(key), encode_value(value)
    with pytest.raises(RecordSchemaError):
        decode_key(raw_key[: data.draw(st.integers(0, len(raw_key) - 1))])
    with pytest.raises(RecordSchemaError):
        decode_value(key, raw_value[: data.draw(st.integers(0, len(raw_value) - 1))])


def decodes_or_raises_schema_error(decode: Callable[[], object]) -> None:
    try:
        decode()
    except RecordSchemaError:
        pass


@settings(max_examples=500)
@given(st.binary(max_size=80))
def test_garbage_raises_schema_error_only(garbage: bytes) -> None:
    for key in KEYS:
        decodes_or_raises_schema_error(lambda k=key: decode_key(struct.pack(">h", key_version(k)) + garbage))
        decodes_or_raises_schema_error(lambda k=key: decode_value(k, garbage))
        decodes_or_raises_schema_error(lambda k=key: decode_value(k, b"\x00\x00" + garbage))
