"""quorum.wire.codec: round trips, versions, error placement, malformed requests."""

from __future__ import annotations

import dataclasses
import io
import struct
import uuid
from types import SimpleNamespace
from typing import Any

import pytest
import wire_strategies as ws  # type: ignore[import-not-found,unused-ignore]  # a sibling module on pytest's path
from hypothesis import given
from hypothesis import strategies as st
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.serial import entity_reader as kio_native_reader
from kio.serial import entity_writer

from quorum.raft.describe import ReplicaDescription
from quorum.raft.errors import ErrorCode
from quorum.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    VoteRequest,
    VoteResponse,
)
from quorum.raft.types import Batch, OffsetAndEpoch
from quorum.storage.record_batch import encode_batches
from quorum.wire import (
    API_VERSIONS,
    METADATA_TOPIC,
    METADATA_TOPIC_ID,
    REQUEST_VERSIONS,
    UNKNOWN_ERROR_FALLBACK,
    ApiKey,
    ApiVersionsCall,
    ApiVersionsResult,
    DecodedRequest,
    DescribeQuorumCall,
    ErrorResult,
    WireError,
    api_key_of,
    decode_request,
    decode_response,
    encode_error_response,
    encode_request,
    encode_response,
    error_from_wire,
    error_response_for,
)
from quorum.wire.codec import advertised_api_versions

RESPONSE_STRATEGY = {
    VoteRequest: ws.vote_responses,
    BeginQuorumEpochRequest: ws.begin_responses,
    EndQuorumEpochRequest: ws.end_responses,
    FetchRequest: ws.fetch_responses,
    FetchSnapshotRequest: ws.fetch_snapshot_responses,
}


def served_versions(api_key: int) -> list[int]:
    low, high = API_VERSIONS[api_key]
    return list(range(low, high + 1))


def kio_parse(frame: bytes, cls: type[Any], *, request: bool) -> Any:
    """Parse a frame (with length prefix) with kio's own (native) reader: our frames must
    be valid for kio too. Only ever fed frames we produced ourselves."""
    (size,) = struct.unpack_from(">i", frame, 0)
    assert size == len(frame) - 4
    header, hsize = kio_native_reader(cls.__header_schema__)(frame, 4)
    body, bsize = kio_native_reader(cls)(frame, 4 + hsize)
    assert 4 + hsize + bsize == len(frame)
    return header, body


def encode(message: Any, version: int | None = None, **kw: Any) -> bytes:
    args: dict[str, Any] = {
        "correlation_id": 42,
        "client_id": "test",
        "cluster_id": "cluster-x",
        "source_id": 1,
        "destination_id": 2,
    }
    args.update(kw)
    return encode_request(message, api_version=version, **args)


def representable(message: Any, version: int) -> bool:
    return not (isinstance(message, VoteRequest) and message.pre_vote and version < 2)


# --------------------------------------------------------------------------- requests


@given(
    message=ws.requests,
    data=st.data(),
    correlation_id=ws.i32,
    client_id=ws.client_ids,
    cluster_id=ws.cluster_ids,
    destination_id=ws.node_ids,
)
def test_request_round_trip_every_version(message, data, correlation_id, client_id, cluster_id, destination_id):
    key = api_key_of(message)
    version = data.draw(st.sampled_from(served_versions(key)), label="version")
    if not representable(message, version):
        with pytest.raises(WireError) as info:
            encode(message, version)
        assert info.value.code == ErrorCode.UNSUPPORTED_VERSION
        return
    frame = encode(
        message,
        version,
        correlation_id=correlation_id,
        client_id=client_id,
        cluster_id=cluster_id,
        destination_id=destination_id,
    )
    kio_header, _ = kio_parse(frame, load_request_schema(key, version), request=True)
    assert kio_header.correlation_id == correlation_id

    decoded = decode_request(frame[4:])
    assert decoded.message == message
    assert (decoded.api_key, decoded.api_version) == (key, version)
    assert decoded.correlation_id == correlation_id
    assert decoded.client_id == client_id
    assert decoded.cluster_id == cluster_id
    expected_source = {
        VoteRequest: lambda m: m.candidate_id,
        BeginQuorumEpochRequest: lambda m: m.leader_id,
        EndQuorumEpochRequest: lambda m: m.leader_id,
        FetchRequest: lambda m: m.replica_id,
        FetchSnapshotRequest: lambda m: m.replica_id,
    }[type(message)](message)
    assert decoded.source_id == expected_source
    carries_destination = (key == ApiKey.VOTE and version >= 1) or (key == ApiKey.BEGIN_QUORUM_EPOCH and version >= 1)
    assert decoded.destination_id == (destination_id if carries_destination else -1)


def test_default_versions_are_the_highest_served():
    assert REQUEST_VERSIONS == {k: hi for k, (_, hi) in API_VERSIONS.items()}
    assert REQUEST_VERSIONS[ApiKey.VOTE] == 2  # the first with PreVote
    assert REQUEST_VERSIONS[ApiKey.FETCH] == 17
    frame = encode(VoteRequest(3, 1, 2, 10, pre_vote=True))
    assert struct.unpack_from(">hh", frame, 4) == (ApiKey.VOTE, 2)


def test_vote_v2_carries_pre_vote_on_the_wire():
    frame = encode(VoteRequest(3, 1, 2, 10, pre_vote=True))
    _, body = kio_parse(frame, load_request_schema(52, 2), request=True)
    part = body.topics[0].partitions[0]
    assert part.pre_vote is True and part.replica_epoch == 3 and part.replica_id == 1
    assert body.voter_id == 2 and body.cluster_id == "cluster-x"
    assert body.topics[0].topic_name == METADATA_TOPIC


def test_fetch_v17_layout():
    frame = encode(FetchRequest(7, 4, 100, 3, 5, max_wait_ms=500, max_bytes=1 << 20))
    _, body = kio_parse(frame, load_request_schema(1, 17), request=True)
    assert body.replica_state.replica_id == 7
    assert body.max_wait.total_seconds() == 0.5
    assert body.session_epoch == -1 and body.session_id == 0
    (topic,) = body.topics
    assert topic.topic_id == METADATA_TOPIC_ID
    (part,) = topic.partitions
    assert (part.partition, part.current_leader_epoch, part.fetch_offset, part.last_fetched_epoch) == (0, 4, 100, 3)
    assert (part.log_start_offset, part.partition_max_bytes, part.replica_directory_id) == (5, 1 << 20, None)
    assert body.cluster_id == "cluster-x"


def test_leader_endpoints_in_begin_and_end_quorum_epoch_v1():
    endpoints = {1: ("10.0.0.1", 9093), 2: ("10.0.0.2", 9093)}
    for message, key in ((BeginQuorumEpochRequest(1, 5), 53), (EndQuorumEpochRequest(1, 5, (2,)), 54)):
        frame = encode(message, endpoints=endpoints)
        _, body = kio_parse(frame, load_request_schema(key, 1), request=True)
        (ep,) = body.leader_endpoints
        assert (ep.name, ep.host, ep.port) == ("CONTROLLER", "10.0.0.1", 9093)
        assert decode_request(frame[4:]).message == message


def test_describe_quorum_and_api_versions_requests():
    for version in served_versions(ApiKey.DESCRIBE_QUORUM):
        d = decode_request(encode(DescribeQuorumCall(), version)[4:])
        assert d.message == DescribeQuorumCall() and d.source_id == -1 and d.cluster_id is None
    for version in served_versions(ApiKey.API_VERSIONS):
        call = ApiVersionsCall("pykraft-cli", "0.1.0")
        d = decode_request(encode(call, version)[4:])
        assert d.api_version == version
        assert d.message == (call if version >= 3 else ApiVersionsCall())


def test_encode_request_rejects_what_it_cannot_express():
    with pytest.raises(WireError) as info:
        encode(VoteRequest(1, 1, 0, 0, pre_vote=True), 1)
    assert info.value.code == ErrorCode.UNSUPPORTED_VERSION
    with pytest.raises(WireError) as info:
        encode(FetchRequest(1, 1, 0, 0), 12)
    assert info.value.code == ErrorCode.UNSUPPORTED_VERSION
    with pytest.raises(WireError):
        encode(BeginQuorumEpochRequest(2**31, 1))  # int32 overflow
    with pytest.raises(TypeError):
        encode(VoteResponse(ErrorCode.NONE, 1, 1, True))


# --------------------------------------------------------------------------- responses


def _request_for(response_type: type[Any], pre_vote: bool) -> Any:
    return {
        VoteResponse: VoteRequest(5, 1, 4, 10, pre_vote=pre_vote),
        BeginQuorumEpochResponse: BeginQuorumEpochRequest(1, 5),
        EndQuorumEpochResponse: EndQuorumEpochRequest(1, 5, (2, 3)),
        FetchResponse: FetchRequest(2, 5, 10, 4),
        FetchSnapshotResponse: FetchSnapshotRequest(2, 5, OffsetAndEpoch(4, 10), 0),
    }[response_type]


responses = st.one_of(
    ws.vote_responses, ws.begin_responses, ws.end_responses, ws.fetch_responses, ws.fetch_snapshot_responses
)


@given(response=responses, data=st.data(), correlation_id=ws.i32, endpoints=ws.endpoints)
def test_response_round_trip_every_version(response, data, correlation_id, endpoints):
    pre_vote = getattr(response, "pre_vote", False)
    request = _request_for(type(response), pre_vote)
    key = api_key_of(request)
    versions = [v for v in served_versions(key) if representable(request, v)]
    version = data.draw(st.sampled_from(versions), label="version")
    decoded_request = decode_request(encode(request, version, correlation_id=correlation_id)[4:])

    frame = encode_response(decoded_request, response, endpoints=endpoints)
    _, kio_body = kio_parse(frame, load_response_schema(key, version), request=False)
    node_endpoints: tuple[Any, ...] = getattr(kio_body, "node_endpoints", ())
    if response.leader_id in endpoints and hasattr(kio_body, "node_endpoints"):
        (ep,) = node_endpoints
        assert (ep.node_id, ep.host, ep.port) == (response.leader_id, *endpoints[response.leader_id])
    else:
        assert node_endpoints == ()

    got_correlation, got = decode_response(key, version, frame[4:], request=request)
    assert got_correlation == correlation_id
    assert got == response


@given(description=ws.quorum_descriptions, data=st.data(), endpoints=ws.endpoints)
def test_describe_quorum_round_trip(description, data, endpoints):
    version = data.draw(st.sampled_from(served_versions(ApiKey.DESCRIBE_QUORUM)), label="version")
    req = decode_request(encode(DescribeQuorumCall(), version)[4:])
    frame = encode_response(req, description, endpoints=endpoints)
    _, body = kio_parse(frame, load_response_schema(55, version), request=False)
    if version >= 2:
        assert {n.node_id: (n.listeners[0].host, n.listeners[0].port) for n in body.nodes} == endpoints
    _, got = decode_response(55, version, frame[4:])
    if version == 0:  # v0 has no fetch / caught-up timestamps
        description = dataclasses.replace(
            description,
            voters=tuple(ReplicaDescription(r.replica_id, r.log_end_offset) for r in description.voters),
            observers=tuple(ReplicaDescription(r.replica_id, r.log_end_offset) for r in description.observers),
        )
    assert got == description


def test_describe_quorum_errors():
    req = decode_request(encode(DescribeQuorumCall())[4:])
    not_leader = ErrorResult(ErrorCode.NOT_LEADER_OR_FOLLOWER, "ask node 3", leader_id=3, leader_epoch=9)
    _, got = decode_response(55, 2, encode_response(req, not_leader)[4:])
    assert got == not_leader
    _, got = decode_response(55, 2, encode_response(req, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)[4:])
    assert got == ErrorResult(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)


def test_fetch_response_with_batches_diverging_epoch_and_snapshot_id():
    batches = (
        Batch(100, 4, (b"a", b"bc"), 1_700_000_000_123),
        Batch(102, 5, (b"x" * 1000,), 1_700_000_000_456),
    )
    response = FetchResponse(
        ErrorCode.NONE, 1, 5, high_watermark=101, log_start_offset=7, diverging_epoch=OffsetAndEpoch(3, 90)
    )
    response = dataclasses.replace(response, batches=batches)
    req = decode_request(encode(FetchRequest(2, 5, 100, 4))[4:])
    frame = encode_response(req, response, endpoints={1: ("h", 9093)})
    _, body = kio_parse(frame, load_response_schema(1, 17), request=False)
    part = body.responses[0].partitions[0]
    assert bytes(part.records) == encode_batches(batches)
    assert (part.diverging_epoch.epoch, part.diverging_epoch.end_offset) == (3, 90)
    assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (1, 5)
    assert (part.snapshot_id.epoch, part.snapshot_id.end_offset) == (-1, -1)  # absent
    assert body.responses[0].topic_id == METADATA_TOPIC_ID
    assert decode_response(1, 17, frame[4:])[1] == response

    snap = FetchResponse(ErrorCode.NONE, 1, 5, 101, 7, snapshot_id=OffsetAndEpoch(4, 50))
    assert decode_response(1, 17, encode_response(req, snap)[4:])[1] == snap


def _fetch_response_frame_with_records(records: bytes) -> bytes:
    cls: Any = load_response_schema(1, 17)
    mod = __import__(cls.__module__, fromlist=["x"])
    part = mod.PartitionData(
        partition_index=0,
        error_code=KioErrorCode.none,
        high_watermark=10,
        aborted_transactions=(),
        records=records,
        current_leader=mod.LeaderIdAndEpoch(leader_id=1, leader_epoch=2),
    )
    body = cls(
        throttle_time=__import__("datetime").timedelta(0),
        error_code=KioErrorCode.none,
        responses=(mod.FetchableTopicResponse(topic_id=METADATA_TOPIC_ID, partitions=(part,)),),
    )
    buf = io.BytesIO()
    entity_writer(cls.__header_schema__)(buf, cls.__header_schema__(correlation_id=5))
    entity_writer(cls)(buf, body)
    return buf.getvalue()


def test_fetch_response_partial_trailing_batch_is_ignored_and_corruption_reported():
    batches = (Batch(0, 1, (b"one",)), Batch(1, 1, (b"two", b"three")))
    raw = encode_batches(batches)
    _, got = decode_response(1, 17, _fetch_response_frame_with_records(raw[:-3]))
    assert isinstance(got, FetchResponse) and got.batches == batches[:1]
    corrupt = bytearray(raw)
    corrupt[-1] ^= 0x40  # inside the CRC-covered records of the second batch
    with pytest.raises(WireError) as info:
        decode_response(1, 17, _fetch_response_frame_with_records(bytes(corrupt)))
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE


def test_top_level_errors_and_empty_topics():
    for request in (VoteRequest(5, 1, 4, 10, True), BeginQuorumEpochRequest(1, 5), FetchRequest(2, 5, 10, 4)):
        req = decode_request(encode(request)[4:])
        frame = encode_response(req, ErrorCode.INCONSISTENT_CLUSTER_ID)
        _, got = decode_response(req.api_key, req.api_version, frame[4:], request=request)
        assert isinstance(got, VoteResponse | BeginQuorumEpochResponse | FetchResponse)
        assert got.error == ErrorCode.INCONSISTENT_CLUSTER_ID
        assert (got.leader_id, got.leader_epoch) == (-1, -1)
        if isinstance(got, VoteResponse):
            assert got.pre_vote and not got.vote_granted


def test_top_level_error_codes_go_in_the_top_level_field():
    req = decode_request(encode(VoteRequest(5, 1, 4, 10))[4:])
    frame = encode_response(req, VoteResponse(ErrorCode.INCONSISTENT_CLUSTER_ID, 3, 7, False))
    _, body = kio_parse(frame, load_response_schema(52, 2), request=False)
    assert body.error_code == KioErrorCode.inconsistent_cluster_id
    frame = encode_response(req, VoteResponse(ErrorCode.FENCED_LEADER_EPOCH, 3, 7, False))
    _, body = kio_parse(frame, load_response_schema(52, 2), request=False)
    assert body.error_code == KioErrorCode.none
    assert body.topics[0].partitions[0].error_code == KioErrorCode.fenced_leader_epoch


def test_unknown_error_codes_from_peers_do_not_crash():
    assert error_from_wire(0) == ErrorCode.NONE
    assert error_from_wire(9999) == UNKNOWN_ERROR_FALLBACK
    assert error_from_wire(-1) == UNKNOWN_ERROR_FALLBACK
    cls: Any = load_response_schema(53, 1)
    mod = __import__(cls.__module__, fromlist=["x"])
    part = mod.PartitionData(partition_index=0, error_code=SimpleNamespace(value=9999), leader_id=1, leader_epoch=2)
    body = cls(error_code=KioErrorCode.none, topics=(mod.TopicData(topic_name=METADATA_TOPIC, partitions=(part,)),))
    buf = io.BytesIO()
    entity_writer(cls.__header_schema__)(buf, cls.__header_schema__(correlation_id=1))
    entity_writer(cls)(buf, body)
    _, got = decode_response(53, 1, buf.getvalue())
    assert got == BeginQuorumEpochResponse(UNKNOWN_ERROR_FALLBACK, 1, 2)


def test_response_type_must_fit_the_request():
    req = decode_request(encode(VoteRequest(5, 1, 4, 10))[4:])
    with pytest.raises(TypeError):
        encode_response(req, BeginQuorumEpochResponse(ErrorCode.NONE, 1, 1))
    with pytest.raises(TypeError):
        encode_response(req, ApiVersionsResult())


def test_decode_response_rejects_unserved_versions():
    with pytest.raises(WireError):
        decode_response(1, 12, b"\x00\x00\x00\x01\x00")
    with pytest.raises(WireError):
        decode_response(3, 0, b"\x00\x00\x00\x01")


# --------------------------------------------------------------------------- ApiVersions


def _kio_api_versions_request(version: int, correlation_id: int = 11) -> bytes:
    cls: Any = load_request_schema(18, version)
    kwargs = {"client_software_name": "kio-client", "client_software_version": "6.5"} if version >= 3 else {}
    buf = io.BytesIO()
    header = cls.__header_schema__(
        request_api_key=18, request_api_version=version, correlation_id=correlation_id, client_id="kio"
    )
    entity_writer(cls.__header_schema__)(buf, header)
    entity_writer(cls)(buf, cls(**kwargs))
    return buf.getvalue()


@pytest.mark.parametrize("version", range(5))
def test_api_versions_every_version_with_kio(version):
    decoded = decode_request(_kio_api_versions_request(version))
    assert (decoded.api_key, decoded.api_version, decoded.correlation_id, decoded.client_id) == (18, version, 11, "kio")
    assert isinstance(decoded.message, ApiVersionsCall)
    if version >= 3:
        assert decoded.message == ApiVersionsCall("kio-client", "6.5")

    frame = encode_response(decoded, ApiVersionsResult())
    cls = load_response_schema(18, version)
    assert cls.__header_schema__.__version__ == 0  # KIP-511: always response header v0
    header, body = kio_parse(frame, cls, request=False)
    assert header.correlation_id == 11 and body.error_code == KioErrorCode.none
    assert {k.api_key: (k.min_version, k.max_version) for k in body.api_keys} == advertised_api_versions()
    assert decode_response(18, version, frame[4:]) == (11, ApiVersionsResult(advertised_api_versions()))


def test_api_versions_unknown_version_gets_v0_unsupported_version():
    frame = bytearray(_kio_api_versions_request(4, correlation_id=77))
    struct.pack_into(">h", frame, 2, 9)  # a version from the future
    with pytest.raises(WireError) as info:
        decode_request(bytes(frame))
    err = info.value
    assert err.code == ErrorCode.UNSUPPORTED_VERSION and err.header is not None
    assert (err.header.api_key, err.header.api_version, err.header.correlation_id) == (18, 9, 77)
    response = error_response_for(err)
    assert response is not None
    header, body = kio_parse(response, load_response_schema(18, 0), request=False)
    assert header.correlation_id == 77
    assert body.error_code == KioErrorCode.unsupported_version
    assert {k.api_key: (k.min_version, k.max_version) for k in body.api_keys} == advertised_api_versions()
    # A client that asked for v3/v4 falls back to the v0 body on an error.
    for asked in (0, 3, 4):
        correlation_id, result = decode_response(18, asked, response[4:])
        assert correlation_id == 77
        assert result == ApiVersionsResult(advertised_api_versions(), ErrorCode.UNSUPPORTED_VERSION)


# --------------------------------------------------------------------------- malformed requests


def _patched_request(message: Any, edit: Any, version: int | None = None) -> bytes:
    """Encode `message`, let `edit(body)` return a changed kio body, re-encode it."""
    frame = encode(message, version)
    key, ver = struct.unpack_from(">hh", frame, 4)
    cls = load_request_schema(key, ver)
    header, body = kio_parse(frame, cls, request=True)
    buf = io.BytesIO()
    entity_writer(cls.__header_schema__)(buf, header)
    entity_writer(cls)(buf, edit(body))
    return buf.getvalue()


def _expect_invalid(frame: bytes) -> WireError:
    with pytest.raises(WireError) as info:
        decode_request(frame)
    assert info.value.code == ErrorCode.INVALID_REQUEST
    assert info.value.header is not None
    return info.value


def test_wrong_topics_and_partitions_are_invalid_requests():
    vote = VoteRequest(5, 1, 4, 10)
    topic = lambda b: b.topics[0]  # noqa: E731
    _expect_invalid(_patched_request(vote, lambda b: dataclasses.replace(b, topics=())))
    _expect_invalid(_patched_request(vote, lambda b: dataclasses.replace(b, topics=(topic(b), topic(b)))))
    _expect_invalid(
        _patched_request(
            vote, lambda b: dataclasses.replace(b, topics=(dataclasses.replace(topic(b), topic_name="x"),))
        )
    )
    two_parts = lambda b: dataclasses.replace(  # noqa: E731
        b, topics=(dataclasses.replace(topic(b), partitions=topic(b).partitions * 2),)
    )
    _expect_invalid(_patched_request(vote, two_parts))
    other_partition = lambda b: dataclasses.replace(  # noqa: E731
        b,
        topics=(
            dataclasses.replace(topic(b), partitions=(dataclasses.replace(topic(b).partitions[0], partition_index=1),)),
        ),
    )
    err = _expect_invalid(_patched_request(vote, other_partition))
    # The header parsed, so the sender gets an INVALID_REQUEST answer at its version.
    response = error_response_for(err)
    assert response is not None
    _, got = decode_response(52, 2, response[4:], request=vote)
    assert isinstance(got, VoteResponse) and got.error == ErrorCode.INVALID_REQUEST

    fetch = FetchRequest(2, 5, 10, 4)
    wrong_id = lambda b: dataclasses.replace(  # noqa: E731
        b, topics=(dataclasses.replace(b.topics[0], topic_id=uuid.UUID(int=7)),)
    )
    _expect_invalid(_patched_request(fetch, wrong_id))


def test_trailing_bytes_unknown_key_and_unsupported_version():
    frame = encode(BeginQuorumEpochRequest(1, 2))[4:]
    # Bytes after the body are ignored, as Kafka ignores them (read_request_body).
    assert decode_request(frame + b"\x00\x01").message == decode_request(frame).message

    unknown = bytearray(frame)
    struct.pack_into(">h", unknown, 0, 3)  # Metadata: not served here
    err = _expect_invalid(bytes(unknown))
    assert error_response_for(err) is None  # nothing to answer with: close the connection

    old_fetch = bytearray(encode(FetchRequest(2, 5, 10, 4))[4:])
    struct.pack_into(">h", old_fetch, 2, 12)
    with pytest.raises(WireError) as info:
        decode_request(bytes(old_fetch))
    assert info.value.code == ErrorCode.UNSUPPORTED_VERSION
    response = error_response_for(info.value)
    assert response is not None  # kio knows Fetch v12: answer with a top-level error
    header, body = kio_parse(response, load_response_schema(1, 12), request=False)
    assert body.error_code == KioErrorCode.unsupported_version and body.responses == ()

    future_fetch = bytearray(old_fetch)
    struct.pack_into(">h", future_fetch, 2, 99)
    with pytest.raises(WireError) as info:
        decode_request(bytes(future_fetch))
    assert error_response_for(info.value) is None


def test_encode_error_response_for_a_decoded_request():
    req = decode_request(encode(FetchSnapshotRequest(2, 5, OffsetAndEpoch(4, 10), 0))[4:])
    frame = encode_error_response(req, ErrorCode.INVALID_REQUEST, message="nope")
    assert decode_response(59, 1, frame[4:]) == (42, FetchSnapshotResponse(ErrorCode.INVALID_REQUEST, -1, -1))
    with pytest.raises(WireError):
        encode_error_response(dataclasses.replace(req, api_key=3), ErrorCode.INVALID_REQUEST)


def test_decoded_request_header_property():
    req = decode_request(encode(BeginQuorumEpochRequest(1, 2))[4:])
    assert isinstance(req, DecodedRequest)
    assert req.header.correlation_id == 42 and req.header.client_id == "test"


# --------------------------------------------------------------------------- error codes


@pytest.mark.parametrize("code", list(ErrorCode), ids=lambda c: c.name)
def test_error_code_values_match_kafka(code):
    assert KioErrorCode(int(code)).name.upper() == code.name


def test_every_served_version_has_kio_schemas():
    for key, (low, high) in API_VERSIONS.items():
        for version in range(low, high + 1):
            assert load_request_schema(key, version) is not None
            assert load_response_schema(key, version) is not None
