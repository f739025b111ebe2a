"""DescribeProducers (61, v0, flexible; KIP-664): per partition, the leader's active
producers: id, epoch, last sequence, last timestamp, coordinator epoch and the first offset
of the open transaction (-1: none), as Kafka's `kafka-transactions.sh describe-producers`
shows them. Errors per partition: NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION."""

from __future__ import annotations

from datetime import timedelta

from broker.kafka.context import RequestContext, decode_body, encode_body, kio_error, make, nested, response_type
from broker.kafka.services import BrokerServices

__all__ = ["handle_describe_producers"]


async def handle_describe_producers(ctx: RequestContext, services: BrokerServices) -> bytes:
    body = decode_body(ctx)
    cls = response_type(ctx.api_key, ctx.version)
    tcls = nested(cls, "TopicResponse")
    pcls = nested(cls, "PartitionResponse")
    scls = nested(cls, "ProducerState")
    topics = []
    for t in body.topics:
        parts = []
        for p in t.partition_indexes:
            res = services.describe_producers(t.name, int(p))
            producers = tuple(
                make(
                    scls,
                    producer_id=d.producer_id,
                    producer_epoch=d.producer_epoch,
                    last_sequence=d.last_sequence,
                    last_timestamp=d.last_timestamp,
                    coordinator_epoch=d.coordinator_epoch,
                    current_txn_start_offset=d.current_txn_start_offset,
                )
                for d in res.producers
            )
            parts.append(
                make(pcls, partition_index=p, error_code=kio_error(res.error), error_message=None,
                     active_producers=producers)
            )  # fmt: skip
        topics.append(make(tcls, name=t.name, partitions=tuple(parts)))
    return encode_body(ctx, make(cls, throttle_time=timedelta(0), topics=tuple(topics)))
