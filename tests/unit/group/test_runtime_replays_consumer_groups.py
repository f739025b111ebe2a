"""Loading a `__consumer_offsets` partition replays KIP-848's consumer-group records (types 3-8)
as well as offsets: the coordinator's state after a load is the one the records describe."""

from __future__ import annotations

import asyncio
from uuid import UUID

from broker.group.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    OffsetKey,
    OffsetValue,
    RecordKey,
    RecordValue,
    TopicMetadata,
    TopicPartitions,
    encode_key,
    encode_value,
)
from broker.group.runtime import GroupCoordinator
from broker.group.shard import CoordinatorConfig
from broker.log.records import BatchHeader, Record, encode_records
from quorum.kafka_errors import ErrorCode

TOPIC = UUID(int=7)
RECORDS: list[tuple[RecordKey, RecordValue]] = [
    (OffsetKey("g", "t", 0), OffsetValue(5, -1, "", 1_000)),
    (ConsumerGroupPartitionMetadataKey("g"), ConsumerGroupPartitionMetadataValue((TopicMetadata(TOPIC, "t", 2),))),
    (
        ConsumerGroupMemberMetadataKey("g", "m"),
        ConsumerGroupMemberMetadataValue(None, None, "c", "/h", ("t",), None, "uniform", 30_000),
    ),
    (
        ConsumerGroupTargetAssignmentMemberKey("g", "m"),
        ConsumerGroupTargetAssignmentMemberValue((TopicPartitions(TOPIC, (0, 1)),)),
    ),
    (
        ConsumerGroupCurrentMemberAssignmentKey("g", "m"),
        ConsumerGroupCurrentMemberAssignmentValue(3, 2, 0, (TopicPartitions(TOPIC, (0, 1)),), ()),
    ),
    (ConsumerGroupTargetAssignmentMetadataKey("g"), ConsumerGroupTargetAssignmentMetadataValue(3)),
    (ConsumerGroupMetadataKey("g"), ConsumerGroupMetadataValue(3)),
]


class Log:
    """One batch of RECORDS at offsets 0.., as the coordinator writes them."""

    def __init__(self) -> None:
        records = [Record(i, 1_000, encode_key(k), encode_value(v)) for i, (k, v) in enumerate(RECORDS)]
        self.data = encode_records(records, BatchHeader(partition_leader_epoch=0, attributes=0))

    @property
    def log_start_offset(self) -> int:
        return 0

    @property
    def log_end_offset(self) -> int:
        return len(RECORDS)

    def read(self, offset: int, max_bytes: int, *, max_offset: int, min_one_batch: bool) -> bytes:
        return self.data if offset == 0 else b""


class Host:
    def offsets_partitions(self) -> int:
        return 1

    def led_epoch(self, partition: int) -> int | None:
        return 0

    def partition_log(self, partition: int) -> Log:
        return Log()

    async def append(self, partition: int, batch: bytes, timeout_ms: int) -> ErrorCode:
        return ErrorCode.NONE


def test_a_load_replays_consumer_group_records() -> None:
    async def run() -> None:
        coordinator = GroupCoordinator(4, Host(), CoordinatorConfig(), clock=lambda: 1_000)
        coordinator.on_metadata()
        for _ in range(50):
            if coordinator.partitions[0].ready:
                break
            await asyncio.sleep(0)
        shard = coordinator.partitions[0].shard
        assert shard.offsets["g"][("t", 0)].offset == 5
        group = shard.consumer_groups["g"]
        assert (group.group_epoch, group.assignment_epoch, group.topics) == (3, 3, {"t": (TOPIC, 2)})
        member = group.members["m"]
        assert (member.epoch, member.previous_epoch, member.subscribed) == (3, 2, frozenset({"t"}))
        assert member.assigned == {(TOPIC, 0), (TOPIC, 1)} == group.target["m"]
        await coordinator.close()

    asyncio.run(run())
