"""`TransactionIndex`: a segment's `<20-digit base offset>.txnindex`, the aborted transactions
whose ABORT marker lies in that segment, in marker order (Kafka's TransactionIndex).

Each entry is Kafka's AbortedTxn, 34 bytes, big-endian:

    version int16 (0) | producerId int64 | firstOffset int64 | lastOffset int64 (the marker)
    | lastStableOffset int64

`lastStableOffset` is the LSO right after the marker (the first offset of the oldest
transaction still open then, or the marker + 1): a search for the aborted transactions
below an upper bound can stop at the first entry whose LSO reaches that bound, since every
transaction aborted later began at or above it.

The file exists only once an entry was written; entries are read into memory on first use
(a segment's index is small: one entry per aborted transaction). A torn last entry (a crash
mid-write) is dropped when the file is read. Invariant: `entries` are rising in lastOffset.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Final

TXN_INDEX_SUFFIX: Final = ".txnindex"
ABORTED_TXN_VERSION: Final = 0
_ENTRY: Final = struct.Struct(">hqqqq")
ENTRY_SIZE: Final = _ENTRY.size  # 34

assert ENTRY_SIZE == 34


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the offset of the ABORT marker
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(
            ABORTED_TXN_VERSION, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset
        )

    @classmethod
    def decode(cls, data: bytes | memoryview, position: int = 0) -> AbortedTxn:
        version, pid, first, last, lso = _ENTRY.unpack_from(data, position)
        if version != ABORTED_TXN_VERSION:
            raise ValueError(f"aborted transaction entry version {version} is not {ABORTED_TXN_VERSION}")
        return cls(pid, first, last, lso)


def collect_aborted(
    entries: list[AbortedTxn], fetch_offset: int, upper_bound_offset: int
) -> tuple[list[AbortedTxn], bool]:
    """Kafka's collectAbortedTxns over one index: the entries overlapping
    [fetch_offset, upper_bound_offset), and whether the search is complete (an entry's LSO
    reached the upper bound: no later segment can hold an overlapping one)."""
    found = []
    for e in entries:
        if e.last_offset >= fetch_offset and e.first_offset < upper_bound_offset:
            found.append(e)
        if e.last_stable_offset >= upper_bound_offset:
            return found, True
    return found, False


class TransactionIndex:
    def __init__(self, path: Path, *, fresh: bool = False) -> None:
        """`fresh`: a new segment's index, empty (any file left at its path is overwritten by
        the first entry), so it is never read."""
        self.path = path
        self._entries: list[AbortedTxn] | None = [] if fresh else None  # None: not read yet

    @property
    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            self._entries = self._read()
        return self._entries

    def _read(self) -> list[AbortedTxn]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        whole = len(data) - len(data) % ENTRY_SIZE
        out: list[AbortedTxn] = []
        for position in range(0, whole, ENTRY_SIZE):
            try:
                out.append(AbortedTxn.decode(data, position))
            except ValueError:
                break
        if len(out) * ENTRY_SIZE != len(data):  # a torn or damaged tail: keep what parsed
            os.truncate(self.path, len(out) * ENTRY_SIZE)
        return out

    def append(self, entry: AbortedTxn) -> None:
        """Entries come in marker order; one already there (a replay) is not written again."""
        entries = self.entries
        if entries and entry.last_offset <= entries[-1].last_offset:
            return
        with open(self.path, "ab" if entries else "wb") as fh:
            fh.write(entry.encode())
        entries.append(entry)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or above `offset`."""
        entries = self.entries
        keep = [e for e in entries if e.last_offset < offset]
        if len(keep) == len(entries):
            return
        self._entries = keep
        if keep:
            os.truncate(self.path, len(keep) * ENTRY_SIZE)
        else:
            self.path.unlink(missing_ok=True)

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        return collect_aborted(self.entries, fetch_offset, upper_bound_offset)

    def forget(self) -> None:
        """The file was renamed or replaced: read it again on next use."""
        self._entries = None
