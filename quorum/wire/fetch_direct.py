"""The Raft Fetch (v17, what replicas send and leaders answer) read and written by hand.

Every replica fetches once per replication round, and a leader answers every fetch: kio's
reflective writer and the generic entity reader cost the active controller and each follower
more than the rest of a round's Python. These functions write the bytes kio writes for the
fields `quorum.wire.codec` gives it (tagged fields at their defaults left out, as kio does),
with `quorum.wire.primitives`' Reader and Writer, and read the common shape of a request or
an answer: one topic (`topic_id`), one partition (0). Anything else (another version, more or
fewer topics or partitions, a tag whose bytes do not match its field, bytes left over after
an answer, bytes that run short) gives None, and `codec` decodes the frame with kio, the
reference for every error. Tests hold both paths to the same bytes and the same values.
"""

from __future__ import annotations

import struct
import uuid
from builtins import memoryview  # a module global for mypyc (FetchAnswer's field: see broker/kafka/context.py)
from dataclasses import dataclass
from typing import Final

from quorum.raft.messages import FetchRequest, FetchResponse
from quorum.raft.voter_set import ZERO_UUID
from quorum.wire.primitives import MalformedRequest, Reader, Writer

__all__ = [
    "DIRECT_VERSION",
    "FetchAnswer",
    "decode_fetch_request",
    "decode_fetch_response",
    "encode_fetch_request",
    "encode_fetch_response",
]

DIRECT_VERSION: Final = 17  # the version replicas send (codec.REQUEST_VERSIONS)
_FETCH: Final = 1

_HEAD: Final = struct.Struct(">hhi")  # api_key, api_version, correlation_id
# max_wait_ms, min_bytes, max_bytes, isolation_level, session_id, session_epoch
_REQUEST_HEAD: Final = struct.Struct(">iiibii")
# partition, current_leader_epoch, fetch_offset, last_fetched_epoch, log_start_offset, partition_max_bytes
_PARTITION: Final = struct.Struct(">iiqiqi")
# throttle_time_ms, error_code, session_id
_RESPONSE_HEAD: Final = struct.Struct(">ihi")
# partition_index, error_code, high_watermark, last_stable_offset, log_start_offset
_PARTITION_DATA: Final = struct.Struct(">ihqqq")
_I32: Final = struct.Struct(">i")
_I64_I32: Final = struct.Struct(">qi")
_I32_I64: Final = struct.Struct(">iq")
_I32_I32: Final = struct.Struct(">ii")
_NO_ENTRIES: Final = 1  # a compact array or bytes of length 0 (the length + 1)


class _NotCommon(Exception):
    """Not the common shape: kio's path decodes the frame."""


# --------------------------------------------------------------------------- requests


def encode_fetch_request(
    m: FetchRequest, *, topic_id: uuid.UUID, correlation_id: int, client_id: str | None, cluster_id: str | None
) -> bytes:
    """The request frame (length prefix, header v2, Fetch v17 body) of a replica's fetch of
    partition 0 of `topic_id`: a sessionless full fetch (session 0, epoch -1), min_bytes 0,
    isolation level 0, no forgotten topics, rack "". Raises struct.error for a value out of
    its field's range."""
    w = Writer()
    buf = w.buf
    buf += _HEAD.pack(_FETCH, DIRECT_VERSION, correlation_id)
    w.string(client_id, False)  # the header's client_id is a legacy string even in v2
    w.no_tags()
    buf += _REQUEST_HEAD.pack(m.max_wait_ms, 0, m.max_bytes, 0, 0, -1)
    buf.append(2)  # one topic
    buf += topic_id.bytes
    buf.append(2)  # one partition
    buf += _PARTITION.pack(
        0, m.current_leader_epoch, m.fetch_offset, m.last_fetched_epoch, m.log_start_offset, m.max_bytes
    )
    if m.replica_directory_id == ZERO_UUID:
        w.no_tags()
    else:
        buf += b"\x01\x00\x10"  # one tag: 0 (ReplicaDirectoryId), 16 bytes
        buf += m.replica_directory_id.bytes
    w.no_tags()  # the topic's
    buf.append(_NO_ENTRIES)  # forgotten_topics_data
    buf.append(_NO_ENTRIES)  # rack_id ""
    tags = Writer(reserve_length=False)
    count = 0
    if cluster_id is not None:  # tag 0: ClusterId
        value = Writer(reserve_length=False)
        value.string(cluster_id, True)
        _tag(tags, 0, value.buf)
        count += 1
    if m.replica_id != -1:  # tag 1: ReplicaState (replica_id, replica_epoch -1), unless the default
        _tag(tags, 1, _I32_I64.pack(m.replica_id, -1) + b"\x00")
        count += 1
    w.uvarint(count)
    buf += tags.buf
    return bytes(w.frame())


def _tag(w: Writer, tag: int, value: bytes | bytearray) -> None:
    w.uvarint(tag)
    w.uvarint(len(value))
    w.buf += value


@dataclass(frozen=True, slots=True)
class FetchRequestFrame:
    correlation_id: int
    client_id: str | None
    cluster_id: str | None
    message: FetchRequest


def decode_fetch_request(frame: bytes, *, topic_id: uuid.UUID) -> FetchRequestFrame | None:
    """A Fetch v17 request frame (without its length prefix) of partition 0 of `topic_id`
    alone, or None when it is not that shape (or does not decode). Bytes after the body are
    ignored, as Kafka (and kio's path) ignore them."""
    try:
        return _decode_request(frame, topic_id.bytes)
    except (MalformedRequest, _NotCommon, struct.error):
        return None


def _decode_request(frame: bytes, topic_id: bytes) -> FetchRequestFrame:
    r = Reader(memoryview(frame))
    if r.end < _HEAD.size:
        raise _NotCommon
    api_key, version, correlation_id = _HEAD.unpack_from(frame, 0)
    if api_key != _FETCH or version != DIRECT_VERSION:
        raise _NotCommon
    r.pos = _HEAD.size
    client_id = r.string(False)
    r.skip_tags()
    at = r._need(_REQUEST_HEAD.size)
    max_wait_ms, _, _, _, _, _ = _REQUEST_HEAD.unpack_from(frame, at)
    if r.uvarint() != 2 or bytes(r.raw(16)) != topic_id or r.uvarint() != 2:
        raise _NotCommon  # not one topic (ours) with one partition
    at = r._need(_PARTITION.size)
    partition, leader_epoch, fetch_offset, last_fetched_epoch, log_start, partition_max = _PARTITION.unpack_from(
        frame, at
    )
    if partition != 0:
        raise _NotCommon
    directory = ZERO_UUID
    for tag, value in _tags(r):
        if tag == 0:  # ReplicaDirectoryId
            if len(value) != 16:
                raise _NotCommon
            directory = uuid.UUID(bytes=bytes(value))
    r.skip_tags()  # the topic's
    for _ in range(_count(r)):  # forgotten_topics_data: topic_id, partitions (int32s), tags
        r.raw(16)
        r.raw(4 * _count(r))
        r.skip_tags()
    r.string(True)  # rack_id
    cluster_id: str | None = None
    replica_id = -1
    for tag, value in _tags(r):
        field = Reader(value)
        if tag == 0:  # ClusterId
            cluster_id = field.string(True)
        elif tag == 1:  # ReplicaState: replica_id, replica_epoch, tags
            replica_id = field.i32()
            field.i64()
            field.skip_tags()
        else:
            continue
        if field.pos != field.end:
            raise _NotCommon
    message = FetchRequest(
        replica_id=replica_id,
        current_leader_epoch=leader_epoch,
        fetch_offset=fetch_offset,
        last_fetched_epoch=last_fetched_epoch,
        log_start_offset=log_start,
        max_wait_ms=max_wait_ms,
        max_bytes=partition_max,
        replica_directory_id=directory,
    )
    return FetchRequestFrame(correlation_id, client_id, cluster_id, message)


def _count(r: Reader) -> int:
    """A non-nullable compact array's length."""
    n = r.uvarint() - 1
    if n < 0 or n > r.end - r.pos:
        raise _NotCommon
    return n


def _tags(r: Reader) -> list[tuple[int, memoryview]]:
    """A tagged-field section: (tag, its value's bytes) in order."""
    count = r.uvarint()
    if count > r.end - r.pos:
        raise _NotCommon
    out = []
    for _ in range(count):
        tag = r.uvarint()
        out.append((tag, r.raw(r.uvarint())))
    return out


# --------------------------------------------------------------------------- responses


def encode_fetch_response(
    r: FetchResponse,
    records: bytes,
    *,
    topic_id: uuid.UUID,
    correlation_id: int,
    top_code: int,
    partition_code: int,
    node_endpoint: tuple[int, str, int] | None,
) -> bytes:
    """The response frame (length prefix, header v1, Fetch v17 body) answering a fetch of
    partition 0 of `topic_id`: `records` (the encoded batches), the error codes as kio
    writes them (`top_code`, `partition_code`), and the leader's endpoint (NodeEndpoints)
    when given. Raises struct.error for a value out of its field's range."""
    w = Writer()
    buf = w.buf
    buf += _I32.pack(correlation_id)
    w.no_tags()
    buf += _RESPONSE_HEAD.pack(0, top_code, 0)
    buf.append(2)  # one topic
    buf += topic_id.bytes
    buf.append(2)  # one partition
    buf += _PARTITION_DATA.pack(0, partition_code, r.high_watermark, -1, r.log_start_offset)
    buf.append(_NO_ENTRIES)  # aborted_transactions: empty
    buf += b"\xff\xff\xff\xff"  # preferred_read_replica -1
    w.uvarint(len(records) + 1)
    buf += records
    tags = Writer(reserve_length=False)
    count = 0
    d = r.diverging_epoch
    if d is not None and (d.epoch, d.offset) != (-1, -1):  # tag 0: DivergingEpoch (epoch, end_offset)
        _tag(tags, 0, _I32_I64.pack(d.epoch, d.offset) + b"\x00")
        count += 1
    if (r.leader_id, r.leader_epoch) != (-1, -1):  # tag 1: CurrentLeader (leader_id, leader_epoch)
        _tag(tags, 1, _I32_I32.pack(r.leader_id, r.leader_epoch) + b"\x00")
        count += 1
    s = r.snapshot_id
    if s is not None and (s.offset, s.epoch) != (-1, -1):  # tag 2: SnapshotId (end_offset, epoch)
        _tag(tags, 2, _I64_I32.pack(s.offset, s.epoch) + b"\x00")
        count += 1
    w.uvarint(count)
    buf += tags.buf
    w.no_tags()  # the topic's
    if node_endpoint is None:
        w.no_tags()
    else:  # tag 0: NodeEndpoints, one: node_id, host, port, rack null, tags
        node_id, host, port = node_endpoint
        value = Writer(reserve_length=False)
        value.buf.append(2)
        value.i32(node_id)
        value.string(host, True)
        value.i32(port)
        value.buf += b"\x00\x00"  # rack null, no tags
        buf.append(1)
        _tag(w, 0, value.buf)
    return bytes(w.frame())


@dataclass(frozen=True, slots=True)
class FetchAnswer:
    """The fields of a Fetch v17 answer of one partition, as `codec` turns them into a
    FetchResponse (the error codes as on the wire; (-1, -1) pairs are absent ones)."""

    correlation_id: int
    top_code: int
    partition_code: int
    high_watermark: int
    log_start_offset: int
    diverging_epoch: tuple[int, int]  # (epoch, end_offset)
    leader: tuple[int, int]  # (leader_id, leader_epoch)
    snapshot_id: tuple[int, int]  # (epoch, end_offset)
    records: memoryview


def decode_fetch_response(frame: bytes, *, topic_id: uuid.UUID) -> FetchAnswer | None:
    """A Fetch v17 response frame (without its length prefix) holding partition 0 of
    `topic_id` alone and nothing after it, or None when it is not that shape (or does not
    decode). The records are a slice of the frame (no copy)."""
    try:
        return _decode_response(frame, topic_id.bytes)
    except (MalformedRequest, _NotCommon, struct.error):
        return None


def _decode_response(frame: bytes, topic_id: bytes) -> FetchAnswer:
    r = Reader(memoryview(frame))
    correlation_id = r.i32()
    r.skip_tags()
    at = r._need(_RESPONSE_HEAD.size)
    _, top_code, _ = _RESPONSE_HEAD.unpack_from(frame, at)
    if r.uvarint() != 2 or bytes(r.raw(16)) != topic_id or r.uvarint() != 2:
        raise _NotCommon
    at = r._need(_PARTITION_DATA.size)
    partition, code, high_watermark, _, log_start = _PARTITION_DATA.unpack_from(frame, at)
    if partition != 0:
        raise _NotCommon
    aborted = r.uvarint() - 1  # nullable: -1 is null
    if aborted > r.end - r.pos:
        raise _NotCommon
    for _ in range(aborted):  # producer_id, first_offset, tags
        r.raw(16)
        r.skip_tags()
    r.i32()  # preferred_read_replica
    records = r.bytes_(True)
    diverging = leader = snapshot = (-1, -1)
    for tag, value in _tags(r):
        field = Reader(value)
        if tag == 0:  # DivergingEpoch: epoch, end_offset
            diverging = field.i32(), field.i64()
        elif tag == 1:  # CurrentLeader: leader_id, leader_epoch
            leader = field.i32(), field.i32()
        elif tag == 2:  # SnapshotId: end_offset, epoch
            end_offset, epoch = field.i64(), field.i32()
            snapshot = epoch, end_offset
        else:
            continue
        field.skip_tags()
        if field.pos != field.end:
            raise _NotCommon
    r.skip_tags()  # the topic's
    r.skip_tags()  # the body's (NodeEndpoints: read by `codec.response_node_endpoints` when needed)
    if r.pos != r.end:
        raise _NotCommon
    return FetchAnswer(
        correlation_id,
        top_code,
        code,
        high_watermark,
        log_start,
        diverging,
        leader,
        snapshot,
        records if records is not None else memoryview(b""),
    )
