"""The inter-broker transaction requests on the wire: WriteTxnMarkers v1 (coordinator ->
partition leaders) and AddPartitionsToTxn v4 VerifyOnly (partition leader -> coordinator,
KIP-890 part 1). Frames are built and read with the replica fetcher's helpers
(`broker.replica.fetch_wire`) and kio's schemas."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, Final

from kio.index import load_request_schema, load_response_schema

from broker.replica.fetch_wire import _decode as decode_response_frame
from broker.replica.fetch_wire import _error as error_code
from broker.replica.fetch_wire import _frame as request_frame
from broker.txn.messages import MarkerRequest, TopicPartition, TxnResult
from quorum.kafka_errors import ErrorCode

__all__ = [
    "ADD_PARTITIONS_TO_TXN_API_KEY",
    "VERIFY_VERSION",
    "WRITE_TXN_MARKERS_API_KEY",
    "WRITE_TXN_MARKERS_VERSION",
    "decode_verify_response",
    "decode_write_txn_markers_response",
    "encode_verify_request",
    "encode_write_txn_markers_request",
    "by_topic",
]

WRITE_TXN_MARKERS_API_KEY: Final = 27
WRITE_TXN_MARKERS_VERSION: Final = 1
ADD_PARTITIONS_TO_TXN_API_KEY: Final = 24
VERIFY_VERSION: Final = 4

_WTM_REQUEST: Any = load_request_schema(WRITE_TXN_MARKERS_API_KEY, WRITE_TXN_MARKERS_VERSION)
_WTM_RESPONSE: Any = load_response_schema(WRITE_TXN_MARKERS_API_KEY, WRITE_TXN_MARKERS_VERSION)
_APT_REQUEST: Any = load_request_schema(ADD_PARTITIONS_TO_TXN_API_KEY, VERIFY_VERSION)
_APT_RESPONSE: Any = load_response_schema(ADD_PARTITIONS_TO_TXN_API_KEY, VERIFY_VERSION)


def _nested(cls: Any, name: str) -> Any:
    return getattr(sys.modules[cls.__module__], name)


def by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    """Partitions grouped by topic, each topic's indexes sorted (topics in sorted order)."""
    out: dict[str, list[int]] = {}
    for topic, p in sorted(partitions):
        out.setdefault(topic, []).append(p)
    return out


def encode_write_txn_markers_request(
    markers: Iterable[tuple[MarkerRequest, Iterable[TopicPartition]]], correlation_id: int, client_id: str
) -> bytes:
    """One WriteTxnMarkers v1 frame (with its length prefix): one entry per (transaction,
    the partitions of it this broker leads)."""
    marker_cls = _nested(_WTM_REQUEST, "WritableTxnMarker")
    topic_cls = _nested(_WTM_REQUEST, "WritableTxnMarkerTopic")
    entries = tuple(
        marker_cls(
            producer_id=r.producer_id,
            producer_epoch=r.producer_epoch,
            transaction_result=r.result == TxnResult.COMMIT,
            topics=tuple(topic_cls(name=t, partition_indexes=tuple(ps)) for t, ps in by_topic(tps).items()),
            coordinator_epoch=r.coordinator_epoch,
        )
        for r, tps in markers
    )
    body = _WTM_REQUEST(markers=entries)
    return request_frame(_WTM_REQUEST, WRITE_TXN_MARKERS_API_KEY, WRITE_TXN_MARKERS_VERSION, correlation_id,
                         client_id, body)  # fmt: skip


def decode_write_txn_markers_response(frame: bytes | bytearray) -> dict[int, dict[TopicPartition, ErrorCode]]:
    """Per producer id, each partition's result (`FetchWireError` on bad bytes)."""
    body = decode_response_frame(_WTM_RESPONSE, frame, "WriteTxnMarkers")
    out: dict[int, dict[TopicPartition, ErrorCode]] = {}
    for marker in body.markers:
        results = out.setdefault(int(marker.producer_id), {})
        for topic in marker.topics:
            for p in topic.partitions:
                results[(str(topic.name), int(p.partition_index))] = error_code(p.error_code)
    return out


def encode_verify_request(
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    partitions: Iterable[TopicPartition],
    correlation_id: int,
    client_id: str,
) -> bytes:
    """AddPartitionsToTxn v4 with one VerifyOnly transaction."""
    txn_cls = _nested(_APT_REQUEST, "AddPartitionsToTxnTransaction")
    topic_cls = _nested(_APT_REQUEST, "AddPartitionsToTxnTopic")
    body = _APT_REQUEST(
        transactions=(
            txn_cls(
                transactional_id=transactional_id,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                verify_only=True,
                topics=tuple(topic_cls(name=t, partitions=tuple(ps)) for t, ps in by_topic(partitions).items()),
            ),
        )
    )
    return request_frame(_APT_REQUEST, ADD_PARTITIONS_TO_TXN_API_KEY, VERIFY_VERSION, correlation_id, client_id, body)


def decode_verify_response(
    frame: bytes | bytearray, transactional_id: str
) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
    """(the top-level error, each partition's result for `transactional_id`)."""
    body = decode_response_frame(_APT_RESPONSE, frame, "AddPartitionsToTxn")
    results: dict[TopicPartition, ErrorCode] = {}
    for txn in body.results_by_transaction:
        if txn.transactional_id != transactional_id:
            continue
        for topic in txn.topic_results:
            for p in topic.results_by_partition:
                results[(str(topic.name), int(p.partition_index))] = error_code(p.partition_error_code)
    return error_code(body.error_code), results
