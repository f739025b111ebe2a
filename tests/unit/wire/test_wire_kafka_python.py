"""Cross-check the codec against an independent implementation: kafka-python's protocol
classes (kafka-python==3.0.12, pinned in pyproject's test extra). kafka-python has no
KRaft-internal APIs, but it has ApiVersions, Fetch and DescribeQuorum."""

from __future__ import annotations

import struct

import pytest
import wire_strategies as ws  # type: ignore[import-not-found,unused-ignore]  # a sibling module on pytest's path
from hypothesis import given
from hypothesis import strategies as st

from quorum.raft.errors import ErrorCode
from quorum.raft.messages import FetchRequest
from quorum.wire import (
    API_VERSIONS,
    ApiVersionsCall,
    ApiVersionsResult,
    DescribeQuorumCall,
    WireError,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    error_response_for,
)
from quorum.wire.codec import advertised_api_versions

kafka = pytest.importorskip("kafka")
from kafka.protocol.admin.cluster import DescribeQuorumRequest as KDescribeQuorumRequest  # noqa: E402
from kafka.protocol.admin.cluster import DescribeQuorumResponse as KDescribeQuorumResponse  # noqa: E402
from kafka.protocol.consumer.fetch import FetchRequest as KFetchRequest  # noqa: E402
from kafka.protocol.consumer.fetch import FetchResponse as KFetchResponse  # noqa: E402
from kafka.protocol.metadata.api_versions import ApiVersionsRequest as KApiVersionsRequest  # noqa: E402
from kafka.protocol.metadata.api_versions import ApiVersionsResponse as KApiVersionsResponse  # noqa: E402


def test_pinned_version():
    assert kafka.__version__ == "3.0.12"


def _kafka_python_api_versions_request(version: int, correlation_id: int) -> bytes:
    kwargs = {"client_software_name": "kafka-python", "client_software_version": "3.0.12"} if version >= 3 else {}
    req = KApiVersionsRequest(version=version, **kwargs)
    req.with_header(correlation_id=correlation_id, client_id="kafka-python-client")
    return bytes(req.encode(header=True, framed=True))


@pytest.mark.parametrize("version", range(5))
def test_api_versions_with_kafka_python(version):
    frame = _kafka_python_api_versions_request(version, correlation_id=31)
    decoded = decode_request(frame[4:])
    assert (decoded.api_key, decoded.api_version, decoded.correlation_id) == (18, version, 31)
    assert decoded.client_id == "kafka-python-client"
    if version >= 3:
        assert decoded.message == ApiVersionsCall("kafka-python", "3.0.12")

    ours = encode_response(decoded, ApiVersionsResult())
    theirs = KApiVersionsResponse.decode(ours, version=version, header=True, framed=True)
    assert theirs.header.correlation_id == 31
    assert theirs.error_code == 0
    assert {k.api_key: (k.min_version, k.max_version) for k in theirs.api_keys} == advertised_api_versions()

    # kafka-python's own encoding of the same answer is byte-identical to ours.
    kwargs = {"throttle_time_ms": 0} if version >= 1 else {}
    expected = KApiVersionsResponse(
        version=version,
        error_code=0,
        api_keys=[
            KApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
            for k, (lo, hi) in sorted(advertised_api_versions().items())
        ],
        **kwargs,
    )
    expected.with_header(correlation_id=31)
    assert bytes(expected.encode(header=True, framed=True)) == ours


def test_api_versions_from_the_future_gets_kip_511_answer_kafka_python_understands():
    frame = bytearray(_kafka_python_api_versions_request(4, correlation_id=8))
    struct.pack_into(">h", frame, 6, 7)  # ask for ApiVersions v7
    with pytest.raises(WireError) as info:
        decode_request(bytes(frame[4:]))
    response = error_response_for(info.value)
    assert response is not None
    theirs = KApiVersionsResponse.decode(response, version=4, header=True, framed=True)
    assert theirs.header.correlation_id == 8
    assert theirs.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert max(k.max_version for k in theirs.api_keys if k.api_key == 18) == 4  # so the client retries with v4


@given(message=ws.fetch_requests, data=st.data(), cluster_id=ws.cluster_ids, correlation_id=ws.i32)
def test_fetch_request_bytes_identical_to_kafka_python(message, data, cluster_id, correlation_id):
    version = data.draw(st.integers(*API_VERSIONS[1]), label="version")
    frame = encode_request(
        message,
        correlation_id=correlation_id,
        client_id="n",
        cluster_id=cluster_id,
        source_id=message.replica_id,
        destination_id=1,
        api_version=version,
    )
    theirs = KFetchRequest.decode(frame, version=version, header=True, framed=True)
    assert theirs.topics[0].partitions[0].fetch_offset == message.fetch_offset
    assert theirs.max_wait_ms == message.max_wait_ms
    assert bytes(theirs.encode(header=True, framed=True)) == frame


@given(response=ws.fetch_responses, data=st.data(), endpoints=ws.endpoints)
def test_fetch_response_bytes_identical_to_kafka_python(response, data, endpoints):
    version = data.draw(st.integers(*API_VERSIONS[1]), label="version")
    request = decode_request(
        encode_request(
            FetchRequest(2, 1, 0, 0),
            correlation_id=3,
            client_id="n",
            cluster_id=None,
            source_id=2,
            destination_id=1,
            api_version=version,
        )[4:]
    )
    frame = encode_response(request, response, endpoints=endpoints)
    theirs = KFetchResponse.decode(frame, version=version, header=True, framed=True)
    part = theirs.responses[0].partitions[0]
    assert part.high_watermark == response.high_watermark
    # CurrentLeader is a tagged field: left out when it holds its defaults (-1, -1), as Kafka does.
    leader = part.current_leader
    current = (leader.leader_id, leader.leader_epoch) if leader is not None else (-1, -1)
    assert current == (response.leader_id, response.leader_epoch)
    assert bytes(theirs.encode(header=True, framed=True)) == frame
    assert decode_response(1, version, frame[4:])[1] == response


@given(description=ws.quorum_descriptions, data=st.data(), endpoints=ws.endpoints)
def test_describe_quorum_bytes_identical_to_kafka_python(description, data, endpoints):
    version = data.draw(st.integers(*API_VERSIONS[55]), label="version")
    frame = encode_request(
        DescribeQuorumCall(),
        correlation_id=4,
        client_id="cli",
        cluster_id=None,
        source_id=-1,
        destination_id=-1,
        api_version=version,
    )
    theirs_req = KDescribeQuorumRequest.decode(frame, version=version, header=True, framed=True)
    assert bytes(theirs_req.encode(header=True, framed=True)) == frame
    out = encode_response(decode_request(frame[4:]), description, endpoints=endpoints)
    theirs = KDescribeQuorumResponse.decode(out, version=version, header=True, framed=True)
    assert theirs.topics[0].partitions[0].leader_id == description.leader_id
    assert bytes(theirs.encode(header=True, framed=True)) == out
