"""DeleteRecords (21, v0-2) and DescribeLogDirs (35, v1-4): the log-level admin apis a
client sends to the broker itself (not forwarded). DeleteRecords offsets below -1 are
answered OFFSET_OUT_OF_RANGE without asking the log (Kafka's rule)."""

from __future__ import annotations

from datetime import timedelta

from broker.kafka.context import RequestContext, decode_body, encode_body, kio_error, make, nested, response_type
from broker.kafka.services import BrokerServices, DeleteRecordsPartition, DeleteRecordsResult
from quorum.kafka_errors import ErrorCode

__all__ = ["handle_delete_records", "handle_describe_log_dirs"]


async def handle_delete_records(ctx: RequestContext, services: BrokerServices) -> bytes:
    body = decode_body(ctx)
    items = [(t.name, int(p.partition_index), int(p.offset)) for t in body.topics for p in t.partitions]
    results: list[DeleteRecordsResult | None] = [None] * len(items)
    asks = [i for i, (_, _, offset) in enumerate(items) if offset >= -1]
    for i, (_, _, offset) in enumerate(items):
        if offset < -1:
            results[i] = DeleteRecordsResult(ErrorCode.OFFSET_OUT_OF_RANGE)
    if asks:
        timeout_ms = body.timeout // timedelta(milliseconds=1)
        answered = await services.delete_records(timeout_ms, [DeleteRecordsPartition(*items[i]) for i in asks])
        if len(answered) != len(asks):
            raise RuntimeError("delete_records returned a wrong number of results")
        for i, res in zip(asks, answered, strict=True):
            results[i] = res
    cls = response_type(ctx.api_key, ctx.version)
    pcls = nested(cls, "DeleteRecordsPartitionResult")
    tcls = nested(cls, "DeleteRecordsTopicResult")
    topics = []
    i = 0
    for t in body.topics:
        parts = []
        for p in t.partitions:
            res = results[i] or DeleteRecordsResult(ErrorCode.UNKNOWN_SERVER_ERROR)
            i += 1
            parts.append(
                make(
                    pcls,
                    partition_index=p.partition_index,
                    low_watermark=res.low_watermark,
                    error_code=kio_error(res.error),
                )
            )
        topics.append(make(tcls, name=t.name, partitions=tuple(parts)))
    return encode_body(ctx, make(cls, throttle_time=timedelta(0), topics=tuple(topics)))


async def handle_describe_log_dirs(ctx: RequestContext, services: BrokerServices) -> bytes:
    body = decode_body(ctx)
    wanted: dict[str, list[int]] | None = None
    if body.topics is not None:
        wanted = {}
        for t in body.topics:
            wanted.setdefault(t.topic, []).extend(int(p) for p in t.partitions)
    dirs = services.describe_log_dirs(wanted)
    cls = response_type(ctx.api_key, ctx.version)
    pcls = nested(cls, "DescribeLogDirsPartition")
    tcls = nested(cls, "DescribeLogDirsTopic")
    rcls = nested(cls, "DescribeLogDirsResult")
    results = []
    for d in dirs:
        by_topic: dict[str, list[object]] = {}
        for p in d.partitions:
            by_topic.setdefault(p.topic, []).append(
                make(
                    pcls,
                    partition_index=p.partition,
                    partition_size=p.size_bytes,
                    offset_lag=p.offset_lag,
                    is_future_key=p.is_future,
                )
            )
        results.append(
            make(
                rcls,
                error_code=kio_error(d.error),
                log_dir=d.path,
                topics=tuple(make(tcls, name=n, partitions=tuple(ps)) for n, ps in by_topic.items()),
                total_bytes=d.total_bytes,
                usable_bytes=d.usable_bytes,
            )
        )
    return encode_body(
        ctx, make(cls, throttle_time=timedelta(0), error_code=kio_error(ErrorCode.NONE), results=tuple(results))
    )
