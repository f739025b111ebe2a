"""OffsetCommit's hand codec (`broker.kafka.offset_commit_wire`) against kio's, every
advertised version, and the fields the old kio path lost: v2-4's `retention_time_ms`."""

from __future__ import annotations

import asyncio
import io
import sys
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.serial import entity_writer

from broker.group.records import OffsetValue, decode_key, decode_value
from broker.group.runtime import GroupCoordinator
from broker.group.shard import CoordinatorConfig
from broker.kafka.apis import SUPPORTED, ApiKey, is_flexible
from broker.kafka.context import RequestContext, make
from broker.kafka.offset_commit_wire import decode_offset_commit, encode_offset_commit_response
from broker.kafka.server import KafkaRequestHandler
from broker.kafka.services import ListenerConfig
from broker.kafka.wire import MalformedRequest, parse_request_header
from broker.log.records import batch_records
from quorum.kafka_errors import ErrorCode
from tests.unit.broker_kafka.conftest import BROKERS, TOPICS
from tests.unit.broker_kafka.fake_services import FakeServices, make_image

LOW, HIGH = SUPPORTED[ApiKey.OFFSET_COMMIT]
VERSIONS = list(range(LOW, HIGH + 1))

_text = st.text(max_size=12)
_i32 = st.integers(-(2**31), 2**31 - 1)
_i64 = st.integers(-(2**63), 2**63 - 1)


def _classes(version: int) -> tuple[type[Any], Any, Any]:
    cls = load_request_schema(ApiKey.OFFSET_COMMIT, version)
    module = sys.modules[cls.__module__]
    return cls, module.OffsetCommitRequestTopic, module.OffsetCommitRequestPartition


@st.composite
def _bodies(draw: st.DrawFn, version: int) -> Any:
    cls, tcls, pcls = _classes(version)
    topics = tuple(
        make(tcls, name=draw(_text), partitions=tuple(
            make(pcls, partition_index=draw(_i32), committed_offset=draw(_i64), committed_leader_epoch=draw(_i32),
                 committed_metadata=draw(st.none() | _text))
            for _ in range(draw(st.integers(0, 3)))
        ))
        for _ in range(draw(st.integers(0, 3)))
    )  # fmt: skip
    return make(
        cls,
        group_id=draw(_text),
        generation_id_or_member_epoch=draw(_i32),
        member_id=draw(_text),
        group_instance_id=draw(st.none() | _text),
        retention_time=timedelta(milliseconds=draw(st.integers(-1, 2**40))),
        topics=topics,
    )


def _frame(version: int, body: Any, correlation_id: int = 9) -> bytes:
    cls = type(body)
    header = cls.__header_schema__(
        request_api_key=ApiKey.OFFSET_COMMIT, request_api_version=version, correlation_id=correlation_id,
        client_id="wire-test",
    )  # fmt: skip
    buf = io.BytesIO()
    entity_writer(cls.__header_schema__)(buf, header)
    entity_writer(cls)(buf, body)
    return buf.getvalue()


def _context(version: int, frame: bytes) -> RequestContext:
    flexible = is_flexible(ApiKey.OFFSET_COMMIT, version)
    view = memoryview(frame)
    return RequestContext(parse_request_header(view, flexible), view, flexible)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_hand_decoder_reads_what_kio_wrote(version: int) -> None:
    @settings(max_examples=60, deadline=None)
    @given(_bodies(version))
    def check(body: Any) -> None:
        got = decode_offset_commit(_context(version, _frame(version, body)))
        assert got.group_id == body.group_id
        assert got.generation_id_or_member_epoch == body.generation_id_or_member_epoch
        assert got.member_id == body.member_id
        assert got.group_instance_id == getattr(body, "group_instance_id", None)
        want_retention = body.retention_time // timedelta(milliseconds=1) if version <= 4 else -1
        assert got.retention_time_ms == want_retention
        want = tuple(
            (t.name, tuple((p.partition_index, p.committed_offset, getattr(p, "committed_leader_epoch", -1),
                            p.committed_metadata) for p in t.partitions))
            for t in body.topics
        )  # fmt: skip
        assert got.topics == want

    check()


@pytest.mark.parametrize("version", VERSIONS)
def test_a_frame_inside_a_larger_buffer_decodes_the_same(version: int) -> None:
    """The frame a handler gets may be a view of part of a buffer (or of a bytearray)."""
    cls, tcls, pcls = _classes(version)
    parts = tuple(
        make(pcls, partition_index=p, committed_offset=10 * p, committed_leader_epoch=p,
             committed_metadata=None if p == 1 else "x" * p)
        for p in range(3)
    )  # fmt: skip
    body = make(cls, group_id="g\u00e9", generation_id_or_member_epoch=3, member_id="m", group_instance_id="i",
                retention_time=timedelta(milliseconds=5),
                topics=tuple(make(tcls, name=f"t{t}", partitions=parts) for t in range(2)))  # fmt: skip
    frame = _frame(version, body)
    want = decode_offset_commit(_context(version, frame))
    assert [len(parts) for _, parts in want.topics] == [3, 3]
    flexible = is_flexible(ApiKey.OFFSET_COMMIT, version)
    for view in (memoryview(b"abcd" + frame + b"efgh")[4 : 4 + len(frame)], memoryview(bytearray(frame))):
        assert decode_offset_commit(RequestContext(parse_request_header(view, flexible), view, flexible)) == want


@pytest.mark.parametrize("version", VERSIONS)
def test_a_truncated_request_is_malformed(version: int) -> None:
    cls, tcls, pcls = _classes(version)
    body = make(cls, group_id="g", generation_id_or_member_epoch=3, member_id="m", group_instance_id="i",
                retention_time=timedelta(milliseconds=5), topics=(make(tcls, name="t", partitions=(
                    make(pcls, partition_index=1, committed_offset=2, committed_leader_epoch=0,
                         committed_metadata="x"),)),))  # fmt: skip
    frame = _frame(version, body)
    body_at = _context(version, frame).header.body_offset
    decode_offset_commit(_context(version, frame))
    for cut in range(body_at, len(frame)):
        with pytest.raises(MalformedRequest):
            decode_offset_commit(_context(version, frame[:cut]))


@pytest.mark.parametrize("version", VERSIONS)
def test_the_answer_is_kios_bytes(version: int) -> None:
    cls = load_response_schema(ApiKey.OFFSET_COMMIT, version)
    module = sys.modules[cls.__module__]
    tcls, pcls = module.OffsetCommitResponseTopic, module.OffsetCommitResponsePartition

    @settings(max_examples=40, deadline=None)
    @given(st.lists(st.tuples(_text, st.lists(st.tuples(_i32, st.sampled_from([0, 3, 16, 22, 25, 27, 79]))))))
    def check(topics: list[tuple[str, list[tuple[int, int]]]]) -> None:
        ctx = _context(version, _frame(version, _classes(version)[0](
            group_id="g", generation_id_or_member_epoch=-1, member_id="", topics=(),
            **({"retention_time": timedelta(milliseconds=-1)} if version <= 4 else {}),
            **({"group_instance_id": None} if version >= 7 else {}),
        ), correlation_id=77))  # fmt: skip
        entity = make(cls, throttle_time=timedelta(0), topics=tuple(
            make(tcls, name=n, partitions=tuple(make(pcls, partition_index=i, error_code=KioErrorCode(c))
                                                for i, c in parts))
            for n, parts in topics
        ))  # fmt: skip
        buf = io.BytesIO()
        entity_writer(cls)(buf, entity)
        frame = bytes(encode_offset_commit_response(ctx, topics))
        head = (77).to_bytes(4, "big") + (b"\0" if ctx.flexible else b"")
        assert frame == (len(head) + len(buf.getvalue())).to_bytes(4, "big") + head + buf.getvalue()

    check()


def test_a_code_clients_cannot_know_goes_out_as_unknown_server_error() -> None:
    ctx = _context(7, _frame(7, _classes(7)[0](group_id="g", generation_id_or_member_epoch=-1, member_id="",
                                               group_instance_id=None, topics=())))  # fmt: skip
    frame = bytes(encode_offset_commit_response(ctx, [("t", [(0, 32_000)])]))
    assert frame[-2:] == (-1).to_bytes(2, "big", signed=True)


class _Host:
    """One `__consumer_offsets` partition led here; appends succeed at once and are kept."""

    def __init__(self) -> None:
        self.batches: list[bytes] = []

    def offsets_partitions(self) -> int:
        return 1

    def led_epoch(self, partition: int) -> int | None:
        return 0

    def partition_log(self, partition: int) -> None:
        return None

    async def append(self, partition: int, batch: bytes, timeout_ms: int) -> ErrorCode:
        self.batches.append(batch)
        return ErrorCode.NONE


@pytest.mark.parametrize("version", [2, 4, 5])
def test_retention_time_of_v2_to_4_sets_the_offsets_expiry(version: int) -> None:
    """Kafka keeps a v2-4 commit's retention_time_ms: expire = commit time + retention. The kio
    path read a field name kio does not have (`retention_time_ms`) and dropped it."""

    async def run() -> list[OffsetValue]:
        host = _Host()
        coordinator = GroupCoordinator(1, host, CoordinatorConfig(), clock=lambda: 1_000)  # type: ignore[arg-type]
        coordinator.on_metadata()
        for _ in range(10):
            await asyncio.sleep(0)
        services = FakeServices(make_image(BROKERS, TOPICS), node_id=1)
        handler = KafkaRequestHandler(services, ListenerConfig(listener_name="PLAINTEXT"), groups=coordinator)
        cls, tcls, pcls = _classes(version)
        body = make(cls, group_id="g", generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                    retention_time=timedelta(milliseconds=60_000), topics=(make(tcls, name="events", partitions=(
                        make(pcls, partition_index=0, committed_offset=42, committed_leader_epoch=-1,
                             committed_metadata=None),)),))  # fmt: skip
        raw = await handler(_frame(version, body))
        assert raw is not None and bytes(raw)[-2:] == b"\0\0"  # the partition's error code: NONE
        await coordinator.close()
        values = []
        for batch in host.batches:
            for _offset, _ts, record in batch_records(batch, payloads=True):
                assert record.key is not None
                value = decode_value(decode_key(record.key), record.value)
                assert isinstance(value, OffsetValue)
                values.append(value)
        return values

    (value,) = asyncio.run(run())
    assert value.offset == 42 and value.commit_timestamp == 1_000
    assert value.expire_timestamp == (1_000 + 60_000 if version <= 4 else -1)
