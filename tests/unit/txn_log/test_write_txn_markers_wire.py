"""WriteTxnMarkers' hand-rolled decoder (broker/kafka/write_txn_markers.py) against
kafka-python's encoder, at v0 (which kio no longer has) and v1 (flexible)."""

from __future__ import annotations

import pytest
from kafka.protocol.producer.transaction import WriteTxnMarkersRequest

from broker.kafka.apis import SUPPORTED, ApiKey, is_flexible
from broker.kafka.context import RequestContext
from broker.kafka.wire import parse_request_header
from broker.kafka.write_txn_markers import decode_write_txn_markers


@pytest.mark.parametrize("version", [0, 1])
def test_kafka_python_sends_write_txn_markers_v0_and_v1_alike(version: int) -> None:
    assert SUPPORTED[ApiKey.WRITE_TXN_MARKERS] == (0, 1)
    topic = WriteTxnMarkersRequest.WritableTxnMarker.WritableTxnMarkerTopic
    markers = [
        WriteTxnMarkersRequest.WritableTxnMarker(
            producer_id=42, producer_epoch=3, transaction_result=True, coordinator_epoch=9,
            topics=[topic(name="t", partition_indexes=[0, 2]), topic(name="u", partition_indexes=[])],
        ),
        WriteTxnMarkersRequest.WritableTxnMarker(
            producer_id=43, producer_epoch=0, transaction_result=False, coordinator_epoch=-1, topics=[]
        ),
    ]  # fmt: skip
    req = WriteTxnMarkersRequest(markers=markers)
    req.with_header(correlation_id=1, client_id="c")
    frame = memoryview(bytes(req.encode(version=version, header=True, framed=False)))
    flexible = is_flexible(ApiKey.WRITE_TXN_MARKERS, version)
    assert flexible == (version == 1)
    decoded = decode_write_txn_markers(RequestContext(parse_request_header(frame, flexible), frame, flexible))
    got = [(m.producer_id, m.producer_epoch, m.committed, m.coordinator_epoch, m.partitions, t) for m, t in decoded]
    assert got == [
        (42, 3, True, 9, (("t", 0), ("t", 2)), (("t", (0, 2)), ("u", ()))),
        (43, 0, False, -1, (), ()),
    ]
