"""`PartitionLog`: one partition replica's log in Kafka's on-disk layout.

`<log dir>/<topic>-<partition>/` holds segments (`<20-digit base>.log` + `.index` +
`.timeindex`), `leader-epoch-checkpoint` and `partition.metadata`. The log knows nothing
of replication: the replica layer decides what to append, truncate or read and up to
which offset.

Invariants:
- offsets are contiguous and unique: each append continues at `log_end_offset` (LEO);
- `log_start_offset <= log_end_offset`; reads below the log start or above the LEO are
  OFFSET_OUT_OF_RANGE;
- the leader-epoch cache holds (epoch, start offset) pairs with both strictly rising, and
  no entry starts above the LEO;
- batches are stored as received (leaders patch base offset and leader epoch, outside the
  CRC); the data is read back with `pread`, never held in Python;
- after an unclean stop, every segment holding offsets at or above the recovery point is
  re-walked (framing and CRC through `quorum.storage.record_batch`, the rule the metadata
  log uses too), its indexes rebuilt, and the log cut at the first torn or corrupt batch;
  the segments below it are trusted and opened lazily (no read at all until used);
- the recovery point only names offsets whose segments were fsynced: a rolled segment is
  flushed on the log dir's `DiskQueue` (Kafka's flush on roll) and the recovery point
  moves to its end once that flush is done (`recovery_point` applies finished flushes);
- disk work that needs no answer (the leader-epoch checkpoint, flushes of rolled
  segments, unlinks of deleted segments) runs on the `DiskQueue`, in submission order;
- `producers` (broker.log.producer_state) always describes every producer batch below the
  log end: every append updates it, and a truncation or an open reloads it from the newest
  `<offset>.snapshot` at or below the log end plus the batches after it; a snapshot's offset
  is never above the log end nor below the first segment.
- transactions (broker.log.producer_state): each segment's `.txnindex` holds exactly the
  aborted transactions whose ABORT marker lies in that segment and below the producers'
  map end (the log end once an append or a reload is done): the appends that close a
  transaction write its entry, a reload cuts the indexes at the snapshot's offset and the
  replay after it writes them again, so recovery and truncation rebuild them with the very
  rule that wrote them. The last stable offset is min(first unstable offset, HW), never
  below the log start.
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from uuid import UUID

from broker.log.checkpoints import (
    LEADER_EPOCH_FILE,
    read_epochs,
    read_partition_metadata,
    write_epochs,
    write_partition_metadata,
)
from broker.log.compression import DecompressionError
from broker.log.config import LogConfig
from broker.log.control_records import EndTxnMarker, encode_marker_batch
from broker.log.dir_failure import LogDirFailures, refuse_offline, storage_failure, storage_op
from broker.log.disk_queue import INLINE, DiskQueue
from broker.log.epoch_cache import end_offset_for
from broker.log.errors import LogError
from broker.log.file_range import FileRange, complete_batches_size
from broker.log.producer_state import (
    NO_PRODUCER_ID,
    VERIFICATION_OFF,
    CompletedTxn,
    ProducerBatch,
    ProducerStateManager,
    SnapshotError,
    VerificationGuard,
    decode_snapshot,
    snapshot_name,
    snapshot_offset,
)
from broker.log.records import RecordsError, batch_records
from broker.log.segment import LogSegment
from broker.log.txn_index import TXN_INDEX_SUFFIX, AbortedTxn
from broker.log.validation import assign
from quorum.frozen_init import fast_frozen_init
from quorum.kafka_errors import ErrorCode
from quorum.storage.batch_layout import ATTR_CONTROL, BATCH_HEADER_SIZE
from quorum.storage.durable import fsync_dir
from quorum.storage.record_batch import BatchFrame, scan_frames

log = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"  # a segment the log cleaner is writing (incomplete)
SWAP_SUFFIX = ".swap"  # a cleaned segment, fsynced, waiting to replace its sources

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
_I32_MAX = 2**31 - 1
_READ_CHUNK_MIN = 64 * 1024
_REPLAY_CHUNK = 1024 * 1024  # bytes of batch headers read at a time when producer state is rebuilt
# Appended batches whose end positions are kept for `position_of` (the batches between the
# high watermark and the log end: acks=all produces in flight, at most a few hundred).
_BATCH_ENDS_KEPT = 4096
# Batch ends `_recent_batch_at` looks through, newest first (a caught-up reader is a few behind).
_RECENT_LOOKUP = 16
# producer.id.expiration.check.interval.ms: how often expired producers are forgotten (ms).
PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS = 600_000


@dataclass(frozen=True, slots=True, init=False)
class AppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time_ms: int  # -1 unless LogAppendTime
    log_start_offset: int
    record_count: int
    size_bytes: int

    # Compiled with the module (the dataclass decorator's __init__ would run as Python there);
    # uncompiled, fast_frozen_init replaces it.
    def __init__(
        self,
        first_offset: int,
        last_offset: int,
        max_timestamp: int,
        offset_of_max_timestamp: int,
        log_append_time_ms: int,
        log_start_offset: int,
        record_count: int,
        size_bytes: int,
    ) -> None:
        object.__setattr__(self, "first_offset", first_offset)
        object.__setattr__(self, "last_offset", last_offset)
        object.__setattr__(self, "max_timestamp", max_timestamp)
        object.__setattr__(self, "offset_of_max_timestamp", offset_of_max_timestamp)
        object.__setattr__(self, "log_append_time_ms", log_append_time_ms)
        object.__setattr__(self, "log_start_offset", log_start_offset)
        object.__setattr__(self, "record_count", record_count)
        object.__setattr__(self, "size_bytes", size_bytes)


fast_frozen_init(AppendInfo)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    segments_recovered: int  # segments re-walked (CRC) at open: those past the recovery point
    bytes_cut: int
    reason: str | None
    segments: int = 0  # segments the log has after opening


@dataclass(frozen=True, slots=True)
class FlushDone:
    """A background flush that finished: every offset below `upto` is on disk, unless the
    log was truncated since it was submitted (then `truncations` no longer matches)."""

    upto: int
    truncations: int
    segments: tuple[LogSegment, ...]


def _now_ms() -> int:
    return int(time.time() * 1000)


class PartitionLog:
    def __init__(
        self, directory: Path, topic: str, partition: int, config: LogConfig, segments: list[LogSegment],
        epochs: list[tuple[int, int]], log_start_offset: int, recovery_point: int, disk: DiskQueue = INLINE,
    ) -> None:  # fmt: skip
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self.segments = segments
        self._bases = [s.base_offset for s in segments]
        self._epochs = epochs
        self.log_start_offset = log_start_offset
        self.disk = disk
        # Invariant: every offset below _recovery_point is in fsynced segments.
        self._recovery_point = recovery_point
        self.unflushed_messages = 0
        self.last_flush_ms = _now_ms()
        # Sealed segments not yet known to be on disk (a background flush may be under way).
        self._dirty: list[LogSegment] = []
        # Finished background flushes, appended by the disk thread, applied on the loop.
        self._flushed: collections.deque[FlushDone] = collections.deque()
        # Bumped by every truncation: a flush submitted before one no longer vouches for
        # the offsets it covered (they may have been written again since).
        self._truncations = 0
        # Set by the disk thread when a background flush failed: the recovery point then
        # only moves with a synchronous flush().
        self._flush_failed = False
        self._closed = False
        # The epoch cache changed since the leader-epoch checkpoint was last queued.
        self._epochs_dirty = False
        # Snapshots of the epoch cache are numbered; _epochs_written is the newest on disk.
        self._epochs_version = self._epochs_written = 0
        # Guards the writes of the leader-epoch checkpoint and partition.metadata, which the
        # disk thread and a closing thread may both attempt (`write_due_files`).
        self._files_lock = threading.Lock()
        # A partition.metadata write is queued for this topic id (None: none due).
        self._metadata_due: UUID | None = None
        # Set by the LogManager: told when the epoch cache needs writing (see _persist_epochs).
        self.on_epochs_dirty: Callable[[PartitionLog], None] | None = None
        # Called when the active segment may have become due for a time roll at a new time:
        # its first write, or a truncation that left an older, written segment active (the
        # LogManager keeps the roll deadlines; see `LogManager.roll_pass`).
        self.on_roll_deadline: Callable[[PartitionLog], None] | None = None
        self.recovery: RecoveryReport | None = None
        # Set by the LogManager: an OSError in a guarded operation takes the dir offline.
        self.dir_failures: LogDirFailures | None = None
        # The topic id in partition.metadata (None: unknown, no file yet).
        self.topic_id: UUID | None = None
        # Idempotent producers' sequences (broker.log.producer_state), kept by every append,
        # leader's or follower's; `_snapshots` are the offsets of the `<offset>.snapshot`
        # files in the directory, rising.
        self.producers = ProducerStateManager(f"{topic}-{partition}")
        self._snapshots: list[int] = []
        self._last_expiry_check_ms = _now_ms()
        # (end offset, segment, file position after the batch) of the latest appended
        # batches, oldest first (Kafka's LogOffsetMetadata of the log end as it moved): the
        # high watermark's file position is found here, not by a read (`position_of`).
        # Cleared by truncations and the cleaner's swap (positions change).
        self._batch_ends: collections.deque[tuple[int, LogSegment, int]] = collections.deque(maxlen=_BATCH_ENDS_KEPT)

    # ------------------------------------------------------------------ opening

    @staticmethod
    def parse_dir_name(name: str) -> tuple[str, int] | None:
        topic, sep, part = name.rpartition("-")
        if not sep or not topic or not part.isdigit():
            return None
        return topic, int(part)

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        *,
        topic_id: UUID | None,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        clean: bool = False,
        disk: DiskQueue = INLINE,
    ) -> PartitionLog:
        parsed = cls.parse_dir_name(directory.name)
        if parsed is None:
            raise ValueError(f"{directory.name} is not <topic>-<partition>")
        topic, partition = parsed
        directory.mkdir(parents=True, exist_ok=True)
        stored = None
        with contextlib.suppress(ValueError):
            stored = read_partition_metadata(directory)
        for leftover in list(directory.glob("*.deleted")) + list(directory.glob("*.tmp")):
            leftover.unlink(missing_ok=True)
        cls._finish_interrupted_swaps(directory, config, disk)
        bases = sorted(int(p.name[:20]) for p in directory.glob("*.log") if p.name[:20].isdigit() and len(p.name) == 24)
        segments: list[LogSegment] = []
        recovered = 0
        # (epoch, start offset) of the batches re-walked: the checkpoint file holds those below
        # the recovery point (its write was queued before the flush that moved the recovery
        # point past them), these give back the rest.
        epoch_starts: list[tuple[int, int]] = []
        # The base of the first segment of the re-walked tail (every segment from it on was
        # re-walked); None when the last segment was not (a clean start).
        recovered_tail: int | None = None

        def note_epoch(f: BatchFrame) -> None:
            if f.leader_epoch >= 0 and (not epoch_starts or f.leader_epoch > epoch_starts[-1][0]):
                epoch_starts.append((f.leader_epoch, f.base_offset))

        cut_total = 0
        reason: str | None = None
        for i, base in enumerate(bases):
            needs_recovery = not clean and (i + 1 >= len(bases) or bases[i + 1] > recovery_point)
            cut = 0
            seg = LogSegment(
                directory, base, config.segment_index_bytes, config.index_interval_bytes, fresh=False, disk=disk
            )
            if not seg.indexes_trusted:
                needs_recovery = True  # a missing or damaged index is rebuilt from the segment
            if needs_recovery:
                if recovered_tail is None:
                    recovered_tail = base
                cut, why = seg.rebuild(on_batch=note_epoch)
                recovered += 1
                if cut:
                    cut_total += cut
                    reason = why
                    log.warning("%s: cut %d bytes at the end of segment %d: %s", directory.name, cut, base, why)
            elif i + 1 < len(bases):
                recovered_tail = None
                seg.open_sealed(bases[i + 1])  # O(1): nothing read until it is used
            else:
                recovered_tail = None
                seg.load_tail_state()
            if segments and seg.base_offset < segments[-1].next_offset:
                log.warning("%s: segment %d overlaps its predecessor; dropping it and the rest", directory.name, base)
                seg.delete()
                for later in bases[i + 1 :]:
                    cls._delete_files(directory, later)
                break
            segments.append(seg)
            if cut and i + 1 < len(bases):
                # Everything after a corrupt point is unreachable: Kafka deletes it.
                for later in bases[i + 1 :]:
                    cls._delete_files(directory, later)
                break
        if not segments:
            segments.append(
                LogSegment(
                    directory, log_start_offset, config.segment_index_bytes, config.index_interval_bytes, fresh=True,
                    disk=disk,
                )
            )  # fmt: skip
        for seg in segments[:-1]:
            seg.seal()
        segments[-1].offset_index.grow(config.segment_index_bytes)
        segments[-1].time_index.grow(config.segment_index_bytes)
        end = segments[-1].next_offset
        epochs = []
        with contextlib.suppress(ValueError, OSError):
            epochs = read_epochs(directory / LEADER_EPOCH_FILE)
        plog = cls(
            directory,
            topic,
            partition,
            config,
            segments,
            epochs,
            max(log_start_offset, segments[0].base_offset),
            min(recovery_point, end),
            disk,
        )
        if recovered:
            if recovered_tail is not None:
                # In the re-walked tail the batches are the truth: the file may still hold
                # entries a truncation removed just before the crash (its write was queued),
                # e.g. a higher epoch at an offset now written in a lower one.
                plog._epochs = [e for e in plog._epochs if e[1] < recovered_tail]
            for epoch, start in epoch_starts:
                plog._assign(epoch, start, persist=False)
            plog._persist_epochs()
        plog._trim_epochs_to(end)
        if clean:
            plog.recovery_point = end
        plog.recovery = RecoveryReport(recovered, cut_total, reason, len(segments))
        plog._snapshots = sorted(o for p in directory.glob("*.snapshot") if (o := snapshot_offset(p.name)) is not None)
        if recovered_tail is not None:
            # The re-walked segments' .txnindex files may have lost entries with an unflushed
            # tail: the producers' state is replayed through all of them, which rewrites them.
            tail = recovered_tail
            plog._delete_snapshots(lambda o: o <= tail)
        if clean and not plog._snapshots and end > plog.log_start_offset:
            # Kafka's upgrade rule: a cleanly closed log without any snapshot was written before
            # producer state was kept (pykraft served no producer ids then), so there is nothing
            # to replay; empty snapshots at the last two segments' bases and at the log end spare
            # a later truncation or crash the scan of the whole log.
            plog.producers.reset(end)
            for offset in sorted({s.base_offset for s in segments[-2:]} | {end}):
                plog._take_producer_snapshot(at=offset)
        else:
            plog._reload_producer_state()
        plog.topic_id = topic_id if topic_id is not None else stored
        if topic_id is not None and stored != topic_id:
            plog.write_partition_metadata()
        return plog

    @staticmethod
    def _finish_interrupted_swaps(directory: Path, config: LogConfig, disk: DiskQueue) -> None:
        """The log cleaner's files left by a crash (see `broker.log.cleaner`): a `.cleaned`
        segment was never complete and goes; a `.swap` segment was complete and fsynced, so the
        swap is finished: the segments it replaces (those whose base offset lies in its offset
        range) go and it is renamed `.log`. Its batches are walked (the one recovery walk,
        `LogSegment.rebuild`) to learn that range and to rebuild its indexes."""
        for leftover in directory.glob(f"*{CLEANED_SUFFIX}"):
            leftover.unlink(missing_ok=True)
        swaps = sorted(directory.glob(f"*.log{SWAP_SUFFIX}"))
        for swap_log in swaps:
            base = int(swap_log.name[:20])
            seg = LogSegment(
                directory, base, config.segment_index_bytes, config.index_interval_bytes, fresh=False, disk=disk,
                suffix=SWAP_SUFFIX,
            )  # fmt: skip
            seg.rebuild()
            end = max(seg.next_offset, base + 1)
            seg.seal()
            seg.flush()
            seg.close()
            for old in directory.glob("*.log"):
                if old.name[:20].isdigit() and len(old.name) == 24 and base <= int(old.name[:20]) < end:
                    PartitionLog._delete_files(directory, int(old.name[:20]))
            for path in seg.file_paths()[1:] + [seg.path]:  # the .log last: it makes the segment
                os.rename(path, path.with_name(path.name[: -len(SWAP_SUFFIX)]))
            log.warning("%s: finished the interrupted swap of cleaned segment %d", directory.name, base)
        for leftover in directory.glob(f"*{SWAP_SUFFIX}"):
            leftover.unlink(missing_ok=True)  # an index whose .log.swap was already renamed
        if swaps:
            fsync_dir(directory)

    def write_partition_metadata(self) -> None:
        """Queued: a crash before it lands leaves no partition.metadata, which the next
        get_or_create of this replica writes again; skipped once the log was deleted."""
        assert self.topic_id is not None
        with self._files_lock:
            self._metadata_due = self.topic_id
        self.disk.submit(f"writing partition.metadata of {self.directory.name}", self._write_due_metadata)

    def _write_due_metadata(self) -> None:
        """Write partition.metadata if a write is due (any thread; once: a second caller, or
        one after the log closed, finds nothing due)."""
        with self._files_lock:
            topic_id, self._metadata_due = self._metadata_due, None
            if topic_id is not None and not self._closed:
                directory = self.directory
                write_unless_deleted(directory, lambda: write_partition_metadata(directory, topic_id))

    def write_due_files(self) -> None:
        """Write now, in the caller's thread, the partition.metadata and leader-epoch
        checkpoint whose writes are queued or deferred (a clean close: the queued jobs then
        find nothing to do, so a backlog of them on the dir's one disk thread does not hold
        the stop up). An OSError is raised as it is (see `sync_to_disk`)."""
        self._write_due_metadata()
        with self._files_lock:
            due = self._epochs_version > self._epochs_written
        if due:
            self._epochs_dirty = True  # written again as of now: the queued, older snapshot is then skipped
        write_epochs = self._epochs_writer()
        if write_epochs is not None:
            write_epochs()

    @staticmethod
    def _delete_files(directory: Path, base: int) -> None:
        for suffix in (".log", ".index", ".timeindex", TXN_INDEX_SUFFIX):
            (directory / f"{base:020d}{suffix}").unlink(missing_ok=True)

    # ------------------------------------------------------------------ views

    @property
    def log_dir(self) -> Path:
        return self.directory.parent

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset

    @property
    def active(self) -> LogSegment:
        return self.segments[-1]

    @property
    def truncations(self) -> int:
        """How many truncations the log has had (a change means offsets were written again)."""
        return self._truncations

    @property
    def closed(self) -> bool:
        return self._closed

    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def latest_epoch(self) -> int | None:
        return self._epochs[-1][0] if self._epochs else None

    def epoch_entries(self) -> list[tuple[int, int]]:
        return list(self._epochs)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return end_offset_for(self._epochs, epoch, self.log_end_offset)

    def epoch_of(self, offset: int) -> int:
        """The leader epoch of the batch holding `offset` (-1 if unknown)."""
        i = bisect.bisect_right([start for _, start in self._epochs], offset) - 1
        return self._epochs[i][0] if i >= 0 else -1

    # ------------------------------------------------------------------ the epoch cache

    def _assign(self, epoch: int, start_offset: int, *, persist: bool = True) -> None:
        if self._epochs and epoch <= self._epochs[-1][0]:
            return
        # Entries that start at or after the new one cannot be right any more.
        while self._epochs and self._epochs[-1][1] >= start_offset:
            self._epochs.pop()
        self._epochs.append((epoch, start_offset))
        if persist:
            self._persist_epochs()

    @storage_op("leader epoch checkpoint")
    def assign_epoch_start_offset(self, epoch: int, start_offset: int) -> None:
        """A new leader's epoch starts at its LEO (Kafka's leader-epoch `assign`)."""
        self._assign(epoch, start_offset)

    def _persist_epochs(self) -> None:
        """The leader-epoch checkpoint is written off the loop (Kafka 3.7 made it asynchronous
        too). With `on_epochs_dirty` (set by the LogManager) the write is deferred: the
        manager queues the dirty files of a dir together about once a second
        (`write_epochs_in_background`), so a burst of 1,000 become-leaders wakes no disk
        thread while the loop is busy with it. Ordering guarantee: a background flush writes
        a dirty file before its fsyncs (same job), so the recovery point never moves past a
        batch whose epoch entry is not on disk. A crash may lose the last entries: the
        re-walked segments past the recovery point give them back, and entries above the log
        end are dropped at open. Without a manager (tools, tests) the write is queued now."""
        self._epochs_dirty = True
        if self.on_epochs_dirty is not None:
            self.on_epochs_dirty(self)
        else:
            self.write_epochs_in_background()

    def _epochs_writer(self) -> Callable[[], None] | None:
        """The write of a dirty leader-epoch checkpoint, its snapshot taken now (None: clean)."""
        if not self._epochs_dirty:
            return None
        self._epochs_dirty = False
        self._epochs_version += 1
        version, snapshot = self._epochs_version, list(self._epochs)
        path, directory = self.directory / LEADER_EPOCH_FILE, self.directory

        def write() -> None:
            # A newer snapshot may have been written already (a synchronous flush does not
            # wait for the queue): the file never goes back to an older one.
            with self._files_lock:
                if self._closed or version <= self._epochs_written:  # closed: deleted, renamed or gone
                    return
                write_unless_deleted(directory, lambda: write_epochs(path, snapshot))
                self._epochs_written = version

        return write

    def write_epochs_in_background(self) -> None:
        write = self._epochs_writer()
        if write is not None:
            self.disk.submit(f"writing the leader-epoch checkpoint of {self.directory.name}", write)

    def _trim_epochs_to(self, end: int) -> None:
        before = len(self._epochs)
        while self._epochs and self._epochs[-1][1] >= end:
            self._epochs.pop()
        if len(self._epochs) != before:
            self._persist_epochs()

    # ------------------------------------------------------------------ appending

    def _should_roll(self, incoming: int, now_ms: int, last_offset: int) -> bool:
        seg = self.active
        if seg.size == 0:
            return False
        return (
            seg.size + incoming > self.config.segment_bytes
            or now_ms - seg.created_ms >= self.config.segment_ms
            or seg.index_full
            or last_offset - seg.base_offset > _I32_MAX
        )

    def roll_deadline_ms(self) -> int | None:
        """When the active segment becomes due for a time roll (ms; None: it is empty and
        never rolls by time)."""
        seg = self.active
        return seg.created_ms + self.config.segment_ms if seg.size > 0 else None

    def time_roll_due(self, now_ms: int) -> bool:
        """Whether the active segment is old enough to roll by `segment.ms` (the one roll
        condition that changes without an append: the others are checked on each append)."""
        deadline = self.roll_deadline_ms()
        return deadline is not None and now_ms >= deadline

    @storage_op("roll")
    def maybe_roll(self, now_ms: int, incoming: int = 0, last_offset: int = -1) -> bool:
        return self._maybe_roll(now_ms, incoming, last_offset)

    def _maybe_roll(self, now_ms: int, incoming: int, last_offset: int) -> bool:
        """`maybe_roll` without its guard: for `_write`, whose callers (the appends) hold it."""
        if not self._should_roll(incoming, now_ms, max(last_offset, self.log_end_offset)):
            return False
        self.roll()
        return True

    @storage_op("roll")
    def roll(self) -> None:
        old = self.active
        old.seal()
        if old not in self._dirty:
            self._dirty.append(old)
        seg = LogSegment(
            self.directory,
            old.next_offset,
            self.config.segment_index_bytes,
            self.config.index_interval_bytes,
            fresh=True,
            disk=self.disk,
        )
        self.segments.append(seg)
        self._bases.append(seg.base_offset)
        self._take_producer_snapshot()  # Kafka's: the new segment's base, for recovery to start at
        self.flush_in_background(seg.base_offset)

    def _write(
        self, data: bytes | bytearray | memoryview, frames: list[BatchFrame], now_ms: int,
        batches: list[ProducerBatch] | None = None,
    ) -> None:  # fmt: skip
        """`batches`: `_producer_batches(data, frames)` when the caller has them already. Called
        only by the appends, under their storage guard."""
        last = frames[-1].last_offset
        self._maybe_roll(now_ms, len(data), last)
        if batches is None:
            batches = _producer_batches(data, frames)  # before the write: a marker that does not parse writes nothing
        seg = self.active
        start = seg.size
        seg.append(data, frames)
        if start == 0 and self.on_roll_deadline is not None:
            self.on_roll_deadline(self)  # a written segment: it rolls by time from now on
        ends = self._batch_ends
        count = 0
        for f in frames:
            ends.append((f.base_offset + f.last_offset_delta + 1, seg, start + f.position + f.size))
            count += f.record_count
        self._apply_producer_batches(seg, batches, last + 1)
        epochs = self._epochs
        for f in frames:
            if f.leader_epoch >= 0 and (not epochs or f.leader_epoch > epochs[-1][0]):
                self._assign(f.leader_epoch, f.base_offset)
        self.unflushed_messages += count
        if self.unflushed_messages >= self.config.flush_messages:
            self.flush()

    def append_as_leader(
        self, records: bytes | bytearray | memoryview, leader_epoch: int, now_ms: int, *, coordinator: bool = False,
        verification: VerificationGuard | None = VERIFICATION_OFF,
    ) -> AppendInfo:  # fmt: skip
        """A client's batches: validated, given offsets, checked against their producers'
        sequences and epochs (LogError: OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH),
        and written, unless they repeat one of their producer's last 5 batches: then nothing is
        written and the answer holds the original batch's offsets (Kafka's duplicate rule).
        `coordinator`: a coordinator's own batches (`check_coordinator_append`: the guard and the
        epoch only; every record has a key).
        `verification`: the KIP-890 guard of this request's transactional batches
        (`ProducerStateManager.start_verification`; VERIFICATION_OFF: not verified)."""
        # storage_op's guard in place (per batch: a decorated call costs more than the work)
        failures = self.dir_failures
        refuse_offline(failures, self)
        try:
            return self._append_as_leader(records, leader_epoch, now_ms, coordinator, verification)
        except OSError as exc:
            raise storage_failure(failures, self, exc, "append") from exc

    def _append_as_leader(
        self, records: bytes | bytearray | memoryview, leader_epoch: int, now_ms: int, coordinator: bool,
        verification: VerificationGuard | None,
    ) -> AppendInfo:  # fmt: skip
        a = assign(records, self.config, next_offset=self.log_end_offset, leader_epoch=leader_epoch, now_ms=now_ms,
                   keyed=coordinator)  # fmt: skip
        batches = _producer_batches(a.data, a.frames)
        if batches and coordinator:
            self.producers.check_coordinator_append(batches, verification)
        elif batches:
            self._maybe_expire_producers(now_ms)
            duplicate = self.producers.check_client_append(batches, verification)
            if duplicate is not None:
                # Kafka answers the original batch's timestamp as its append time; pykraft does
                # so only where the topic uses LogAppendTime (a CreateTime ack keeps -1).
                append_time = duplicate.timestamp if a.log_append_time_ms >= 0 else -1
                return AppendInfo(
                    duplicate.first_offset, duplicate.last_offset, duplicate.timestamp, duplicate.last_offset,
                    append_time, self.log_start_offset, 0, 0,
                )  # fmt: skip
        self._write(a.data, a.frames, now_ms, batches)
        return AppendInfo(
            a.first_offset, a.last_offset, a.max_timestamp, a.offset_of_max_timestamp, a.log_append_time_ms,
            self.log_start_offset, a.record_count, len(a.data),
        )  # fmt: skip

    def append_marker(
        self, producer_id: int, producer_epoch: int, marker: EndTxnMarker, leader_epoch: int, now_ms: int
    ) -> AppendInfo:
        """A transaction coordinator's COMMIT or ABORT marker (WriteTxnMarkers): checked against
        the producer's state (LogError INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED),
        then written as a control batch at the log end."""
        # storage_op's guard in place (per batch: a decorated call costs more than the work)
        failures = self.dir_failures
        refuse_offline(failures, self)
        try:
            return self._append_marker(producer_id, producer_epoch, marker, leader_epoch, now_ms)
        except OSError as exc:
            raise storage_failure(failures, self, exc, "append") from exc

    def _append_marker(
        self, producer_id: int, producer_epoch: int, marker: EndTxnMarker, leader_epoch: int, now_ms: int
    ) -> AppendInfo:
        self.producers.check_marker(producer_id, producer_epoch, marker, self.log_end_offset)
        batch = encode_marker_batch(producer_id, producer_epoch, marker, now_ms)
        a = assign(batch, self.config, next_offset=self.log_end_offset, leader_epoch=leader_epoch, now_ms=now_ms,
                   control=True)  # fmt: skip
        self._write(a.data, a.frames, now_ms)
        return AppendInfo(
            a.first_offset, a.last_offset, a.max_timestamp, a.offset_of_max_timestamp, a.log_append_time_ms,
            self.log_start_offset, a.record_count, len(a.data),
        )  # fmt: skip

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> AppendInfo:
        """Batches from the leader, offsets and epochs assigned: CRC-checked and appended as
        they are. Batches entirely below the LEO (a duplicate answer) are skipped; the first
        one kept must not start below the LEO and each must start above the previous one's
        last offset (else CORRUPT_MESSAGE). Gaps are allowed, as in Kafka: a compacted
        leader's log has them (the cleaner removes records, never renumbers), and a topic
        whose policy went from compact to delete keeps them."""
        # storage_op's guard in place (per batch: a decorated call costs more than the work)
        failures = self.dir_failures
        refuse_offline(failures, self)
        try:
            return self._append_as_follower(records)
        except OSError as exc:
            raise storage_failure(failures, self, exc, "append") from exc

    def _append_as_follower(self, records: bytes | bytearray | memoryview) -> AppendInfo:
        scan = scan_frames(records)
        if scan.error is not None:
            raise LogError(ErrorCode.CORRUPT_MESSAGE, f"corrupt batch from the leader: {scan.error}")
        frames = scan.frames
        end = self.log_end_offset
        skip = 0
        while skip < len(frames) and frames[skip].last_offset < end:
            skip += 1
        frames = frames[skip:]
        if not frames:
            return AppendInfo(end, end - 1, -1, -1, -1, self.log_start_offset, 0, 0)
        if frames[0].base_offset < end:
            raise LogError(
                ErrorCode.CORRUPT_MESSAGE, f"leader's batch starts at {frames[0].base_offset}, the log ends at {end}"
            )
        prev = frames[0].base_offset
        for f in frames:
            if f.base_offset < prev:
                raise LogError(ErrorCode.CORRUPT_MESSAGE, f"the leader's batch at {f.base_offset} overlaps {prev - 1}")
            prev = f.last_offset + 1
        start = frames[0].position
        stop = frames[-1].position + frames[-1].size
        view = memoryview(records)[start:stop]
        rebased = frames if start == 0 else [  # positions relative to `view` (usually they are already)
            type(f)(f.position - start, f.size, f.base_offset, f.leader_epoch, f.attributes, f.last_offset_delta,
                    f.base_timestamp, f.max_timestamp, f.producer_id, f.record_count)
            for f in frames
        ]  # fmt: skip
        self._write(view, rebased, _now_ms())
        # The first frame of the largest max timestamp (as max(key=) picks) and the record
        # count, in one loop (the builtins' keyword call and generator cost ~3,000 instructions).
        max_f = frames[0]
        records_count = 0
        for f in frames:
            if f.max_timestamp > max_f.max_timestamp:
                max_f = f
            records_count += f.record_count
        return AppendInfo(
            frames[0].base_offset, frames[-1].last_offset, max_f.max_timestamp, max_f.last_offset, -1,
            self.log_start_offset, records_count, stop - start,
        )  # fmt: skip

    # ------------------------------------------------------------------ producer state

    def _take_producer_snapshot(self, *, fsync: bool = True, at: int | None = None) -> None:
        """`<log end>.snapshot` (or `<at>.snapshot`): the producers' state as of that offset.
        Written now (small; Kafka writes it in the roll too), fsynced on the disk queue unless
        not `fsync`. Nothing to do when that offset has one already (no batch was appended since)."""
        offset = self.log_end_offset if at is None else at
        if offset in self._snapshots:
            return
        path = self.directory / snapshot_name(offset)
        with open(path, "wb") as fh:
            fh.write(self.producers.snapshot_bytes())
        bisect.insort(self._snapshots, offset)
        if fsync:
            self.disk.submit(f"fsync of {self.directory.name}/{path.name}", lambda: _fsync_path(path))

    def _delete_snapshots(self, keep: Callable[[int], bool]) -> None:
        gone = [o for o in self._snapshots if not keep(o)]
        if gone:
            self._snapshots = [o for o in self._snapshots if keep(o)]
            for o in gone:
                (self.directory / snapshot_name(o)).unlink(missing_ok=True)

    def _reload_producer_state(self) -> None:
        """Rebuild the producers' state from the newest readable snapshot at or below the log
        end and the batches after it (from the first segment without one), as Kafka's
        `truncateAndReload` does after a recovery or a truncation. Snapshots above the log end
        (a truncation or a torn tail cut them off) or below the first segment go."""
        end, first = self.log_end_offset, self.segments[0].base_offset
        self._delete_snapshots(lambda o: first <= o <= end)
        now = _now_ms()
        for offset in reversed(list(self._snapshots)):
            path = self.directory / snapshot_name(offset)
            try:
                entries = decode_snapshot(path.read_bytes())
            except (FileNotFoundError, SnapshotError) as exc:
                log.warning("%s: ignoring producer snapshot %s: %s", self.directory.name, path.name, exc)
                self._snapshots.remove(offset)
                (self.directory / snapshot_name(offset)).unlink(missing_ok=True)
                continue
            self.producers.load(entries, offset, now)
            break
        else:
            self.producers.reset(first)
        self._replay_producers(self.producers.map_end_offset)
        self._last_expiry_check_ms = now

    def _replay_producers(self, start: int) -> None:
        """Apply the producer fields of every batch from offset `start` to the log end (the
        whole batch of a control batch: its marker)."""
        end = self.log_end_offset
        for seg in self.segments[self._segment_for(start) :] if start < end else []:
            seg.txn_index.truncate_to(start)  # the replay writes the entries from `start` again
            position = seg.offset_index.lookup(start) if seg.base_offset <= start else 0
            while position < seg.size:
                frames = seg.frames_from(position, _REPLAY_CHUNK)
                if not frames:
                    break
                batches = [
                    ProducerBatch.from_header(
                        seg.read(f.position, f.size if f.attributes & ATTR_CONTROL else BATCH_HEADER_SIZE), 0,
                        f.base_offset, f.last_offset_delta, f.max_timestamp,
                    )
                    for f in frames
                    if f.producer_id != NO_PRODUCER_ID and f.base_offset >= start
                ]  # fmt: skip
                self._apply_producer_batches(seg, batches, frames[-1].last_offset + 1)
                position = frames[-1].position + frames[-1].size
        self.producers.map_end_offset = end

    def _apply_producer_batches(self, seg: LogSegment, batches: list[ProducerBatch], end_offset: int) -> None:
        """The one path of every batch into the producers' state (appends of leaders and
        followers, replays): an aborted transaction's entry goes to `seg`, the segment that
        holds its marker."""
        for txn, lso in self.producers.on_append(batches, end_offset):
            if txn.aborted:
                seg.txn_index.append(_aborted_entry(txn, lso))

    # ------------------------------------------------------------------ transactions

    def last_stable_offset(self, high_watermark: int) -> int:
        """min(first unstable offset, `high_watermark`), never below the log start (Kafka's
        LSO: records below it belong to no open transaction and to no transaction whose marker
        is not yet below the HW)."""
        producers = self.producers
        if not producers.ongoing and not producers.unreplicated:  # no transaction: the fetch path's usual case
            return high_watermark
        first = producers.first_unstable_offset(high_watermark)
        if first is None or first >= high_watermark:
            return high_watermark
        return max(first, self.log_start_offset)

    def aborted_transactions(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Kafka's collectAbortedTxns: the aborted transactions overlapping
        [fetch_offset, upper_bound_offset), from the segment holding `fetch_offset` on, until
        an entry's last stable offset reaches the upper bound."""
        found: list[AbortedTxn] = []
        for seg in self.segments[self._segment_for(fetch_offset) :]:
            entries, complete = seg.txn_index.collect(fetch_offset, upper_bound_offset)
            found += entries
            if complete or seg.base_offset >= upper_bound_offset:
                break
        return found

    def _maybe_expire_producers(self, now_ms: int) -> None:
        """producer.id.expiration.ms, checked every producer.id.expiration.check.interval.ms
        (lazily, before a client's producer batch is checked: only then does it matter)."""
        if now_ms - self._last_expiry_check_ms >= PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS:
            self._last_expiry_check_ms = now_ms
            self.producers.remove_expired(now_ms)

    # ------------------------------------------------------------------ reading

    def _segment_for(self, offset: int) -> int:
        return max(bisect.bisect_right(self._bases, offset) - 1, 0)

    def position_of(self, offset: int) -> tuple[LogSegment, int]:
        """(segment, file position) where offset `offset` (a batch boundary at or below the
        log end, such as the high watermark) starts: the position after the batch ending at
        `offset`. From the appended batches' ends when it is one of the latest (the usual
        case: the HW trails the log end by the batches in flight), else by `locate`. The HW
        only rises between truncations, so entries below the asked offset are dropped."""
        ends = self._batch_ends
        while ends and ends[0][0] < offset:
            ends.popleft()
        if ends and ends[0][0] == offset:
            return ends[0][1], ends[0][2]
        seg = self.segments[self._segment_for(offset)]
        found = seg.locate(offset)
        return seg, (seg.size if found is None else found[0])

    def _recent_batch_at(self, offset: int) -> tuple[LogSegment, int, int] | None:
        """(segment, file position, size) of the batch starting right after the one that ends
        at `offset`, when both are among the latest appended (`_batch_ends`): where a caught-up
        follower or consumer fetches next, found without reading the index or the file. None
        otherwise (the caller locates the batch). Looks at the newest `_RECENT_LOOKUP` ends only."""
        ends = self._batch_ends
        n = len(ends)
        for k in range(n - 1, max(n - 1 - _RECENT_LOOKUP, 0), -1):
            entry_end = ends[k - 1][0]
            if entry_end == offset:
                _, seg, start = ends[k - 1]
                _, next_seg, stop = ends[k]
                # The next batch may open the next segment (a roll): then `start` is this one's end.
                return (seg, start, stop - start) if next_seg is seg and start < stop else None
            if entry_end < offset:
                return None  # `offset` is inside a batch: the caller locates it
        return None

    def upper_bound_offset(self, records: FileRange, max_offset: int) -> int:
        """An offset above every record of `records` (a range `read_range` returned), at most
        `max_offset`: the first offset-index entry at or after the range's end, else its
        segment's end (Kafka's `fetchUpperBoundOffset`; read_committed's aborted-transaction
        lookup takes it, and a bound above the range only adds entries a client ignores).
        Found without reading the range."""
        for seg in reversed(self.segments):
            if seg.file is records.file:
                bound = seg.offset_index.offset_at_or_after(records.position + records.length)
                return min(max_offset, seg.next_offset if bound is None else bound)
        return max_offset  # the segment went meanwhile (retention): the widest bound

    def read_range(self, offset: int, max_bytes: int, *, max_offset: int, min_one_batch: bool) -> FileRange | None:
        """What a fetch at `offset` sends, as Kafka's `LocalLog.read`: the bytes from the batch
        holding `offset` up to `max_offset`'s position (the HW's for a consumer, the log end's
        for a follower) and at most `max_bytes` long, from one segment; at least the first
        batch whole when `min_one_batch`. The range may end inside a batch (`max_bytes`): the
        client drops a partial trailing batch, as it does with Kafka. None when there is
        nothing to send. Only the batch headers between the index entry and `offset` are read."""
        # storage_op's guard in place (per batch: a decorated call costs more than the work)
        failures = self.dir_failures
        refuse_offline(failures, self)
        try:
            return self._read_range(offset, max_bytes, max_offset, min_one_batch)
        except OSError as exc:
            raise storage_failure(failures, self, exc, "read") from exc

    def _read_range(self, offset: int, max_bytes: int, max_offset: int, min_one_batch: bool) -> FileRange | None:
        end = self.log_end_offset
        if offset < self.log_start_offset or offset > end:
            raise LogError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {offset} is outside {self.log_start_offset}..{end} of {self.topic}-{self.partition}",
            )
        if offset >= max_offset or offset == end:
            return None
        known = self._recent_batch_at(offset)
        if known is not None:
            seg, start, first_size = known
        else:
            segments = self.segments
            i = self._segment_for(offset)
            while True:
                if i >= len(segments):
                    return None
                seg = segments[i]
                found = seg.locate(offset) if offset < seg.next_offset else None
                if found is not None:
                    break
                i += 1
            start, first_size = found
        if max_offset >= end:
            limit = seg.size
        else:
            bound_seg, bound = self.position_of(max_offset)
            if bound_seg is not seg:
                limit = seg.size if bound_seg.base_offset > seg.base_offset else start
            else:
                limit = bound
        length = min(limit - start, max(max_bytes, first_size) if min_one_batch else max_bytes)
        return seg.file_range(start, length) if length > 0 else None

    def read(self, offset: int, max_bytes: int, *, max_offset: int, min_one_batch: bool) -> bytes | memoryview:
        """`read_range`'s bytes cut to whole batches (for in-process readers: the group and
        transaction coordinators' loads, tools, tests)."""
        found = self.read_range(offset, max_bytes, max_offset=max_offset, min_one_batch=min_one_batch)
        if found is None:
            return b""
        data = found.pread()
        whole = complete_batches_size(data)
        return memoryview(data)[:whole] if whole < len(data) else data

    @storage_op("read")
    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int, int] | None:
        """(offset, timestamp, leader epoch): EARLIEST/LATEST/MAX_TIMESTAMP, or the first
        record at or above the log start with a timestamp >= `timestamp` (record-exact, in
        compressed batches too: the batch found is decompressed, as Kafka does)."""
        if timestamp == EARLIEST_TIMESTAMP:
            return self.log_start_offset, -1, self.epoch_of(self.log_start_offset)
        if timestamp == LATEST_TIMESTAMP:
            return self.log_end_offset, -1, self.latest_epoch() or -1
        if timestamp == MAX_TIMESTAMP:
            best = max(self.segments, key=lambda s: s.max_timestamp)
            if best.max_timestamp < 0:
                return None
            return best.offset_of_max_timestamp, best.max_timestamp, self.epoch_of(best.offset_of_max_timestamp)
        for seg in self.segments:
            if seg.max_timestamp < timestamp:
                continue
            start = max(seg.time_index.lookup(timestamp), self.log_start_offset)
            position = seg.offset_index.lookup(start)
            while position < seg.size:
                frames = seg.frames_from(position, _READ_CHUNK_MIN)
                if not frames:
                    break
                for f in frames:
                    if f.last_offset < self.log_start_offset or f.max_timestamp < timestamp:
                        continue
                    return self._record_at_or_after(seg, f, timestamp)
                position = frames[-1].position + frames[-1].size
        return None

    def _record_at_or_after(self, seg: LogSegment, f: BatchFrame, timestamp: int) -> tuple[int, int, int]:
        """In batch `f`, whose maxTimestamp is >= `timestamp` and which ends at or above the log
        start: the first record at or above the log start whose timestamp is >= `timestamp`."""
        try:
            for offset, ts, _record in batch_records(seg.read(f.position, f.size)):
                if ts >= timestamp and offset >= self.log_start_offset:
                    return offset, ts, f.leader_epoch
        except (RecordsError, DecompressionError) as exc:
            # The batch passed its CRC when it was appended: this is damage on disk. The
            # batch's own first offset is an answer that skips none of its records.
            log.warning("%s-%d: the records of the batch at offset %d do not parse (%s)",
                        self.topic, self.partition, f.base_offset, exc)  # fmt: skip
        return max(f.base_offset, self.log_start_offset), f.max_timestamp, f.leader_epoch

    # ------------------------------------------------------------------ truncation and deletion

    @storage_op("truncate")
    def truncate_to(self, offset: int) -> None:
        """Drop every offset >= `offset` (whole batches: the LEO may end below `offset`)."""
        if offset >= self.log_end_offset:
            # Nothing to drop but an epoch that began here without records (a former leader's).
            self._trim_epochs_to(offset)
            return
        if offset <= self.segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return
        while len(self.segments) > 1 and self.segments[-1].base_offset >= offset:
            seg = self.segments.pop()
            self._bases.pop()
            if seg in self._dirty:
                self._dirty.remove(seg)
            seg.delete()
        self._truncations += 1
        self._batch_ends.clear()
        self.active.truncate_to(offset)
        self.active.offset_index.grow(self.config.segment_index_bytes)
        self.active.time_index.grow(self.config.segment_index_bytes)
        self._trim_epochs_to(self.log_end_offset)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.log_start_offset = min(self.log_start_offset, self.log_end_offset)
        self._reload_producer_state()
        if self.on_roll_deadline is not None:
            self.on_roll_deadline(self)  # an older segment may be active again

    @storage_op("truncate")
    def truncate_fully_and_start_at(self, offset: int) -> None:
        for seg in self.segments:
            seg.delete()
        self._dirty.clear()
        self._truncations += 1
        self._batch_ends.clear()
        seg = LogSegment(
            self.directory, offset, self.config.segment_index_bytes, self.config.index_interval_bytes, fresh=True,
            disk=self.disk,
        )  # fmt: skip
        self.segments = [seg]
        self._bases = [offset]
        self._epochs = []
        self._persist_epochs()
        self.log_start_offset = offset
        self.recovery_point = offset
        self._delete_snapshots(lambda _offset: False)
        self.producers.reset(offset)

    @storage_op("delete records")
    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: the log start moves to `offset` (<= LEO); whole segments below it go."""
        if offset > self.log_end_offset:
            raise LogError(ErrorCode.OFFSET_OUT_OF_RANGE, f"offset {offset} is above the log end {self.log_end_offset}")
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            self._drop_segments_below(offset)
        return self.log_start_offset

    def _drop_segments_below(self, offset: int) -> int:
        dropped = 0
        while len(self.segments) > 1 and self.segments[0].next_offset <= offset:
            seg = self.segments.pop(0)
            self._bases.pop(0)
            if seg in self._dirty:
                self._dirty.remove(seg)
            seg.delete()
            dropped += 1
        if dropped:
            first = self.segments[0].base_offset
            self._delete_snapshots(lambda o: o >= first)
        return dropped

    @storage_op("retention")
    def delete_retained_segments(self, now_ms: int, high_watermark: int) -> int:
        """Retention, Kafka's rules: delete the oldest segments, one after the other while each
        - lies wholly below the high watermark (its next segment's base offset, or the LEO
          for the active segment, is <= `high_watermark`), and
        - lies wholly below the log start offset (after DeleteRecords: always applies), or,
          only when cleanup.policy holds "delete", is older than retention.ms by its largest
          timestamp (`LogSegment.largest_timestamp_ms`, ms), or the log would still hold at
          least retention.bytes without it.
        The active segment goes too once it qualifies and is not empty: the log rolls first,
        so the new empty active segment keeps the log end offset, which becomes the log
        start. Returns the number of segments deleted."""
        cfg = self.config
        by_time = cfg.deletes and cfg.retention_ms >= 0
        by_size = cfg.deletes and cfg.retention_bytes >= 0
        excess = self.size_bytes() - cfg.retention_bytes  # bytes over retention.bytes (by_size only)
        deletable = 0
        for i, seg in enumerate(self.segments):
            last = i + 1 == len(self.segments)
            upper = self.log_end_offset if last else self.segments[i + 1].base_offset
            if (last and seg.size == 0) or upper > high_watermark:
                break
            below_start = not last and upper <= self.log_start_offset
            too_old = by_time and now_ms - seg.largest_timestamp_ms() > cfg.retention_ms
            too_big = by_size and excess - seg.size >= 0
            if not (below_start or too_old or too_big):
                break
            excess -= seg.size
            deletable += 1
        if not deletable:
            return 0
        if deletable == len(self.segments):
            # Never delete the last segment: roll, and the new one starts at the LEO.
            self.roll()
        new_start = self.segments[deletable].base_offset
        self.log_start_offset = max(self.log_start_offset, new_start)
        return self._drop_segments_below(new_start)

    # ------------------------------------------------------------------ compaction

    @storage_op("clean")
    def replace_segments(self, groups: list[tuple[tuple[LogSegment, ...], int]]) -> None:
        """The log cleaner's swap (on the loop, in one step: readers see the old segments or
        the new ones): each group of consecutive sealed segments is replaced by the fsynced
        segment `<base>.log.cleaned`, which holds a subset of their batches at the same
        offsets. The `.cleaned` files are renamed `.swap` and the directory fsynced (one
        fsync on the loop: from then on a crash finishes the swap, see
        `_finish_interrupted_swaps`); then the old files are renamed `.deleted`, the new
        indexes and last the new `.log` renamed into place."""
        exts = (".index", ".timeindex", ".log")
        renames = [self.directory / f"{base:020d}{ext}" for _sources, base in groups for ext in exts]
        for path in renames:
            os.rename(path.with_name(path.name + CLEANED_SUFFIX), path.with_name(path.name + SWAP_SUFFIX))
        fsync_dir(self.directory)
        self._batch_ends.clear()
        for sources, base in groups:
            i = self.segments.index(sources[0])
            end = self.segments[i + len(sources)].base_offset
            aborted = [e for seg in sources for e in seg.txn_index.entries]  # offsets never move
            for seg in sources:
                if seg in self._dirty:
                    self._dirty.remove(seg)
                seg.delete()
            for ext in exts:
                path = self.directory / f"{base:020d}{ext}"
                os.rename(path.with_name(path.name + SWAP_SUFFIX), path)
            new = LogSegment(
                self.directory, base, self.config.segment_index_bytes, self.config.index_interval_bytes, fresh=False,
                disk=self.disk,
            )  # fmt: skip
            new.open_sealed(end)
            for entry in aborted:
                new.txn_index.append(entry)
            self.segments[i : i + len(sources)] = [new]
        self._bases = [s.base_offset for s in self.segments]
        directory = self.directory
        self.disk.submit(f"renames of cleaned segments of {directory.name}",
                         lambda: write_unless_deleted(directory, lambda: fsync_dir(directory)))  # fmt: skip

    # ------------------------------------------------------------------ durability

    @property
    def recovery_point(self) -> int:
        """Every offset below it is on disk (fsynced). Finished background flushes are
        applied here, on the caller's (the loop's) thread."""
        while self._flushed:
            done = self._flushed.popleft()
            for seg in done.segments:
                if seg in self._dirty:
                    self._dirty.remove(seg)
            if done.truncations == self._truncations and not self._flush_failed:
                self._recovery_point = max(self._recovery_point, min(done.upto, self.log_end_offset))
        return self._recovery_point

    @recovery_point.setter
    def recovery_point(self, value: int) -> None:
        self._recovery_point = value

    @property
    def dirty(self) -> bool:
        """Something of this log is not known to be on disk: offsets past the recovery point,
        a rolled segment whose flush has not finished, or a leader-epoch checkpoint not yet
        written. A log that is not dirty needs no flush at a clean close. (On the loop: it
        applies the finished background flushes.)"""
        return self.recovery_point < self.log_end_offset or bool(self._dirty) or self._epochs_dirty

    @storage_op("flush")
    def flush(self) -> None:
        """fsync everything now, in the caller's thread (`flush.messages`)."""
        self.sync_to_disk()

    def sync_to_disk(self) -> None:
        """`flush` without the log-dir guard: an OSError is raised as it is, for a caller that
        reports it where the dir failure's listeners may run (`LogManager.close`, whose
        closing threads flush many logs at once). The directory is fsynced only when a
        segment file may be new since the last flush (its base at or past the recovery
        point: Kafka's rule), so a log that only grew its active segment costs one fsync per
        file written."""
        write_epochs = self._epochs_writer()
        if write_epochs is not None:
            write_epochs()
        flushed = [*self._dirty, self.active]
        new_files = any(seg.base_offset >= self._recovery_point for seg in flushed)
        for seg in flushed:
            seg.flush()
        self._dirty.clear()
        if new_files:
            fsync_dir(self.directory)
        self._flush_failed = False
        self.recovery_point = self.log_end_offset
        self.unflushed_messages = 0
        self.last_flush_ms = _now_ms()

    @storage_op("flush")
    def flush_in_background(self, upto: int) -> None:
        """Queue an fsync of every segment holding offsets below `upto` that is not known to
        be on disk (and of the directory: new segment files, renames); the recovery point
        moves to `upto` once it is done. `upto` is at most the log end: only offsets already
        written are vouched for."""
        upto = min(upto, self.log_end_offset)
        segments = tuple(self._dirty) + ((self.active,) if upto > self.active.base_offset else ())
        paths = [p for seg in segments for p in seg.durable_paths()]
        directory, truncations = self.directory, self._truncations
        write_epochs_first = self._epochs_writer()

        def flush() -> None:
            try:
                if write_epochs_first is not None:
                    write_epochs_first()
                for path in paths:
                    _fsync_path(path)
                write_unless_deleted(directory, lambda: fsync_dir(directory))
            except BaseException:
                self._flush_failed = True
                raise
            self._flushed.append(FlushDone(upto, truncations, segments))

        self.unflushed_messages = 0
        self.last_flush_ms = _now_ms()
        self.disk.submit(f"flush of {self.directory.name} up to {upto}", flush)

    def update_config(self, config: LogConfig) -> None:
        self.config = config

    def close(self, *, snapshot: bool = False) -> None:
        """With `snapshot` (a clean shutdown) the producers' state is written as of the log
        end first, so the next start replays nothing. It is not fsynced (one fsync per
        partition would slow a shutdown of thousands): a torn snapshot fails its CRC and a
        lost one only means a longer replay from an older one."""
        if snapshot and not self._closed:
            try:
                self._take_producer_snapshot(fsync=False)
            except OSError as exc:  # the next start replays from an older snapshot instead
                log.warning("%s: could not write the producer snapshot: %s", self.directory.name, exc)
        self._closed = True
        for seg in self.segments:
            seg.close()

    def delete(self) -> None:
        """Close and remove the whole directory."""
        self.close()
        shutil.rmtree(self.directory, ignore_errors=True)


def _aborted_entry(txn: CompletedTxn, last_stable_offset: int) -> AbortedTxn:
    return AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, last_stable_offset)


def _producer_batches(data: bytes | bytearray | memoryview, frames: list[BatchFrame]) -> list[ProducerBatch]:
    """The producer fields of the batches of `data` that carry a producer id."""
    return [
        ProducerBatch.from_header(data, f.position, f.base_offset, f.last_offset_delta, f.max_timestamp)
        for f in frames
        if f.producer_id != NO_PRODUCER_ID
    ]


def write_unless_deleted(directory: Path, write: Callable[[], object]) -> None:
    """A queued write into a partition's directory: if the partition was deleted meanwhile
    (its directory renamed `-delete` or removed), there is nothing to write into."""
    try:
        write()
    except FileNotFoundError:
        if directory.exists():
            raise


def _fsync_path(path: Path) -> None:
    """fsync a file through a descriptor of its own (the segment's may be closed meanwhile:
    fsync covers the file, whichever descriptor asks). A file gone was deleted: nothing to do."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
