"""TxnOffsetCommit (API 28, v0-4) and OffsetFetch's require_stable through the client listener
(`broker.kafka.group_apis`), with requests and answers encoded by kafka-python's own protocol
classes, over the real coordinator runtime and an in-memory partition."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kafka.protocol.consumer.group import OffsetFetchRequest
from kafka.protocol.producer.transaction import TxnOffsetCommitRequest

from broker.group.runtime import GroupCoordinator
from broker.group.shard import CoordinatorConfig
from broker.kafka.server import KafkaRequestHandler
from broker.kafka.services import ListenerConfig
from tests.unit.broker_kafka.conftest import BROKERS, TOPICS, call
from tests.unit.broker_kafka.fake_services import FakeServices, make_image
from tests.unit.group.test_runtime_txn_offsets import NOW, Host, MemLog

Topic = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
Partition = Topic.TxnOffsetCommitRequestPartition


def txn_request(version: int, *parts: tuple[str, int], member: str = "", generation: int = -1) -> Any:
    topics = {}
    for name, p in parts:
        topics.setdefault(name, []).append(Partition(partition_index=p, committed_offset=40 + p,
                                                     committed_leader_epoch=-1, committed_metadata="m"))  # fmt: skip
    fields: dict[str, Any] = {"transactional_id": "tx", "group_id": "g", "producer_id": 77, "producer_epoch": 1}
    if version >= 3:
        fields.update(generation_id=generation, member_id=member, group_instance_id=None)
    return TxnOffsetCommitRequest(topics=[Topic(name=n, partitions=ps) for n, ps in topics.items()], **fields)


async def fetch_one(handler: KafkaRequestHandler, stable: bool) -> Any:
    """OffsetFetch v7 of events-1 for group g: its partition."""
    topic = OffsetFetchRequest.OffsetFetchRequestTopic(name="events", partition_indexes=[1])
    fetched = await call(handler, OffsetFetchRequest(group_id="g", topics=[topic], require_stable=stable), 7)
    return fetched.topics[0].partitions[0]


def errors(response: Any) -> dict[tuple[str, int], int]:
    return {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}


async def handler_over(started: bool) -> tuple[KafkaRequestHandler, GroupCoordinator]:
    coordinator = GroupCoordinator(1, Host(MemLog()), CoordinatorConfig(), clock=lambda: NOW)
    coordinator.on_metadata()
    if started:
        for _ in range(20):
            await asyncio.sleep(0)
    services = FakeServices(make_image(BROKERS, TOPICS), node_id=1)
    config = ListenerConfig(listener_name="PLAINTEXT", num_partitions=4, default_replication_factor=3)
    return KafkaRequestHandler(services, config, coordinator), coordinator


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_txn_offset_commit_every_version_commits_known_partitions(version: int) -> None:
    async def run() -> None:
        handler, coordinator = await handler_over(started=True)
        r = await call(handler, txn_request(version, ("events", 0), ("events", 9), ("nope", 0)), version)
        assert errors(r) == {("events", 0): 0, ("events", 9): 3, ("nope", 0): 3}  # UNKNOWN_TOPIC_OR_PARTITION
        assert coordinator.partitions[0].shard.has_pending("g", ("events", 0))
        await coordinator.close()

    asyncio.run(run())


@pytest.mark.parametrize(("version", "code"), [(0, 15), (1, 15), (2, 14), (4, 14)])
def test_while_loading_old_versions_see_coordinator_not_available(version: int, code: int) -> None:
    """Kafka answers v0-1 COORDINATOR_NOT_AVAILABLE for COORDINATOR_LOAD_IN_PROGRESS (clients
    before 2.0 did not know it)."""

    async def run() -> None:
        handler, coordinator = await handler_over(started=False)
        r = await call(handler, txn_request(version, ("events", 0)), version)
        assert errors(r) == {("events", 0): code}
        await coordinator.close()

    asyncio.run(run())


def test_txn_offset_commit_v3_checks_the_generation_and_offset_fetch_v7_requires_stable() -> None:
    async def run() -> None:
        handler, coordinator = await handler_over(started=True)
        r = await call(handler, txn_request(3, ("events", 0), member="m", generation=2), 3)
        assert errors(r) == {("events", 0): 22}  # ILLEGAL_GENERATION: an unknown group at a generation
        assert errors(await call(handler, txn_request(3, ("events", 1)), 3)) == {("events", 1): 0}
        for stable, expected in ((False, (-1, 0)), (True, (-1, 88))):
            p = await fetch_one(handler, stable)
            assert (p.committed_offset, p.error_code) == expected  # UNSTABLE_OFFSET_COMMIT with require_stable
        coordinator.on_txn_marker(0, 77, True)
        p = await fetch_one(handler, True)
        assert (p.committed_offset, p.error_code, p.metadata) == (41, 0, "m")
        await coordinator.close()

    asyncio.run(run())
