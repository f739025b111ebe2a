"""The Raft Fetch v17 read and written by hand (`quorum.wire.fetch_direct`) against kio's path
in `quorum.wire.codec`: every request and answer it writes is byte for byte kio's, every frame
kio writes decodes to the same values, and frames that are not the common shape (or not a
frame at all) still decode as kio's path decides, raising only WireError."""

from __future__ import annotations

import dataclasses
import struct
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quorum.raft.messages import FetchRequest, FetchResponse
from quorum.raft.voter_set import ZERO_UUID
from quorum.wire import codec, fetch_direct
from tests.unit.wire.wire_strategies import (
    client_ids,
    cluster_ids,
    endpoints,
    fetch_requests,
    fetch_responses,
    i32,
)

VERSION = fetch_direct.DIRECT_VERSION
directory_ids = st.just(ZERO_UUID) | st.uuids()


@contextmanager
def kio_only() -> Iterator[None]:
    """codec with the direct functions out of the way: kio's path, the reference."""

    def refuse(*_: Any, **__: Any) -> None:
        raise struct.error("kio's path, please")

    with (
        mock.patch.object(fetch_direct, "encode_fetch_request", refuse),
        mock.patch.object(fetch_direct, "decode_fetch_request", lambda *_, **__: None),
        mock.patch.object(fetch_direct, "encode_fetch_response", refuse),
        mock.patch.object(fetch_direct, "decode_fetch_response", lambda *_, **__: None),
    ):
        yield


def encode_request(m: FetchRequest, corr: int, client_id: str | None, cluster_id: str | None) -> bytes:
    return codec.encode_request(
        m, correlation_id=corr, client_id=client_id, cluster_id=cluster_id, source_id=m.replica_id, destination_id=-1
    )


@settings(max_examples=300)
@given(m=fetch_requests, directory=directory_ids, corr=i32, client_id=client_ids, cluster_id=cluster_ids)
def test_requests_are_kios_bytes_and_decode_to_kios_values(
    m: FetchRequest, directory: uuid.UUID, corr: int, client_id: str | None, cluster_id: str | None
) -> None:
    m = dataclasses.replace(m, replica_directory_id=directory)
    with kio_only():
        expected = encode_request(m, corr, client_id, cluster_id)
    direct = fetch_direct.encode_fetch_request(
        m, topic_id=codec.METADATA_TOPIC_ID, correlation_id=corr, client_id=client_id, cluster_id=cluster_id
    )
    assert direct == expected
    assert encode_request(m, corr, client_id, cluster_id) == expected
    with kio_only():
        reference = codec.decode_request(expected[4:])
    assert fetch_direct.decode_fetch_request(expected[4:], topic_id=codec.METADATA_TOPIC_ID) is not None
    assert codec.decode_request(expected[4:]) == reference
    assert reference.message == m


@settings(max_examples=300)
@given(r=fetch_responses, corr=i32, nodes=endpoints, version=st.sampled_from([VERSION, VERSION - 1]))
def test_answers_are_kios_bytes_and_decode_to_kios_values(
    r: FetchResponse, corr: int, nodes: dict[int, tuple[str, int]], version: int
) -> None:
    m = FetchRequest(replica_id=2, current_leader_epoch=1, fetch_offset=0, last_fetched_epoch=0)
    request = codec.DecodedRequest(codec.ApiKey.FETCH, version, corr, "c", None, 2, m)
    with kio_only():
        expected = codec.encode_response(request, r, endpoints=nodes)
    assert codec.encode_response(request, r, endpoints=nodes) == expected
    if version == VERSION:
        assert codec._encode_fetch_response_direct(corr, r, nodes) == expected
    with kio_only():
        reference = codec.decode_response(codec.ApiKey.FETCH, version, expected[4:])
    decoded = codec.decode_response(codec.ApiKey.FETCH, version, expected[4:])
    assert decoded == reference
    assert all(type(rec) is bytes for b in decoded[1].batches for rec in b.records)  # type: ignore[union-attr]
    if version == VERSION:
        assert fetch_direct.decode_fetch_response(expected[4:], topic_id=codec.METADATA_TOPIC_ID) is not None


def _outcome(f: Any) -> Any:
    try:
        return f()
    except codec.WireError as exc:
        return ("WireError", exc.code)


@settings(max_examples=300)
@given(r=fetch_responses, corr=i32, data=st.data())
def test_damaged_answers_decode_as_kios_path_decides(r: FetchResponse, corr: int, data: st.DataObject) -> None:
    m = FetchRequest(replica_id=2, current_leader_epoch=1, fetch_offset=0, last_fetched_epoch=0)
    request = codec.DecodedRequest(codec.ApiKey.FETCH, VERSION, corr, "c", None, 2, m)
    frame = bytearray(codec.encode_response(request, r)[4:])
    cut = data.draw(st.integers(0, len(frame)))
    flips = data.draw(st.lists(st.tuples(st.integers(0, max(0, len(frame) - 1)), st.integers(0, 255)), max_size=3))
    for at, value in flips:
        if at < len(frame):
            frame[at] = value
    damaged = bytes(frame[:cut] + data.draw(st.binary(max_size=4)))
    with kio_only():
        reference = _outcome(lambda: codec.decode_response(codec.ApiKey.FETCH, VERSION, damaged))
    direct = fetch_direct.decode_fetch_response(damaged, topic_id=codec.METADATA_TOPIC_ID)
    got = _outcome(lambda: codec.decode_response(codec.ApiKey.FETCH, VERSION, damaged))
    if direct is None:
        assert got == reference
    else:  # the direct reader accepted it: kio's path reads the same values
        assert got == reference, (direct, reference)


@settings(max_examples=300)
@given(m=fetch_requests, corr=i32, client_id=client_ids, cluster_id=cluster_ids, data=st.data())
def test_damaged_requests_decode_as_kios_path_decides(
    m: FetchRequest, corr: int, client_id: str | None, cluster_id: str | None, data: st.DataObject
) -> None:
    frame = bytearray(encode_request(m, corr, client_id, cluster_id)[4:])
    cut = data.draw(st.integers(0, len(frame)))
    flips = data.draw(st.lists(st.tuples(st.integers(0, max(0, len(frame) - 1)), st.integers(0, 255)), max_size=3))
    for at, value in flips:
        if at < len(frame):
            frame[at] = value
    damaged = bytes(frame[:cut] + data.draw(st.binary(max_size=4)))
    with kio_only():
        reference = _outcome(lambda: codec.decode_request(damaged))
    assert _outcome(lambda: codec.decode_request(damaged)) == reference


@pytest.mark.parametrize("topics", [0, 2])
def test_other_shapes_go_to_kios_path(topics: int) -> None:
    r = FetchResponse(codec.ErrorCode.NOT_LEADER_OR_FOLLOWER, 1, 3)
    m = FetchRequest(replica_id=2, current_leader_epoch=1, fetch_offset=0, last_fetched_epoch=0)
    frame = codec.encode_response(codec.DecodedRequest(codec.ApiKey.FETCH, VERSION, 7, "c", None, 2, m), r)[4:]
    # Rewrite the topic count (the byte after correlation id, tags, throttle, error, session).
    at = 4 + 1 + 4 + 2 + 4
    assert frame[at] == 2
    other = frame[:at] + bytes([topics + 1]) + frame[at + 1 :]
    assert fetch_direct.decode_fetch_response(other, topic_id=codec.METADATA_TOPIC_ID) is None
    with kio_only():
        reference = _outcome(lambda: codec.decode_response(codec.ApiKey.FETCH, VERSION, other))
    assert _outcome(lambda: codec.decode_response(codec.ApiKey.FETCH, VERSION, other)) == reference
