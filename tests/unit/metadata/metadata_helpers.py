"""Shared builders for the metadata tests (not a test module)."""

from __future__ import annotations

import uuid

from quorum.metadata.delta import MetadataDelta
from quorum.metadata.image import EMPTY, MetadataImage
from quorum.metadata.records import (
    BrokerEndpoint,
    FeatureLevelRecord,
    MetadataRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
)


def tid(n: int) -> uuid.UUID:
    return uuid.UUID(int=0x1000 + n)


def broker_record(
    broker_id: int, epoch: int = 10, fenced: bool = False, rack: str | None = None
) -> RegisterBrokerRecord:
    return RegisterBrokerRecord(
        broker_id=broker_id,
        incarnation_id=uuid.UUID(int=broker_id + 1),
        broker_epoch=epoch,
        end_points=(BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9092 + broker_id, 0),),
        rack=rack,
        fenced=fenced,
    )


def topic_records(name: str, topic_id: uuid.UUID, assignment: list[tuple[int, ...]]) -> list[MetadataRecord]:
    out: list[MetadataRecord] = [TopicRecord(name, topic_id)]
    for pid, replicas in enumerate(assignment):
        out.append(
            PartitionRecord(pid, topic_id, replicas, replicas, leader=replicas[0], leader_epoch=0, partition_epoch=0)
        )
    return out


def replay_all(image: MetadataImage, records: list[MetadataRecord], first_offset: int | None = None) -> MetadataImage:
    delta = MetadataDelta(image)
    offset = image.offset + 1 if first_offset is None else first_offset
    for i, record in enumerate(records):
        delta.replay(record, offset + i, 1)
    return delta.apply()


def small_cluster() -> MetadataImage:
    """metadata.version 20, brokers 0..2 unfenced, topic "a" (3 partitions, RF 3) and "b" (1 partition)."""
    records: list[MetadataRecord] = [FeatureLevelRecord("metadata.version", 20)]
    records += [broker_record(b, epoch=10 + b) for b in range(3)]
    records += topic_records("a", tid(1), [(0, 1, 2), (1, 2, 0), (2, 0, 1)])
    records += topic_records("b", tid(2), [(1, 0, 2)])
    return replay_all(EMPTY, records, 0)
