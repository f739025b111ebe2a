"""Produce (0): decode by hand, hand the record bytes over untouched, answer in request order.

The hot path: records are never decoded per record. Each partition's records become a
`memoryview` into the request frame; the only look at them here is the 61-byte batch
header walk Kafka's `ProduceRequest.validateRecords` does for v3+ (exactly one batch per
partition, magic 2), so that several batches, a truncated batch or a length that runs past
the data are answered INVALID_RECORD before the log is touched. CRC-32C, sizes
(`max.message.bytes` -> MESSAGE_TOO_LARGE), compression codecs, timestamps are the log's.

Versions 0-2 are advertised but refused (UNSUPPORTED_VERSION per partition; Kafka 4).
acks=0 gets no response at all; if any partition failed, the connection is closed
instead (Kafka's way of telling an acks=0 producer). Any acks other than -1/0/1 is
INVALID_REQUIRED_ACKS. Transactional batches (attribute 0x10) in a request without a
transactional id: TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition (Kafka's
KafkaApis rule, which holds without an authorizer too); with one, they go to the log, whose
producer state opens the transaction (`broker.log.producer_state`). A control batch from a
client is the log's INVALID_RECORD.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from broker.kafka.context import RequestContext
from broker.kafka.services import (
    BrokerServices,
    ListenerConfig,
    ProduceParams,
    ProducePartition,
    ProducePartitionResult,
)
from broker.kafka.wire import Reader, response_writer
from broker.log.producer_state import read_producer_fields
from quorum.kafka_errors import ErrorCode
from quorum.metadata.image import MetadataImage
from quorum.storage.batch_layout import (
    BATCH_HEADER_SIZE,
    BATCH_LENGTH_AT,
    LOG_OVERHEAD,
    MAGIC,
    MAGIC_AT,
)
from quorum.wire.transport import CloseConnection

__all__ = ["ProduceRequest", "decode_produce", "encode_produce_response", "handle_produce", "validate_single_batch"]

_I32: Final = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class ProduceRequest:
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topics: tuple[tuple[str, tuple[tuple[int, memoryview | None], ...]], ...]  # request order


def decode_produce(ctx: RequestContext) -> ProduceRequest:
    """Any version 0-10 (0-2 have no transactional id); MalformedRequest on bad bytes."""
    r = Reader(ctx.frame, ctx.header.body_offset)
    flex = ctx.flexible
    version = ctx.version
    transactional_id = r.string(flex) if version >= 3 else None
    acks = r.i16()
    timeout_ms = r.i32()

    def partition() -> tuple[int, memoryview | None]:
        index = r.i32()
        records = r.bytes_(flex)
        if flex:
            r.skip_tags()
        return index, records

    def topic() -> tuple[str, tuple[tuple[int, memoryview | None], ...]]:
        name = r.nonnull_string(flex)
        parts = r.array(flex, partition)
        if flex:
            r.skip_tags()
        return name, tuple(parts)

    topics = r.array(flex, topic)
    if flex:
        r.skip_tags()
    return ProduceRequest(transactional_id, acks, timeout_ms, tuple(topics))


def _is_transactional(records: memoryview | None) -> bool:
    """Kafka's RequestUtils.hasTransactionalRecords, on the first batch's attributes: a control
    batch counts too (unlike KIP-890's `transactional_producer`, which verifies data batches
    only), so a client's marker without a transactional id is refused here."""
    fields = None if records is None else read_producer_fields(records)
    return fields is not None and fields.is_transactional


def validate_single_batch(records: memoryview | None) -> str | None:
    """Why these records are not exactly one magic-v2 batch, or None when they are."""
    if records is None or len(records) == 0:
        return "produce requests must have exactly one record batch per partition; got none"
    if len(records) < BATCH_HEADER_SIZE:
        return f"record batch truncated: {len(records)} bytes, the header alone is {BATCH_HEADER_SIZE}"
    magic = records[MAGIC_AT]
    if magic != MAGIC:
        return f"produce requests must use record batch magic 2, got magic {magic}"
    total = LOG_OVERHEAD + _I32.unpack_from(records, BATCH_LENGTH_AT)[0]
    if total < BATCH_HEADER_SIZE or total > len(records):
        return f"record batch length {total} does not match the {len(records)} bytes sent"
    if total != len(records):
        return "produce requests must have exactly one record batch per partition"
    return None


def encode_produce_response(
    ctx: RequestContext,
    request: ProduceRequest,
    results: list[ProducePartitionResult],
    image: MetadataImage,
    listener_name: str,
) -> bytearray:
    version = ctx.version
    flex = ctx.flexible
    w = response_writer(ctx.header.correlation_id, flex)
    leaders: dict[int, None] = {}
    w.length(len(request.topics), flex, True)
    i = 0
    for name, parts in request.topics:
        w.string(name, flex)
        w.length(len(parts), flex, True)
        for index, _ in parts:
            res = results[i]
            i += 1
            w.i32(index)
            w.i16(res.error)
            w.i64(res.base_offset)
            if version >= 2:
                w.i64(res.log_append_time_ms)
            if version >= 5:
                w.i64(res.log_start_offset)
            if version >= 8:
                w.length(len(res.record_errors), flex, True)
                for e in res.record_errors:
                    w.i32(e.batch_index)
                    w.string(e.message, flex)
                    if flex:
                        w.no_tags()
                w.string(res.error_message, flex)
            if flex:
                hint = res.current_leader
                if version >= 10 and hint is not None and res.error == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                    # tag 0 CurrentLeader: leader_id i32, leader_epoch i32, empty tags = 9 bytes
                    w.uvarint(1)
                    w.uvarint(0)
                    w.uvarint(9)
                    w.i32(hint.leader_id)
                    w.i32(hint.leader_epoch)
                    w.no_tags()
                    if hint.leader_id >= 0:
                        leaders[hint.leader_id] = None
                else:
                    w.no_tags()
        if flex:
            w.no_tags()
    if version >= 1:
        w.i32(0)  # throttle_time_ms
    if flex:
        endpoints = _node_endpoints(image, leaders, listener_name)
        if endpoints is None:
            w.no_tags()
        else:
            w.uvarint(1)
            w.uvarint(0)  # tag 0 NodeEndpoints
            w.uvarint(len(endpoints))
            w.buf += endpoints
    return w.frame()


def _node_endpoints(image: MetadataImage, leaders: dict[int, None], listener_name: str) -> bytes | None:
    """The encoded NodeEndpoints array (KIP-951) for the leaders named in hints, or None."""
    from broker.kafka.wire import Writer

    found = []
    for broker_id in leaders:
        reg = image.broker(broker_id)
        ep = reg.endpoint(listener_name) if reg is not None else None
        if reg is not None and ep is not None:
            found.append((broker_id, ep.host, ep.port, reg.rack))
    if not found:
        return None
    w = Writer(reserve_length=False)
    w.uvarint(len(found) + 1)
    for broker_id, host, port, rack in found:
        w.i32(broker_id)
        w.string(host, True)
        w.i32(port)
        w.string(rack, True)
        w.no_tags()
    return bytes(w.buf)


async def handle_produce(ctx: RequestContext, services: BrokerServices, config: ListenerConfig) -> bytearray | None:
    request = decode_produce(ctx)
    version = ctx.version
    flat: list[tuple[str, int, memoryview | None]] = [
        (name, index, records) for name, parts in request.topics for index, records in parts
    ]
    results: list[ProducePartitionResult | None] = [None] * len(flat)
    refusal: ErrorCode | None = None
    if version < 3:
        refusal = ErrorCode.UNSUPPORTED_VERSION
    elif request.acks not in (-1, 0, 1):
        refusal = ErrorCode.INVALID_REQUIRED_ACKS
    elif request.transactional_id is None and any(_is_transactional(records) for _, _, records in flat):
        refusal = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    to_append: list[int] = []
    if refusal is not None:
        for i in range(len(flat)):
            results[i] = ProducePartitionResult(refusal)
    else:
        for i, (_, _, records) in enumerate(flat):
            why = validate_single_batch(records)
            if why is not None:
                results[i] = ProducePartitionResult(ErrorCode.INVALID_RECORD, error_message=why)
            else:
                to_append.append(i)
    if to_append:
        params = ProduceParams(
            acks=request.acks,
            timeout_ms=request.timeout_ms,
            partitions=tuple(ProducePartition(flat[i][0], flat[i][1], flat[i][2] or b"") for i in to_append),
            transactional_id=request.transactional_id,
            client_id=ctx.header.client_id,
        )
        appended = await services.produce(params)
        if len(appended) != len(to_append):
            raise RuntimeError(f"produce returned {len(appended)} results for {len(to_append)} partitions")
        for i, res in zip(to_append, appended, strict=True):
            results[i] = res
    final = [r if r is not None else ProducePartitionResult(ErrorCode.UNKNOWN_SERVER_ERROR) for r in results]
    if request.acks == 0:
        if any(r.error != ErrorCode.NONE for r in final):
            raise CloseConnection("acks=0 produce failed: closing the connection tells the producer")
        return None
    return encode_produce_response(ctx, request, final, services.image(), config.listener_name)
