"""The hand-inlined Produce decoder (`broker.kafka.produce.decode_produce`) on hostile bytes:
every truncation of a request is MalformedRequest (never another exception), and a request
with any one byte changed decodes as kio's own reader decodes it (`decode_body`, an
independent implementation of the schema), or is MalformedRequest exactly where kio refuses it."""

from __future__ import annotations

import datetime
import io
import random
from typing import Any

import pytest
from kio.index import load_request_schema
from kio.serial import entity_writer
from kio.static.primitive import i32Timedelta

from broker.kafka.apis import ApiKey, is_flexible
from broker.kafka.context import RequestContext, decode_body, make, nested
from broker.kafka.produce import decode_produce
from broker.kafka.wire import MalformedRequest, parse_request_header
from tests.unit.broker_kafka.conftest import batch

VERSIONS = [3, 7, 8, 9, 10]


def _frame(
    version: int, transactional_id: str | None, topics: list[tuple[str, list[tuple[int, bytes | None]]]]
) -> bytes:
    cls = load_request_schema(ApiKey.PRODUCE, version)
    tcls, pcls = nested(cls, "TopicProduceData"), nested(cls, "PartitionProduceData")
    body = make(
        cls,
        transactional_id=transactional_id,
        acks=-1,
        timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=1500)),
        topic_data=tuple(
            make(tcls, name=name, partition_data=tuple(make(pcls, index=i, records=r) for i, r in parts))
            for name, parts in topics
        ),
    )
    header = cls.__header_schema__(request_api_key=0, request_api_version=version, correlation_id=5, client_id="t")
    buf = io.BytesIO()
    entity_writer(cls.__header_schema__)(buf, header)
    entity_writer(cls)(buf, body)
    return buf.getvalue()


def _context(version: int, frame: bytes) -> RequestContext:
    flexible = is_flexible(ApiKey.PRODUCE, version)
    view = memoryview(frame)
    return RequestContext(parse_request_header(view, flexible), view, flexible)


def _ours(ctx: RequestContext) -> Any:
    got = decode_produce(ctx)
    topics = tuple((n, tuple((i, None if r is None else bytes(r)) for i, r in parts)) for n, parts in got.topics)
    return got.transactional_id, got.acks, got.timeout_ms, topics


def _kio(ctx: RequestContext) -> Any:
    body = decode_body(ctx)
    topics = tuple(
        (t.name, tuple((p.index, None if p.records is None else bytes(p.records)) for p in t.partition_data))
        for t in body.topic_data
    )
    return body.transactional_id, body.acks, int(body.timeout.total_seconds() * 1000), topics


SAMPLES = [
    (None, [("events", [(0, batch(1, 10))])]),
    ("txn-1", [("events", [(0, batch(2, 200)), (1, None)]), ("logs", [(3, b"")])]),
    (None, [("e" * 130, [(7, batch(1, 5))]), ("x", [])]),  # a name whose length is a two-byte varint
]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("sample", range(len(SAMPLES)))
def test_decodes_as_kio_does(version: int, sample: int) -> None:
    ctx = _context(version, _frame(version, *SAMPLES[sample]))
    assert _ours(ctx) == _kio(ctx)


@pytest.mark.parametrize("version", VERSIONS)
def test_every_truncation_is_malformed(version: int) -> None:
    frame = _frame(version, *SAMPLES[1])
    body_offset = _context(version, frame).header.body_offset
    for end in range(body_offset, len(frame)):
        with pytest.raises(MalformedRequest):
            decode_produce(_context(version, frame[:end]))


@pytest.mark.parametrize("version", VERSIONS)
def test_one_byte_changed_decodes_as_kio_or_is_malformed(version: int) -> None:
    rng = random.Random(version)
    for sample in SAMPLES:
        frame = _frame(version, *sample)
        body_offset = _context(version, frame).header.body_offset
        for pos in range(body_offset, len(frame)):
            for value in {0x00, 0x01, 0x7F, 0x80, 0xFF, rng.randrange(256)}:
                changed = bytearray(frame)
                changed[pos] = value
                ctx = _context(version, bytes(changed))
                try:
                    ours = _ours(ctx)
                except MalformedRequest:
                    ours = None
                try:
                    theirs = _kio(ctx)
                except MalformedRequest:
                    theirs = None
                assert ours == theirs, (pos, value)
