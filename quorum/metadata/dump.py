"""Print metadata log segments and snapshots like `kafka-dump-log.sh --cluster-metadata-decoder`.

`dump_segment(path)` / `dump_snapshot(path)` yield the lines Kafka's
DumpLogSegments prints with `--cluster-metadata-decoder` (which implies deep
iteration and printing contents): a heading (`Log starting offset: N` or
`Snapshot end offset: N, epoch: E`), then per batch

    baseOffset: 0 lastOffset: 1 count: 2 baseSequence: -1 lastSequence: -1 producerId: -1
    producerEpoch: -1 partitionLeaderEpoch: 1 isTransactional: false isControl: false
    position: 0 CreateTime: 1700000000000 size: 150 magic: 2 compresscodec: none
    crc: 123456789 isvalid: true

(one line) and per record

    | offset: 0 CreateTime: 1700000000000 keySize: -1 valueSize: 31 sequence: -1 headerKeys: []
    payload: {"type":"TOPIC_RECORD","version":0,"data":{"name":"t","topicId":"..."}}

(one line). Control records show their message instead of a payload:
`LeaderChange: {...}`, `SnapshotHeader {...}`, `SnapshotFooter {...}` (Kafka's
spellings). A record that does not decode shows `payload: Error at N, skipping. <why>`.
`deleteHorizonMs` is always `OptionalLong.empty` (Kafka sets it only on compacted batches).
Bytes after the last valid batch give `Found N invalid bytes at the end of NAME`.
`dump_file(path)` adds Kafka's `Dumping <path>` header and picks the kind by name; it also
decodes a `quorum-state` file (Kafka's JSON election state), which is not a record file.

Run as `python -m quorum.metadata.dump FILE...`.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from quorum.metadata.errors import RecordDecodeError
from quorum.metadata.records import decode_record_with_version, record_to_json, record_type_name
from quorum.raft.control_records import decode_leader_change, decode_snapshot_footer, decode_snapshot_header
from quorum.raft.types import Batch, ControlType
from quorum.storage.batch_layout import (
    ATTR_COMPRESSION_MASK,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    HEADER,
    LOG_OVERHEAD,
    codec_name,
)
from quorum.storage.record_batch import CorruptRecordError, scan_batches

__all__ = ["dump_bytes", "dump_file", "dump_quorum_state", "dump_segment", "dump_snapshot", "main"]

_SNAPSHOT_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
_CONTROL_KEY_SIZE = 4


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _control_text(batch: Batch, value: bytes) -> str:
    try:
        if batch.control_type is ControlType.LEADER_CHANGE:
            lc = decode_leader_change(value)
            message = {
                "version": lc.version,
                "leaderId": lc.leader_id,
                "voters": [{"voterId": v} for v in lc.voters],
                "grantingVoters": [{"voterId": v} for v in lc.granting_voters],
            }
            return f"LeaderChange: {_json(message)}"
        if batch.control_type is ControlType.SNAPSHOT_HEADER:
            header = decode_snapshot_header(value)
            message = {"version": header.version, "lastContainedLogTimestamp": header.last_contained_timestamp_ms}
            return f"SnapshotHeader {_json(message)}"
        if batch.control_type is ControlType.SNAPSHOT_FOOTER:
            footer = decode_snapshot_footer(value)
            return f"SnapshotFooter {_json({'version': footer.version})}"
    except CorruptRecordError as exc:
        return f"controlType: {batch.control_type}: undecodable: {exc}"
    ctype = batch.control_type
    return f"controlType: {ctype.name if ctype is not None else 'UNKNOWN'}({int(ctype) if ctype is not None else -1})"


def _payload(offset: int, value: bytes) -> str:
    try:
        record, version = decode_record_with_version(value)
    except RecordDecodeError as exc:
        return f"Error at {offset}, skipping. {exc}"
    message = {"type": record_type_name(record), "version": version, "data": record_to_json(record, version)}
    return _json(message)


def _batch_lines(data: bytes, batch: Batch, position: int) -> Iterator[str]:
    (
        base,
        length,
        leader_epoch,
        magic,
        crc,
        attributes,
        last_delta,
        _base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    ) = HEADER.unpack_from(data, position)
    ts_type = "LogAppendTime" if attributes & ATTR_TIMESTAMP_TYPE else "CreateTime"
    last_sequence = -1 if base_sequence == -1 else (base_sequence + last_delta) & 0x7FFFFFFF
    control = batch.control_type is not None
    yield (
        f"baseOffset: {base} lastOffset: {base + last_delta} count: {count} baseSequence: {base_sequence} "
        f"lastSequence: {last_sequence} producerId: {producer_id} producerEpoch: {producer_epoch} "
        f"partitionLeaderEpoch: {leader_epoch} isTransactional: {str(bool(attributes & ATTR_TRANSACTIONAL)).lower()} "
        f"isControl: {str(control).lower()} deleteHorizonMs: OptionalLong.empty "
        f"position: {position} {ts_type}: {max_ts} "
        f"size: {length + LOG_OVERHEAD} magic: {magic} compresscodec: {codec_name(attributes & ATTR_COMPRESSION_MASK)} "
        f"crc: {crc} isvalid: true"
    )
    for i, value in enumerate(batch.records):
        offset = base + i
        sequence = -1 if base_sequence == -1 else (base_sequence + i) & 0x7FFFFFFF
        key_size = _CONTROL_KEY_SIZE if control else -1
        prefix = (
            f"| offset: {offset} {ts_type}: {batch.timestamp_ms} keySize: {key_size} valueSize: {len(value)} "
            f"sequence: {sequence} headerKeys: []"
        )
        if control:
            yield f"{prefix} {_control_text(batch, value)}"
        else:
            yield f"{prefix} payload: {_payload(offset, value)}"


def dump_bytes(data: bytes, name: str = "") -> Iterator[str]:
    """The batch and record lines of consecutive record batches in `data`."""
    scan = scan_batches(data)
    for batch, position in zip(scan.batches, scan.positions, strict=True):
        yield from _batch_lines(data, batch, position)
    if scan.consumed < len(data):
        line = f"Found {len(data) - scan.consumed} invalid bytes at the end of {name}"
        yield line if scan.error is None else f"{line} ({scan.error})"


def dump_segment(path: str | Path) -> Iterator[str]:
    """Lines for a log segment file (`<20-digit base offset>.log`)."""
    p = Path(path)
    stem = p.name.split(".")[0]
    if stem.isdigit():
        yield f"Log starting offset: {int(stem)}"
    yield from dump_bytes(p.read_bytes(), p.name)


def dump_snapshot(path: str | Path) -> Iterator[str]:
    """Lines for a snapshot file (`<end offset>-<epoch>.checkpoint`)."""
    p = Path(path)
    m = _SNAPSHOT_NAME.match(p.name)
    if m is not None:
        yield f"Snapshot end offset: {int(m.group(1))}, epoch: {int(m.group(2))}"
    yield from dump_bytes(p.read_bytes(), p.name)


def dump_quorum_state(path: str | Path) -> Iterator[str]:
    """Lines for a quorum-state file: its fields as `key: value`, in the file's order."""
    p = Path(path)
    raw = p.read_bytes()
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        yield f"Invalid quorum-state file {p.name}: not JSON ({exc})"
        return
    if not isinstance(doc, dict):
        yield f"Invalid quorum-state file {p.name}: not a JSON object: {_json(doc)}"
        return
    fields = []
    for key, value in doc.items():
        if key == "currentVoters" and isinstance(value, list):
            value = [v.get("voterId") if isinstance(v, dict) else v for v in value]
        fields.append(f"{key}: {_json(value) if isinstance(value, list | dict) else value}")
    yield "Quorum state: " + " ".join(fields)


def dump_file(path: str | Path) -> Iterator[str]:
    """`Dumping <path>`, then the file decoded by its kind: snapshot, quorum-state or log segment."""
    p = Path(path)
    yield f"Dumping {path}"
    if p.name.endswith(".checkpoint"):
        yield from dump_snapshot(p)
    elif p.name == "quorum-state":
        yield from dump_quorum_state(p)
    else:
        yield from dump_segment(p)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m quorum.metadata.dump FILE...`: dump segments (.log) and snapshots (.checkpoint)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print("usage: python -m quorum.metadata.dump FILE...", file=sys.stderr)
        return 2
    status = 0
    for arg in args:
        try:
            for line in dump_file(arg):
                print(line)
        except OSError as exc:
            print(f"cannot read {arg}: {exc}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    raise SystemExit(main())
