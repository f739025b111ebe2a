"""Idempotent producers' state of one partition: the rules, sans IO (Kafka's
ProducerStateManager, ProducerStateEntry and ProducerAppendInfo, Kafka 3.9).

Per producer id the partition keeps the producer epoch, the timestamp of its last batch
and the metadata of its last `NUM_BATCHES_TO_RETAIN` (5) batches: last sequence, last
offset, offset delta (records - 1) and max timestamp. A client's append is checked
against that state before it is written:

- a batch whose producer epoch and exact (first, last) sequence range equal one of the 5
  kept batches is a **duplicate**: it is not appended again and the producer is answered
  NONE with the original batch's offsets (Kafka never answers DUPLICATE_SEQUENCE_NUMBER);
- an epoch below the producer's: INVALID_PRODUCER_EPOCH;
- a new (higher) epoch must start at sequence 0, else OUT_OF_ORDER_SEQUENCE_NUMBER, unless
  the producer had no epoch yet;
- the same epoch: the first sequence must follow the last one (`last + 1`, and 0 after
  2**31 - 1), else OUT_OF_ORDER_SEQUENCE_NUMBER;
- an unknown producer (never seen, or expired, or its batches deleted by retention) may
  start at any sequence. Kafka 3.9's broker never answers UNKNOWN_PRODUCER_ID (the client
  infers it); neither does this one.

Transactions (Kafka 3.9's ProducerAppendInfo and ProducerStateManager): a transactional
batch (attribute 0x10) of a producer with no open transaction opens one at its first
offset (`current_txn_first_offset`); a control batch (0x20: an end-transaction marker,
`broker.log.control_records`) closes it. Rules for a leader's writes:

- a client's non-transactional batch while its producer has a transaction open:
  INVALID_TXN_STATE;
- a marker with a producer epoch below the producer's: INVALID_PRODUCER_EPOCH; with a
  coordinator epoch below the last one this partition saw for the producer:
  TRANSACTION_COORDINATOR_FENCED.

Open transactions, in first-offset order, and the closed ones whose marker the high
watermark has not passed yet give the **first unstable offset**; the log's last stable
offset is min(first unstable offset, HW). A marker of a transaction that wrote nothing here
closes nothing (Kafka: no CompletedTxn for an empty transaction).

KIP-890 part 1 (Kafka 3.9's VerificationStateEntry and VerificationGuard): before a leader
writes a transactional batch of a producer with no transaction open here, it asks the
transaction coordinator whether this partition is in the producer's transaction
(`start_verification` hands out a guard, a fresh object, unless a transaction is open; the
caller verifies, then appends with that guard). The append is refused INVALID_TXN_STATE
unless the guard is still the one kept for the producer: a marker (or any transactional
write of the producer) between the verification and the append drops it, so a late retry
of an aborted transaction's batch cannot open a transaction the coordinator does not know
(a "hanging" transaction that would hold the LSO forever). While a verification is kept, a
batch whose first sequence is above the lowest one seen for it is OUT_OF_ORDER_SEQUENCE_NUMBER
(the earlier batch must go first). Unverified entries expire with producer.id.expiration.ms.

Batches a follower copies from its leader are not checked (the leader did it): a lower
epoch is accepted too, and the state follows whatever the log holds, so that a follower
that becomes leader knows every producer's sequences already.

Snapshots (`<20-digit offset>.snapshot`, Kafka's ProducerSnapshot v1 layout) hold the
state of every producer as of that offset, the last batch of each only (as Kafka's):

    Version int16 (=1) | Crc uint32 (CRC-32C of everything after it) |
    ProducerEntries int32 count, then per producer: ProducerId int64 | Epoch int16 |
    LastSequence int32 | LastOffset int64 | OffsetDelta int32 | Timestamp int64 |
    CoordinatorEpoch int32 | CurrentTxnFirstOffset int64 (-1: none)

Every append, a leader's, a follower's, and the replay of the log at open or after a
truncation, goes through `on_append`: the same transitions everywhere.

Units: offsets are Kafka offsets, timestamps and durations epoch milliseconds.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from crc32c import crc32c
from mypy_extensions import trait

from broker.log.control_records import EndTxnMarker, MarkerError, decode_marker_batch
from broker.log.errors import LogError
from quorum.frozen_init import fast_frozen_init
from quorum.kafka_errors import ErrorCode
from quorum.storage.batch_layout import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    ATTRIBUTES_AT,
    BASE_SEQUENCE_AT,
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    PRODUCER_EPOCH_AT,
    PRODUCER_ID_AT,
)

NUM_BATCHES_TO_RETAIN: Final = 5
NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
NO_SEQUENCE: Final = -1
SEQUENCE_MAX: Final = 2**31 - 1
SNAPSHOT_SUFFIX: Final = ".snapshot"
SNAPSHOT_VERSION: Final = 1
DEFAULT_PRODUCER_ID_EXPIRATION_MS: Final = 86_400_000  # producer.id.expiration.ms

# attributes, then (after last offset delta and both timestamps) producerId, producerEpoch, baseSequence
_ATTRIBUTES_TO_SEQUENCE: Final = struct.Struct(">h20xqhi")
_ATTRIBUTES: Final = struct.Struct(">h")
_BATCH_LENGTH: Final = struct.Struct(">i")
_SNAPSHOT_HEAD: Final = struct.Struct(">hIi")  # version, crc, entry count
_SNAPSHOT_ENTRY: Final = struct.Struct(">qhiqiqiq")
_SNAPSHOT_CRC_COVERS_FROM: Final = 6  # the CRC covers the bytes after version and crc

assert PRODUCER_EPOCH_AT == PRODUCER_ID_AT + 8 and BASE_SEQUENCE_AT == PRODUCER_EPOCH_AT + 2
assert struct.calcsize(_ATTRIBUTES_TO_SEQUENCE.format[:5]) == PRODUCER_ID_AT - ATTRIBUTES_AT


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's sequence arithmetic: sequences wrap from 2**31 - 1 to 0."""
    if sequence > SEQUENCE_MAX - increment:
        return increment - (SEQUENCE_MAX - sequence) - 1
    return sequence + increment


def decrement_sequence(sequence: int, decrement: int) -> int:
    if sequence < decrement:
        return SEQUENCE_MAX - (decrement - sequence) + 1
    return sequence - decrement


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == SEQUENCE_MAX)


# A trait for mypyc: an attribute declared on a native base class reaches its dataclass
# subclasses' decorator as a default (a getset descriptor), which refuses the fields after it.
# A trait has no `__slots__` (mypy refuses them with the subclasses' slots=True), so an
# uncompiled subclass's instances carry an (always empty) instance dict slot.
@trait
class _BatchAttributes:
    """The attribute bits of a batch header that the producer state reads."""

    attributes: int

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)


@dataclass(frozen=True, slots=True, init=False)
class BatchProducerFields(_BatchAttributes):
    """A batch header's attributes and producer fields: the one reader of them, used by the
    produce path, KIP-890's verification and the producer state."""

    attributes: int
    producer_id: int
    producer_epoch: int
    base_sequence: int

    # Compiled with the module (the dataclass decorator's __init__, or fast_frozen_init's,
    # would run as Python there: thousands of instructions per instance on the append path);
    # uncompiled, fast_frozen_init replaces it.
    def __init__(
        self,
        attributes: int,
        producer_id: int,
        producer_epoch: int,
        base_sequence: int,
    ) -> None:
        object.__setattr__(self, "attributes", attributes)
        object.__setattr__(self, "producer_id", producer_id)
        object.__setattr__(self, "producer_epoch", producer_epoch)
        object.__setattr__(self, "base_sequence", base_sequence)


def is_transactional_batch(data: bytes | bytearray | memoryview, position: int = 0) -> bool:
    """`read_producer_fields(...).is_transactional` without building the fields (the produce
    path asks it of every partition of every request): False when too short for a header."""
    return len(data) - position >= BATCH_HEADER_SIZE and bool(
        _ATTRIBUTES.unpack_from(data, position + ATTRIBUTES_AT)[0] & ATTR_TRANSACTIONAL
    )


def read_producer_fields(data: bytes | bytearray | memoryview, position: int = 0) -> BatchProducerFields | None:
    """The header fields of the batch at `position` of `data`; None when the bytes left are
    too few to hold a batch header (validation refuses such records)."""
    if len(data) - position < BATCH_HEADER_SIZE:
        return None
    attributes, pid, epoch, sequence = _ATTRIBUTES_TO_SEQUENCE.unpack_from(data, position + ATTRIBUTES_AT)
    return BatchProducerFields(attributes, pid, epoch, sequence)


fast_frozen_init(BatchProducerFields)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True, init=False)
class ProducerBatch(_BatchAttributes):
    """What the producer state needs of one batch header (offsets as written or to be);
    for a control batch, its end-transaction marker (None: an emptied control batch)."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    base_offset: int
    last_offset_delta: int  # records in the batch - 1
    max_timestamp: int
    attributes: int = 0
    marker: EndTxnMarker | None = None

    # Compiled with the module (the dataclass decorator's __init__, or fast_frozen_init's,
    # would run as Python there: thousands of instructions per instance on the append path);
    # uncompiled, fast_frozen_init replaces it.
    def __init__(
        self,
        producer_id: int,
        producer_epoch: int,
        base_sequence: int,
        base_offset: int,
        last_offset_delta: int,
        max_timestamp: int,
        attributes: int = 0,
        marker: EndTxnMarker | None = None,
    ) -> None:
        object.__setattr__(self, "producer_id", producer_id)
        object.__setattr__(self, "producer_epoch", producer_epoch)
        object.__setattr__(self, "base_sequence", base_sequence)
        object.__setattr__(self, "base_offset", base_offset)
        object.__setattr__(self, "last_offset_delta", last_offset_delta)
        object.__setattr__(self, "max_timestamp", max_timestamp)
        object.__setattr__(self, "attributes", attributes)
        object.__setattr__(self, "marker", marker)

    @property
    def last_sequence(self) -> int:
        return increment_sequence(self.base_sequence, self.last_offset_delta)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @classmethod
    def from_header(
        cls, data: bytes | bytearray | memoryview, position: int, base_offset: int, last_offset_delta: int,
        max_timestamp: int,
    ) -> ProducerBatch:  # fmt: skip
        """From the batch at `position` of `data` (its header; the whole batch when it is a
        control batch: its marker is decoded, and its record's timestamp taken as the
        batch's). LogError CORRUPT_MESSAGE for a control batch that holds no marker."""
        fields = read_producer_fields(data, position)
        if fields is None:
            raise LogError(ErrorCode.CORRUPT_MESSAGE, f"batch at offset {base_offset}: truncated header")
        pid, epoch, seq, attributes = fields.producer_id, fields.producer_epoch, fields.base_sequence, fields.attributes
        marker = None
        if fields.is_control:
            (length,) = _BATCH_LENGTH.unpack_from(data, position + LOG_OVERHEAD - 4)
            try:
                decoded = decode_marker_batch(memoryview(data)[position : position + LOG_OVERHEAD + length])
            except MarkerError as exc:
                raise LogError(ErrorCode.CORRUPT_MESSAGE, f"control batch at offset {base_offset}: {exc}") from None
            if decoded is not None:
                marker, max_timestamp = decoded
        # ProducerBatch, not cls: mypyc calls the compiled constructor directly (no subclass exists).
        return ProducerBatch(pid, epoch, seq, base_offset, last_offset_delta, max_timestamp, attributes, marker)


fast_frozen_init(ProducerBatch)  # not a decorator: mypyc makes a decorated class a Python class


class VerificationGuard:
    """One verification's token: compared by identity, never equal to another."""

    __slots__ = ()


# `check_client_append`'s guard when verification is off (transaction.partition.verification.enable=false).
VERIFICATION_OFF: Final = VerificationGuard()


@dataclass(slots=True)
class VerificationState:
    """A verification started for a producer with no open transaction here."""

    guard: VerificationGuard
    timestamp: int  # ms, when it started
    lowest_sequence: int
    epoch: int

    def saw(self, sequence: int, epoch: int) -> None:
        """Kafka's maybeUpdateLowestSequenceAndEpoch: a lower sequence of the same epoch, or
        any sequence of a newer epoch, becomes the lowest."""
        if epoch == self.epoch and sequence < self.lowest_sequence:
            self.lowest_sequence = sequence
        if epoch > self.epoch:
            self.epoch, self.lowest_sequence = epoch, sequence


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction closed by its marker at `last_offset` (Kafka's CompletedTxn)."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


@dataclass(frozen=True, slots=True, init=False)
class BatchMetadata:
    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    # Compiled with the module (the dataclass decorator's __init__, or fast_frozen_init's,
    # would run as Python there: thousands of instructions per instance on the append path);
    # uncompiled, fast_frozen_init replaces it.
    def __init__(
        self,
        last_seq: int,
        last_offset: int,
        offset_delta: int,
        timestamp: int,
    ) -> None:
        object.__setattr__(self, "last_seq", last_seq)
        object.__setattr__(self, "last_offset", last_offset)
        object.__setattr__(self, "offset_delta", offset_delta)
        object.__setattr__(self, "timestamp", timestamp)

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


fast_frozen_init(BatchMetadata)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True, init=False)
class ProducerEntry:
    """One producer's state in this partition; `batches` oldest first, at most 5."""

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: tuple[BatchMetadata, ...] = ()
    last_timestamp: int = -1
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1  # the first offset of its open transaction; -1: none

    # Compiled with the module (the dataclass decorator's __init__, or fast_frozen_init's,
    # would run as Python there: thousands of instructions per instance on the append path);
    # uncompiled, fast_frozen_init replaces it.
    def __init__(
        self,
        producer_id: int,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        batches: tuple[BatchMetadata, ...] = (),
        last_timestamp: int = -1,
        coordinator_epoch: int = -1,
        current_txn_first_offset: int = -1,
    ) -> None:
        object.__setattr__(self, "producer_id", producer_id)
        object.__setattr__(self, "producer_epoch", producer_epoch)
        object.__setattr__(self, "batches", batches)
        object.__setattr__(self, "last_timestamp", last_timestamp)
        object.__setattr__(self, "coordinator_epoch", coordinator_epoch)
        object.__setattr__(self, "current_txn_first_offset", current_txn_first_offset)

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    def duplicate_of(self, batch: ProducerBatch) -> BatchMetadata | None:
        """The kept batch with this batch's epoch and exact sequence range, if any."""
        if batch.producer_epoch != self.producer_epoch:
            return None
        last_seq = batch.last_sequence
        for kept in self.batches:
            if kept.first_seq == batch.base_sequence and kept.last_seq == last_seq:
                return kept
        return None

    def with_batch(self, batch: ProducerBatch) -> ProducerEntry:
        """After appending data `batch` (a new epoch forgets the older epoch's batches); a
        transactional batch opens a transaction at its first offset if none is open."""
        kept = self.batches if batch.producer_epoch == self.producer_epoch else ()
        added = BatchMetadata(batch.last_sequence, batch.last_offset, batch.last_offset_delta, batch.max_timestamp)
        txn_first = self.current_txn_first_offset
        if batch.is_transactional and txn_first < 0:
            txn_first = batch.base_offset
        return ProducerEntry(
            self.producer_id, batch.producer_epoch, (*kept, added)[-NUM_BATCHES_TO_RETAIN:], batch.max_timestamp,
            self.coordinator_epoch, txn_first,
        )  # fmt: skip

    def with_marker(self, producer_epoch: int, coordinator_epoch: int, timestamp: int) -> ProducerEntry:
        """After an end-transaction marker (Kafka's ProducerStateEntry.update): the transaction
        is closed; a new producer epoch forgets the older epoch's batches."""
        kept = self.batches if producer_epoch == self.producer_epoch else ()
        return ProducerEntry(self.producer_id, producer_epoch, kept, timestamp, coordinator_epoch, -1)


fast_frozen_init(ProducerEntry)  # not a decorator: mypyc makes a decorated class a Python class


def check_producer_epoch(current: ProducerEntry, epoch: int, offset: int, where: str) -> None:
    """INVALID_PRODUCER_EPOCH for a write (data or marker) with an epoch below the producer's."""
    if epoch < current.producer_epoch:
        raise LogError(
            ErrorCode.INVALID_PRODUCER_EPOCH,
            f"Epoch of producer {current.producer_id} at offset {offset} in {where} is {epoch}, "
            f"which is smaller than the last seen epoch {current.producer_epoch}",
        )


def check_marker(
    entry: ProducerEntry | None, producer_id: int, producer_epoch: int, marker: EndTxnMarker, offset: int, where: str
) -> None:
    """A coordinator's marker against its producer's state: INVALID_PRODUCER_EPOCH, then
    TRANSACTION_COORDINATOR_FENCED (a coordinator epoch below the last one seen here)."""
    current = entry if entry is not None else ProducerEntry(producer_id)
    check_producer_epoch(current, producer_epoch, offset, where)
    if current.coordinator_epoch > marker.coordinator_epoch:
        raise LogError(
            ErrorCode.TRANSACTION_COORDINATOR_FENCED,
            f"Invalid coordinator epoch for producerId {producer_id} at offset {offset} in {where}: "
            f"{marker.coordinator_epoch} (zombie), {current.coordinator_epoch} (current)",
        )


def check_client_batch(entry: ProducerEntry | None, batch: ProducerBatch, where: str) -> None:
    """A client's (non-duplicate) batch against its producer's state: LogError with
    INVALID_PRODUCER_EPOCH or OUT_OF_ORDER_SEQUENCE_NUMBER where Kafka raises them, and
    INVALID_TXN_STATE for a non-transactional batch while the producer's transaction is open."""
    current = entry if entry is not None else ProducerEntry(batch.producer_id)
    pid = batch.producer_id
    check_producer_epoch(current, batch.producer_epoch, batch.base_offset, where)
    _check_sequence(current, batch, where)
    if current.current_txn_first_offset >= 0 and not batch.is_transactional:
        raise LogError(
            ErrorCode.INVALID_TXN_STATE,
            f"Expected transactional write from producer {pid} at offset {batch.base_offset} in {where}",
        )


def _check_sequence(current: ProducerEntry, batch: ProducerBatch, where: str) -> None:
    pid, epoch, first_seq = batch.producer_id, batch.producer_epoch, batch.base_sequence
    if epoch != current.producer_epoch:
        if first_seq != 0 and current.producer_epoch != NO_PRODUCER_EPOCH:
            raise LogError(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"Invalid sequence number for new epoch of producer {pid} at offset {batch.base_offset} in "
                f"{where}: {epoch} (request epoch), {first_seq} (seq. number), "
                f"{current.producer_epoch} (current producer epoch)",
            )
        return
    if current.producer_epoch != NO_PRODUCER_EPOCH and not in_sequence(current.last_seq, first_seq):
        raise LogError(
            ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
            f"Out of order sequence number for producer {pid} at offset {batch.base_offset} in {where}: "
            f"{first_seq} (incoming seq. number), {current.last_seq} (current end sequence number)",
        )


class SnapshotError(ValueError):
    """A snapshot file that does not parse or whose CRC does not match."""


class ProducerStateManager:
    """The producers of one partition, as of the batches below `map_end_offset`.

    Invariant: `entries` is the result of applying, in offset order, every batch with a
    producer id below `map_end_offset` (starting from a snapshot's state, which is that
    result for the batches below its offset, last batch per producer only), minus the
    producers expired since."""

    def __init__(self, where: str, *, expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS) -> None:
        self.where = where  # "<topic>-<partition>", for messages
        self.expiration_ms = expiration_ms
        self.entries: dict[int, ProducerEntry] = {}
        self.map_end_offset = 0
        # Open transactions: producer id -> first offset, in first-offset order (each opens at
        # the offset being appended, above every open one; `load` sorts).
        self.ongoing: dict[int, int] = {}
        # KIP-890 verifications in progress, by producer id (dropped by the producer's next
        # transactional write or marker, and by expiry).
        self.verifications: dict[int, VerificationState] = {}
        # Closed transactions whose marker the high watermark has not passed, marker order.
        self.unreplicated: list[CompletedTxn] = []

    # ------------------------------------------------------------------ the client path

    def start_verification(
        self, producer_id: int, *, sequence: int, epoch: int, now_ms: int
    ) -> VerificationGuard | None:
        """Before a leader asks the coordinator about a transactional batch: None when the
        producer has a transaction open here (nothing to verify), else the guard its append
        must carry (the same one while a verification is kept)."""
        if producer_id in self.ongoing:
            return None
        state = self.verifications.get(producer_id)
        if state is None:
            state = self.verifications[producer_id] = VerificationState(VerificationGuard(), now_ms, sequence, epoch)
        else:
            state.saw(sequence, epoch)
        return state.guard

    def check_client_append(
        self, batches: list[ProducerBatch], guard: VerificationGuard | None = VERIFICATION_OFF
    ) -> BatchMetadata | None:
        """Before a leader writes a client's batches (offsets already assigned): the
        original of the first duplicate among them (then nothing is written, as Kafka's
        `analyzeAndValidateProducerState`), else None once every batch passes the sequence
        and epoch rules in order (LogError otherwise); the state is not changed. `guard`: what
        `start_verification` gave for this request (None: none was started), or
        VERIFICATION_OFF when transactional writes are not verified."""
        working: dict[int, ProducerEntry] = {}
        last = len(batches) - 1
        for i, batch in enumerate(batches):
            if batch.producer_id == NO_PRODUCER_ID:
                continue
            current = self.entries.get(batch.producer_id)
            if batch.producer_id not in working and current is not None:
                duplicate = current.duplicate_of(batch)
                if duplicate is not None:
                    return duplicate
            entry = working.get(batch.producer_id, current)
            # Kafka's order: the verification, then the producer's epoch and sequence rules.
            if guard is not VERIFICATION_OFF and batch.is_transactional:
                self._check_verified(batch, guard, entry)
            check_client_batch(entry, batch, self.where)
            self._check_lowest_sequence(batch)
            if i < last:  # later batches of the request are checked against this one
                working[batch.producer_id] = (entry or ProducerEntry(batch.producer_id)).with_batch(batch)
        return None

    def _check_lowest_sequence(self, batch: ProducerBatch) -> None:
        state = self.verifications.get(batch.producer_id)
        if state is not None and batch.producer_epoch == state.epoch and batch.base_sequence > state.lowest_sequence:
            raise LogError(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"Out of order sequence number for producer {batch.producer_id} at offset {batch.base_offset} in "
                f"{self.where}: {batch.base_sequence} (incoming seq. number), {state.lowest_sequence} (earliest seen "
                "sequence)",
            )

    def _check_verified(
        self, batch: ProducerBatch, guard: VerificationGuard | None, entry: ProducerEntry | None
    ) -> None:
        # "Open here" is read from the working entry alone: it is the producer's entry (whose
        # transaction is open exactly when it is in `ongoing`) after this request's earlier batches.
        state = self.verifications.get(batch.producer_id)
        open_here = entry is not None and entry.current_txn_first_offset >= 0
        if not open_here and (state is None or guard is None or state.guard is not guard):
            raise LogError(
                ErrorCode.INVALID_TXN_STATE,
                f"Record from producer {batch.producer_id} at offset {batch.base_offset} in {self.where} was not part "
                "of an ongoing transaction",
            )

    def check_coordinator_append(
        self, batches: list[ProducerBatch], guard: VerificationGuard | None = VERIFICATION_OFF
    ) -> None:
        """Before a leader writes a coordinator's own batches (the group coordinator's
        transactional offset commits: Kafka's AppendOrigin.COORDINATOR): the KIP-890
        verification as for a client's batch (`guard`: what `start_verification` gave the
        coordinator's TxnOffsetCommit; VERIFICATION_OFF: not verified), then only the producer
        epoch (LogError INVALID_PRODUCER_EPOCH). Kafka writes each such batch with base
        sequence 0, so neither the sequence rule nor the duplicate rule applies."""
        for batch in batches:
            if batch.producer_id != NO_PRODUCER_ID:
                current = self.entries.get(batch.producer_id) or ProducerEntry(batch.producer_id)
                if guard is not VERIFICATION_OFF and batch.is_transactional:
                    self._check_verified(batch, guard, current)
                check_producer_epoch(current, batch.producer_epoch, batch.base_offset, self.where)

    # ------------------------------------------------------------------ every append

    def check_marker(self, producer_id: int, producer_epoch: int, marker: EndTxnMarker, offset: int) -> None:
        """Before a leader writes a coordinator's marker: LogError INVALID_PRODUCER_EPOCH or
        TRANSACTION_COORDINATOR_FENCED; the state is not changed."""
        check_marker(self.entries.get(producer_id), producer_id, producer_epoch, marker, offset, self.where)

    # ------------------------------------------------------------------ every append

    def on_append(self, batches: Iterable[ProducerBatch], end_offset: int) -> list[tuple[CompletedTxn, int]]:
        """Batches written to the log (by the leader after `check_client_append` or
        `check_marker`, copied by a follower, or replayed from the log: not checked), in
        offset order; `end_offset` is the log end after them. Returns each transaction a
        marker closed with the last stable offset right after that marker (the first offset
        of the oldest transaction of another producer still open, else the marker + 1): what
        the aborted-transaction index records."""
        completed: list[tuple[CompletedTxn, int]] = []
        for batch in batches:
            pid = batch.producer_id
            if pid == NO_PRODUCER_ID:
                continue
            entry = self.entries.get(pid) or ProducerEntry(pid)
            if batch.is_transactional:  # the transaction is open here now, or just ended
                self.verifications.pop(pid, None)
            if not batch.is_control:
                updated = entry.with_batch(batch)
                if updated.current_txn_first_offset >= 0 and pid not in self.ongoing:
                    self.ongoing[pid] = updated.current_txn_first_offset
                self.entries[pid] = updated
                continue
            if batch.marker is None:  # a control batch the cleaner emptied: nothing to close
                continue
            if entry.current_txn_first_offset >= 0:
                txn = CompletedTxn(pid, entry.current_txn_first_offset, batch.base_offset, not batch.marker.committed)
                self.ongoing.pop(pid, None)
                lso = next(iter(self.ongoing.values()), batch.base_offset + 1)
                self.unreplicated.append(txn)
                completed.append((txn, lso))
            self.entries[pid] = entry.with_marker(batch.producer_epoch, batch.marker.coordinator_epoch,
                                                  batch.max_timestamp)  # fmt: skip
        self.map_end_offset = max(self.map_end_offset, end_offset)
        return completed

    # ------------------------------------------------------------------ transactions

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of the oldest transaction that is open, or closed by a marker at
        or above `high_watermark` (those below it are forgotten: the HW only rises between
        truncations, which reload the state); None when there is none."""
        unreplicated = self.unreplicated
        while unreplicated and unreplicated[0].last_offset < high_watermark:
            unreplicated.pop(0)
        first = next(iter(self.ongoing.values()), None)  # the oldest open transaction
        for txn in unreplicated:
            if first is None or txn.first_offset < first:
                first = txn.first_offset
        return first

    def last_entry(self, producer_id: int) -> ProducerEntry | None:
        return self.entries.get(producer_id)

    # ------------------------------------------------------------------ expiry and resets

    def is_expired(self, entry: ProducerEntry, now_ms: int) -> bool:
        return entry.current_txn_first_offset < 0 and now_ms - entry.last_timestamp >= self.expiration_ms

    def remove_expired(self, now_ms: int) -> int:
        """Forget producers idle for producer.id.expiration.ms (by their last batch's max
        timestamp); returns how many."""
        expired = [pid for pid, e in self.entries.items() if self.is_expired(e, now_ms)]
        for pid in expired:
            del self.entries[pid]
        stale = [pid for pid, v in self.verifications.items() if now_ms - v.timestamp >= self.expiration_ms]
        for pid in stale:
            del self.verifications[pid]
        return len(expired)

    def reset(self, offset: int) -> None:
        """No producer is known; the state covers nothing below `offset` (an empty log)."""
        self.entries.clear()
        self.ongoing.clear()
        self.unreplicated.clear()
        self.map_end_offset = offset

    def load(self, entries: Iterable[ProducerEntry], offset: int, now_ms: int) -> None:
        """Start from a snapshot's state as of `offset` (expired producers are dropped)."""
        self.entries = {e.producer_id: e for e in entries if not self.is_expired(e, now_ms)}
        self.ongoing = {
            e.producer_id: e.current_txn_first_offset
            for e in sorted(self.entries.values(), key=lambda e: e.current_txn_first_offset)
            if e.current_txn_first_offset >= 0
        }
        self.unreplicated = []
        self.map_end_offset = offset

    # ------------------------------------------------------------------ snapshots

    def snapshot_bytes(self) -> bytes:
        return encode_snapshot(self.entries.values())


def snapshot_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


def snapshot_offset(name: str) -> int | None:
    """The offset of a `<20 digits>.snapshot` file name, else None."""
    stem = name[: -len(SNAPSHOT_SUFFIX)]
    if name.endswith(SNAPSHOT_SUFFIX) and len(stem) == 20 and stem.isdigit():
        return int(stem)
    return None


def encode_snapshot(entries: Iterable[ProducerEntry]) -> bytes:
    # A producer whose last write was a marker of a new epoch has no batch: it is kept
    # (LastSequence and LastOffset -1) for its epoch and coordinator epoch.
    rows = [e for e in entries if e.batches or e.coordinator_epoch >= 0 or e.current_txn_first_offset >= 0]
    body = bytearray(_SNAPSHOT_HEAD.pack(SNAPSHOT_VERSION, 0, len(rows)))
    for e in rows:
        last = e.batches[-1] if e.batches else BatchMetadata(NO_SEQUENCE, -1, 0, e.last_timestamp)
        body += _SNAPSHOT_ENTRY.pack(
            e.producer_id, e.producer_epoch, last.last_seq, last.last_offset, last.offset_delta, e.last_timestamp,
            e.coordinator_epoch, e.current_txn_first_offset,
        )  # fmt: skip
    struct.pack_into(">I", body, 2, crc32c(memoryview(body)[_SNAPSHOT_CRC_COVERS_FROM:]))
    return bytes(body)


def decode_snapshot(data: bytes) -> list[ProducerEntry]:
    if len(data) < _SNAPSHOT_HEAD.size:
        raise SnapshotError(f"a snapshot of {len(data)} bytes is shorter than its header")
    version, crc, count = _SNAPSHOT_HEAD.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise SnapshotError(f"snapshot version {version} is not {SNAPSHOT_VERSION}")
    if crc32c(memoryview(data)[_SNAPSHOT_CRC_COVERS_FROM:]) != crc:
        raise SnapshotError("snapshot CRC mismatch")
    if count < 0 or len(data) != _SNAPSHOT_HEAD.size + count * _SNAPSHOT_ENTRY.size:
        raise SnapshotError(f"snapshot of {len(data)} bytes does not hold {count} entries")
    out = []
    for i in range(count):
        pid, epoch, last_seq, last_offset, delta, ts, coordinator_epoch, txn_first = _SNAPSHOT_ENTRY.unpack_from(
            data, _SNAPSHOT_HEAD.size + i * _SNAPSHOT_ENTRY.size
        )
        batches = (BatchMetadata(last_seq, last_offset, delta, ts),) if last_offset >= 0 else ()
        out.append(ProducerEntry(pid, epoch, batches, ts, coordinator_epoch, txn_first))
    return out
