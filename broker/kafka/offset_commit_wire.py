"""OffsetCommit (8) by hand, versions 2-9: the group coordinator's hot request.

kio's reflective reader and writer cost more than the coordinator's whole commit rule
(about 40 us each per one-partition request); this walks the bytes once (the legacy
versions directly, the flexible ones with `broker.kafka.wire.Reader`) and writes the answer
with `Writer`, the same fields kio reads and writes (a test compares both over generated
requests of every version).

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
from quorum.frozen_init import fast_frozen_init

__all__ = ["OffsetCommitBody", "OffsetCommitPartitionBody", "decode_offset_commit", "encode_offset_commit_response"]

# The codes a client can know (kio's list, as `broker.kafka.context.kio_error`): any other
# goes out as UNKNOWN_SERVER_ERROR (-1).
_KNOWN_CODES: Final = frozenset(int(c) for c in KioErrorCode)
_UNKNOWN_SERVER_ERROR: Final = -1

_I32: Final = struct.Struct(">i")
_I64: Final = struct.Struct(">q")
_PARTITION_HEAD: Final = struct.Struct(">iq")  # partition_index, committed_offset
_PARTITION_HEAD_V6: Final = struct.Struct(">iqi")  # + committed_leader_epoch
_PARTITION_ANSWER: Final = struct.Struct(">ih")  # partition_index, error_code
# Bound once: mypyc calls a bound method object directly, where `_I32.unpack_from(...)`
# looks the method up on the Struct on every call.
_unpack_i32: Final = _I32.unpack_from
_unpack_partition_head: Final = _PARTITION_HEAD.unpack_from
_unpack_partition_head_v6: Final = _PARTITION_HEAD_V6.unpack_from
_pack_partition_answer: Final = _PARTITION_ANSWER.pack


# (partition_index, committed_offset, committed_leader_epoch: -1 below v6, committed_metadata):
# a plain tuple, as Produce's partitions, since one is made per committed partition.
OffsetCommitPartitionBody = tuple[int, int, int, str | None]


@dataclass(frozen=True, slots=True, init=False)
class OffsetCommitBody:
    group_id: str
    generation_id_or_member_epoch: int
    member_id: str
    group_instance_id: str | None  # None below v7
    retention_time_ms: int  # -1 from v5 (the broker's offsets.retention.minutes)
    topics: tuple[tuple[str, tuple[OffsetCommitPartitionBody, ...]], ...]  # request order

    # Compiled with the module (the dataclass decorator's __init__ would run as Python there);
    # uncompiled, fast_frozen_init replaces it.
    def __init__(
        self,
        group_id: str,
        generation_id_or_member_epoch: int,
        member_id: str,
        group_instance_id: str | None,
        retention_time_ms: int,
        topics: tuple[tuple[str, tuple[OffsetCommitPartitionBody, ...]], ...],
    ) -> None:
        object.__setattr__(self, "group_id", group_id)
        object.__setattr__(self, "generation_id_or_member_epoch", generation_id_or_member_epoch)
        object.__setattr__(self, "member_id", member_id)
        object.__setattr__(self, "group_instance_id", group_instance_id)
        object.__setattr__(self, "retention_time_ms", retention_time_ms)
        object.__setattr__(self, "topics", topics)


fast_frozen_init(OffsetCommitBody)  # not a decorator: mypyc makes a decorated class a Python class


def _string(buf: bytes, pos: int, nullable: bool) -> tuple[str | None, int]:
    """A legacy (int16-length) string at `pos` of `buf` and the position after it."""
    end = len(buf)
    if pos + 2 > end:
        raise MalformedRequest("truncated string length")
    n = (buf[pos] << 8 | buf[pos + 1]) - (0x10000 if buf[pos] & 0x80 else 0)
    pos += 2
    if n < 0:
        if n == -1 and nullable:
            return None, pos
        raise MalformedRequest(f"string length {n}")
    if pos + n > end:
        raise MalformedRequest(f"string of {n} bytes, {end - pos} left")
    try:
        text = buf[pos : pos + n].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedRequest("string is not utf-8") from exc
    return text, pos + n


def _nonnull_string(buf: bytes, pos: int) -> tuple[str, int]:
    text, pos = _string(buf, pos, False)
    assert text is not None  # _string(..., False) raises on null
    return text, pos


def _count(buf: bytes, pos: int) -> int:
    """A legacy (int32) array length at `pos` (4 bytes): never negative, at most the bytes after it."""
    end = len(buf)
    if pos + 4 > end:
        raise MalformedRequest("truncated array length")
    n: int = _unpack_i32(buf, pos)[0]
    if n < 0:
        raise MalformedRequest("null or negative length of a non-nullable array")
    if n > end - pos - 4:  # every item takes at least one byte
        raise MalformedRequest(f"array of {n} items in {end - pos - 4} bytes")
    return n


def decode_offset_commit(ctx: RequestContext) -> OffsetCommitBody:
    """The request body of `ctx` (v2-9); MalformedRequest on bad bytes (bytes after the body
    are ignored, as Kafka does).

    The legacy versions (2-7: what kafka-python and the Java client below 2.4 send) are read
    inline from the frame's bytes (one copy of the frame when it is a view of part of one),
    the flexible ones (8-9) through `Reader`."""
    if ctx.flexible:
        return _decode_flexible(ctx)
    frame = ctx.frame
    whole = frame.obj
    buf = whole if isinstance(whole, bytes) and len(whole) == len(frame) else bytes(frame)
    end = len(buf)
    version = ctx.version
    group_id, pos = _nonnull_string(buf, ctx.header.body_offset)
    if pos + 4 > end:
        raise MalformedRequest("truncated generation")
    generation: int = _unpack_i32(buf, pos)[0]
    member_id, pos = _nonnull_string(buf, pos + 4)
    instance: str | None = None
    if version >= 7:
        instance, pos = _string(buf, pos, True)
    retention = -1
    if version <= 4:
        if pos + 8 > end:
            raise MalformedRequest("truncated retention_time_ms")
        retention = _I64.unpack_from(buf, pos)[0]
        pos += 8
    v6 = version >= 6
    head_size = _PARTITION_HEAD_V6.size if v6 else _PARTITION_HEAD.size
    topics = []
    topic_count = _count(buf, pos)
    pos += 4
    for _ in range(topic_count):
        name, pos = _nonnull_string(buf, pos)
        parts = []
        part_count = _count(buf, pos)
        pos += 4
        for _ in range(part_count):
            if pos + head_size > end:
                raise MalformedRequest("truncated partition")
            if v6:
                index, offset, epoch = _unpack_partition_head_v6(buf, pos)
            else:
                index, offset = _unpack_partition_head(buf, pos)
                epoch = -1
            metadata, pos = _string(buf, pos + head_size, True)
            parts.append((index, offset, epoch, metadata))
        topics.append((name, tuple(parts)))
    return OffsetCommitBody(group_id, generation, member_id, instance, retention, tuple(topics))


def _decode_flexible(ctx: RequestContext) -> OffsetCommitBody:
    r = Reader(ctx.frame, ctx.header.body_offset)
    group_id = r.nonnull_string(True)
    generation = r.i32()
    member_id = r.nonnull_string(True)
    instance = r.string(True)  # v7+
    topics = tuple(r.array(True, lambda: _flexible_topic(r)))
    r.skip_tags()
    return OffsetCommitBody(group_id, generation, member_id, instance, -1, topics)


# Module functions, not closures of `_decode_flexible`: nested functions that call each other
# share an environment that refers back to them, a reference cycle per request.
def _flexible_topic(r: Reader) -> tuple[str, tuple[OffsetCommitPartitionBody, ...]]:
    name = r.nonnull_string(True)
    parts = tuple(r.array(True, lambda: _flexible_partition(r)))
    r.skip_tags()
    return name, parts


def _flexible_partition(r: Reader) -> OffsetCommitPartitionBody:
    index = r.i32()
    offset = r.i64()
    epoch = r.i32()  # v6+
    metadata = r.string(True)
    r.skip_tags()
    return (index, offset, epoch, metadata)


def encode_offset_commit_response(ctx: RequestContext, topics: list[tuple[str, list[tuple[int, int]]]]) -> bytearray:
    """The whole response frame: per topic (request order) its (partition, error code)s."""
    flex = ctx.flexible
    w = response_writer(ctx.header.correlation_id, flex)
    if ctx.version >= 3:
        w.i32(0)  # throttle_time_ms
    w.length(len(topics), flex, True)
    buf = w.buf  # (a response has no file ranges: `buf` stays the writer's)
    for name, parts in topics:
        w.string(name, flex)
        w.length(len(parts), flex, True)
        for index, code in parts:
            buf += _pack_partition_answer(index, code if code in _KNOWN_CODES else _UNKNOWN_SERVER_ERROR)
            if flex:
                buf.append(0)  # the partition's tagged fields: none
        if flex:
            buf.append(0)
    if flex:
        buf.append(0)
    return w.frame()
