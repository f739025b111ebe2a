"""`pykraft log dump` for partition logs: the lines `kafka-dump-log.sh` prints.

- a segment (`<base>.log`): `Dumping <file>`, `Log starting offset: <base>`, then one line per
  batch (`baseOffset: .. lastOffset: .. count: .. baseSequence: .. lastSequence: ..
  producerId: .. producerEpoch: .. partitionLeaderEpoch: .. isTransactional: ..
  isControl: .. deleteHorizonMs: OptionalLong.empty position: .. CreateTime: .. size: ..
  magic: 2 compresscodec: .. crc: .. isvalid: ..`); with `deep_iteration` (implied by
  `print_data_log`) one `| offset: ..` line per record, and with `print_data_log` its
  `key:` (when it has one) and `payload:` as text, or as a `parser` (a decoder such as
  `--offsets-decoder`'s) prints them; a control record has neither, but a transaction
  marker says `endTxnMarker: COMMIT|ABORT coordinatorEpoch: N`. A batch whose CRC does not match says
  `isvalid: false`; bytes that do not frame end the dump with Kafka's
  `Found N invalid bytes at the end of <file>`.
- an offset index (`.index`): `offset: N position: P` per entry; a time index
  (`.timeindex`): `timestamp: T offset: N` per entry; an aborted-transaction index
  (`.txnindex`): `version: 0 producerId: P firstOffset: F lastOffset: L lastStableOffset: S`.
- `verify_index_only`: check each index entry against the segment instead and report
  mismatches (`Mismatches in :<file>` / `  Index offset: I, log offset: L`), or for a time
  index the entries whose timestamp or offset the segment contradicts.

Records of compressed batches are decompressed with `broker.log.compression.decompress`
(gzip, snappy (raw or xerial-framed), lz4 frames, zstd).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from pathlib import Path

from crc32c import crc32c

from broker.log.control_records import MarkerError, decode_marker_record
from broker.log.records import batch_records
from broker.log.txn_index import ABORTED_TXN_VERSION, TXN_INDEX_SUFFIX, TransactionIndex
from quorum.storage.batch_layout import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    BATCH_HEADER_SIZE,
    CRC_START,
    HEADER,
    LAST_OFFSET_DELTA_AT,
    LOG_HEADER,
    LOG_OVERHEAD,
    MAGIC,
    MAX_TIMESTAMP_AT,
    codec_name,
)

# (offset, key, value) -> the (key, payload) texts of a record, or None to print nothing:
# Kafka's MessageParser of kafka-dump-log.sh's decoders (e.g. --offsets-decoder).
RecordParser = Callable[[int, bytes | None, bytes | None], tuple[str | None, str | None]]

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


def _end_txn_marker(key: bytes | None, value: bytes | None) -> str:
    """` endTxnMarker: COMMIT coordinatorEpoch: N` for a transaction marker (a control record,
    `broker.log.control_records`), else ""."""
    try:
        marker = decode_marker_record(key, value)
    except MarkerError:
        return ""
    return f" endTxnMarker: {'COMMIT' if marker.committed else 'ABORT'} coordinatorEpoch: {marker.coordinator_epoch}"


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


def dump_segment(
    path: Path, *, deep_iteration: bool = False, print_data_log: bool = False, parser: RecordParser | None = None
) -> Iterator[str]:
    """With a `parser` (which implies `print_data_log`), each record's key and payload are
    its texts. A control record prints no key or payload (as in Kafka), but a transaction
    marker its `endTxnMarker:`."""
    data = path.read_bytes()
    print_data_log = print_data_log or parser is not None
    stem = path.name.split(".")[0]
    if stem.isdigit():
        yield f"Log starting offset: {int(stem)}"
    deep = deep_iteration or print_data_log
    pos = 0
    while len(data) - pos >= LOG_OVERHEAD:
        (base, length) = LOG_HEADER.unpack_from(data, pos)
        end = pos + LOG_OVERHEAD + length
        if length < BATCH_HEADER_SIZE - LOG_OVERHEAD or end > len(data):
            break
        (_b, _l, epoch, magic, crc, attrs, last_delta, _base_ts, max_ts, pid, pepoch, base_seq, count) = (
            HEADER.unpack_from(data, pos)
        )
        valid = magic == MAGIC and crc32c(memoryview(data)[pos + CRC_START : end]) == crc
        codec = attrs & ATTR_COMPRESSION_MASK
        ts_type = "LogAppendTime" if attrs & ATTR_TIMESTAMP_TYPE else "CreateTime"
        last_seq = -1 if base_seq == -1 else base_seq + last_delta
        control = bool(attrs & ATTR_CONTROL)
        yield (
            f"baseOffset: {base} lastOffset: {base + last_delta} count: {count} baseSequence: {base_seq} "
            f"lastSequence: {last_seq} producerId: {pid} producerEpoch: {pepoch} partitionLeaderEpoch: {epoch} "
            f"isTransactional: {str(bool(attrs & ATTR_TRANSACTIONAL)).lower()} isControl: {str(control).lower()} "
            f"deleteHorizonMs: OptionalLong.empty position: {pos} {ts_type}: {max_ts} size: {end - pos} "
            f"magic: {magic} compresscodec: {codec_name(codec)} crc: {crc} "
            f"isvalid: {str(valid).lower()}"
        )
        if deep and valid:
            try:
                for offset, ts, record in batch_records(memoryview(data)[pos:end], payloads=True):
                    key, value, hkeys = record.key, record.value, list(record.header_keys)
                    seq = -1 if base_seq == -1 else base_seq + record.offset_delta
                    line = (
                        f"| offset: {offset} {ts_type}: {ts} keySize: {-1 if key is None else len(key)} "
                        f"valueSize: {-1 if value is None else len(value)} sequence: {seq} "
                        f"headerKeys: [{','.join(hkeys)}]"
                    )
                    if control:
                        line += _end_txn_marker(key, value)
                    elif parser is not None:
                        key_text, payload_text = parser(offset, key, value)
                        if key_text is not None:
                            line += f" key: {key_text}"
                        if payload_text is not None:
                            line += f" payload: {payload_text}"
                    elif print_data_log:
                        if key is not None:
                            line += f" key: {_text(key)}"
                        line += f" payload: {'' if value is None else _text(value)}"
                    yield line
            except (OSError, ValueError, IndexError, ImportError) as exc:  # RecordsError is a ValueError
                yield f"| could not read the records of this batch: {exc}"
        pos = end
    if pos < len(data):
        yield f"Found {len(data) - pos} invalid bytes at the end of {path.name}"


def _entries(path: Path, fmt: str) -> list[tuple[int, int]]:
    s = struct.Struct(fmt)
    raw = path.read_bytes()
    return [s.unpack_from(raw, i) for i in range(0, len(raw) - len(raw) % s.size, s.size)]


def _batches(segment: Path) -> dict[int, tuple[int, int, int]]:
    """position -> (base offset, last offset, max timestamp) of each framed batch."""
    data = segment.read_bytes() if segment.exists() else b""
    out: dict[int, tuple[int, int, int]] = {}
    pos = 0
    while len(data) - pos >= BATCH_HEADER_SIZE:
        base, length = LOG_HEADER.unpack_from(data, pos)
        if length < BATCH_HEADER_SIZE - LOG_OVERHEAD:
            break
        last_delta = _I32.unpack_from(data, pos + LAST_OFFSET_DELTA_AT)[0]
        max_ts = _I64.unpack_from(data, pos + MAX_TIMESTAMP_AT)[0]
        out[pos] = (base, base + last_delta, max_ts)
        pos += LOG_OVERHEAD + length
    return out


def dump_offset_index(path: Path, *, verify_index_only: bool = False) -> Iterator[str]:
    base = int(path.name.split(".")[0])
    entries = [(base + rel, position) for rel, position in _entries(path, ">ii")]
    # Trailing zero entries of a preallocated index are not entries (Kafka trims them too).
    while entries and entries[-1] == (base, 0) and len(entries) > 1:
        entries.pop()
    if not verify_index_only:
        for offset, position in entries:
            yield f"offset: {offset} position: {position}"
        return
    batches = _batches(path.with_suffix(".log"))
    mismatches = []
    for offset, position in entries:
        batch = batches.get(position)
        if batch is None or batch[0] != offset:
            mismatches.append((offset, -1 if batch is None else batch[0]))
    if [o for o, _ in entries] != sorted({o for o, _ in entries}):
        yield f"Indexes in :{path} are not sorted."
    if mismatches:
        yield f"Mismatches in :{path}"
        for index_offset, log_offset in mismatches:
            yield f"  Index offset: {index_offset}, log offset: {log_offset}"
    else:
        yield f"Index {path} is consistent with its segment ({len(entries)} entries)."


def dump_time_index(path: Path, *, verify_index_only: bool = False) -> Iterator[str]:
    base = int(path.name.split(".")[0])
    entries = [(ts, base + rel) for ts, rel in _entries(path, ">qi")]
    while entries and entries[-1] == (0, base) and len(entries) > 1:
        entries.pop()
    if not verify_index_only:
        for ts, offset in entries:
            yield f"timestamp: {ts} offset: {offset}"
        return
    batches = sorted(_batches(path.with_suffix(".log")).values())
    problems = []
    for ts, offset in entries:
        holder = next((b for b in batches if b[0] <= offset <= b[1]), None)
        seen_max = max((b[2] for b in batches if b[0] <= offset), default=-1)
        if holder is None:
            problems.append(f"  Index timestamp: {ts}, offset {offset} is not in the log")
        elif seen_max != ts:
            problems.append(f"  Index timestamp: {ts}, log timestamp: {seen_max}")
    if problems:
        yield f"Found timestamp mismatch in :{path}"
        yield from problems
    else:
        yield f"Index {path} is consistent with its segment ({len(entries)} entries)."


def dump_txn_index(path: Path) -> Iterator[str]:
    """Kafka's dumpTxnIndex: one line per aborted transaction."""
    for t in TransactionIndex(path).entries:
        yield (
            f"version: {ABORTED_TXN_VERSION} producerId: {t.producer_id} firstOffset: {t.first_offset} "
            f"lastOffset: {t.last_offset} lastStableOffset: {t.last_stable_offset}"
        )


def dump_partition_file(
    path: Path,
    *,
    deep_iteration: bool = False,
    print_data_log: bool = False,
    verify_index_only: bool = False,
    parser: RecordParser | None = None,
) -> Iterator[str]:
    yield f"Dumping {path}"
    if path.suffix == ".index":
        yield from dump_offset_index(path, verify_index_only=verify_index_only)
    elif path.suffix == ".timeindex":
        yield from dump_time_index(path, verify_index_only=verify_index_only)
    elif path.suffix == TXN_INDEX_SUFFIX:
        yield from dump_txn_index(path)
    else:
        yield from dump_segment(path, deep_iteration=deep_iteration, print_data_log=print_data_log, parser=parser)


def is_partition_file(path: Path) -> bool:
    """A file of a partition log (not of the metadata log `__cluster_metadata-0`)."""
    parent = path.resolve().parent.name
    return path.suffix in (".log", ".index", ".timeindex", TXN_INDEX_SUFFIX) and not parent.startswith(
        "__cluster_metadata"
    )
