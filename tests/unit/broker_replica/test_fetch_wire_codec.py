"""The follower's hand-written Fetch v12 codec (`broker.replica.fetch_wire`) against kio's
schemas: every request it writes is byte for byte what kio writes for the same fields, every
answer kio writes decodes to the same fields, and bytes that are not an answer raise
`FetchWireError` and nothing else."""

from __future__ import annotations

import io
import struct
import sys
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.serial import entity_writer

from broker.replica.fetch_wire import (
    FetchPartitionRequest,
    FetchPartitionResponse,
    FetchWireError,
    decode_fetch_answer,
    encode_fetch_request,
)
from quorum.kafka_errors import ErrorCode

REQUEST: Any = load_request_schema(1, 12)
RESPONSE: Any = load_response_schema(1, 12)
REQ = sys.modules[REQUEST.__module__]
RESP = sys.modules[RESPONSE.__module__]

i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12)
codes = st.sampled_from(list(KioErrorCode))


def kio_request(
    correlation_id: int, client_id: str, replica_id: int, max_wait_ms: int, min_bytes: int, max_bytes: int,
    partitions: list[FetchPartitionRequest], session_id: int, session_epoch: int, forgotten: list[tuple[str, int]],
) -> bytes:  # fmt: skip
    """The frame kio writes for these fields (what the follower sent before the hand codec)."""
    by_topic: dict[str, list[Any]] = {}
    for p in partitions:
        by_topic.setdefault(p.topic, []).append(
            REQ.FetchPartition(partition=p.partition, current_leader_epoch=p.current_leader_epoch,
                               fetch_offset=p.fetch_offset, last_fetched_epoch=p.last_fetched_epoch,
                               log_start_offset=p.log_start_offset, partition_max_bytes=p.partition_max_bytes)
        )  # fmt: skip
    gone: dict[str, list[int]] = {}
    for t, i in forgotten:
        gone.setdefault(t, []).append(i)
    body = REQUEST(
        cluster_id=None, replica_id=replica_id, max_wait=timedelta(milliseconds=max_wait_ms), min_bytes=min_bytes,
        max_bytes=max_bytes, isolation_level=0, session_id=session_id, session_epoch=session_epoch,
        topics=tuple(REQ.FetchTopic(topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
        forgotten_topics_data=tuple(REQ.ForgottenTopic(topic=t, partitions=tuple(ps)) for t, ps in gone.items()),
        rack_id="",
    )  # fmt: skip
    header = REQUEST.__header_schema__(request_api_key=1, request_api_version=12, correlation_id=correlation_id,
                                       client_id=client_id)  # fmt: skip
    buf = io.BytesIO()
    entity_writer(REQUEST.__header_schema__)(buf, header)
    entity_writer(REQUEST)(buf, body)
    return struct.pack(">i", len(buf.getvalue())) + buf.getvalue()


partition_requests = st.builds(
    FetchPartitionRequest, topic=st.sampled_from(["a", "b", "topic-é"]) | names, partition=i32,
    current_leader_epoch=i32, fetch_offset=i64, last_fetched_epoch=i32, log_start_offset=i64,
    partition_max_bytes=i32,
)  # fmt: skip


@given(
    correlation_id=i32, client_id=st.sampled_from(["", "replica-2"]) | names, replica_id=i32,
    max_wait_ms=st.integers(0, 2**31 - 1), min_bytes=i32, max_bytes=i32,
    partitions=st.lists(partition_requests, max_size=8), session_id=i32, session_epoch=i32,
    forgotten=st.lists(st.tuples(st.sampled_from(["a", "b"]) | names, i32), max_size=5),
)  # fmt: skip
def test_requests_are_what_kio_writes(
    correlation_id: int, client_id: str, replica_id: int, max_wait_ms: int, min_bytes: int, max_bytes: int,
    partitions: list[FetchPartitionRequest], session_id: int, session_epoch: int, forgotten: list[tuple[str, int]],
) -> None:  # fmt: skip
    ours = encode_fetch_request(
        correlation_id=correlation_id, client_id=client_id, replica_id=replica_id, max_wait_ms=max_wait_ms,
        min_bytes=min_bytes, max_bytes=max_bytes, partitions=partitions, session_id=session_id,
        session_epoch=session_epoch, forgotten=forgotten,
    )  # fmt: skip
    assert ours == kio_request(correlation_id, client_id, replica_id, max_wait_ms, min_bytes, max_bytes, partitions,
                               session_id, session_epoch, forgotten)  # fmt: skip


@st.composite
def answers(draw: st.DrawFn) -> tuple[bytes, int, int, list[FetchPartitionResponse]]:
    """A Fetch v12 answer frame (no length prefix) written by kio, and what it holds."""
    expected: list[FetchPartitionResponse] = []
    topics = []
    for topic in draw(st.lists(names, max_size=4)):
        parts = []
        for _ in range(draw(st.integers(0, 4))):
            index, error, hw, lso, lstart = draw(i32), draw(codes), draw(i64), draw(i64), draw(i64)
            diverging = draw(st.none() | st.tuples(i32, i64))
            leader = draw(st.none() | st.tuples(i32, i32))
            snapshot = draw(st.none() | st.tuples(i64, i32))
            aborted = draw(st.none() | st.lists(st.tuples(i64, i64), max_size=3))
            records = draw(st.none() | st.binary(max_size=64))
            fields: dict[str, Any] = {}
            if diverging is not None:
                fields["diverging_epoch"] = RESP.EpochEndOffset(epoch=diverging[0], end_offset=diverging[1])
            if leader is not None:
                fields["current_leader"] = RESP.LeaderIdAndEpoch(leader_id=leader[0], leader_epoch=leader[1])
            if snapshot is not None:
                fields["snapshot_id"] = RESP.SnapshotId(end_offset=snapshot[0], epoch=snapshot[1])
            parts.append(RESP.PartitionData(
                partition_index=index, error_code=error, high_watermark=hw, last_stable_offset=lso,
                log_start_offset=lstart, preferred_read_replica=draw(i32), records=records,
                aborted_transactions=None if aborted is None else tuple(
                    RESP.AbortedTransaction(producer_id=p, first_offset=f) for p, f in aborted),
                **fields,
            ))  # fmt: skip
            try:
                code = ErrorCode(int(error))
            except ValueError:
                code = ErrorCode.UNKNOWN_SERVER_ERROR
            expected.append(FetchPartitionResponse(
                topic=topic, partition=index, error=code, high_watermark=hw, log_start_offset=lstart,
                diverging_epoch=None if diverging is None or diverging == (-1, -1) else diverging,
                leader_id=-1 if leader is None else leader[0], leader_epoch=-1 if leader is None else leader[1],
                records=b"" if records is None else records,
            ))  # fmt: skip
        topics.append(RESP.FetchableTopicResponse(topic=topic, partitions=tuple(parts)))
    error, session = draw(codes), draw(i32)
    body = RESPONSE(throttle_time=timedelta(milliseconds=draw(st.integers(0, 2**31 - 1))), error_code=error,
                    session_id=session, responses=tuple(topics))  # fmt: skip
    buf = io.BytesIO()
    entity_writer(RESPONSE.__header_schema__)(buf, RESPONSE.__header_schema__(correlation_id=draw(i32)))
    entity_writer(RESPONSE)(buf, body)
    return buf.getvalue(), int(error), session, expected


def known(code: int) -> ErrorCode:
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


Answer = tuple[bytes, int, int, list[FetchPartitionResponse]]


@given(answers())
def test_answers_kio_writes_decode_to_their_fields(answer: Answer) -> None:
    frame, error, session, expected = answer
    got = decode_fetch_answer(frame)
    assert got.error == known(error)
    assert got.session_id == session
    assert [(p.topic, p.partition, p.error, p.high_watermark, p.log_start_offset, p.diverging_epoch, p.leader_id,
             p.leader_epoch, bytes(p.records)) for p in got.partitions] == [
        (p.topic, p.partition, p.error, p.high_watermark, p.log_start_offset, p.diverging_epoch, p.leader_id,
         p.leader_epoch, bytes(p.records)) for p in expected]  # fmt: skip
    for p in got.partitions:  # records are slices of the frame, not copies
        assert p.records == b"" or (isinstance(p.records, memoryview) and p.records.obj is frame)


@given(answers(), st.data())
def test_cut_or_corrupted_answers_raise_only_fetch_wire_errors(answer: Answer, data: st.DataObject) -> None:
    frame = answer[0]
    cut = data.draw(st.integers(0, len(frame) - 1))
    with pytest.raises(FetchWireError):
        decode_fetch_answer(frame[:cut])  # every proper prefix is incomplete
    with pytest.raises(FetchWireError):
        decode_fetch_answer(frame + b"\0")  # trailing bytes
    spot = data.draw(st.integers(0, len(frame) - 1))
    corrupted = bytearray(frame)
    corrupted[spot] ^= data.draw(st.integers(1, 255))
    try:
        decode_fetch_answer(bytes(corrupted))
    except FetchWireError:
        pass
