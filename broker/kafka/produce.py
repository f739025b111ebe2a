"""Produce (0): decode by hand, hand the record bytes over untouched, answer in request order.

The hot path: records are never decoded per record. Each partition's records become a
`memoryview` into the request frame; the only look at them here is the 61-byte batch
header walk Kafka's `ProduceRequest.validateRecords` does for v3+ (exactly one batch per
partition, magic 2), so that several batches, a truncated batch or a length that runs past
the data are answered INVALID_RECORD before the log is touched. CRC-32C, sizes
(`max.message.bytes` -> MESSAGE_TOO_LARGE), compression codecs, timestamps are the log's.

Versions 0-2 are advertised but refused (UNSUPPORTED_VERSION per partition; Kafka 4).
acks=0 gets no response at all; if any partition failed, the connection is closed
instead (Kafka's way of telling an acks=0 producer). Any acks other than -1/0/1 is
INVALID_REQUIRED_ACKS. Transactional batches (attribute 0x10) in a request without a
transactional id: TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition (Kafka's
KafkaApis rule, which holds without an authorizer too); with one, they go to the log, whose
producer state opens the transaction (`broker.log.producer_state`). A control batch from a
client is the log's INVALID_RECORD.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from broker.kafka.context import RequestContext
from broker.kafka.services import (
    BrokerServices,
    ListenerConfig,
    ProduceParams,
    ProducePartition,
    ProducePartitionResult,
)
from broker.kafka.wire import MalformedRequest, Reader, Writer, response_writer
from broker.log.producer_state import is_transactional_batch
from quorum.frozen_init import fast_frozen_init
from quorum.kafka_errors import ErrorCode
from quorum.metadata.image import MetadataImage
from quorum.storage.batch_layout import (
    BATCH_HEADER_SIZE,
    BATCH_LENGTH_AT,
    LOG_OVERHEAD,
    MAGIC,
    MAGIC_AT,
)
from quorum.wire.transport import CloseConnection

# ErrorCode.NONE loaded once: in compiled code `ErrorCode.X` is a lookup through
# EnumType.__getattr__ (~900 instructions), and the data path asks it per partition.
_NONE: Final = ErrorCode.NONE

__all__ = ["ProduceRequest", "decode_produce", "encode_produce_response", "handle_produce", "validate_single_batch"]

_I32: Final = struct.Struct(">i")
_ACKS_TIMEOUT: Final = struct.Struct(">hi")
# A placeholder in the answers of the partitions handed to `BrokerServices.produce`.
_UNANSWERED: Final = ProducePartitionResult(ErrorCode.UNKNOWN_SERVER_ERROR)


@dataclass(frozen=True, slots=True, init=False)
class ProduceRequest:
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topics: tuple[tuple[str, tuple[tuple[int, memoryview | None], ...]], ...]  # request order

    # Compiled with the module (the dataclass decorator's __init__ would run as Python there);
    # uncompiled, fast_frozen_init replaces it.
    def __init__(
        self,
        transactional_id: str | None,
        acks: int,
        timeout_ms: int,
        topics: tuple[tuple[str, tuple[tuple[int, memoryview | None], ...]], ...],
    ) -> None:
        object.__setattr__(self, "transactional_id", transactional_id)
        object.__setattr__(self, "acks", acks)
        object.__setattr__(self, "timeout_ms", timeout_ms)
        object.__setattr__(self, "topics", topics)


fast_frozen_init(ProduceRequest)  # not a decorator: mypyc makes a decorated class a Python class


def decode_produce(ctx: RequestContext) -> ProduceRequest:
    """Any version 0-10 (0-2 have no transactional id); MalformedRequest on bad bytes.

    One function walks the whole body with a local position (a Python call costs as much as
    a dozen fields read inline, and a request of one partition has about thirty fields):
    short strings and empty tagged-field sections (nearly all of them) are read in place,
    array and records lengths by `_length`; anything else goes through `Reader` (varints,
    tags, strings), which holds the rules."""
    buf = ctx.frame
    end = len(buf)
    flex = ctx.flexible
    r = Reader(buf, ctx.header.body_offset)
    pos = r.pos
    if ctx.version < 3:
        transactional_id = None
    elif flex and pos < end and buf[pos] == 0:  # a compact null string: not transactional
        transactional_id = None
        pos += 1
    else:
        transactional_id = r.string(flex)
        pos = r.pos
    if end - pos < 6:
        raise MalformedRequest(f"need 6 bytes at {pos}, {end - pos} left")
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(buf, pos)
    pos += 6
    topics: list[tuple[str, tuple[tuple[int, memoryview | None], ...]]] = []
    n_topics, pos = _array_length(r, buf, pos, end, flex)
    for _ in range(n_topics):
        if flex and pos < end and 0 < buf[pos] < 0x80:  # a short compact string (not null)
            size = buf[pos] - 1
            pos += 1
            if size > end - pos:
                raise MalformedRequest(f"need {size} bytes at {pos}, {end - pos} left")
            try:
                name = str(buf[pos : pos + size], "utf-8")
            except UnicodeDecodeError as exc:
                raise MalformedRequest("string is not utf-8") from exc
            pos += size
        else:
            r.pos = pos
            name = r.nonnull_string(flex)
            pos = r.pos
        n_parts, pos = _array_length(r, buf, pos, end, flex)
        parts: list[tuple[int, memoryview | None]] = []
        for _ in range(n_parts):
            if end - pos < 4:
                raise MalformedRequest(f"need 4 bytes at {pos}, {end - pos} left")
            index = _I32.unpack_from(buf, pos)[0]
            pos += 4
            size, pos = _length(r, buf, pos, end, flex)  # -1: null records
            records: memoryview | None = None
            if size >= 0:
                if size > end - pos:
                    raise MalformedRequest(f"need {size} bytes at {pos}, {end - pos} left")
                records = buf[pos : pos + size]
                pos += size
            if flex:
                if pos < end and buf[pos] == 0:
                    pos += 1
                else:
                    r.pos = pos
                    r.skip_tags()
                    pos = r.pos
            parts.append((index, records))
        if flex:
            if pos < end and buf[pos] == 0:
                pos += 1
            else:
                r.pos = pos
                r.skip_tags()
                pos = r.pos
        topics.append((name, tuple(parts)))
    if flex and not (pos < end and buf[pos] == 0):
        r.pos = pos
        r.skip_tags()
    return ProduceRequest(transactional_id, acks, timeout_ms, tuple(topics))


def _length(r: Reader, buf: memoryview, pos: int, end: int, flex: bool) -> tuple[int, int]:
    """(length, position after it) of the array or bytes at `pos`: a compact uvarint (+1)
    when flexible, an int32 otherwise (Reader's rule: below -1 malformed, -1 null). One- and
    two-byte compact lengths (up to 16,383: most batches) are read in place."""
    if flex:
        if pos < end and buf[pos] < 0x80:
            return buf[pos] - 1, pos + 1
        if end - pos >= 2 and buf[pos + 1] < 0x80:
            return (buf[pos] & 0x7F | buf[pos + 1] << 7) - 1, pos + 2
        r.pos = pos
        n = r.uvarint() - 1
        return n, r.pos
    if end - pos < 4:
        raise MalformedRequest(f"need 4 bytes at {pos}, {end - pos} left")
    n = _I32.unpack_from(buf, pos)[0]
    if n < -1:
        raise MalformedRequest(f"negative length {n}")
    return n, pos + 4


def _array_length(r: Reader, buf: memoryview, pos: int, end: int, flex: bool) -> tuple[int, int]:
    """(items, position after the length) of the non-nullable array at `pos` (`_length`;
    null refused)."""
    n, pos = _length(r, buf, pos, end, flex)
    if n < 0:
        raise MalformedRequest("null in a non-nullable array")
    if n > end - pos:  # every item takes at least one byte
        raise MalformedRequest(f"array of {n} items in {end - pos} bytes")
    return n, pos


def _is_transactional(records: memoryview | None) -> bool:
    """Kafka's RequestUtils.hasTransactionalRecords, on the first batch's attributes: a control
    batch counts too (unlike KIP-890's `transactional_producer`, which verifies data batches
    only), so a client's marker without a transactional id is refused here."""
    return records is not None and is_transactional_batch(records)


def validate_single_batch(records: memoryview | None) -> str | None:
    """Why these records are not exactly one magic-v2 batch, or None when they are."""
    if records is None or len(records) == 0:
        return "produce requests must have exactly one record batch per partition; got none"
    if len(records) < BATCH_HEADER_SIZE:
        return f"record batch truncated: {len(records)} bytes, the header alone is {BATCH_HEADER_SIZE}"
    magic = records[MAGIC_AT]
    if magic != MAGIC:
        return f"produce requests must use record batch magic 2, got magic {magic}"
    total = LOG_OVERHEAD + _I32.unpack_from(records, BATCH_LENGTH_AT)[0]
    if total < BATCH_HEADER_SIZE or total > len(records):
        return f"record batch length {total} does not match the {len(records)} bytes sent"
    if total != len(records):
        return "produce requests must have exactly one record batch per partition"
    return None


# One partition's answer in the common case (no record errors, no message, no leader hint)
# at each version: index, error, base offset, [v2+] log append time, [v5+] log start offset.
_PARTITION_V0: Final = struct.Struct(">ihq")
_PARTITION_V2: Final = struct.Struct(">ihqq")
_PARTITION_V5: Final = struct.Struct(">ihqqq")


def encode_produce_response(
    ctx: RequestContext,
    request: ProduceRequest,
    results: list[ProducePartitionResult],
    image: Callable[[], MetadataImage],
    listener_name: str,
) -> bytearray:
    """`image` is asked only when a NOT_LEADER_OR_FOLLOWER answer names a leader (v10's
    NodeEndpoints). A partition whose answer has no record errors, no message and no leader
    hint (nearly all of them) is one `struct.pack` and a constant tail."""
    version = ctx.version
    flex = ctx.flexible
    w = response_writer(ctx.header.correlation_id, flex)
    leaders: dict[int, None] = {}
    w.length(len(request.topics), flex, True)
    # v8+: an empty record_errors array and a null error_message; flexible: no tags.
    tail = (b"\x01\x00" if flex else b"\x00\x00\x00\x00\xff\xff") if version >= 8 else b""
    if flex:
        tail += b"\x00"
    i = 0
    for name, parts in request.topics:
        w.string(name, flex)
        w.length(len(parts), flex, True)
        for index, _ in parts:
            res = results[i]
            i += 1
            if res.current_leader is None and (version < 8 or (not res.record_errors and res.error_message is None)):
                if version >= 5:
                    w.buf += _PARTITION_V5.pack(
                        index, res.error, res.base_offset, res.log_append_time_ms, res.log_start_offset
                    )
                elif version >= 2:
                    w.buf += _PARTITION_V2.pack(index, res.error, res.base_offset, res.log_append_time_ms)
                else:
                    w.buf += _PARTITION_V0.pack(index, res.error, res.base_offset)
                w.buf += tail
                continue
            w.i32(index)
            w.i16(res.error)
            w.i64(res.base_offset)
            if version >= 2:
                w.i64(res.log_append_time_ms)
            if version >= 5:
                w.i64(res.log_start_offset)
            if version >= 8:
                w.length(len(res.record_errors), flex, True)
                for e in res.record_errors:
                    w.i32(e.batch_index)
                    w.string(e.message, flex)
                    if flex:
                        w.no_tags()
                w.string(res.error_message, flex)
            if flex:
                hint = res.current_leader
                if version >= 10 and hint is not None and res.error == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                    # tag 0 CurrentLeader: leader_id i32, leader_epoch i32, empty tags = 9 bytes
                    w.uvarint(1)
                    w.uvarint(0)
                    w.uvarint(9)
                    w.i32(hint.leader_id)
                    w.i32(hint.leader_epoch)
                    w.no_tags()
                    if hint.leader_id >= 0:
                        leaders[hint.leader_id] = None
                else:
                    w.no_tags()
        if flex:
            w.no_tags()
    if version >= 1:
        w.i32(0)  # throttle_time_ms
    if flex:
        endpoints = _node_endpoints(image(), leaders, listener_name) if leaders else None
        if endpoints is None:
            w.no_tags()
        else:
            w.uvarint(1)
            w.uvarint(0)  # tag 0 NodeEndpoints
            w.uvarint(len(endpoints))
            w.buf += endpoints
    return w.frame()


def _node_endpoints(image: MetadataImage, leaders: dict[int, None], listener_name: str) -> bytes | None:
    """The encoded NodeEndpoints array (KIP-951) for the leaders named in hints, or None."""
    found = []
    for broker_id in leaders:
        reg = image.broker(broker_id)
        ep = reg.endpoint(listener_name) if reg is not None else None
        if reg is not None and ep is not None:
            found.append((broker_id, ep.host, ep.port, reg.rack))
    if not found:
        return None
    w = Writer(reserve_length=False)
    w.uvarint(len(found) + 1)
    for broker_id, host, port, rack in found:
        w.i32(broker_id)
        w.string(host, True)
        w.i32(port)
        w.string(rack, True)
        w.no_tags()
    return bytes(w.buf)


async def handle_produce(ctx: RequestContext, services: BrokerServices, config: ListenerConfig) -> bytearray | None:
    request = decode_produce(ctx)
    version = ctx.version
    refusal: ErrorCode | None = None
    if version < 3:
        refusal = ErrorCode.UNSUPPORTED_VERSION
    elif request.acks not in (-1, 0, 1):
        refusal = ErrorCode.INVALID_REQUIRED_ACKS
    # One pass over the partitions: each one's framing (`validate_single_batch`) and, without
    # a transactional id, whether any holds transactional batches (refused for all).
    results: list[ProducePartitionResult] = []
    to_append: list[int] = []
    partitions: list[ProducePartition] = []
    check_transactional = request.transactional_id is None
    transactional = False
    for name, parts in request.topics:
        for index, records in parts:
            if check_transactional and not transactional and records is not None:
                transactional = is_transactional_batch(records)
            why = validate_single_batch(records)
            if why is not None:
                results.append(ProducePartitionResult(ErrorCode.INVALID_RECORD, error_message=why))
            else:
                assert records is not None
                to_append.append(len(results))
                partitions.append(ProducePartition(name, index, records))
                results.append(_UNANSWERED)
    if refusal is None and transactional:
        refusal = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    if refusal is not None:
        results = [ProducePartitionResult(refusal) for _ in results]
    elif to_append:
        params = ProduceParams(
            acks=request.acks,
            timeout_ms=request.timeout_ms,
            partitions=tuple(partitions),
            transactional_id=request.transactional_id,
            client_id=ctx.header.client_id,
        )
        appended = await services.produce(params)
        if len(appended) != len(to_append):
            raise RuntimeError(f"produce returned {len(appended)} results for {len(to_append)} partitions")
        for i, res in zip(to_append, appended):  # noqa: B905 - lengths checked above
            results[i] = res
    if request.acks == 0:
        if any(r.error != _NONE for r in results):
            raise CloseConnection("acks=0 produce failed: closing the connection tells the producer")
        return None
    return encode_produce_response(ctx, request, results, services.image, config.listener_name)
