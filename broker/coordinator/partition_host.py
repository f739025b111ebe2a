"""A coordinator's view of its internal topic (`__consumer_offsets`, `__transaction_state`)
on this broker: which partitions it leads, their logs, and acks=all appends through the
same produce path as clients' (so the ISR, `min.insync.replicas` and the HW rules are the
same)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol
from uuid import UUID

from broker.log.producer_state import VERIFICATION_OFF, VerificationGuard
from broker.replica.manager import ReplicaManager
from broker.replica.requests import ProduceParams, ProducePartition
from quorum.kafka_errors import ErrorCode
from quorum.metadata.image import MetadataImage

__all__ = ["CoordinatorPartitionHost", "LoggedPartition", "ReplicaPartitionHost"]


class LoggedPartition(Protocol):
    """What loading needs of a partition log (`broker.log.PartitionLog`)."""

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    def read(self, offset: int, max_bytes: int, *, max_offset: int, min_one_batch: bool) -> bytes | memoryview: ...


class CoordinatorPartitionHost(Protocol):
    """What a coordinator runtime needs of the broker around it (`ReplicaPartitionHost`)."""

    def partition_count(self) -> int: ...

    def led_epoch(self, partition: int) -> int | None: ...

    def partition_log(self, partition: int) -> LoggedPartition | None: ...

    async def append(self, partition: int, batch: bytes, timeout_ms: int) -> ErrorCode: ...


class ReplicaPartitionHost:
    """The partitions of `topic_name` on this broker, over its replica manager."""

    def __init__(self, replicas: ReplicaManager, image: Callable[[], MetadataImage], topic_name: str) -> None:
        self.replicas = replicas
        self.image = image
        self.topic_name_hosted = topic_name

    def partition_count(self) -> int:
        """How many partitions the topic has (0: it does not exist yet)."""
        topic = self.image().topics.by_name.get(self.topic_name_hosted)
        return 0 if topic is None else len(topic.partitions)

    def led_epoch(self, partition: int) -> int | None:
        """The leader epoch of the partition if this broker leads it, else None."""
        hosted = self.replicas.partitions.get((self.topic_name_hosted, partition))
        if hosted is None or not hosted.state.is_leader:
            return None
        return hosted.state.leader_epoch

    def topic(self, name: str) -> tuple[UUID, int] | None:
        """A topic's id and partition count, from the metadata image (None: no such topic)."""
        t = self.image().topics.by_name.get(name)
        return None if t is None else (t.id, len(t.partitions))

    def topic_name(self, topic_id: UUID) -> str | None:
        t = self.image().topics.by_id.get(topic_id)
        return None if t is None else t.name

    def partition_log(self, partition: int) -> LoggedPartition | None:
        hosted = self.replicas.partitions.get((self.topic_name_hosted, partition))
        return None if hosted is None else hosted.log

    async def append(
        self, partition: int, batch: bytes, timeout_ms: int, *,
        verification: VerificationGuard | None = VERIFICATION_OFF,
    ) -> ErrorCode:  # fmt: skip
        """Append one batch as leader with acks=-1; the outcome once the HW covers it. The
        coordinator's own write (Kafka's AppendOrigin.COORDINATOR): a transactional batch's
        KIP-890 `verification` guard and producer epoch are checked, not its sequence (the
        group coordinator's TxnOffsetCommit batches all carry base sequence 0)."""
        params = ProduceParams(
            acks=-1,
            timeout_ms=timeout_ms,
            partitions=(ProducePartition(self.topic_name_hosted, partition, batch),),
            coordinator=True,
            verification=verification,
        )
        (result,) = await self.replicas.produce(params)
        return result.error
