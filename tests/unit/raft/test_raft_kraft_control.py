"""KIP-853's control records: golden bytes of Kafka's schemas, round trips, bad input."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quorum.raft.kraft_control import (
    decode_kraft_version,
    decode_voters,
    encode_kraft_version,
    encode_voters,
    voters_batch,
)
from quorum.raft.types import ControlType
from quorum.raft.voter_set import Endpoint, ReplicaKey, VoterNode, VoterSet
from quorum.storage.record_batch import CorruptRecordError, decode_batches, encode_batch

DIR = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")

# VotersRecord v0 with voter 1 (directory DIR, CONTROLLER://127.0.0.1:9093, kraft.version 0..1),
# spelled field by field from clients/src/main/resources/common/message/VotersRecord.json.
VOTERS_GOLDEN = bytes.fromhex(
    "0000"  # Version int16
    "02"  # Voters: compact array, 1 element
    "00000001"  # VoterId
    "00112233445566778899aabbccddeeff"  # VoterDirectoryId uuid
    "02"  # Endpoints: 1
    "0b" + b"CONTROLLER".hex() + "0a" + b"127.0.0.1".hex() + "2385"  # Name, Host, Port uint16 9093
    "00"  # endpoint tags
    "00000001"  # KRaftVersionFeature Min 0, Max 1
    "00"  # feature tags
    "00"  # voter tags
    "00"  # record tags
)


def one_voter() -> VoterSet:
    return VoterSet.of([VoterNode(ReplicaKey(1, DIR), (Endpoint("CONTROLLER", "127.0.0.1", 9093),), 0, 1)])


def test_kraft_version_golden_bytes() -> None:
    assert encode_kraft_version(1) == bytes.fromhex("0000000100")
    assert decode_kraft_version(bytes.fromhex("0000000100")) == 1


def test_voters_golden_bytes() -> None:
    assert encode_voters(one_voter()) == VOTERS_GOLDEN
    assert decode_voters(VOTERS_GOLDEN) == one_voter()


def test_voters_record_is_a_control_batch_of_type_6() -> None:
    raw = encode_batch(voters_batch(7, 3, one_voter(), 1000))
    (batch,), consumed = decode_batches(raw)
    assert consumed == len(raw)
    assert batch.control_type is ControlType.KRAFT_VOTERS and int(batch.control_type) == 6
    assert (batch.base_offset, batch.epoch) == (7, 3)
    assert decode_voters(batch.records[0]) == one_voter()


@pytest.mark.parametrize(
    "data",
    [
        b"",
        VOTERS_GOLDEN[:-1],  # truncated
        VOTERS_GOLDEN + b"\x00",  # trailing byte
        b"\x00\x01" + VOTERS_GOLDEN[2:],  # unknown version
        bytes.fromhex("00000100"),  # no voter
        bytes.fromhex("00000000"),  # null array
        bytes.fromhex("0000ffffffff0f"),  # huge count
        VOTERS_GOLDEN[:2] + b"\x03" + VOTERS_GOLDEN[3:-1] + VOTERS_GOLDEN[3:],  # voter 1 twice
    ],
)
def test_bad_voters_records_are_refused(data: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decode_voters(data)


@pytest.mark.parametrize("data", [b"", b"\x00\x01\x00\x01\x00", b"\x00\x00\x00\x01", b"\x00\x00\xff\xff\x00"])
def test_bad_kraft_version_records_are_refused(data: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decode_kraft_version(data)


_endpoints = st.lists(st.builds(Endpoint, st.text(max_size=8), st.text(max_size=8), st.integers(0, 65535)), max_size=3)
_nodes = st.builds(
    VoterNode,
    st.builds(ReplicaKey, st.integers(0, 2**31 - 1), st.uuids()),
    _endpoints.map(tuple),
    st.just(0),
    st.integers(0, 1),
)


@given(st.lists(_nodes, min_size=1, max_size=5, unique_by=lambda n: n.node_id))
def test_voters_round_trip(nodes: list[VoterNode]) -> None:
    voters = VoterSet.of(nodes)
    assert decode_voters(encode_voters(voters)) == voters


@given(st.binary(max_size=200))
def test_voters_decoder_never_fails_otherwise(data: bytes) -> None:
    try:
        decode_voters(data)
    except CorruptRecordError:
        pass
