"""Walking the records inside one (uncompressed or decompressed) magic-v2 batch body.

The broker never does this on the produce or fetch path; four slower paths need it: the
keyless-record check of compacted topics, ListOffsets by timestamp (record-exact, in
compressed batches too), `pykraft log dump --print-data-log` and the log cleaner. One
walker serves all four; `batch_records` adds the batch's decompression and each record's
offset and time. `encode_records` is the way back (the cleaner re-batches what it keeps).

A record is `length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
keyLength varint | key | valueLength varint | value | headerCount varint | headers`, with
Kafka's zigzag varints. A walk that would leave its bounds raises `RecordsError`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from crc32c import crc32c

from broker.log.compression import compress, decompress
from quorum.frozen_init import fast_frozen_init
from quorum.storage.batch_layout import (
    ATTR_COMPRESSION_MASK,
    ATTR_DELETE_HORIZON,
    ATTR_TIMESTAMP_TYPE,
    BATCH_HEADER_SIZE,
    CRC_START,
    HEADER,
    LOG_OVERHEAD,
    MAGIC,
)
from quorum.storage.record_batch import zigzag_varint


class RecordsError(ValueError):
    """The records do not parse (a varint or a field runs past the batch)."""


@dataclass(frozen=True, slots=True)
class RecordView:
    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    value: bytes | None
    header_keys: tuple[str, ...]
    # (key, value) of each header, with `payloads` only (else empty).
    headers: tuple[tuple[bytes, bytes | None], ...] = ()


def read_varint(data: bytes | memoryview, pos: int, end: int) -> tuple[int, int]:
    """(zigzag-decoded value, next position) of the varint at `pos`, which must end before `end`."""
    shift = raw = 0
    while True:
        if pos >= end or shift > 63:
            raise RecordsError("a varint runs past the end of its batch")
        b = data[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7


def _take(data: bytes | memoryview, pos: int, length: int, end: int) -> tuple[bytes | None, int]:
    if length < 0:
        return None, pos
    if pos + length > end:
        raise RecordsError("a record field runs past the end of its batch")
    return bytes(data[pos : pos + length]), pos + length


def iter_records(
    data: bytes | memoryview, count: int, *, start: int = 0, end: int | None = None, payloads: bool = True
) -> Iterator[RecordView]:
    """The `count` records laid out from `start` (to `end`); keys and values are copied only
    with `payloads` (else a key is b"" when present, None when absent, and values are None)."""
    stop = len(data) if end is None else end
    pos = start
    for _ in range(count):
        length, pos = read_varint(data, pos, stop)
        record_end = pos + length
        if length < 0 or record_end > stop:
            raise RecordsError("a record runs past the end of its batch")
        p = pos + 1  # attributes
        ts_delta, p = read_varint(data, p, record_end)
        off_delta, p = read_varint(data, p, record_end)
        key_length, p = read_varint(data, p, record_end)
        if payloads:
            key, p = _take(data, p, key_length, record_end)
            value_length, p = read_varint(data, p, record_end)
            value, p = _take(data, p, value_length, record_end)
            header_count, p = read_varint(data, p, record_end)
            headers = []
            for _h in range(max(header_count, 0)):
                hk_length, p = read_varint(data, p, record_end)
                hk, p = _take(data, p, hk_length, record_end)
                hv_length, p = read_varint(data, p, record_end)
                hv, p = _take(data, p, hv_length, record_end)
                headers.append((hk or b"", hv))
            keys = tuple(k.decode("utf-8", errors="replace") for k, _ in headers)
            yield RecordView(off_delta, ts_delta, key, value, keys, tuple(headers))
        else:
            yield RecordView(off_delta, ts_delta, None if key_length < 0 else b"", None, ())
        pos = record_end


def batch_records(batch: bytes | memoryview, *, payloads: bool = False) -> Iterator[tuple[int, int, RecordView]]:
    """(offset, timestamp in ms, record) of each record of one whole batch (header included).

    A compressed batch is decompressed first (`DecompressionError` when it does not).
    Kafka's timestamp rule: with LogAppendTime every record's timestamp is the batch's
    maxTimestamp; with CreateTime it is baseTimestamp + the record's timestampDelta.
    """
    base, _len, _epoch, _magic, _crc, attrs, _delta, base_ts, max_ts, _pid, _pepoch, _seq, count = HEADER.unpack_from(
        batch, 0
    )
    body = decompress(attrs & ATTR_COMPRESSION_MASK, batch[BATCH_HEADER_SIZE:])
    log_append_time = bool(attrs & ATTR_TIMESTAMP_TYPE)
    for record in iter_records(body, count, payloads=payloads):
        yield base + record.offset_delta, max_ts if log_append_time else base_ts + record.timestamp_delta, record


@dataclass(frozen=True, slots=True)
class Record:
    """One record to encode: its absolute offset and timestamp (ms), key, value, headers."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[bytes, bytes | None], ...] = ()


@dataclass(frozen=True, slots=True, init=False)
class BatchHeader:
    """The batch-level fields a rebuilt batch keeps from its source batch."""

    partition_leader_epoch: int
    attributes: int  # the codec, timestamp type, transactional and control bits
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    max_timestamp: int = -1  # kept as is for LogAppendTime batches; else the records' largest
    delete_horizon_ms: int = -1  # >= 0: set ATTR_DELETE_HORIZON, baseTimestamp = this (ms)

    # Compiled with the module (the dataclass decorator's __init__ would run as Python there:
    # thousands of instructions per instance on the marker path); uncompiled, fast_frozen_init
    # replaces it.
    def __init__(
        self,
        partition_leader_epoch: int,
        attributes: int,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        max_timestamp: int = -1,
        delete_horizon_ms: int = -1,
    ) -> None:
        object.__setattr__(self, "partition_leader_epoch", partition_leader_epoch)
        object.__setattr__(self, "attributes", attributes)
        object.__setattr__(self, "producer_id", producer_id)
        object.__setattr__(self, "producer_epoch", producer_epoch)
        object.__setattr__(self, "base_sequence", base_sequence)
        object.__setattr__(self, "max_timestamp", max_timestamp)
        object.__setattr__(self, "delete_horizon_ms", delete_horizon_ms)


fast_frozen_init(BatchHeader)  # not a decorator: mypyc makes a decorated class a Python class


def _field(data: bytes | None) -> bytes:
    return zigzag_varint(-1) if data is None else zigzag_varint(len(data)) + data


def _record(
    timestamp_delta: int,
    offset_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[bytes, bytes | None]] = (),
) -> bytes:
    """One record of a magic-v2 batch, with its length prefix."""
    body = b"".join((
        b"\x00",  # record attributes (unused in magic v2)
        zigzag_varint(timestamp_delta),
        zigzag_varint(offset_delta),
        _field(key),
        _field(value),
        zigzag_varint(len(headers)),
        *(_field(k) + _field(v) for k, v in headers),
    ))  # fmt: skip
    return zigzag_varint(len(body)) + body


def encode_records(records: list[Record], header: BatchHeader) -> bytes:
    """One magic-v2 batch of `records` (offsets rising, gaps allowed), compressed with the
    codec of `header.attributes`. baseOffset is the first record's offset, lastOffsetDelta
    the last one's distance from it (so a batch with gaps says how far it reaches); with
    CreateTime, baseTimestamp is the first record's and maxTimestamp the largest; with
    LogAppendTime both are `header.max_timestamp` (every record reads that time back). With
    a delete horizon, baseTimestamp is the horizon and the deltas are taken from it (KIP-534)."""
    if not records:
        raise ValueError("a batch holds at least one record")
    base = records[0].offset
    attributes = header.attributes & ~ATTR_DELETE_HORIZON
    if header.attributes & ATTR_TIMESTAMP_TYPE:
        base_ts = max_ts = header.max_timestamp
    else:
        base_ts, max_ts = records[0].timestamp, max(r.timestamp for r in records)
    if header.delete_horizon_ms >= 0:
        attributes |= ATTR_DELETE_HORIZON
        base_ts = header.delete_horizon_ms
    body = b"".join(_record(r.timestamp - base_ts, r.offset - base, r.key, r.value, r.headers) for r in records)
    return _framed(body, header, attributes, base, records[-1].offset - base, base_ts, max_ts, len(records))


def encode_keyed_records(pairs: list[tuple[bytes, bytes | None]], timestamp: int, header: BatchHeader) -> bytes:
    """`encode_records` of `Record(i, timestamp, key, value)` for the i-th (key, value) pair
    (a coordinator's batch: offsets 0.., one timestamp, no headers), the same bytes without
    a `Record` per pair."""
    if header.attributes & ATTR_TIMESTAMP_TYPE or header.delete_horizon_ms >= 0:
        return encode_records([Record(i, timestamp, k, v) for i, (k, v) in enumerate(pairs)], header)
    if not pairs:
        raise ValueError("a batch holds at least one record")
    body = b"".join(_record(0, i, key, value) for i, (key, value) in enumerate(pairs))
    attributes = header.attributes & ~ATTR_DELETE_HORIZON
    return _framed(body, header, attributes, 0, len(pairs) - 1, timestamp, timestamp, len(pairs))


def _framed(
    body: bytes,
    header: BatchHeader,
    attributes: int,
    base: int,
    last_offset_delta: int,
    base_ts: int,
    max_ts: int,
    count: int,
) -> bytes:
    """The batch of the encoded records `body`: compressed with the codec of `attributes`,
    its header's fields filled in and its CRC computed."""
    body = compress(attributes & ATTR_COMPRESSION_MASK, body)
    fields = [
        base, 0, header.partition_leader_epoch, MAGIC, 0, attributes, last_offset_delta, base_ts,
        max_ts, header.producer_id, header.producer_epoch, header.base_sequence, count,
    ]  # fmt: skip
    fields[1] = BATCH_HEADER_SIZE - LOG_OVERHEAD + len(body)
    out = bytearray(HEADER.pack(*fields)) + body
    fields[4] = crc32c(memoryview(out)[CRC_START:])
    HEADER.pack_into(out, 0, *fields)
    return bytes(out)
