"""KIP-853's directory ids on the wire: Fetch's ReplicaDirectoryId (v17), Vote's
VoterDirectoryId (v1+) and DescribeQuorum's ReplicaDirectoryId (v2); older versions have no
such field and carry the zero uuid ("not known")."""

from __future__ import annotations

import struct
import uuid
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader

from quorum.raft.describe import QuorumDescription, ReplicaDescription
from quorum.raft.messages import FetchRequest, VoteRequest
from quorum.raft.voter_set import ZERO_UUID
from quorum.wire import DescribeQuorumCall, decode_request, decode_response, encode_request, encode_response

DIR = uuid.UUID("5b7c0f4e-7a1d-4c55-9a0e-1f2d3c4b5a69")


def frame_of(message: Any, version: int) -> bytes:
    return encode_request(
        message, api_version=version, correlation_id=1, client_id="t", cluster_id="c", source_id=1, destination_id=2
    )


def kio_body(frame: bytes, cls: type[Any]) -> Any:
    (size,) = struct.unpack_from(">i", frame, 0)
    assert size == len(frame) - 4
    _, hsize = entity_reader(cls.__header_schema__)(frame, 4)
    body, _ = entity_reader(cls)(frame, 4 + hsize)
    return body


def test_fetch_v17_carries_the_replica_directory_id() -> None:
    fetch = FetchRequest(7, 4, 100, 3, replica_directory_id=DIR)
    frame = frame_of(fetch, 17)
    assert kio_body(frame, load_request_schema(1, 17)).topics[0].partitions[0].replica_directory_id == DIR
    assert decode_request(frame[4:]).message == fetch
    older = decode_request(frame_of(fetch, 16)[4:]).message
    assert isinstance(older, FetchRequest) and older.replica_directory_id == ZERO_UUID


def test_vote_carries_the_voter_directory_id() -> None:
    vote = VoteRequest(3, 1, 2, 10, pre_vote=True, voter_directory_id=DIR)
    frame = frame_of(vote, 2)
    assert kio_body(frame, load_request_schema(52, 2)).topics[0].partitions[0].voter_directory_id == DIR
    assert decode_request(frame[4:]).message == vote


def test_describe_quorum_v2_carries_directory_ids() -> None:
    described = QuorumDescription(
        1, 5, 100, (ReplicaDescription(1, 100, 10, 10, DIR),), (ReplicaDescription(4, 90, 9, 8, ZERO_UUID),)
    )
    req = decode_request(frame_of(DescribeQuorumCall(), 2)[4:])
    frame = encode_response(req, described)
    state = kio_body(frame, load_response_schema(55, 2))
    assert state.topics[0].partitions[0].current_voters[0].replica_directory_id == DIR
    _, got = decode_response(55, 2, frame[4:])
    assert got == described
