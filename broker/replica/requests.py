"""What the replica manager serves, and its answers: produce, fetch, list offsets, offsets for
leader epochs, delete records and log dirs, as plain frozen values.

The Kafka client listener (`broker.kafka`) builds these from decoded requests and encodes
the results (`broker.kafka.services` re-exports them as the listener's boundary); the
replica manager (`broker.replica.manager`) takes and returns them. Offsets are Kafka offsets
(int64), timestamps epoch milliseconds, timeouts milliseconds; errors are per item.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from broker.log.file_range import FileRange
from broker.log.producer_state import VERIFICATION_OFF, VerificationGuard
from quorum.frozen_init import fast_frozen_init
from quorum.kafka_errors import ErrorCode

if TYPE_CHECKING:
    import asyncio

    from broker.replica.purgatory import SessionWatch

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


@dataclass(frozen=True, slots=True, init=False)
class ProducePartition:
    topic: str
    partition: int
    records: bytes | memoryview  # >= 1 magic-v2 batches as sent; empty when the client sent null

    # Compiled with the module (the dataclass decorator's __init__ would run as Python there:
    # ~4,800 instructions a partition of every Produce); uncompiled, fast_frozen_init replaces it.
    def __init__(self, topic: str, partition: int, records: bytes | memoryview) -> None:
        object.__setattr__(self, "topic", topic)
        object.__setattr__(self, "partition", partition)
        object.__setattr__(self, "records", records)


fast_frozen_init(ProducePartition)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True, init=False)
class ProduceParams:
    """One Produce request. `acks`: 0 (no response is sent at all), 1 (leader append),
    -1 (all: wait until the HW passes the append, up to `timeout_ms`, honouring
    `min.insync.replicas`). Any other value was already answered INVALID_REQUIRED_ACKS.
    `transactional_id`: the producer's, when its batches are transactional."""

    acks: int
    timeout_ms: int
    partitions: tuple[ProducePartition, ...]
    transactional_id: str | None = None
    client_id: str | None = None
    # A coordinator's own write (Kafka's AppendOrigin.COORDINATOR): no sequence checks.
    coordinator: bool = False
    # A coordinator's transactional write: the KIP-890 guard its caller got
    # (`txn_verification.verify_coordinator_write`); VERIFICATION_OFF: not verified.
    verification: VerificationGuard | None = VERIFICATION_OFF

    # Compiled with the module (the dataclass decorator's __init__ would run as Python there:
    # ~11,000 instructions a Produce); uncompiled, fast_frozen_init replaces it.
    def __init__(
        self,
        acks: int,
        timeout_ms: int,
        partitions: tuple[ProducePartition, ...],
        transactional_id: str | None = None,
        client_id: str | None = None,
        coordinator: bool = False,
        verification: VerificationGuard | None = VERIFICATION_OFF,
    ) -> None:
        object.__setattr__(self, "acks", acks)
        object.__setattr__(self, "timeout_ms", timeout_ms)
        object.__setattr__(self, "partitions", partitions)
        object.__setattr__(self, "transactional_id", transactional_id)
        object.__setattr__(self, "client_id", client_id)
        object.__setattr__(self, "coordinator", coordinator)
        object.__setattr__(self, "verification", verification)


fast_frozen_init(ProduceParams)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class RecordError:
    """Produce v8+: which batch/record of a partition's records was rejected."""

    batch_index: int
    message: str | None = None


@dataclass(frozen=True, slots=True, init=False)
class ProducePartitionResult:
    error: ErrorCode
    base_offset: int = -1  # first offset assigned to the appended records
    log_append_time_ms: int = -1  # -1 unless the topic uses LogAppendTime
    log_start_offset: int = -1
    error_message: str | None = None
    record_errors: tuple[RecordError, ...] = ()
    current_leader: LeaderHint | None = None  # on NOT_LEADER_OR_FOLLOWER (KIP-951)

    # Compiled with the module (the dataclass decorator's __init__ would run as Python there);
    # uncompiled, fast_frozen_init replaces it.
    def __init__(
        self,
        error: ErrorCode,
        base_offset: int = -1,
        log_append_time_ms: int = -1,
        log_start_offset: int = -1,
        error_message: str | None = None,
        record_errors: tuple[RecordError, ...] = (),
        current_leader: LeaderHint | None = None,
    ) -> None:
        object.__setattr__(self, "error", error)
        object.__setattr__(self, "base_offset", base_offset)
        object.__setattr__(self, "log_append_time_ms", log_append_time_ms)
        object.__setattr__(self, "log_start_offset", log_start_offset)
        object.__setattr__(self, "error_message", error_message)
        object.__setattr__(self, "record_errors", record_errors)
        object.__setattr__(self, "current_leader", current_leader)


fast_frozen_init(ProducePartitionResult)  # not a decorator: mypyc makes a decorated class a Python class


# --------------------------------------------------------------------------- Fetch


@dataclass(frozen=True, slots=True, init=False)
class FetchPartition:
    topic: str
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1  # -1: not checked
    last_fetched_epoch: int = -1  # followers (v12+): for the diverging-epoch check; -1 unknown
    log_start_offset: int = -1  # followers: their log start offset; -1 for consumers

    # Compiled with the module (the dataclass decorator's __init__ would run as Python there);
    # uncompiled, fast_frozen_init replaces it.
    def __init__(
        self,
        topic: str,
        partition: int,
        fetch_offset: int,
        partition_max_bytes: int,
        current_leader_epoch: int = -1,
        last_fetched_epoch: int = -1,
        log_start_offset: int = -1,
    ) -> None:
        object.__setattr__(self, "topic", topic)
        object.__setattr__(self, "partition", partition)
        object.__setattr__(self, "fetch_offset", fetch_offset)
        object.__setattr__(self, "partition_max_bytes", partition_max_bytes)
        object.__setattr__(self, "current_leader_epoch", current_leader_epoch)
        object.__setattr__(self, "last_fetched_epoch", last_fetched_epoch)
        object.__setattr__(self, "log_start_offset", log_start_offset)


fast_frozen_init(FetchPartition)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True, init=False)
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
    session: SessionWatch | None = None
    """An incremental fetch of a follower's KIP-227 session: `partitions` are only those the
    request names and those the session saw change (`SessionWatch.changed`, taken by the
    caller); a partition that changes while the fetch waits is read too, and appended to
    the answer (`SessionWatch.extra`: the results follow `partitions` + those)."""
    yield_to: asyncio.Future[None] | None = None
    """Resolved when another request arrives behind this one on its connection: a waiting
    consumer fetch answers then with what it has, as at `max_wait_ms` (answers leave in
    request order, and nothing is owed to a long poll but its upper bound)."""

    # Compiled with the module (the dataclass decorator's __init__ would run as Python there:
    # ~19,000 instructions a fetch); uncompiled, fast_frozen_init replaces it.
    def __init__(
        self,
        replica_id: int,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        isolation_level: int,
        partitions: tuple[FetchPartition, ...],
        fetch_only_leader: bool = True,
        replica_epoch: int = -1,
        rack_id: str = "",
        client_id: str | None = None,
        session: SessionWatch | None = None,
        yield_to: asyncio.Future[None] | None = None,
    ) -> None:
        object.__setattr__(self, "replica_id", replica_id)
        object.__setattr__(self, "max_wait_ms", max_wait_ms)
        object.__setattr__(self, "min_bytes", min_bytes)
        object.__setattr__(self, "max_bytes", max_bytes)
        object.__setattr__(self, "isolation_level", isolation_level)
        object.__setattr__(self, "partitions", partitions)
        object.__setattr__(self, "fetch_only_leader", fetch_only_leader)
        object.__setattr__(self, "replica_epoch", replica_epoch)
        object.__setattr__(self, "rack_id", rack_id)
        object.__setattr__(self, "client_id", client_id)
        object.__setattr__(self, "session", session)
        object.__setattr__(self, "yield_to", yield_to)


fast_frozen_init(FetchParams)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class AbortedTransaction:
    """Fetch's AbortedTransactions entry: a READ_COMMITTED consumer drops this producer's
    records from `first_offset` up to its ABORT marker."""

    producer_id: int
    first_offset: int


@dataclass(frozen=True, slots=True, init=False)
class FetchPartitionResult:
    error: ErrorCode
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    # Bytes, or a range of a segment file that the listener sends as it is (a fetch's
    # answer; it may end inside a batch, see PartitionLog.read_range).
    records: bytes | memoryview | FileRange = b""
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset), followers only
    current_leader: LeaderHint | None = None
    preferred_read_replica: int = -1  # set by the listener (KIP-392), not the implementation
    # READ_COMMITTED consumers: the aborted transactions overlapping `records`.
    aborted_transactions: tuple[AbortedTransaction, ...] = ()

    # Compiled with the module (the dataclass decorator's __init__ would run as Python there);
    # uncompiled, fast_frozen_init replaces it.
    def __init__(
        self,
        error: ErrorCode,
        high_watermark: int = -1,
        last_stable_offset: int = -1,
        log_start_offset: int = -1,
        records: bytes | memoryview | FileRange = b"",
        diverging_epoch: tuple[int, int] | None = None,
        current_leader: LeaderHint | None = None,
        preferred_read_replica: int = -1,
        aborted_transactions: tuple[AbortedTransaction, ...] = (),
    ) -> None:
        object.__setattr__(self, "error", error)
        object.__setattr__(self, "high_watermark", high_watermark)
        object.__setattr__(self, "last_stable_offset", last_stable_offset)
        object.__setattr__(self, "log_start_offset", log_start_offset)
        object.__setattr__(self, "records", records)
        object.__setattr__(self, "diverging_epoch", diverging_epoch)
        object.__setattr__(self, "current_leader", current_leader)
        object.__setattr__(self, "preferred_read_replica", preferred_read_replica)
        object.__setattr__(self, "aborted_transactions", aborted_transactions)


fast_frozen_init(FetchPartitionResult)  # not a decorator: mypyc makes a decorated class a Python class


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


# --------------------------------------------------------------------------- WriteTxnMarkers


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """One marker of a WriteTxnMarkers request: write COMMIT (`committed`) or ABORT for the
    producer's transaction to each of `partitions` (topic, partition) this broker leads."""

    producer_id: int
    producer_epoch: int
    committed: bool
    coordinator_epoch: int
    partitions: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class TxnMarkerResult:
    """Per partition of the marker, in its order: NONE once the marker is committed (the HW
    passed it: markers are written with acks=all), else the error."""

    producer_id: int
    errors: tuple[ErrorCode, ...]


# --------------------------------------------------------------------------- DescribeProducers


@dataclass(frozen=True, slots=True)
class ProducerDescription:
    """One active producer of a partition, as Kafka's DescribeProducers lists it."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int  # -1: no open transaction


@dataclass(frozen=True, slots=True)
class DescribeProducersResult:
    error: ErrorCode
    producers: tuple[ProducerDescription, ...] = ()
