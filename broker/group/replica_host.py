"""The group coordinator's `PartitionHost` over this broker's replica manager: the shared
`broker.coordinator.partition_host.ReplicaPartitionHost` for `__consumer_offsets`."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from broker.coordinator.partition_host import ReplicaPartitionHost as _TopicHost
from broker.group.runtime import OFFSETS_TOPIC
from broker.replica.manager import ReplicaManager
from quorum.metadata.image import MetadataImage


class ReplicaPartitionHost(_TopicHost):
    def __init__(self, replicas: ReplicaManager, image: Callable[[], MetadataImage]) -> None:
        super().__init__(replicas, image, OFFSETS_TOPIC)

    def offsets_partitions(self) -> int:
        return self.partition_count()

    def topic_names(self) -> Iterable[str]:
        """Every topic's name in the metadata image (what KIP-848 subscription regexes match)."""
        return self.image().topics.by_name.keys()
