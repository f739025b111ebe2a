"""Fetch's AbortedTransactions (broker/kafka/fetch.py) as kafka-python decodes them, at a
legacy (v4, the first with isolation levels) and a flexible (v12) version: the list for
READ_COMMITTED, null for READ_UNCOMMITTED, and the LSO in its own field."""

from __future__ import annotations

import pytest
from kafka.protocol.consumer.fetch import FetchResponse

from broker.kafka.apis import ApiKey, is_flexible
from broker.kafka.context import RequestContext
from broker.kafka.fetch import encode_fetch_response
from broker.kafka.services import READ_COMMITTED, READ_UNCOMMITTED, AbortedTransaction, FetchPartition
from broker.kafka.services import FetchPartitionResult as Result
from broker.kafka.wire import RequestHeader
from quorum.kafka_errors import ErrorCode


@pytest.mark.parametrize("version", [4, 12])
@pytest.mark.parametrize("isolation", [READ_COMMITTED, READ_UNCOMMITTED])
def test_aborted_transactions_and_the_lso_on_the_wire(version: int, isolation: int) -> None:
    flexible = is_flexible(ApiKey.FETCH, version)
    ctx = RequestContext(RequestHeader(ApiKey.FETCH, version, 5, "c", 0), memoryview(b""), flexible)
    aborted = (AbortedTransaction(7, 10), AbortedTransaction(8, 12))
    pairs = [
        (FetchPartition("t", 0, 10, 1 << 20), Result(ErrorCode.NONE, 20, 12, 0, b"", aborted_transactions=aborted)),
        (FetchPartition("t", 1, 0, 1 << 20), Result(ErrorCode.NONE, 3, 3, 0, b"")),
    ]
    frame = encode_fetch_response(ctx, ErrorCode.NONE, 0, pairs, isolation)
    resp = FetchResponse.decode(bytes(frame[4:]), version=version, header=True)
    p0, p1 = resp.responses[0].partitions
    assert (p0.high_watermark, p0.last_stable_offset, p1.last_stable_offset) == (20, 12, 3)
    if isolation == READ_COMMITTED:
        assert [(a.producer_id, a.first_offset) for a in p0.aborted_transactions] == [(7, 10), (8, 12)]
        assert list(p1.aborted_transactions) == []
    else:
        assert p0.aborted_transactions is None and p1.aborted_transactions is None
