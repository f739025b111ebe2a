"""Produce-path validation and offset assignment, at the batch-header level.

What a leader checks before appending a producer's records (Kafka's LogValidator rules
that apply to magic-v2 batches, without decompressing):
- framing, magic 2 and CRC-32C of every batch (CORRUPT_MESSAGE), no torn tail;
- a batch larger than `max.message.bytes` (MESSAGE_TOO_LARGE), a request larger than a
  segment (RECORD_LIST_TOO_LARGE);
- a record count that agrees with the last offset delta, no control batches from
  clients (INVALID_RECORD: only a transaction coordinator's WriteTxnMarkers writes them);
- a known compression codec (none, gzip, snappy, lz4, zstd);
- on a compacted topic, every record has a key (INVALID_RECORD), as Kafka's LogValidator:
  the one produce path that walks records, compressed batches decompressed for it (a
  keyless record would be dropped by the log cleaner, so it is refused up front).

Assignment patches, in the request's bytes (in place when they are writable, else in one
copy), each batch's baseOffset and partitionLeaderEpoch (outside the CRC, so nothing is
re-encoded); with
`message.timestamp.type=LogAppendTime` it also sets the timestamp-type attribute and
maxTimestamp to the append time, and recomputes that batch's CRC (inside the CRC).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from crc32c import crc32c

from broker.log.compression import DecompressionError, decompress
from broker.log.config import LogConfig
from broker.log.errors import LogError
from broker.log.records import RecordsError, iter_records
from quorum.frozen_init import fast_frozen_init
from quorum.kafka_errors import ErrorCode
from quorum.storage.batch_layout import (
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    ATTRIBUTES_AT,
    BASE_OFFSET_AT,
    BATCH_HEADER_SIZE,
    COMPRESSION_ZSTD,
    CRC_AT,
    CRC_START,
    MAX_TIMESTAMP_AT,
    PARTITION_LEADER_EPOCH_AT,
)
from quorum.storage.record_batch import BatchFrame, scan_frames

_MAX_CODEC = COMPRESSION_ZSTD
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")


@dataclass(frozen=True, slots=True, init=False)
class Assigned:
    data: bytearray | memoryview  # the request's own bytes when they were writable
    frames: list[BatchFrame]
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    record_count: int
    log_append_time_ms: int

    # Compiled with the module (the dataclass decorator's __init__ would run as Python there);
    # uncompiled, fast_frozen_init replaces it.
    def __init__(
        self,
        data: bytearray | memoryview,
        frames: list[BatchFrame],
        first_offset: int,
        last_offset: int,
        max_timestamp: int,
        offset_of_max_timestamp: int,
        record_count: int,
        log_append_time_ms: int,
    ) -> None:
        object.__setattr__(self, "data", data)
        object.__setattr__(self, "frames", frames)
        object.__setattr__(self, "first_offset", first_offset)
        object.__setattr__(self, "last_offset", last_offset)
        object.__setattr__(self, "max_timestamp", max_timestamp)
        object.__setattr__(self, "offset_of_max_timestamp", offset_of_max_timestamp)
        object.__setattr__(self, "record_count", record_count)
        object.__setattr__(self, "log_append_time_ms", log_append_time_ms)


fast_frozen_init(Assigned)  # not a decorator: mypyc makes a decorated class a Python class


_KEYLESS: Final = "Compacted topic cannot accept message without key."


def _check_keys(view: memoryview, f: BatchFrame) -> None:
    """Compacted topics: every record of the batch must have a key. Refused, the batch names
    each keyless record by its index in the batch (KIP-467's record errors, as Kafka's
    LogValidator lists them), so that a client fails those records with INVALID_RECORD and the
    rest of the batch with an error of its own (librdkafka: _INVALID_DIFFERENT_RECORD)."""
    try:
        if f.compression:
            body: bytes | memoryview = decompress(
                f.compression, view[f.position + BATCH_HEADER_SIZE : f.position + f.size]
            )
            start, end = 0, len(body)
        else:
            body, start, end = view, f.position + BATCH_HEADER_SIZE, f.position + f.size
        keyless = [
            index
            for index, record in enumerate(iter_records(body, f.record_count, start=start, end=end, payloads=False))
            if record.key is None
        ]
    except (RecordsError, DecompressionError) as exc:
        raise LogError(ErrorCode.CORRUPT_MESSAGE, f"a record of the batch is malformed: {exc}") from None
    if keyless:
        errors = tuple((index, _KEYLESS) for index in keyless)
        shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
        raise LogError(
            ErrorCode.INVALID_RECORD,
            f"One or more records have been rejected due to {len(errors)} record errors in total, and only "
            f"showing the first three errors at most: [{shown}]",
            errors,
        )


def validate(
    records: bytes | bytearray | memoryview, config: LogConfig, *, control: bool = False, keyed: bool = False
) -> list[BatchFrame]:
    """The batches of a produce request (or, with `control`, a coordinator's marker batch),
    or LogError with the Kafka code to answer. `keyed`: every record is known to have a key
    (a coordinator's own batch, built here), so a compacted topic's records are not re-read."""
    size = len(records)
    if size == 0:
        raise LogError(ErrorCode.INVALID_RECORD, "The produce request carries no record batch.")
    if size > config.segment_bytes:
        raise LogError(
            ErrorCode.RECORD_LIST_TOO_LARGE,
            f"The request of {size} bytes is larger than the segment size {config.segment_bytes}.",
        )
    scan = scan_frames(records)
    if scan.error is not None:
        raise LogError(ErrorCode.CORRUPT_MESSAGE, f"Record batch is corrupt: {scan.error}")
    if scan.consumed != size:
        raise LogError(ErrorCode.CORRUPT_MESSAGE, f"Record batch is truncated ({size - scan.consumed} trailing bytes).")
    view = memoryview(records)
    for f in scan.frames:
        if f.size > config.max_message_bytes:
            raise LogError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"The batch of {f.size} bytes is larger than max.message.bytes={config.max_message_bytes}.",
            )
        if f.record_count < 1 or f.last_offset_delta != f.record_count - 1:
            raise LogError(
                ErrorCode.INVALID_RECORD,
                f"Record count {f.record_count} does not match the last offset delta {f.last_offset_delta}.",
            )
        if f.attributes & ATTR_CONTROL and not control:
            raise LogError(ErrorCode.INVALID_RECORD, "Clients are not allowed to write control records.")
        if f.compression > _MAX_CODEC:
            raise LogError(ErrorCode.CORRUPT_MESSAGE, f"Unknown compression codec {f.compression}.")
        if config.compacted and not keyed and not f.attributes & ATTR_CONTROL:
            _check_keys(view, f)
    return scan.frames


def assign(
    records: bytes | bytearray | memoryview,
    config: LogConfig,
    *,
    next_offset: int,
    leader_epoch: int,
    now_ms: int,
    control: bool = False,
    keyed: bool = False,
) -> Assigned:
    """Validate (`validate`), then give the batches offsets from `next_offset` and the leader's epoch."""
    frames = validate(records, config, control=control, keyed=keyed)
    # Patched in place when the caller's buffer is writable (a produce frame read into a
    # bytearray by the transport), else in one copy.
    view = memoryview(records)
    data: bytearray | memoryview = bytearray(records) if view.readonly else view
    log_append = config.message_timestamp_type == "LogAppendTime"
    out: list[BatchFrame] = []
    offset = next_offset
    max_ts, max_ts_offset = -1, -1
    count = 0
    for f in frames:
        base = offset
        _I64.pack_into(data, f.position + BASE_OFFSET_AT, base)
        _I32.pack_into(data, f.position + PARTITION_LEADER_EPOCH_AT, leader_epoch)
        batch_max_ts = f.max_timestamp
        attrs = f.attributes
        if log_append:
            attrs |= ATTR_TIMESTAMP_TYPE
            batch_max_ts = now_ms
            _I16.pack_into(data, f.position + ATTRIBUTES_AT, attrs)
            _I64.pack_into(data, f.position + MAX_TIMESTAMP_AT, now_ms)
            crc = crc32c(memoryview(data)[f.position + CRC_START : f.position + f.size])
            _U32.pack_into(data, f.position + CRC_AT, crc)
        last = base + f.last_offset_delta
        if batch_max_ts > max_ts:
            max_ts, max_ts_offset = batch_max_ts, last
        out.append(
            BatchFrame(f.position, f.size, base, leader_epoch, attrs, f.last_offset_delta, f.base_timestamp,
                       batch_max_ts, f.producer_id, f.record_count)
        )  # fmt: skip
        offset = last + 1
        count += f.record_count
    return Assigned(data, out, next_offset, offset - 1, max_ts, max_ts_offset, count, now_ms if log_append else -1)
