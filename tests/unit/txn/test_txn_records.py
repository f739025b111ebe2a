"""`__transaction_state` records: Kafka's TransactionLogKey / TransactionLogValue schemas byte
for byte, and the partition of a transactional id.

The golden bytes are written out by hand from Kafka's schemas (TransactionLogKey.json,
TransactionLogValue.json): neither kio 0.6.5 nor kafka-python has these record schemas. The
partitions of the known ids were printed by Java (`String.hashCode()`, Kafka's `Utils.abs`).
`bytes.fromhex` skips the spaces that separate the fields.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.group.records import coordinator_partition
from broker.txn.records import (
    PartitionsSchema,
    TransactionLogKey,
    TransactionLogValue,
    TransactionRecordError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    transaction_partition,
)

ONGOING = TransactionLogValue(
    producer_id=1000,
    producer_epoch=5,
    transaction_timeout_ms=60_000,
    transaction_status=1,
    transaction_partitions=(PartitionsSchema("orders", (0, 2)), PartitionsSchema("t", (1,))),
    transaction_last_update_timestamp_ms=1_700_000_000_000,
    transaction_start_timestamp_ms=1_699_999_999_000,
)
GOLDEN_V0 = bytes.fromhex(
    "0000"  # version 0
    "00000000000003e8"  # ProducerId 1000
    "0005"  # ProducerEpoch 5
    "0000ea60"  # TransactionTimeoutMs 60000
    "01"  # TransactionStatus Ongoing
    "00000002"  # TransactionPartitions: 2 topics (int32 length)
    "0006 6f7264657273 00000002 00000000 00000002"  # "orders" [0, 2]
    "0001 74 00000001 00000001"  # "t" [1]
    "0000018bcfe56800"  # TransactionLastUpdateTimestampMs 1.7e12
    "0000018bcfe56418"  # TransactionStartTimestampMs 1.7e12 - 1000
)
GOLDEN_V1 = bytes.fromhex(
    "0001"
    "00000000000003e8 0005 0000ea60 01"
    "03"  # compact array: 2 + 1
    "07 6f7264657273 03 00000000 00000002 00"  # compact string, compact [int32], no tags
    "02 74 02 00000001 00"
    "0000018bcfe56800 0000018bcfe56418"
    "00"  # no tagged fields (all three at their defaults)
)


def test_golden_key() -> None:
    golden = bytes.fromhex("0000 0003 747831")  # version 0, "tx1"
    assert encode_key(TransactionLogKey("tx1")) == golden
    assert decode_key(golden) == TransactionLogKey("tx1")


def test_golden_value_v0_is_what_kafka_39_writes() -> None:
    assert encode_value(ONGOING) == GOLDEN_V0
    assert decode_value(GOLDEN_V0) == ONGOING


def test_golden_value_v1() -> None:
    assert encode_value(ONGOING, 1) == GOLDEN_V1
    assert decode_value(GOLDEN_V1) == ONGOING


def test_golden_value_v1_tagged_fields() -> None:
    value = TransactionLogValue(7, 0, 100, 4, (), 10, 5, previous_producer_id=999, next_producer_id=-1,
                                client_transaction_version=2)  # fmt: skip
    golden = bytes.fromhex(
        "0001 0000000000000007 0000 00000064 04"
        "01"  # an empty (not null) partition list
        "000000000000000a 0000000000000005"
        "02"  # two tagged fields, in tag order; NextProducerId (tag 1) is at its default
        "00 08 00000000000003e7"  # tag 0 PreviousProducerId 999, 8 bytes
        "02 02 0002"  # tag 2 ClientTransactionVersion 2, 2 bytes
    )
    assert encode_value(value, 1) == golden
    assert decode_value(golden) == value
    # Tagged fields Kafka does not know (tag 9) are skipped, in the value and in a partition.
    unknown = bytes.fromhex("0001 0000000000000007 0000 00000064 04 02 02 74 01 01 09 01 ff 0000000000000000 "
                            "0000000000000000 01 09 02 abcd")  # fmt: skip
    assert decode_value(unknown) == TransactionLogValue(7, 0, 100, 4, (PartitionsSchema("t", ()),), 0, 0)


def test_empty_transaction_has_null_partitions() -> None:
    empty = TransactionLogValue(42, 0, 60_000, 0, None, 1000, -1)
    v0 = encode_value(empty)
    assert v0 == bytes.fromhex("0000 000000000000002a 0000 0000ea60 00 ffffffff 00000000000003e8 ffffffffffffffff")
    assert decode_value(v0) == empty
    v1 = encode_value(empty, 1)
    assert v1 == bytes.fromhex("0001 000000000000002a 0000 0000ea60 00 00 00000000000003e8 ffffffffffffffff 00")
    assert decode_value(v1) == empty


def test_tombstone() -> None:
    assert decode_value(None) is None


def test_tagged_fields_cannot_be_written_in_version_0() -> None:
    with pytest.raises(TransactionRecordError, match="tagged"):
        encode_value(TransactionLogValue(1, 0, 1, 0, None, 0, -1, next_producer_id=5))


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"\x00", "version"),
        (bytes.fromhex("0002") + GOLDEN_V0[2:], "version 2"),
        (GOLDEN_V0[:-1], "could not read"),
        (GOLDEN_V0[:16] + b"\x08" + GOLDEN_V0[17:], "status 8"),  # no such state
        (GOLDEN_V0[:17] + bytes.fromhex("fffffffe") + GOLDEN_V0[21:], "negative"),
        (GOLDEN_V0[:17] + bytes.fromhex("7fffffff") + GOLDEN_V0[21:], "items"),  # a lying length
        (GOLDEN_V0[:21] + bytes.fromhex("ffff") + GOLDEN_V0[23:], "null"),  # a null topic
        (GOLDEN_V0[:21] + bytes.fromhex("0001 ff") + GOLDEN_V0[24:], "UTF-8"),
        (bytes.fromhex("0001 0000000000000007 0000 00000064 04 01 0000000000000000 0000000000000000 01 00 01 ff"),
         "tagged field 0"),  # PreviousProducerId must be 8 bytes
    ],
)  # fmt: skip
def test_bad_values_are_schema_errors(data: bytes, why: str) -> None:
    with pytest.raises(TransactionRecordError, match=why):
        decode_value(data)


@pytest.mark.parametrize("data", [b"", bytes.fromhex("0001 0003 747831"), bytes.fromhex("0000 0005 7478")])
def test_bad_keys_are_schema_errors(data: bytes) -> None:
    with pytest.raises(TransactionRecordError):
        decode_key(data)


def test_values_that_do_not_fit_their_fields() -> None:
    with pytest.raises(TransactionRecordError):
        encode_value(TransactionLogValue(1, 2**15, 1, 0, None, 0, -1))  # epoch is an int16
    with pytest.raises(TransactionRecordError):
        encode_key(TransactionLogKey("x" * 32768))
    with pytest.raises(TransactionRecordError):
        encode_value(TransactionLogValue(1, 0, 1, 9, None, 0, -1))


I16 = st.integers(-(2**15), 2**15 - 1)
I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
PARTITIONS = st.lists(
    st.builds(PartitionsSchema, st.text(max_size=8), st.lists(I32, max_size=4).map(tuple)), max_size=3
).map(tuple)


@given(
    st.builds(TransactionLogValue, I64, I16, I32, st.integers(0, 7), st.none() | PARTITIONS, I64, I64, I64, I64, I16),
    st.text(max_size=20),
)
def test_round_trip(value: TransactionLogValue, transactional_id: str) -> None:
    assert decode_value(encode_value(value, 1)) == value
    plain = TransactionLogValue(*[getattr(value, f.name) for f in dataclasses.fields(value)[:7]])
    assert decode_value(encode_value(plain, 0)) == plain
    assert decode_key(encode_key(TransactionLogKey(transactional_id))) == TransactionLogKey(transactional_id)


# (transactional id, hashCode, partition of 50, partition of 7), printed by `java H.java`.
JAVA = [("my-txn", -1061187895, 45, 5), ("transactional-id-7", 1051133897, 47, 2), ("eos-app-0_1", 1476397426, 26, 0)]


@pytest.mark.parametrize(("tid", "java_hash", "of_50", "of_7"), JAVA)
def test_transaction_partition_matches_java(tid: str, java_hash: int, of_50: int, of_7: int) -> None:
    assert transaction_partition(tid, 50) == of_50
    assert transaction_partition(tid, 7) == of_7


@given(st.text(max_size=30), st.integers(1, 200))
def test_transaction_partition_is_the_group_rule(tid: str, n: int) -> None:
    assert transaction_partition(tid, n) == coordinator_partition(tid, n)
