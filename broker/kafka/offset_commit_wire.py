"""OffsetCommit (8) by hand, versions 2-9: the group coordinator's hot request.

kio's reflective reader and writer cost more than the coordinator's whole commit rule
(about 40 us each per one-partition request); this walks the bytes once with
`broker.kafka.wire.Reader` and writes the answer with `Writer`, the same fields kio reads
and writes (a test compares both over generated requests of every version).

Versions: v2-4 carry `retention_time_ms`, v6+ `committed_leader_epoch`, v7+
`group_instance_id`, v8+ are flexible (compact lengths, tagged fields: unknown tags are
skipped, as Kafka does). The answer has `throttle_time_ms` from v3.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from kio.schema.errors import ErrorCode as KioErrorCode

from broker.kafka.context import RequestContext
from broker.kafka.wire import MalformedRequest, Reader, response_writer

__all__ = ["OffsetCommitBody", "OffsetCommitPartitionBody", "decode_offset_commit", "encode_offset_commit_response"]

# The codes a client can know (kio's list, as `broker.kafka.context.kio_error`): any other
# goes out as UNKNOWN_SERVER_ERROR (-1).
_KNOWN_CODES: Final = frozenset(int(c) for c in KioErrorCode)
_UNKNOWN_SERVER_ERROR: Final = -1

_I32: Final = struct.Struct(">i")
_I64: Final = struct.Struct(">q")
_PARTITION_HEAD: Final = struct.Struct(">iq")  # partition_index, committed_offset
_PARTITION_HEAD_V6: Final = struct.Struct(">iqi")  # + committed_leader_epoch


# (partition_index, committed_offset, committed_leader_epoch: -1 below v6, committed_metadata):
# a plain tuple, as Produce's partitions, since one is made per committed partition.
OffsetCommitPartitionBody = tuple[int, int, int, str | None]


@dataclass(frozen=True, slots=True)
class OffsetCommitBody:
    group_id: str
    generation_id_or_member_epoch: int
    member_id: str
    group_instance_id: str | None  # None below v7
    retention_time_ms: int  # -1 from v5 (the broker's offsets.retention.minutes)
    topics: tuple[tuple[str, tuple[OffsetCommitPartitionBody, ...]], ...]  # request order


def decode_offset_commit(ctx: RequestContext) -> OffsetCommitBody:
    """The request body of `ctx` (v2-9); MalformedRequest on bad bytes (bytes after the body
    are ignored, as Kafka does).

    The legacy versions (2-7: what kafka-python and the Java client below 2.4 send) are read
    inline, without a call per field; the flexible ones (8-9) through `Reader`."""
    if ctx.flexible:
        return _decode_flexible(ctx)
    buf = ctx.frame
    pos = ctx.header.body_offset
    end = len(buf)
    version = ctx.version

    def nonnull_string() -> str:
        text = string(False)
        assert text is not None  # string(False) raises on null
        return text

    def string(nullable: bool) -> str | None:
        nonlocal pos
        if pos + 2 > end:
            raise MalformedRequest("truncated string length")
        n = (buf[pos] << 8 | buf[pos + 1]) - (0x10000 if buf[pos] & 0x80 else 0)
        pos += 2
        if n < 0:
            if n == -1 and nullable:
                return None
            raise MalformedRequest(f"string length {n}")
        if pos + n > end:
            raise MalformedRequest(f"string of {n} bytes, {end - pos} left")
        try:
            text = str(buf[pos : pos + n], "utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedRequest("string is not utf-8") from exc
        pos += n
        return text

    def count() -> int:
        nonlocal pos
        if pos + 4 > end:
            raise MalformedRequest("truncated array length")
        (n,) = _I32.unpack_from(buf, pos)
        pos += 4
        if n < 0:
            raise MalformedRequest("null or negative length of a non-nullable array")
        if n > end - pos:  # every item takes at least one byte
            raise MalformedRequest(f"array of {n} items in {end - pos} bytes")
        return int(n)

    group_id = nonnull_string()
    if pos + 4 > end:
        raise MalformedRequest("truncated generation")
    (generation,) = _I32.unpack_from(buf, pos)
    pos += 4
    member_id = nonnull_string()
    instance = string(True) if version >= 7 else None
    retention = -1
    if version <= 4:
        if pos + 8 > end:
            raise MalformedRequest("truncated retention_time_ms")
        (retention,) = _I64.unpack_from(buf, pos)
        pos += 8
    head = _PARTITION_HEAD_V6 if version >= 6 else _PARTITION_HEAD
    topics = []
    for _ in range(count()):
        name = nonnull_string()
        parts = []
        for _ in range(count()):
            if pos + head.size > end:
                raise MalformedRequest("truncated partition")
            fields = head.unpack_from(buf, pos)
            pos += head.size
            epoch = fields[2] if version >= 6 else -1
            parts.append((fields[0], fields[1], epoch, string(True)))
        topics.append((name, tuple(parts)))
    return OffsetCommitBody(group_id, generation, member_id, instance, retention, tuple(topics))


def _decode_flexible(ctx: RequestContext) -> OffsetCommitBody:
    r = Reader(ctx.frame, ctx.header.body_offset)
    group_id = r.nonnull_string(True)
    generation = r.i32()
    member_id = r.nonnull_string(True)
    instance = r.string(True)  # v7+

    def partition() -> OffsetCommitPartitionBody:
        index = r.i32()
        offset = r.i64()
        epoch = r.i32()  # v6+
        metadata = r.string(True)
        r.skip_tags()
        return (index, offset, epoch, metadata)

    def topic() -> tuple[str, tuple[OffsetCommitPartitionBody, ...]]:
        name = r.nonnull_string(True)
        parts = tuple(r.array(True, partition))
        r.skip_tags()
        return name, parts

    topics = tuple(r.array(True, topic))
    r.skip_tags()
    return OffsetCommitBody(group_id, generation, member_id, instance, -1, topics)


def encode_offset_commit_response(ctx: RequestContext, topics: list[tuple[str, list[tuple[int, int]]]]) -> bytearray:
    """The whole response frame: per topic (request order) its (partition, error code)s."""
    flex = ctx.flexible
    w = response_writer(ctx.header.correlation_id, flex)
    if ctx.version >= 3:
        w.i32(0)  # throttle_time_ms
    w.length(len(topics), flex, True)
    for name, parts in topics:
        w.string(name, flex)
        w.length(len(parts), flex, True)
        for index, code in parts:
            w.i32(index)
            w.i16(code if code in _KNOWN_CODES else _UNKNOWN_SERVER_ERROR)
            if flex:
                w.no_tags()
        if flex:
            w.no_tags()
    if flex:
        w.no_tags()
    return w.frame()
