"""The key/value records of `__transaction_state`, in Kafka's own schemas (byte for byte).

Every record of that topic has a key and (except tombstones) a value, each an int16 version
followed by the struct of that version (Kafka's TransactionLogKey.json / TransactionLogValue.json):

- TransactionLogKey, version 0 only, never flexible: TransactionalId string.
- TransactionLogValue, versions 0 and 1 (1 is flexible):
  ProducerId int64, ProducerEpoch int16, TransactionTimeoutMs int32, TransactionStatus int8
  (the `TxnState` number), TransactionPartitions [PartitionsSchema]? (Topic string,
  PartitionIds [int32]; null for an Empty transaction), TransactionLastUpdateTimestampMs
  int64, TransactionStartTimestampMs int64; in version 1, the tagged fields
  0 PreviousProducerId int64 (default -1), 1 NextProducerId int64 (default -1) and
  2 ClientTransactionVersion int16 (default 0), written only when not their default.

Version 0 writes strings with an int16 length and arrays with an int32 length (-1 = null);
version 1 writes unsigned-varint lengths + 1 (0 = null) and a tagged-field section after
every struct (unknown tags are skipped on read).

What Kafka 3.9 writes, and so `encode_value` by default: key version 0, value version 0
(version 1 only once the `transaction.version` feature is at least 1, which needs metadata
version 4.0; Kafka 3.9's own schema has no tagged fields yet). A non-default tagged field
cannot be written in version 0 (Kafka's writer refuses it too).

Reading is as lenient as Kafka's generated readers (bytes after the struct are ignored);
anything else that does not decode (truncated, lying lengths, null in a non-nullable field,
bad UTF-8, an unknown version or transaction status) raises `TransactionRecordError`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from broker.group.records import RecordSchemaError, coordinator_partition
from broker.kafka.wire import MalformedRequest, Reader, Writer
from quorum.frozen_init import fast_frozen_init

__all__ = [
    "KEY_VERSION",
    "TRANSACTION_STATE_TOPIC",
    "VALUE_VERSIONS",
    "WRITTEN_VALUE_VERSION",
    "PartitionsSchema",
    "TransactionLogKey",
    "TransactionLogValue",
    "TransactionRecordError",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
    "transaction_partition",
]

TRANSACTION_STATE_TOPIC: Final = "__transaction_state"
KEY_VERSION: Final = 0
VALUE_VERSIONS: Final = range(0, 2)
FLEXIBLE_FROM: Final = 1
WRITTEN_VALUE_VERSION: Final = 0  # Kafka 3.9 (transaction.version 0)
NUM_STATES: Final = 8  # TransactionStatus 0..7 (Empty .. PrepareEpochFence)

# Tagged fields of TransactionLogValue v1+: tag -> (struct format, default).
_PREVIOUS_PRODUCER_ID_TAG: Final = 0
_NEXT_PRODUCER_ID_TAG: Final = 1
_CLIENT_TRANSACTION_VERSION_TAG: Final = 2
_I64: Final = struct.Struct(">q")
_I16: Final = struct.Struct(">h")


class TransactionRecordError(RecordSchemaError):
    """Bytes that do not decode as a `__transaction_state` record, or a value that cannot
    be encoded in the version asked for (a string over 32767 UTF-8 bytes, an int out of its
    field's range, a non-default tagged field in version 0)."""


@dataclass(frozen=True, slots=True)
class TransactionLogKey:
    transactional_id: str


fast_frozen_init(TransactionLogKey)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class PartitionsSchema:
    """The partitions of one topic in a transaction."""

    topic: str
    partition_ids: tuple[int, ...]


fast_frozen_init(PartitionsSchema)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class TransactionLogValue:
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_status: int  # TxnState's number, 0..7
    transaction_partitions: tuple[PartitionsSchema, ...] | None  # None: written as null (Empty)
    transaction_last_update_timestamp_ms: int
    transaction_start_timestamp_ms: int  # -1: no transaction started
    previous_producer_id: int = -1  # tagged (v1+): the producer id of the last committed transaction
    next_producer_id: int = -1  # tagged (v1+): the latest producer id sent to the producer
    client_transaction_version: int = 0  # tagged (v1+): the client's transaction version


fast_frozen_init(TransactionLogValue)  # not a decorator: mypyc makes a decorated class a Python class


# ---------------------------------------------------------------- encoding


def _string(w: Writer, s: str, flexible: bool) -> None:
    try:
        raw = s.encode()
    except UnicodeEncodeError as exc:  # lone surrogates
        raise TransactionRecordError(f"string is not encodable as UTF-8: {exc}") from exc
    if len(raw) > 0x7FFF:
        raise TransactionRecordError(f"a string of {len(raw)} UTF-8 bytes is longer than 32767")
    w.length(len(raw), flexible, False)
    w.buf += raw


def encode_key(key: TransactionLogKey) -> bytes:
    w = Writer(reserve_length=False)
    w.i16(KEY_VERSION)
    _string(w, key.transactional_id, False)
    return bytes(w.buf)


def _tags(v: TransactionLogValue) -> list[tuple[int, bytes]]:
    tags: list[tuple[int, bytes]] = []
    if v.previous_producer_id != -1:
        tags.append((_PREVIOUS_PRODUCER_ID_TAG, _I64.pack(v.previous_producer_id)))
    if v.next_producer_id != -1:
        tags.append((_NEXT_PRODUCER_ID_TAG, _I64.pack(v.next_producer_id)))
    if v.client_transaction_version != 0:
        tags.append((_CLIENT_TRANSACTION_VERSION_TAG, _I16.pack(v.client_transaction_version)))
    return tags


def encode_value(value: TransactionLogValue, version: int = WRITTEN_VALUE_VERSION) -> bytes:
    """The record value in `version` (default: version 0, what Kafka 3.9 writes)."""
    if version not in VALUE_VERSIONS:
        raise TransactionRecordError(f"unknown TransactionLogValue version {version}")
    if not 0 <= value.transaction_status < NUM_STATES:
        raise TransactionRecordError(f"unknown transaction status {value.transaction_status}")
    flexible = version >= FLEXIBLE_FROM
    try:
        tags = _tags(value)
        if tags and not flexible:
            raise TransactionRecordError(f"tagged fields {[t for t, _ in tags]} cannot be written in version {version}")
        w = Writer(reserve_length=False)
        w.i16(version)
        w.i64(value.producer_id)
        w.i16(value.producer_epoch)
        w.i32(value.transaction_timeout_ms)
        w.i8(value.transaction_status)
        if value.transaction_partitions is None:
            w.length(-1, flexible, True)
        else:
            w.length(len(value.transaction_partitions), flexible, True)
            for p in value.transaction_partitions:
                _string(w, p.topic, flexible)
                w.length(len(p.partition_ids), flexible, True)
                for pid in p.partition_ids:
                    w.i32(pid)
                if flexible:
                    w.no_tags()
        w.i64(value.transaction_last_update_timestamp_ms)
        w.i64(value.transaction_start_timestamp_ms)
        if flexible:
            w.uvarint(len(tags))
            for tag, data in tags:
                w.uvarint(tag)
                w.uvarint(len(data))
                w.buf += data
    except struct.error as exc:
        raise TransactionRecordError(f"cannot encode {value!r}: {exc}") from exc
    return bytes(w.buf)


# ---------------------------------------------------------------- decoding


def _version(r: Reader, what: str) -> int:
    try:
        return r.i16()
    except MalformedRequest as exc:
        raise TransactionRecordError(f"could not read the version of the {what}") from exc


def _read_string(r: Reader, flexible: bool, field: str) -> str:
    n = r.uvarint() - 1 if flexible else r.i16()
    if n < 0:
        raise TransactionRecordError(f"non-nullable field {field} was serialized as null")
    try:
        return str(r.raw(n), "utf-8")
    except UnicodeDecodeError as exc:
        raise TransactionRecordError(f"string field {field} is not UTF-8") from exc


def decode_key(data: bytes | memoryview) -> TransactionLogKey:
    r = Reader(memoryview(data))
    version = _version(r, "key")
    if version != KEY_VERSION:
        raise TransactionRecordError(f"unknown TransactionLogKey version {version}")
    try:
        return TransactionLogKey(_read_string(r, False, "TransactionalId"))
    except MalformedRequest as exc:
        raise TransactionRecordError(f"could not read the key: {exc}") from exc


def _read_partitions(r: Reader, flexible: bool) -> PartitionsSchema:
    topic = _read_string(r, flexible, "Topic")
    ids = tuple(r.array(flexible, r.i32))
    if flexible:
        r.skip_tags()
    return PartitionsSchema(topic, ids)


def _read_value_tags(r: Reader) -> dict[int, int]:
    """The known tagged fields of TransactionLogValue v1 (unknown tags skipped)."""
    known: dict[int, int] = {}
    count = r.uvarint()
    if count > r.end - r.pos:
        raise TransactionRecordError("tagged-field count exceeds the bytes left")
    for _ in range(count):
        tag = r.uvarint()
        data = r.raw(r.uvarint())
        if tag in (_PREVIOUS_PRODUCER_ID_TAG, _NEXT_PRODUCER_ID_TAG, _CLIENT_TRANSACTION_VERSION_TAG):
            fmt = _I16 if tag == _CLIENT_TRANSACTION_VERSION_TAG else _I64
            if len(data) != fmt.size:
                raise TransactionRecordError(f"tagged field {tag} had {len(data)} bytes, not {fmt.size}")
            known[tag] = fmt.unpack(data)[0]
    return known


def decode_value(data: bytes | memoryview | None) -> TransactionLogValue | None:
    """The value of a record, None for a tombstone (a null value)."""
    if data is None:
        return None
    r = Reader(memoryview(data))
    version = _version(r, "value")
    if version not in VALUE_VERSIONS:
        raise TransactionRecordError(f"unknown TransactionLogValue version {version}")
    flexible = version >= FLEXIBLE_FROM
    try:
        producer_id, epoch, timeout, status = r.i64(), r.i16(), r.i32(), r.i8()
        if not 0 <= status < NUM_STATES:
            raise TransactionRecordError(f"unknown transaction status {status}")
        n = r.uvarint() - 1 if flexible else r.i32()
        if n < -1:
            raise TransactionRecordError(f"TransactionPartitions had negative length {n}")
        if n > r.end - r.pos:
            raise TransactionRecordError(f"TransactionPartitions of {n} items in {r.end - r.pos} bytes")
        partitions = None if n == -1 else tuple(_read_partitions(r, flexible) for _ in range(n))
        last_update, start = r.i64(), r.i64()
        tags = _read_value_tags(r) if flexible else {}
    except MalformedRequest as exc:
        raise TransactionRecordError(f"could not read value version {version}: {exc}") from exc
    return TransactionLogValue(
        producer_id, epoch, timeout, status, partitions, last_update, start,
        previous_producer_id=tags.get(_PREVIOUS_PRODUCER_ID_TAG, -1),
        next_producer_id=tags.get(_NEXT_PRODUCER_ID_TAG, -1),
        client_transaction_version=tags.get(_CLIENT_TRANSACTION_VERSION_TAG, 0),
    )  # fmt: skip


# ---------------------------------------------------------------- the coordinator partition


def transaction_partition(transactional_id: str, num_partitions: int) -> int:
    """The `__transaction_state` partition of a transactional id: Kafka's
    `Utils.abs(transactionalId.hashCode) % transaction.state.log.num.partitions`, the same
    rule as a group's `__consumer_offsets` partition."""
    return coordinator_partition(transactional_id, num_partitions)
