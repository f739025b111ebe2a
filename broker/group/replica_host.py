"""The group coordinator's `PartitionHost` over this broker's replica manager: which
`__consumer_offsets` partitions it leads, their logs, and acks=all appends through the same
produce path as clients' (so the ISR, `min.insync.replicas` and the HW rules are the same)."""

from __future__ import annotations

from collections.abc import Callable
from uuid import UUID

from broker.group.runtime import OFFSETS_TOPIC, LoggedPartition
from broker.replica.manager import ReplicaManager
from broker.replica.requests import ProduceParams, ProducePartition
from quorum.kafka_errors import ErrorCode
from quorum.metadata.image import MetadataImage


class ReplicaPartitionHost:
    def __init__(self, replicas: ReplicaManager, image: Callable[[], MetadataImage]) -> None:
        self.replicas = replicas
        self.image = image

    def offsets_partitions(self) -> int:
        topic = self.image().topics.by_name.get(OFFSETS_TOPIC)
        return 0 if topic is None else len(topic.partitions)

    def led_epoch(self, partition: int) -> int | None:
        hosted = self.replicas.partitions.get((OFFSETS_TOPIC, partition))
        if hosted is None or not hosted.state.is_leader:
            return None
        return hosted.state.leader_epoch

    def topic(self, name: str) -> tuple[UUID, int] | None:
        t = self.image().topics.by_name.get(name)
        return None if t is None else (t.id, len(t.partitions))

    def topic_name(self, topic_id: UUID) -> str | None:
        t = self.image().topics.by_id.get(topic_id)
        return None if t is None else t.name

    def partition_log(self, partition: int) -> LoggedPartition | None:
        hosted = self.replicas.partitions.get((OFFSETS_TOPIC, partition))
        return None if hosted is None else hosted.log

    async def append(self, partition: int, batch: bytes, timeout_ms: int) -> ErrorCode:
        params = ProduceParams(
            acks=-1, timeout_ms=timeout_ms, partitions=(ProducePartition(OFFSETS_TOPIC, partition, batch),)
        )
        (result,) = await self.replicas.produce(params)
        return result.error
