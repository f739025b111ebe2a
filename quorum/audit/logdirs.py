"""Metadata log copies on disk, decoded into one row per record.

A *copy* is one node's `__cluster_metadata-0` directory: segments `<20-digit base>.log`
(FileLog's naming) and snapshots `<20-digit end offset>-<10-digit epoch>.checkpoint`
(SnapshotStore's naming). A path given by the user may be that directory, a node's
metadata log dir that holds it, or a node's directory (`<node dir>/data/...`, the layout of
`quorum.node.cluster`). The node id comes from `meta.properties` next to the directory
(`node.id=`) when it is there.

Every file decodes independently (one Spark partition each) with the storage layer's own
`scan_batches`, which never raises: a batch that fails its CRC or framing becomes one row
with `valid = false`, after which reading resumes at the next batch when the bad batch's
length field can be trusted; an incomplete batch at the end of a file (a torn tail) is one
invalid row too. Records decode with `decode_record_with_version` (the controller's codec)
and control records with `decode_leader_change` & co; a record that does not decode is an
invalid row of its own.

`ROW_FIELDS` is the row layout (and the Spark schema, see `quorum.audit.source`).
Snapshot rows carry the snapshot's internal offsets (0 = its header batch) and
`snapshot_end_offset` / `snapshot_epoch`; segment rows carry log offsets.
"""

from __future__ import annotations

import json
import os
import re
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quorum.metadata.errors import RecordDecodeError
from quorum.metadata.records import (
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    decode_record_with_version,
    kafka_uuid_string,
    record_to_json,
    record_type_name,
)
from quorum.raft.control_records import decode_leader_change, decode_snapshot_footer, decode_snapshot_header
from quorum.raft.types import Batch, ControlType
from quorum.storage.batch_layout import BASE_TIMESTAMP_AT
from quorum.storage.record_batch import CorruptRecordError, peek_batch_header, scan_batches
from quorum.storage.snapshots import decode_snapshot_with_header

__all__ = [
    "METADATA_PARTITION_DIR",
    "ROW_FIELDS",
    "AuditInputError",
    "LogCopy",
    "Row",
    "SourceFile",
    "read_source_file",
    "resolve_copies",
]

METADATA_PARTITION_DIR = "__cluster_metadata-0"
_SEGMENT_RE = re.compile(r"^(\d{20})\.log$")
_SNAPSHOT_RE = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
_I64 = struct.Struct(">q")


class AuditInputError(ValueError):
    """A path given to the audit is not a metadata log directory."""


# --------------------------------------------------------------------------- the row layout

# (name, Spark SQL type). The order is the order of every row tuple.
ROW_FIELDS: tuple[tuple[str, str], ...] = (
    ("node_id", "INT"),
    ("log_dir", "STRING"),
    ("source_file", "STRING"),
    ("source_kind", "STRING"),  # 'segment' | 'snapshot'
    ("snapshot_end_offset", "BIGINT"),
    ("snapshot_epoch", "INT"),
    ("position", "BIGINT"),  # byte position of the record's batch in its file
    ("batch_base_offset", "BIGINT"),
    ("batch_last_offset", "BIGINT"),
    ("offset", "BIGINT"),
    ("leader_epoch", "INT"),  # the batch's partitionLeaderEpoch (the controller epoch)
    ("batch_timestamp_ms", "BIGINT"),
    ("is_control", "BOOLEAN"),
    ("record_type", "STRING"),  # e.g. PARTITION_CHANGE_RECORD, LEADER_CHANGE; NULL when invalid
    ("record_version", "INT"),
    ("valid", "BOOLEAN"),
    ("error_kind", "STRING"),  # crc_mismatch | corrupt_batch | torn_tail | bad_record | bad_snapshot
    ("error", "STRING"),
    # typed columns of the common fields
    ("broker_id", "INT"),
    ("broker_epoch", "BIGINT"),
    ("fenced", "BOOLEAN"),  # the fenced state the record sets (NULL: unchanged)
    ("in_controlled_shutdown", "BOOLEAN"),
    ("rack", "STRING"),
    ("topic_id", "STRING"),  # Kafka's base64 form
    ("topic_name", "STRING"),
    ("partition_id", "INT"),
    ("leader", "INT"),  # PartitionRecord/PartitionChangeRecord (-2: no change), LeaderChange leader id
    ("isr", "ARRAY<INT>"),
    ("replicas", "ARRAY<INT>"),
    ("leader_recovery_state", "INT"),
    ("config_resource_type", "INT"),
    ("config_resource_name", "STRING"),
    ("config_name", "STRING"),
    ("config_value", "STRING"),
    ("feature_name", "STRING"),
    ("feature_level", "INT"),
    ("voters", "ARRAY<INT>"),  # LeaderChange
    ("record_json", "STRING"),  # the whole record (Kafka's JSON form)
    ("value", "BINARY"),  # the record's bytes, as stored
)
FIELD_INDEX = {name: i for i, (name, _) in enumerate(ROW_FIELDS)}
_N_TYPED = 19  # broker_id .. voters
_TYPED_START = FIELD_INDEX["broker_id"]
assert FIELD_INDEX["voters"] - _TYPED_START + 1 == _N_TYPED
_EMPTY_TYPED: tuple[None, ...] = (None,) * _N_TYPED

Row = tuple[Any, ...]


# --------------------------------------------------------------------------- copies and files


@dataclass(frozen=True, slots=True)
class SourceFile:
    """One file of one copy: a segment (`base_offset`) or a snapshot (`end_offset`, `epoch`)."""

    log_dir: str  # the copy's __cluster_metadata-0 directory
    node_id: int | None
    path: str
    kind: str  # 'segment' | 'snapshot'
    base_offset: int = -1
    end_offset: int = -1
    epoch: int = -1

    @property
    def name(self) -> str:
        return os.path.basename(self.path)


@dataclass(frozen=True, slots=True)
class LogCopy:
    """One node's copy of the metadata log."""

    log_dir: str
    node_id: int | None
    segments: tuple[SourceFile, ...]
    snapshots: tuple[SourceFile, ...]

    @property
    def files(self) -> tuple[SourceFile, ...]:
        """Snapshots (by end offset), then segments (by base offset)."""
        return self.snapshots + self.segments

    @property
    def log_start_offset(self) -> int:
        return self.segments[0].base_offset if self.segments else -1

    @property
    def label(self) -> str:
        return f"node {self.node_id}" if self.node_id is not None else self.log_dir

    def replay_snapshot(self) -> SourceFile | None:
        """The snapshot the replay of this copy starts from, or None (replay from offset 0).

        None when the log starts at 0; else the snapshot with the smallest end offset at or
        above the log start (the longest replay), or the latest one if the copy has no segments.
        """
        if self.segments and self.log_start_offset == 0:
            return None
        if not self.segments:
            return self.snapshots[-1] if self.snapshots else None
        start = self.log_start_offset
        usable = [s for s in self.snapshots if s.end_offset >= start]
        return min(usable, key=lambda s: (s.end_offset, s.epoch)) if usable else None


def _partition_dir(path: Path) -> Path:
    if not path.is_dir():
        raise AuditInputError(f"{path} is not a directory")
    if path.name == METADATA_PARTITION_DIR:
        return path
    for candidate in (path / METADATA_PARTITION_DIR, path / "data" / METADATA_PARTITION_DIR):
        if candidate.is_dir():
            return candidate
    names = os.listdir(path)
    if any(_SEGMENT_RE.match(n) or _SNAPSHOT_RE.match(n) for n in names):
        return path  # a copy of the partition directory under another name
    raise AuditInputError(
        f"{path} holds no metadata log: expected a {METADATA_PARTITION_DIR} directory, a node's log dir "
        f"holding one, or segment (.log) / snapshot (.checkpoint) files"
    )


def _node_id(partition_dir: Path) -> int | None:
    """node.id from meta.properties next to (or, for a bare copy, inside) the directory."""
    for meta in (partition_dir.parent / "meta.properties", partition_dir / "meta.properties"):
        try:
            text = meta.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() == "node.id":
                try:
                    return int(value.strip())
                except ValueError:
                    return None
    return None


def resolve_copies(paths: Sequence[str | Path]) -> list[LogCopy]:
    """The copies named by `paths` (see the module docstring), in the order given.

    Raises AuditInputError for a path that is not a metadata log, or one given twice.
    """
    copies: list[LogCopy] = []
    seen: set[str] = set()
    for raw in paths:
        pdir = _partition_dir(Path(raw).expanduser()).resolve()
        key = str(pdir)
        if key in seen:
            raise AuditInputError(f"{raw}: the copy {key} is given twice")
        seen.add(key)
        node_id = _node_id(pdir)
        segments: list[SourceFile] = []
        snapshots: list[SourceFile] = []
        for name in sorted(os.listdir(pdir)):
            full = str(pdir / name)
            if m := _SEGMENT_RE.match(name):
                segments.append(SourceFile(key, node_id, full, "segment", base_offset=int(m.group(1))))
            elif m := _SNAPSHOT_RE.match(name):
                snapshots.append(
                    SourceFile(key, node_id, full, "snapshot", end_offset=int(m.group(1)), epoch=int(m.group(2)))
                )
        segments.sort(key=lambda f: f.base_offset)
        snapshots.sort(key=lambda f: (f.end_offset, f.epoch))
        copies.append(LogCopy(key, node_id, tuple(segments), tuple(snapshots)))
    return copies


# --------------------------------------------------------------------------- decoding a file


def _scan(
    data: bytes, start: int = 0, end: int | None = None
) -> Iterator[tuple[int, Batch | None, str | None, str | None]]:
    """(position, batch, error kind, error) for every batch of `data[start:end]` (positions in `data`),
    resyncing after a bad one."""
    pos = start
    size = len(data) if end is None else end
    while pos < size:
        result = scan_batches(data if pos == 0 and size == len(data) else data[pos:size])
        for batch, p in zip(result.batches, result.positions, strict=True):
            yield pos + p, batch, None, None
        bad = pos + result.consumed
        if result.error is None:
            if bad < size:
                yield bad, None, "torn_tail", f"incomplete batch: {size - bad} trailing bytes at byte {bad}"
            return
        message = str(result.error).rsplit(" (batch at byte", 1)[0]
        kind = "crc_mismatch" if message.startswith("CRC mismatch") else "corrupt_batch"
        yield bad, None, kind, f"{message} (batch at byte {bad})"
        head = peek_batch_header(data, bad)
        if head is None or bad + head[1] > size:
            return  # the length cannot be trusted: the rest of the file is unreadable
        pos = bad + head[1]


_UUID_TEXT: dict[int, str] = {}


def _uuid_text(value: Any) -> str:
    """kafka_uuid_string, cached by the id's int (topic ids repeat on every partition record)."""
    key = value.int
    text = _UUID_TEXT.get(key)
    if text is None:
        if len(_UUID_TEXT) > 1 << 16:
            _UUID_TEXT.clear()
        text = _UUID_TEXT[key] = kafka_uuid_string(value)
    return text


def _typed(record: Any) -> tuple[Any, ...]:
    """The typed columns (broker_id .. voters) of a decoded data record."""
    t = type(record)
    if t is PartitionChangeRecord:
        return (
            None, None, None, None, None,
            _uuid_text(record.topic_id), None, record.partition_id, record.leader,
            None if record.isr is None else list(record.isr),
            None if record.replicas is None else list(record.replicas),
            record.leader_recovery_state,
            None, None, None, None, None, None, None,
        )  # fmt: skip
    if t is PartitionRecord:
        return (
            None, None, None, None, None,
            _uuid_text(record.topic_id), None, record.partition_id, record.leader,
            list(record.isr), list(record.replicas), record.leader_recovery_state,
            None, None, None, None, None, None, None,
        )  # fmt: skip
    if t is BrokerRegistrationChangeRecord:
        fenced = True if record.fenced == 1 else False if record.fenced == -1 else None
        shutdown = True if record.in_controlled_shutdown == 1 else None
        return (record.broker_id, record.broker_epoch, fenced, shutdown) + (None,) * 15
    if t is RegisterBrokerRecord:
        return (record.broker_id, record.broker_epoch, record.fenced, record.in_controlled_shutdown, record.rack) + (
            None,
        ) * 14
    if t is FenceBrokerRecord or t is UnfenceBrokerRecord:
        return (record.broker_id, record.broker_epoch, t is FenceBrokerRecord) + (None,) * 16
    if t is UnregisterBrokerRecord or t is ProducerIdsRecord:
        return (record.broker_id, record.broker_epoch) + (None,) * 17
    if t is TopicRecord:
        return (None,) * 5 + (_uuid_text(record.topic_id), record.name) + (None,) * 12
    if t is RemoveTopicRecord:
        return (None,) * 5 + (_uuid_text(record.topic_id),) + (None,) * 13
    if t is ConfigRecord:
        return (None,) * 12 + (record.resource_type, record.resource_name, record.name, record.value) + (None,) * 3
    if t is FeatureLevelRecord:
        return (None,) * 16 + (record.name, record.feature_level, None)
    return _EMPTY_TYPED


_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def _control(batch: Batch, value: bytes) -> tuple[str, tuple[Any, ...], str]:
    """(record type, typed columns, JSON) of a control record; raises CorruptRecordError."""
    ctype = batch.control_type
    if ctype is ControlType.LEADER_CHANGE:
        lc = decode_leader_change(value)
        typed = (None,) * 8 + (lc.leader_id,) + (None,) * 9 + (list(lc.voters),)
        doc = {
            "version": lc.version,
            "leaderId": lc.leader_id,
            "voters": [{"voterId": v} for v in lc.voters],
            "grantingVoters": [{"voterId": v} for v in lc.granting_voters],
        }
        return "LEADER_CHANGE", typed, _dumps(doc)
    if ctype is ControlType.SNAPSHOT_HEADER:
        header = decode_snapshot_header(value)
        doc2 = {"version": header.version, "lastContainedLogTimestamp": header.last_contained_timestamp_ms}
        return "SNAPSHOT_HEADER", _EMPTY_TYPED, _dumps(doc2)
    footer = decode_snapshot_footer(value)
    return "SNAPSHOT_FOOTER", _EMPTY_TYPED, _dumps({"version": footer.version})


def split_points(source: SourceFile, chunk_bytes: int) -> list[tuple[int, int | None]]:
    """Byte ranges [start, end) of a segment, cut at batch boundaries into chunks of about
    `chunk_bytes`, for reading one file in several tasks; the last range ends at the file's end
    (None). A snapshot, a small file, or a header that cannot be trusted gives one range."""
    if source.kind != "segment" or chunk_bytes <= 0:
        return [(0, None)]
    try:
        size = os.path.getsize(source.path)
        if size <= chunk_bytes * 3 // 2:
            return [(0, None)]
        with open(source.path, "rb") as f:
            data = f.read()
    except OSError:
        return [(0, None)]
    cuts = [0]
    pos = 0
    while pos < size:
        head = peek_batch_header(data, pos)
        if head is None:
            break
        pos += head[1]
        if pos - cuts[-1] >= chunk_bytes and size - pos >= chunk_bytes // 2:
            cuts.append(pos)
    return [(a, b) for a, b in zip(cuts, cuts[1:], strict=False)] + [(cuts[-1], None)]


def read_source_file(
    source: SourceFile, start: int = 0, end: int | None = None, *, record_json: bool = True
) -> Iterator[Row]:
    """The rows of one file, in file order (see ROW_FIELDS and the module docstring); with `start` /
    `end` (from `split_points`), those of the batches in that byte range only. With `record_json`
    false, data records' `record_json` is None (every other column is the same): the audit's own
    pass reads none of it, and it is a third of the decoding's cost."""
    try:
        data = Path(source.path).read_bytes()
    except OSError as exc:
        yield _invalid_row(source, 0, None, "corrupt_batch", f"cannot read {source.path}: {exc}")
        return
    if source.kind == "snapshot":
        snap_end: int | None = source.end_offset
        snap_epoch: int | None = source.epoch
    else:
        snap_end = snap_epoch = None
    head: tuple[Any, ...] = (source.node_id, source.log_dir, source.name, source.kind, snap_end, snap_epoch)
    decode = decode_record_with_version
    for pos, batch, error_kind, error in _scan(data, start, end):
        if batch is None:
            yield _invalid_row(source, pos, data, error_kind or "corrupt_batch", error or "")
            continue
        base = batch.base_offset
        last = batch.last_offset
        epoch = batch.epoch
        ts = batch.timestamp_ms
        control = batch.control_type is not None
        offset = base
        for value in batch.records:
            if control:
                try:
                    rtype, typed, doc = _control(batch, value)
                except CorruptRecordError as exc:
                    yield head + (pos, base, last, offset, epoch, ts, True, None, None, False, "bad_record",
                                  f"undecodable control record at offset {offset}: {exc}") + _EMPTY_TYPED + (
                        None, value)  # fmt: skip
                else:
                    yield head + (pos, base, last, offset, epoch, ts, True, rtype, 0, True, None, None) + typed + (
                        doc, value)  # fmt: skip
            else:
                try:
                    record, version = decode(value)
                except RecordDecodeError as exc:
                    yield head + (pos, base, last, offset, epoch, ts, False, None, None, False, "bad_record",
                                  f"undecodable record at offset {offset}: {exc}") + _EMPTY_TYPED + (
                        None, value)  # fmt: skip
                else:
                    yield head + (
                        pos, base, last, offset, epoch, ts, False, record_type_name(record), version, True, None, None,
                    ) + _typed(record) + (_dumps(record_to_json(record, version)) if record_json else None,
                                          value)  # fmt: skip
            offset += 1
    if source.kind == "snapshot" and end is None:
        try:
            decode_snapshot_with_header(data)
        except CorruptRecordError as exc:
            yield _invalid_row(source, len(data), None, "bad_snapshot", f"invalid snapshot {source.name}: {exc}")


def _invalid_row(source: SourceFile, pos: int, data: bytes | None, kind: str, error: str) -> Row:
    """A row for a batch that could not be read: header fields when they are readable."""
    base = last = epoch = ts = None
    if data is not None:
        peek = peek_batch_header(data, pos)
        if peek is not None:
            base, _size, epoch, last_delta = peek
            last = base + last_delta
            if len(data) - pos >= BASE_TIMESTAMP_AT + _I64.size:
                (ts,) = _I64.unpack_from(data, pos + BASE_TIMESTAMP_AT)
        elif len(data) - pos >= 8:
            (base,) = _I64.unpack_from(data, pos)
    snap_end = source.end_offset if source.kind == "snapshot" else None
    snap_epoch = source.epoch if source.kind == "snapshot" else None
    return (
        source.node_id, source.log_dir, source.name, source.kind, snap_end, snap_epoch,
        pos, base, last, base, epoch, ts, None, None, None, False, kind, error,
    ) + _EMPTY_TYPED + (None, None)  # fmt: skip
