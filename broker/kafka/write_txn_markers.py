"""WriteTxnMarkers (27, v0-1; v1 flexible): a transaction coordinator asks the partition
leaders to end a transaction with COMMIT or ABORT control batches. Decoded and encoded by
hand (`broker.kafka.wire`): kio dropped v0 (Kafka 4 did, KIP-896), which Kafka 3.9 serves.

Who may send it: Kafka authorizes it as ALTER or CLUSTER_ACTION on the cluster; with no
authorizer configured (`authorizer.class.name` empty, Kafka's default and pykraft's only
mode) every principal passes, so Kafka serves it to any connection, and so does this
broker. What protects the logs is the producer state: a marker with an older producer epoch
is INVALID_PRODUCER_EPOCH, one from an older coordinator epoch TRANSACTION_COORDINATOR_FENCED.
A client's own control batch in a Produce is refused (INVALID_RECORD, the log's rule).

The answer lists every marker's producer id with each topic and partition in request order;
markers are written with acks=all and answered once committed (`BrokerServices`).

    request  Markers [ProducerId int64, ProducerEpoch int16, TransactionResult bool,
                      Topics [Name string, PartitionIndexes [int32]], CoordinatorEpoch int32]
    response Markers [ProducerId int64, Topics [Name string, Partitions [PartitionIndex int32,
                      ErrorCode int16]]]
"""

from __future__ import annotations

from typing import Final

from broker.kafka.context import RequestContext
from broker.kafka.services import BrokerServices, TxnMarker
from broker.kafka.wire import Reader, response_writer

__all__ = ["MARKER_TIMEOUT_MS", "decode_write_txn_markers", "handle_write_txn_markers"]

MARKER_TIMEOUT_MS: Final = 30_000  # Kafka waits request.timeout.ms (30 s) for the markers' acks=all

Topics = tuple[tuple[str, tuple[int, ...]], ...]


def decode_write_txn_markers(ctx: RequestContext) -> list[tuple[TxnMarker, Topics]]:
    """The markers, each with its topics as sent (for the answer); MalformedRequest on bad bytes."""
    r = Reader(ctx.frame, ctx.header.body_offset)
    flex = ctx.flexible

    def topic() -> tuple[str, tuple[int, ...]]:
        name = r.nonnull_string(flex)
        partitions = tuple(r.array(flex, r.i32))
        if flex:
            r.skip_tags()
        return name, partitions

    def marker() -> tuple[TxnMarker, Topics]:
        producer_id = r.i64()
        producer_epoch = r.i16()
        committed = r.i8() != 0
        topics = tuple(r.array(flex, topic))
        coordinator_epoch = r.i32()
        if flex:
            r.skip_tags()
        partitions = tuple((name, p) for name, parts in topics for p in parts)
        return TxnMarker(producer_id, producer_epoch, committed, coordinator_epoch, partitions), topics

    markers = r.array(flex, marker)
    if flex:
        r.skip_tags()
    return markers


async def handle_write_txn_markers(ctx: RequestContext, services: BrokerServices) -> bytearray:
    decoded = decode_write_txn_markers(ctx)
    markers = [m for m, _ in decoded]
    results = await services.write_txn_markers(markers, MARKER_TIMEOUT_MS) if markers else []
    if len(results) != len(markers):
        raise RuntimeError("write_txn_markers returned a wrong number of results")
    flex = ctx.flexible
    w = response_writer(ctx.header.correlation_id, flex)
    w.length(len(decoded), flex, True)
    for (marker, topics), result in zip(decoded, results, strict=True):
        errors = iter(result.errors)
        w.i64(marker.producer_id)
        w.length(len(topics), flex, True)
        for name, partitions in topics:
            w.string(name, flex)
            w.length(len(partitions), flex, True)
            for p in partitions:
                w.i32(p)
                w.i16(next(errors))
                if flex:
                    w.no_tags()
            if flex:
                w.no_tags()
        if flex:
            w.no_tags()
    if flex:
        w.no_tags()
    return w.frame()
