"""`FileRange`: a byte range of a segment file that a fetch answer sends as it is.

A fetch answers with ranges, not bytes: the listener sends each range from the file to
the socket (`os.sendfile`), so no byte of a record batch passes through Python (but for
small ranges, read and joined into one write: `broker.kafka.spliced.INLINE_RANGE_BYTES`).

How a range stays valid while it waits to be sent (a long poll holds its first read; a
slow socket holds a response), as Kafka's FileRecords slices rely on the open channel:
- deletion (retention, DeleteRecords, a deleted topic, the cleaner's swap): the segment
  closes its `SegmentFile`, but the descriptor is closed only when the last range over it
  is gone, so the renamed or unlinked file's bytes stay readable through it;
- truncation (a follower cutting a diverged tail, a torn tail cut at recovery): the file
  counts its truncations; a range made before one is no longer `intact` and the sender
  closes the connection rather than send bytes that may have been rewritten (Kafka throws
  from `FileRecords.writeTo` when the file shrank under a slice; the client reconnects
  and fetches again).

Invariants: `SegmentFile.fd` is open while its owner has not closed it or any range over
it is alive; a range's bytes are those of the file when the range was made as long as
`intact` holds (segments are append-only between truncations).
"""

from __future__ import annotations

import contextlib
import os

from quorum.storage.batch_layout import LOG_HEADER, LOG_OVERHEAD

__all__ = ["FileRange", "SegmentFile", "complete_batches_size"]


class SegmentFile:
    """One open segment file shared by its segment (the owner) and the ranges over it."""

    __slots__ = ("_owner_closed", "_ranges", "fd", "truncations")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.truncations = 0  # bumped by every ftruncate of the file
        self._ranges = 0  # FileRange objects alive over this file
        self._owner_closed = False

    def close(self) -> None:
        """The owner is done with the file: the descriptor closes now, or when the last
        range over it goes."""
        if self._owner_closed:
            return
        self._owner_closed = True
        if self._ranges == 0:
            os.close(self.fd)

    @property
    def closed(self) -> bool:
        return self._owner_closed

    def _pin(self) -> None:
        self._ranges += 1

    def _unpin(self) -> None:
        self._ranges -= 1
        if self._ranges == 0 and self._owner_closed:
            with contextlib.suppress(OSError):
                os.close(self.fd)


class FileRange:
    """`length` bytes of `file` from byte `position`; keeps the file's descriptor open for
    as long as it lives (see the module docstring)."""

    __slots__ = ("file", "generation", "length", "position")

    def __init__(self, file: SegmentFile, position: int, length: int) -> None:
        file._pin()
        self.file = file  # set first: __del__ unpins even when a check below fails
        if position < 0 or length <= 0:
            raise ValueError(f"bad file range {position}+{length}")
        self.position = position  # bytes from the start of the file
        self.length = length  # bytes, > 0
        self.generation = file.truncations

    def __del__(self) -> None:
        self.file._unpin()

    def __len__(self) -> int:
        return self.length

    def __repr__(self) -> str:
        return f"FileRange(fd={self.file.fd}, {self.position}+{self.length})"

    @property
    def fd(self) -> int:
        return self.file.fd

    @property
    def intact(self) -> bool:
        """No truncation of the file since the range was made."""
        return self.file.truncations == self.generation

    def pread(self) -> bytes:
        """The range's bytes (for in-process readers and tests; fetch answers send them
        with `os.sendfile`). Shorter than `length` if the file shrank."""
        return os.pread(self.file.fd, self.length, self.position)


def complete_batches_size(data: bytes | bytearray | memoryview) -> int:
    """The bytes of `data` taken by whole batches from its start (what a client keeps of a
    range that ends inside a batch); framing only, nothing verified."""
    size = len(data)
    at = 0
    while size - at >= LOG_OVERHEAD:
        batch = LOG_OVERHEAD + LOG_HEADER.unpack_from(data, at)[1]
        if batch <= LOG_OVERHEAD or at + batch > size:
            break
        at += batch
    return at
