"""Fuzz the decoders: whatever the bytes, they return or raise WireError, never anything
else, and never take the process down (kio's native reader aborts on some of these)."""

from __future__ import annotations

import struct

import wire_strategies as ws  # type: ignore[import-not-found,unused-ignore]  # a sibling module on pytest's path
from hypothesis import example, given, settings
from hypothesis import strategies as st

from quorum.raft.errors import ErrorCode
from quorum.raft.messages import FetchRequest, FetchResponse, VoteRequest
from quorum.raft.types import Batch
from quorum.wire import (
    API_VERSIONS,
    ApiVersionsCall,
    ApiVersionsResult,
    DescribeQuorumCall,
    WireError,
    api_key_of,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    error_response_for,
)

SERVED = [(key, version) for key, (low, high) in API_VERSIONS.items() for version in range(low, high + 1)]

# Inputs that abort the process inside kio 0.6.5's native entity reader (a compact-array
# length above 2**32 is pre-allocated): cluster id "Q", voter id, then a huge topics count.
KIO_ABORTS_ON = bytes.fromhex("0251d5a100a8de9195c178")


def vote_v2_frame(body: bytes) -> bytes:
    # header v2: api key 52, version 2, correlation id 1, client id null, no tagged fields
    return struct.pack(">hhih", 52, 2, 1, -1) + b"\x00" + body


def check_request(frame: bytes) -> None:
    try:
        decoded = decode_request(frame)
    except WireError as exc:
        assert isinstance(exc.code, ErrorCode)
        response = error_response_for(exc)  # must not raise either
        assert response is None or isinstance(response, bytes)
    else:
        assert decoded.api_key in API_VERSIONS


def check_response(key: int, version: int, frame: bytes) -> None:
    try:
        decode_response(key, version, frame)
    except WireError as exc:
        assert isinstance(exc.code, ErrorCode)


@st.composite
def valid_request_frames(draw: st.DrawFn) -> bytes:
    message = draw(
        st.one_of(ws.requests, st.just(DescribeQuorumCall()), st.builds(ApiVersionsCall, st.text(), st.text()))
    )
    key = api_key_of(message)
    low, high = API_VERSIONS[key]
    version = draw(st.integers(low, high))
    if isinstance(message, VoteRequest) and message.pre_vote and version < 2:
        version = 2
    frame = encode_request(
        message,
        correlation_id=draw(ws.i32),
        client_id=draw(ws.client_ids),
        cluster_id=draw(ws.cluster_ids),
        source_id=1,
        destination_id=2,
        api_version=version,
    )
    return frame[4:]


@st.composite
def valid_response_frames(draw: st.DrawFn) -> tuple[int, int, bytes]:
    frame = draw(valid_request_frames())
    request = decode_request(frame)
    key = request.api_key
    if key == 18:
        response = ApiVersionsResult()
    elif key == 55:
        response = draw(ws.quorum_descriptions)
    else:
        strategy = {
            52: ws.vote_responses,
            53: ws.begin_responses,
            54: ws.end_responses,
            1: ws.fetch_responses,
            59: ws.fetch_snapshot_responses,
        }[key]
        response = draw(strategy)
    out = encode_response(request, response, endpoints=draw(ws.endpoints))
    return key, request.api_version, out[4:]


@settings(max_examples=500)
@given(st.binary(max_size=300))
@example(KIO_ABORTS_ON)
@example(vote_v2_frame(KIO_ABORTS_ON))
@example(vote_v2_frame(b"\x00\x00\x00\x00\x01" + b"\xff\xff\xff\xff\x0f"))
@example(b"")
@example(b"\x00\x34\x00\x02")
def test_random_request_bytes(data):
    check_request(data)


@settings(max_examples=300)
@given(key_version=st.sampled_from(SERVED), body=st.binary(max_size=200))
def test_random_request_body_behind_a_valid_header(key_version, body):
    key, version = key_version
    flexible_header = not (key == 18 and version < 3) and not (key in (53, 54) and version == 0)
    header = struct.pack(">hhih", key, version, 9, 3) + b"cli" + (b"\x00" if flexible_header else b"")
    check_request(header + body)


@settings(max_examples=300)
@given(key_version=st.sampled_from(SERVED), data=st.binary(max_size=300))
@example(key_version=(52, 2), data=b"\x00\x00\x00\x01\x00" + b"\x00\x00" + b"\xde\x91\x95\xc1\x78")
def test_random_response_bytes(key_version, data):
    key, version = key_version
    check_response(key, version, data)


@settings(max_examples=200)
@given(frame=valid_request_frames(), data=st.data())
def test_truncated_request_frames(frame, data):
    cut = data.draw(st.integers(0, len(frame) - 1), label="cut")
    check_request(frame[:cut])


@settings(max_examples=300)
@given(frame=valid_request_frames(), data=st.data())
def test_bit_flipped_request_frames(frame, data):
    flips = data.draw(st.lists(st.integers(0, len(frame) * 8 - 1), min_size=1, max_size=4), label="bits")
    mutated = bytearray(frame)
    for bit in flips:
        mutated[bit // 8] ^= 1 << (bit % 8)
    check_request(bytes(mutated))


# A length field somewhere replaced by a huge value: 5-byte varints up to 2**35, int16/int32 maxima.
HUGE = [b"\xff\xff\xff\xff\x0f", b"\xde\x91\x95\xc1\x78", b"\x7f\xff\xff\xff", b"\x7f\xff", b"\x80\x00\x00\x00"]


@settings(max_examples=300)
@given(frame=valid_request_frames(), data=st.data())
def test_oversized_lengths_in_request_frames(frame, data):
    at = data.draw(st.integers(0, len(frame)), label="at")
    huge = data.draw(st.sampled_from(HUGE), label="huge")
    replace = data.draw(st.integers(0, 5), label="replace")
    check_request(frame[:at] + huge + frame[at + replace :])


@settings(max_examples=200)
@given(case=valid_response_frames(), data=st.data())
def test_truncated_response_frames(case, data):
    key, version, frame = case
    cut = data.draw(st.integers(0, len(frame) - 1), label="cut")
    check_response(key, version, frame[:cut])


@settings(max_examples=300)
@given(case=valid_response_frames(), data=st.data())
def test_bit_flipped_and_oversized_response_frames(case, data):
    key, version, frame = case
    flips = data.draw(st.lists(st.integers(0, len(frame) * 8 - 1), max_size=3), label="bits")
    mutated = bytearray(frame)
    for bit in flips:
        mutated[bit // 8] ^= 1 << (bit % 8)
    at = data.draw(st.integers(0, len(frame)), label="at")
    huge = data.draw(st.sampled_from([b"", *HUGE]), label="huge")
    check_response(key, version, bytes(mutated[:at]) + huge + bytes(mutated[at + len(huge) :]))


def test_every_single_byte_corruption_of_a_fetch_response():
    """Each byte of a Fetch response with records, xored three ways: decodes or WireError."""
    fetch = decode_request(
        encode_request(
            FetchRequest(2, 5, 0, 0), correlation_id=1, client_id=None, cluster_id=None, source_id=2, destination_id=1
        )[4:]
    )
    frame = encode_response(fetch, FetchResponse(ErrorCode.NONE, 1, 5, 3, 0, batches=(Batch(0, 5, (b"abc",) * 3),)))
    body = frame[4:]
    for i in range(len(body)):
        for mask in (0x01, 0x80, 0xFF):
            mutated = bytearray(body)
            mutated[i] ^= mask
            check_response(1, 17, bytes(mutated))
