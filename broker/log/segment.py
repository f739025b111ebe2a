"""`LogSegment`: one `<20-digit base offset>.log` file of record batches with its indexes.

Batches are written exactly as given (already offset-assigned) with `os.write` at the end
of the file and read with `os.pread`: nothing of the data is held in Python. The offset
index gets an entry for a batch once `index.interval.bytes` were written since the last
entry; the time index gets one at the same moments if the segment's largest timestamp grew.

Descriptors: a segment holds one, its `.log` file's; the indexes are mapped without one
(`MappedFile`). The indexes of a segment opened from disk are mapped on first use (Kafka's
lazy indexes): a log of thousands of segments opens in O(segments) stat calls, and a
sealed segment nobody reads costs no mapping.

Invariants: `size` is the file's length; batches are contiguous, their offsets rising;
`next_offset` is one past the last offset in the segment (== base_offset when empty).
A deleted segment's files are renamed `*.deleted` at once and unlinked by the log dir's
`DiskQueue` (off the event loop, as Kafka's asynchronous segment deletion).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from broker.log.disk_queue import INLINE, DiskQueue
from broker.log.file_range import FileRange, SegmentFile
from broker.log.index import CorruptIndexError, OffsetIndex, TimeIndex
from broker.log.txn_index import TXN_INDEX_SUFFIX, TransactionIndex
from quorum.storage.batch_layout import BATCH_LENGTH_AT, LOG_OVERHEAD
from quorum.storage.record_batch import BatchFrame, peek_batch_header, scan_frames

log = logging.getLogger(__name__)

NO_TIMESTAMP = -1
DELETED_SUFFIX = ".deleted"
INDEX_SUFFIXES = (".index", ".timeindex")
# How much to read at once when walking batch headers from an index position.
_SCAN_CHUNK = 64 * 1024
# How much `locate` reads at once: an index interval (4 KiB by default) and a batch header.
_LOCATE_CHUNK = 8 * 1024
# How much recovery reads at once (it walks whole segments: fewer, larger reads).
_RECOVERY_CHUNK = 1024 * 1024


def segment_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class LogSegment:
    def __init__(
        self, directory: Path, base_offset: int, index_bytes: int, index_interval: int, *, fresh: bool,
        disk: DiskQueue = INLINE, suffix: str = "",
    ) -> None:  # fmt: skip
        """`suffix`: appended to every file name (the log cleaner's `.cleaned` and `.swap`
        segments, which are not part of the log yet)."""
        self.directory = directory
        self.suffix = suffix
        self.base_offset = base_offset
        self.index_bytes = index_bytes
        self.index_interval = index_interval
        self.path = directory / (segment_name(base_offset, ".log") + suffix)
        flags = os.O_RDWR | os.O_CREAT | (os.O_TRUNC if fresh else 0)
        self.fd = os.open(self.path, flags, 0o644)
        # Owns `fd`; fetch answers' FileRanges share it (broker.log.file_range).
        self.file = SegmentFile(self.fd)
        self.size = os.fstat(self.fd).st_size
        self.disk = disk
        self.next_offset = base_offset
        self._max_timestamp = NO_TIMESTAMP
        self._offset_of_max_timestamp = -1
        # False for a sealed segment opened from disk until its tail was read (on first use
        # of the largest timestamp): its next_offset is the next segment's base.
        self._tail_loaded = True
        self.created_ms = int(time.time() * 1000)
        self._since_index = 0
        self._offset_index: OffsetIndex | None = None
        self._time_index: TimeIndex | None = None
        # False when an index file is missing or has a size no index can have: the caller
        # rebuilds. The content is checked (O(1)) when the index is first mapped.
        self.indexes_trusted = True
        # The aborted transactions whose marker is in this segment (`broker.log.txn_index`);
        # kept by the PartitionLog, which knows the producers' state.
        self.txn_index = TransactionIndex(self._index_path(TXN_INDEX_SUFFIX), fresh=fresh)
        if fresh:
            self._new_indexes()
        else:
            self.created_ms = int(os.fstat(self.fd).st_mtime * 1000)
            for suffix, entry in ((".index", OffsetIndex.ENTRY.size), (".timeindex", TimeIndex.ENTRY.size)):
                try:
                    if os.stat(self._index_path(suffix)).st_size % entry:
                        self.indexes_trusted = False
                except OSError:
                    self.indexes_trusted = False

    @property
    def offset_index(self) -> OffsetIndex:
        if self._offset_index is None:
            self._open_indexes()
        assert self._offset_index is not None
        return self._offset_index

    @property
    def time_index(self) -> TimeIndex:
        if self._time_index is None:
            self._open_indexes()
        assert self._time_index is not None
        return self._time_index

    @property
    def indexes_open(self) -> bool:
        return self._offset_index is not None

    def _open_indexes(self) -> None:
        """First use of a segment opened from disk: map both indexes (O(1) sanity check);
        one that fails it is rebuilt from the segment's batches, which stay as they are."""
        try:
            offsets = OffsetIndex(self._index_path(".index"), self.base_offset, self.index_bytes, fresh=False)
        except (CorruptIndexError, OSError) as exc:
            self._rebuild_indexes_of_sealed(exc)
            return
        try:
            times = TimeIndex(self._index_path(".timeindex"), self.base_offset, self.index_bytes, fresh=False)
        except (CorruptIndexError, OSError) as exc:
            offsets.release()
            self._rebuild_indexes_of_sealed(exc)
            return
        self._offset_index, self._time_index = offsets, times

    def _rebuild_indexes_of_sealed(self, why: Exception) -> None:
        log.warning("%s: rebuilding its indexes: %s", self.path, why)
        end = self.next_offset
        self.rebuild(cut=False)
        self.next_offset = max(self.next_offset, end)
        self.seal()

    @property
    def max_timestamp(self) -> int:
        if not self._tail_loaded:
            self.load_tail_state()
        return self._max_timestamp

    @max_timestamp.setter
    def max_timestamp(self, value: int) -> None:
        self._max_timestamp = value

    @property
    def offset_of_max_timestamp(self) -> int:
        if not self._tail_loaded:
            self.load_tail_state()
        return self._offset_of_max_timestamp

    @offset_of_max_timestamp.setter
    def offset_of_max_timestamp(self, value: int) -> None:
        self._offset_of_max_timestamp = value

    def open_sealed(self, next_offset: int) -> None:
        """A trusted segment opened from disk that is not the last: it ends where the next
        one begins (segments are contiguous below the recovery point); its indexes and its
        largest timestamp are read on first use."""
        self.next_offset = next_offset
        self._tail_loaded = False

    def _index_path(self, suffix: str) -> Path:
        return self.directory / (segment_name(self.base_offset, suffix) + self.suffix)

    def _new_indexes(self) -> None:
        self._offset_index = OffsetIndex(self._index_path(".index"), self.base_offset, self.index_bytes, fresh=True)
        self._time_index = TimeIndex(self._index_path(".timeindex"), self.base_offset, self.index_bytes, fresh=True)

    def file_paths(self) -> list[Path]:
        """The segment's files but its `.txnindex` (which exists only once it has an entry)."""
        return [self.path, *(self._index_path(s) for s in INDEX_SUFFIXES)]

    def durable_paths(self) -> list[Path]:
        """What a flush makes durable and a deletion removes: every file, `.txnindex` too."""
        return [*self.file_paths(), self.txn_index.path]

    # ------------------------------------------------------------------ writing

    def append(self, data: bytes | bytearray | memoryview, frames: list[BatchFrame]) -> None:
        """Write `data` (whole batches, described by `frames` with positions relative to it)."""
        if not self._tail_loaded:
            self.load_tail_state()  # a sealed segment made active again by a truncation
        start = self.size
        size = len(data)
        # pwrite at the tracked end: the fd's own position is not used (reads are preads).
        written = os.pwrite(self.fd, data, start)
        while written < size:
            written += os.pwrite(self.fd, memoryview(data)[written:], start + written)
        self.size += size
        for f in frames:
            self._note_batch(start + f.position, f)

    def _note_batch(self, position: int, f: BatchFrame) -> None:
        if f.max_timestamp > self._max_timestamp:
            self._max_timestamp = f.max_timestamp
            self._offset_of_max_timestamp = f.last_offset
        if self._since_index >= self.index_interval:
            self.offset_index.add(f.base_offset, position)
            if self._max_timestamp >= 0:
                self.time_index.add(self._max_timestamp, self._offset_of_max_timestamp)
            self._since_index = 0
        self._since_index += f.size
        self.next_offset = f.last_offset + 1

    def largest_timestamp_ms(self) -> int:
        """The segment's age for retention.ms (Kafka's `largestTimestamp`): its largest record
        timestamp (ms), or the file's last-modified time when no batch carries a timestamp."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return int(os.fstat(self.fd).st_mtime * 1000)

    @property
    def index_full(self) -> bool:
        return self.offset_index.full or self.time_index.full

    def rebuild(
        self, *, cut: bool = True, on_batch: Callable[[BatchFrame], None] | None = None
    ) -> tuple[int, str | None]:
        """Recovery: walk every batch (framing + CRC), rebuild both indexes, cut the file at
        the first torn or corrupt batch (unless not `cut`: then the walk stops there and the
        file stays); `on_batch` sees each valid batch, in order. Returns (bytes cut, why or None)."""
        for index in (self._offset_index, self._time_index):
            if index is not None:
                index.release()
        self._new_indexes()
        self._tail_loaded = True
        self.next_offset = self.base_offset
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = -1
        self._since_index = 0
        position = 0
        problem: str | None = None
        while position < self.size:
            chunk = os.pread(self.fd, _RECOVERY_CHUNK, position)
            scan = scan_frames(chunk)
            if not scan.frames:
                first = self._read_one(position)
                if first is None:
                    # The scan names the position in its chunk; the segment's is `position` on.
                    problem = (
                        "torn or corrupt batch"
                        if scan.error is None
                        else str(scan.error).replace(
                            f"(batch at byte {scan.consumed})", f"(batch at byte {position + scan.consumed})"
                        )
                    )
                    break
                scan_frames_list = [first]
                consumed = first.size
            else:
                scan_frames_list = scan.frames
                consumed = scan.consumed
            prev = self.next_offset
            for f in scan_frames_list:
                if f.base_offset < prev:
                    problem = f"offsets go backwards at {f.base_offset}"
                    position += f.position  # the batches before it in this chunk stay
                    break
                self._note_batch(position + f.position, f)
                if on_batch is not None:
                    on_batch(f)
                prev = self.next_offset
            if problem is not None:
                break
            position += consumed
        if not cut:
            return 0, problem
        dropped = self.size - position
        if dropped:
            self._ftruncate(position)
        return dropped, (problem if dropped else None)

    def _read_one(self, position: int) -> BatchFrame | None:
        """The batch at `position` when it is larger than a scan chunk (or None if invalid)."""
        head = os.pread(self.fd, LOG_OVERHEAD, position)
        if len(head) < LOG_OVERHEAD:
            return None
        length = int.from_bytes(head[BATCH_LENGTH_AT:LOG_OVERHEAD], "big", signed=True)
        if length <= 0:
            return None
        data = os.pread(self.fd, LOG_OVERHEAD + length, position)
        scan = scan_frames(data, limit=1)
        return scan.frames[0] if scan.frames else None

    def load_tail_state(self) -> None:
        """For a trusted segment: learn next_offset and the largest timestamp by walking from
        its last index entry (not from the start)."""
        self._tail_loaded = True
        last = self.offset_index.last()
        position = last[1] if last is not None else 0
        tlast = self.time_index.last()
        if tlast is not None:
            self.max_timestamp, self.offset_of_max_timestamp = tlast[0], self.base_offset + tlast[1]
        while position < self.size:
            frames = self.frames_from(position, _SCAN_CHUNK)
            if not frames:
                break
            for f in frames:
                if f.max_timestamp > self.max_timestamp:
                    self.max_timestamp, self.offset_of_max_timestamp = f.max_timestamp, f.last_offset
                self.next_offset = f.last_offset + 1
                position = f.position + f.size
        self._since_index = self.size - (last[1] if last is not None else 0)

    # ------------------------------------------------------------------ reading

    def frames_from(self, position: int, max_bytes: int) -> list[BatchFrame]:
        """Batch headers starting at file `position` (positions are file positions)."""
        chunk = os.pread(self.fd, max(max_bytes, LOG_OVERHEAD), position)
        scan = scan_frames(chunk, verify_crc=False)
        frames = [
            BatchFrame(position + f.position, f.size, f.base_offset, f.leader_epoch, f.attributes,
                       f.last_offset_delta, f.base_timestamp, f.max_timestamp, f.producer_id, f.record_count)
            for f in scan.frames
        ]  # fmt: skip
        if not frames:
            one = self._read_one(position)
            if one is not None:
                frames = [
                    BatchFrame(position, one.size, one.base_offset, one.leader_epoch, one.attributes,
                               one.last_offset_delta, one.base_timestamp, one.max_timestamp, one.producer_id,
                               one.record_count)
                ]  # fmt: skip
        return frames

    def find(self, offset: int) -> BatchFrame | None:
        """The batch that contains `offset` (or the first after it), None past the end."""
        position = self.offset_index.lookup(offset)
        while position < self.size:
            frames = self.frames_from(position, _SCAN_CHUNK)
            if not frames:
                return None
            for f in frames:
                if f.last_offset >= offset:
                    return f
            last = frames[-1]
            position = last.position + last.size
        return None

    def read(self, position: int, length: int) -> bytes:
        return os.pread(self.fd, length, position)

    def locate(self, offset: int) -> tuple[int, int] | None:
        """(file position, size in bytes) of the batch holding `offset`, or of the first
        batch after it; None past the end. Walks batch headers from the offset index's entry
        (at most `index.interval.bytes` plus one batch before the batch wanted), reading
        `_LOCATE_CHUNK` bytes at a time: only the headers are looked at (Kafka's
        `searchForOffsetWithSize`), never the records."""
        position = self.offset_index.lookup(offset)
        size = self.size
        while position < size:
            chunk = os.pread(self.fd, min(_LOCATE_CHUNK, size - position), position)
            at = 0
            while True:
                head = peek_batch_header(chunk, at)
                if head is None:
                    break
                base, batch_size, _epoch, last_delta = head
                if base + last_delta >= offset:
                    return position + at, batch_size
                at += batch_size
            if at == 0:
                return None  # a torn or unreadable header: nothing readable from here
            position += at
        return None

    def file_range(self, position: int, length: int) -> FileRange:
        """`length` bytes (> 0) from `position`, to be sent as they are."""
        return FileRange(self.file, position, length)

    # ------------------------------------------------------------------ truncation and lifecycle

    def truncate_to(self, offset: int) -> None:
        """Drop every batch holding an offset >= `offset` (as Kafka: a batch that straddles
        `offset` goes whole, so the segment may end below `offset`)."""
        f = self.find(offset)
        if f is None:
            return
        cut_at = f.position
        if cut_at >= self.size:
            return
        self._ftruncate(cut_at)
        self.offset_index.truncate_to_offset(f.base_offset)
        self.time_index.truncate_to_offset(f.base_offset)
        self.txn_index.truncate_to(f.base_offset)
        # Recompute the tail state from the last index entry.
        self.next_offset = self.base_offset
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = -1
        self.load_tail_state()

    def _ftruncate(self, size: int) -> None:
        """Cut the file to `size` bytes; ranges made before it are no longer intact."""
        self.file.truncations += 1
        os.ftruncate(self.fd, size)
        self.size = size

    def flush(self) -> None:
        os.fsync(self.fd)
        if self.txn_index.entries:
            fd = os.open(self.txn_index.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        for index in (self._offset_index, self._time_index):
            if index is not None:
                index.flush()

    def seal(self) -> None:
        """The segment rolled: its time index ends with the segment's largest timestamp (so
        that entry alone dates the segment for retention, after a restart too), and both
        indexes are trimmed to their entries. A segment opened from disk whose indexes were
        never mapped was sealed when it rolled: nothing to do (and nothing read)."""
        if self._offset_index is None or self._time_index is None:
            return
        if self.max_timestamp >= 0:
            self._time_index.add(self.max_timestamp, self.offset_of_max_timestamp)
        self._offset_index.trim()
        self._time_index.trim()

    def close(self) -> None:
        for index in (self._offset_index, self._time_index):
            if index is not None:
                index.close()
        self.file.close()

    def delete(self) -> None:
        """Close the segment and rename its files `*.deleted` now (a re-created segment of
        the same base offset starts empty); the unlinks run on the disk queue."""
        for index in (self._offset_index, self._time_index):
            if index is not None:
                index.release()
        self._offset_index = self._time_index = None
        self.file.close()  # fetch answers in flight keep the descriptor: their bytes stay readable
        self.txn_index.forget()
        doomed: list[Path] = []
        for path in self.durable_paths():
            target = path.with_name(path.name + DELETED_SUFFIX)
            try:
                os.rename(path, target)
            except FileNotFoundError:
                continue
            doomed.append(target)
        self.disk.submit(f"deletion of segment {self.path}", lambda: unlink_all(doomed))


def unlink_all(paths: list[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)
