"""`LocalBrokerServices`: this broker's implementation of the client listener's
`BrokerServices` (broker.kafka.services): the metadata image from the observer's state
machine, partitions through the `ReplicaManager`, admin requests forwarded raw to the
active controller."""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any

from broker.kafka.forwarding import forward_frame
from broker.kafka.services import (
    DeleteRecordsPartition,
    DeleteRecordsResult,
    DescribeProducersResult,
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
    TxnMarker,
    TxnMarkerListener,
    TxnMarkerResult,
)
from broker.producer_ids import ProducerIdManager
from broker.replica.manager import ReplicaManager
from quorum.kafka_errors import ErrorCode
from quorum.metadata.image import MetadataImage
from quorum.node.controller_client import ControllerClient

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"


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
        # The group coordinator's hook for transactional offsets (set by the integrator).
        self.txn_marker_listener: TxnMarkerListener | None = None

    @property
    def node_id(self) -> int:
        return self._node_id

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    def image(self) -> MetadataImage:
        return self._image()

    def produce(self, params: ProduceParams) -> Coroutine[Any, Any, list[ProducePartitionResult]]:
        return self.replicas.produce(params)  # the manager's coroutine itself: no frame of our own

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

    async def write_txn_markers(self, markers: Sequence[TxnMarker], timeout_ms: int) -> list[TxnMarkerResult]:
        results = await self.replicas.write_txn_markers(markers, timeout_ms)
        listener = self.txn_marker_listener
        if listener is None:
            return results
        out = []
        for marker, result in zip(markers, results, strict=True):
            errors = list(result.errors)
            for i, ((topic, partition), error) in enumerate(zip(marker.partitions, errors, strict=True)):
                if topic != OFFSETS_TOPIC or error != ErrorCode.NONE:
                    continue
                try:
                    listener.on_txn_marker(partition, marker.producer_id, marker.committed)
                except Exception:
                    log.exception("the group coordinator failed on the marker of producer %d", marker.producer_id)
                    errors[i] = ErrorCode.UNKNOWN_SERVER_ERROR
            out.append(TxnMarkerResult(result.producer_id, tuple(errors)))
        return out

    def describe_producers(self, topic: str, partition: int) -> DescribeProducersResult:
        return self.replicas.describe_producers(topic, partition)

    async def forward_to_controller(self, frame: bytes, api_key: int, api_version: int, timeout_ms: int) -> bytes:
        return await forward_frame(self.controller, frame, api_key, api_version, timeout_ms)
