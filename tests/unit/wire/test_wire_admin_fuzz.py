"""Fuzz the admin decoders: whatever the bytes, they return or raise WireError, never
anything else, and never take the process down (kio's native reader aborts on some of
these). Error answers to what fails must not raise either."""

from __future__ import annotations

import struct
import uuid
from typing import Any

import test_wire_admin_strategies as ads  # type: ignore[import-not-found,unused-ignore]  # a sibling module
from hypothesis import example, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema

from quorum.controller.requests import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterConfigOp,
    AlterConfigOpType,
    AlterConfigsResource,
    AlterConfigsResult,
    AlterPartitionItem,
    AlterPartitionRequest,
    AlterPartitionResponse,
    AlterPartitionResult,
    BrokerEndpoint,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    ConfigResourceType,
    CreatableTopic,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsResult,
    CreateTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    ElectionType,
    ElectLeaderResult,
    ElectLeadersRequest,
    ElectLeadersResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    IsrMember,
    PartitionsIncrease,
)
from quorum.raft.errors import ErrorCode
from quorum.wire.admin_codec import (
    ADMIN_API_VERSIONS,
    AdminRequestError,
    ConfigEntry,
    ConfigSynonym,
    DescribeClusterBroker,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeConfigsRequest,
    DescribeConfigsResource,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    UnregisterBrokerRequest,
    UnregisterBrokerResponse,
    decode_admin_request,
    decode_admin_response,
    encode_admin_request,
    encode_admin_response,
)
from quorum.wire.admin_codec import admin_error_response_for as answer_for
from quorum.wire.codec import WireError
from tests.scale import examples

ZERO_UUID = uuid.UUID(int=0)
SERVED = [(key, version) for key, (low, high) in sorted(ADMIN_API_VERSIONS.items()) for version in range(low, high + 1)]

# A length field replaced by a huge value: 5-byte varints up to 2**35, int16/int32 maxima.
HUGE = [b"\xff\xff\xff\xff\x0f", b"\xde\x91\x95\xc1\x78", b"\x7f\xff\xff\xff", b"\x7f\xff", b"\x80\x00\x00\x00"]


def header(key: int, version: int, correlation_id: int = 9) -> bytes:
    flexible = load_request_schema(key, version).__flexible__
    return struct.pack(">hhih", key, version, correlation_id, 3) + b"cli" + (b"\x00" if flexible else b"")


def check_request(frame: bytes) -> None:
    try:
        decoded = decode_admin_request(frame)
    except WireError as exc:
        assert isinstance(exc.code, ErrorCode)
        if isinstance(exc, AdminRequestError):
            assert isinstance(exc.error_code, int)
        response = answer_for(exc)  # must not raise either
        assert response is None or isinstance(response, bytes)
        if response is not None:
            assert exc.header is not None
            decode_admin_response(exc.header.api_key, exc.header.api_version, response[4:])
    else:
        assert decoded.api_key in ADMIN_API_VERSIONS


def check_response(key: int, version: int, frame: bytes) -> None:
    try:
        decode_admin_response(key, version, frame)
    except WireError as exc:
        assert isinstance(exc.code, ErrorCode)


@st.composite
def valid_request_frames(draw: st.DrawFn) -> bytes:
    key, version = draw(st.sampled_from(SERVED))
    request = draw(ads.REQUESTS[key].filter(lambda r: ads.fits_version(r, version)))
    frame, _, _ = encode_admin_request(
        request, correlation_id=draw(ads.i32), client_id=draw(st.none() | st.text(max_size=8)), api_version=version
    )
    return frame[4:]


@st.composite
def valid_response_frames(draw: st.DrawFn) -> tuple[int, int, bytes]:
    decoded = decode_admin_request(draw(valid_request_frames()))
    response = draw(ads.RESPONSES[decoded.api_key])
    return decoded.api_key, decoded.api_version, encode_admin_response(decoded, response)[4:]


def mutate(frame: bytes, data: st.DataObject) -> bytes:
    flips = data.draw(st.lists(st.integers(0, len(frame) * 8 - 1), max_size=3), label="bits")
    mutated = bytearray(frame)
    for bit in flips:
        mutated[bit // 8] ^= 1 << (bit % 8)
    at = data.draw(st.integers(0, len(frame)), label="at")
    huge = data.draw(st.sampled_from([b"", *HUGE]), label="huge")
    replace = data.draw(st.integers(0, 5), label="replace")
    return bytes(mutated[:at]) + huge + bytes(mutated[at + replace :])


@settings(max_examples=examples(500))
@given(st.binary(max_size=300))
@example(b"")
@example(b"\x00\x13\x00\x07")
@example(header(19, 7) + b"\xff\xff\xff\xff\x0f")  # CreateTopics v7: 2**32 - 2 topics
@example(header(62, 4) + b"\x00\x00\x00\x01" + b"\x02c" + bytes(16) + b"\xde\x91\x95\xc1\x78")  # 2**35 listeners
@example(header(32, 1) + b"\x7f\xff\xff\xff")  # DescribeConfigs v1: 2**31 - 1 resources
def test_random_request_bytes(data):
    check_request(data)


@settings(max_examples=examples(400))
@given(key_version=st.sampled_from(SERVED), body=st.binary(max_size=200))
def test_random_request_body_behind_a_valid_header(key_version, body):
    check_request(header(*key_version) + body)


@settings(max_examples=examples(400))
@given(key_version=st.sampled_from(SERVED), data=st.binary(max_size=300))
@example(key_version=(19, 7), data=b"\x00\x00\x00\x01\x00" + b"\x00\x00\x00\x00" + b"\xff\xff\xff\xff\x0f")
@example(key_version=(56, 3), data=b"\x00\x00\x00\x01\x00" + bytes(6) + b"\xde\x91\x95\xc1\x78")
def test_random_response_bytes(key_version, data):
    check_response(*key_version, data)


@settings(max_examples=examples(300))
@given(frame=valid_request_frames(), data=st.data())
def test_truncated_request_frames(frame, data):
    check_request(frame[: data.draw(st.integers(0, len(frame) - 1), label="cut")])


@settings(max_examples=examples(500))
@given(frame=valid_request_frames(), data=st.data())
def test_bit_flipped_and_oversized_request_frames(frame, data):
    check_request(mutate(frame, data))


@settings(max_examples=examples(300))
@given(case=valid_response_frames(), data=st.data())
def test_truncated_response_frames(case, data):
    key, version, frame = case
    check_response(key, version, frame[: data.draw(st.integers(0, len(frame) - 1), label="cut")])


@settings(max_examples=examples(500))
@given(case=valid_response_frames(), data=st.data())
def test_bit_flipped_and_oversized_response_frames(case, data):
    key, version, frame = case
    check_response(key, version, mutate(frame, data))


def every_byte_corruption(frame: bytes) -> list[bytes]:
    out = []
    for i in range(len(frame)):
        for mask in (0x01, 0x80, 0xFF):
            mutated = bytearray(frame)
            mutated[i] ^= mask
            out.append(bytes(mutated))
    return out


def test_every_single_byte_corruption_of_one_request_and_response_per_api():
    """Each byte of a full request and response of every api (at its highest and lowest
    version), xored three ways: decodes or WireError."""
    samples: dict[int, tuple[Any, Any]] = {
        19: (
            CreateTopicsRequest((CreatableTopic("t", -1, -1, {0: (1, 2)}, {"a": "b"}),), True, 5),
            CreateTopicsResponse((CreateTopicResult("t", 0, "m", ZERO_UUID, 1, 1, {"a": "b"}),)),
        ),
        20: (DeleteTopicsRequest(("t",)), DeleteTopicsResponse((DeleteTopicResult("t", None, 3, "x"),))),
        32: (
            DescribeConfigsRequest((DescribeConfigsResource(2, "t", ("a",)),), True, True),
            DescribeConfigsResponse(
                (
                    DescribeConfigsResult(
                        2, "t", entries=(ConfigEntry("a", "1", synonyms=(ConfigSynonym("a", "1", 1),)),)
                    ),
                )
            ),
        ),
        37: (
            CreatePartitionsRequest((PartitionsIncrease("t", 3, ((1,), (2,))),)),
            CreatePartitionsResponse((CreatePartitionsResult("t", 37, "no"),)),
        ),
        43: (
            ElectLeadersRequest(ElectionType.PREFERRED, (("t", 0), ("t", 1))),
            ElectLeadersResponse(0, (ElectLeaderResult("t", 0, 84, "x"),)),
        ),
        44: (
            IncrementalAlterConfigsRequest(
                (
                    AlterConfigsResource(
                        ConfigResourceType.TOPIC, "t", (AlterConfigOp("a", AlterConfigOpType.SET, "1"),)
                    ),
                )
            ),
            IncrementalAlterConfigsResponse((AlterConfigsResult(ConfigResourceType.TOPIC, "t", 0),)),
        ),
        56: (
            AlterPartitionRequest(1, 2, (AlterPartitionItem(ZERO_UUID, 0, 1, (IsrMember(1, 2),), 0, 3),)),
            AlterPartitionResponse(0, (AlterPartitionResult(ZERO_UUID, 0, 0, 1, 1, (1,), 0, 4),)),
        ),
        60: (
            DescribeClusterRequest(),
            DescribeClusterResponse("c", 1, (DescribeClusterBroker(1, "h", 9092, "r"),)),
        ),
        62: (
            BrokerRegistrationRequest(1, "c", ZERO_UUID, (BrokerEndpoint("L", "h", 9092),), "r", {"f": (0, 1)}),
            BrokerRegistrationResponse(0, 5),
        ),
        63: (BrokerHeartbeatRequest(1, 2, 3, False, False), BrokerHeartbeatResponse(0, True, False, False)),
        64: (UnregisterBrokerRequest(1), UnregisterBrokerResponse(0, None)),
        67: (AllocateProducerIdsRequest(4, 17), AllocateProducerIdsResponse(0, 1000, 1000)),
    }
    assert set(samples) == set(ADMIN_API_VERSIONS)
    for key, (request, response) in samples.items():
        for version in sorted(set(ADMIN_API_VERSIONS[key])):
            frame, _, _ = encode_admin_request(request, correlation_id=1, client_id="c", api_version=version)
            for mutated in every_byte_corruption(frame[4:]):
                check_request(mutated)
            decoded = decode_admin_request(frame[4:])
            out = encode_admin_response(decoded, response)[4:]
            for mutated in every_byte_corruption(out):
                check_response(key, version, mutated)
