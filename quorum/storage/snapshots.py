"""`SnapshotStore`: KIP-630 snapshot files, and the layout of a snapshot's contents.

Files live in the partition directory (`__cluster_metadata-0/`) next to the log
segments, named `<20-digit end offset>-<10-digit epoch>.checkpoint`; the snapshot id
is (end offset exclusive, epoch of the last contained record). A snapshot becomes
visible only complete and durable: it is written as `<name>.checkpoint.part`,
fsynced, renamed, and the directory fsynced. Leftover `.part` files (a crash while
writing or receiving) are deleted when the store is constructed.

Contents (Kafka's layout): consecutive magic-v2 batches numbered from offset 0
inside the snapshot: a SNAPSHOT_HEADER control batch, data batches of record
values, and a SNAPSHOT_FOOTER control batch; every batch has epoch = snapshot epoch.
"""

from __future__ import annotations

import builtins
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from quorum.raft.control_records import (
    SnapshotHeader,
    decode_snapshot_footer,
    decode_snapshot_header,
    encode_snapshot_footer,
    encode_snapshot_header,
)
from quorum.raft.kraft_control import decode_kraft_version, decode_voters, kraft_version_batch, voters_batch
from quorum.raft.types import Batch, ControlType, OffsetAndEpoch
from quorum.raft.voter_set import KRAFT_VERSION_DYNAMIC, VoterSet
from quorum.storage.durable import atomic_write, fsync_dir, write_all
from quorum.storage.record_batch import CorruptRecordError, decode_batches, encode_batch

__all__ = [
    "SnapshotStore",
    "SnapshotVoters",
    "decode_snapshot",
    "decode_snapshot_full",
    "decode_snapshot_with_header",
    "encode_snapshot",
    "snapshot_file_name",
]

_SUFFIX = ".checkpoint"
_PART_SUFFIX = ".checkpoint.part"
_NAME_RE = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")


def snapshot_file_name(sid: OffsetAndEpoch) -> str:
    """`<20-digit end offset>-<10-digit epoch>.checkpoint` (KIP-630)."""
    if sid.offset < 0 or sid.epoch < 0:
        raise ValueError(f"invalid snapshot id {sid}")
    return f"{sid.offset:020d}-{sid.epoch:010d}{_SUFFIX}"


@dataclass(slots=True)
class _Receive:
    """A snapshot being received: `received` bytes of `size` are in the `.part` file at `path`."""

    fd: int
    path: Path
    size: int
    received: int = 0


class SnapshotStore:
    """Snapshot files of one partition directory; see the module docstring."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._receiving: dict[OffsetAndEpoch, _Receive] = {}
        stale = [p for p in self.directory.iterdir() if p.name.endswith(_PART_SUFFIX)]
        for path in stale:
            path.unlink(missing_ok=True)
        if stale:
            fsync_dir(self.directory)

    # ------------------------------------------------------------------ naming / listing

    def path(self, sid: OffsetAndEpoch) -> Path:
        return self.directory / snapshot_file_name(sid)

    def _part_path(self, sid: OffsetAndEpoch) -> Path:
        return self.directory / (snapshot_file_name(sid) + ".part")

    def list(self) -> builtins.list[OffsetAndEpoch]:
        """Complete snapshots, sorted by end offset (then epoch)."""
        ids = []
        for name in os.listdir(self.directory):
            m = _NAME_RE.match(name)
            if m is not None:
                ids.append(OffsetAndEpoch(epoch=int(m.group(2)), offset=int(m.group(1))))
        ids.sort(key=lambda s: (s.offset, s.epoch))
        return ids

    def latest(self) -> OffsetAndEpoch | None:
        """The snapshot with the highest end offset, or None."""
        ids = self.list()
        return ids[-1] if ids else None

    def contains(self, sid: OffsetAndEpoch) -> bool:
        return self.path(sid).is_file()

    # ------------------------------------------------------------------ reading

    def size(self, sid: OffsetAndEpoch) -> int:
        """Size in bytes. Raises FileNotFoundError if there is no such snapshot."""
        return self.path(sid).stat().st_size

    def read(self, sid: OffsetAndEpoch, position: int, max_bytes: int) -> bytes:
        """Up to `max_bytes` raw bytes from byte `position` (b"" at the end).

        Raises FileNotFoundError for an unknown snapshot and ValueError if `position`
        is outside [0, size] or `max_bytes` is negative.
        """
        if max_bytes < 0:
            raise ValueError("max_bytes must be >= 0")
        fd = os.open(self.path(sid), os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            if position < 0 or position > size:
                raise ValueError(f"position {position} outside snapshot {sid} of {size} bytes")
            want = min(max_bytes, size - position)
            chunks: builtins.list[bytes] = []
            while want > 0:
                chunk = os.pread(fd, want, position)
                if not chunk:
                    break
                chunks.append(chunk)
                position += len(chunk)
                want -= len(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def read_all(self, sid: OffsetAndEpoch) -> bytes:
        return self.path(sid).read_bytes()

    # ------------------------------------------------------------------ writing

    def create(self, sid: OffsetAndEpoch, data: bytes) -> Path:
        """Durably write a complete snapshot (replacing one with the same id); return its path."""
        return atomic_write(self.path(sid), data, tmp=self._part_path(sid))

    def begin_receive(self, sid: OffsetAndEpoch, size: int) -> None:
        """Start receiving snapshot `sid` of `size` bytes (restarting any receive of it)."""
        if size < 0:
            raise ValueError("size must be >= 0")
        self.abort_receive(sid)
        path = self._part_path(sid)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self._receiving[sid] = _Receive(fd, path, size)

    def receiving(self, sid: OffsetAndEpoch) -> int | None:
        """Bytes received so far of `sid`, or None if it is not being received."""
        rx = self._receiving.get(sid)
        return None if rx is None else rx.received

    def write_chunk(self, sid: OffsetAndEpoch, position: int, data: bytes) -> None:
        """Append `data` at byte `position`, which must equal the bytes received so far."""
        rx = self._receiving.get(sid)
        if rx is None:
            raise ValueError(f"snapshot {sid} is not being received")
        if position != rx.received:
            raise ValueError(f"snapshot {sid}: chunk at {position}, expected {rx.received}")
        if rx.received + len(data) > rx.size:
            raise ValueError(f"snapshot {sid}: chunk ends at {rx.received + len(data)}, past size {rx.size}")
        write_all(rx.fd, data)
        rx.received += len(data)

    def finish_receive(self, sid: OffsetAndEpoch) -> Path:
        """Make a fully received snapshot durable and visible; return its path."""
        rx = self._receiving.get(sid)
        if rx is None:
            raise ValueError(f"snapshot {sid} is not being received")
        if rx.received != rx.size:
            raise ValueError(f"snapshot {sid}: received {rx.received} of {rx.size} bytes")
        del self._receiving[sid]
        try:
            try:
                os.fsync(rx.fd)
            finally:
                os.close(rx.fd)
            final = self.path(sid)
            os.replace(rx.path, final)
        except BaseException:
            rx.path.unlink(missing_ok=True)
            raise
        fsync_dir(self.directory)
        return final

    def abort_receive(self, sid: OffsetAndEpoch) -> None:
        """Forget a partial receive of `sid` and delete its `.part` file (no-op if none)."""
        rx = self._receiving.pop(sid, None)
        if rx is not None:
            os.close(rx.fd)
            rx.path.unlink(missing_ok=True)

    # ------------------------------------------------------------------ deletion

    def delete(self, sid: OffsetAndEpoch) -> None:
        self.path(sid).unlink(missing_ok=True)
        fsync_dir(self.directory)

    def delete_before(self, sid: OffsetAndEpoch) -> builtins.list[OffsetAndEpoch]:
        """Delete every snapshot other than `sid` whose end offset is <= sid.offset; return them."""
        doomed = [s for s in self.list() if s != sid and s.offset <= sid.offset]
        for s in doomed:
            self.path(s).unlink(missing_ok=True)
        if doomed:
            fsync_dir(self.directory)
        return doomed

    def close(self) -> None:
        """Abort receives in progress (their `.part` files are deleted)."""
        for sid in builtins.list(self._receiving):
            self.abort_receive(sid)


# --------------------------------------------------------------------------- contents


@dataclass(frozen=True, slots=True)
class SnapshotVoters:
    """KIP-853's records in a snapshot: the kraft.version and the voter set in force at its end."""

    kraft_version: int
    voters: VoterSet | None  # None with kraft.version 0 (static voters: no VotersRecord)


def encode_snapshot(
    sid: OffsetAndEpoch,
    records: Sequence[bytes],
    *,
    last_contained_timestamp_ms: int,
    batch_records: int = 1000,
    voters: SnapshotVoters | None = None,
) -> bytes:
    """Snapshot file contents: header batch, [KRaftVersionRecord, VotersRecord batches,] data
    batches of <= `batch_records` values, footer (Kafka's order).

    Batches are numbered from offset 0 and carry epoch `sid.epoch` and timestamp
    `last_contained_timestamp_ms`. `voters` is written only with kraft.version 1 and up.
    """
    if batch_records < 1:
        raise ValueError("batch_records must be >= 1")
    epoch = sid.epoch
    ts = last_contained_timestamp_ms
    parts = [
        encode_batch(
            Batch(0, epoch, (encode_snapshot_header(ts),), ts, ControlType.SNAPSHOT_HEADER),
        )
    ]
    offset = 1
    if voters is not None and voters.kraft_version >= KRAFT_VERSION_DYNAMIC and voters.voters is not None:
        parts.append(encode_batch(kraft_version_batch(offset, epoch, voters.kraft_version, ts)))
        parts.append(encode_batch(voters_batch(offset + 1, epoch, voters.voters, ts)))
        offset += 2
    for start in range(0, len(records), batch_records):
        chunk = tuple(records[start : start + batch_records])
        parts.append(encode_batch(Batch(offset, epoch, chunk, ts)))
        offset += len(chunk)
    parts.append(encode_batch(Batch(offset, epoch, (encode_snapshot_footer(),), ts, ControlType.SNAPSHOT_FOOTER)))
    return b"".join(parts)


def decode_snapshot_with_header(data: bytes | bytearray | memoryview) -> tuple[SnapshotHeader, list[bytes]]:
    """Parse snapshot contents into (header, data record values).

    Raises CorruptRecordError on a CRC failure, a truncated file, a missing or
    misplaced header/footer, or offsets not contiguous from 0.
    """
    header, values, _ = decode_snapshot_full(data)
    return header, values


def decode_snapshot_full(
    data: bytes | bytearray | memoryview,
) -> tuple[SnapshotHeader, list[bytes], SnapshotVoters | None]:
    """(header, data record values, KIP-853 records or None when it holds none)."""
    buf = data if type(data) is bytes else bytes(data)
    batches, consumed = decode_batches(buf)
    if consumed != len(buf):
        raise CorruptRecordError(f"snapshot truncated: {len(buf) - consumed} trailing bytes of an incomplete batch")
    if len(batches) < 2:
        raise CorruptRecordError("snapshot lacks a header or footer batch")
    first, last = batches[0], batches[-1]
    if first.control_type is not ControlType.SNAPSHOT_HEADER or len(first.records) != 1:
        raise CorruptRecordError("snapshot does not start with a SnapshotHeaderRecord")
    if last.control_type is not ControlType.SNAPSHOT_FOOTER or len(last.records) != 1:
        raise CorruptRecordError("snapshot does not end with a SnapshotFooterRecord")
    header = decode_snapshot_header(first.records[0])
    decode_snapshot_footer(last.records[0])
    expected = 0
    values: list[bytes] = []
    for batch in batches:
        if batch.base_offset != expected:
            raise CorruptRecordError(f"snapshot batch at offset {batch.base_offset}, expected {expected}")
        expected = batch.end_offset
    kraft_version: int | None = None
    voter_set: VoterSet | None = None
    for batch in batches[1:-1]:
        if batch.control_type is None:
            values.extend(batch.records)
        elif batch.control_type in (ControlType.SNAPSHOT_HEADER, ControlType.SNAPSHOT_FOOTER):
            raise CorruptRecordError("snapshot header/footer in the middle of a snapshot")
        elif batch.control_type is ControlType.KRAFT_VERSION and batch.records:
            kraft_version = decode_kraft_version(batch.records[-1])
        elif batch.control_type is ControlType.KRAFT_VOTERS and batch.records:
            voter_set = decode_voters(batch.records[-1])
        # Other control batches carry no state-machine records.
    if kraft_version is None and voter_set is None:
        return header, values, None
    return header, values, SnapshotVoters(KRAFT_VERSION_DYNAMIC if kraft_version is None else kraft_version, voter_set)


def decode_snapshot(data: bytes | bytearray | memoryview) -> list[bytes]:
    """The data record values of a snapshot, in order (see `decode_snapshot_with_header`)."""
    return decode_snapshot_with_header(data)[1]
