"""AddRaftVoter (80), RemoveRaftVoter (81) and UpdateRaftVoter (82): frames built by our codec
decode to the same values, kio's own writer's frames decode too, bad input is a WireError
with the header (answered INVALID_REQUEST, not a dropped connection), and controllers
advertise the three apis."""

from __future__ import annotations

import io
import uuid
from datetime import timedelta

import pytest
from kio.index import load_request_schema
from kio.serial import entity_writer

from quorum.raft.errors import ErrorCode
from quorum.raft.voter_set import Endpoint, ReplicaKey, VoterNode
from quorum.wire import codec, voter_codec

DIR = uuid.UUID("7f8c2308-6da7-471f-aa06-638facfee30e")
NODE = VoterNode(ReplicaKey(4, DIR), (Endpoint("CONTROLLER", "127.0.0.1", 19094),), 0, 1)


@pytest.mark.parametrize(
    "call",
    [
        voter_codec.AddRaftVoter("c1", NODE, timeout_ms=12_000),
        voter_codec.RemoveRaftVoter(None, ReplicaKey(4, DIR)),
        voter_codec.UpdateRaftVoter("c1", 7, NODE),
    ],
)
def test_requests_round_trip(call: voter_codec.VoterCall) -> None:
    frame, key, version = voter_codec.encode_voter_request(call, correlation_id=9, client_id="t")
    head, decoded = voter_codec.decode_voter_request(frame[4:])
    assert (head.api_key, head.api_version, head.correlation_id) == (key, version, 9)
    assert decoded == call


def test_add_raft_voter_v0_from_kio() -> None:
    cls = load_request_schema(80, 0)
    body = cls(
        cluster_id=None,
        timeout=timedelta(seconds=5),
        voter_id=4,
        voter_directory_id=DIR,
        listeners=(cls.__dataclass_fields__["listeners"].type and _listener(cls),),
    )
    buf = io.BytesIO()
    header = cls.__header_schema__(request_api_key=80, request_api_version=0, correlation_id=1, client_id="kio")
    entity_writer(type(header))(buf, header)
    entity_writer(cls)(buf, body)
    _, call = voter_codec.decode_voter_request(buf.getvalue())
    assert call == voter_codec.AddRaftVoter(None, NODE, timeout_ms=5000)


def _listener(cls: type) -> object:
    import sys

    return sys.modules[cls.__module__].Listener(name="CONTROLLER", host="127.0.0.1", port=19094)


@pytest.mark.parametrize(
    ("call", "why"),
    [
        (voter_codec.RemoveRaftVoter(None, ReplicaKey(4)), "directory id is missing"),
        (voter_codec.AddRaftVoter(None, VoterNode(ReplicaKey(4, DIR))), "at least one listener"),
        (voter_codec.RemoveRaftVoter(None, ReplicaKey(-3, DIR)), "negative"),
        (voter_codec.UpdateRaftVoter(None, 1, VoterNode(ReplicaKey(4, DIR), NODE.endpoints, 2, 1)), "range"),
    ],
)
def test_bad_requests_are_answered_invalid_request(call: voter_codec.VoterCall, why: str) -> None:
    frame, _, _ = voter_codec.encode_voter_request(call, correlation_id=5, client_id="t")
    with pytest.raises(codec.WireError, match=why) as info:
        voter_codec.decode_voter_request(frame[4:])
    assert info.value.code == ErrorCode.INVALID_REQUEST and info.value.header is not None
    answer = voter_codec.encode_voter_response(info.value.header, voter_codec.VoterCallAnswer(info.value.code))
    assert (
        voter_codec.decode_voter_response(
            81 if isinstance(call, voter_codec.RemoveRaftVoter) else info.value.header.api_key,
            info.value.header.api_version,
            answer[4:],
        ).error
        == ErrorCode.INVALID_REQUEST
    )


def test_truncated_and_unsupported_frames() -> None:
    frame, _, _ = voter_codec.encode_voter_request(
        voter_codec.RemoveRaftVoter(None, ReplicaKey(4, DIR)), correlation_id=5, client_id="t"
    )
    with pytest.raises(codec.WireError) as info:
        voter_codec.decode_voter_request(frame[4:-6])
    assert info.value.code == ErrorCode.INVALID_REQUEST and info.value.header is not None
    future = bytearray(frame[4:])
    future[3] = 9  # RemoveRaftVoter v9
    with pytest.raises(codec.WireError) as info:
        voter_codec.decode_voter_request(bytes(future))
    assert info.value.code == ErrorCode.UNSUPPORTED_VERSION


@pytest.mark.parametrize("error", [ErrorCode.NONE, ErrorCode.DUPLICATE_VOTER, ErrorCode.VOTER_NOT_FOUND])
def test_responses_round_trip(error: ErrorCode) -> None:
    for key in (80, 81, 82):
        head = codec.RequestHeaderInfo(key, codec.VOTER_API_VERSIONS[key][1], 3, "t")
        answer = voter_codec.VoterCallAnswer(error, "why" if error else None, 2, 5, "127.0.0.1", 19092)
        decoded = voter_codec.decode_voter_response(
            key, head.api_version, voter_codec.encode_voter_response(head, answer)[4:]
        )
        assert decoded.error == error
        if key == 82:
            assert (decoded.leader_id, decoded.leader_epoch, decoded.leader_port) == (2, 5, 19092)
        else:
            assert decoded.message == answer.message


def test_controllers_advertise_the_voter_apis() -> None:
    advertised = codec.ApiVersionsResult().api_keys
    assert advertised[80] == (0, 1) and advertised[81] == (0, 0) and advertised[82] == (0, 0)
