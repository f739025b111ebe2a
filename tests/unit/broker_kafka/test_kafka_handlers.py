"""The client listener's handlers against the in-memory fake services, with requests and
responses encoded/decoded by kafka-python's own protocol classes."""

from __future__ import annotations

import asyncio
import struct
import time
from typing import Any

import pytest
from kafka.protocol.admin.cluster import DescribeClusterRequest, DescribeLogDirsRequest
from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.consumer.offsets import ListOffsetsRequest, OffsetForLeaderEpochRequest
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.metadata.metadata import MetadataRequest
from kafka.protocol.producer.produce import ProduceRequest
from kafka.protocol.producer.transaction import InitProducerIdRequest

from broker.kafka.apis import SUPPORTED
from broker.kafka.server import KafkaRequestHandler
from broker.kafka.services import ListenerConfig, PartitionView
from quorum.kafka_errors import ErrorCode
from quorum.wire.transport import CloseConnection
from tests.unit.broker_kafka.conftest import batch, call
from tests.unit.broker_kafka.fake_services import FakeServices, replica

# --------------------------------------------------------------------------- ApiVersions


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_api_versions_lists_every_supported_range(handler: KafkaRequestHandler, version: int) -> None:
    kwargs: dict[str, Any] = {}
    if version >= 3:
        kwargs = {"client_software_name": "kafka-python", "client_software_version": "3.0.12"}
    resp = asyncio.run(call(handler, ApiVersionsRequest(**kwargs), version))
    assert resp.error_code == 0
    got = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert got == SUPPORTED
    assert got[0] == (0, 10) and got[1] == (4, 12) and got[18] == (0, 3)
    assert got[22] == (0, 5)  # InitProducerId, idempotent producers (Kafka 3.9's range)


def test_api_versions_unknown_version_gets_35_with_v0_body(handler: KafkaRequestHandler) -> None:
    req = ApiVersionsRequest(client_software_name="x", client_software_version="1")
    req.with_header(correlation_id=99, client_id="c")
    raw = bytes(asyncio.run(handler(bytes(req.encode(version=4, header=True)))) or b"")
    body = raw[4:]
    # response header v0: the correlation id only, no tagged-field byte (KIP-511)
    assert struct.unpack_from(">i", body, 0)[0] == 99
    decoded = ApiVersionsResponse.decode(body[4:], version=0)
    assert decoded.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert {k.api_key for k in decoded.api_keys} == set(SUPPORTED)


def test_api_versions_v3_invalid_software_name(handler: KafkaRequestHandler) -> None:
    req = ApiVersionsRequest(client_software_name="bad name!", client_software_version="1.0")
    resp = asyncio.run(call(handler, req, 3))
    assert resp.error_code == ErrorCode.INVALID_REQUEST


# --------------------------------------------------------------------------- InitProducerId


@pytest.mark.parametrize("version", [0, 2, 3, 5])
def test_init_producer_id_gives_a_new_id_at_epoch_0(
    handler: KafkaRequestHandler, services: FakeServices, version: int
) -> None:
    fresh = InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000)
    first = asyncio.run(call(handler, fresh, version))
    # v3+ (KIP-360): a producer sending its id and epoch gets a fresh id (Kafka's answer without
    # a transactional id).
    again = InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000)
    if version >= 3:
        again = InitProducerIdRequest(
            transactional_id=None, transaction_timeout_ms=60000, producer_id=first.producer_id, producer_epoch=0
        )
    second = asyncio.run(call(handler, again, version))
    assert (first.error_code, first.producer_id, first.producer_epoch) == (0, 1000, 0)
    assert (second.error_code, second.producer_id, second.producer_epoch) == (0, 1001, 0)


def test_init_producer_id_with_a_transactional_id_is_coordinator_not_available(
    handler: KafkaRequestHandler, services: FakeServices
) -> None:
    resp = asyncio.run(call(handler, InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=60000), 4))
    assert (resp.error_code, resp.producer_id, resp.producer_epoch) == (ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1)
    empty = asyncio.run(call(handler, InitProducerIdRequest(transactional_id="", transaction_timeout_ms=60000), 4))
    assert (empty.error_code, empty.producer_id) == (ErrorCode.INVALID_REQUEST, -1)
    assert services.producer_ids_given == 0


# --------------------------------------------------------------------------- Metadata


@pytest.mark.parametrize("version", [1, 4, 7, 9, 10, 12])
def test_metadata_null_topics_means_all(handler: KafkaRequestHandler, version: int) -> None:
    kwargs: dict[str, Any] = {"topics": None}
    if version >= 4:
        kwargs["allow_auto_topic_creation"] = False
    resp = asyncio.run(call(handler, MetadataRequest(**kwargs), version))
    assert sorted(t.name for t in resp.topics) == ["events", "logs", "remote"]
    assert [(b.node_id, b.host, b.port, b.rack) for b in resp.brokers] == [
        (1, "127.0.0.1", 19201, "rack-a"),
        (2, "127.0.0.1", 19202, "rack-b"),
        (3, "127.0.0.1", 19203, "rack-c"),
    ]
    assert resp.controller_id == 1
    events = next(t for t in resp.topics if t.name == "events")
    parts = {p.partition_index: p for p in events.partitions}
    assert parts[1].leader_id == 2 and list(parts[1].replica_nodes) == [2, 3, 1]
    if version >= 7:
        assert parts[0].leader_epoch == 3
    if version >= 10:
        assert str(events.topic_id) == "00000000-0000-0000-0000-0000000003e8"


def test_metadata_empty_list_means_none(handler: KafkaRequestHandler) -> None:
    resp = asyncio.run(call(handler, MetadataRequest(topics=[], allow_auto_topic_creation=False), 9))
    assert list(resp.topics) == []


async def _until(condition: Any, timeout_s: float = 30.0) -> None:
    """Return once `condition()` is true (checked every millisecond); fail after `timeout_s`,
    a bound on "it happens at all", not on how soon."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.001)


def test_metadata_unknown_topic_auto_create(handler: KafkaRequestHandler, services: FakeServices) -> None:
    async def go() -> Any:
        req = MetadataRequest(
            topics=[
                MetadataRequest.MetadataRequestTopic(name="fresh"),
                MetadataRequest.MetadataRequestTopic(name="b@d"),
            ],
            allow_auto_topic_creation=True,
        )
        resp = await call(handler, req, 12)
        # The CreateTopics is sent in the background: wait for it to be forwarded.
        await _until(lambda: services.forwarded)
        return resp

    resp = asyncio.run(go())
    errors = {t.name: t.error_code for t in resp.topics}
    assert errors == {"fresh": ErrorCode.LEADER_NOT_AVAILABLE, "b@d": ErrorCode.INVALID_TOPIC_EXCEPTION}
    assert len(services.forwarded) == 1
    api_key, _, frame = services.forwarded[0]
    assert api_key == 19
    from quorum.wire.admin_codec import decode_admin_request

    created = decode_admin_request(frame[4:]).request
    assert [(t.name, t.num_partitions, t.replication_factor) for t in created.topics] == [("fresh", 4, 3)]


def test_metadata_unknown_topic_without_auto_create(services: FakeServices) -> None:
    handler = KafkaRequestHandler(services, ListenerConfig(auto_create_topics_enable=False))
    req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="fresh")], allow_auto_topic_creation=True)
    resp = asyncio.run(call(handler, req, 12))
    assert resp.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert services.forwarded == []


# --------------------------------------------------------------------------- Produce


def _produce(topic_parts: dict[str, dict[int, bytes | None]], acks: int = -1) -> ProduceRequest:
    data = [
        ProduceRequest.TopicProduceData(
            name=t,
            partition_data=[
                ProduceRequest.TopicProduceData.PartitionProduceData(index=p, records=r) for p, r in ps.items()
            ],
        )
        for t, ps in topic_parts.items()
    ]
    return ProduceRequest(transactional_id=None, acks=acks, timeout_ms=1000, topic_data=data)


@pytest.mark.parametrize("version", [3, 7, 8, 9, 10])
def test_produce_assigns_offsets(handler: KafkaRequestHandler, services: FakeServices, version: int) -> None:
    async def go() -> list[Any]:
        out = []
        for _ in range(2):
            out.append(await call(handler, _produce({"events": {0: batch(3)}, "logs": {0: batch(2)}}), version))
        return out

    first, second = asyncio.run(go())
    offsets = [(t.name, p.index, p.error_code, p.base_offset) for t in second.responses for p in t.partition_responses]
    assert offsets == [("events", 0, 0, 3), ("logs", 0, 0, 2)]
    assert services.parts[("events", 0)].leo == 6


def test_produce_to_follower_names_the_leader(handler: KafkaRequestHandler) -> None:
    resp = asyncio.run(call(handler, _produce({"events": {1: batch()}}), 10))
    p = resp.responses[0].partition_responses[0]
    assert p.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (2, 3)  # KIP-951
    assert [(e.node_id, e.host, e.port, e.rack) for e in resp.node_endpoints] == [(2, "127.0.0.1", 19202, "rack-b")]


def test_produce_bad_batches(handler: KafkaRequestHandler) -> None:
    good = batch(2)
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 0xFF
    wrong_magic = bytearray(good)
    wrong_magic[16] = 1
    lying = bytearray(good)
    struct.pack_into(">i", lying, 8, len(good) + 100)
    records = {0: bytes(bad_crc)}
    resp = asyncio.run(call(handler, _produce({"events": records}), 9))
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.CORRUPT_MESSAGE
    for bad in (bytes(wrong_magic), bytes(lying), good + good, good[:40], b"", None):
        resp = asyncio.run(call(handler, _produce({"events": {0: bad}}), 9))
        p = resp.responses[0].partition_responses[0]
        assert p.error_code == ErrorCode.INVALID_RECORD, bad
        assert p.error_message


def test_produce_message_too_large(services: FakeServices, config: ListenerConfig) -> None:
    services.max_message_bytes = 1000
    handler = KafkaRequestHandler(services, config)
    resp = asyncio.run(call(handler, _produce({"events": {0: batch(1, value_size=2000)}}), 9))
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.MESSAGE_TOO_LARGE


def test_produce_old_versions_and_bad_acks_refused(handler: KafkaRequestHandler, services: FakeServices) -> None:
    resp = asyncio.run(call(handler, _produce({"events": {0: batch()}}), 2))
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.UNSUPPORTED_VERSION
    resp = asyncio.run(call(handler, _produce({"events": {0: batch()}}, acks=2), 9))
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.INVALID_REQUIRED_ACKS
    assert services.parts[("events", 0)].leo == 0


def test_produce_acks_zero_sends_nothing_and_closes_on_error(
    handler: KafkaRequestHandler, services: FakeServices
) -> None:
    req = _produce({"events": {0: batch()}}, acks=0)
    req.with_header(correlation_id=1, client_id="c")
    assert asyncio.run(handler(bytes(req.encode(version=9, header=True)))) is None
    assert services.parts[("events", 0)].leo == 3
    req = _produce({"events": {1: batch()}}, acks=0)  # not the leader
    req.with_header(correlation_id=2, client_id="c")
    with pytest.raises(CloseConnection):
        asyncio.run(handler(bytes(req.encode(version=9, header=True))))


# --------------------------------------------------------------------------- Fetch


def _fetch(
    parts: list[tuple[str, int, int]],
    *,
    session: tuple[int, int] = (0, -1),
    max_bytes: int = 1 << 20,
    partition_max: int = 1 << 20,
    wait: int = 0,
    min_bytes: int = 1,
    rack: str = "",
    forgotten: list[tuple[str, list[int]]] | None = None,
) -> FetchRequest:
    topics: dict[str, list[Any]] = {}
    for t, p, off in parts:
        topics.setdefault(t, []).append(
            FetchRequest.FetchTopic.FetchPartition(
                partition=p,
                current_leader_epoch=-1,
                fetch_offset=off,
                last_fetched_epoch=-1,
                log_start_offset=-1,
                partition_max_bytes=partition_max,
            )
        )
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=wait,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=session[0],
        session_epoch=session[1],
        topics=[FetchRequest.FetchTopic(topic=t, partitions=ps) for t, ps in topics.items()],
        forgotten_topics_data=[FetchRequest.ForgottenTopic(topic=t, partitions=ps) for t, ps in (forgotten or [])],
        rack_id=rack,
    )


def _records(resp: Any) -> dict[tuple[str, int], tuple[int, bytes]]:
    out = {}
    for t in resp.responses:
        for p in t.partitions:
            out[(t.topic, p.partition_index)] = (p.error_code, bytes(p.records or b""))
    return out


@pytest.mark.parametrize("version", [4, 7, 11, 12])
def test_fetch_returns_whole_batches(handler: KafkaRequestHandler, services: FakeServices, version: int) -> None:
    b1, b2 = batch(3), batch(4)

    async def go() -> Any:
        await call(handler, _produce({"events": {0: b1}}), 9)
        await call(handler, _produce({"events": {0: b2}}), 9)
        # offset 4 is inside the second batch (3..6): the whole batch comes back
        return await call(handler, _fetch([("events", 0, 4), ("logs", 0, 0)]), version)

    resp = asyncio.run(go())
    got = _records(resp)
    error, data = got[("events", 0)]
    assert error == 0
    assert data[8:] == b2[8:] and struct.unpack_from(">q", data)[0] == 3
    assert got[("logs", 0)] == (0, b"")  # a full response lists every requested partition
    p = resp.responses[0].partitions[0]
    assert p.high_watermark == 7


def test_fetch_first_batch_even_above_max_bytes(handler: KafkaRequestHandler) -> None:
    big = batch(5, value_size=3000)

    async def go() -> Any:
        await call(handler, _produce({"events": {0: big}}), 9)
        return await call(handler, _fetch([("events", 0, 0)], max_bytes=100, partition_max=100), 12)

    assert len(_records(asyncio.run(go()))[("events", 0)][1]) == len(big)


def test_fetch_long_poll_wakes_on_produce(handler: KafkaRequestHandler) -> None:
    """A fetch waiting up to 10 minutes is answered after the produce: woken by it (its
    expiry is far beyond the 60 s this test waits), with the records."""

    async def go() -> Any:
        fetch = asyncio.create_task(call(handler, _fetch([("events", 0, 0)], wait=600_000), 12, correlation_id=1))
        await asyncio.sleep(0.1)
        assert not fetch.done()
        await call(handler, _produce({"events": {0: batch()}}), 9, correlation_id=2)
        return await asyncio.wait_for(fetch, 60)

    resp = asyncio.run(go())
    assert len(_records(resp)[("events", 0)][1]) > 0


def test_fetch_long_poll_expires(handler: KafkaRequestHandler) -> None:
    async def go() -> tuple[Any, float]:
        loop = asyncio.get_running_loop()
        start = loop.time()
        resp = await call(handler, _fetch([("events", 0, 0)], wait=200), 12)
        return resp, loop.time() - start

    resp, took = asyncio.run(go())
    assert _records(resp)[("events", 0)] == (0, b"")
    # Not answered before max_wait_ms (200 ms; 1 ms for the loop clock's resolution); that
    # it is answered at all is the contract on the other side (the test would hang).
    assert took >= 0.199, took


def test_fetch_errors_per_partition(handler: KafkaRequestHandler) -> None:
    resp = asyncio.run(call(handler, _fetch([("remote", 0, 0), ("nope", 0, 0), ("events", 0, 99)]), 12))
    got = _records(resp)
    assert got[("remote", 0)][0] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert got[("nope", 0)][0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert got[("events", 0)][0] == ErrorCode.OFFSET_OUT_OF_RANGE
    leader = resp.responses[0].partitions[0].current_leader
    assert (leader.leader_id, leader.leader_epoch) == (2, 3)


def test_fetch_consumer_v11_may_read_from_follower(handler: KafkaRequestHandler, services: FakeServices) -> None:
    asyncio.run(call(handler, _fetch([("events", 0, 0)]), 11))
    assert services.fetch_calls[-1].fetch_only_leader is False
    asyncio.run(call(handler, _fetch([("events", 0, 0)]), 10))
    assert services.fetch_calls[-1].fetch_only_leader is True


def test_fetch_preferred_read_replica(services: FakeServices) -> None:
    config = ListenerConfig(replica_selector_class="org.apache.kafka.common.replica.RackAwareReplicaSelector")
    handler = KafkaRequestHandler(services, config)
    services.views[("events", 0)] = PartitionView(
        1, (replica(1, "rack-a", 10), replica(2, "rack-b", 10), replica(3, "rack-c", 5))
    )

    async def go(rack: str) -> Any:
        await call(handler, _produce({"events": {0: batch()}}), 9)
        return await call(handler, _fetch([("events", 0, 0)], rack=rack, wait=5000), 12)

    resp = asyncio.run(go("rack-b"))
    p = resp.responses[0].partitions[0]
    assert p.preferred_read_replica == 2 and bytes(p.records or b"") == b""
    assert services.fetch_calls[-1].max_wait_ms == 0  # answered at once
    resp = asyncio.run(go("rack-a"))  # the leader's own rack: read from the leader
    assert resp.responses[0].partitions[0].preferred_read_replica == -1
    resp = asyncio.run(go("rack-c"))  # rack-c's replica does not hold offset 0..? it does (leo 5)
    assert resp.responses[0].partitions[0].preferred_read_replica == 3


def test_fetch_sessions_full_then_incremental(handler: KafkaRequestHandler) -> None:
    async def go() -> list[Any]:
        out = []
        await call(handler, _produce({"events": {0: batch()}}), 9)
        full = await call(handler, _fetch([("events", 0, 0), ("logs", 0, 0)], session=(0, 0)), 12)
        out.append(full)
        sid = full.session_id
        # the client moved its position past the data; nothing new: no partition listed
        out.append(await call(handler, _fetch([("events", 0, 3)], session=(sid, 1)), 12))
        await call(handler, _produce({"logs": {0: batch()}}), 9)
        out.append(await call(handler, _fetch([], session=(sid, 2)), 12))
        out.append(await call(handler, _fetch([], session=(sid, 2)), 12))  # stale epoch
        out.append(await call(handler, _fetch([], session=(12345, 1)), 12))  # unknown session
        out.append(await call(handler, _fetch([], session=(sid, 3), forgotten=[("logs", [0])]), 12))
        return out

    full, empty, changed, stale, unknown, forgot = asyncio.run(go())
    assert full.session_id != 0 and set(_records(full)) == {("events", 0), ("logs", 0)}
    assert empty.error_code == 0 and _records(empty) == {}
    assert set(_records(changed)) == {("logs", 0)}  # only the partition with news
    assert stale.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert unknown.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert forgot.error_code == 0 and _records(forgot) == {}


# --------------------------------------------------------------------------- offsets, records, dirs, cluster


def test_list_offsets(handler: KafkaRequestHandler) -> None:
    def req(parts: list[tuple[int, int]]) -> ListOffsetsRequest:
        return ListOffsetsRequest(
            replica_id=-1,
            isolation_level=0,
            topics=[
                ListOffsetsRequest.ListOffsetsTopic(
                    name="events",
                    partitions=[
                        ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                            partition_index=p, current_leader_epoch=-1, timestamp=ts
                        )
                        for p, ts in parts
                    ],
                )
            ],
        )

    async def go() -> tuple[Any, Any, Any]:
        await call(handler, _produce({"events": {0: batch(5)}}), 9)
        a = await call(handler, req([(0, -1)]), 7)
        b = await call(handler, req([(0, -2), (1, -1)]), 4)
        c = await call(handler, req([(0, -3)]), 6)
        return a, b, c

    latest, mixed, max_ts_old = asyncio.run(go())
    assert latest.topics[0].partitions[0].offset == 5
    assert [(p.error_code, p.offset) for p in mixed.topics[0].partitions] == [
        (0, 0),
        (ErrorCode.NOT_LEADER_OR_FOLLOWER, -1),
    ]
    assert max_ts_old.topics[0].partitions[0].error_code == ErrorCode.UNSUPPORTED_VERSION
    dup = asyncio.run(call(handler, req([(0, -1), (0, -2)]), 7))
    assert {p.error_code for p in dup.topics[0].partitions} == {ErrorCode.INVALID_REQUEST}


def test_offset_for_leader_epoch(handler: KafkaRequestHandler) -> None:
    req = OffsetForLeaderEpochRequest(
        replica_id=-1,
        topics=[
            OffsetForLeaderEpochRequest.OffsetForLeaderTopic(
                topic="events",
                partitions=[
                    OffsetForLeaderEpochRequest.OffsetForLeaderTopic.OffsetForLeaderPartition(
                        partition=0, current_leader_epoch=3, leader_epoch=3
                    ),
                    OffsetForLeaderEpochRequest.OffsetForLeaderTopic.OffsetForLeaderPartition(
                        partition=1, current_leader_epoch=3, leader_epoch=3
                    ),
                ],
            )
        ],
    )
    for version in (2, 3, 4):
        resp = asyncio.run(call(handler, req, version))
        parts = resp.topics[0].partitions
        assert [(p.partition, p.error_code, p.leader_epoch) for p in parts] == [
            (0, 0, 3),
            (1, ErrorCode.NOT_LEADER_OR_FOLLOWER, -1),
        ]


def test_delete_records_and_describe_log_dirs(handler: KafkaRequestHandler, services: FakeServices) -> None:
    from kafka.protocol.admin.topics import DeleteRecordsRequest

    async def go() -> tuple[Any, Any]:
        await call(handler, _produce({"events": {0: batch(5)}}), 9)
        req = DeleteRecordsRequest(
            topics=[
                DeleteRecordsRequest.DeleteRecordsTopic(
                    name="events",
                    partitions=[
                        DeleteRecordsRequest.DeleteRecordsTopic.DeleteRecordsPartition(partition_index=0, offset=2),
                        DeleteRecordsRequest.DeleteRecordsTopic.DeleteRecordsPartition(partition_index=1, offset=-7),
                    ],
                )
            ],
            timeout_ms=1000,
        )
        deleted = await call(handler, req, 2)
        dirs = await call(handler, DescribeLogDirsRequest(topics=None), 4)
        return deleted, dirs

    deleted, dirs = asyncio.run(go())
    parts = deleted.topics[0].partitions
    assert [(p.partition_index, p.error_code, p.low_watermark) for p in parts] == [
        (0, 0, 2),
        (1, ErrorCode.OFFSET_OUT_OF_RANGE, -1),
    ]
    result = dirs.results[0]
    assert result.log_dir == "/fake/log-dir" and result.total_bytes == 1 << 30
    assert {t.name for t in result.topics} == {"events", "logs", "remote"}


def test_describe_cluster(handler: KafkaRequestHandler) -> None:
    resp = asyncio.run(call(handler, DescribeClusterRequest(include_cluster_authorized_operations=False), 0))
    assert resp.cluster_id == "fake-cluster-id" and resp.controller_id == 1
    assert [b.broker_id for b in resp.brokers] == [1, 2, 3]
    resp = asyncio.run(
        call(handler, DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=2), 1)
    )
    assert resp.error_code == ErrorCode.UNSUPPORTED_ENDPOINT_TYPE


# --------------------------------------------------------------------------- admin forwarding


def test_admin_forwarded_raw_and_timeout_answered(handler: KafkaRequestHandler, services: FakeServices) -> None:
    from kafka.protocol.admin.topics import CreateTopicsRequest, CreateTopicsResponse

    req = CreateTopicsRequest(
        topics=[
            CreateTopicsRequest.CreatableTopic(
                name="t1", num_partitions=2, replication_factor=1, assignments=[], configs=[]
            )
        ],
        timeout_ms=1000,
        validate_only=False,
    )
    # no controller: every topic answered REQUEST_TIMED_OUT
    resp = asyncio.run(call(handler, req, 5, correlation_id=41))
    assert [(t.name, t.error_code) for t in resp.topics] == [("t1", ErrorCode.REQUEST_TIMED_OUT)]
    # a controller answer is relayed with the client's correlation id
    answer = CreateTopicsResponse(
        throttle_time_ms=0,
        topics=[
            CreateTopicsResponse.CreatableTopicResult(
                name="t1",
                topic_id=None,
                error_code=0,
                error_message=None,
                num_partitions=2,
                replication_factor=1,
                configs=[],
            )
        ],
    )
    # the controller's answer: its own correlation id, response header v1 (flexible v5)
    services.forward_answer = struct.pack(">ib", 5555, 0) + bytes(answer.encode(version=5))
    resp = asyncio.run(call(handler, req, 5, correlation_id=42))
    assert [(t.name, t.error_code, t.num_partitions) for t in resp.topics] == [("t1", 0, 2)]
    forwarded = services.forwarded[-1][2]
    assert struct.unpack_from(">i", forwarded, 0)[0] == len(forwarded) - 4


def test_unknown_api_and_version_close_the_connection(handler: KafkaRequestHandler) -> None:
    with pytest.raises(CloseConnection):
        asyncio.run(handler(struct.pack(">hhih", 22, 0, 1, -1)))  # InitProducerId: not served
    with pytest.raises(CloseConnection):
        asyncio.run(handler(struct.pack(">hhih", 1, 13, 1, -1)))  # Fetch v13
    with pytest.raises(CloseConnection):
        asyncio.run(handler(b"\x00\x01"))


def test_metadata_v0_empty_list_means_all(handler: KafkaRequestHandler) -> None:
    resp = asyncio.run(call(handler, MetadataRequest(topics=[]), 0))
    assert sorted(t.name for t in resp.topics) == ["events", "logs", "remote"]
