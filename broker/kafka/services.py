"""The boundary between the Kafka client listener (`broker.kafka`) and the rest of the broker.

The request and result types are the replica manager's (`broker.replica.requests`, which
knows nothing of the listener); this module re-exports them as the listener's vocabulary.

The listener decodes requests, applies the protocol's rules (versions, sessions, ordering,
response shapes) and calls a `BrokerServices` for everything that touches state: the
metadata image, the partition logs through the replica manager, and the active controller.
The integrator implements `BrokerServices` (`broker/node.py` wiring); the unit tests of this
package use a small in-memory implementation.

Conventions for every call:
- Topics are named by name; partitions by index. Results come back in the order of the
  request items (one result per item, same length).
- Records cross the boundary as opaque `bytes`/`memoryview`: one or more magic-v2 record
  batches exactly as on the wire and in the log. Neither side decodes individual records
  here; validation (CRC-32C, magic, lengths, `max.message.bytes`) is the log's
  (`PartitionLog.append_as_leader`, which raises `LogError` with the Kafka code).
- A `memoryview` passed in by the listener points into the request frame: it is valid for
  as long as the call runs; copy it (the log's write does) before keeping it longer.
- Offsets are Kafka offsets (int64), timestamps epoch milliseconds, timeouts milliseconds.
- Errors are `quorum.kafka_errors.ErrorCode` per item; a service method raises only for a
  bug (the listener then answers UNKNOWN_SERVER_ERROR for the request and keeps serving).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol, runtime_checkable

from broker.replica.requests import (
    CONSUMER_REPLICA_ID,
    DEBUGGING_REPLICA_ID,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    AbortedTransaction,
    DeleteRecordsPartition,
    DeleteRecordsResult,
    DescribeProducersResult,
    EpochEndOffset,
    EpochQuery,
    FetchParams,
    FetchPartition,
    FetchPartitionResult,
    LeaderHint,
    ListOffsetsPartition,
    ListOffsetsResult,
    LogDirDescription,
    LogDirPartition,
    PartitionView,
    ProduceParams,
    ProducePartition,
    ProducePartitionResult,
    ProducerDescription,
    RecordError,
    ReplicaView,
    TxnMarker,
    TxnMarkerResult,
)
from quorum.kafka_errors import ErrorCode
from quorum.metadata.image import MetadataImage
from quorum.wire.limits import ConnectionLimits

__all__ = [
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "CONSUMER_REPLICA_ID",
    "DEBUGGING_REPLICA_ID",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "AbortedTransaction",
    "BrokerServices",
    "DescribeProducersResult",
    "ProducerDescription",
    "TxnMarker",
    "TxnMarkerListener",
    "TxnMarkerResult",
    "DeleteRecordsPartition",
    "DeleteRecordsResult",
    "EpochEndOffset",
    "EpochQuery",
    "FetchParams",
    "FetchPartition",
    "FetchPartitionResult",
    "LeaderHint",
    "ListenerConfig",
    "RACK_AWARE_REPLICA_SELECTOR",
    "ListOffsetsPartition",
    "ListOffsetsResult",
    "LogDirDescription",
    "LogDirPartition",
    "PartitionView",
    "ProducePartition",
    "ProducePartitionResult",
    "ProduceParams",
    "RecordError",
    "ReplicaView",
]

# --------------------------------------------------------------------------- the protocol


@runtime_checkable
class BrokerServices(Protocol):
    """Everything the client listener needs from the broker (see the module doc)."""

    @property
    def node_id(self) -> int: ...

    @property
    def cluster_id(self) -> str: ...

    def image(self) -> MetadataImage:
        """The current metadata image (cheap; called on every request that needs it)."""
        ...

    async def produce(self, params: ProduceParams) -> list[ProducePartitionResult]:
        """Append to the partitions this broker leads; with acks=-1 wait (purgatory) until
        the HW covers each append or `timeout_ms` (REQUEST_TIMED_OUT). Per-partition
        errors: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER (+ current_leader),
        NOT_ENOUGH_REPLICAS(_AFTER_APPEND), CORRUPT_MESSAGE, MESSAGE_TOO_LARGE,
        RECORD_LIST_TOO_LARGE, INVALID_RECORD, UNSUPPORTED_COMPRESSION_TYPE,
        INVALID_TIMESTAMP, KAFKA_STORAGE_ERROR. For acks=0 the result is discarded."""
        ...

    async def fetch(self, params: FetchParams) -> list[FetchPartitionResult]:
        """Read (with long polling, see FetchParams). Per-partition errors:
        UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH,
        UNKNOWN_LEADER_EPOCH, OFFSET_OUT_OF_RANGE, KAFKA_STORAGE_ERROR."""
        ...

    def partition_view(self, topic: str, partition: int) -> PartitionView | None:
        """The replicas' positions of a partition this broker leads (KIP-392), else None."""
        ...

    async def list_offsets(
        self, replica_id: int, isolation_level: int, partitions: Sequence[ListOffsetsPartition]
    ) -> list[ListOffsetsResult]:
        """Leader only (NOT_LEADER_OR_FOLLOWER otherwise, unless replica_id is
        DEBUGGING_REPLICA_ID). OFFSET_NOT_AVAILABLE for LATEST while the HW is unknown
        after a leader change (Kafka's rule), FENCED/UNKNOWN_LEADER_EPOCH."""
        ...

    async def offset_for_leader_epoch(self, replica_id: int, queries: Sequence[EpochQuery]) -> list[EpochEndOffset]:
        """Leader only for consumers (replica_id -1); followers may ask a leader too."""
        ...

    async def delete_records(
        self, timeout_ms: int, partitions: Sequence[DeleteRecordsPartition]
    ) -> list[DeleteRecordsResult]:
        """Leader only: advance the log start offset (OFFSET_OUT_OF_RANGE above the HW),
        wait up to `timeout_ms` until every replica's log start offset reached it."""
        ...

    def describe_log_dirs(self, topics: Mapping[str, Sequence[int]] | None) -> list[LogDirDescription]:
        """Every log dir of this broker with the partitions asked (None = all)."""
        ...

    async def new_producer_id(self) -> tuple[ErrorCode, int]:
        """InitProducerId without a transactional id: (NONE, an id never handed out before in
        the cluster), or (COORDINATOR_LOAD_IN_PROGRESS, -1) while no id block is at hand."""
        ...

    async def write_txn_markers(self, markers: Sequence[TxnMarker], timeout_ms: int) -> list[TxnMarkerResult]:
        """WriteTxnMarkers: append each marker to each of its partitions this broker leads,
        with acks=all (up to `timeout_ms`). Per partition: UNKNOWN_TOPIC_OR_PARTITION (not
        hosted here), NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, INVALID_PRODUCER_EPOCH,
        TRANSACTION_COORDINATOR_FENCED, REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR. Once a marker
        on a `__consumer_offsets` partition is committed, the `TxnMarkerListener` (if any) is
        told before the answer."""
        ...

    def describe_producers(self, topic: str, partition: int) -> DescribeProducersResult:
        """DescribeProducers: the active producers of a partition this broker leads
        (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION otherwise)."""
        ...

    async def forward_to_controller(self, frame: bytes, api_key: int, api_version: int, timeout_ms: int) -> bytes:
        """Send a complete admin request frame (length prefix included, any correlation
        id) to the active controller, retrying NOT_CONTROLLER and unreachable controllers
        until `timeout_ms`; return the response frame *without* its length prefix, with
        the correlation id of `frame`. `broker.kafka.forwarding.forward_frame` does all of
        this over a `ControllerClient`. Raises TimeoutError when no controller answered."""
        ...


class TxnMarkerListener(Protocol):
    """The group coordinator's side of a transaction's end (Kafka's
    GroupCoordinator.onTransactionCompleted): told once a COMMIT (`committed`) or ABORT marker
    of `producer_id` is committed on `__consumer_offsets` partition `partition`, so that the
    transaction's pending offset commits are made visible or dropped. Called on the event
    loop, before the WriteTxnMarkers answer; an exception makes that partition's answer
    UNKNOWN_SERVER_ERROR (the coordinator sends the marker again)."""

    def on_txn_marker(self, partition: int, producer_id: int, committed: bool) -> None: ...


# --------------------------------------------------------------------------- listener settings

RACK_AWARE_REPLICA_SELECTOR: Final = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


@dataclass(frozen=True, slots=True)
class ListenerConfig:
    """The broker settings the client listener applies itself (Kafka names in comments).
    The integrator builds it from `NodeConfig`."""

    listener_name: str = "PLAINTEXT"  # Metadata answers every broker's endpoint of this listener
    auto_create_topics_enable: bool = True  # auto.create.topics.enable
    num_partitions: int = 1  # num.partitions, for auto-created topics
    default_replication_factor: int = 1  # default.replication.factor, for auto-created topics
    replica_selector_class: str | None = None  # replica.selector.class (KIP-392)
    fetch_max_bytes: int = 55 * 1024 * 1024  # fetch.max.bytes: cap on one consumer fetch response
    max_incremental_fetch_session_cache_slots: int = 1000  # max.incremental.fetch.session.cache.slots
    min_incremental_fetch_session_eviction_ms: int = 120_000  # Kafka's fixed eviction floor
    forward_timeout_ms: int = 30_000  # how long an admin request may wait for the active controller
    socket_request_max_bytes: int = 100 * 1024 * 1024  # socket.request.max.bytes
    offsets_topic_num_partitions: int = 50  # offsets.topic.num.partitions
    offsets_topic_replication_factor: int = 3  # offsets.topic.replication.factor
    offsets_topic_segment_bytes: int = 104_857_600  # offsets.topic.segment.bytes
    transaction_state_log_num_partitions: int = 50  # transaction.state.log.num.partitions
    transaction_state_log_replication_factor: int = 3  # transaction.state.log.replication.factor
    transaction_state_log_min_isr: int = 2  # transaction.state.log.min.isr
    transaction_state_log_segment_bytes: int = 104_857_600  # transaction.state.log.segment.bytes
    # The listener's connection limits (socket.request.max.bytes, queued.max.request.bytes,
    # max.connections[.per.ip], connections.max.idle.ms); None: Kafka's defaults.
    limits: ConnectionLimits | None = None

    @property
    def rack_aware_selector(self) -> bool:
        return self.replica_selector_class is not None and self.replica_selector_class.strip() in (
            RACK_AWARE_REPLICA_SELECTOR,
            "RackAwareReplicaSelector",
        )
