"""Log compaction (Kafka's log cleaner) for `cleanup.policy=compact` and `compact,delete`.

A compacted log keeps, for each key, at least its latest record. The log is seen in three
parts: the *clean* section (below the cleaner checkpoint, already compacted), the *dirty*
section (from the checkpoint to the *first uncleanable offset*) and the rest (never
cleaned: the active segment, offsets at or above the high watermark, and segments younger
than `min.compaction.lag.ms` by their largest timestamp). One cleaning:

1. `plan` (on the loop): a snapshot of the sealed segments below the first uncleanable
   offset, the checkpoint, the config and the time. Nothing is read.
2. `clean` (off the loop: the cleaner thread): checks the triggers (dirty bytes /
   (clean + dirty bytes) >= `min.cleanable.dirty.ratio`, or the oldest dirty batch older
   than `max.compaction.lag.ms`, or a tombstone's delete horizon passed), builds the offset
   map key -> latest offset over the dirty section, then rewrites the clean and dirty
   segments, grouped so that a group stays within `segment.bytes` (and 2^31 offsets), into
   `<base>.log.cleaned` files (with indexes) and fsyncs them.
   A record is kept when its offset is the latest of its key in the map (or its key is not
   in it); a keyless record is dropped. A batch whose records are all kept is copied as it
   is; otherwise its kept records are re-batched with their own offsets and timestamps,
   the batch's leader epoch, attributes (same codec) and producer fields (`encode_records`).
   Offsets are never rewritten: a cleaned log has gaps.
3. `swap` (on the loop): if the log still holds exactly the segments cleaned (no
   truncation, retention or deletion meanwhile), the `.cleaned` files are renamed `.swap`
   (and the directory fsynced), the old segments deleted (renamed `.deleted`) and the
   `.swap` files renamed `.log`, in one loop step, so a reader sees either the old
   segments or the new ones. Otherwise the `.cleaned` files are discarded. Only a verified
   swap ever has `.swap` files: a crash after their rename is finished by
   `PartitionLog.open`, one before it discards the `.cleaned` files.

Transactions (Kafka 3.9's LogCleaner and CleanedTransactionMetadata): the first uncleanable
offset is also at most the last stable offset, so no record of an open transaction, or of
one whose marker the HW has not passed, is cleaned. Records of aborted transactions (the
`.txnindex` entries of the cleaned range) never enter the offset map, so an aborted record
never removes an older record of its key, and every batch of an aborted transaction is
removed when its segment is cleaned. A cleaning walks the batches in offset order
(`TxnCleaning`) and decides for each marker (control batch):

- ABORT: kept while a batch of its transaction was met in this cleaning (the data goes
  first); else it may go;
- COMMIT: kept while a batch of its transaction was met in this cleaning (its data is still
  there); else it may go;
- a marker that may go is not removed at once: like a tombstone, the first cleaning rewrites
  it with a delete horizon (now + `delete.retention.ms`, so a consumer that read the data
  also reads the marker), and the first cleaning after that time removes it.

A read_committed reader's view never changes: an aborted record goes before its marker, a
marker goes only once no record of its transaction is left. (Kafka also keeps an emptied
batch that holds an active producer's last sequence; this cleaner drops it, so a producer
whose every batch was cleaned away is known again only from the producer-state snapshots.)

Tombstones (a null value) follow KIP-534: the first cleaning that keeps a tombstone
rewrites its batch with a delete horizon (`ATTR_DELETE_HORIZON`, baseTimestamp = now +
`delete.retention.ms`); a later cleaning after that time drops it.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from broker.log.compression import DecompressionError
from broker.log.config import LogConfig
from broker.log.control_records import MarkerError, decode_marker_batch
from broker.log.partition_log import CLEANED_SUFFIX, PartitionLog
from broker.log.records import BatchHeader, Record, RecordsError, batch_records, encode_records
from broker.log.segment import LogSegment
from broker.log.txn_index import AbortedTxn
from quorum.storage.batch_layout import ATTR_CONTROL, ATTR_DELETE_HORIZON, ATTR_TRANSACTIONAL, HEADER
from quorum.storage.durable import fsync_dir
from quorum.storage.record_batch import BatchFrame, scan_frames

log = logging.getLogger(__name__)

CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
# How much of a segment is read at once while walking its batches (bytes).
_CHUNK = 1024 * 1024
_I32_MAX = 2**31 - 1
# The most keys one cleaning maps (Kafka: log.cleaner.dedupe.buffer.size 128 MiB at 24 bytes an
# entry and a 0.9 load factor, ~5 million); a dirty section with more is cleaned in parts.
DEFAULT_MAX_MAP_KEYS = 5_000_000


@dataclass(frozen=True, slots=True)
class SourceSegment:
    segment: LogSegment
    base: int
    end: int  # the next segment's base offset: every offset of this one is below it
    size: int  # bytes
    path: Path


@dataclass(frozen=True, slots=True)
class CleanPlan:
    log: PartitionLog
    segments: tuple[SourceSegment, ...]  # sealed, contiguous, from the log's first segment
    first_dirty: int  # the cleaner checkpoint, clamped to the log
    first_uncleanable: int  # min(active segment base, last stable offset)
    truncations: int
    config: LogConfig
    now_ms: int
    delete_horizon_due: bool  # a tombstone kept by an earlier cleaning may go now
    aborted: tuple[AbortedTxn, ...] = ()  # the aborted transactions overlapping the cleanable range


@dataclass(frozen=True, slots=True)
class CleanedGroup:
    sources: tuple[SourceSegment, ...]
    base: int  # the base offset of the `.swap` segment that replaces them


@dataclass(frozen=True, slots=True)
class CleanResult:
    plan: CleanPlan
    groups: tuple[CleanedGroup, ...]
    end_of_dirty: int  # the new cleaner checkpoint
    next_delete_horizon_ms: int  # the earliest horizon of a kept tombstone (-1: none)
    bytes_before: int
    bytes_after: int


def now_ms() -> int:
    return int(time.time() * 1000)


# ---------------------------------------------------------------------- on the loop


def plan(plog: PartitionLog, first_dirty: int, high_watermark: int, now: int, next_delete_horizon_ms: int) -> CleanPlan:
    """The snapshot of what a cleaning may touch (on the loop; no IO)."""
    uncleanable = min(plog.active.base_offset, plog.last_stable_offset(high_watermark))
    sources = []
    for i, seg in enumerate(plog.segments[:-1]):
        end = plog.segments[i + 1].base_offset
        if end > uncleanable:
            break
        sources.append(SourceSegment(seg, seg.base_offset, end, seg.size, seg.path))
    start = plog.segments[0].base_offset
    if not start <= first_dirty <= uncleanable:
        first_dirty = start  # no checkpoint, or one a truncation made stale: all of it is dirty
    due = 0 <= next_delete_horizon_ms <= now
    aborted = tuple(plog.aborted_transactions(start, uncleanable)) if uncleanable > start else ()
    return CleanPlan(plog, tuple(sources), first_dirty, uncleanable, plog.truncations, plog.config, now, due, aborted)


def swap(result: CleanResult) -> bool:
    """Put the cleaned segments in place of their sources (on the loop), or discard them when
    the log changed meanwhile. True when swapped."""
    p = result.plan
    plog = p.log
    current = plog.segments
    still_there = (
        not plog.closed
        and plog.truncations == p.truncations
        and all(
            i < len(current) - 1 and current[i] is s.segment
            for i, s in enumerate(p.segments[: sum(len(g.sources) for g in result.groups)])
        )
    )
    if not still_there:
        for group in result.groups:
            discard(plog.directory, group.base, CLEANED_SUFFIX)
        return False
    plog.replace_segments([(tuple(s.segment for s in g.sources), g.base) for g in result.groups])
    return True


# ---------------------------------------------------------------------- off the loop


def clean(p: CleanPlan, *, max_map_keys: int = DEFAULT_MAX_MAP_KEYS) -> CleanResult | None:
    """One cleaning's IO (the cleaner thread): None when the log needs none (or changed)."""
    cfg = p.config
    try:
        return _clean(p, cfg, max_map_keys)
    except FileNotFoundError:
        return None  # a source segment was deleted meanwhile (retention, truncation)


def _clean(p: CleanPlan, cfg: LogConfig, max_map_keys: int) -> CleanResult | None:
    clean_part = [s for s in p.segments if s.end <= p.first_dirty]
    dirty_all = [s for s in p.segments if s.end > p.first_dirty]
    # min.compaction.lag.ms: dirty segments from the first one holding a record younger than
    # the lag on stay dirty.
    dirty: list[SourceSegment] = []
    for s in dirty_all:
        if cfg.min_compaction_lag_ms > 0 and _largest_timestamp(s) > p.now_ms - cfg.min_compaction_lag_ms:
            break
        dirty.append(s)
    clean_bytes = sum(s.size for s in clean_part)
    dirty_bytes = sum(s.size for s in dirty)
    ratio = dirty_bytes / (clean_bytes + dirty_bytes) if dirty_bytes else 0.0
    overdue = bool(dirty) and p.now_ms - _first_batch_timestamp(dirty[0]) > cfg.max_compaction_lag_ms
    if not (dirty and (ratio >= cfg.min_cleanable_dirty_ratio or overdue)) and not p.delete_horizon_due:
        return None
    offset_map: dict[bytes, int] = {}
    mapped: list[SourceSegment] = []
    for s in dirty:
        keys = _latest_offsets(s, p.aborted)
        if mapped and len(offset_map) + len(keys) > max_map_keys:
            break  # the rest waits for the next cleaning
        for key, offset in keys.items():
            offset_map[key] = offset
        mapped.append(s)
    end_of_dirty = mapped[-1].end if mapped else p.first_dirty
    to_clean = clean_part + mapped
    if not to_clean:
        return None
    groups: list[CleanedGroup] = []
    horizon = -1
    txns = TxnCleaning(p.aborted)
    for group in _groups(to_clean, cfg):
        h = _clean_group(p, group, offset_map, txns)
        if h >= 0:
            horizon = h if horizon < 0 else min(horizon, h)
        groups.append(CleanedGroup(tuple(group), group[0].base))
    fsync_dir(p.log.directory)
    after = sum(_cleaned_size(p.log.directory, g.base) for g in groups)
    return CleanResult(p, tuple(groups), end_of_dirty, horizon, sum(s.size for s in to_clean), after)


def _groups(segments: list[SourceSegment], cfg: LogConfig) -> Iterator[list[SourceSegment]]:
    """Consecutive segments whose sizes add up to at most segment.bytes (offset span < 2^31)."""
    group: list[SourceSegment] = []
    size = 0
    for s in segments:
        if group and (size + s.size > cfg.segment_bytes or s.end - 1 - group[0].base > _I32_MAX):
            yield group
            group, size = [], 0
        group.append(s)
        size += s.size
    if group:
        yield group


def _batches(s: SourceSegment) -> Iterator[tuple[BatchFrame, bytes]]:
    """Each batch of a source segment with its bytes, read through a descriptor of our own
    (the log may delete the segment meanwhile: then the swap is refused)."""
    fd = os.open(s.path, os.O_RDONLY)
    try:
        position = 0
        while position < s.size:
            chunk = os.pread(fd, _CHUNK, position)
            scan = scan_frames(chunk, verify_crc=False)
            if not scan.frames:
                head = os.pread(fd, HEADER.size, position)
                if len(head) < HEADER.size:
                    return
                length = int.from_bytes(head[8:12], "big", signed=True)
                chunk = os.pread(fd, 12 + length, position)
                scan = scan_frames(chunk, verify_crc=False, limit=1)
                if not scan.frames:
                    raise OSError(f"{s.path}: unreadable batch at position {position}")
            for f in scan.frames:
                yield f, chunk[f.position : f.position + f.size]
            position += scan.consumed
    finally:
        os.close(fd)


def _largest_timestamp(s: SourceSegment) -> int:
    return max((f.max_timestamp for f, _ in _batches(s)), default=-1)


def _first_batch_timestamp(s: SourceSegment) -> int:
    for f, _ in _batches(s):
        return f.max_timestamp
    return 2**63 - 1  # an empty segment is not overdue


# (offset, timestamp ms, key, value, headers) of one record
_Decoded = tuple[int, int, bytes | None, bytes | None, tuple[tuple[bytes, bytes | None], ...]]


def _records(f: BatchFrame, data: bytes, where: Path) -> list[_Decoded]:
    try:
        return [(o, t, r.key, r.value, r.headers) for o, t, r in batch_records(data, payloads=True)]
    except (RecordsError, DecompressionError) as exc:
        # It passed its CRC when appended: damage on disk. Kept as it is, never half-cleaned.
        log.warning("%s: the batch at offset %d does not parse (%s); kept as it is", where, f.base_offset, exc)
        return []


class TxnCleaning:
    """Which transactional batches and markers one cleaning may drop (Kafka's
    CleanedTransactionMetadata), fed every batch of the cleaned range in offset order."""

    def __init__(self, aborted: tuple[AbortedTxn, ...]) -> None:
        self._aborted = sorted(aborted, key=lambda t: t.first_offset)  # not reached yet
        self._next = 0
        # Producer id -> whether a batch of its aborted transaction was met (the transaction
        # started at or before the batches walked so far, its marker not walked yet).
        self._ongoing_aborted: dict[int, bool] = {}
        self._ongoing_committed: set[int] = set()  # producers with a batch of a non-aborted txn met

    def _reach(self, offset: int) -> None:
        while self._next < len(self._aborted) and self._aborted[self._next].first_offset <= offset:
            self._ongoing_aborted.setdefault(self._aborted[self._next].producer_id, False)
            self._next += 1

    def on_data(self, f: BatchFrame) -> bool:
        """A data batch: True when it belongs to an aborted transaction (drop it whole)."""
        self._reach(f.last_offset)
        if not f.attributes & ATTR_TRANSACTIONAL:
            return False
        if f.producer_id in self._ongoing_aborted:
            self._ongoing_aborted[f.producer_id] = True
            return True
        self._ongoing_committed.add(f.producer_id)
        return False

    def on_marker(self, f: BatchFrame, committed: bool | None) -> bool:
        """A control batch (`committed`: its marker's kind; None: it holds no marker): True
        when no batch of its transaction was met, so it may go (after its delete horizon)."""
        self._reach(f.last_offset)
        if committed is None:
            return True
        if committed:
            met = f.producer_id in self._ongoing_committed
            self._ongoing_committed.discard(f.producer_id)
            return not met
        return not self._ongoing_aborted.pop(f.producer_id, False)


def _is_aborted(f: BatchFrame, aborted: tuple[AbortedTxn, ...]) -> bool:
    """A transactional batch of an aborted transaction (between its first offset and marker)."""
    return bool(f.attributes & ATTR_TRANSACTIONAL) and any(
        t.producer_id == f.producer_id and t.first_offset <= f.base_offset < t.last_offset for t in aborted
    )


def _latest_offsets(s: SourceSegment, aborted: tuple[AbortedTxn, ...]) -> dict[bytes, int]:
    latest: dict[bytes, int] = {}
    for f, data in _batches(s):
        if f.attributes & ATTR_CONTROL or _is_aborted(f, aborted):
            continue
        for offset, _ts, key, _v, _h in _records(f, data, s.path):
            if key is not None:
                latest[key] = offset
    return latest


def _clean_group(p: CleanPlan, group: list[SourceSegment], offset_map: dict[bytes, int], txns: TxnCleaning) -> int:
    """Write the group's kept records into `<base>.log.swap` (through `.cleaned`, fsynced).
    Returns the earliest delete horizon of a tombstone kept (-1: none)."""
    cfg = p.config
    directory = p.log.directory
    base = group[0].base
    discard(directory, base, CLEANED_SUFFIX)
    out = LogSegment(
        directory, base, cfg.segment_index_bytes, cfg.index_interval_bytes, fresh=True, suffix=CLEANED_SUFFIX
    )
    horizon_kept = -1
    try:
        for s in group:
            for f, data in _batches(s):
                kept, horizon = _filter_batch(p, f, data, offset_map, s.path, txns)
                if horizon >= 0:
                    horizon_kept = horizon if horizon_kept < 0 else min(horizon_kept, horizon)
                if kept:
                    out.append(kept, scan_frames(kept, verify_crc=False).frames)
        out.next_offset = max(out.next_offset, base)
        out.seal()
        out.flush()
    finally:
        out.close()
    return horizon_kept


def _filter_marker(p: CleanPlan, f: BatchFrame, data: bytes, txns: TxnCleaning, where: Path) -> tuple[bytes, int]:
    """A control batch: kept as it is while its transaction has data here; else rewritten with
    a delete horizon, and dropped by the first cleaning after it (see the module docstring)."""
    try:
        decoded = decode_marker_batch(data)
    except MarkerError as exc:
        log.warning("%s: the control batch at offset %d does not parse (%s); kept as it is", where, f.base_offset, exc)
        return data, -1
    if not txns.on_marker(f, None if decoded is None else decoded[0].committed):
        return data, -1
    horizon = f.base_timestamp if f.attributes & ATTR_DELETE_HORIZON else -1
    if horizon >= 0:
        return (b"", -1) if horizon <= p.now_ms else (data, horizon)
    records = _records(f, data, where)
    if not records:
        return b"", -1  # an emptied control batch: nothing to keep
    horizon = p.now_ms + p.config.delete_retention_ms
    fields = HEADER.unpack_from(data, 0)
    header = BatchHeader(
        f.leader_epoch, f.attributes, f.producer_id, producer_epoch=fields[10], base_sequence=fields[11],
        max_timestamp=f.max_timestamp, delete_horizon_ms=horizon,
    )  # fmt: skip
    return encode_records([Record(o, ts, k, v, h) for o, ts, k, v, h in records], header), horizon


def _filter_batch(
    p: CleanPlan, f: BatchFrame, data: bytes, offset_map: dict[bytes, int], where: Path, txns: TxnCleaning
) -> tuple[bytes, int]:
    """The batch's bytes to keep (b"" for none) and the delete horizon it carries when it keeps
    a tombstone or a marker that may go (-1 otherwise)."""
    if f.attributes & ATTR_CONTROL:
        return _filter_marker(p, f, data, txns, where)
    if txns.on_data(f):
        return b"", -1  # a batch of an aborted transaction
    records = _records(f, data, where)
    if not records:
        return data, -1
    horizon = f.base_timestamp if f.attributes & ATTR_DELETE_HORIZON else -1
    kept = []
    tombstones = False
    for offset, ts, key, value, headers in records:
        if key is None or offset < offset_map.get(key, -1):
            continue  # keyless, or shadowed by a later record of its key
        if value is None:
            if 0 <= horizon <= p.now_ms:
                continue  # a tombstone past its delete horizon
            tombstones = True
        kept.append(Record(offset, ts, key, value, headers))
    if not kept:
        return b"", -1
    new_horizon = horizon
    if tombstones and horizon < 0:
        new_horizon = p.now_ms + p.config.delete_retention_ms
    if len(kept) == len(records) and new_horizon == horizon:
        return data, horizon if tombstones else -1
    fields = HEADER.unpack_from(data, 0)
    header = BatchHeader(
        f.leader_epoch, f.attributes, f.producer_id, producer_epoch=fields[10], base_sequence=fields[11],
        max_timestamp=f.max_timestamp, delete_horizon_ms=new_horizon if tombstones else -1,
    )  # fmt: skip
    return encode_records(kept, header), new_horizon if tombstones else -1


# ---------------------------------------------------------------------- files


def _files(directory: Path, base: int, suffix: str) -> list[Path]:
    return [directory / f"{base:020d}{ext}{suffix}" for ext in (".log", ".index", ".timeindex")]


def _cleaned_size(directory: Path, base: int) -> int:
    try:
        return os.stat(directory / f"{base:020d}.log{CLEANED_SUFFIX}").st_size
    except FileNotFoundError:
        return 0


def discard(directory: Path, base: int, suffix: str) -> None:
    for path in _files(directory, base, suffix):
        path.unlink(missing_ok=True)
