"""`RaftLog`: the core's in-memory view of the replicated log.

The driver loads the durable log into it at start; afterwards the core changes
it and reports each change through `Ready` (truncate, append, install snapshot,
delete prefix), so memory and disk agree once a Ready is persisted.

Invariants:
- batches are contiguous: batches[i+1].base_offset == batches[i].end_offset;
- start_offset == batches[0].base_offset when there are batches; it is the end
  offset of the latest snapshot when the log prefix was deleted (or 0);
- epochs never decrease along the log;
- `epoch_starts` holds (epoch, first offset) for every epoch present, in order
  (Kafka's leader-epoch cache), and is rebuilt on truncation.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from quorum.raft.types import Batch, Epoch, Offset, OffsetAndEpoch

# Size of a v2 batch header and a rough per-record framing overhead, in bytes;
# used to respect fetch max_bytes without encoding.
_BATCH_OVERHEAD = 61
_RECORD_OVERHEAD = 8


class Validity(Enum):
    VALID = "valid"
    DIVERGING = "diverging"
    SNAPSHOT = "snapshot"


@dataclass(frozen=True, slots=True)
class ValidatedPosition:
    """The leader's verdict on a replica's (fetch offset, last fetched epoch)."""

    kind: Validity
    # DIVERGING: the largest leader epoch <= the replica's, and where it ends.
    # SNAPSHOT: the latest snapshot id.
    position: OffsetAndEpoch | None = None


def batch_size_estimate(batch: Batch) -> int:
    return _BATCH_OVERHEAD + sum(len(r) for r in batch.records) + _RECORD_OVERHEAD * len(batch.records)


class RaftLog:
    def __init__(
        self,
        batches: Sequence[Batch] = (),
        *,
        start_offset: Offset = 0,
        snapshot_id: OffsetAndEpoch | None = None,
    ) -> None:
        self.start_offset: Offset = start_offset
        self.snapshot_id: OffsetAndEpoch | None = snapshot_id
        self._batches: list[Batch] = []
        self._bases: list[Offset] = []
        self._epoch_starts: list[tuple[Epoch, Offset]] = []
        for batch in batches:
            if batch.end_offset <= start_offset:
                continue  # covered by the snapshot
            if not self._batches and batch.base_offset != start_offset:
                raise ValueError(f"log starts at {batch.base_offset}, expected {start_offset}")
            self.append(batch)

    # -- reading ---------------------------------------------------------------

    @property
    def end_offset(self) -> Offset:
        """The log end offset (LEO): the offset the next record will get."""
        return self._batches[-1].end_offset if self._batches else self.start_offset

    @property
    def last_epoch(self) -> Epoch:
        """Epoch of the last record, or of the snapshot when the log is empty, or 0."""
        if self._batches:
            return self._batches[-1].epoch
        return self.snapshot_id.epoch if self.snapshot_id is not None else 0

    @property
    def batches(self) -> Sequence[Batch]:
        return self._batches

    @property
    def epoch_starts(self) -> Sequence[tuple[Epoch, Offset]]:
        return self._epoch_starts

    def __len__(self) -> int:
        return len(self._batches)

    def index_of(self, offset: Offset) -> int:
        """Index of the batch containing `offset` (which must be in [start, end))."""
        i = bisect_right(self._bases, offset) - 1
        if i < 0 or offset >= self._batches[i].end_offset:
            raise IndexError(f"offset {offset} not in log [{self.start_offset}, {self.end_offset})")
        return i

    def epoch_at(self, offset: Offset) -> Epoch:
        """Epoch of the record at `offset`; the snapshot's epoch at start_offset-1."""
        if self.snapshot_id is not None and offset == self.snapshot_id.offset - 1:
            return self.snapshot_id.epoch
        if offset < self.start_offset:
            raise IndexError(f"offset {offset} is below log start {self.start_offset}")
        return self._batches[self.index_of(offset)].epoch

    def is_batch_boundary(self, offset: Offset) -> bool:
        if offset == self.end_offset or offset == self.start_offset:
            return True
        i = bisect_right(self._bases, offset) - 1
        return i >= 0 and self._bases[i] == offset

    def read(self, offset: Offset, max_bytes: int) -> tuple[Batch, ...]:
        """Batches from the one containing `offset`, at least one, up to about max_bytes."""
        if offset >= self.end_offset or offset < self.start_offset:
            return ()
        i = self.index_of(offset)
        out = [self._batches[i]]
        size = batch_size_estimate(out[0])
        for batch in self._batches[i + 1 :]:
            size += batch_size_estimate(batch)
            if size > max_bytes:
                break
            out.append(batch)
        return tuple(out)

    def batches_between(self, start: Offset, end: Offset) -> tuple[Batch, ...]:
        """Batches wholly inside [start, end); both must be batch boundaries."""
        if start >= end:
            return ()
        start = max(start, self.start_offset)
        i = bisect_right(self._bases, start) - 1
        i = max(i, 0)
        out = []
        for batch in self._batches[i:]:
            if batch.base_offset >= end:
                break
            if batch.base_offset >= start:
                out.append(batch)
        return tuple(out)

    def end_offset_for_epoch(self, epoch: Epoch) -> OffsetAndEpoch:
        """The largest epoch <= `epoch` present in the log, and that epoch's end offset.

        When no such epoch is in the log, the snapshot's epoch (or 0) at start_offset.
        """
        i = bisect_right(self._epoch_starts, (epoch, 1 << 62)) - 1
        if i < 0:
            base_epoch = self.snapshot_id.epoch if self.snapshot_id is not None else 0
            return OffsetAndEpoch(epoch=min(base_epoch, epoch), offset=self.start_offset)
        found_epoch = self._epoch_starts[i][0]
        if i + 1 < len(self._epoch_starts):
            return OffsetAndEpoch(epoch=found_epoch, offset=self._epoch_starts[i + 1][1])
        return OffsetAndEpoch(epoch=found_epoch, offset=self.end_offset)

    def validate_offset_and_epoch(self, offset: Offset, epoch: Epoch) -> ValidatedPosition:
        """Is a replica whose log ends at `offset` with last epoch `epoch` a prefix of this log?

        Follows Kafka's ReplicatedLog.validateOffsetAndEpoch: below or at a mismatched
        log start the replica needs the snapshot; otherwise it diverges where its
        epoch ends here, or is valid.
        """
        snapshot = self.snapshot_id
        if snapshot is not None and self.start_offset > 0:
            if (
                offset < self.start_offset
                or (offset == self.start_offset and epoch != snapshot.epoch)
                or epoch < snapshot.epoch
            ):
                return ValidatedPosition(Validity.SNAPSHOT, snapshot)
        if offset == 0 and epoch == 0 and self.start_offset == 0:
            return ValidatedPosition(Validity.VALID)
        end = self.end_offset_for_epoch(epoch)
        if end.epoch != epoch or end.offset < offset:
            return ValidatedPosition(Validity.DIVERGING, end)
        return ValidatedPosition(Validity.VALID)

    def truncation_offset_for(self, diverging: OffsetAndEpoch) -> Offset:
        """Where a follower truncates when its leader reports `diverging`.

        The leader's epoch `diverging.epoch` ends at `diverging.offset`; locally we
        keep what both logs share for that epoch. The result is floored to a batch
        boundary (batches are never split).
        """
        local = self.end_offset_for_epoch(diverging.epoch)
        if local.epoch == diverging.epoch:
            target = min(local.offset, diverging.offset)
        else:
            target = local.offset
        target = max(min(target, self.end_offset), self.start_offset)
        if not self.is_batch_boundary(target):
            target = self._batches[self.index_of(target)].base_offset
        return target

    # -- changing --------------------------------------------------------------

    def append(self, batch: Batch) -> None:
        if batch.base_offset != self.end_offset:
            raise ValueError(f"batch at {batch.base_offset} does not continue log ending at {self.end_offset}")
        if not batch.records:
            raise ValueError("empty batch")
        if self._batches and batch.epoch < self._batches[-1].epoch:
            raise ValueError(f"batch epoch {batch.epoch} below log epoch {self._batches[-1].epoch}")
        if not self._epoch_starts or self._epoch_starts[-1][0] != batch.epoch:
            self._epoch_starts.append((batch.epoch, batch.base_offset))
        self._batches.append(batch)
        self._bases.append(batch.base_offset)

    def truncate_to(self, offset: Offset) -> None:
        """Remove every batch at or after `offset` (a batch boundary >= start_offset)."""
        if offset >= self.end_offset:
            return
        if offset < self.start_offset or not self.is_batch_boundary(offset):
            raise ValueError(f"cannot truncate to {offset} (log [{self.start_offset}, {self.end_offset}))")
        i = bisect_right(self._bases, offset) - 1
        if i >= 0 and self._bases[i] < offset:
            i += 1
        i = max(i, 0)
        del self._batches[i:]
        del self._bases[i:]
        while self._epoch_starts and self._epoch_starts[-1][1] >= offset:
            self._epoch_starts.pop()

    def delete_before(self, snapshot_id: OffsetAndEpoch) -> None:
        """Forget batches below a snapshot's end offset (a batch boundary)."""
        self.snapshot_id = snapshot_id
        offset = snapshot_id.offset
        if offset <= self.start_offset:
            return
        if offset >= self.end_offset:
            self.reset_to_snapshot(snapshot_id)
            return
        kept: list[tuple[Epoch, Offset]] = []
        for k, (epoch, start) in enumerate(self._epoch_starts):
            end = self._epoch_starts[k + 1][1] if k + 1 < len(self._epoch_starts) else self.end_offset
            if end > offset:
                kept.append((epoch, max(start, offset)))
        i = self.index_of(offset)
        del self._batches[:i]
        del self._bases[:i]
        self.start_offset = offset
        self._epoch_starts = kept

    def reset_to_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        """Drop the whole log: it now starts and ends at the snapshot's end offset."""
        self._batches.clear()
        self._bases.clear()
        self._epoch_starts.clear()
        self.start_offset = snapshot_id.offset
        self.snapshot_id = snapshot_id
