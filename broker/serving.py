"""`LocalBrokerServices`: this broker's implementation of the client listener's
`BrokerServices` (broker.kafka.services): the metadata image from the observer's state
machine, partitions through the `ReplicaManager`, admin requests forwarded raw to the
active controller."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from broker.kafka.forwarding import forward_frame
from broker.kafka.services import (
    DeleteRecordsPartition,
    DeleteRecordsResult,
    EpochEndOffset,
    EpochQuery,
    FetchParams,
    FetchPartitionResult,
    ListOffsetsPartition,
    ListOffsetsResult,
    LogDirDescription,
    PartitionView,
    ProduceParams,
    ProducePartitionResult,
)
from broker.producer_ids import ProducerIdManager
from broker.replica.manager import ReplicaManager
from quorum.kafka_errors import ErrorCode
from quorum.metadata.image import MetadataImage
from quorum.node.controller_client import ControllerClient


class LocalBrokerServices:
    def __init__(
        self,
        node_id: int,
        cluster_id: str,
        image: Callable[[], MetadataImage],
        replicas: ReplicaManager,
        controller: ControllerClient,
        producer_ids: ProducerIdManager,
    ) -> None:
        self._node_id = node_id
        self._cluster_id = cluster_id
        self._image = image
        self.replicas = replicas
        self.controller = controller
        self.producer_ids = producer_ids

    @property
    def node_id(self) -> int:
        return self._node_id

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    def image(self) -> MetadataImage:
        return self._image()

    async def produce(self, params: ProduceParams) -> list[ProducePartitionResult]:
        return await self.replicas.produce(params)

    async def fetch(self, params: FetchParams) -> list[FetchPartitionResult]:
        return await self.replicas.fetch(params)

    def partition_view(self, topic: str, partition: int) -> PartitionView | None:
        return self.replicas.partition_view(topic, partition)

    async def list_offsets(
        self, replica_id: int, isolation_level: int, partitions: Sequence[ListOffsetsPartition]
    ) -> list[ListOffsetsResult]:
        return await self.replicas.list_offsets(replica_id, isolation_level, partitions)

    async def offset_for_leader_epoch(self, replica_id: int, queries: Sequence[EpochQuery]) -> list[EpochEndOffset]:
        return await self.replicas.offset_for_leader_epoch(replica_id, queries)

    async def delete_records(
        self, timeout_ms: int, partitions: Sequence[DeleteRecordsPartition]
    ) -> list[DeleteRecordsResult]:
        return await self.replicas.delete_records(timeout_ms, partitions)

    def describe_log_dirs(self, topics: Mapping[str, Sequence[int]] | None) -> list[LogDirDescription]:
        return self.replicas.describe_log_dirs(topics)

    async def new_producer_id(self) -> tuple[ErrorCode, int]:
        return await self.producer_ids.generate()

    async def forward_to_controller(self, frame: bytes, api_key: int, api_version: int, timeout_ms: int) -> bytes:
        return await forward_frame(self.controller, frame, api_key, api_version, timeout_ms)
