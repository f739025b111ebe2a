"""Walking the records inside one (uncompressed or decompressed) magic-v2 batch body.

The broker never does this on the produce or fetch path; three slower paths need it: the
keyless-record check of compacted topics, ListOffsets by timestamp (record-exact, in
compressed batches too), and `pykraft log dump --print-data-log`. One walker serves all
three; `batch_records` adds the batch's decompression and each record's offset and time.

A record is `length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
keyLength varint | key | valueLength varint | value | headerCount varint | headers`, with
Kafka's zigzag varints. A walk that would leave its bounds raises `RecordsError`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from broker.log.compression import decompress
from quorum.storage.batch_layout import ATTR_COMPRESSION_MASK, ATTR_TIMESTAMP_TYPE, BATCH_HEADER_SIZE, HEADER


class RecordsError(ValueError):
    """The records do not parse (a varint or a field runs past the batch)."""


@dataclass(frozen=True, slots=True)
class RecordView:
    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    value: bytes | None
    header_keys: tuple[str, ...]


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
            keys = []
            for _h in range(max(header_count, 0)):
                hk_length, p = read_varint(data, p, record_end)
                hk, p = _take(data, p, hk_length, record_end)
                keys.append((hk or b"").decode("utf-8", errors="replace"))
                hv_length, p = read_varint(data, p, record_end)
                _, p = _take(data, p, hv_length, record_end)
            yield RecordView(off_delta, ts_delta, key, value, tuple(keys))
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
