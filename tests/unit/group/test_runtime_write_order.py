"""`GroupCoordinator` (the runtime) answers through `WriteOrder`, and wakes its timer task
only for an earlier deadline: a fake partition host whose appends complete when the test
says so."""

from __future__ import annotations

import asyncio

import pytest

from broker.group.messages import CommitPartition, CommitRequest, JoinRequest
from broker.group.runtime import APPENDS_IN_FLIGHT, GroupCoordinator
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


async def _started(in_flight: int = APPENDS_IN_FLIGHT) -> tuple[Host, GroupCoordinator]:
    host = Host()
    coordinator = GroupCoordinator(4, host, CoordinatorConfig(), clock=lambda: 1_000, appends_in_flight=in_flight)
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


def test_a_commit_is_written_while_the_append_before_it_waits_and_answered_after_it() -> None:
    async def run() -> None:
        host, coordinator = await _started(in_flight=2)
        first = asyncio.create_task(coordinator.commit(request(5)))
        await spin()
        second = asyncio.create_task(coordinator.commit(request(7)))
        await spin()
        assert len(host.appends) == 2  # pipelined: the second batch does not wait for the first's acks
        host.appends[1].set_result(ErrorCode.NONE)
        await spin()
        assert not first.done() and not second.done()  # its answer waits for the earlier append
        host.appends[0].set_result(ErrorCode.NONE)
        assert await first == [ErrorCode.NONE]
        assert await second == [ErrorCode.NONE]
        await coordinator.close()

    asyncio.run(run())


def test_operations_of_one_loop_turn_go_in_one_batch() -> None:
    from broker.log.records import batch_records

    async def run() -> None:
        host, coordinator = await _started()
        commits = [asyncio.create_task(coordinator.commit(request(n))) for n in (1, 2, 3)]
        await spin()
        assert len(host.appends) == 1 and len(list(batch_records(host.batches[0]))) == 3
        host.appends[0].set_result(ErrorCode.NONE)
        assert [await c for c in commits] == [[ErrorCode.NONE]] * 3
        await coordinator.close()

    asyncio.run(run())


@pytest.mark.parametrize("in_flight", sorted({1, 4, APPENDS_IN_FLIGHT}))
def test_operations_that_come_while_the_appends_in_flight_are_full_are_written_together_next(in_flight: int) -> None:
    from broker.log.records import batch_records

    async def run() -> None:
        host, coordinator = await _started(in_flight)
        first = [asyncio.create_task(coordinator.commit(request(1)))]
        await spin()
        for n in range(2, in_flight + 1):
            first.append(asyncio.create_task(coordinator.commit(request(n))))
            await spin()
        assert len(host.appends) == in_flight
        waiting = []
        for n in (100, 101, 102):
            waiting.append(asyncio.create_task(coordinator.commit(request(n))))
            await spin()
        assert len(host.appends) == in_flight  # they wait for a free slot
        for fut in host.appends:
            fut.set_result(ErrorCode.NONE)
        assert [await f for f in first] == [[ErrorCode.NONE]] * in_flight
        await spin()
        assert len(host.appends) == in_flight + 1  # the three commits in one batch
        assert len(list(batch_records(host.batches[-1]))) == 3
        host.appends[-1].set_result(ErrorCode.NOT_ENOUGH_REPLICAS)  # refused: all three answer it
        assert [await w for w in waiting] == [[ErrorCode.COORDINATOR_NOT_AVAILABLE]] * 3
        code, offsets = await coordinator.fetch_offsets("g", [("t", 0)])
        assert code == ErrorCode.NONE and offsets[0].offset == in_flight  # their undos put it back
        await coordinator.close()

    asyncio.run(run())


class CountingEvent(asyncio.Event):
    """The timer task's wake-up event, counting who sets it."""

    def __init__(self) -> None:
        super().__init__()
        self.sets = 0

    def set(self) -> None:
        self.sets += 1
        super().set()


def test_commits_leave_the_timer_task_asleep_and_an_earlier_deadline_wakes_it() -> None:
    async def run() -> None:
        host, coordinator = await _started()
        loaded = coordinator.partitions[0]
        loaded.wake = wake = CountingEvent()
        commits = [asyncio.create_task(coordinator.commit(request(n))) for n in (1, 2)]
        await spin()
        host.appends[0].set_result(ErrorCode.NONE)
        assert [await c for c in commits] == [[ErrorCode.NONE]] * 2
        assert wake.sets == 0  # no deadline moved: the timer task sleeps on
        join = JoinRequest("g2", "", None, "consumer", (("range", b""),), 10_000, 10_000, "c", "h", 5)
        assert (await coordinator.join(join)).error == ErrorCode.MEMBER_ID_REQUIRED
        assert wake.sets == 1  # the pending member's deadline is now the earliest
        await coordinator.close()

    asyncio.run(run())
