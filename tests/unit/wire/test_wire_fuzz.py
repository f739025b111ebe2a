"""Fuzz the decoders: whatever the bytes, they return or raise WireError, never anything
else, and never take the process down (kio's native reader aborts on some of these).

With teeth: a request or response that decodes re-encodes to a canonical frame that
decodes to an equal value (and a frame our encoder wrote re-encodes to the very same
bytes); a request that is refused is refused with the error its header calls for
(`expected_refusal`), and the error response it gets decodes back to that error."""

from __future__ import annotations

import struct

import wire_strategies as ws  # type: ignore[import-not-found,unused-ignore]  # a sibling module on pytest's path
from hypothesis import example, given, settings
from hypothesis import strategies as st

from quorum.raft.errors import ErrorCode
from quorum.raft.messages import (
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    VoteRequest,
)
from quorum.raft.types import Batch, OffsetAndEpoch
from quorum.wire import (
    API_VERSIONS,
    ApiKey,
    ApiVersionsCall,
    ApiVersionsResult,
    DecodedRequest,
    DescribeQuorumCall,
    RequestHeaderInfo,
    WireError,
    api_key_of,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    error_response_for,
)
from tests.scale import examples

SERVED = [(key, version) for key, (low, high) in API_VERSIONS.items() for version in range(low, high + 1)]

# Inputs that abort the process inside kio 0.6.5's native entity reader (a compact-array
# length above 2**32 is pre-allocated): cluster id "Q", voter id, then a huge topics count.
KIO_ABORTS_ON = bytes.fromhex("0251d5a100a8de9195c178")


def vote_v2_frame(body: bytes) -> bytes:
    # header v2: api key 52, version 2, correlation id 1, client id null, no tagged fields
    return struct.pack(">hhih", 52, 2, 1, -1) + b"\x00" + body


def expected_refusal(frame: bytes) -> tuple[ErrorCode, RequestHeaderInfo | None]:
    """What a refused request frame must be refused with, from its header alone (Kafka's
    request header v1/v2: int16 key, int16 version, int32 correlation id, int16-length
    client id): no header -> INVALID_REQUEST without a header to answer; an api we do not
    serve -> INVALID_REQUEST; a version outside ours -> UNSUPPORTED_VERSION; else the body
    is bad -> INVALID_REQUEST. Every error but a missing header can be answered."""
    if len(frame) < 10:
        return ErrorCode.INVALID_REQUEST, None
    key, version, correlation_id, n = struct.unpack_from(">hhih", frame)
    client_id: str | None = None
    if n >= 0:
        if len(frame) < 10 + n:
            return ErrorCode.INVALID_REQUEST, None
        try:
            client_id = frame[10 : 10 + n].decode("utf-8")
        except UnicodeDecodeError:
            return ErrorCode.INVALID_REQUEST, None
    elif n != -1:
        return ErrorCode.INVALID_REQUEST, None
    head = RequestHeaderInfo(key, version, correlation_id, client_id)
    if key not in API_VERSIONS:
        return ErrorCode.INVALID_REQUEST, head
    low, high = API_VERSIONS[key]
    if not low <= version <= high:
        return ErrorCode.UNSUPPORTED_VERSION, head
    return ErrorCode.INVALID_REQUEST, head


def reencode_request(decoded: DecodedRequest) -> bytes:
    """The canonical frame (no length prefix) of a decoded request."""
    frame = encode_request(
        decoded.message,
        correlation_id=decoded.correlation_id,
        client_id=decoded.client_id,
        cluster_id=decoded.cluster_id,
        source_id=decoded.source_id,
        destination_id=decoded.destination_id,
        api_version=decoded.api_version,
    )
    return frame[4:]


def check_request(frame: bytes) -> DecodedRequest | None:
    """Decode `frame`: a refusal must be the expected one and answerable when its header
    parsed; a success must re-encode to a canonical frame that decodes equal and
    re-encodes to itself."""
    try:
        decoded = decode_request(frame)
    except WireError as exc:
        code, head = expected_refusal(frame)
        assert (exc.code, exc.header) == (code, head), exc
        response = error_response_for(exc)
        if head is None or head.api_key not in API_VERSIONS:
            assert response is None  # nothing to answer with: the connection is closed
        elif code == ErrorCode.UNSUPPORTED_VERSION and head.api_key != ApiKey.API_VERSIONS:
            # answered at the asked version when kio has its schema, else closed (Kafka's rule)
            assert response is None or response[4:8] == struct.pack(">i", head.correlation_id)
        else:
            assert response is not None
            answer_version = 0 if head.api_key == ApiKey.API_VERSIONS else head.api_version
            correlation_id, answer = decode_response(head.api_key, answer_version, response[4:])
            assert correlation_id == head.correlation_id
            assert getattr(answer, "error", None) == code
        return None
    assert decoded.api_key in API_VERSIONS
    canonical = reencode_request(decoded)
    assert decode_request(canonical) == decoded
    assert reencode_request(decode_request(canonical)) == canonical
    return decoded


def check_encoded_request(frame: bytes) -> None:
    """A frame our encoder wrote re-encodes to the same bytes."""
    decoded = check_request(frame)
    assert decoded is not None
    assert reencode_request(decoded) == frame


def check_response(key: int, version: int, frame: bytes) -> None:
    """Decode a response: a refusal is INVALID_REQUEST (malformed), or CORRUPT_MESSAGE for a
    Fetch answer's record batches; a success re-encodes to a canonical frame that decodes
    equal."""
    try:
        correlation_id, decoded = decode_response(key, version, frame)
    except WireError as exc:
        corrupt_records = {ErrorCode.CORRUPT_MESSAGE} if key == ApiKey.FETCH else set()
        assert exc.code in {ErrorCode.INVALID_REQUEST, *corrupt_records}, exc
        return
    request = DecodedRequest(key, version, correlation_id, None, None, -1, CALL_OF[key])
    canonical = encode_response(request, decoded)[4:]
    assert decode_response(key, version, canonical) == (correlation_id, decoded)
    assert encode_response(request, decode_response(key, version, canonical)[1])[4:] == canonical


# A request of each api, only for its type: a response's encoder checks that it fits.
CALL_OF = {
    ApiKey.VOTE: VoteRequest(1, 1, 0, 0),
    ApiKey.BEGIN_QUORUM_EPOCH: BeginQuorumEpochRequest(1, 1),
    ApiKey.END_QUORUM_EPOCH: EndQuorumEpochRequest(1, 1, ()),
    ApiKey.FETCH: FetchRequest(2, 1, 0, 0),
    ApiKey.FETCH_SNAPSHOT: FetchSnapshotRequest(2, 1, OffsetAndEpoch(0, 0), 0, 100),
    ApiKey.DESCRIBE_QUORUM: DescribeQuorumCall(),
    ApiKey.API_VERSIONS: ApiVersionsCall(),
}


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
def valid_response_frames(draw: st.DrawFn, with_endpoints: bool = True) -> tuple[int, int, bytes]:
    """A response our encoder wrote; with endpoints (node id -> host, port), which a
    decoded response does not keep, or without."""
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
    out = encode_response(request, response, endpoints=draw(ws.endpoints) if with_endpoints else None)
    return key, request.api_version, out[4:]


@settings(max_examples=examples(500))
@given(st.binary(max_size=300))
@example(KIO_ABORTS_ON)
@example(vote_v2_frame(KIO_ABORTS_ON))
@example(vote_v2_frame(b"\x00\x00\x00\x00\x01" + b"\xff\xff\xff\xff\x0f"))
@example(b"")
@example(b"\x00\x34\x00\x02")
def test_random_request_bytes(data):
    check_request(data)


@settings(max_examples=examples(300))
@given(key_version=st.sampled_from(SERVED), body=st.binary(max_size=200))
def test_random_request_body_behind_a_valid_header(key_version, body):
    key, version = key_version
    flexible_header = not (key == 18 and version < 3) and not (key in (53, 54) and version == 0)
    header = struct.pack(">hhih", key, version, 9, 3) + b"cli" + (b"\x00" if flexible_header else b"")
    check_request(header + body)


@settings(max_examples=examples(300))
@given(key_version=st.sampled_from(SERVED), data=st.binary(max_size=300))
@example(key_version=(52, 2), data=b"\x00\x00\x00\x01\x00" + b"\x00\x00" + b"\xde\x91\x95\xc1\x78")
def test_random_response_bytes(key_version, data):
    key, version = key_version
    check_response(key, version, data)


@settings(max_examples=examples(200))
@given(frame=valid_request_frames())
def test_encoded_request_frames_reencode_to_the_same_bytes(frame):
    check_encoded_request(frame)


@settings(max_examples=examples(200))
@given(case=valid_response_frames(with_endpoints=False))
def test_encoded_response_frames_reencode_to_the_same_bytes(case):
    key, version, frame = case
    correlation_id, decoded = decode_response(key, version, frame)
    request = DecodedRequest(key, version, correlation_id, None, None, -1, CALL_OF[key])
    assert encode_response(request, decoded)[4:] == frame


@settings(max_examples=examples(200))
@given(frame=valid_request_frames(), data=st.data())
def test_truncated_request_frames(frame, data):
    cut = data.draw(st.integers(0, len(frame) - 1), label="cut")
    check_request(frame[:cut])


@settings(max_examples=examples(300))
@given(frame=valid_request_frames(), data=st.data())
def test_bit_flipped_request_frames(frame, data):
    flips = data.draw(st.lists(st.integers(0, len(frame) * 8 - 1), min_size=1, max_size=4), label="bits")
    mutated = bytearray(frame)
    for bit in flips:
        mutated[bit // 8] ^= 1 << (bit % 8)
    check_request(bytes(mutated))


# A length field somewhere replaced by a huge value: 5-byte varints up to 2**35, int16/int32 maxima.
HUGE = [b"\xff\xff\xff\xff\x0f", b"\xde\x91\x95\xc1\x78", b"\x7f\xff\xff\xff", b"\x7f\xff", b"\x80\x00\x00\x00"]


@settings(max_examples=examples(300))
@given(frame=valid_request_frames(), data=st.data())
def test_oversized_lengths_in_request_frames(frame, data):
    at = data.draw(st.integers(0, len(frame)), label="at")
    huge = data.draw(st.sampled_from(HUGE), label="huge")
    replace = data.draw(st.integers(0, 5), label="replace")
    check_request(frame[:at] + huge + frame[at + replace :])


@settings(max_examples=examples(200))
@given(case=valid_response_frames(), data=st.data())
def test_truncated_response_frames(case, data):
    key, version, frame = case
    cut = data.draw(st.integers(0, len(frame) - 1), label="cut")
    check_response(key, version, frame[:cut])


@settings(max_examples=examples(300))
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
