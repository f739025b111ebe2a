"""`ReplicaManager` (the broker's IO driver of replication) on real partition logs, in process:
the items a review of the broker against Kafka found (issue 19, bugs 3 and 10).

Broker 1 hosts partition ``t-0`` (replicas 1, 2, 3) as the metadata image says; followers
2 and 3 are played by calling `fetch` with their replica ids, as their fetchers would.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from kafka.record.default_records import DefaultRecordBatchBuilder

from broker.log import LogManager
from broker.replica.manager import ReplicaManager
from broker.replica.requests import (
    CONSUMER_REPLICA_ID,
    LATEST_TIMESTAMP,
    DeleteRecordsPartition,
    FetchParams,
    FetchPartition,
    ListOffsetsPartition,
    ProduceParams,
    ProducePartition,
)
from quorum.kafka_errors import ErrorCode
from quorum.metadata.delta import MetadataDelta
from quorum.metadata.image import EMPTY, MetadataImage
from quorum.metadata.records import (
    BrokerRegistrationChangeRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
)
from quorum.node.config import NodeConfig, config_from_properties

TOPIC_ID = uuid.UUID(int=7)
Run = Callable[[Coroutine[Any, Any, None]], None]


def records(n: int = 5) -> bytes:
    b = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, batch_size=1 << 20)
    for i in range(n):
        b.append(i, timestamp=1_700_000_000_000 + i, key=None, value=b"v" * 10, headers=[])
    return bytes(b.build())


class World:
    """Broker 1's replica manager and the metadata it follows."""

    def __init__(self, tmp: Path, *, leader: int = 1, leader_epoch: int = 0, partitions: int = 1) -> None:
        self.config: NodeConfig = config_from_properties(
            {
                "process.roles": "broker",
                "node.id": "1",
                "controller.quorum.voters": "9@127.0.0.1:1",
                "listeners": "PLAINTEXT://127.0.0.1:2",
                "controller.listener.names": "CONTROLLER",
                "log.dirs": str(tmp),
            }
        )
        self.min_isr = 2
        self.image: MetadataImage = EMPTY
        self.logs = LogManager([tmp], {})
        self.logs.load()
        self.manager = ReplicaManager(
            self.config,
            self.logs,
            image=lambda: self.image,
            min_insync_replicas=lambda topic: self.min_isr,
            on_follow=lambda h: None,
            on_unfollow=lambda h: None,
            on_isr_change_wanted=lambda: None,
        )
        recs: list[MetadataRecord] = []
        for b in (1, 2, 3):
            recs.append(RegisterBrokerRecord(broker_id=b, incarnation_id=uuid.UUID(int=b), broker_epoch=10 + b))
            recs.append(BrokerRegistrationChangeRecord(broker_id=b, broker_epoch=10 + b, fenced=-1))
        recs.append(TopicRecord(name="t", topic_id=TOPIC_ID))
        recs.extend(
            PartitionRecord(
                partition_id=p,
                topic_id=TOPIC_ID,
                replicas=(1, 2, 3),
                isr=(1, 2, 3),
                leader=leader,
                leader_epoch=leader_epoch,
                partition_epoch=0,
            )
            for p in range(partitions)
        )
        self.apply(recs)

    def apply(self, recs: list[MetadataRecord]) -> None:
        delta = MetadataDelta(self.image)
        offset = self.image.offset + 1
        for r in recs:
            delta.replay(r, offset, 1)
            offset += 1
        self.image = delta.apply()
        self.manager.on_metadata(delta, self.image)

    def move_leader(self, leader: int, isr: tuple[int, ...] = (1, 2, 3)) -> None:
        self.apply([PartitionChangeRecord(partition_id=0, topic_id=TOPIC_ID, leader=leader, isr=isr)])

    async def produce(self, acks: int = -1, timeout_ms: int = 2000, partition: int = 0) -> ErrorCode:
        [r] = await self.manager.produce(
            ProduceParams(acks, timeout_ms, (ProducePartition("t", partition, records()),))
        )
        return r.error

    async def follower_fetch(
        self, replica: int, offset: int, *, log_start: int = 0, epoch: int = 0, partition: int = 0
    ) -> None:
        part = FetchPartition("t", partition, offset, 1 << 20, current_leader_epoch=epoch, last_fetched_epoch=epoch,
                              log_start_offset=log_start)  # fmt: skip
        [r] = await self.manager.fetch(FetchParams(replica, 0, 0, 1 << 20, 0, (part,), replica_epoch=10 + replica))
        assert r.error == ErrorCode.NONE, r

    async def latest(self, replica_id: int = CONSUMER_REPLICA_ID) -> tuple[ErrorCode, int, int]:
        [r] = await self.manager.list_offsets(replica_id, 0, [ListOffsetsPartition("t", 0, LATEST_TIMESTAMP)])
        return r.error, r.offset, r.leader_epoch


def test_list_offsets_latest_names_leader_epoch_zero(tmp_path: Path, run: Run) -> None:
    async def scenario() -> None:
        w = World(tmp_path)
        assert await w.produce(acks=1) == ErrorCode.NONE
        await w.follower_fetch(2, 5)
        await w.follower_fetch(3, 5)
        # Epoch 0 is an epoch like any other (it was reported as -1, "unknown").
        assert await w.latest() == (ErrorCode.NONE, 5, 0)

    run(scenario())


def test_a_new_leader_whose_hw_lags_its_epoch_start_answers_offset_not_available(tmp_path: Path, run: Run) -> None:
    async def scenario() -> None:
        w = World(tmp_path, leader=2)
        # As a follower, broker 1 holds 5 records; its HW (from the leader) is 0.
        hosted = w.manager.partitions[("t", 0)]
        hosted.log.append_as_follower(_assigned(records(), epoch=0))
        w.move_leader(1)
        assert hosted.state.is_leader and hosted.state.epoch_start_offset == 5
        # Its HW (0) is below the start of its epoch (5): what is committed is not known yet.
        assert (await w.latest())[0] == ErrorCode.OFFSET_NOT_AVAILABLE
        assert await w.latest(replica_id=2) == (ErrorCode.NONE, 5, 1)  # a replica gets the log end
        await w.follower_fetch(2, 5, epoch=1)
        await w.follower_fetch(3, 5, epoch=1)
        assert await w.latest() == (ErrorCode.NONE, 5, 1)

    run(scenario())


def _assigned(data: bytes, epoch: int) -> bytes:
    """A batch as a leader stored it: base offset 0 and partition leader epoch ``epoch`` (outside the CRC)."""
    b = bytearray(data)
    b[12:16] = epoch.to_bytes(4, "big", signed=True)
    return bytes(b)


def test_raised_min_insync_replicas_applies_to_the_next_produce(tmp_path: Path, run: Run) -> None:
    async def scenario() -> None:
        w = World(tmp_path)
        w.apply([PartitionChangeRecord(partition_id=0, topic_id=TOPIC_ID, isr=(1, 2))])
        w.min_isr = 3  # the value the broker reads now (topic config or dynamic broker default)
        assert await w.produce() == ErrorCode.NOT_ENOUGH_REPLICAS
        w.min_isr = 2
        assert await w.produce(timeout_ms=50) == ErrorCode.REQUEST_TIMED_OUT  # appended, waiting for broker 2

    run(scenario())


def test_acks_all_waiters_of_a_lost_leadership_fail_and_the_hw_releases_the_others(tmp_path: Path, run: Run) -> None:
    async def scenario() -> None:
        w = World(tmp_path)
        waiting = asyncio.ensure_future(w.produce(timeout_ms=5000))
        await asyncio.sleep(0)
        await w.follower_fetch(2, 5)
        await w.follower_fetch(3, 5)
        assert await waiting == ErrorCode.NONE
        waiting = asyncio.ensure_future(w.produce(timeout_ms=5000))
        await asyncio.sleep(0)
        w.move_leader(2)
        assert await waiting == ErrorCode.NOT_LEADER_OR_FOLLOWER

    run(scenario())


def test_delete_records_answers_once_every_live_replica_moved_its_log_start(tmp_path: Path, run: Run) -> None:
    async def scenario() -> None:
        w = World(tmp_path)
        for _ in range(4):
            assert await w.produce(acks=1) == ErrorCode.NONE
        await w.follower_fetch(2, 20)
        await w.follower_fetch(3, 20)
        deleting = asyncio.ensure_future(w.manager.delete_records(5000, [DeleteRecordsPartition("t", 0, 10)]))
        await asyncio.sleep(0.05)
        assert not deleting.done()  # followers still start at 0
        await w.follower_fetch(2, 20, log_start=10)
        await asyncio.sleep(0.05)
        assert not deleting.done()  # broker 3 still does
        await w.follower_fetch(3, 20, log_start=10)
        [r] = await deleting
        assert (r.error, r.low_watermark) == (ErrorCode.NONE, 10)
        # A follower that never follows: REQUEST_TIMED_OUT with the low watermark reached.
        [r] = await w.manager.delete_records(100, [DeleteRecordsPartition("t", 0, 15)])
        assert (r.error, r.low_watermark) == (ErrorCode.REQUEST_TIMED_OUT, 10)

    run(scenario())
