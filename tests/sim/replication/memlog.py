"""`MemLog`: an in-memory partition log for the replication simulation and unit tests.

It implements `broker.replica.state.LeaderLog` with the same epoch-cache rules as the real
partition log: the cache gets ``(epoch, offset)`` when a record of a newer epoch is appended
or when a leader assigns its epoch's start; truncation drops cache entries starting at or
past the truncation point, even when no record is dropped (Kafka's ``truncateTo``, which
removes an empty epoch a former leader assigned). Records are ``(epoch, record_id)``.
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


@dataclass
class MemLog:
    records: list[Record] = field(default_factory=list)
    epochs: list[tuple[int, int]] = field(default_factory=list)
    start_offset: int = 0
    on_drop: Callable[[int, list[Record]], None] | None = field(default=None, compare=False, repr=False)
    """Called with (first offset, records) whenever a truncation drops records (the simulation
    checks that none was consumed or acknowledged)."""

    @property
    def log_start_offset(self) -> int:
        return self.start_offset

    @property
    def log_end_offset(self) -> int:
        return self.start_offset + len(self.records)

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
        """Drop offsets >= ``offset``; returns what was dropped."""
        offset = max(offset, self.start_offset)
        self.epochs = [(e, s) for e, s in self.epochs if s < offset]
        if offset >= self.log_end_offset:
            return []
        dropped = self.records[offset - self.start_offset :]
        del self.records[offset - self.start_offset :]
        if self.on_drop is not None:
            self.on_drop(offset, dropped)
        return dropped

    def append_as_follower(self, records: tuple[Record, ...]) -> None:
        """The leader's records, appended at the log end (the rules only append an answer sent
        for the log end, or restart an empty log where the answer's records begin)."""
        for rec in records:
            self.append(rec)

    def truncate_fully_and_start_at(self, offset: int) -> list[Record]:
        dropped, first = self.records, self.start_offset
        self.records = []
        self.epochs = []
        self.start_offset = offset
        if self.on_drop is not None and dropped:
            self.on_drop(first, dropped)
        return dropped

    def delete_records_before(self, offset: int) -> int:
        if offset > self.log_end_offset:
            raise ValueError(f"offset {offset} above the log end {self.log_end_offset}")
        if offset > self.start_offset:
            del self.records[: offset - self.start_offset]
            self.start_offset = offset
        return self.start_offset

    def read(self, offset: int, max_offset: int, max_records: int = 1 << 30) -> list[Record]:
        lo = offset - self.start_offset
        hi = min(max_offset, self.log_end_offset) - self.start_offset
        return self.records[lo : min(hi, lo + max_records)] if hi > lo else []

    def at(self, offset: int) -> Record | None:
        i = offset - self.start_offset
        return self.records[i] if 0 <= i < len(self.records) else None

    def copy(self) -> MemLog:
        return MemLog(list(self.records), list(self.epochs), self.start_offset)
