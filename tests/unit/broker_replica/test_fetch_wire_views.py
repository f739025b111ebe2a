"""A follower's side of zero-copy fetch: the leader's Fetch v12 answer (file ranges, sent as
they are, possibly ending inside a batch) is decoded with the records as slices of the
received frame (no copy) and appended from there; the follower's log then holds the
leader's whole batches byte for byte, and never the partial trailing one."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from kafka.record.default_records import DefaultRecordBatchBuilder

from broker.kafka.apis import ApiKey, is_flexible
from broker.kafka.context import RequestContext
from broker.kafka.fetch import encode_fetch_response
from broker.kafka.services import FetchPartition, FetchPartitionResult
from broker.kafka.spliced import SplicedResponse
from broker.kafka.wire import parse_request_header
from broker.log import LogConfig, PartitionLog
from broker.log.file_range import complete_batches_size
from broker.replica.fetch_wire import FetchPartitionRequest, decode_fetch_answer, encode_fetch_request
from quorum.kafka_errors import ErrorCode

NOW = 1_700_000_000_000


def batch(n: int, size: int) -> bytes:
    b = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, batch_size=1 << 24)
    for i in range(n):
        b.append(i, timestamp=NOW + i, key=None, value=b"r" * size, headers=[])
    return bytes(b.build())


def test_a_follower_appends_the_leaders_ranges_from_the_received_frame(tmp_path: Path) -> None:
    leader = PartitionLog.open(tmp_path / "leader" / "t-0", LogConfig(), topic_id=uuid.uuid4())
    follower = PartitionLog.open(tmp_path / "follower" / "t-0", LogConfig(), topic_id=uuid.uuid4())
    for i in range(30):
        leader.append_as_leader(batch(1 + i % 4, 200 + 50 * i), 3, NOW)
    end = leader.log_end_offset
    rounds = 0
    while follower.log_end_offset < end:
        offset = follower.log_end_offset
        request = encode_fetch_request(
            correlation_id=9, client_id="replica-2", replica_id=2, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
            partitions=[FetchPartitionRequest("t", 0, 3, offset, -1, 0, 5000)],
        )  # fmt: skip
        view = memoryview(request)[4:]
        flexible = is_flexible(ApiKey.FETCH, 12)
        ctx = RequestContext(parse_request_header(view, flexible), view, flexible)
        # A budget that cuts a batch: the follower must keep only the whole ones.
        r = leader.read_range(offset, 5000, max_offset=end, min_one_batch=True)
        assert r is not None
        res = FetchPartitionResult(ErrorCode.NONE, end, end, 0, records=r)
        answer = encode_fetch_response(ctx, ErrorCode.NONE, 0, [(FetchPartition("t", 0, offset, 5000), res)], 0)
        assert isinstance(answer, SplicedResponse)
        frame = answer.to_bytes()[4:]
        (p,) = decode_fetch_answer(frame).partitions
        assert isinstance(p.records, memoryview) and p.records.obj is frame  # a slice, not a copy
        assert bytes(p.records) == r.pread()
        info = follower.append_as_follower(p.records)
        assert info.size_bytes == complete_batches_size(p.records)
        rounds += 1
    assert rounds > 3
    leader_bytes = os.pread(leader.active.fd, leader.active.size, 0)
    assert os.pread(follower.active.fd, follower.active.size, 0) == leader_bytes
