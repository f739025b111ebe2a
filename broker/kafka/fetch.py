"""Fetch (1), versions 4-12: decode and encode by hand; records pass through as they are.

The records the log returns are ranges of its segment files (`PartitionLog.read_range`:
found from the index and the high watermark's or log end's file position, cut at the
byte budget, possibly inside a trailing batch that the client drops, as with Kafka); the
response is a `SplicedResponse` whose ranges go from the file to the socket with
`os.sendfile`: no byte of a record batch is copied in Python, but in a small answer of
small ranges (`SplicedResponse.inlined`: a follower's round of transaction markers), which
is read whole and written as bytes.

Rules applied here (the reading rules are the services', see `FetchParams`):
- KIP-227 sessions (`fetch_session`): a full response lists every requested partition; an
  incremental one only the partitions with something new.
- A consumer's `max_bytes` is capped by `fetch.max.bytes`.
- KIP-392: a consumer with Fetch v11+ may read from a follower (`fetch_only_leader`
  False), and when `replica.selector.class` is the rack-aware selector, the leader answers
  a consumer that has a `rack_id` with a `preferred_read_replica` (and no records) for
  partitions where a replica in the client's rack is better; such a fetch is answered at
  once (no long poll), as Kafka does.
- READ_COMMITTED answers the aborted transactions overlapping the records returned (the
  log's `aborted_transactions`, an empty list when none), READ_UNCOMMITTED null; the
  services read a READ_COMMITTED consumer's records below the last stable offset.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass, replace
from typing import Final

from broker.kafka.context import RequestContext
from broker.kafka.fetch_session import FetchSessionCache, SessionError
from broker.kafka.replica_selector import select_read_replica
from broker.kafka.services import (
    READ_COMMITTED,
    BrokerServices,
    FetchParams,
    FetchPartition,
    FetchPartitionResult,
    ListenerConfig,
)
from broker.kafka.spliced import SplicedResponse
from broker.kafka.wire import Reader, Writer, response_writer
from broker.log.file_range import FileRange
from quorum.frozen_init import fast_frozen_init
from quorum.kafka_errors import ErrorCode
from quorum.wire.transport import REQUEST_BEHIND

# ErrorCode.NONE loaded once: in compiled code `ErrorCode.X` is a lookup through
# EnumType.__getattr__ (~900 instructions), and the data path asks it per partition.
_NONE: Final = ErrorCode.NONE

__all__ = ["FetchRequest", "decode_fetch", "encode_fetch_response", "handle_fetch"]


@dataclass(frozen=True, slots=True, init=False)
class FetchRequest:
    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: int
    session_id: int
    session_epoch: int
    partitions: tuple[FetchPartition, ...]  # request order
    forgotten: tuple[tuple[str, int], ...]
    rack_id: str

    # Compiled with the module (the dataclass decorator's __init__ would run as Python there);
    # uncompiled, fast_frozen_init replaces it.
    def __init__(
        self,
        replica_id: int,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        isolation_level: int,
        session_id: int,
        session_epoch: int,
        partitions: tuple[FetchPartition, ...],
        forgotten: tuple[tuple[str, int], ...],
        rack_id: str,
    ) -> None:
        object.__setattr__(self, "replica_id", replica_id)
        object.__setattr__(self, "max_wait_ms", max_wait_ms)
        object.__setattr__(self, "min_bytes", min_bytes)
        object.__setattr__(self, "max_bytes", max_bytes)
        object.__setattr__(self, "isolation_level", isolation_level)
        object.__setattr__(self, "session_id", session_id)
        object.__setattr__(self, "session_epoch", session_epoch)
        object.__setattr__(self, "partitions", partitions)
        object.__setattr__(self, "forgotten", forgotten)
        object.__setattr__(self, "rack_id", rack_id)


fast_frozen_init(FetchRequest)  # not a decorator: mypyc makes a decorated class a Python class


# v7+: replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level, session_id, session_epoch.
_FETCH_HEAD_V7: Final = struct.Struct(">iiiibii")
# A v12 partition's fixed fields: index, current_leader_epoch, fetch_offset, last_fetched_epoch,
# log_start_offset, partition_max_bytes.
_FETCH_PARTITION_V12: Final = struct.Struct(">iiqiqi")


def decode_fetch(ctx: RequestContext) -> FetchRequest:
    r = Reader(ctx.frame, ctx.header.body_offset)
    v = ctx.version
    flex = ctx.flexible
    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: int
    session_id: int
    session_epoch: int
    pos = r.pos
    if v >= 7 and pos + _FETCH_HEAD_V7.size <= r.end:
        # One unpack (with too few bytes left, field by field: each read raises as it does).
        replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level, session_id, session_epoch = (
            _FETCH_HEAD_V7.unpack_from(r.buf, pos)
        )
        r.pos = pos + _FETCH_HEAD_V7.size
    else:
        replica_id = r.i32()
        max_wait_ms = r.i32()
        min_bytes = r.i32()
        max_bytes = r.i32()
        isolation_level = r.i8()
        session_id, session_epoch = (r.i32(), r.i32()) if v >= 7 else (0, -1)
    partitions: list[FetchPartition] = []

    def topic() -> None:
        name = r.nonnull_string(flex)

        def partition() -> None:
            index: int
            current_leader_epoch: int
            fetch_offset: int
            last_fetched_epoch: int
            log_start_offset: int
            partition_max_bytes: int
            pos = r.pos
            if v >= 12 and pos + _FETCH_PARTITION_V12.size <= r.end:
                # v12: the fixed fields in one unpack (with too few bytes left, field by field
                # as below, which raises what each field's read raises).
                index, current_leader_epoch, fetch_offset, last_fetched_epoch, log_start_offset, partition_max_bytes = (
                    _FETCH_PARTITION_V12.unpack_from(r.buf, pos)
                )
                r.pos = pos + _FETCH_PARTITION_V12.size
            else:
                index = r.i32()
                current_leader_epoch = r.i32() if v >= 9 else -1
                fetch_offset = r.i64()
                last_fetched_epoch = r.i32() if v >= 12 else -1
                log_start_offset = r.i64() if v >= 5 else -1
                partition_max_bytes = r.i32()
            if flex:
                r.skip_tags()
            partitions.append(
                FetchPartition(
                    name,
                    index,
                    fetch_offset,
                    partition_max_bytes,
                    current_leader_epoch,
                    last_fetched_epoch,
                    log_start_offset,
                )
            )

        r.array(flex, partition)
        if flex:
            r.skip_tags()

    r.array(flex, topic)
    forgotten: list[tuple[str, int]] = []
    if v >= 7:

        def forgotten_topic() -> None:
            name = r.nonnull_string(flex)
            for index in r.array(flex, r.i32):
                forgotten.append((name, index))
            if flex:
                r.skip_tags()

        r.array(flex, forgotten_topic)
    rack_id = (r.string(flex) or "") if v >= 11 else ""
    if flex:
        r.skip_tags()
    return FetchRequest(
        replica_id,
        max_wait_ms,
        min_bytes,
        max_bytes,
        isolation_level,
        session_id,
        session_epoch,
        tuple(partitions),
        tuple(forgotten),
        rack_id,
    )


# A partition's fixed fields: index i32, error i16, high watermark, last stable offset and
# (v5+) log start offset i64; flexible (v12+) and read-uncommitted, then the null aborted
# transactions (compact length 0) and preferred_read_replica i32.
_RESPONSE_HEAD_V7: Final = struct.Struct(">ihi")
_PARTITION_HEAD: Final = struct.Struct(">ihqqq")
_PARTITION_HEAD_V4: Final = struct.Struct(">ihqq")
_PARTITION_FLEX: Final = struct.Struct(">ihqqqBi")


def _aborted_and_replica(w: Writer, v: int, flex: bool, committed: bool, res: FetchPartitionResult) -> None:
    """A partition's aborted transactions (READ_COMMITTED; null otherwise) and, v11+, its
    preferred read replica."""
    if committed:
        aborted = res.aborted_transactions
        w.length(len(aborted), flex, True)
        for txn in aborted:
            w.i64(txn.producer_id)
            w.i64(txn.first_offset)
            if flex:
                w.uvarint(0)  # no tagged fields
    else:
        w.length(-1, flex, True)
    if v >= 11:
        w.i32(res.preferred_read_replica)


def encode_fetch_response(
    ctx: RequestContext,
    error: ErrorCode,
    session_id: int,
    pairs: list[tuple[FetchPartition, FetchPartitionResult]],
    isolation_level: int,
) -> bytearray | SplicedResponse:
    """The frame; a SplicedResponse when records are file ranges (sent from the files)."""
    v = ctx.version
    flex = ctx.flexible
    w = response_writer(ctx.header.correlation_id, flex)
    if v >= 7:
        w.buf += _RESPONSE_HEAD_V7.pack(0, error, session_id)  # throttle_time_ms, error, session id
    else:
        w.i32(0)  # throttle_time_ms
    # Consecutive partitions of one topic share a topic entry.
    groups: list[tuple[str, list[tuple[FetchPartition, FetchPartitionResult]]]] = []
    for req, res in pairs:
        if groups and groups[-1][0] == req.topic:
            groups[-1][1].append((req, res))
        else:
            groups.append((req.topic, [(req, res)]))
    w.length(len(groups), flex, True)
    committed = isolation_level == READ_COMMITTED
    for name, items in groups:
        w.string(name, flex)
        w.length(len(items), flex, True)
        for req, res in items:
            if flex and not committed:
                # A follower's (and a read-uncommitted v12 consumer's) fixed fields in one pack:
                # index, error, HW, LSO, log start, aborted_transactions null (compact 0),
                # preferred_read_replica (flexible is v12+).
                w.buf += _PARTITION_FLEX.pack(
                    req.partition, res.error, res.high_watermark, res.last_stable_offset, res.log_start_offset, 0,
                    res.preferred_read_replica,
                )  # fmt: skip
            else:
                if v >= 5:
                    w.buf += _PARTITION_HEAD.pack(
                        req.partition, res.error, res.high_watermark, res.last_stable_offset, res.log_start_offset
                    )
                else:
                    w.buf += _PARTITION_HEAD_V4.pack(
                        req.partition, res.error, res.high_watermark, res.last_stable_offset
                    )
                _aborted_and_replica(w, v, flex, committed, res)
            records = res.records
            if isinstance(records, FileRange):
                w.file_range(records, flex)
            else:
                w.bytes_(records, flex)
            if flex:
                tags = 0
                diverging = res.diverging_epoch
                leader = res.current_leader
                if diverging is not None:
                    tags += 1
                if leader is not None:
                    tags += 1
                w.uvarint(tags)
                if diverging is not None:
                    w.uvarint(0)  # tag 0 DivergingEpoch: epoch i32, end_offset i64, tags
                    w.uvarint(13)
                    w.i32(diverging[0])
                    w.i64(diverging[1])
                    w.no_tags()
                if leader is not None:
                    w.uvarint(1)  # tag 1 CurrentLeader: leader_id i32, leader_epoch i32, tags
                    w.uvarint(9)
                    w.i32(leader.leader_id)
                    w.i32(leader.leader_epoch)
                    w.no_tags()
        if flex:
            w.no_tags()
    if flex:
        w.no_tags()
    return w.response()


async def handle_fetch(
    ctx: RequestContext, services: BrokerServices, config: ListenerConfig, sessions: FetchSessionCache
) -> bytes | bytearray | SplicedResponse:
    request = decode_fetch(ctx)
    is_consumer = request.replica_id < 0
    now_ms = int(time.time() * 1000)
    context = sessions.new_context(
        request.session_id,
        request.session_epoch,
        request.partitions,
        request.forgotten,
        privileged=not is_consumer,
        now_ms=now_ms,
    )
    if isinstance(context, SessionError):
        return encode_fetch_response(ctx, context.error, 0, [], request.isolation_level)
    wanted = context.partitions
    redirects: dict[int, int] = {}  # index in `wanted` -> preferred read replica
    if is_consumer and ctx.version >= 11 and request.rack_id and config.rack_aware_selector:
        for i, p in enumerate(wanted):
            view = services.partition_view(p.topic, p.partition)
            if view is not None:
                chosen = select_read_replica(view, request.rack_id, p.fetch_offset)
                if chosen != view.leader_id:
                    redirects[i] = chosen
    max_bytes = min(request.max_bytes, config.fetch_max_bytes) if is_consumer else request.max_bytes
    params = FetchParams(
        replica_id=request.replica_id,
        max_wait_ms=0 if redirects else max(request.max_wait_ms, 0),
        min_bytes=request.min_bytes,
        max_bytes=max(max_bytes, 0),
        isolation_level=request.isolation_level,
        partitions=wanted,
        fetch_only_leader=not is_consumer or ctx.version < 11,
        rack_id=request.rack_id,
        client_id=ctx.header.client_id,
        session=context.watch,
        yield_to=REQUEST_BEHIND.get() if is_consumer else None,
    )
    results = await services.fetch(params) if wanted or context.watch is not None else []
    if len(results) != len(context.partitions):  # a session's wait may read more (SessionWatch.extra)
        raise RuntimeError(f"fetch returned {len(results)} results for {len(context.partitions)} partitions")
    for i, chosen in redirects.items():
        if results[i].error == _NONE:
            results[i] = replace(results[i], records=b"", preferred_read_replica=chosen)
    session_id, pairs = context.respond(results)
    response = encode_fetch_response(ctx, _NONE, session_id, pairs, request.isolation_level)
    if isinstance(response, SplicedResponse):
        # A small answer (a round of markers: 78-byte batches) is read now and written as bytes.
        small = response.inlined()
        if small is not None:
            return small
    return response
