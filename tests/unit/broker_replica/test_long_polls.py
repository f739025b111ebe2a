"""Long polls that sleep (issue 22): a waiting Fetch is woken only by what it can read more
of (consumers: the high watermark; followers: the log end), re-reads only the partitions
that woke it, and registers its one waiter once per partition for the whole wait.

Broker 1 leads ``t-0..N-1`` (replicas 1, 2, 3); followers 2 and 3 are played by calling
`fetch` with their replica ids (`World` of test_replica_manager.py).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from test_replica_manager import Run, World

from broker.replica.manager import ReplicaManager
from broker.replica.requests import CONSUMER_REPLICA_ID, FetchParams, FetchPartition, FetchPartitionResult
from quorum.kafka_errors import ErrorCode

LONG_MS = 5000  # a long poll's max wait that the tests never reach


class ReadCounter:
    """Counts `ReplicaManager._read_one` calls (one partition read) by consumers and followers."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.consumer = 0
        self.follower = 0
        real = ReplicaManager._read_one

        def counted(manager: ReplicaManager, params: FetchParams, *args: Any, **kwargs: Any) -> FetchPartitionResult:
            if params.replica_id >= 0:
                self.follower += 1
            else:
                self.consumer += 1
            return real(manager, params, *args, **kwargs)

        monkeypatch.setattr(ReplicaManager, "_read_one", counted)


def consumer_poll(w: World, offsets: dict[int, int], *, min_bytes: int = 1, max_wait_ms: int = LONG_MS) -> Any:
    parts = tuple(FetchPartition("t", p, o, 1 << 20) for p, o in offsets.items())
    params = FetchParams(CONSUMER_REPLICA_ID, max_wait_ms, min_bytes, 1 << 20, 0, parts)
    return asyncio.ensure_future(w.manager.fetch(params))


def follower_poll(w: World, replica: int, offsets: dict[int, int], *, max_wait_ms: int = LONG_MS) -> Any:
    parts = tuple(
        FetchPartition("t", p, o, 1 << 20, current_leader_epoch=0, last_fetched_epoch=0, log_start_offset=0)
        for p, o in offsets.items()
    )
    params = FetchParams(replica, max_wait_ms, 1, 1 << 20, 0, parts, replica_epoch=10 + replica)
    return asyncio.ensure_future(w.manager.fetch(params))


async def settle() -> None:
    """Long enough for any woken fetch to run its re-read (a few loop turns)."""
    await asyncio.sleep(0.05)


@pytest.mark.pure_python  # spies on methods of compiled instances (conftest.py)
def test_a_consumer_long_poll_sleeps_through_an_append_below_the_hw_and_wakes_when_the_hw_moves(
    tmp_path: Path, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        w = World(tmp_path)
        reads = ReadCounter(monkeypatch)
        poll = consumer_poll(w, {0: 0})
        await settle()
        assert reads.consumer == 1 and not poll.done()
        assert await w.produce(acks=1) == ErrorCode.NONE  # offsets 0..4; the HW stays 0 (no follower has them)
        await settle()
        assert reads.consumer == 1, "an append that leaves the HW where it was woke the consumer's long poll"
        assert not poll.done()
        await w.follower_fetch(2, 5)
        await settle()
        assert reads.consumer == 1  # broker 3 still holds the HW at 0
        await w.follower_fetch(3, 5)  # the HW moves to 5
        [r] = await asyncio.wait_for(poll, 1)
        assert (r.error, r.high_watermark) == (ErrorCode.NONE, 5) and len(r.records) > 0
        assert reads.consumer == 2

    run(scenario())


@pytest.mark.pure_python  # spies on methods of compiled instances (conftest.py)
def test_a_follower_long_poll_wakes_on_an_append_not_on_another_followers_fetch(
    tmp_path: Path, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        w = World(tmp_path)
        assert await w.produce(acks=1) == ErrorCode.NONE
        await w.follower_fetch(2, 5)
        reads = ReadCounter(monkeypatch)
        poll = follower_poll(w, 2, {0: 5})  # broker 2 has everything: it waits
        await settle()
        assert reads.follower == 1 and not poll.done()
        # Broker 3's fetch records its position and moves the HW from 0 to 5: that wakes the
        # consumers, not broker 2's long poll (nothing more to read up to the log end).
        await w.follower_fetch(3, 5)
        assert w.manager.partitions[("t", 0)].state.high_watermark == 5
        await settle()
        assert reads.follower == 2, "another follower's fetch woke this follower's long poll"  # broker 3's own read
        assert not poll.done()
        assert await w.produce(acks=1) == ErrorCode.NONE  # the log end moves: broker 2 reads 5..9 now
        [r] = await asyncio.wait_for(poll, 1)
        assert r.error == ErrorCode.NONE and len(r.records) > 0
        assert reads.follower == 3

    run(scenario())


N = 40


@pytest.mark.pure_python  # spies on methods of compiled instances (conftest.py)
def test_a_long_poll_over_n_partitions_registers_once_and_rereads_only_what_changed(
    tmp_path: Path, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    from broker.replica.purgatory import FetchWatchers

    calls = {"watch": 0, "unwatch": 0}
    for name in calls:
        real = getattr(FetchWatchers, name)

        def counted(self: FetchWatchers, *args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> None:
            calls[_name] += 1
            _real(self, *args, **kwargs)

        monkeypatch.setattr(FetchWatchers, name, counted)

    async def scenario() -> None:
        w = World(tmp_path, partitions=N)
        reads = ReadCounter(monkeypatch)
        # min_bytes no round reaches: the poll wakes once per HW move of partition 0, then expires.
        poll = consumer_poll(w, dict.fromkeys(range(N), 0), min_bytes=1 << 20, max_wait_ms=1500)
        await settle()
        assert (reads.consumer, calls["watch"], calls["unwatch"]) == (N, N, 0)
        wakes = 3
        for k in range(1, wakes + 1):
            assert await w.produce(acks=1) == ErrorCode.NONE
            await w.follower_fetch(2, 5 * k)
            await w.follower_fetch(3, 5 * k)  # the HW of t-0 moves to 5k
            await settle()
            assert reads.consumer == N + k, "a wake re-read partitions that did not change"
        results = await asyncio.wait_for(poll, 3)
        assert results[0].high_watermark == 5 * wakes and len(results[0].records) > 0
        assert all(r.error == ErrorCode.NONE for r in results)
        assert reads.consumer == N + wakes  # the expiry found nothing else moved
        assert (calls["watch"], calls["unwatch"]) == (N, N)

    run(scenario())


def test_long_polls_that_time_out_or_are_cancelled_leave_no_waiter_behind(tmp_path: Path, run: Run) -> None:
    async def scenario() -> None:
        w = World(tmp_path, partitions=N)
        hosted = [w.manager.partitions[("t", p)] for p in range(N)]
        everything = dict.fromkeys(range(N), 0)
        expiring = [consumer_poll(w, everything, max_wait_ms=100) for _ in range(3)]
        expiring += [follower_poll(w, r, everything, max_wait_ms=100) for r in (2, 3)]
        cancelled = consumer_poll(w, everything)
        answered = follower_poll(w, 2, everything)
        await settle()
        assert all(len(h.progress) == 7 for h in hosted)
        assert await w.produce(acks=1, partition=N - 1) == ErrorCode.NONE  # answers the follower polls
        results = await asyncio.wait_for(answered, 1)
        assert len(results[N - 1].records) > 0
        for r in await asyncio.gather(*expiring):
            assert all(p.error == ErrorCode.NONE for p in r)
        cancelled.cancel()
        await settle()
        assert cancelled.cancelled()
        assert [len(h.progress) for h in hosted] == [0] * N

    run(scenario())


def test_a_consumer_long_poll_answers_when_a_request_arrives_behind_it_with_the_current_hw(
    tmp_path: Path, run: Run
) -> None:
    """Answers leave a connection in request order: a request behind a long poll (librdkafka's
    FindCoordinator behind its Fetch) resolves `yield_to`, and the poll answers at once, as it
    would at `max_wait_ms`, carrying the current high watermark; its watchers are released."""

    async def scenario() -> None:
        w = World(tmp_path)
        assert await w.produce(acks=1) == ErrorCode.NONE  # offsets 0..4, HW 0: nothing to read
        behind: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        parts = (FetchPartition("t", 0, 0, 1 << 20),)
        params = FetchParams(CONSUMER_REPLICA_ID, LONG_MS, 1, 1 << 20, 0, parts, yield_to=behind)
        poll = asyncio.ensure_future(w.manager.fetch(params))
        await settle()
        assert not poll.done(), "the poll answered with nothing to read and no request behind it"
        await w.follower_fetch(2, 5)  # the HW stays 0 (broker 3 has nothing): no wake
        await settle()
        assert not poll.done()
        behind.set_result(None)
        [r] = await asyncio.wait_for(poll, 1)  # LONG_MS is 5 s: only the yield answers within 1 s
        assert (r.error, r.high_watermark, len(r.records)) == (ErrorCode.NONE, 0, 0)
        progress = w.manager.partitions[("t", 0)].progress
        assert len(progress) == 0, "the answered poll is still registered with its partition"
        # A request already behind at the start: no wait at all.
        done_behind: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done_behind.set_result(None)
        params = FetchParams(CONSUMER_REPLICA_ID, LONG_MS, 1, 1 << 20, 0, parts, yield_to=done_behind)
        [r] = await asyncio.wait_for(w.manager.fetch(params), 1)
        assert r.error == ErrorCode.NONE

    run(scenario())
