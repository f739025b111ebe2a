"""The replica fetcher's side of Fetch v12: encode a follower's request, decode the leader's answer.

A follower fetches the partitions it follows from one leader in one request (Kafka's
ReplicaFetcherThread), naming topics by name (v12 is the last version before topic ids),
with `replica_id` = its broker id and `isolation_level` 0, in a KIP-227 fetch session
(`broker.replica.fetch_session_client` decides the session id and epoch, the partitions
sent and those forgotten). Records come back as opaque
bytes: the follower appends them as they are (`PartitionLog.append_as_follower`), so this
module never walks a batch.

Fetch v12 is written and read by hand (`broker.kafka.wire`'s Writer and Reader), once per
replication round on every follower: kio's reflective writer and the generic reader cost
more than the rest of a round's Python at moderate load. Both walk the fields kio's schemas
name, in their order (tests compare them over generated requests and answers); the reader
checks every length against the bytes left, so a hostile or corrupt answer raises
`FetchWireError`. ListOffsets, rare, keeps kio's schemas and the generic reader.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_writer

from broker.kafka.wire import MalformedRequest, Reader, Writer
from quorum.frozen_init import fast_frozen_init
from quorum.kafka_errors import ErrorCode
from quorum.wire._reader import MalformedError, entity_reader

FETCH_API_KEY: Final = 1
FETCH_VERSION: Final = 12


def _nested(cls: type[Any], name: str) -> Any:
    import sys

    return getattr(sys.modules[cls.__module__], name)


class FetchWireError(ValueError):
    """The leader's response could not be decoded."""


@dataclass(frozen=True, slots=True, init=False)
class FetchPartitionRequest:
    topic: str
    partition: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int  # -1 when the follower's log is empty
    log_start_offset: int
    partition_max_bytes: int

    # Compiled with the module (the dataclass decorator's __init__ would run as Python there);
    # uncompiled, fast_frozen_init replaces it.
    def __init__(
        self,
        topic: str,
        partition: int,
        current_leader_epoch: int,
        fetch_offset: int,
        last_fetched_epoch: int,
        log_start_offset: int,
        partition_max_bytes: int,
    ) -> None:
        object.__setattr__(self, "topic", topic)
        object.__setattr__(self, "partition", partition)
        object.__setattr__(self, "current_leader_epoch", current_leader_epoch)
        object.__setattr__(self, "fetch_offset", fetch_offset)
        object.__setattr__(self, "last_fetched_epoch", last_fetched_epoch)
        object.__setattr__(self, "log_start_offset", log_start_offset)
        object.__setattr__(self, "partition_max_bytes", partition_max_bytes)


fast_frozen_init(FetchPartitionRequest)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True, init=False)
class FetchPartitionResponse:
    topic: str
    partition: int
    error: ErrorCode
    high_watermark: int
    log_start_offset: int
    diverging_epoch: tuple[int, int] | None  # (epoch, end offset) when the follower must truncate
    leader_id: int
    leader_epoch: int
    records: bytes | memoryview  # a slice of the response frame: appended from there, not copied

    # Compiled with the module (the dataclass decorator's __init__ would run as Python there);
    # uncompiled, fast_frozen_init replaces it.
    def __init__(
        self,
        topic: str,
        partition: int,
        error: ErrorCode,
        high_watermark: int,
        log_start_offset: int,
        diverging_epoch: tuple[int, int] | None,
        leader_id: int,
        leader_epoch: int,
        records: bytes | memoryview,
    ) -> None:
        object.__setattr__(self, "topic", topic)
        object.__setattr__(self, "partition", partition)
        object.__setattr__(self, "error", error)
        object.__setattr__(self, "high_watermark", high_watermark)
        object.__setattr__(self, "log_start_offset", log_start_offset)
        object.__setattr__(self, "diverging_epoch", diverging_epoch)
        object.__setattr__(self, "leader_id", leader_id)
        object.__setattr__(self, "leader_epoch", leader_epoch)
        object.__setattr__(self, "records", records)


fast_frozen_init(FetchPartitionResponse)  # not a decorator: mypyc makes a decorated class a Python class


_REQUEST_HEAD: Final = struct.Struct(">hhi")  # api_key, api_version, correlation_id (header v2)
# replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level, session_id, session_epoch
_BODY_HEAD: Final = struct.Struct(">iiiibii")
# partition, current_leader_epoch, fetch_offset, last_fetched_epoch, log_start_offset, partition_max_bytes
_PARTITION: Final = struct.Struct(">iiqiqi")
_I32: Final = struct.Struct(">i")


def encode_fetch_request(
    *,
    correlation_id: int,
    client_id: str,
    replica_id: int,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    partitions: Sequence[FetchPartitionRequest],
    session_id: int = 0,
    session_epoch: int = -1,
    forgotten: Sequence[tuple[str, int]] = (),
) -> bytes:
    """A complete frame (length prefix included) of a replica Fetch; by default a sessionless
    full one (session 0, epoch -1). Partitions of one topic go under one topic entry, in
    the order their topics first appear (as kio's writer is given them)."""
    w = Writer()
    w.buf += _REQUEST_HEAD.pack(FETCH_API_KEY, FETCH_VERSION, correlation_id)
    w.string(client_id, False)  # the header's client_id is a legacy string even in v2
    w.no_tags()
    w.buf += _BODY_HEAD.pack(replica_id, max_wait_ms, min_bytes, max_bytes, 0, session_id, session_epoch)
    by_topic: dict[str, list[FetchPartitionRequest]] = {}
    for p in partitions:
        by_topic.setdefault(p.topic, []).append(p)
    w.uvarint(len(by_topic) + 1)
    for topic, parts in by_topic.items():
        w.string(topic, True)
        w.uvarint(len(parts) + 1)
        for p in parts:
            w.buf += _PARTITION.pack(
                p.partition, p.current_leader_epoch, p.fetch_offset, p.last_fetched_epoch, p.log_start_offset,
                p.partition_max_bytes,
            )  # fmt: skip
            w.no_tags()
        w.no_tags()
    gone: dict[str, list[int]] = {}
    for topic, partition in forgotten:
        gone.setdefault(topic, []).append(partition)
    w.uvarint(len(gone) + 1)
    for topic, indexes in gone.items():
        w.string(topic, True)
        w.uvarint(len(indexes) + 1)
        for index in indexes:
            w.buf += _I32.pack(index)
        w.no_tags()
    w.string("", True)  # rack_id
    w.no_tags()  # cluster_id (tag 0) is null: no tagged fields
    return bytes(w.frame())


def _frame(schema: Any, api_key: int, version: int, correlation_id: int, client_id: str, body: Any) -> bytes:
    """The request frame: length prefix, header, body."""
    header_schema = schema.__header_schema__
    header = header_schema(
        request_api_key=api_key, request_api_version=version, correlation_id=correlation_id, client_id=client_id
    )
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    entity_writer(header_schema)(buf, header)
    entity_writer(schema)(buf, body)
    view = buf.getbuffer()
    struct.pack_into(">i", view, 0, len(view) - 4)
    del view
    return buf.getvalue()


# Every ErrorCode by its number: `ErrorCode(n)` runs EnumType.__call__ as Python (~6,600
# instructions), once per partition of every fetch answer.
_ERRORS: Final[dict[int, ErrorCode]] = {e.value: e for e in ErrorCode}
_UNKNOWN_SERVER_ERROR: Final = ErrorCode.UNKNOWN_SERVER_ERROR


def _error(code: Any) -> ErrorCode:
    """The ErrorCode numbered `code`; UNKNOWN_SERVER_ERROR for a number it does not name."""
    return _ERRORS.get(int(code), _UNKNOWN_SERVER_ERROR)


def _decode(schema: Any, frame: bytes | bytearray, what: str) -> Any:
    """A response body from a frame without its length prefix (header, body, nothing after)."""
    try:
        _, pos = entity_reader(schema.__header_schema__)(frame, 0)
        body, end = entity_reader(schema)(frame, pos)
    except MalformedError as exc:
        raise FetchWireError(f"malformed {what} response: {exc}") from exc
    if end != len(frame):
        raise FetchWireError(f"{len(frame) - end} trailing bytes after the {what} response")
    return body


@dataclass(frozen=True, slots=True, init=False)
class FetchAnswer:
    error: ErrorCode  # top level: the session's errors (KIP-227)
    session_id: int
    partitions: list[FetchPartitionResponse]

    # Compiled with the module (the dataclass decorator's __init__ would run as Python there);
    # uncompiled, fast_frozen_init replaces it.
    def __init__(self, error: ErrorCode, session_id: int, partitions: list[FetchPartitionResponse]) -> None:
        object.__setattr__(self, "error", error)
        object.__setattr__(self, "session_id", session_id)
        object.__setattr__(self, "partitions", partitions)


fast_frozen_init(FetchAnswer)  # not a decorator: mypyc makes a decorated class a Python class


def decode_fetch_response(frame: bytes) -> tuple[ErrorCode, list[FetchPartitionResponse]]:
    """(top-level error, partitions) from a response frame without its length prefix."""
    answer = decode_fetch_answer(frame)
    return answer.error, answer.partitions


def decode_fetch_answer(frame: bytes | bytearray) -> FetchAnswer:
    """The answer in a response frame without its length prefix (header v1 and the Fetch v12
    body, nothing after them). The records come back as slices of the frame (a memoryview
    over it: no copy); a partition without records has b""."""
    try:
        r = Reader(memoryview(frame))
        r.i32()  # correlation_id (the caller matched it)
        r.skip_tags()
        error: int
        session_id: int
        pos = r.pos
        if pos + _ANSWER_HEAD.size <= r.end:
            _throttle_time_ms, error, session_id = _ANSWER_HEAD.unpack_from(r.buf, pos)
            r.pos = pos + _ANSWER_HEAD.size
        else:
            r.i32()  # throttle_time_ms
            error = r.i16()
            session_id = r.i32()
        out: list[FetchPartitionResponse] = []
        for _ in range(_count(r)):
            topic = r.nonnull_string(True)
            for _ in range(_count(r)):
                out.append(_partition(r, topic))
            r.skip_tags()
        r.skip_tags()
        if r.pos != r.end:
            raise FetchWireError(f"{r.end - r.pos} trailing bytes after the fetch response")
    except MalformedRequest as exc:
        raise FetchWireError(f"malformed fetch response: {exc}") from exc
    return FetchAnswer(_error(error), session_id, out)


def _count(r: Reader) -> int:
    """A non-nullable compact array's length."""
    n = r.uvarint() - 1
    if n < 0:
        raise MalformedRequest("null in a non-nullable array")
    if n > r.end - r.pos:  # every item takes at least one byte
        raise MalformedRequest(f"array of {n} items in {r.end - r.pos} bytes")
    return n


_ANSWER_HEAD: Final = struct.Struct(">ihi")  # throttle_time_ms, error, session_id
# A partition's fixed fields: index i32, error i16, high watermark, last stable offset, log start offset i64.
_PARTITION_HEAD: Final = struct.Struct(">ihqqq")
# After them, in a follower's answer: aborted_transactions null (one 0 byte) and
# preferred_read_replica (i32, not needed): skipped together.
_NULL_ABORTED_AND_REPLICA: Final = 5


def _partition(r: Reader, topic: str) -> FetchPartitionResponse:
    index: int
    error: int
    high_watermark: int
    log_start_offset: int
    pos = r.pos
    if pos + _PARTITION_HEAD.size <= r.end:
        # One unpack (with too few bytes left, field by field: each read raises as it does).
        index, error, high_watermark, _last_stable_offset, log_start_offset = _PARTITION_HEAD.unpack_from(r.buf, pos)
        r.pos = pos + _PARTITION_HEAD.size
    else:
        index = r.i32()
        error = r.i16()
        high_watermark = r.i64()
        r.i64()  # last_stable_offset (a follower reads uncommitted)
        log_start_offset = r.i64()
    pos = r.pos
    if pos + _NULL_ABORTED_AND_REPLICA <= r.end and r.buf[pos] == 0:
        # A follower's answer: aborted_transactions null (compact 0), preferred_read_replica.
        r.pos = pos + _NULL_ABORTED_AND_REPLICA
    else:
        aborted = r.uvarint() - 1  # aborted_transactions: nullable; each producer_id, first_offset, tags
        if aborted > r.end - r.pos:
            raise MalformedRequest(f"array of {aborted} items in {r.end - r.pos} bytes")
        for _ in range(aborted):
            r.i64()
            r.i64()
            r.skip_tags()
        r.i32()  # preferred_read_replica
    records = r.bytes_(True)
    diverging: tuple[int, int] | None = None
    leader_id = leader_epoch = -1
    tags = r.uvarint()
    if tags > r.end - r.pos:
        raise MalformedRequest("tagged-field count exceeds the bytes left")
    for _ in range(tags):
        tag = r.uvarint()
        field = Reader(r.raw(r.uvarint()))  # a tag's value is read within its own size
        if tag == 0:  # DivergingEpoch: epoch, end_offset
            epoch, end_offset = field.i32(), field.i64()
            field.skip_tags()
            diverging = None if (epoch == -1 and end_offset == -1) else (epoch, end_offset)
        elif tag == 1:  # CurrentLeader: leader_id, leader_epoch
            leader_id, leader_epoch = field.i32(), field.i32()
            field.skip_tags()
        # tag 2 (SnapshotId) and unknown tags: not a follower's concern here
    return FetchPartitionResponse(
        topic=topic,
        partition=index,
        error=_error(error),
        high_watermark=high_watermark,
        log_start_offset=log_start_offset,
        diverging_epoch=diverging,
        leader_id=leader_id,
        leader_epoch=leader_epoch,
        records=b"" if records is None else records,
    )


# ---------------------------------------------------------------- ListOffsets (a follower's OFFSET_OUT_OF_RANGE)

LIST_OFFSETS_API_KEY: Final = 2
LIST_OFFSETS_VERSION: Final = 4
"""v4: the first version with ``current_leader_epoch`` (KIP-320), non-flexible."""
EARLIEST_TIMESTAMP: Final = -2
LATEST_TIMESTAMP: Final = -1

_LO_REQUEST: Any = load_request_schema(LIST_OFFSETS_API_KEY, LIST_OFFSETS_VERSION)
_LO_RESPONSE: Any = load_response_schema(LIST_OFFSETS_API_KEY, LIST_OFFSETS_VERSION)
_LOTopic = _nested(_LO_REQUEST, "ListOffsetsTopic")
_LOPartition = _nested(_LO_REQUEST, "ListOffsetsPartition")


@dataclass(frozen=True, slots=True)
class ListOffsetsAnswer:
    topic: str
    partition: int
    error: ErrorCode
    offset: int


def encode_list_offsets_request(
    *, correlation_id: int, client_id: str, replica_id: int, timestamp: int, partitions: list[tuple[str, int, int]]
) -> bytes:
    """A complete frame asking, as replica ``replica_id``, the offset at ``timestamp``
    (EARLIEST_TIMESTAMP: the log start; LATEST_TIMESTAMP: the log end, for a replica) of each
    ``(topic, partition, current_leader_epoch)``."""
    by_topic: dict[str, list[Any]] = {}
    for topic, partition, epoch in partitions:
        by_topic.setdefault(topic, []).append(
            _LOPartition(partition_index=partition, current_leader_epoch=epoch, timestamp=timestamp)
        )
    body = _LO_REQUEST(
        replica_id=replica_id,
        isolation_level=0,
        topics=tuple(_LOTopic(name=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
    )
    return _frame(_LO_REQUEST, LIST_OFFSETS_API_KEY, LIST_OFFSETS_VERSION, correlation_id, client_id, body)


def decode_list_offsets_response(frame: bytes | bytearray) -> list[ListOffsetsAnswer]:
    body = _decode(_LO_RESPONSE, frame, "list offsets")
    return [
        ListOffsetsAnswer(str(t.name), int(p.partition_index), _error(p.error_code), int(p.offset))
        for t in body.topics
        for p in t.partitions
    ]
