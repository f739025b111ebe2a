"""The listener's rule modules on their own: fetch-session cache, replica selector,
raw admin forwarding, AlterConfigs translation."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import pytest
from kafka.protocol.admin.configs import AlterConfigsRequest

from broker.kafka.fetch_session import FetchSessionCache, SessionError
from broker.kafka.forwarding import forward_frame, response_has_error
from broker.kafka.replica_selector import select_read_replica
from broker.kafka.server import KafkaRequestHandler
from broker.kafka.services import FetchPartition, FetchPartitionResult, PartitionView
from quorum.controller.requests import AlterConfigOpType, AlterConfigsResult, IncrementalAlterConfigsResponse
from quorum.kafka_errors import ErrorCode
from quorum.metadata.image import ConfigResource
from quorum.wire.admin_codec import decode_admin_request, encode_admin_response
from quorum.wire.transport import PeerUnavailable
from tests.unit.broker_kafka.conftest import call
from tests.unit.broker_kafka.fake_services import FakeServices, replica

# --------------------------------------------------------------------------- fetch sessions


def _parts(n: int, topic: str = "t") -> list[FetchPartition]:
    return [FetchPartition(topic, p, 0, 1000) for p in range(n)]


def _ok(n: int) -> list[FetchPartitionResult]:
    return [FetchPartitionResult(ErrorCode.NONE, 5, 5, 0) for _ in range(n)]


def _open(cache: FetchSessionCache, n: int, *, privileged: bool = False, now: int = 0, topic: str = "t") -> int:
    ctx = cache.new_context(0, 0, _parts(n, topic), [], privileged=privileged, now_ms=now)
    assert not isinstance(ctx, SessionError)
    sid, pairs = ctx.respond(_ok(n))
    assert len(pairs) == n
    return sid


def test_session_cache_slots_and_eviction() -> None:
    cache = FetchSessionCache(max_slots=2, eviction_ms=120_000, seed=1)
    a = _open(cache, 5, now=0)
    b = _open(cache, 1, now=10)
    assert a and b and len(cache) == 2
    # full, nothing stale, new consumer session not bigger than the smallest: no session
    assert _open(cache, 1, now=20) == 0
    # a bigger one evicts the smallest unprivileged session (b)
    c = _open(cache, 3, now=30)
    assert c and cache.get(b) is None and cache.get(a) is not None
    # a follower (privileged) session evicts the least recently used consumer one (a)
    d = _open(cache, 1, privileged=True, now=40)
    assert d and cache.get(a) is None
    # once idle past eviction_ms, any session may be replaced
    e = _open(cache, 1, now=40 + 120_001)
    assert e and len(cache) == 2 and cache.evictions == 3


def test_session_epochs_and_close() -> None:
    cache = FetchSessionCache(seed=2)
    sid = _open(cache, 2)
    ctx = cache.new_context(sid, 1, [], [], privileged=False, now_ms=1)
    assert not isinstance(ctx, SessionError) and ctx.incremental
    assert len(ctx.partitions) == 2
    bad = cache.new_context(sid, 1, [], [], privileged=False, now_ms=2)
    assert bad == SessionError(ErrorCode.INVALID_FETCH_SESSION_EPOCH)
    # epoch -1 with an id closes the session and fetches sessionless
    closing = cache.new_context(sid, -1, _parts(1), [], privileged=False, now_ms=3)
    assert not isinstance(closing, SessionError)
    assert closing.respond(_ok(1))[0] == 0 and cache.get(sid) is None
    assert cache.new_context(0, 3, [], [], privileged=False, now_ms=4) == SessionError(
        ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    )


def test_incremental_rotates_partitions_with_data() -> None:
    cache = FetchSessionCache(seed=3)
    sid = _open(cache, 3)
    ctx = cache.new_context(sid, 1, [], [], privileged=False, now_ms=1)
    assert not isinstance(ctx, SessionError)
    results = _ok(3)
    results[0] = FetchPartitionResult(ErrorCode.NONE, 5, 5, 0, b"records")
    _, pairs = ctx.respond(results)
    assert [p.partition for p, _ in pairs] == [0]
    ctx = cache.new_context(sid, 2, [], [], privileged=False, now_ms=2)
    assert not isinstance(ctx, SessionError)
    assert [p.partition for p in ctx.partitions] == [1, 2, 0]  # partition 0 moved to the end


# --------------------------------------------------------------------------- replica selector


def test_rack_aware_selector() -> None:
    view = PartitionView(
        1, (replica(1, "a", 100), replica(2, "b", 90, caught_up=5), replica(3, "b", 95), replica(4, "c", 50))
    )
    assert select_read_replica(view, "", 10) == 1
    assert select_read_replica(view, "a", 10) == 1  # the leader is in the client's rack
    assert select_read_replica(view, "b", 10) == 3  # highest log end offset in rack b
    assert select_read_replica(view, "b", 93) == 3
    assert select_read_replica(view, "c", 60) == 1  # rack c's replica lacks offset 60
    assert select_read_replica(view, "z", 10) == 1


# --------------------------------------------------------------------------- forwarding


class Link:
    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self.sent: list[tuple[int, bytes, int]] = []
        self._corr = 100

    def leader_id(self) -> int:
        return 7

    def next_correlation_id(self) -> int:
        self._corr += 1
        return self._corr

    async def send(self, node_id: int, frame: bytes, correlation_id: int, api_key: int, api_version: int) -> bytes:
        self.sent.append((node_id, frame, correlation_id))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return struct.pack(">i", correlation_id) + answer


def _create_topics_frame(correlation_id: int) -> bytes:
    from kafka.protocol.admin.topics import CreateTopicsRequest

    req = CreateTopicsRequest(
        topics=[
            CreateTopicsRequest.CreatableTopic(
                name="t", num_partitions=1, replication_factor=1, assignments=[], configs=[]
            )
        ],
        timeout_ms=1000,
        validate_only=False,
    )
    req.with_header(correlation_id=correlation_id, client_id="c")
    return bytes(req.encode(version=5, header=True, framed=True))


def _create_topics_answer(error: int) -> bytes:
    from kafka.protocol.admin.topics import CreateTopicsResponse

    resp = CreateTopicsResponse(
        throttle_time_ms=0,
        topics=[
            CreateTopicsResponse.CreatableTopicResult(
                name="t",
                topic_id=None,
                error_code=error,
                error_message=None,
                num_partitions=1,
                replication_factor=1,
                configs=[],
            )
        ],
    )
    return b"\0" + bytes(resp.encode(version=5))  # header v1's empty tagged fields, then the body


def test_forward_retries_not_controller_and_restores_the_correlation_id() -> None:
    link = Link([PeerUnavailable("down"), _create_topics_answer(ErrorCode.NOT_CONTROLLER), _create_topics_answer(0)])
    answer = asyncio.run(forward_frame(link, _create_topics_frame(9), 19, 5, 5000, retry_backoff_ms=1))
    assert struct.unpack_from(">i", answer)[0] == 9
    assert not response_has_error(answer, 19, 5, ErrorCode.NOT_CONTROLLER)
    assert [struct.unpack_from(">i", f, 8)[0] for _, f, _ in link.sent] == [101, 102, 103]
    assert all(node == 7 for node, _, _ in link.sent)


def test_forward_gives_up_at_the_deadline() -> None:
    link = Link([PeerUnavailable("down")] * 1000)
    with pytest.raises(TimeoutError):
        asyncio.run(forward_frame(link, _create_topics_frame(9), 19, 5, 100, retry_backoff_ms=5))


# --------------------------------------------------------------------------- AlterConfigs


def test_alter_configs_becomes_incremental(handler: KafkaRequestHandler, services: FakeServices) -> None:
    from dataclasses import replace

    image = services.image()
    services._image = replace(image, configs={ConfigResource.topic("events"): {"retention.ms": "1", "segment.ms": "2"}})
    seen: list[Any] = []

    def responder(api_key: int, version: int, frame: bytes) -> bytes:
        decoded = decode_admin_request(frame[4:])
        seen.append(decoded.request)
        results = tuple(AlterConfigsResult(r.resource_type, r.resource_name) for r in decoded.request.resources)
        return encode_admin_response(decoded, IncrementalAlterConfigsResponse(results))

    services.responder = responder
    req = AlterConfigsRequest(
        resources=[
            AlterConfigsRequest.AlterConfigsResource(
                resource_type=2,
                resource_name="events",
                configs=[AlterConfigsRequest.AlterConfigsResource.AlterableConfig(name="retention.ms", value="5")],
            ),
            AlterConfigsRequest.AlterConfigsResource(resource_type=9, resource_name="x", configs=[]),
        ],
        validate_only=False,
    )
    resp = asyncio.run(call(handler, req, 2))
    assert [(r.resource_name, r.error_code) for r in resp.responses] == [
        ("events", 0),
        ("x", ErrorCode.INVALID_REQUEST),
    ]
    (sent,) = seen
    ops = {(op.name, op.op, op.value) for op in sent.resources[0].ops}
    assert ops == {("retention.ms", AlterConfigOpType.SET, "5"), ("segment.ms", AlterConfigOpType.DELETE, None)}


# --------------------------------------------------------------------------- the replica fetcher's wire


def test_follower_fetch_wire_roundtrip(services: FakeServices, config: Any) -> None:
    """The replica fetcher's Fetch v12 (broker.replica.fetch_wire) against this listener:
    replica id, diverging epoch and current leader survive both ways."""
    from broker.kafka.services import FetchParams, LeaderHint
    from broker.replica.fetch_wire import FetchPartitionRequest, decode_fetch_response, encode_fetch_request

    seen: list[FetchParams] = []

    async def fetch(params: FetchParams) -> list[FetchPartitionResult]:
        seen.append(params)
        return [
            FetchPartitionResult(
                ErrorCode.NONE, 10, 10, 0, b"", diverging_epoch=(2, 7), current_leader=LeaderHint(1, 3)
            )
            for _ in params.partitions
        ]

    services.fetch = fetch  # type: ignore[method-assign]
    handler = KafkaRequestHandler(services, config)
    frame = encode_fetch_request(
        correlation_id=5,
        client_id="replica-2",
        replica_id=2,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=1 << 20,
        partitions=[FetchPartitionRequest("events", 0, 3, 12, 2, 0, 1 << 20)],
    )
    raw = asyncio.run(handler(frame[4:]))
    assert raw is not None
    error, parts = decode_fetch_response(bytes(raw)[4:])
    assert error == ErrorCode.NONE
    (p,) = parts
    assert (p.diverging_epoch, p.leader_id, p.leader_epoch, p.high_watermark) == ((2, 7), 1, 3, 10)
    (params,) = seen
    assert params.replica_id == 2 and params.fetch_only_leader
    assert params.partitions[0].last_fetched_epoch == 2 and params.partitions[0].current_leader_epoch == 3
