"""The active controller end to end in one process: a real single-voter RaftNode
(real log files, fsync, a loopback listener) running the real QuorumController.

Every answer is checked against the committed metadata image, which is what the
brokers and the REST API read.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from quorum.controller.errors import ErrorCode
from quorum.controller.requests import (
    AlterConfigOp,
    AlterConfigOpType,
    AlterConfigsResource,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    ConfigResourceType,
    CreatableTopic,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    ElectionType,
    ElectLeadersRequest,
    IncrementalAlterConfigsRequest,
    PartitionsIncrease,
)
from quorum.metadata.image import ConfigResource
from tests.unit.controller.controller_harness import CLUSTER, run, start, stop


def test_registration_epoch_is_the_record_offset_and_heartbeat_unfences(tmp_path: Path) -> None:
    async def scenario() -> None:
        h = await start(tmp_path)
        try:
            epoch = await h.register(4)
            b = h.sm.image.cluster.brokers[4]
            assert b.epoch == epoch and b.fenced
            # The broker epoch is the offset of its RegisterBrokerRecord in the log.
            assert h.sm.image.offset >= epoch
            resp = await h.heartbeat(4, epoch, want_fence=True)
            assert resp.is_fenced and resp.is_caught_up
            resp = await h.heartbeat(4, epoch)
            assert not resp.is_fenced
            assert not h.sm.image.cluster.brokers[4].fenced
            # Same incarnation again: same epoch, nothing new written.
            assert await h.register(4) == epoch
            # A stale epoch is refused.
            stale = await h.heartbeat(4, epoch + 1000)
            assert stale.error_code == ErrorCode.STALE_BROKER_EPOCH
        finally:
            await stop(h)

    run(scenario())


def test_duplicate_live_registration_refused(tmp_path: Path) -> None:
    async def scenario() -> None:
        h = await start(tmp_path)
        try:
            await h.unfenced_brokers(1 + 10)
            other = BrokerRegistrationRequest(
                broker_id=11, cluster_id=CLUSTER, incarnation_id=uuid.uuid4(), listeners=()
            )
            resp = await h.controller.handle(other)
            assert isinstance(resp, BrokerRegistrationResponse)
            assert resp.error_code == ErrorCode.DUPLICATE_BROKER_REGISTRATION
            wrong = BrokerRegistrationRequest(
                broker_id=12, cluster_id="other", incarnation_id=uuid.uuid4(), listeners=()
            )
            resp = await h.controller.handle(wrong)
            assert isinstance(resp, BrokerRegistrationResponse)
            assert resp.error_code == 104  # INCONSISTENT_CLUSTER_ID
        finally:
            await stop(h)

    run(scenario())


def test_impostor_registration_refused_after_controller_failover(tmp_path: Path) -> None:
    """A new active controller knows the live incarnation from the image: another process
    posing as the broker is refused (while the session lives, fenced or not) until the
    real broker's session times out or its controlled shutdown completes."""

    async def scenario() -> None:
        h = await start(tmp_path, session_timeout_ms=1500)
        await h.unfenced_brokers(4, 5)
        real = h.incarnations[4]
        await stop(h)
        # A new active controller: no heartbeat seen yet, only the image.
        h = await start(tmp_path, session_timeout_ms=1500)
        try:
            assert h.sm.image.cluster.brokers[4].incarnation_id == real
            impostor = BrokerRegistrationRequest(
                broker_id=4, cluster_id=CLUSTER, incarnation_id=uuid.uuid4(), listeners=()
            )
            resp = await h.controller.handle(impostor)
            assert isinstance(resp, BrokerRegistrationResponse)
            assert resp.error_code == ErrorCode.DUPLICATE_BROKER_REGISTRATION, resp
            assert resp.message and "4" in resp.message
            before = h.sm.image.cluster.brokers[4]
            # The real broker, catching up and asking to stay fenced, still owns its id.
            epoch4 = before.epoch
            assert (await h.heartbeat(4, epoch4, want_fence=True)).is_fenced
            resp = await h.controller.handle(impostor)
            assert isinstance(resp, BrokerRegistrationResponse)
            assert resp.error_code == ErrorCode.DUPLICATE_BROKER_REGISTRATION
            assert h.sm.image.cluster.brokers[4].incarnation_id == real
            # Broker 5 shuts down under control: its next incarnation registers at once.
            epoch5 = h.sm.image.cluster.brokers[5].epoch
            assert (await h.heartbeat(5, epoch5, want_shut_down=True)).should_shut_down
            h.incarnations[5] = uuid.uuid4()
            assert await h.register(5) > epoch5
            # Broker 4 goes silent: once its session timed out, a new incarnation is accepted.
            await asyncio.sleep(1.5 + 0.3)
            h.incarnations[4] = uuid.uuid4()
            assert await h.register(4) > epoch4
            assert h.sm.image.cluster.brokers[4].incarnation_id == h.incarnations[4]
        finally:
            await stop(h)

    run(scenario())


def test_create_topics_place_replicas_and_answer_after_commit(tmp_path: Path) -> None:
    async def scenario() -> None:
        h = await start(tmp_path)
        try:
            await h.unfenced_brokers(0, 1, 2, 3, 4)
            req = CreateTopicsRequest(
                (
                    CreatableTopic("orders", 10, 3, configs={"retention.ms": "60000"}),
                    CreatableTopic("defaults"),
                    CreatableTopic("too-wide", 1, 6),
                    CreatableTopic("bad name!"),
                    CreatableTopic("manual", assignments={0: (2, 3), 1: (3, 4)}),
                )
            )
            resp = await h.controller.handle(req)
            assert isinstance(resp, CreateTopicsResponse)
            by_name = {r.name: r for r in resp.topics}
            assert by_name["orders"].error_code == 0 and by_name["orders"].num_partitions == 10
            assert by_name["defaults"].num_partitions == 3 and by_name["defaults"].replication_factor == 2
            assert by_name["too-wide"].error_code == ErrorCode.INVALID_REPLICATION_FACTOR
            assert by_name["too-wide"].message == (
                "The target replication factor of 6 cannot be reached because only 5 broker(s) are registered."
            )
            assert by_name["bad name!"].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
            # Answered only once committed: the committed image already has the topics.
            image = h.sm.image
            orders = image.topics.by_name["orders"]
            assert orders.id == by_name["orders"].topic_id
            for p in orders.partitions.values():
                assert len(set(p.replicas)) == 3 and p.leader == p.replicas[0] and p.isr == p.replicas
            assert image.configs[ConfigResource.topic("orders")] == {"retention.ms": "60000"}
            assert image.topics.by_name["manual"].partitions[1].replicas == (3, 4)
            assert "too-wide" not in image.topics.by_name
            again = await h.controller.handle(CreateTopicsRequest((CreatableTopic("orders", 1, 1),)))
            assert isinstance(again, CreateTopicsResponse)
            assert again.topics[0].error_code == ErrorCode.TOPIC_ALREADY_EXISTS
            collide = await h.controller.handle(CreateTopicsRequest((CreatableTopic("ord.x", 1, 1),)))
            await h.controller.handle(CreateTopicsRequest((CreatableTopic("ord_x", 1, 1),)))
            assert isinstance(collide, CreateTopicsResponse) and collide.topics[0].error_code == 0
            clash = await h.controller.handle(CreateTopicsRequest((CreatableTopic("ord_x", 1, 1),)))
            assert isinstance(clash, CreateTopicsResponse) and clash.topics[0].error_code != 0
        finally:
            await stop(h)

    run(scenario())


def test_fencing_moves_leaders_and_shrinks_isr(tmp_path: Path) -> None:
    async def scenario() -> None:
        h = await start(tmp_path, session_timeout_ms=400)
        try:
            epochs = await h.unfenced_brokers(0, 1, 2)
            await h.controller.handle(CreateTopicsRequest((CreatableTopic("t", 6, 3),)))
            before = dict(h.sm.image.topics.by_name["t"].partitions)
            led_by_0 = [pid for pid, p in before.items() if p.leader == 0]
            assert led_by_0
            # Brokers 1 and 2 keep heartbeating; broker 0 goes silent and is fenced.
            for _ in range(20):
                await asyncio.sleep(0.05)
                for b in (1, 2):
                    await h.heartbeat(b, epochs[b])
            image = h.sm.image
            assert image.cluster.brokers[0].fenced
            for pid, p in image.topics.by_name["t"].partitions.items():
                assert 0 not in p.isr and p.leader in (1, 2)
                if pid in led_by_0:
                    assert p.leader_epoch == before[pid].leader_epoch + 1
                assert p.partition_epoch > before[pid].partition_epoch
            # Broker 0 comes back (same incarnation, heartbeats again) and is unfenced.
            resp = await h.heartbeat(0, epochs[0])
            assert not resp.is_fenced and not h.sm.image.cluster.brokers[0].fenced
        finally:
            await stop(h)

    run(scenario())


def test_controlled_shutdown_hands_off_leadership_first(tmp_path: Path) -> None:
    async def scenario() -> None:
        h = await start(tmp_path)
        try:
            epochs = await h.unfenced_brokers(0, 1, 2)
            await h.controller.handle(CreateTopicsRequest((CreatableTopic("t", 6, 3),)))
            resp = await h.heartbeat(0, epochs[0], want_shut_down=True)
            assert resp.should_shut_down
            image = h.sm.image
            assert image.cluster.brokers[0].in_controlled_shutdown
            assert all(p.leader != 0 and 0 not in p.isr for p in image.topics.by_name["t"].partitions.values())
        finally:
            await stop(h)

    run(scenario())


def test_configs_partitions_delete_and_preferred_election(tmp_path: Path) -> None:
    async def scenario() -> None:
        h = await start(tmp_path)
        try:
            epochs = await h.unfenced_brokers(0, 1, 2)
            await h.controller.handle(CreateTopicsRequest((CreatableTopic("t", 3, 3),)))
            alter = IncrementalAlterConfigsRequest(
                (
                    AlterConfigsResource(
                        ConfigResourceType.TOPIC,
                        "t",
                        (
                            AlterConfigOp("cleanup.policy", AlterConfigOpType.APPEND, "compact"),
                            AlterConfigOp("retention.ms", AlterConfigOpType.SET, "1000"),
                        ),
                    ),
                    AlterConfigsResource(
                        ConfigResourceType.TOPIC, "t2", (AlterConfigOp("retention.ms", AlterConfigOpType.SET, "1"),)
                    ),
                    AlterConfigsResource(
                        ConfigResourceType.TOPIC, "t", (AlterConfigOp("retention.ms", AlterConfigOpType.SET, "x"),)
                    ),
                )
            )
            resp = await h.controller.handle(alter)
            codes = [r.error_code for r in resp.resources]  # type: ignore[union-attr]
            assert codes == [0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_CONFIG]
            assert h.sm.image.configs[ConfigResource.topic("t")] == {
                "cleanup.policy": "delete,compact",
                "retention.ms": "1000",
            }
            more = await h.controller.handle(CreatePartitionsRequest((PartitionsIncrease("t", 5),)))
            assert more.topics[0].error_code == 0  # type: ignore[union-attr]
            assert len(h.sm.image.topics.by_name["t"].partitions) == 5
            fewer = await h.controller.handle(CreatePartitionsRequest((PartitionsIncrease("t", 2),)))
            assert fewer.topics[0].error_code == ErrorCode.INVALID_PARTITIONS  # type: ignore[union-attr]
            # Move leadership off broker 0, bring it back, then a preferred election restores it.
            await h.heartbeat(0, epochs[0], want_fence=True)
            await h.heartbeat(0, epochs[0])
            moved = [p for p in h.sm.image.topics.by_name["t"].partitions.values() if p.replicas[0] == 0]
            assert moved and all(p.leader != 0 for p in moved)
            # Broker 0 is not in the ISR any more; put it back as a partition leader would.
            from quorum.controller.requests import AlterPartitionItem, AlterPartitionRequest, IsrMember

            topic = h.sm.image.topics.by_name["t"]
            for pid, p in topic.partitions.items():
                if 0 in p.replicas and 0 not in p.isr:
                    req = AlterPartitionRequest(
                        p.leader,
                        epochs[p.leader],
                        (
                            AlterPartitionItem(
                                topic.id,
                                pid,
                                p.leader_epoch,
                                tuple(IsrMember(b, epochs[b]) for b in (*p.isr, 0)),
                                0,
                                p.partition_epoch,
                            ),
                        ),
                    )
                    ans = await h.controller.handle(req)
                    assert ans.partitions[0].error_code == 0, ans  # type: ignore[union-attr]
            elect = await h.controller.handle(ElectLeadersRequest(ElectionType.PREFERRED))
            assert all(r.error_code == 0 for r in elect.results)  # type: ignore[union-attr]
            assert all(p.leader == p.replicas[0] for p in h.sm.image.topics.by_name["t"].partitions.values())
            gone = await h.controller.handle(DeleteTopicsRequest(names=("t", "nope")))
            assert [r.error_code for r in gone.topics] == [0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]  # type: ignore[union-attr]
            assert "t" not in h.sm.image.topics.by_name
            assert ConfigResource.topic("t") not in h.sm.image.configs
        finally:
            await stop(h)

    run(scenario())


def test_restart_replays_the_log_into_the_same_image(tmp_path: Path) -> None:
    async def scenario() -> None:
        h = await start(tmp_path)
        await h.unfenced_brokers(0, 1, 2)
        await h.controller.handle(CreateTopicsRequest((CreatableTopic("t", 4, 2), CreatableTopic("u", 2, 3))))
        image = h.sm.image
        await stop(h)
        h2 = await start(tmp_path)
        try:
            again = h2.sm.image
            assert set(again.topics.by_name) == {"t", "u"}
            assert again.topics.by_name["t"] == image.topics.by_name["t"]
            assert again.cluster.brokers.keys() == image.cluster.brokers.keys()
        finally:
            await stop(h2)

    run(scenario())


def test_concurrent_writes_share_batches_and_build_the_image_a_replay_builds(tmp_path: Path) -> None:
    """Writes that share an open batch each extend its image by their own changes; once
    committed that image must be what replaying the log gives (checked after a restart)."""

    def alter(topic: str, key: str, value: str) -> IncrementalAlterConfigsRequest:
        op = AlterConfigOp(key, AlterConfigOpType.SET, value)
        return IncrementalAlterConfigsRequest((AlterConfigsResource(ConfigResourceType.TOPIC, topic, (op,)),))

    async def scenario() -> None:
        h = await start(tmp_path)
        await h.unfenced_brokers(0, 1, 2)
        names = [f"t{i}" for i in range(8)]
        await h.controller.handle(CreateTopicsRequest(tuple(CreatableTopic(n, 2, 2) for n in names)))
        batches_before = len(h.node.core.log.batches)  # type: ignore[union-attr]
        writes = [alter(names[i % 8], "retention.ms", str(1000 + i)) for i in range(120)]
        writes += [alter(names[i % 8], "segment.ms", str(60_000 + i)) for i in range(40)]
        writes.append(CreateTopicsRequest((CreatableTopic("late", 3, 2),)))
        answers = await asyncio.gather(*(h.controller.handle(w) for w in writes))
        assert all(r.error_code == 0 for a in answers[:-1] for r in a.resources)  # type: ignore[union-attr]
        shared = len(h.node.core.log.batches) - batches_before  # type: ignore[union-attr]
        assert shared < len(writes) / 4, f"{len(writes)} writes took {shared} batches"
        image = h.sm.image
        for i, name in enumerate(names):
            assert image.topic_config(name) == {"retention.ms": str(1000 + 112 + i), "segment.ms": str(60_000 + 32 + i)}
        await stop(h)
        h2 = await start(tmp_path)
        try:
            again = h2.sm.image
            assert dict(again.configs.items()) == dict(image.configs.items())
            assert again.topics.by_name == image.topics.by_name
        finally:
            await stop(h2)

    run(scenario())


def test_an_excessively_large_operation_is_refused_at_once(tmp_path: Path) -> None:
    async def scenario() -> None:
        h = await start(tmp_path)
        try:
            await h.unfenced_brokers(0, 1, 2)
            huge = CreateTopicsRequest((CreatableTopic("huge", 2**31 - 1, 3), CreatableTopic("small", 2, 2)))
            resp = await asyncio.wait_for(h.controller.handle(huge), 5)
            assert isinstance(resp, CreateTopicsResponse)
            codes = {r.name: (r.error_code, r.message) for r in resp.topics}
            assert codes["huge"] == (ErrorCode.POLICY_VIOLATION, "Unable to perform excessively large batch operation.")
            assert codes["small"][0] == 0
            grow = await asyncio.wait_for(
                h.controller.handle(CreatePartitionsRequest((PartitionsIncrease("small", 2**31 - 1),))), 5
            )
            assert grow.topics[0].error_code == ErrorCode.POLICY_VIOLATION  # type: ignore[union-attr]
            assert len(h.sm.image.topics.by_name["small"].partitions) == 2
        finally:
            await stop(h)

    run(scenario())
