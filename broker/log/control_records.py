"""Transaction markers: the control batches that end a transaction in a partition log.

A marker is a magic-v2 batch with the transactional (0x10) and control (0x20) attribute
bits, the producer id and epoch of the transaction, base sequence -1, no compression, and
one record (offset delta 0, no headers) whose

    key   = version int16 (0) | type int16 (0: ABORT, 1: COMMIT)     (Kafka's ControlRecordType)
    value = version int16 (0) | coordinatorEpoch int32                (Kafka's EndTransactionMarker)

Kafka reads keys and values of a higher version by their first fields (a version above 0
may append fields); a key or value shorter than those fields is not a marker.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from crc32c import crc32c

from broker.log.records import RecordsError, batch_records
from quorum.frozen_init import fast_frozen_init
from quorum.storage.batch_layout import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    ATTRIBUTES_AT,
    CRC_AT,
    CRC_START,
    HEADER,
    LOG_OVERHEAD,
    MAGIC,
    RECORDS_COUNT_AT,
)

CONTROL_ABORT: Final = 0
CONTROL_COMMIT: Final = 1
MARKER_VERSION: Final = 0
MARKER_ATTRIBUTES: Final = ATTR_TRANSACTIONAL | ATTR_CONTROL

_KEY: Final = struct.Struct(">hh")  # version, type
_VALUE: Final = struct.Struct(">hi")  # version, coordinator epoch


class MarkerError(ValueError):
    """A control batch whose record is not an end-transaction marker."""


@dataclass(frozen=True, slots=True, init=False)
class EndTxnMarker:
    committed: bool  # COMMIT (True) or ABORT (False)
    coordinator_epoch: int

    # Compiled with the module (the dataclass decorator's __init__ would run as Python there:
    # thousands of instructions per instance on the marker path); uncompiled, fast_frozen_init
    # replaces it.
    def __init__(
        self,
        committed: bool,
        coordinator_epoch: int,
    ) -> None:
        object.__setattr__(self, "committed", committed)
        object.__setattr__(self, "coordinator_epoch", coordinator_epoch)


fast_frozen_init(EndTxnMarker)  # not a decorator: mypyc makes a decorated class a Python class


def encode_marker_record(marker: EndTxnMarker) -> tuple[bytes, bytes]:
    """(key, value) of the marker's record."""
    key = _KEY.pack(MARKER_VERSION, CONTROL_COMMIT if marker.committed else CONTROL_ABORT)
    return key, _VALUE.pack(MARKER_VERSION, marker.coordinator_epoch)


def decode_marker_record(key: bytes | None, value: bytes | None) -> EndTxnMarker:
    if key is None or len(key) < _KEY.size:
        raise MarkerError("a control record key holds a version and a type (4 bytes)")
    _version, kind = _KEY.unpack_from(key, 0)
    if kind not in (CONTROL_ABORT, CONTROL_COMMIT):
        raise MarkerError(f"control record type {kind} is not an end-transaction marker")
    if value is None or len(value) < _VALUE.size:
        raise MarkerError("an end-transaction marker value holds a version and a coordinator epoch (6 bytes)")
    _version, coordinator_epoch = _VALUE.unpack_from(value, 0)
    return EndTxnMarker(kind == CONTROL_COMMIT, coordinator_epoch)


# A marker batch as `encode_marker_batch` (and Kafka) lays it out, from the record count on:
# count 1; the record: length 16 (zigzag 0x20), attributes 0, timestamp delta 0, offset
# delta 0, key length 4 (zigzag 0x08), key (version, type), value length 6 (zigzag 0x0c),
# value (version, coordinator epoch), no headers. 78 bytes in all.
_CANONICAL: Final = struct.Struct(">iBBBBBhhBhiB")
_CANONICAL_SIZE: Final = RECORDS_COUNT_AT + _CANONICAL.size
# The same batch from its attributes on, read in one unpack: attributes, (last offset delta),
# base and max timestamps, (producer id, epoch, base sequence), then `_CANONICAL`'s fields.
_MARKER_TAIL: Final = struct.Struct(">h4xqq14x" + _CANONICAL.format[1:])
assert ATTRIBUTES_AT + _MARKER_TAIL.size == _CANONICAL_SIZE
_CRC: Final = struct.Struct(">I")


class _LastMarkerBatch:
    """The last batch `encode_marker_batch` built, with its arguments: a WriteTxnMarkers round
    writes the same marker (one producer, one timestamp) to each of its partitions, and a copy
    costs a tenth of the three packs and the CRC. One tuple, replaced whole."""

    def __init__(self) -> None:
        # producer id, producer epoch, committed, coordinator epoch, timestamp, the batch
        self.entry: tuple[int, int, bool, int, int, bytes] = (0, 0, False, 0, 0, b"")


_LAST_MARKER_BATCH: Final = _LastMarkerBatch()


def encode_marker_batch(producer_id: int, producer_epoch: int, marker: EndTxnMarker, timestamp_ms: int) -> bytearray:
    """The marker batch as a coordinator writes it (base offset 0 and leader epoch -1: the
    leader's append assigns both, in place): `encode_keyed_records`' bytes for the marker's
    record (test_control_records holds them equal), written at the canonical layout's fixed
    positions (a WriteTxnMarkers round writes one per partition). A new bytearray each call."""
    last_pid, last_epoch, last_committed, last_coordinator_epoch, last_timestamp, last_batch = _LAST_MARKER_BATCH.entry
    if (
        last_batch
        and last_pid == producer_id
        and last_epoch == producer_epoch
        and last_committed == marker.committed
        and last_coordinator_epoch == marker.coordinator_epoch
        and last_timestamp == timestamp_ms
    ):
        return bytearray(last_batch)
    out = _build_marker_batch(producer_id, producer_epoch, marker, timestamp_ms)
    _LAST_MARKER_BATCH.entry = (
        producer_id,
        producer_epoch,
        marker.committed,
        marker.coordinator_epoch,
        timestamp_ms,
        bytes(out),
    )
    return out


def _build_marker_batch(producer_id: int, producer_epoch: int, marker: EndTxnMarker, timestamp_ms: int) -> bytearray:
    out = bytearray(_CANONICAL_SIZE)
    HEADER.pack_into(
        out, 0, 0, _CANONICAL_SIZE - LOG_OVERHEAD, -1, MAGIC, 0, MARKER_ATTRIBUTES, 0, timestamp_ms, timestamp_ms,
        producer_id, producer_epoch, -1, 1,
    )  # fmt: skip
    kind = CONTROL_COMMIT if marker.committed else CONTROL_ABORT
    _CANONICAL.pack_into(
        out, RECORDS_COUNT_AT, 1, 0x20, 0, 0, 0, 0x08, MARKER_VERSION, kind, 0x0C, MARKER_VERSION,
        marker.coordinator_epoch, 0,
    )  # fmt: skip
    _CRC.pack_into(out, CRC_AT, crc32c(memoryview(out)[CRC_START:]))
    return out


def _canonical_marker(batch: bytes | bytearray | memoryview) -> tuple[EndTxnMarker, int] | None:
    """`decode_marker_batch`'s answer for a batch in the canonical layout (no compression, the
    version-0 key and value, the record at the base timestamp), read at fixed positions;
    None for any other layout (the caller decodes the record the general way). The record's
    timestamp is the batch's base timestamp, or its max timestamp under LogAppendTime."""
    if len(batch) != _CANONICAL_SIZE:
        return None
    # Typed: compiled, each comparison below is a machine compare (no tuple, no boxed ints).
    batch_attributes: int
    base_timestamp: int
    max_timestamp: int
    count: int
    length: int
    attributes: int
    ts_delta: int
    offset_delta: int
    key_length: int
    kind: int
    value_length: int
    epoch: int
    headers: int
    (
        batch_attributes, base_timestamp, max_timestamp, count, length, attributes, ts_delta, offset_delta, key_length,
        _kv, kind, value_length, _vv, epoch, headers,
    ) = _MARKER_TAIL.unpack_from(batch, ATTRIBUTES_AT)  # fmt: skip
    if batch_attributes & ATTR_COMPRESSION_MASK:
        return None
    if count != 1 or length != 0x20 or attributes != 0 or ts_delta != 0 or offset_delta != 0 or key_length != 0x08:
        return None
    if value_length != 0x0C or headers != 0 or (kind != CONTROL_ABORT and kind != CONTROL_COMMIT):
        return None
    timestamp = max_timestamp if batch_attributes & ATTR_TIMESTAMP_TYPE else base_timestamp
    return EndTxnMarker(kind == CONTROL_COMMIT, epoch), timestamp


def decode_marker_batch(batch: bytes | memoryview) -> tuple[EndTxnMarker, int] | None:
    """(marker, record timestamp in ms) of a whole control batch (header included), None
    when the batch holds no record (the log cleaner emptied it). MarkerError when its
    record is not a marker or does not parse. The canonical layout is read at fixed
    positions (`_canonical_marker`), any other through the record decoder."""
    canonical = _canonical_marker(batch)
    if canonical is not None:
        return canonical
    try:
        for _offset, timestamp, record in batch_records(batch, payloads=True):
            return decode_marker_record(record.key, record.value), timestamp
    except RecordsError as exc:
        raise MarkerError(f"the control record does not parse: {exc}") from None
    return None
