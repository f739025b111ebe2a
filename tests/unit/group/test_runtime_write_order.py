"""`GroupCoordinator` (the runtime) answers through `WriteOrder`: a fake partition host whose
appends complete when the test says so."""

from __future__ import annotations

import asyncio

from broker.group.messages import CommitPartition, CommitRequest
from broker.group.runtime import GroupCoordinator
from broker.group.shard import CoordinatorConfig
from quorum.kafka_errors import ErrorCode


class Host:
    def __init__(self) -> None:
        self.appends: list[asyncio.Future[ErrorCode]] = []
        self.batches: list[bytes] = []

    def offsets_partitions(self) -> int:
        return 1

    def led_epoch(self, partition: int) -> int | None:
        return 0

    def partition_log(self, partition: int) -> None:
        return None

    async def append(self, partition: int, batch: bytes, timeout_ms: int) -> ErrorCode:
        fut: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        self.appends.append(fut)
        self.batches.append(batch)
        return await fut


async def spin(times: int = 10) -> None:
    for _ in range(times):
        await asyncio.sleep(0)


def request(offset: int) -> CommitRequest:
    return CommitRequest("g", "", None, -1, -1, (CommitPartition("t", 0, offset),), 8)


async def _started() -> tuple[Host, GroupCoordinator]:
    host = Host()
    coordinator = GroupCoordinator(4, host, CoordinatorConfig(), clock=lambda: 1_000)
    coordinator.on_metadata()
    for _ in range(10):
        await asyncio.sleep(0)
    assert coordinator.is_coordinator("g") == ErrorCode.NONE
    return host, coordinator


def test_an_offset_fetch_behind_a_refused_commit_fails_instead_of_showing_it() -> None:
    async def run() -> None:
        host, coordinator = await _started()
        commit = asyncio.create_task(coordinator.commit(request(5)))
        await spin()
        fetch = asyncio.create_task(coordinator.fetch_offsets("g", [("t", 0)]))
        await spin()
        assert not fetch.done()  # it waits for the commit's append
        host.appends[0].set_result(ErrorCode.NOT_ENOUGH_REPLICAS)
        assert await commit == [ErrorCode.COORDINATOR_NOT_AVAILABLE]
        code, offsets = await fetch
        assert (code, offsets) == (ErrorCode.COORDINATOR_NOT_AVAILABLE, [])
        # Asked again, the offset the refused commit set is gone.
        code, offsets = await coordinator.fetch_offsets("g", [("t", 0)])
        assert code == ErrorCode.NONE and offsets[0].offset == -1
        await coordinator.close()

    asyncio.run(run())


def test_a_commit_is_answered_after_every_earlier_append() -> None:
    async def run() -> None:
        host, coordinator = await _started()
        first = asyncio.create_task(coordinator.commit(request(5)))
        await spin()
        second = asyncio.create_task(coordinator.commit(request(7)))
        await spin()
        assert len(host.appends) == 1  # one append in flight per partition: the second waits for it
        host.appends[0].set_result(ErrorCode.NONE)
        assert await first == [ErrorCode.NONE]
        await spin()
        assert len(host.appends) == 2 and not second.done()
        host.appends[1].set_result(ErrorCode.NONE)
        assert await second == [ErrorCode.NONE]
        await coordinator.close()

    asyncio.run(run())


def test_operations_that_come_during_an_append_are_written_together_in_the_next() -> None:
    from broker.log.records import batch_records

    async def run() -> None:
        host, coordinator = await _started()
        first = asyncio.create_task(coordinator.commit(request(1)))
        await spin()
        waiting = [asyncio.create_task(coordinator.commit(request(n))) for n in (2, 3, 4)]
        await spin()
        assert len(host.appends) == 1
        host.appends[0].set_result(ErrorCode.NONE)
        assert await first == [ErrorCode.NONE]
        await spin()
        assert len(host.appends) == 2  # the three commits in one batch
        assert len(list(batch_records(host.batches[1]))) == 3
        host.appends[1].set_result(ErrorCode.NOT_ENOUGH_REPLICAS)  # refused: all three answer it
        assert [await w for w in waiting] == [[ErrorCode.COORDINATOR_NOT_AVAILABLE]] * 3
        code, offsets = await coordinator.fetch_offsets("g", [("t", 0)])
        assert code == ErrorCode.NONE and offsets[0].offset == 1  # their undos put the first back
        await coordinator.close()

    asyncio.run(run())
