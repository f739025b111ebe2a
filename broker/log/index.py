"""Sparse, memory-mapped segment indexes in Kafka's file formats.

`.index` (OffsetIndex): entries of (relative offset int32, file position int32), one each
time `index.interval.bytes` of batches were appended; lookups find the last entry at or
below an offset, from where a short scan of batch headers finds the batch.
`.timeindex` (TimeIndex): entries of (timestamp int64, relative offset int32), appended
with an offset-index entry when the segment's largest timestamp grew.

Both are preallocated to `segment.index.bytes` (rounded down to whole entries) while their
segment is active, written through an mmap (the data lives in the page cache, not in
Python objects), and trimmed to their entries when the segment rolls or the log closes.
Relative offsets are offsets minus the segment's base offset (< 2**31 by construction:
a segment rolls before it would overflow).
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path


class CorruptIndexError(ValueError):
    """An index file that cannot be trusted (the caller rebuilds it from the segment)."""


class _Index:
    ENTRY: struct.Struct = struct.Struct(">ii")

    def __init__(self, path: Path, base_offset: int, max_bytes: int, *, fresh: bool) -> None:
        self.path = path
        self.base_offset = base_offset
        size = self.ENTRY.size
        self.max_entries = max(max_bytes // size, 1)
        flags = os.O_RDWR | os.O_CREAT | (os.O_TRUNC if fresh else 0)
        self._fd = os.open(path, flags, 0o644)
        length = os.fstat(self._fd).st_size
        if not fresh and length % size:
            os.close(self._fd)
            raise CorruptIndexError(f"{path}: size {length} is not a multiple of {size}")
        self.entries = 0 if fresh else length // size
        self.max_entries = max(self.max_entries, self.entries)
        self._mm: mmap.mmap | None = None
        self._map(self.max_entries * size)
        if not fresh:
            self._check()

    def _map(self, length: int) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        os.ftruncate(self._fd, length)
        if length:
            self._mm = mmap.mmap(self._fd, length)

    def _check(self) -> None:
        """Keys must rise strictly (Kafka's sanityCheck); values must be in range."""
        prev = -1
        for i in range(self.entries):
            key, _ = self.entry(i)
            if key <= prev:
                raise CorruptIndexError(f"{self.path}: entry {i} out of order")
            prev = key

    def entry(self, i: int) -> tuple[int, int]:
        assert self._mm is not None
        a, b = self.ENTRY.unpack_from(self._mm, i * self.ENTRY.size)
        return int(a), int(b)

    @property
    def full(self) -> bool:
        return self.entries >= self.max_entries

    def last(self) -> tuple[int, int] | None:
        return self.entry(self.entries - 1) if self.entries else None

    def append(self, key: int, value: int) -> None:
        if self.full:
            return
        assert self._mm is not None
        self.ENTRY.pack_into(self._mm, self.entries * self.ENTRY.size, key, value)
        self.entries += 1

    def floor(self, key: int) -> tuple[int, int] | None:
        """The last entry whose key <= `key` (binary search over the mapped file)."""
        lo, hi = 0, self.entries - 1
        found: tuple[int, int] | None = None
        while lo <= hi:
            mid = (lo + hi) // 2
            e = self.entry(mid)
            if e[0] <= key:
                found = e
                lo = mid + 1
            else:
                hi = mid - 1
        return found

    def truncate_entries(self, keep: int) -> None:
        self.entries = max(0, min(keep, self.entries))

    def trim(self) -> None:
        """Shrink the file to its entries (a segment that will not grow again)."""
        self._map(self.entries * self.ENTRY.size)
        self.max_entries = self.entries

    def grow(self, max_bytes: int) -> None:
        """Preallocate again for appends (the segment became active after a truncation)."""
        self.max_entries = max(max_bytes // self.ENTRY.size, self.entries, 1)
        self._map(self.max_entries * self.ENTRY.size)

    def flush(self) -> None:
        if self._mm is not None:
            self._mm.flush()

    def close(self, *, trim: bool = True) -> None:
        if trim:
            self.trim()
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        os.close(self._fd)

    def delete(self) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        os.close(self._fd)
        self.path.unlink(missing_ok=True)


class OffsetIndex(_Index):
    """(relative offset, position) entries."""

    ENTRY = struct.Struct(">ii")

    def lookup(self, offset: int) -> int:
        """The file position from which to scan for `offset` (0 if before every entry)."""
        e = self.floor(offset - self.base_offset)
        return 0 if e is None else e[1]

    def add(self, offset: int, position: int) -> None:
        self.append(offset - self.base_offset, position)

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries for offsets >= `offset`."""
        rel = offset - self.base_offset
        keep = self.entries
        while keep and self.entry(keep - 1)[0] >= rel:
            keep -= 1
        self.truncate_entries(keep)


class TimeIndex(_Index):
    """(timestamp, relative offset) entries with rising timestamps."""

    ENTRY = struct.Struct(">qi")

    def lookup(self, timestamp: int) -> int:
        """The offset from which to scan for the first record with timestamp >= `timestamp`
        (the segment's base offset when no entry is at or below it)."""
        e = self.floor(timestamp - 1)
        return self.base_offset if e is None else self.base_offset + e[1]

    def add(self, timestamp: int, offset: int) -> None:
        last = self.last()
        if last is not None and timestamp <= last[0]:
            return
        self.append(timestamp, offset - self.base_offset)

    def truncate_to_offset(self, offset: int) -> None:
        rel = offset - self.base_offset
        keep = self.entries
        while keep and self.entry(keep - 1)[1] >= rel:
            keep -= 1
        self.truncate_entries(keep)

    def _check(self) -> None:
        prev = -1
        for i in range(self.entries):
            ts, rel = self.entry(i)
            if rel < prev:
                raise CorruptIndexError(f"{self.path}: entry {i} out of order")
            prev = rel
