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
  log uses too), its indexes rebuilt, and the log cut at the first torn or corrupt batch.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import shutil
import time
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
from broker.log.dir_failure import LogDirFailures, storage_op
from broker.log.epoch_cache import end_offset_for
from broker.log.errors import LogError
from broker.log.records import RecordsError, batch_records
from broker.log.segment import LogSegment
from broker.log.validation import assign
from quorum.kafka_errors import ErrorCode
from quorum.storage.batch_layout import BATCH_HEADER_SIZE, LOG_OVERHEAD
from quorum.storage.record_batch import BatchFrame, scan_frames

log = logging.getLogger(__name__)

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
_I32_MAX = 2**31 - 1
_READ_CHUNK_MIN = 64 * 1024


@dataclass(frozen=True, slots=True)
class AppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time_ms: int  # -1 unless LogAppendTime
    log_start_offset: int
    record_count: int
    size_bytes: int


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    segments_recovered: int
    bytes_cut: int
    reason: str | None


def _now_ms() -> int:
    return int(time.time() * 1000)


class PartitionLog:
    def __init__(
        self, directory: Path, topic: str, partition: int, config: LogConfig, segments: list[LogSegment],
        epochs: list[tuple[int, int]], log_start_offset: int, recovery_point: int,
    ) -> None:  # fmt: skip
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self.segments = segments
        self._bases = [s.base_offset for s in segments]
        self._epochs = epochs
        self.log_start_offset = log_start_offset
        self.recovery_point = recovery_point
        self.unflushed_messages = 0
        self.last_flush_ms = _now_ms()
        self._dirty: list[LogSegment] = []
        self.recovery: RecoveryReport | None = None
        # Set by the LogManager: an OSError in a guarded operation takes the dir offline.
        self.dir_failures: LogDirFailures | None = None

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
    ) -> PartitionLog:
        parsed = cls.parse_dir_name(directory.name)
        if parsed is None:
            raise ValueError(f"{directory.name} is not <topic>-<partition>")
        topic, partition = parsed
        directory.mkdir(parents=True, exist_ok=True)
        stored = None
        with contextlib.suppress(ValueError):
            stored = read_partition_metadata(directory)
        if topic_id is not None and stored != topic_id:
            write_partition_metadata(directory, topic_id)
        for leftover in list(directory.glob("*.deleted")) + list(directory.glob("*.tmp")):
            leftover.unlink(missing_ok=True)
        bases = sorted(int(p.name[:20]) for p in directory.glob("*.log") if p.name[:20].isdigit() and len(p.name) == 24)
        segments: list[LogSegment] = []
        recovered = 0
        cut_total = 0
        reason: str | None = None
        for i, base in enumerate(bases):
            needs_recovery = not clean and (i + 1 >= len(bases) or bases[i + 1] > recovery_point)
            cut = 0
            seg = LogSegment(directory, base, config.segment_index_bytes, config.index_interval_bytes, fresh=False)
            if not seg.indexes_trusted:
                needs_recovery = True  # a missing or damaged index is rebuilt from the segment
            if needs_recovery:
                cut, why = seg.rebuild()
                recovered += 1
                if cut:
                    cut_total += cut
                    reason = why
                    log.warning("%s: cut %d bytes at the end of segment %d: %s", directory.name, cut, base, why)
            else:
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
                    directory, log_start_offset, config.segment_index_bytes, config.index_interval_bytes, fresh=True
                )
            )
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
        )
        if recovered:
            plog._rebuild_epochs_from(segments)
        plog._trim_epochs_to(end)
        if clean:
            plog.recovery_point = end
        plog.recovery = RecoveryReport(recovered, cut_total, reason)
        return plog

    @staticmethod
    def _delete_files(directory: Path, base: int) -> None:
        for suffix in (".log", ".index", ".timeindex"):
            (directory / f"{base:020d}{suffix}").unlink(missing_ok=True)

    def _rebuild_epochs_from(self, segments: list[LogSegment]) -> None:
        """After recovery, the epoch cache learns every batch's epoch again (Kafka does the
        same while recovering segments); stale entries above the LEO are dropped later."""
        for seg in segments:
            position = 0
            while position < seg.size:
                frames = seg.frames_from(position, _READ_CHUNK_MIN)
                if not frames:
                    break
                for f in frames:
                    if f.leader_epoch >= 0:
                        self._assign(f.leader_epoch, f.base_offset, persist=False)
                    position = f.position + f.size
        self._persist_epochs()

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
        write_epochs(self.directory / LEADER_EPOCH_FILE, self._epochs)

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

    @storage_op("roll")
    def maybe_roll(self, now_ms: int, incoming: int = 0, last_offset: int = -1) -> bool:
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
        )
        self.segments.append(seg)
        self._bases.append(seg.base_offset)

    def _write(self, data: bytes | bytearray | memoryview, frames: list, now_ms: int) -> None:  # type: ignore[type-arg]
        last = frames[-1].last_offset
        self.maybe_roll(now_ms, len(data), last)
        self.active.append(data, frames)
        for f in frames:
            if f.leader_epoch >= 0 and (not self._epochs or f.leader_epoch > self._epochs[-1][0]):
                self._assign(f.leader_epoch, f.base_offset)
        count = sum(f.record_count for f in frames)
        self.unflushed_messages += count
        if self.unflushed_messages >= self.config.flush_messages:
            self.flush()

    @storage_op("append")
    def append_as_leader(self, records: bytes | bytearray | memoryview, leader_epoch: int, now_ms: int) -> AppendInfo:
        a = assign(records, self.config, next_offset=self.log_end_offset, leader_epoch=leader_epoch, now_ms=now_ms)
        self._write(a.data, a.frames, now_ms)
        return AppendInfo(
            a.first_offset, a.last_offset, a.max_timestamp, a.offset_of_max_timestamp, a.log_append_time_ms,
            self.log_start_offset, a.record_count, len(a.data),
        )  # fmt: skip

    @storage_op("append")
    def append_as_follower(self, records: bytes | bytearray | memoryview) -> AppendInfo:
        """Batches from the leader, offsets and epochs assigned: CRC-checked and appended as
        they are. Batches entirely below the LEO (a duplicate answer) are skipped; a gap or
        an overlap inside a batch is refused (CORRUPT_MESSAGE)."""
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
        if frames[0].base_offset != end:
            raise LogError(
                ErrorCode.CORRUPT_MESSAGE, f"leader's batch starts at {frames[0].base_offset}, the log ends at {end}"
            )
        prev = end
        for f in frames:
            if f.base_offset != prev:
                raise LogError(ErrorCode.CORRUPT_MESSAGE, f"gap in the leader's batches at {prev}")
            prev = f.last_offset + 1
        start = frames[0].position
        stop = frames[-1].position + frames[-1].size
        view = memoryview(records)[start:stop]
        rebased = [
            type(f)(f.position - start, f.size, f.base_offset, f.leader_epoch, f.attributes, f.last_offset_delta,
                    f.base_timestamp, f.max_timestamp, f.producer_id, f.record_count)
            for f in frames
        ]  # fmt: skip
        self._write(view, rebased, _now_ms())
        max_f = max(frames, key=lambda f: f.max_timestamp)
        return AppendInfo(
            frames[0].base_offset, frames[-1].last_offset, max_f.max_timestamp, max_f.last_offset, -1,
            self.log_start_offset, sum(f.record_count for f in frames), stop - start,
        )  # fmt: skip

    # ------------------------------------------------------------------ reading

    def _segment_for(self, offset: int) -> int:
        return max(bisect.bisect_right(self._bases, offset) - 1, 0)

    @storage_op("read")
    def read(self, offset: int, max_bytes: int, *, max_offset: int, min_one_batch: bool) -> bytes | memoryview:
        """Whole batches from the one holding `offset`, below `max_offset`, within `max_bytes`
        (the first batch even above it when `min_one_batch`); from one segment."""
        end = self.log_end_offset
        if offset < self.log_start_offset or offset > end:
            raise LogError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {offset} is outside {self.log_start_offset}..{end} of {self.topic}-{self.partition}",
            )
        if offset >= max_offset or offset == end:
            return b""
        i = self._segment_for(offset)
        while i < len(self.segments):
            seg = self.segments[i]
            if offset < seg.next_offset:
                first = seg.find(offset)
                if first is not None:
                    return self._read_from(seg, first.position, max_bytes, max_offset, min_one_batch)
            i += 1
        return b""

    def _read_from(
        self, seg: LogSegment, position: int, max_bytes: int, max_offset: int, min_one_batch: bool
    ) -> bytes | memoryview:
        available = seg.size - position
        want = min(max(max_bytes, LOG_OVERHEAD + BATCH_HEADER_SIZE), available)
        buf = seg.read(position, want)
        scan = scan_frames(buf, verify_crc=False)
        take = 0
        for f in scan.frames:
            if f.last_offset >= max_offset or f.position + f.size > max_bytes and take:
                break
            take = f.position + f.size
        if take == 0:
            if not min_one_batch:
                return b""
            head = seg.frames_from(position, LOG_OVERHEAD + BATCH_HEADER_SIZE)
            if not head or head[0].last_offset >= max_offset:
                return b""
            return seg.read(position, head[0].size)
        if take > max_bytes and not min_one_batch:
            return b""
        return memoryview(buf)[:take] if take < len(buf) else buf

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
        self.active.truncate_to(offset)
        self.active.offset_index.grow(self.config.segment_index_bytes)
        self.active.time_index.grow(self.config.segment_index_bytes)
        self._trim_epochs_to(self.log_end_offset)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.log_start_offset = min(self.log_start_offset, self.log_end_offset)

    @storage_op("truncate")
    def truncate_fully_and_start_at(self, offset: int) -> None:
        for seg in self.segments:
            seg.delete()
        self._dirty.clear()
        seg = LogSegment(
            self.directory, offset, self.config.segment_index_bytes, self.config.index_interval_bytes, fresh=True
        )
        self.segments = [seg]
        self._bases = [offset]
        self._epochs = []
        self._persist_epochs()
        self.log_start_offset = offset
        self.recovery_point = offset

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

    # ------------------------------------------------------------------ durability

    @storage_op("flush")
    def flush(self) -> None:
        for seg in self._dirty:
            seg.flush()
        self._dirty.clear()
        self.active.flush()
        self.recovery_point = self.log_end_offset
        self.unflushed_messages = 0
        self.last_flush_ms = _now_ms()

    def update_config(self, config: LogConfig) -> None:
        self.config = config

    def close(self) -> None:
        for seg in self.segments:
            seg.close()

    def delete(self) -> None:
        """Close and remove the whole directory."""
        self.close()
        shutil.rmtree(self.directory, ignore_errors=True)
