"""`__consumer_offsets` records: Kafka's key/value schemas byte for byte, and the coordinator
partition of a group.

The golden bytes below are written out by hand from Kafka's schemas (OffsetCommitKey.json,
OffsetCommitValue.json, GroupMetadataKey.json, GroupMetadataValue.json): kio 0.6.5 has no
serializers for these record schemas and kafka-python none either. The coordinator partitions
of the known pairs were computed with Java (`String.hashCode()`, Kafka's `Utils.abs`).
`bytes.fromhex` skips the spaces that separate the fields.
"""

from __future__ import annotations

import dataclasses
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.group.records import (
    GroupKey,
    GroupValue,
    MemberValue,
    OffsetKey,
    OffsetValue,
    RecordSchemaError,
    coordinator_partition,
    decode_key,
    decode_value,
    encode_key,
    encode_records,
    encode_value,
)

I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
TEXT = st.text(max_size=20)
BLOB = st.binary(max_size=40)

offset_keys = st.builds(OffsetKey, TEXT, TEXT, I32)
group_keys = st.builds(GroupKey, TEXT)
offset_values = st.builds(OffsetValue, I64, I32, TEXT, I64, I64)
members = st.builds(MemberValue, TEXT, st.none() | TEXT, TEXT, TEXT, I32, I32, BLOB, BLOB)
group_values = st.builds(
    GroupValue, TEXT, I32, st.none() | TEXT, st.none() | TEXT, I64, st.lists(members, max_size=4).map(tuple)
)


def offset_value_in(v: OffsetValue, version: int) -> OffsetValue:
    """What a value reads back as after a round trip through `version`: the fields the
    version lacks take their schema defaults."""
    return dataclasses.replace(
        v,
        leader_epoch=v.leader_epoch if version >= 3 else -1,
        expire_timestamp=v.expire_timestamp if version == 1 else -1,
    )


def group_value_in(v: GroupValue, version: int) -> GroupValue:
    return dataclasses.replace(
        v,
        current_state_timestamp=v.current_state_timestamp if version >= 2 else -1,
        members=tuple(
            dataclasses.replace(
                m,
                group_instance_id=m.group_instance_id if version >= 3 else None,
                rebalance_timeout_ms=m.rebalance_timeout_ms if version >= 1 else -1,
            )
            for m in v.members
        ),
    )


# ------------------------------------------------------------------ round trips


@given(offset_keys | group_keys)
def test_keys_round_trip(key: OffsetKey | GroupKey) -> None:
    assert decode_key(encode_key(key)) == key


@given(offset_keys, offset_values, st.sampled_from(range(5)))
def test_offset_values_round_trip_in_every_version(key: OffsetKey, value: OffsetValue, version: int) -> None:
    assert decode_value(key, encode_value(value, version)) == offset_value_in(value, version)


@given(group_keys, group_values, st.sampled_from(range(5)))
def test_group_values_round_trip_in_every_version(key: GroupKey, value: GroupValue, version: int) -> None:
    assert decode_value(key, encode_value(value, version)) == group_value_in(value, version)


@given(offset_values)
def test_offset_values_are_written_as_kafka_39_writes_them(value: OffsetValue) -> None:
    data = encode_value(value)
    expected_version = 1 if value.expire_timestamp != -1 else 3
    assert struct.unpack_from(">h", data)[0] == expected_version
    assert data == encode_value(value, expected_version)


@given(group_values)
def test_group_values_are_written_in_version_3(value: GroupValue) -> None:
    assert encode_value(value)[:2] == b"\x00\x03"
    assert decode_value(GroupKey("g"), encode_value(value)) == value


@given(offset_keys)
def test_key_version_0_reads_as_version_1(key: OffsetKey) -> None:
    assert decode_key(b"\x00\x00" + encode_key(key)[2:]) == key


def test_a_tombstone_is_none() -> None:
    assert decode_value(OffsetKey("g", "t", 0), None) is None
    assert decode_value(GroupKey("g"), None) is None


# Keys of two groups and two topics, so that runs of one group and topic are common.
few_offset_keys = st.builds(OffsetKey, st.sampled_from(["g", "h"]), st.sampled_from(["t", "u"]), I32)


@given(st.lists(offset_keys | group_keys | few_offset_keys, max_size=8))
def test_encode_records_is_encode_key_and_encode_value_of_each(keys: list[OffsetKey | GroupKey]) -> None:
    """Consecutive offset keys of one group and topic share their prefix's encoding: the bytes
    are each record's own, tombstones included, in order."""
    records: list[tuple[OffsetKey | GroupKey, OffsetValue | GroupValue | None]] = []
    for i, key in enumerate(keys):
        value: OffsetValue | GroupValue | None
        if i % 3 == 2:
            value = None
        elif isinstance(key, OffsetKey):
            value = OffsetValue(i, -1, "" if i % 2 else "md", 1_700_000_000_000, -1 if i % 4 else 5)
        else:
            value = GroupValue("consumer", i, "range", None, 7, ())
        records.append((key, value))
    assert encode_records(records) == [(encode_key(k), None if v is None else encode_value(v)) for k, v in records]


@given(offset_values.map(lambda v: dataclasses.replace(v, metadata="", expire_timestamp=-1)))
def test_an_offset_value_without_metadata_has_the_general_layout(value: OffsetValue) -> None:
    """Version 3 without metadata is packed in one go: the same bytes, field by field."""
    assert encode_value(value) == struct.pack(">hqi", 3, value.offset, value.leader_epoch) + b"\0\0" + struct.pack(
        ">q", value.commit_timestamp
    )
    assert decode_value(OffsetKey("g", "t", 0), encode_value(value)) == value


# ------------------------------------------------------------------ golden bytes (by hand)


def test_golden_offset_key() -> None:
    key = OffsetKey("grp", "orders", 7)
    golden = bytes.fromhex("0001 0003 677270 0006 6f7264657273 00000007")  # version, "grp", "orders", 7
    assert encode_key(key) == golden
    assert decode_key(golden) == key


def test_golden_group_key() -> None:
    golden = bytes.fromhex("0002 0003 677270")
    assert encode_key(GroupKey("grp")) == golden
    assert decode_key(golden) == GroupKey("grp")


def test_golden_offset_values() -> None:
    v3 = OffsetValue(offset=42, leader_epoch=5, metadata="md", commit_timestamp=1_700_000_000_000)
    golden_v3 = bytes.fromhex(
        "0003"  # version
        "000000000000002a"  # offset 42
        "00000005"  # leaderEpoch 5
        "0002 6d64"  # metadata "md" (int16 length)
        "0000018bcfe56800"  # commitTimestamp 1.7e12 ms
    )
    assert encode_value(v3) == golden_v3
    assert decode_value(OffsetKey("g", "t", 0), golden_v3) == v3

    v1 = OffsetValue(offset=42, leader_epoch=-1, metadata="", commit_timestamp=1000, expire_timestamp=2000)
    golden_v1 = bytes.fromhex(
        "0001 000000000000002a 0000 00000000000003e8 00000000000007d0"  # no leaderEpoch in v1
    )
    assert encode_value(v1) == golden_v1
    assert decode_value(OffsetKey("g", "t", 0), golden_v1) == v1

    golden_v4 = bytes.fromhex(
        "0004"
        "000000000000002a"
        "00000005"
        "03 6d64"  # compact string: varint length + 1
        "0000018bcfe56800"
        "00"  # no tagged fields
    )
    assert encode_value(v3, 4) == golden_v4
    assert decode_value(OffsetKey("g", "t", 0), golden_v4) == v3
    # A tagged field Kafka does not know (tag 9, 2 bytes) is skipped.
    assert decode_value(OffsetKey("g", "t", 0), golden_v4[:-1] + bytes.fromhex("01 09 02 abcd")) == v3


def test_golden_group_value() -> None:
    member = MemberValue(
        member_id="m-1",
        group_instance_id=None,
        client_id="c",
        client_host="/h",
        rebalance_timeout_ms=300_000,
        session_timeout_ms=10_000,
        subscription=b"\x01\x02",
        assignment=b"",
    )
    value = GroupValue("consumer", 3, "range", "m-1", 1000, (member,))
    golden_v3 = bytes.fromhex(
        "0003"
        "0008 636f6e73756d6572"  # protocolType "consumer"
        "00000003"  # generation
        "0005 72616e6765"  # protocol "range"
        "0003 6d2d31"  # leader "m-1"
        "00000000000003e8"  # currentStateTimestamp
        "00000001"  # 1 member (int32 array length)
        "0003 6d2d31"  # memberId
        "ffff"  # groupInstanceId null
        "0001 63"  # clientId
        "0002 2f68"  # clientHost
        "000493e0"  # rebalanceTimeout 300000
        "00002710"  # sessionTimeout 10000
        "00000002 0102"  # subscription (int32 length)
        "00000000"  # assignment: empty, not null
    )
    assert encode_value(value) == golden_v3
    assert decode_value(GroupKey("grp"), golden_v3) == value

    golden_v4 = bytes.fromhex(
        "0004"
        "09 636f6e73756d6572"
        "00000003"
        "06 72616e6765"
        "04 6d2d31"
        "00000000000003e8"
        "02"  # compact array: 1 member + 1
        "04 6d2d31"
        "00"  # groupInstanceId null
        "02 63"
        "03 2f68"
        "000493e0"
        "00002710"
        "03 0102"
        "01"  # empty bytes
        "00"  # member's tagged fields
        "00"  # value's tagged fields
    )
    assert encode_value(value, 4) == golden_v4
    assert decode_value(GroupKey("grp"), golden_v4) == value

    # Version 0: no currentStateTimestamp, groupInstanceId or rebalanceTimeout; a null protocol and leader.
    empty = GroupValue("", 0, None, None, -1, ())
    golden_v0 = bytes.fromhex("0000 0000 00000000 ffff ffff 00000000")
    assert encode_value(empty, 0) == golden_v0
    assert decode_value(GroupKey("grp"), golden_v0) == empty


# ------------------------------------------------------------------ bad bytes


@pytest.mark.parametrize("version", [-1, 9, 32767])
def test_unknown_key_versions(version: int) -> None:
    with pytest.raises(RecordSchemaError, match=f"unknown key version {version}"):
        decode_key(struct.pack(">h", version) + b"\x00\x01g")


@pytest.mark.parametrize("version", [-1, 5, 100])
def test_unknown_value_versions(version: int) -> None:
    with pytest.raises(RecordSchemaError, match=f"unknown value version {version}"):
        decode_value(OffsetKey("g", "t", 0), struct.pack(">h", version) + bytes(40))
    with pytest.raises(RecordSchemaError, match=f"unknown value version {version}"):
        decode_value(GroupKey("g"), struct.pack(">h", version) + bytes(40))


def test_nulls_in_non_nullable_fields() -> None:
    with pytest.raises(RecordSchemaError, match="group was serialized as null"):
        decode_key(b"\x00\x02\xff\xff")
    with pytest.raises(RecordSchemaError, match="metadata was serialized as null"):
        decode_value(OffsetKey("g", "t", 0), b"\x00\x03" + bytes(12) + b"\xff\xff" + bytes(8))
    with pytest.raises(RecordSchemaError, match="metadata was serialized as null"):
        decode_value(OffsetKey("g", "t", 0), b"\x00\x04" + bytes(12) + b"\x00" + bytes(9))
    no_members = encode_value(GroupValue("", 0, None, None, -1, ()))[:-4] + b"\xff\xff\xff\xff"
    with pytest.raises(RecordSchemaError):
        decode_value(GroupKey("g"), no_members)


def test_bad_utf8_and_overlong_strings() -> None:
    with pytest.raises(RecordSchemaError, match="UTF-8"):
        decode_key(b"\x00\x02\x00\x02\xc3\x28")
    # A compact string may not be longer than 32767 bytes, as in Kafka's readers.
    big = 40_000
    varint = bytearray()
    n = big + 1
    while n >= 0x80:
        varint.append((n & 0x7F) | 0x80)
        n >>= 7
    varint.append(n)
    data = b"\x00\x04" + bytes(12) + bytes(varint) + b"x" * big + bytes(9)
    with pytest.raises(RecordSchemaError, match="invalid length"):
        decode_value(OffsetKey("g", "t", 0), data)
    with pytest.raises(RecordSchemaError, match="longer than 32767"):
        encode_key(GroupKey("x" * 32768))
    with pytest.raises(RecordSchemaError, match="longer than 32767"):
        encode_value(OffsetValue(0, -1, "é" * 16384, 0))
    with pytest.raises(RecordSchemaError, match="UTF-8"):
        encode_key(GroupKey("\ud800"))


def test_out_of_range_ints_are_refused_on_encode() -> None:
    with pytest.raises(RecordSchemaError):
        encode_key(OffsetKey("g", "t", 2**31))
    with pytest.raises(RecordSchemaError):
        encode_value(OffsetValue(2**63, -1, "", 0))
    with pytest.raises(RecordSchemaError):
        encode_value(GroupValue("", 2**31, None, None, -1, ()))
    with pytest.raises(RecordSchemaError):
        encode_value(OffsetValue(0, -1, "", 0), 5)
    with pytest.raises(RecordSchemaError):
        encode_records([(OffsetKey("g", "t", 0), None), (OffsetKey("g", "t", 2**31), None)])
    with pytest.raises(RecordSchemaError):
        encode_records([(OffsetKey("g", "t", 0), OffsetValue(0, 2**31, "", 0))])


@settings(max_examples=300)
@given(offset_keys | group_keys, offset_values | group_values, st.sampled_from(range(5)), st.data())
def test_every_truncation_raises_schema_error(
    key: OffsetKey | GroupKey, value: OffsetValue | GroupValue, version: int, data: st.DataObject
) -> None:
    if isinstance(key, OffsetKey) != isinstance(value, OffsetValue):
        key = OffsetKey("g", "t", 0) if isinstance(value, OffsetValue) else GroupKey("g")
    raw_key, raw_value = encode_key(key), encode_value(value, version)
    cut_key = data.draw(st.integers(0, len(raw_key) - 1))
    cut_value = data.draw(st.integers(0, len(raw_value) - 1))
    with pytest.raises(RecordSchemaError):
        decode_key(raw_key[:cut_key])
    with pytest.raises(RecordSchemaError):
        decode_value(key, raw_value[:cut_value])


@settings(max_examples=500)
@given(st.binary(max_size=80), st.sampled_from(range(5)))
def test_garbage_raises_schema_error_only(garbage: bytes, version: int) -> None:
    for decode in (
        lambda: decode_key(garbage),
        lambda: decode_key(b"\x00\x01" + garbage),
        lambda: decode_key(b"\x00\x02" + garbage),
        lambda: decode_value(OffsetKey("g", "t", 0), garbage),
        lambda: decode_value(GroupKey("g"), garbage),
        lambda: decode_value(OffsetKey("g", "t", 0), struct.pack(">h", version) + garbage),
        lambda: decode_value(GroupKey("g"), struct.pack(">h", version) + garbage),
    ):
        try:
            decode()
        except RecordSchemaError:
            pass


def test_decode_accepts_memoryview() -> None:
    key = OffsetKey("g", "t", 3)
    value = OffsetValue(1, 2, "m", 3)
    assert decode_key(memoryview(encode_key(key))) == key
    assert decode_value(key, memoryview(encode_value(value))) == value


# ------------------------------------------------------------------ coordinator partition


def reference_java_hash(s: str) -> int:
    """Java's String.hashCode, written independently: over UTF-16 code units, int32 overflow."""
    units: list[int] = []
    for ch in s:
        cp = ord(ch)
        if cp >= 0x10000:
            cp -= 0x10000
            units += [0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF)]
        else:
            units.append(cp)
    h = 0
    for u in units:
        h = (h * 31 + u) % 2**32
    return h if h < 2**31 else h - 2**32


def reference_partition(group: str, n: int) -> int:
    h = reference_java_hash(group)
    return (0 if h == -(2**31) else abs(h)) % n


# (group id, hashCode, partition of 50, partition of 7), printed by `java H.java` with
# String.hashCode() and Kafka's Utils.abs (Integer.MIN_VALUE -> 0).
JAVA_PAIRS = [
    ("my-group", -1906497762, 12, 1),
    ("", 0, 0, 0),
    ("\u00fcn\u00efc\u00f6d\u00e9", -609221899, 49, 6),  # "ünïcödé"
    ("polygenelubricants", -2147483648, 0, 0),  # hashCode == Integer.MIN_VALUE
    ("console-consumer-12345", 158455506, 6, 6),
    ("\U0001f600-group", -1198440043, 43, 3),  # a surrogate pair: two UTF-16 units
    ("a", 97, 47, 6),
]


@pytest.mark.parametrize(("group", "java_hash", "of_50", "of_7"), JAVA_PAIRS)
def test_coordinator_partition_matches_java(group: str, java_hash: int, of_50: int, of_7: int) -> None:
    assert reference_java_hash(group) == java_hash
    assert coordinator_partition(group, 50) == of_50
    assert coordinator_partition(group, 7) == of_7


@given(st.text(max_size=30), st.integers(1, 1000))
def test_coordinator_partition_matches_the_reference(group: str, n: int) -> None:
    p = coordinator_partition(group, n)
    assert p == reference_partition(group, n)
    assert 0 <= p < n


def test_coordinator_partition_needs_partitions() -> None:
    with pytest.raises(ValueError):
        coordinator_partition("g", 0)
