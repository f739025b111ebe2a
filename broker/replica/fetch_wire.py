"""The replica fetcher's side of Fetch v12: encode a follower's request, decode the leader's answer.

A follower fetches the partitions it follows from one leader in one request (Kafka's
ReplicaFetcherThread), naming topics by name (v12 is the last version before topic ids),
with `replica_id` = its broker id and `isolation_level` 0, in a KIP-227 fetch session
(`broker.replica.fetch_session_client` decides the session id and epoch, the partitions
sent and those forgotten). Records come back as opaque
bytes: the follower appends them as they are (`PartitionLog.append_as_follower`), so this
module never walks a batch.

Encoding uses kio's generated schemas; decoding goes through the project's defensive reader
(`quorum.wire._reader`), so a hostile or corrupt response raises `FetchWireError`.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final, cast

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_writer

from quorum.kafka_errors import ErrorCode
from quorum.wire._reader import MalformedError, entity_reader

FETCH_API_KEY: Final = 1
FETCH_VERSION: Final = 12

_REQUEST: Any = load_request_schema(FETCH_API_KEY, FETCH_VERSION)
_RESPONSE: Any = load_response_schema(FETCH_API_KEY, FETCH_VERSION)


def _nested(cls: type[Any], name: str) -> Any:
    import sys

    return getattr(sys.modules[cls.__module__], name)


_FetchTopic = _nested(_REQUEST, "FetchTopic")
_FetchPartition = _nested(_REQUEST, "FetchPartition")
_ForgottenTopic = _nested(_REQUEST, "ForgottenTopic")


class FetchWireError(ValueError):
    """The leader's response could not be decoded."""


@dataclass(frozen=True, slots=True)
class FetchPartitionRequest:
    topic: str
    partition: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int  # -1 when the follower's log is empty
    log_start_offset: int
    partition_max_bytes: int


@dataclass(frozen=True, slots=True)
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
    full one (session 0, epoch -1)."""
    by_topic: dict[str, list[Any]] = {}
    for p in partitions:
        by_topic.setdefault(p.topic, []).append(
            _FetchPartition(
                partition=p.partition,
                current_leader_epoch=p.current_leader_epoch,
                fetch_offset=p.fetch_offset,
                last_fetched_epoch=p.last_fetched_epoch,
                log_start_offset=p.log_start_offset,
                partition_max_bytes=p.partition_max_bytes,
            )
        )
    body = _REQUEST(
        cluster_id=None,
        replica_id=replica_id,
        max_wait=timedelta(milliseconds=max_wait_ms),
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=session_id,
        session_epoch=session_epoch,
        topics=tuple(_FetchTopic(topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
        forgotten_topics_data=_forgotten(forgotten),
        rack_id="",
    )
    return _frame(_REQUEST, FETCH_API_KEY, FETCH_VERSION, correlation_id, client_id, body)


def _forgotten(keys: Sequence[tuple[str, int]]) -> tuple[Any, ...]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in keys:
        by_topic.setdefault(topic, []).append(partition)
    return tuple(_ForgottenTopic(topic=t, partitions=tuple(ps)) for t, ps in by_topic.items())


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


def _error(code: Any) -> ErrorCode:
    try:
        return ErrorCode(int(code))
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


def _decode(schema: Any, frame: bytes, what: str) -> Any:
    """A response body from a frame without its length prefix (header, body, nothing after)."""
    try:
        _, pos = entity_reader(schema.__header_schema__)(frame, 0)
        body, end = entity_reader(schema)(frame, pos)
    except MalformedError as exc:
        raise FetchWireError(f"malformed {what} response: {exc}") from exc
    if end != len(frame):
        raise FetchWireError(f"{len(frame) - end} trailing bytes after the {what} response")
    return body


@dataclass(frozen=True, slots=True)
class FetchAnswer:
    error: ErrorCode  # top level: the session's errors (KIP-227)
    session_id: int
    partitions: list[FetchPartitionResponse]


def decode_fetch_response(frame: bytes) -> tuple[ErrorCode, list[FetchPartitionResponse]]:
    """(top-level error, partitions) from a response frame without its length prefix."""
    answer = decode_fetch_answer(frame)
    return answer.error, answer.partitions


def decode_fetch_answer(frame: bytes) -> FetchAnswer:
    """The answer in a response frame without its length prefix."""
    # Read through a memoryview: the records come back as slices of the frame (no copy). The
    # reader is typed for bytes; it only indexes, slices, unpacks and utf-8-decodes its
    # buffer, which a memoryview does alike (tests/unit/broker_replica/test_fetch_wire_views.py).
    body = _decode(_RESPONSE, cast(bytes, memoryview(frame)), "fetch")
    out: list[FetchPartitionResponse] = []
    for t in body.responses:
        for p in t.partitions:
            de = p.diverging_epoch
            diverging = None if (de.epoch == -1 and de.end_offset == -1) else (int(de.epoch), int(de.end_offset))
            out.append(
                FetchPartitionResponse(
                    topic=str(t.topic),
                    partition=int(p.partition_index),
                    error=_error(p.error_code),
                    high_watermark=int(p.high_watermark),
                    log_start_offset=int(p.log_start_offset),
                    diverging_epoch=diverging,
                    leader_id=int(p.current_leader.leader_id),
                    leader_epoch=int(p.current_leader.leader_epoch),
                    records=b"" if p.records is None else p.records,
                )
            )
    return FetchAnswer(_error(body.error_code), int(body.session_id), out)


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


def decode_list_offsets_response(frame: bytes) -> list[ListOffsetsAnswer]:
    body = _decode(_LO_RESPONSE, frame, "list offsets")
    return [
        ListOffsetsAnswer(str(t.name), int(p.partition_index), _error(p.error_code), int(p.offset))
        for t in body.topics
        for p in t.partitions
    ]
