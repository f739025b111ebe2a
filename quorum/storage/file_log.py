"""`FileLog`: the replicated metadata log on disk, as Kafka-style segment files.

One directory (e.g. `<metadata.log.dir>/__cluster_metadata-0/`) holds segments named
`<20-digit base offset>.log`; each is a concatenation of magic-v2 record batches
(see `record_batch`). Other files in the directory (quorum-state, snapshots) are
ignored.

Invariants (checked at open, kept by every method):
 - segments are sorted by base offset, and segment k+1's base offset is the end
   offset of segment k: offsets are contiguous across the whole log;
 - inside a segment, batch i+1's base offset is batch i's end offset, and the first
   batch's base offset is the segment's base offset;
 - the last segment is the active one (the only one appended to); there is always
   one, possibly empty, so an empty log still records its start offset durably;
 - the whole log is also held in memory (`batches`), with a per-segment index of
   (base offset, byte position) per batch so truncation needs no rescan.

Durability: `append` writes to the OS (page cache) and never fsyncs; `flush` fsyncs
everything appended since the last flush (group commit). `truncate_to`, `reset` and
`delete_before` are durable when they return. At open, a torn or corrupt tail (CRC
failure, bad framing, an offset gap) is cut off at the first bad batch: that segment
is truncated there and every later segment is deleted.
"""

from __future__ import annotations

import bisect
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from quorum.raft.types import Batch, Offset
from quorum.storage.durable import fsync_dir, write_all
from quorum.storage.record_batch import encode_and_remember, scan_batches

__all__ = ["FileLog", "LogRecovery", "segment_file_name"]

_SEGMENT_RE = re.compile(r"^(\d{20})\.log$")
_DEFAULT_SEGMENT_BYTES = 1 << 30


def segment_file_name(base_offset: Offset) -> str:
    """`<20-digit zero-padded base offset>.log`, Kafka's segment file name."""
    return f"{base_offset:020d}.log"


@dataclass(frozen=True, slots=True)
class LogRecovery:
    """What `FileLog.open` cut off while recovering the log (for logging).

    The log was truncated at offset `offset` (its end offset after open), which was
    byte `position` of `segment`; `bytes_dropped` bytes were discarded in total,
    including `deleted_segments` whole later segment files.
    """

    offset: Offset
    segment: Path
    position: int
    bytes_dropped: int
    deleted_segments: tuple[Path, ...]
    reason: str


@dataclass(slots=True)
class _Segment:
    """One segment file; `offsets[i]`/`positions[i]` index its i-th batch.

    `size` is the file size in bytes as this process wrote it; `end_offset` the
    exclusive end offset of its last batch (== base_offset when empty).
    """

    base_offset: Offset
    path: Path
    size: int = 0
    end_offset: Offset = 0
    offsets: list[Offset] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)


class FileLog:
    """The metadata log as segment files in one directory; see the module docstring."""

    def __init__(self, directory: Path, segments: list[_Segment], segment_bytes: int) -> None:
        # Use FileLog.open(); this constructor takes an already recovered segment list.
        assert segments, "a log always has an active segment"
        self._dir = directory
        self._segment_bytes = segment_bytes
        self._segments = segments
        self._batches: list[Batch] = []
        self._bases: list[Offset] = []  # base offset of each batch in _batches
        self._active_fd: int | None = None
        # fds of segments written since the last flush that are no longer active.
        self._unsynced_fds: list[int] = []
        self._dirty = False  # active segment written since the last flush
        self._dir_dirty = False  # directory entries created since the last flush
        self._closed = False
        self.recovered_truncation: Offset | None = None
        self.recovery: LogRecovery | None = None

    # ------------------------------------------------------------------ open / recovery

    @classmethod
    def open(cls, directory: Path, *, segment_bytes: int = _DEFAULT_SEGMENT_BYTES) -> FileLog:
        """Open (creating if needed) the log in `directory`, recovering a torn/corrupt tail."""
        if segment_bytes <= 0:
            raise ValueError("segment_bytes must be positive")
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        names = sorted(
            (int(m.group(1)), directory / name)
            for name in os.listdir(directory)
            if (m := _SEGMENT_RE.match(name)) is not None
        )
        segments: list[_Segment] = []
        batches: list[Batch] = []
        recovery: LogRecovery | None = None
        changed_dir = False
        for index, (base, path) in enumerate(names):
            expected = segments[-1].end_offset if segments else base
            if base != expected:
                # A segment that does not continue the log: drop it and everything after.
                recovery = cls._drop_from(names, index, None, expected, 0, f"segment {path.name} starts at {base}")
                changed_dir = True
                break
            data = path.read_bytes()
            scan = scan_batches(data)
            seg = _Segment(base, path, end_offset=base)
            reason: str | None = None
            good = scan.consumed
            next_offset = base
            for batch, pos in zip(scan.batches, scan.positions, strict=True):
                if batch.base_offset != next_offset:
                    reason = f"offset gap: expected {next_offset}, found batch at {batch.base_offset}"
                    good = pos
                    break
                seg.offsets.append(batch.base_offset)
                seg.positions.append(pos)
                batches.append(batch)
                next_offset = batch.end_offset
            if reason is None and scan.error is not None:
                reason = str(scan.error)
            elif reason is None and scan.consumed < len(data):
                reason = f"incomplete batch ({len(data) - scan.consumed} trailing bytes)"
            seg.size = good
            seg.end_offset = next_offset
            segments.append(seg)
            if reason is not None:
                dropped = len(data) - good
                fd = os.open(path, os.O_WRONLY)
                try:
                    os.ftruncate(fd, good)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                recovery = cls._drop_from(names, index + 1, path, next_offset, dropped, reason, position=good)
                changed_dir = changed_dir or len(recovery.deleted_segments) > 0
                break
        if not segments:
            # A new log: an empty active segment at offset 0.
            path = directory / segment_file_name(0)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            segments.append(_Segment(0, path, end_offset=0))
            changed_dir = True
        if changed_dir:
            fsync_dir(directory)
        log = cls(directory, segments, segment_bytes)
        log._batches = batches
        log._bases = [b.base_offset for b in batches]
        log.recovery = recovery
        log.recovered_truncation = recovery.offset if recovery is not None else None
        log._open_active()
        return log

    @staticmethod
    def _drop_from(
        names: list[tuple[int, Path]],
        index: int,
        truncated: Path | None,
        offset: Offset,
        dropped: int,
        reason: str,
        *,
        position: int = 0,
    ) -> LogRecovery:
        """Delete segment files names[index:] (last first); describe the recovery."""
        deleted: list[Path] = []
        for _base, path in reversed(names[index:]):
            dropped += path.stat().st_size
            path.unlink()
            deleted.append(path)
        deleted.reverse()
        segment = truncated if truncated is not None else (deleted[0] if deleted else Path())
        return LogRecovery(offset, segment, position, dropped, tuple(deleted), reason)

    def _open_active(self) -> None:
        seg = self._segments[-1]
        self._active_fd = os.open(seg.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    # ------------------------------------------------------------------ properties

    @property
    def directory(self) -> Path:
        return self._dir

    @property
    def batches(self) -> list[Batch]:
        """Every batch in the log, in offset order. The live list: do not mutate it."""
        return self._batches

    @property
    def start_offset(self) -> Offset:
        """Offset of the first record held (the first segment's base offset)."""
        return self._segments[0].base_offset

    @property
    def end_offset(self) -> Offset:
        """Exclusive end: the offset the next appended record gets."""
        return self._segments[-1].end_offset

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    @property
    def segment_paths(self) -> list[Path]:
        return [s.path for s in self._segments]

    @property
    def size_bytes(self) -> int:
        """Total bytes of all segments."""
        return sum(s.size for s in self._segments)

    def _check_open(self) -> int:
        if self._closed or self._active_fd is None:
            raise ValueError("log is closed")
        return self._active_fd

    # ------------------------------------------------------------------ append / flush

    def append(self, batches: Sequence[Batch]) -> None:
        """Write `batches` (contiguous from `end_offset`) to the active segment; no fsync.

        Each batch is encoded exactly once. Rolls to a new segment when adding a
        batch would take a non-empty active segment past `segment_bytes`. If a write
        fails (e.g. disk full) the failing segment is cut back to its previous size,
        batches before the failing segment chunk stay appended, and the error propagates.
        """
        fd = self._check_open()
        if not batches:
            return
        expected = self.end_offset
        for batch in batches:
            if batch.base_offset != expected:
                raise ValueError(f"non-contiguous append: batch at {batch.base_offset}, log end {expected}")
            if not batch.records:
                raise ValueError("empty batch")
            expected = batch.end_offset
        seg = self._segments[-1]
        chunk: list[bytes] = []
        chunk_batches: list[Batch] = []
        chunk_size = 0
        for batch in batches:
            data = encode_and_remember(batch)  # the leader sends it to every replica next
            if seg.size + chunk_size > 0 and seg.size + chunk_size + len(data) > self._segment_bytes:
                if chunk:
                    self._write_chunk(fd, seg, chunk, chunk_batches)
                    chunk, chunk_batches, chunk_size = [], [], 0
                seg = self._roll(batch.base_offset)
                fd = self._check_open()
            chunk.append(data)
            chunk_batches.append(batch)
            chunk_size += len(data)
        self._write_chunk(fd, seg, chunk, chunk_batches)

    def _write_chunk(self, fd: int, seg: _Segment, chunk: list[bytes], batches: list[Batch]) -> None:
        old_size = seg.size
        try:
            write_all(fd, b"".join(chunk) if len(chunk) > 1 else chunk[0])
        except OSError:
            # Never leave a partial batch behind: cut the file back (best effort).
            try:
                os.ftruncate(fd, old_size)
            except OSError:
                pass
            raise
        self._dirty = True
        pos = old_size
        for data, batch in zip(chunk, batches, strict=True):
            seg.offsets.append(batch.base_offset)
            seg.positions.append(pos)
            pos += len(data)
            self._batches.append(batch)
            self._bases.append(batch.base_offset)
        seg.size = pos
        seg.end_offset = batches[-1].end_offset

    def _roll(self, base_offset: Offset) -> _Segment:
        """Start a new active segment at `base_offset`; the old fd waits for the next flush."""
        fd = self._check_open()
        if self._dirty:
            self._unsynced_fds.append(fd)
        else:
            os.close(fd)
        self._active_fd = None
        seg = _Segment(base_offset, self._dir / segment_file_name(base_offset), end_offset=base_offset)
        self._segments.append(seg)
        self._active_fd = os.open(seg.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_TRUNC, 0o644)
        self._dirty = False
        self._dir_dirty = True
        return seg

    def flush(self) -> None:
        """fsync everything appended since the last flush (and new directory entries)."""
        fd = self._check_open()
        while self._unsynced_fds:
            old = self._unsynced_fds[0]
            os.fsync(old)
            os.close(old)
            self._unsynced_fds.pop(0)
        if self._dirty:
            os.fsync(fd)
            self._dirty = False
        if self._dir_dirty:
            fsync_dir(self._dir)
            self._dir_dirty = False

    # ------------------------------------------------------------------ truncation / deletion

    def truncate_to(self, offset: Offset) -> None:
        """Drop every record at or after `offset` (a batch boundary or the end offset); durable."""
        self._check_open()
        if offset == self.end_offset:
            return
        index = bisect.bisect_left(self._bases, offset)
        if index >= len(self._bases) or self._bases[index] != offset:
            raise ValueError(
                f"truncate_to({offset}): not a batch boundary of the log [{self.start_offset}, {self.end_offset})"
            )
        # Finish pending writes first so no unsynced fd refers to a deleted file.
        self.flush()
        seg_index = bisect.bisect_right([s.base_offset for s in self._segments], offset) - 1
        seg = self._segments[seg_index]
        if offset == seg.base_offset and seg_index > 0:
            # The cut falls exactly on a segment boundary: drop that segment entirely.
            seg_index -= 1
            seg = self._segments[seg_index]
            position = seg.size
            batch_in_seg = len(seg.offsets)
        else:
            batch_in_seg = bisect.bisect_left(seg.offsets, offset)
            position = seg.positions[batch_in_seg]
        self._close_active()
        removed = self._segments[seg_index + 1 :]
        del self._segments[seg_index + 1 :]
        for dead in reversed(removed):
            dead.path.unlink(missing_ok=True)
        fd = os.open(seg.path, os.O_WRONLY)
        try:
            os.ftruncate(fd, position)
            os.fsync(fd)
        finally:
            os.close(fd)
        if removed:
            fsync_dir(self._dir)
        del seg.offsets[batch_in_seg:]
        del seg.positions[batch_in_seg:]
        seg.size = position
        seg.end_offset = offset
        del self._batches[index:]
        del self._bases[index:]
        self._open_active()

    def reset(self, start_offset: Offset) -> None:
        """Delete every segment and start an empty log whose next offset is `start_offset`; durable.

        Used after installing a snapshot that ends at `start_offset`.
        """
        self._check_open()
        if start_offset < 0:
            raise ValueError("start_offset must be >= 0")
        self._close_all()
        for seg in reversed(self._segments):
            seg.path.unlink(missing_ok=True)
        path = self._dir / segment_file_name(start_offset)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(self._dir)
        self._segments = [_Segment(start_offset, path, end_offset=start_offset)]
        self._batches.clear()  # in place: `batches` stays the live list
        self._bases.clear()
        self._dirty = False
        self._dir_dirty = False
        self._open_active()

    def delete_before(self, offset: Offset) -> None:
        """Delete whole non-active segments whose records all lie below `offset`; durable.

        The log start moves to the first kept segment's base offset, which may stay
        below `offset`.
        """
        self._check_open()
        count = 0
        # Segment k ends where segment k+1 starts; the active (last) one is never deleted.
        while count < len(self._segments) - 1 and self._segments[count + 1].base_offset <= offset:
            count += 1
        if count == 0:
            return
        self.flush()  # no unsynced fd may point at a segment we delete
        removed = self._segments[:count]
        del self._segments[:count]
        for seg in removed:
            seg.path.unlink(missing_ok=True)
        fsync_dir(self._dir)
        first = bisect.bisect_left(self._bases, self._segments[0].base_offset)
        del self._batches[:first]
        del self._bases[:first]

    # ------------------------------------------------------------------ reads

    def batch_position(self, offset: Offset) -> tuple[Path, int] | None:
        """(segment path, byte position) of the batch whose base offset is `offset`, if any."""
        seg_index = bisect.bisect_right([s.base_offset for s in self._segments], offset) - 1
        if seg_index < 0:
            return None
        seg = self._segments[seg_index]
        i = bisect.bisect_left(seg.offsets, offset)
        if i < len(seg.offsets) and seg.offsets[i] == offset:
            return seg.path, seg.positions[i]
        return None

    # ------------------------------------------------------------------ close

    def _close_active(self) -> None:
        if self._active_fd is not None:
            os.close(self._active_fd)
            self._active_fd = None

    def _close_all(self) -> None:
        for fd in self._unsynced_fds:
            os.close(fd)
        self._unsynced_fds.clear()
        self._close_active()

    def close(self, *, flush: bool = True) -> None:
        """Close the log, fsyncing pending writes first unless `flush=False`. Idempotent."""
        if self._closed:
            return
        try:
            if flush and self._active_fd is not None:
                self.flush()
        finally:
            self._close_all()
            self._closed = True

    def __enter__(self) -> FileLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"FileLog({str(self._dir)!r}, start={self.start_offset}, end={self.end_offset}, "
            f"segments={len(self._segments)})"
        )
