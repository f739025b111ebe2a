"""The boundary between the Kafka client listener (`broker.kafka`) and the rest of the broker.

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

from quorum.kafka_errors import ErrorCode
from quorum.metadata.image import MetadataImage
from quorum.wire.limits import ConnectionLimits

__all__ = [
    "CONSUMER_REPLICA_ID",
    "DEBUGGING_REPLICA_ID",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "BrokerServices",
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

CONSUMER_REPLICA_ID: Final = -1  # Fetch/ListOffsets replica id of an ordinary client
DEBUGGING_REPLICA_ID: Final = -2  # a client that may read up to the log end offset

# ListOffsets special timestamps (Kafka's ListOffsetsRequest constants).
LATEST_TIMESTAMP: Final = -1  # the offset of the next message (HW, or LSO for read_committed)
EARLIEST_TIMESTAMP: Final = -2  # the log start offset
MAX_TIMESTAMP: Final = -3  # the record with the largest timestamp (KIP-734, ListOffsets v7)

# Isolation levels (Fetch v4+, ListOffsets v2+).
READ_UNCOMMITTED: Final = 0
READ_COMMITTED: Final = 1


@dataclass(frozen=True, slots=True)
class LeaderHint:
    """The partition's current leader as this broker knows it (KIP-951 / Fetch v12
    CurrentLeader): set on NOT_LEADER_OR_FOLLOWER and FENCED_LEADER_EPOCH so the client
    can go straight to the new leader. -1/-1 when unknown."""

    leader_id: int = -1
    leader_epoch: int = -1


# --------------------------------------------------------------------------- Produce


@dataclass(frozen=True, slots=True)
class ProducePartition:
    topic: str
    partition: int
    records: bytes | memoryview  # >= 1 magic-v2 batches as sent; empty when the client sent null


@dataclass(frozen=True, slots=True)
class ProduceParams:
    """One Produce request. `acks`: 0 (no response is sent at all), 1 (leader append),
    -1 (all: wait until the HW passes the append, up to `timeout_ms`, honouring
    `min.insync.replicas`). Any other value was already answered INVALID_REQUIRED_ACKS.
    `transactional_id` is always None here (transactional produce is rejected earlier)."""

    acks: int
    timeout_ms: int
    partitions: tuple[ProducePartition, ...]
    transactional_id: str | None = None
    client_id: str | None = None


@dataclass(frozen=True, slots=True)
class RecordError:
    """Produce v8+: which batch/record of a partition's records was rejected."""

    batch_index: int
    message: str | None = None


@dataclass(frozen=True, slots=True)
class ProducePartitionResult:
    error: ErrorCode
    base_offset: int = -1  # first offset assigned to the appended records
    log_append_time_ms: int = -1  # -1 unless the topic uses LogAppendTime
    log_start_offset: int = -1
    error_message: str | None = None
    record_errors: tuple[RecordError, ...] = ()
    current_leader: LeaderHint | None = None  # on NOT_LEADER_OR_FOLLOWER (KIP-951)


# --------------------------------------------------------------------------- Fetch


@dataclass(frozen=True, slots=True)
class FetchPartition:
    topic: str
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1  # -1: not checked
    last_fetched_epoch: int = -1  # followers (v12+): for the diverging-epoch check; -1 unknown
    log_start_offset: int = -1  # followers: their log start offset; -1 for consumers


@dataclass(frozen=True, slots=True)
class FetchParams:
    """One Fetch, already resolved against the fetch session (`partitions` is every
    partition the response must consider, in request/session order).

    Long polling is the implementation's: answer as soon as `min_bytes` of records are
    available across the partitions (or any partition has an error, or a diverging
    epoch), else when `max_wait_ms` expires, with whatever there is then.

    Reading rules the implementation must keep (Kafka's):
    - whole batches from the batch that contains `fetch_offset` (the client skips the
      records before its offset), never splitting one;
    - at least one batch for the first partition that has data, even above
      `partition_max_bytes` / `max_bytes` (`min_one_batch`), then at most
      `partition_max_bytes` per partition and `max_bytes` in total;
    - consumers (`replica_id` < 0) read up to the high watermark (READ_UNCOMMITTED) or the
      last stable offset (READ_COMMITTED; equal to the HW without transactions);
      followers (`replica_id` >= 0) up to the log end offset, and their fetch records
      their position (ISR / high watermark).
    - `fetch_only_leader` False (a consumer with Fetch v11+, KIP-392) allows a consumer to
      read from a follower replica (up to the follower's HW); True answers
      NOT_LEADER_OR_FOLLOWER on a follower.
    """

    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: int
    partitions: tuple[FetchPartition, ...]
    fetch_only_leader: bool = True
    replica_epoch: int = -1  # the follower's broker epoch when it sent one; -1 unknown
    rack_id: str = ""
    client_id: str | None = None


@dataclass(frozen=True, slots=True)
class FetchPartitionResult:
    error: ErrorCode
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: bytes | memoryview = b""
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset), followers only
    current_leader: LeaderHint | None = None
    preferred_read_replica: int = -1  # set by the listener (KIP-392), not the implementation


# --------------------------------------------------------------------------- KIP-392 replica selection


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """One replica of a partition as its leader sees it (Kafka's ReplicaView)."""

    broker_id: int
    rack: str | None
    log_start_offset: int
    log_end_offset: int
    last_caught_up_time_ms: int  # -1 if never


@dataclass(frozen=True, slots=True)
class PartitionView:
    """A partition this broker leads, for the replica selector: every replica (the leader
    included) with its last known position."""

    leader_id: int
    replicas: tuple[ReplicaView, ...]


# --------------------------------------------------------------------------- ListOffsets


@dataclass(frozen=True, slots=True)
class ListOffsetsPartition:
    topic: str
    partition: int
    timestamp: int  # >= 0, or LATEST_TIMESTAMP / EARLIEST_TIMESTAMP / MAX_TIMESTAMP
    current_leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class ListOffsetsResult:
    """`offset` -1 with error NONE means no record has a timestamp >= the one asked.
    For LATEST: the HW (READ_UNCOMMITTED), the LSO (READ_COMMITTED) or the LEO (a replica
    or debugging id). `leader_epoch` is the epoch of the batch holding `offset` (-1 for
    LATEST/EARLIEST when unknown)."""

    error: ErrorCode
    timestamp: int = -1
    offset: int = -1
    leader_epoch: int = -1
    current_leader: LeaderHint | None = None


# --------------------------------------------------------------------------- OffsetForLeaderEpoch


@dataclass(frozen=True, slots=True)
class EpochQuery:
    topic: str
    partition: int
    leader_epoch: int  # the epoch whose end offset is wanted
    current_leader_epoch: int = -1  # fencing: -1 means not checked


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    """Kafka's LeaderEpochFileCache.endOffsetFor answer; (-1, -1) when undefined."""

    error: ErrorCode
    leader_epoch: int = -1
    end_offset: int = -1


# --------------------------------------------------------------------------- DeleteRecords


@dataclass(frozen=True, slots=True)
class DeleteRecordsPartition:
    topic: str
    partition: int
    offset: int  # delete every record before it; -1 means up to the high watermark


@dataclass(frozen=True, slots=True)
class DeleteRecordsResult:
    error: ErrorCode
    low_watermark: int = -1  # the new log start offset (min over replicas once they applied it)


# --------------------------------------------------------------------------- DescribeLogDirs


@dataclass(frozen=True, slots=True)
class LogDirPartition:
    topic: str
    partition: int
    size_bytes: int
    offset_lag: int  # LEO lag behind the HW (0 for the leader); Kafka's definition
    is_future: bool = False


@dataclass(frozen=True, slots=True)
class LogDirDescription:
    path: str
    error: ErrorCode
    partitions: tuple[LogDirPartition, ...]
    total_bytes: int = -1  # filesystem size (v4+), -1 unknown
    usable_bytes: int = -1  # free bytes (v4+), -1 unknown


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

    async def forward_to_controller(self, frame: bytes, api_key: int, api_version: int, timeout_ms: int) -> bytes:
        """Send a complete admin request frame (length prefix included, any correlation
        id) to the active controller, retrying NOT_CONTROLLER and unreachable controllers
        until `timeout_ms`; return the response frame *without* its length prefix, with
        the correlation id of `frame`. `broker.kafka.forwarding.forward_frame` does all of
        this over a `ControllerClient`. Raises TimeoutError when no controller answered."""
        ...


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
    # The listener's connection limits (socket.request.max.bytes, queued.max.request.bytes,
    # max.connections[.per.ip], connections.max.idle.ms); None: Kafka's defaults.
    limits: ConnectionLimits | None = None

    @property
    def rack_aware_selector(self) -> bool:
        return self.replica_selector_class is not None and self.replica_selector_class.strip() in (
            RACK_AWARE_REPLICA_SELECTOR,
            "RackAwareReplicaSelector",
        )
