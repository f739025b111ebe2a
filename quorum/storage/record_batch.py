"""Kafka magic-v2 record batches: the on-disk and on-wire form of `Batch`.

Layout of one batch (all integers big-endian, sizes in bytes; the field positions, attribute
bits and codec numbers are named in `quorum.storage.batch_layout`):

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 (=2)
    | crc uint32 | attributes int16 | lastOffsetDelta int32 | baseTimestamp int64
    | maxTimestamp int64 | producerId int64 | producerEpoch int16 | baseSequence int32
    | recordCount int32 | records...

`batchLength` counts everything after itself (total size - 12). The CRC is CRC32C
over `attributes` .. end of batch. Each record is

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint
    | keyLength varint | key | valueLength varint | value | headersCount varint | headers

where varints are zigzag-encoded (Kafka's signed varints). We never compress, never
write headers, and write one timestamp per batch (every timestampDelta is 0).

Mapping to `Batch`: baseOffset = base_offset, partitionLeaderEpoch = epoch,
baseTimestamp = maxTimestamp = timestamp_ms, attributes bit 5 = control batch. A
data record has a null key (-1); a control record's key is int16 version (0) +
int16 type (`ControlType`) and its value is the control message (e.g. an encoded
LeaderChangeMessage). Record values are the `Batch.records` bytes.

Decoding is defensive: on any input it returns or raises `CorruptRecordError`.

The control messages' values (LeaderChangeMessage, SnapshotHeaderRecord, ...), the unsigned
varints and `CorruptRecordError` live in `quorum.raft.control_records` (the Raft core writes
them); this module imports them from there.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from crc32c import crc32c

from quorum.frozen_init import fast_frozen_init
from quorum.raft.control_records import CorruptRecordError, read_uvarint, uvarint_bytes
from quorum.raft.types import Batch, ControlType
from quorum.storage.batch_layout import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    BATCH_HEADER_SIZE,
    CRC_AT,
    CRC_START,
    HEADER,
    LOG_HEADER,
    LOG_OVERHEAD,
    MAGIC,
    MAGIC_AT,
)

__all__ = [
    "BATCH_HEADER_SIZE",
    "LOG_OVERHEAD",
    "MAGIC",
    "BatchFrame",
    "FrameScan",
    "MAX_BATCH_SIZE",
    "CorruptRecordError",
    "ScanResult",
    "decode_batches",
    "encode_and_remember",
    "encode_batch",
    "encode_batches",
    "peek_batch_header",
    "scan_batches",
    "scan_frames",
    "zigzag_varint",
]


# --------------------------------------------------------------------------- layout

# Smallest legal batchLength (a header with no records): 61 - 12.
_MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD
# Largest batch (total bytes) we accept; a larger length field is treated as corruption.
# Kafka's Raft client caps metadata batches at 8 MiB; this leaves ample headroom.
MAX_BATCH_SIZE = 64 * 1024 * 1024
# Smallest encoded record: length, attributes, timestampDelta, offsetDelta,
# keyLength, valueLength, headersCount: one byte each.
_MIN_RECORD_SIZE = 7
# Smallest record body (what the record's length field counts): all of the above but the length.
_MIN_RECORD_BODY = 6

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc
_HDR_A = struct.Struct(">qiibI")
# attributes, lastOffsetDelta, baseTimestamp, maxTimestamp, producerId, producerEpoch,
# baseSequence, recordCount
_HDR_B = struct.Struct(">hiqqqhii")
_HDR_FULL = HEADER
_PEEK = struct.Struct(">qiibIhi")
_CONTROL_KEY = struct.Struct(">hh")
_CRC = struct.Struct(">I")

assert _HDR_A.size + _HDR_B.size == BATCH_HEADER_SIZE == _HDR_FULL.size

_CONTROL_TYPES: dict[int, ControlType] = {int(t): t for t in ControlType}


# --------------------------------------------------------------------------- varints


def _zigzag_bytes(value: int) -> bytes:
    """Kafka signed varint/varlong: zigzag then LEB128 (value must fit in int64)."""
    return uvarint_bytes(((value << 1) ^ (value >> 63)) & 0xFFFF_FFFF_FFFF_FFFF)


# _ZZ[n] is the zigzag varint of the non-negative int n, for n < _ZZ_LIMIT. Covers
# every offset delta and record length of ordinary batches without computing anything.
_ZZ_LIMIT = 1 << 14
_ZZ: list[bytes] = [uvarint_bytes(n << 1) for n in range(_ZZ_LIMIT)]


def _zz(value: int) -> bytes:
    return _ZZ[value] if 0 <= value < _ZZ_LIMIT else _zigzag_bytes(value)


def zigzag_varint(value: int) -> bytes:
    """Kafka's signed varint (varlong) encoding of `value`: what a record's fields use."""
    return _zz(value)


# --------------------------------------------------------------------------- encode

_DATA_KEY = b"\x01"  # keyLength = -1 (null key)
_TS_ATTR = b"\x00\x00"  # record attributes = 0, timestampDelta = 0
_NO_HEADERS = b"\x00"


def encode_batch(batch: Batch) -> bytes:
    """Encode one `Batch` as a magic-v2 record batch (uncompressed, no producer id).

    Raises ValueError for an empty batch or a field outside its wire type's range
    (base offset and timestamp int64, epoch int32). A batch encoded by `encode_and_remember`
    lately (that very object: batches are immutable) gives the same bytes again at once.
    """
    known = _RECENT.get(id(batch))
    if known is not None and known[0] is batch:
        return known[1]
    try:
        return _encode_batch(batch)
    except struct.error as exc:
        raise ValueError(f"batch field out of range: {exc}") from None


# The encodings of the batches a log wrote last (`encode_and_remember`), by identity, with the
# batch itself (its id stays its own while it is here): a leader writes each new batch to its
# log, then encodes it in the Fetch answer of every replica. Written on the node's loop thread
# only (read anywhere); the oldest goes first.
_RECENT: dict[int, tuple[Batch, bytes]] = {}
_RECENT_MAX = 32


def encode_and_remember(batch: Batch) -> bytes:
    """`encode_batch`, kept for the next encodings of the same batch object (a log's append)."""
    data = encode_batch(batch)
    key = id(batch)
    if key not in _RECENT:
        if len(_RECENT) >= _RECENT_MAX:
            _RECENT.pop(next(iter(_RECENT), -1), None)
        _RECENT[key] = (batch, data)
    return data


def _encode_batch(batch: Batch) -> bytes:
    records = batch.records
    count = len(records)
    if count == 0:
        raise ValueError("a batch holds at least one record")
    control_type = batch.control_type
    if control_type is None:
        key_part = _DATA_KEY
        attributes = 0
    else:
        key = _CONTROL_KEY.pack(0, int(control_type))
        key_part = _zz(len(key)) + key
        attributes = ATTR_CONTROL
    # Per record: length, attrs+tsDelta, offsetDelta, key, valueLength, value, headers.
    # Constant bytes per record besides offsetDelta/valueLength/value: 2 + key + 1.
    fixed = len(_TS_ATTR) + len(key_part) + len(_NO_HEADERS)
    ts = batch.timestamp_ms
    parts: list[bytes] = [
        _HDR_B.pack(attributes, count - 1, ts, ts, -1, -1, -1, count),
    ]
    append = parts.append
    zz = _ZZ
    limit = _ZZ_LIMIT
    for i, value in enumerate(records):
        n = len(value)
        off = zz[i] if i < limit else _zz(i)
        vlen = zz[n] if n < limit else _zz(n)
        body = fixed + len(off) + len(vlen) + n
        append(zz[body] if body < limit else _zz(body))
        append(_TS_ATTR)
        append(off)
        append(key_part)
        append(vlen)
        append(value)
        append(_NO_HEADERS)
    body_bytes = b"".join(parts)
    crc = crc32c(body_bytes)
    # batchLength = partitionLeaderEpoch (4) + magic (1) + crc (4) + CRC-covered body.
    return _HDR_A.pack(batch.base_offset, len(body_bytes) + 9, batch.epoch, MAGIC, crc) + body_bytes


def encode_batches(batches: Iterable[Batch]) -> bytes:
    """Concatenate the encodings of `batches` (the form of a log segment or Fetch records)."""
    return b"".join([encode_batch(b) for b in batches])


# --------------------------------------------------------------------------- decode


@dataclass(frozen=True, slots=True)
class ScanResult:
    """Outcome of scanning a buffer of consecutive batches from its start.

    `batches[i]` starts at byte `positions[i]`. `consumed` is the number of bytes
    of complete valid batches (the end of the last one). If `error` is set the
    batch at byte `consumed` is corrupt; otherwise, if `consumed < len(buf)`, the
    rest is an incomplete (torn) batch.
    """

    batches: list[Batch]
    positions: list[int]
    consumed: int
    error: CorruptRecordError | None


fast_frozen_init(ScanResult)  # not a decorator: mypyc makes a decorated class a Python class


def peek_batch_header(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int, int, int] | None:
    """Read (base_offset, total_size_bytes, epoch, last_offset_delta) of the batch at `pos`.

    No validation beyond the length field's range; None if fewer than the 27 needed
    header bytes are available or the length is out of range.
    """
    if pos < 0 or len(buf) - pos < _PEEK.size:
        return None
    base, length, epoch, _magic, _crc, _attrs, last_delta = _PEEK.unpack_from(buf, pos)
    if length < _MIN_BATCH_LENGTH or length + LOG_OVERHEAD > MAX_BATCH_SIZE:
        return None
    return base, length + LOG_OVERHEAD, epoch, last_delta


def _corrupt_at(message: str, pos: int) -> CorruptRecordError:
    return CorruptRecordError(message, pos)


def _skip_headers(data: bytes, p: int, rec_end: int) -> int:
    """Skip a record's headers section at `p` (count, then key/value pairs); return new pos."""
    raw, p = read_uvarint(data, p, 5)
    count = (raw >> 1) ^ -(raw & 1)
    # Each header takes at least 2 bytes (two length varints).
    if count < 0 or count > (rec_end - p) // 2:
        raise CorruptRecordError("bad record header count")
    for _ in range(count):
        raw, p = read_uvarint(data, p, 5)
        klen = (raw >> 1) ^ -(raw & 1)
        if klen < 0 or p + klen > rec_end:
            raise CorruptRecordError("bad record header key length")
        p += klen
        raw, p = read_uvarint(data, p, 5)
        vlen = (raw >> 1) ^ -(raw & 1)
        if vlen < -1 or p + vlen > rec_end:
            raise CorruptRecordError("bad record header value length")
        if vlen > 0:
            p += vlen
    return p


def _decode_records(data: bytes, p: int, end: int, count: int, control: bool) -> tuple[list[bytes], int]:
    """Decode `count` records occupying exactly data[p:end].

    Returns (values, raw control type or -1). Raises CorruptRecordError or
    IndexError (buffer exhausted) on malformed input.
    """
    values: list[bytes] = []
    append = values.append
    control_raw = -1
    for i in range(count):
        # length (zigzag varint); fast path for one-byte varints.
        b = data[p]
        if b < 0x80:
            raw = b
            p += 1
        else:
            raw, p = read_uvarint(data, p, 5)
        rlen = (raw >> 1) ^ -(raw & 1)
        rec_end = p + rlen
        if rlen < _MIN_RECORD_BODY or rec_end > end:
            raise CorruptRecordError("bad record length")
        # attributes (int8, unused in v2) at p; timestampDelta (varlong) ignored:
        # a Batch carries one timestamp.
        if data[p + 1] < 0x80:
            p += 2
        else:
            _, p = read_uvarint(data, p + 1, 10)
        # offsetDelta must be the record's index (batches are contiguous).
        b = data[p]
        if b < 0x80:
            raw = b
            p += 1
        else:
            raw, p = read_uvarint(data, p, 5)
        if raw != i << 1:
            raise CorruptRecordError("record offset delta out of sequence")
        # key
        b = data[p]
        if b == 1:  # null key
            if control:
                raise CorruptRecordError("control record without key")
            p += 1
        else:
            if b < 0x80:
                raw = b
                p += 1
            else:
                raw, p = read_uvarint(data, p, 5)
            klen = (raw >> 1) ^ -(raw & 1)
            if klen < 0 or p + klen > rec_end:
                raise CorruptRecordError("bad record key length")
            if control:
                if klen < _CONTROL_KEY.size:
                    raise CorruptRecordError("control record key too short")
                version, ctype = _CONTROL_KEY.unpack_from(data, p)
                if version < 0:
                    raise CorruptRecordError("bad control record key version")
                if i == 0:
                    control_raw = ctype
                elif ctype != control_raw:
                    raise CorruptRecordError("mixed control record types in one batch")
            # A data record's key is ignored (metadata records have none).
            p += klen
        # value
        b = data[p]
        if b < 0x80:
            raw = b
            p += 1
        else:
            raw, p = read_uvarint(data, p, 5)
        vlen = (raw >> 1) ^ -(raw & 1)
        vend = p + vlen
        if vlen < 0 or vend > rec_end:
            raise CorruptRecordError("bad record value length")
        append(data[p:vend])
        p = vend
        # headers: almost always none.
        if data[p] == 0:
            p += 1
        else:
            p = _skip_headers(data, p, rec_end)
        if p != rec_end:
            raise CorruptRecordError("record length does not match its fields")
    if p != end:
        raise CorruptRecordError("batch length does not match its records")
    return values, control_raw


def _frame_end(data: bytes | bytearray | memoryview, pos: int, size: int, verify_crc: bool) -> tuple[int, str | None]:
    """The framing rule every log in pykraft uses (the metadata log and the partition logs).

    For the batch starting at `pos` of a buffer of `size` bytes: (end, None) when it is
    complete, of magic 2 and its CRC-32C matches; (-1, None) when it is incomplete (a torn
    tail: fewer bytes than its header says); (-1, why) when it is corrupt (a length out of
    range, another magic, a CRC mismatch). Needs `size - pos >= LOG_OVERHEAD`.
    """
    _base, length = LOG_HEADER.unpack_from(data, pos)
    if length < _MIN_BATCH_LENGTH or length + LOG_OVERHEAD > MAX_BATCH_SIZE:
        return -1, f"bad batch length {length}"
    end = pos + LOG_OVERHEAD + length
    if end > size:
        return -1, None
    magic = data[pos + MAGIC_AT]
    if magic != MAGIC:
        return -1, f"unsupported magic {magic}"
    if verify_crc:
        (crc,) = _CRC.unpack_from(data, pos + CRC_AT)
        if crc32c(memoryview(data)[pos + CRC_START : end]) != crc:
            return -1, "CRC mismatch"
    return end, None


@dataclass(frozen=True, slots=True, init=False)
class BatchFrame:
    """One batch's header fields, without its records (the partition log's view)."""

    position: int  # byte offset of the batch in the scanned buffer
    size: int  # total bytes, header included
    base_offset: int
    leader_epoch: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    record_count: int

    # Compiled with the module (the dataclass decorator's __init__ would run as Python there);
    # uncompiled, fast_frozen_init replaces it.
    def __init__(
        self,
        position: int,
        size: int,
        base_offset: int,
        leader_epoch: int,
        attributes: int,
        last_offset_delta: int,
        base_timestamp: int,
        max_timestamp: int,
        producer_id: int,
        record_count: int,
    ) -> None:
        object.__setattr__(self, "position", position)
        object.__setattr__(self, "size", size)
        object.__setattr__(self, "base_offset", base_offset)
        object.__setattr__(self, "leader_epoch", leader_epoch)
        object.__setattr__(self, "attributes", attributes)
        object.__setattr__(self, "last_offset_delta", last_offset_delta)
        object.__setattr__(self, "base_timestamp", base_timestamp)
        object.__setattr__(self, "max_timestamp", max_timestamp)
        object.__setattr__(self, "producer_id", producer_id)
        object.__setattr__(self, "record_count", record_count)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def compression(self) -> int:
        return self.attributes & ATTR_COMPRESSION_MASK


fast_frozen_init(BatchFrame)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True, init=False)
class FrameScan:
    """`frames` of complete valid batches from the start of a buffer; `consumed` bytes in
    them. With `error` the batch at `consumed` is corrupt; else bytes past `consumed`
    are a torn tail."""

    frames: list[BatchFrame]
    consumed: int
    error: CorruptRecordError | None

    # Compiled with the module (the dataclass decorator's __init__ would run as Python there);
    # uncompiled, fast_frozen_init replaces it.
    def __init__(self, frames: list[BatchFrame], consumed: int, error: CorruptRecordError | None) -> None:
        object.__setattr__(self, "frames", frames)
        object.__setattr__(self, "consumed", consumed)
        object.__setattr__(self, "error", error)


fast_frozen_init(FrameScan)  # not a decorator: mypyc makes a decorated class a Python class


def scan_frames(
    buf: bytes | bytearray | memoryview, *, verify_crc: bool = True, start: int = 0, limit: int | None = None
) -> FrameScan:
    """Walk batch headers from `start` (framing, magic and CRC only; records are not decoded).

    Stops at the end, a torn tail or a corrupt batch, or after `limit` frames. Never raises.
    """
    size = len(buf)
    frames: list[BatchFrame] = []
    pos = start
    unpack = _HDR_FULL.unpack_from
    while size - pos >= LOG_OVERHEAD and (limit is None or len(frames) < limit):
        end, problem = _frame_end(buf, pos, size, verify_crc)
        if problem is not None:
            return FrameScan(frames, pos, _corrupt_at(problem, pos))
        if end < 0:
            break
        base, _len, epoch, _m, _c, attrs, last_delta, base_ts, max_ts, pid, _pe, _seq, count = unpack(buf, pos)
        frames.append(BatchFrame(pos, end - pos, base, epoch, attrs, last_delta, base_ts, max_ts, pid, count))
        pos = end
    return FrameScan(frames, pos, None)


def scan_batches(buf: bytes | bytearray | memoryview, *, verify_crc: bool = True) -> ScanResult:
    """Decode consecutive batches from the start of `buf` until the end, a torn tail or corruption.

    Never raises (a corrupt batch is reported in `ScanResult.error`).
    """
    data = buf if type(buf) is bytes else bytes(buf)
    size = len(data)
    batches: list[Batch] = []
    positions: list[int] = []
    pos = 0
    unpack_header = _HDR_FULL.unpack_from
    while size - pos >= LOG_OVERHEAD:
        end, problem = _frame_end(data, pos, size, verify_crc)
        if problem is not None:
            return ScanResult(batches, positions, pos, _corrupt_at(problem, pos))
        if end < 0:
            break  # torn tail: the batch is incomplete
        (
            base,
            length,
            epoch,
            magic,
            crc,
            attributes,
            last_delta,
            timestamp,
            _max_ts,
            _pid,
            _pepoch,
            _seq,
            count,
        ) = unpack_header(data, pos)
        if attributes & ATTR_COMPRESSION_MASK:
            return ScanResult(batches, positions, pos, _corrupt_at("compressed batches are not supported", pos))
        if base < 0:
            return ScanResult(batches, positions, pos, _corrupt_at(f"negative base offset {base}", pos))
        body = pos + BATCH_HEADER_SIZE
        if count < 1 or count > (end - body) // _MIN_RECORD_SIZE or last_delta != count - 1:
            return ScanResult(
                batches, positions, pos, _corrupt_at(f"bad record count {count} / last offset delta {last_delta}", pos)
            )
        control = bool(attributes & ATTR_CONTROL)
        try:
            values, control_raw = _decode_records(data, body, end, count, control)
        except CorruptRecordError as exc:
            return ScanResult(batches, positions, pos, _corrupt_at(str(exc), pos))
        except IndexError:
            return ScanResult(batches, positions, pos, _corrupt_at("record runs past the buffer", pos))
        control_type: ControlType | None = None
        if control:
            control_type = _CONTROL_TYPES.get(control_raw)
            if control_type is None:
                return ScanResult(
                    batches, positions, pos, _corrupt_at(f"unsupported control record type {control_raw}", pos)
                )
        batches.append(Batch(base, epoch, tuple(values), timestamp, control_type))
        positions.append(pos)
        pos = end
    return ScanResult(batches, positions, pos, None)


def decode_batches(buf: bytes | bytearray | memoryview, *, verify_crc: bool = True) -> tuple[list[Batch], int]:
    """Decode consecutive batches from the start of `buf`; return (batches, bytes consumed).

    Stops without error at an incomplete trailing batch (consumed < len(buf)).
    Raises CorruptRecordError (with `.position`) if a complete batch is invalid.
    """
    result = scan_batches(buf, verify_crc=verify_crc)
    if result.error is not None:
        raise result.error
    return result.batches, result.consumed
