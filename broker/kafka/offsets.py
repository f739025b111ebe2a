"""ListOffsets (2, v1-7) and OffsetForLeaderEpoch (23, v2-4): offsets by time and by epoch.

ListOffsets: EARLIEST (-2), LATEST (-1), MAX_TIMESTAMP (-3, v7+ only: older versions get
UNSUPPORTED_VERSION for it, as Kafka does) or a timestamp. A partition named twice in one
request is answered INVALID_REQUEST (Kafka's rule). Everything else is the services'.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from broker.kafka.context import RequestContext, decode_body, encode_body, kio_error, make, nested, response_type
from broker.kafka.services import (
    MAX_TIMESTAMP,
    BrokerServices,
    EpochEndOffset,
    EpochQuery,
    ListOffsetsPartition,
    ListOffsetsResult,
)
from quorum.kafka_errors import ErrorCode

__all__ = ["handle_list_offsets", "handle_offset_for_leader_epoch"]


async def handle_list_offsets(ctx: RequestContext, services: BrokerServices) -> bytes:
    body = decode_body(ctx)
    version = ctx.version
    isolation = int(getattr(body, "isolation_level", 0))
    items: list[tuple[str, Any]] = [(t.name, p) for t in body.topics for p in t.partitions]
    counts: dict[tuple[str, int], int] = {}
    for name, p in items:
        key = (name, int(p.partition_index))
        counts[key] = counts.get(key, 0) + 1
    results: list[ListOffsetsResult | None] = [None] * len(items)
    asks: list[int] = []
    for i, (name, p) in enumerate(items):
        if counts[(name, int(p.partition_index))] > 1:
            results[i] = ListOffsetsResult(ErrorCode.INVALID_REQUEST)
        elif int(p.timestamp) == MAX_TIMESTAMP and version < 7:
            results[i] = ListOffsetsResult(ErrorCode.UNSUPPORTED_VERSION)
        else:
            asks.append(i)
    if asks:
        answered = await services.list_offsets(
            int(body.replica_id),
            isolation,
            [
                ListOffsetsPartition(
                    items[i][0],
                    int(items[i][1].partition_index),
                    int(items[i][1].timestamp),
                    int(getattr(items[i][1], "current_leader_epoch", -1)),
                )
                for i in asks
            ],
        )
        if len(answered) != len(asks):
            raise RuntimeError("list_offsets returned a wrong number of results")
        for i, res in zip(asks, answered, strict=True):
            results[i] = res
    cls = response_type(ctx.api_key, version)
    pcls = nested(cls, "ListOffsetsPartitionResponse")
    tcls = nested(cls, "ListOffsetsTopicResponse")
    topics = []
    i = 0
    for t in body.topics:
        parts = []
        for p in t.partitions:
            res = results[i] or ListOffsetsResult(ErrorCode.UNKNOWN_SERVER_ERROR)
            i += 1
            parts.append(
                make(
                    pcls,
                    partition_index=p.partition_index,
                    error_code=kio_error(res.error),
                    timestamp=res.timestamp,
                    offset=res.offset,
                    leader_epoch=res.leader_epoch,
                )
            )
        topics.append(make(tcls, name=t.name, partitions=tuple(parts)))
    return encode_body(ctx, make(cls, throttle_time=timedelta(0), topics=tuple(topics)))


async def handle_offset_for_leader_epoch(ctx: RequestContext, services: BrokerServices) -> bytes:
    body = decode_body(ctx)
    replica_id = int(getattr(body, "replica_id", -2))
    queries = [
        EpochQuery(t.topic, int(p.partition), int(p.leader_epoch), int(p.current_leader_epoch))
        for t in body.topics
        for p in t.partitions
    ]
    answers = await services.offset_for_leader_epoch(replica_id, queries) if queries else []
    if len(answers) != len(queries):
        raise RuntimeError("offset_for_leader_epoch returned a wrong number of results")
    cls = response_type(ctx.api_key, ctx.version)
    pcls = nested(cls, "EpochEndOffset")
    tcls = nested(cls, "OffsetForLeaderTopicResult")
    topics = []
    i = 0
    for t in body.topics:
        parts = []
        for p in t.partitions:
            a: EpochEndOffset = answers[i]
            i += 1
            parts.append(
                make(
                    pcls,
                    error_code=kio_error(a.error),
                    partition=p.partition,
                    leader_epoch=a.leader_epoch,
                    end_offset=a.end_offset,
                )
            )
        topics.append(make(tcls, topic=t.topic, partitions=tuple(parts)))
    return encode_body(ctx, make(cls, throttle_time=timedelta(0), topics=tuple(topics)))
