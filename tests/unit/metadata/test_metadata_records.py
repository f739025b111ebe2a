"""Metadata records: round trips, Kafka's exact bytes, versions, JSON, and fuzzed decoding."""

from __future__ import annotations

import dataclasses
import struct
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quorum.metadata import records as R
from quorum.metadata.records import (
    BrokerEndpoint,
    BrokerFeature,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RecordDecodeError,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    decode_record,
    decode_record_with_version,
    encode_record,
    is_unclean_election,
    kafka_uuid_string,
    record_to_json,
    record_type_name,
    write_version,
)

U = uuid.UUID("01020304-0506-0708-090a-0b0c0d0e0f10")
U_BYTES = bytes(range(1, 17))


def i32(*values: int) -> bytes:
    return b"".join(struct.pack(">i", v) for v in values)


# --------------------------------------------------------------------------- strategies

int8 = st.integers(-(2**7), 2**7 - 1)
int16 = st.integers(-(2**15), 2**15 - 1)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
uint16 = st.integers(0, 2**16 - 1)
text = st.text(max_size=40)
ids = st.lists(int32, max_size=8).map(tuple)
uuids = st.uuids()
uuid_lists = st.lists(uuids, max_size=4).map(tuple)

endpoints = st.builds(BrokerEndpoint, text, text, uint16, int16)
features = st.builds(BrokerFeature, text, int16, int16)

RECORDS = {
    RegisterBrokerRecord: st.builds(
        RegisterBrokerRecord,
        broker_id=int32,
        incarnation_id=uuids,
        broker_epoch=int64,
        end_points=st.lists(endpoints, max_size=3).map(tuple),
        features=st.lists(features, max_size=3).map(tuple),
        rack=st.none() | text,
        fenced=st.booleans(),
        in_controlled_shutdown=st.booleans(),
        is_migrating_zk_broker=st.booleans(),
        log_dirs=uuid_lists,
    ),
    UnregisterBrokerRecord: st.builds(UnregisterBrokerRecord, int32, int64),
    TopicRecord: st.builds(TopicRecord, text, uuids),
    PartitionRecord: st.builds(
        PartitionRecord,
        partition_id=int32,
        topic_id=uuids,
        replicas=ids,
        isr=ids,
        removing_replicas=ids,
        adding_replicas=ids,
        leader=int32,
        leader_recovery_state=int8,
        leader_epoch=int32,
        partition_epoch=int32,
        directories=uuid_lists,
        eligible_leader_replicas=st.none() | ids,
        last_known_elr=st.none() | ids,
    ),
    ConfigRecord: st.builds(ConfigRecord, int8, text, text, st.none() | text),
    PartitionChangeRecord: st.builds(
        PartitionChangeRecord,
        partition_id=int32,
        topic_id=uuids,
        isr=st.none() | ids,
        leader=int32,
        replicas=st.none() | ids,
        removing_replicas=st.none() | ids,
        adding_replicas=st.none() | ids,
        leader_recovery_state=int8,
        directories=st.none() | uuid_lists,
        eligible_leader_replicas=st.none() | ids,
        last_known_elr=st.none() | ids,
    ),
    FenceBrokerRecord: st.builds(FenceBrokerRecord, int32, int64),
    UnfenceBrokerRecord: st.builds(UnfenceBrokerRecord, int32, int64),
    RemoveTopicRecord: st.builds(RemoveTopicRecord, uuids),
    FeatureLevelRecord: st.builds(FeatureLevelRecord, text, int16),
    ProducerIdsRecord: st.builds(ProducerIdsRecord, int32, int64, int64),
    BrokerRegistrationChangeRecord: st.builds(
        BrokerRegistrationChangeRecord,
        broker_id=int32,
        broker_epoch=int64,
        fenced=int8,
        in_controlled_shutdown=int8,
        log_dirs=uuid_lists,
    ),
    NoOpRecord: st.just(NoOpRecord()),
}
any_record = st.one_of(*RECORDS.values())

API_KEYS = {
    RegisterBrokerRecord: 0,
    UnregisterBrokerRecord: 1,
    TopicRecord: 2,
    PartitionRecord: 3,
    ConfigRecord: 4,
    PartitionChangeRecord: 5,
    FenceBrokerRecord: 7,
    UnfenceBrokerRecord: 8,
    RemoveTopicRecord: 9,
    FeatureLevelRecord: 12,
    ProducerIdsRecord: 15,
    BrokerRegistrationChangeRecord: 17,
    NoOpRecord: 20,
}
VERSIONS = {RegisterBrokerRecord: 4, PartitionRecord: 3, PartitionChangeRecord: 3, BrokerRegistrationChangeRecord: 3}


def at_version(record, version: int):
    """`record` with every field that `version` lacks reset to Kafka's default."""
    schema = R._BY_CLASS[type(record)].compiled.schema
    changes = {f.attr: f.default for f in schema.fields if f.since > version}
    return dataclasses.replace(record, **changes)


# --------------------------------------------------------------------------- round trips


def test_every_record_type_is_covered() -> None:
    assert set(RECORDS) == set(R._BY_CLASS) == set(API_KEYS)
    for cls, key in API_KEYS.items():
        assert R.api_key(cls) == key


@given(any_record)
def test_round_trip(record) -> None:
    data = encode_record(record)
    assert data[0] == 1  # frame version
    assert data[1] == R.api_key(type(record))
    assert data[2] == write_version(record)
    decoded, version = decode_record_with_version(data)
    assert decoded == record
    assert type(decoded) is type(record)
    assert version == write_version(record)
    assert encode_record(decoded) == data


@pytest.mark.parametrize("cls", list(RECORDS), ids=lambda c: c.__name__)
@given(data=st.data())
def test_round_trip_every_version(cls, data) -> None:
    record = data.draw(RECORDS[cls])
    for version in range(VERSIONS.get(cls, 1)):
        r = at_version(record, version)
        encoded = encode_record(r, version)
        assert encoded[2] == version
        assert decode_record_with_version(encoded) == (r, version)


def test_decoded_lists_are_tuples_and_ids_uuids() -> None:
    r = decode_record(encode_record(PartitionRecord(0, U, (1, 2), (1,), leader=1, directories=(U, U))))
    assert isinstance(r, PartitionRecord)
    assert r.replicas == (1, 2) and type(r.replicas) is tuple
    assert isinstance(r.topic_id, uuid.UUID) and r.topic_id == U
    assert r.directories == (U, U)


def test_write_versions() -> None:
    assert write_version(RegisterBrokerRecord(1, U, 2)) == 3
    assert write_version(BrokerRegistrationChangeRecord(1, 2, fenced=1)) == 2
    assert write_version(TopicRecord("t", U)) == 0
    assert write_version(PartitionRecord(0, U, (1,), (1,))) == 0
    assert write_version(PartitionRecord(0, U, (1,), (1,), directories=(U,))) == 1
    assert write_version(PartitionRecord(0, U, (1,), (1,), eligible_leader_replicas=(2,))) == 2
    assert write_version(PartitionChangeRecord(0, U, isr=(1,))) == 0
    assert write_version(PartitionChangeRecord(0, U, directories=())) == 1
    assert write_version(PartitionChangeRecord(0, U, last_known_elr=(1,))) == 2


def test_encode_rejects_values_a_version_cannot_hold() -> None:
    with pytest.raises(ValueError, match="cannot hold directories"):
        encode_record(PartitionRecord(0, U, (1,), (1,), directories=(U,)), 0)
    with pytest.raises(ValueError, match="in_controlled_shutdown"):
        encode_record(RegisterBrokerRecord(1, U, 2, in_controlled_shutdown=True), 0)
    with pytest.raises(ValueError):
        encode_record(TopicRecord("t", U), 1)


# Built in the test (lambdas): a compiled build's constructors check their arguments' types,
# so the three records that lie about a field's type exist only in the pure pass.
@pytest.mark.parametrize(
    "make_record",
    [
        lambda: PartitionRecord(2**31, U, (1,), (1,)),
        lambda: PartitionRecord(0, U, (1, 2**31), (1,)),
        lambda: FeatureLevelRecord("x", 2**15),
        lambda: ConfigRecord(128, "t", "k", "v"),
        lambda: RegisterBrokerRecord(1, U, 2, (BrokerEndpoint("P", "h", 70000),)),
        lambda: TopicRecord("x" * 40000, U),
        pytest.param(lambda: TopicRecord(None, U), marks=pytest.mark.pure_python),  # type: ignore[arg-type]
        pytest.param(lambda: PartitionRecord(0, "not a uuid", (1,), (1,)), marks=pytest.mark.pure_python),  # type: ignore[arg-type]
        pytest.param(lambda: PartitionRecord(0, U, None, (1,)), marks=pytest.mark.pure_python),  # type: ignore[arg-type]
    ],
)
def test_encode_rejects_bad_values_with_value_error(make_record) -> None:
    record = make_record()
    with pytest.raises(ValueError):
        encode_record(record)


def test_encode_rejects_non_records() -> None:
    with pytest.raises(TypeError):
        encode_record("TopicRecord")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- Kafka's exact bytes
#
# Derived by hand from the JSON schemas in apache/kafka
# metadata/src/main/resources/common/metadata/ and Kafka's flexible-version rules
# (KIP-482): every metadata schema has "flexibleVersions": "0+", so strings and
# arrays are compact (uvarint length + 1, 0 = null), every struct ends with a
# tagged-field section (uvarint count, then tag/size/value in ascending tag
# order, fields at their default omitted), ints are big-endian and a uuid is its
# 16 bytes. The frame is AbstractApiMessageSerde's: uvarint frame version 1,
# uvarint apiKey, uvarint version.

# fmt: off


def test_topic_record_bytes() -> None:
    # TopicRecord v0: Name (string), TopicId (uuid).
    expected = (
        b"\x01"  # frame version 1
        + b"\x02"  # apiKey 2 (TopicRecord)
        + b"\x00"  # version 0
        + b"\x04foo"  # Name: compact string, uvarint(3 + 1) = 4, then "foo"
        + U_BYTES  # TopicId: 16 bytes
        + b"\x00"  # no tagged fields
    )
    assert encode_record(TopicRecord("foo", U)) == expected
    assert decode_record(expected) == TopicRecord("foo", U)


def test_partition_record_bytes() -> None:
    # PartitionRecord v0: PartitionId int32, TopicId uuid, Replicas []int32, Isr []int32,
    # RemovingReplicas []int32, AddingReplicas []int32, Leader int32,
    # LeaderRecoveryState int8 (tag 0, default 0), LeaderEpoch int32, PartitionEpoch int32.
    record = PartitionRecord(
        partition_id=1, topic_id=U, replicas=(1, 2, 3), isr=(1, 2), leader=1, leader_epoch=5, partition_epoch=7
    )
    expected = (
        b"\x01\x03\x00"  # frame 1, apiKey 3, version 0
        + i32(1)  # PartitionId
        + U_BYTES  # TopicId
        + b"\x04" + i32(1, 2, 3)  # Replicas: uvarint(3 + 1), 3 x int32
        + b"\x03" + i32(1, 2)  # Isr: uvarint(2 + 1), 2 x int32
        + b"\x01"  # RemovingReplicas: empty (uvarint(0 + 1))
        + b"\x01"  # AddingReplicas: empty
        + i32(1)  # Leader (LeaderRecoveryState is tagged: not here)
        + i32(5)  # LeaderEpoch
        + i32(7)  # PartitionEpoch
        + b"\x00"  # tagged fields: none (LeaderRecoveryState 0 is the default)
    )
    assert encode_record(record) == expected
    assert decode_record(expected) == record
    # A recovering partition carries tag 0: count 1, tag 0, size 1, value 1.
    recovering = dataclasses.replace(record, leader_recovery_state=1)
    assert encode_record(recovering) == expected[:-1] + b"\x01\x00\x01\x01"


def test_partition_change_record_bytes() -> None:
    # PartitionChangeRecord v0: PartitionId, TopicId, then only tagged fields:
    # Isr (0), Leader (1), Replicas (2), RemovingReplicas (3), AddingReplicas (4),
    # LeaderRecoveryState (5). An unclean election: leader 3, ISR [3], RECOVERING.
    change = PartitionChangeRecord(partition_id=0, topic_id=U, isr=(3,), leader=3, leader_recovery_state=1)
    expected = (
        b"\x01\x05\x00"
        + i32(0)
        + U_BYTES
        + b"\x03"  # three tagged fields, ascending tags
        + b"\x00\x05" + b"\x02" + i32(3)  # tag 0 (Isr), size 5: compact array of one int32
        + b"\x01\x04" + i32(3)  # tag 1 (Leader), size 4
        + b"\x05\x01\x01"  # tag 5 (LeaderRecoveryState), size 1, value 1
    )
    assert encode_record(change) == expected
    assert decode_record(expected) == change
    assert is_unclean_election(change)
    # Tags need not be ascending when read (Kafka's reader does not care either).
    assert len(expected) == 40  # header 3, PartitionId 4, TopicId 16, count 1, tags 7 + 6 + 3
    shuffled = expected[:24] + expected[31:37] + expected[24:31] + expected[37:]
    assert decode_record(shuffled) == change


def test_broker_registration_change_record_bytes() -> None:
    # BrokerRegistrationChangeRecord v2: BrokerId int32, BrokerEpoch int64, Fenced int8 (tag 0),
    # InControlledShutdown int8 (tag 1), LogDirs []uuid (tag 2).
    record = BrokerRegistrationChangeRecord(broker_id=2, broker_epoch=42, fenced=1)
    expected = b"\x01\x11\x02" + i32(2) + struct.pack(">q", 42) + b"\x01" + b"\x00\x01\x01"
    assert encode_record(record) == expected


def test_register_broker_record_bytes() -> None:
    record = RegisterBrokerRecord(
        broker_id=1,
        incarnation_id=U,
        broker_epoch=100,
        end_points=(BrokerEndpoint("PLAINTEXT", "h", 9092, 0),),
        rack=None,
        fenced=True,
    )
    expected = (
        b"\x01\x00\x03"
        + i32(1)  # BrokerId
        + b"\x00"  # IsMigratingZkBroker (v2+) false
        + U_BYTES  # IncarnationId
        + struct.pack(">q", 100)  # BrokerEpoch
        + b"\x02"  # EndPoints: one element
        + b"\x0aPLAINTEXT" + b"\x02h" + struct.pack(">Hh", 9092, 0) + b"\x00"  # element + its tags
        + b"\x01"  # Features: empty
        + b"\x00"  # Rack: null
        + b"\x01"  # Fenced
        + b"\x00"  # InControlledShutdown (v1+)
        + b"\x00"  # tagged fields: LogDirs (tag 0) empty, so omitted
    )
    assert encode_record(record) == expected
    assert decode_record(expected) == record


# fmt: on


def test_config_noop_and_feature_bytes() -> None:
    assert encode_record(NoOpRecord()) == b"\x01\x14\x00\x00"
    assert encode_record(ConfigRecord(2, "t", "k", None)) == b"\x01\x04\x00\x02\x02t\x02k\x00\x00"
    assert encode_record(FeatureLevelRecord("metadata.version", 21)) == (
        b"\x01\x0c\x00\x11metadata.version\x00\x15\x00"
    )


def test_unknown_tagged_fields_are_skipped() -> None:
    data = encode_record(TopicRecord("foo", U))
    with_tag = data[:-1] + b"\x01\x63\x03abc"  # tag 99, 3 bytes
    assert decode_record(with_tag) == TopicRecord("foo", U)


def test_multibyte_varints() -> None:
    many = tuple(range(200))  # array length 201 needs a two-byte uvarint
    record = PartitionRecord(0, U, many, many)
    data = encode_record(record)
    assert data[23:25] == b"\xc9\x01"
    assert decode_record(data) == record
    name = "n" * 300
    assert decode_record(encode_record(TopicRecord(name, U))) == TopicRecord(name, U)


# --------------------------------------------------------------------------- malformed input


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "malformed"),
        (b"\x00\x02\x00\x04foo" + U_BYTES + b"\x00", "frame version 0"),
        (b"\x02\x02\x00\x04foo" + U_BYTES + b"\x00", "frame version 2"),
        (b"\x01\x06\x00\x00", "unknown metadata record type 6"),
        (b"\x01\x02\x01\x04foo" + U_BYTES + b"\x00", "unsupported TOPIC_RECORD version 1"),
        (b"\x01\x02\x00\x04foo" + U_BYTES + b"\x00\x00", "garbage"),
        (b"\x01\x02\x00\x04foo" + U_BYTES, "malformed"),
        (b"\x01\x02\x00\x00" + U_BYTES + b"\x00", "non-nullable"),
        (b"\x01\x02\x00\x04\xff\xfe\xfd" + U_BYTES + b"\x00", "malformed"),
        (b"\x01\x03\x00" + i32(0) + U_BYTES + b"\xff\xff\xff\x0f", "longer than the record"),
        (b"\x01\x02\x00\x04foo" + U_BYTES + b"\x01\x00\x05ab", "runs past"),
        (b"\x01\x02\x00\x04foo" + U_BYTES + b"\x01\x00\x05ab", "runs past"),
        (b"\x01\x80\x80\x80\x80\x80\x00", "longer than 5 bytes"),
    ],
)
def test_malformed_records(data: bytes, message: str) -> None:
    with pytest.raises(RecordDecodeError, match=message):
        decode_record(data)


def test_tagged_field_size_mismatch() -> None:
    # LeaderRecoveryState (tag 0) declared with size 2 but an int8 takes 1.
    good = encode_record(PartitionRecord(0, U, (1,), (1,), leader_recovery_state=1))
    assert good.endswith(b"\x01\x00\x01\x01")
    with pytest.raises(RecordDecodeError, match="size mismatch"):
        decode_record(good[:-4] + b"\x01\x00\x02\x01\x00")


@given(any_record, st.data())
def test_every_proper_prefix_fails(record, data) -> None:
    encoded = encode_record(record)
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(RecordDecodeError):
        decode_record(encoded[:cut])


@given(st.binary(max_size=200))
def test_fuzz_random_bytes(data: bytes) -> None:
    try:
        record = decode_record(data)
    except RecordDecodeError:
        return
    assert type(record) in RECORDS


@given(st.sampled_from(sorted(API_KEYS.values())), st.integers(0, 3), st.binary(max_size=120))
def test_fuzz_valid_header_random_body(api_key: int, version: int, body: bytes) -> None:
    try:
        record = decode_record(bytes([1, api_key, version]) + body)
    except RecordDecodeError:
        return
    assert encode_record(record, version) is not None


@given(any_record, st.data())
def test_fuzz_mutated_records(record, data) -> None:
    encoded = bytearray(encode_record(record))
    for _ in range(data.draw(st.integers(1, 4))):
        kind = data.draw(st.sampled_from(["flip", "insert", "delete", "set"]))
        pos = data.draw(st.integers(0, max(0, len(encoded) - 1)))
        if kind == "flip" and encoded:
            encoded[pos] ^= 1 << data.draw(st.integers(0, 7))
        elif kind == "insert":
            encoded[pos:pos] = data.draw(st.binary(min_size=1, max_size=4))
        elif kind == "delete" and encoded:
            del encoded[pos]
        elif encoded:
            encoded[pos] = data.draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF]))
    try:
        decode_record(bytes(encoded))
    except RecordDecodeError:
        pass


def test_accepts_bytearray_and_memoryview() -> None:
    data = encode_record(TopicRecord("foo", U))
    assert decode_record(bytearray(data)) == TopicRecord("foo", U)
    assert decode_record(memoryview(data)) == TopicRecord("foo", U)


# --------------------------------------------------------------------------- JSON and helpers


def test_kafka_uuid_string() -> None:
    # Kafka's Uuid.toString(): URL-safe base64 without padding (22 characters).
    assert kafka_uuid_string(U) == "AQIDBAUGBwgJCgsMDQ4PEA"
    assert kafka_uuid_string(uuid.UUID(bytes=b"\xfb\xff" + bytes(14))) == "-_8AAAAAAAAAAAAAAAAAAA"


def test_record_to_json() -> None:
    assert record_type_name(TopicRecord("foo", U)) == "TOPIC_RECORD"
    assert record_to_json(TopicRecord("foo", U)) == {"name": "foo", "topicId": "AQIDBAUGBwgJCgsMDQ4PEA"}
    part = PartitionRecord(1, U, (1, 2), (1,), leader=1, leader_epoch=0, partition_epoch=0)
    assert record_to_json(part) == {
        "partitionId": 1,
        "topicId": "AQIDBAUGBwgJCgsMDQ4PEA",
        "replicas": [1, 2],
        "isr": [1],
        "removingReplicas": [],
        "addingReplicas": [],
        "leader": 1,
        "leaderEpoch": 0,
        "partitionEpoch": 0,
    }
    # Tagged fields appear only when not at their default.
    assert record_to_json(PartitionChangeRecord(0, U, isr=(1,))) == {
        "partitionId": 0,
        "topicId": "AQIDBAUGBwgJCgsMDQ4PEA",
        "isr": [1],
    }
    broker = RegisterBrokerRecord(1, U, 5, (BrokerEndpoint("PLAINTEXT", "h", 9092),), rack="r")
    assert record_to_json(broker) == {
        "brokerId": 1,
        "isMigratingZkBroker": False,
        "incarnationId": "AQIDBAUGBwgJCgsMDQ4PEA",
        "brokerEpoch": 5,
        "endPoints": [{"name": "PLAINTEXT", "host": "h", "port": 9092, "securityProtocol": 0}],
        "features": [],
        "rack": "r",
        "fenced": True,
        "inControlledShutdown": False,
    }
    assert record_to_json(FenceBrokerRecord(3, 9)) == {"id": 3, "epoch": 9}
    assert record_to_json(NoOpRecord()) == {}


def test_is_unclean_election() -> None:
    assert is_unclean_election(PartitionChangeRecord(0, U, isr=(2,), leader=2, leader_recovery_state=1))
    assert not is_unclean_election(PartitionChangeRecord(0, U, isr=(2,), leader=2))
    assert not is_unclean_election(PartitionChangeRecord(0, U, leader=-1))
    assert not is_unclean_election(PartitionChangeRecord(0, U, leader_recovery_state=0))


def test_records_are_frozen_and_slotted() -> None:
    record = TopicRecord("foo", U)
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.name = "bar"  # type: ignore[misc]
    assert not hasattr(record, "__dict__")
    assert hash(record) == hash(TopicRecord("foo", U))


def test_generated_source_is_kept() -> None:
    sources = R._BY_CLASS[PartitionRecord].compiled.source
    assert set(sources) == {0, 1, 2}
    assert "def decode(data, p, end):" in sources[0]


_CONFIG_TEXT = st.one_of(
    st.text(max_size=140),
    st.sampled_from(["", "x" * 126, "x" * 127, "x" * 128, "\u00e9" * 63, "\u00e9" * 64, "\U0001f600" * 32]),
)


@given(st.integers(-128, 127), _CONFIG_TEXT, _CONFIG_TEXT, st.none() | _CONFIG_TEXT)
def test_config_record_fast_encoding_is_the_generated_encoders(
    resource_type: int, resource_name: str, name: str, value: str | None
) -> None:
    """A ConfigRecord's write-path encoding (compiled, one per config write) gives the bytes of
    the generated encoder, which an explicit version selects; at and past the one-byte compact
    length (126/127 UTF-8 bytes) too."""
    record = ConfigRecord(resource_type=resource_type, resource_name=resource_name, name=name, value=value)
    raw = encode_record(record)
    assert raw == encode_record(record, 0)
    decoded = decode_record(raw)
    assert decoded == record == _generated_config_decode(raw)
    assert type(decoded) is ConfigRecord and type(decoded.resource_type) is int


def _generated_config_decode(raw: bytes) -> ConfigRecord | None:
    """A ConfigRecord v0 frame decoded by the generated decoder alone (None: it refuses it)."""
    try:
        record, end = R._DECODERS[R._CONFIG_RECORD_KEY << 16](raw, 3, len(raw))
    except (RecordDecodeError, *R._DECODE_ERRORS):
        return None
    return record if end == len(raw) else None


@given(st.integers(-128, 127), _CONFIG_TEXT, _CONFIG_TEXT, st.none() | _CONFIG_TEXT, st.data())
def test_config_record_fast_decoding_agrees_with_the_generated_decoder_on_damaged_bytes(
    resource_type: int, resource_name: str, name: str, value: str | None, data: st.DataObject
) -> None:
    """Decoding a ConfigRecord (compiled, on every follower and broker) gives what the
    generated decoder gives, or refuses what it refuses, for a frame with a byte changed,
    cut short or extended."""
    record = ConfigRecord(resource_type=resource_type, resource_name=resource_name, name=name, value=value)
    raw = bytearray(encode_record(record))
    at = data.draw(st.integers(3, len(raw) - 1), label="at")
    raw[at] = data.draw(st.integers(0, 255), label="byte")
    cut = data.draw(st.integers(3, len(raw) + 2), label="cut")
    damaged = bytes(raw[:cut]) + b"\0" * max(0, cut - len(raw))
    expected = _generated_config_decode(damaged)
    if expected is None:
        with pytest.raises(RecordDecodeError):
            decode_record(damaged)
    else:
        assert decode_record(damaged) == expected


@pytest.mark.parametrize("resource_type", [-129, 128, 1 << 40])
def test_config_record_out_of_range_type_is_refused_on_the_fast_path_too(resource_type: int) -> None:
    record = ConfigRecord(resource_type=resource_type, resource_name="t", name="k", value="v")
    with pytest.raises(ValueError):
        encode_record(record)
