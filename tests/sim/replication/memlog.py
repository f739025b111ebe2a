"""`MemLog`: an in-memory partition log for the replication simulation and unit tests.

It implements `broker.replica.state.LeaderLog` and `broker.replica.follower.FollowerLog`
with the same epoch-cache rules as the real partition log: the cache gets ``(epoch,
offset)`` when a record of a newer epoch is appended or when a leader assigns its epoch's
start; truncation drops cache entries starting at or past the truncation point, even when
no record is dropped (Kafka's ``truncateTo``, which removes an empty epoch a former leader
assigned). Records are ``(epoch, record_id, batch)``.

Batches: consecutive records with the same ``batch`` id form one batch (a producer's
request). As in Kafka's segments, DeleteRecords moves the *logical* log start offset
anywhere, even inside a batch, while the batch holding it stays whole on disk; reads for
replication return whole batches (`read_batches`), so a read at a log start inside a batch
begins at that batch's base offset, below the log start.

Durability: `flushed_end` is the end of the prefix that is on disk (fsynced); everything
past it is in the page cache only. `flush` moves it to the log end; `lose_unflushed` (a power
loss) cuts the log and its epoch cache back to it, without `on_drop` (a crash, not a
replication decision, removed those records).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from broker.log.epoch_cache import end_offset_for


@dataclass(frozen=True, slots=True)
class Record:
    epoch: int
    """The leader epoch the record was appended in (a batch's partitionLeaderEpoch)."""
    record_id: int
    """Unique per produced record in a simulation run (the producer's identity of the data)."""
    batch: int = -1
    """Records that share a batch id >= 0 and are adjacent form one batch; -1: a batch of its own."""


@dataclass(frozen=True, slots=True)
class Chunk:
    """Records read for replication: whole batches, the first one starting at ``base_offset``."""

    base_offset: int
    records: tuple[Record, ...]

    @property
    def last_offset(self) -> int:
        return self.base_offset + len(self.records) - 1


class AppendOffsetError(ValueError):
    """A follower append whose first kept record does not start at the log end (Kafka's
    ``UnexpectedAppendOffsetException``)."""


def _same_batch(a: Record, b: Record) -> bool:
    return a.batch >= 0 and a.batch == b.batch


@dataclass
class MemLog:
    records: list[Record] = field(default_factory=list)
    """Physical records: ``records[i]`` is at offset ``base_offset + i``."""
    epochs: list[tuple[int, int]] = field(default_factory=list)
    start_offset: int = 0
    """The logical log start offset (>= base_offset; may be inside the first batch)."""
    base_offset: int = 0
    """The base offset of the first batch kept on disk."""
    flushed_end: int = 0
    """Offsets below this are on disk; a power loss keeps only them."""
    on_drop: Callable[[int, list[Record]], None] | None = field(default=None, compare=False, repr=False)
    """Called with (first offset, records) whenever a truncation drops records (the simulation
    checks that none was consumed or acknowledged)."""

    def __post_init__(self) -> None:
        if not self.records and self.base_offset < self.start_offset:
            self.base_offset = self.start_offset
        self.flushed_end = max(self.flushed_end, self.base_offset)

    @property
    def log_start_offset(self) -> int:
        return self.start_offset

    @property
    def log_end_offset(self) -> int:
        return self.base_offset + len(self.records)

    def latest_epoch(self) -> int | None:
        return self.epochs[-1][0] if self.epochs else None

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return end_offset_for(self.epochs, epoch, self.log_end_offset)

    def assign_epoch_start_offset(self, epoch: int, start_offset: int) -> None:
        if not self.epochs or epoch > self.epochs[-1][0]:
            self.epochs.append((epoch, start_offset))

    def append(self, record: Record) -> int:
        """Append one record (as leader or follower); returns its offset."""
        if self.epochs and record.epoch < self.epochs[-1][0]:
            raise ValueError(f"record epoch {record.epoch} < latest epoch {self.epochs[-1][0]}")
        self.assign_epoch_start_offset(record.epoch, self.log_end_offset)
        self.records.append(record)
        return self.log_end_offset - 1

    def truncate_to(self, offset: int) -> list[Record]:
        """Drop offsets >= ``offset``; returns what was dropped. Below the log start, the log
        restarts empty at ``offset`` (Kafka's ``truncateTo`` below the first segment: after an
        unclean election, a leader's log may end below this log's start)."""
        if offset < self.start_offset and offset < self.log_end_offset:
            return self.truncate_fully_and_start_at(offset)
        self.epochs = [(e, s) for e, s in self.epochs if s < offset]
        self.flushed_end = min(self.flushed_end, offset)
        if offset >= self.log_end_offset:
            return []
        dropped = self.records[offset - self.base_offset :]
        del self.records[offset - self.base_offset :]
        if self.on_drop is not None:
            self.on_drop(offset, dropped)
        return dropped

    def append_as_follower(self, chunk: Chunk | tuple[Record, ...]) -> None:
        """The leader's batches: records below the log end are skipped (a batch that straddles
        the log end is refused: the rules restart an empty log at the batch's base first);
        the first record kept must be at the log end. A bare tuple is records at the log end."""
        end = self.log_end_offset
        if not isinstance(chunk, Chunk):
            chunk = Chunk(end, chunk)
        if not chunk.records:
            return
        if chunk.base_offset > end:
            raise AppendOffsetError(f"batch at {chunk.base_offset} appended at log end {end}")
        skip = end - chunk.base_offset
        if 0 < skip < len(chunk.records) and _same_batch(chunk.records[skip - 1], chunk.records[skip]):
            raise AppendOffsetError(f"batch at {chunk.base_offset} straddles the log end {end}")
        for rec in chunk.records[skip:]:
            self.append(rec)

    def truncate_fully_and_start_at(self, offset: int) -> list[Record]:
        dropped, first = self.records, self.base_offset
        self.records = []
        self.epochs = []
        self.start_offset = self.base_offset = offset
        self.flushed_end = offset
        if self.on_drop is not None and dropped:
            self.on_drop(max(first, 0), dropped)
        return dropped

    def _batch_base(self, offset: int) -> int:
        """The base offset of the batch holding ``offset`` (base_offset <= offset < LEO)."""
        i = offset - self.base_offset
        while i > 0 and _same_batch(self.records[i - 1], self.records[i]):
            i -= 1
        return self.base_offset + i

    def delete_records_before(self, offset: int) -> int:
        if offset > self.log_end_offset:
            raise ValueError(f"offset {offset} above the log end {self.log_end_offset}")
        if offset > self.start_offset:
            self.start_offset = offset
            new_base = self._batch_base(offset) if offset < self.log_end_offset else offset
            del self.records[: new_base - self.base_offset]
            self.base_offset = new_base
            self.flushed_end = max(self.flushed_end, new_base)
        return self.start_offset

    def read(self, offset: int, max_offset: int, max_records: int = 1 << 30) -> list[Record]:
        """Records from ``offset`` (>= the log start) below ``max_offset``, one per offset."""
        lo = max(offset, self.start_offset) - self.base_offset
        hi = min(max_offset, self.log_end_offset) - self.base_offset
        return self.records[lo : min(hi, lo + max_records)] if hi > lo else []

    def read_batches(self, offset: int, max_batches: int) -> Chunk:
        """Up to ``max_batches`` whole batches from the one holding ``offset`` (a leader's answer)."""
        if offset >= self.log_end_offset or max_batches <= 0:
            return Chunk(offset, ())
        base = self._batch_base(max(offset, self.base_offset))
        i = base - self.base_offset
        j, batches = i, 0
        while j < len(self.records) and batches < max_batches:
            j += 1
            while j < len(self.records) and _same_batch(self.records[j - 1], self.records[j]):
                j += 1
            batches += 1
        return Chunk(base, tuple(self.records[i:j]))

    def at(self, offset: int) -> Record | None:
        if offset < self.start_offset:
            return None
        i = offset - self.base_offset
        return self.records[i] if 0 <= i < len(self.records) else None

    def span(self, lo: int, hi: int) -> list[Record]:
        """The records at offsets [lo, hi) (lo >= the log start, hi <= the log end)."""
        return self.records[lo - self.base_offset : hi - self.base_offset]

    # ------------------------------------------------------------ durability

    def flush(self) -> None:
        self.flushed_end = self.log_end_offset

    def lose_unflushed(self) -> int:
        """Power loss: keep only the flushed prefix (the epoch cache loses entries starting at or
        past it, as Kafka's recovery truncates it to the recovered log end). Returns how many
        records were lost."""
        keep = self.flushed_end
        lost = self.log_end_offset - keep
        if lost <= 0:
            return 0
        if keep <= self.start_offset:
            self.records = []
            self.base_offset = self.start_offset
        else:
            del self.records[keep - self.base_offset :]
        self.epochs = [(e, s) for e, s in self.epochs if s < self.log_end_offset]
        self.flushed_end = self.log_end_offset
        return lost

    def copy(self) -> MemLog:
        return MemLog(list(self.records), list(self.epochs), self.start_offset, self.base_offset, self.flushed_end)
