"""Follower fetch sessions at O(changed) (issue 19, 10,000 partitions).

- `PartitionState`: the fetches of a session that skip a partition (nothing changed for it)
  are accounted for lazily from the session's clock (`FetchClock`); a seeded random walk
  checks that the leader then decides exactly what it decides when every fetch is recorded
  one by one (ISR shrinks and expansions, the high watermark, the follower views).
- `ReplicaManager` + `FetchSessionCache`: an incremental fetch of a follower's session reads
  only the partitions that changed or that the request names (counted), a long poll reads
  a partition that changes while it waits and appends it to the answer, and an idle round
  of a replica fetcher rebuilds no request.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import pytest
from test_replica_manager import Run, World, records

from broker.kafka.fetch_session import FetchContext, FetchSessionCache
from broker.replica.manager import ReplicaManager
from broker.replica.requests import FetchParams, FetchPartition, FetchPartitionResult
from broker.replica.state import FollowerView, PartitionState
from quorum.kafka_errors import ErrorCode
from tests.sim.replication.memlog import MemLog, Record

LAG_MS = 3000


class Clock:
    def __init__(self) -> None:
        self.last_fetch_ms = -1


def leader(log: MemLog, now: int) -> PartitionState:
    s = PartitionState(1, min_insync_replicas=2, replica_lag_time_max_ms=LAG_MS)
    assert s.become_leader(leader_epoch=1, partition_epoch=0, replicas=(1, 2, 3), isr=(1, 2, 3), now_ms=now, log=log)
    return s


def views(s: PartitionState) -> dict[int, FollowerView | None]:
    return {r: s.follower(r) for r in (2, 3)}


def test_skipped_fetches_counted_by_the_clock_decide_what_fetches_recorded_one_by_one_decide() -> None:
    rng = random.Random(19)
    checks = shrinks = skipped = 0
    for _ in range(30):
        log = MemLog()
        now = 1_000_000
        eager, lazy = leader(log, now), leader(log, now)
        clocks = {2: Clock(), 3: Clock()}
        position = {2: 0, 3: 0}  # each follower's log end (its next fetch offset)
        recorded: dict[int, int | None] = {2: None, 3: None}  # the offset lazy last recorded
        dirty = {2: True, 3: True}  # the session must read the partition at its next fetch
        stopped = {2: False, 3: False}  # a follower that stopped fetching (its clock stands still)
        for _ in range(300):
            now += rng.choice([0, 1, 200, 1000, 2500, 4000])
            roll = rng.random()
            if roll < 0.1:
                log.append(Record(1, log.log_end_offset))
                eager.on_local_append(now, log)
                lazy.on_local_append(now, log)
                dirty[2] = dirty[3] = True  # the log end moved: its sessions read it next time
            elif roll < 0.15:
                r = rng.choice([2, 3])
                stopped[r] = not stopped[r]
            elif roll < 0.85:
                r = rng.choice([2, 3])
                if stopped[r]:
                    continue
                offset = position[r]
                kwargs: dict[str, Any] = dict(
                    replica_id=r, fetch_offset=offset, last_fetched_epoch=1 if offset else -1, log_start_offset=0,
                    now_ms=now, log=log, broker_epoch=5,
                )  # fmt: skip
                eager.on_follower_fetch(**kwargs)
                if dirty[r] or recorded[r] != offset:
                    lazy.on_follower_fetch(**kwargs, idle_clock=clocks[r])
                    recorded[r], dirty[r] = offset, False
                else:
                    skipped += 1
                clocks[r].last_fetch_ms = now  # the session's fetch read (or skipped) it now
                if rng.random() < 0.6:
                    position[r] = log.log_end_offset  # the answer's records, appended
            else:
                checks += 1
                proposed = eager.proposed_isr(now, None, log)
                assert lazy.proposed_isr(now, None, log) == proposed
                assert lazy.out_of_sync_replicas(now, log) == eager.out_of_sync_replicas(now, log)
                assert lazy.high_watermark == eager.high_watermark
                assert views(lazy) == views(eager)
                if proposed is not None and len(proposed) < len(eager.isr):
                    shrinks += 1
                for s in (eager, lazy):  # the controller accepts the change
                    if proposed is not None:
                        s.on_isr_sent(proposed)
                        s.on_isr_committed(
                            isr=proposed, leader_epoch=1, partition_epoch=s.partition_epoch + 1, now_ms=now, log=log
                        )
    assert skipped > 1000 and checks > 500 and shrinks > 20, (skipped, checks, shrinks)


def test_an_idle_follower_stays_in_sync_past_the_lag_time_and_a_silent_one_leaves() -> None:
    log = MemLog()
    s = leader(log, 0)
    clocks = {2: Clock(), 3: Clock()}
    for r in (2, 3):
        s.on_follower_fetch(
            replica_id=r, fetch_offset=0, last_fetched_epoch=-1, now_ms=0, log=log, idle_clock=clocks[r]
        )
        clocks[r].last_fetch_ms = 0
    # Broker 2's session keeps fetching (skipping the idle partition); broker 3's fetches stopped
    # at 0 (it stays caught up while the log end does not move, as in Kafka).
    clocks[2].last_fetch_ms = 10_000
    assert s.proposed_isr(10_000, None, log) is None
    log.append(Record(1, 0))
    s.on_local_append(10_001, log)
    assert s.follower(2).last_caught_up_ms == 10_000  # type: ignore[union-attr]
    assert s.follower(3).last_caught_up_ms == 0  # type: ignore[union-attr]
    assert s.proposed_isr(10_001, None, log) == (1, 2)  # broker 3 leaves; broker 2 has LAG_MS from 10,000
    s.on_isr_sent((1, 2))
    assert s.on_isr_committed(isr=(1, 2), leader_epoch=1, partition_epoch=1, now_ms=10_001, log=log) is False
    assert s.proposed_isr(10_000 + LAG_MS, None, log) is None
    assert s.proposed_isr(10_000 + LAG_MS + 1, None, log) == (1,)
    # Without the clock (each skipped fetch unrecorded) broker 2 would have been out at once.
    s2 = leader(MemLog(), 0)
    s2.on_follower_fetch(replica_id=2, fetch_offset=0, last_fetched_epoch=-1, now_ms=0, log=MemLog())
    assert s2.follower(2).last_caught_up_ms == 0  # type: ignore[union-attr]


class ReadCounter:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reads: list[int] = []
        real = ReplicaManager._read_one

        def counted(manager: ReplicaManager, params: FetchParams, fp: FetchPartition, *a: Any, **k: Any) -> Any:
            self.reads.append(fp.partition)
            return real(manager, params, fp, *a, **k)

        monkeypatch.setattr(ReplicaManager, "_read_one", counted)

    def take(self) -> list[int]:
        out, self.reads = self.reads, []
        return out


N = 60  # below OFF_LOOP_MIN: the World hosts them at once


class Follower:
    """Broker 2's fetch session with broker 1, served as `handle_fetch` serves it."""

    def __init__(self, w: World) -> None:
        self.w = w
        self.cache = FetchSessionCache(seed=1)
        self.session_id = 0
        self.epoch = 0

    async def fetch(
        self, named: dict[int, int], *, max_wait_ms: int = 0
    ) -> list[tuple[FetchPartition, FetchPartitionResult]]:
        parts = [
            FetchPartition("t", p, o, 1 << 20, current_leader_epoch=0, last_fetched_epoch=0 if o else -1,
                           log_start_offset=0)
            for p, o in named.items()
        ]  # fmt: skip
        ctx = self.cache.new_context(self.session_id, self.epoch, parts, (), privileged=True, now_ms=0)
        assert isinstance(ctx, FetchContext)
        params = FetchParams(2, max_wait_ms, 1, 1 << 24, 0, ctx.partitions, replica_epoch=12, session=ctx.watch)
        results = await self.w.manager.fetch(params)
        self.session_id, pairs = ctx.respond(results)
        self.epoch += 1
        return pairs


@pytest.mark.pure_python  # spies on methods of compiled instances (conftest.py)
def test_an_incremental_follower_fetch_reads_only_what_changed(
    tmp_path: Path, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        w = World(tmp_path, partitions=N)
        f = Follower(w)
        counter = ReadCounter(monkeypatch)
        assert len(await f.fetch(dict.fromkeys(range(N), 0))) == N  # full: opens the session
        assert f.session_id != 0 and len(counter.take()) == N
        assert await f.fetch({}) == [] and len(counter.take()) == N  # the first incremental one watches all
        assert await f.fetch({}) == [] and counter.take() == []  # idle: reads nothing
        assert await w.produce(acks=1, partition=7) == ErrorCode.NONE
        [(p, r)] = await f.fetch({})
        assert (p.partition, len(r.records) > 0) == (7, True) and counter.take() == [7]
        # Its next position is named; the HW does not move (broker 3 holds it): nothing listed.
        assert await f.fetch({7: 5}) == [] and counter.take() == [7]
        # A long poll: partition 9 gets records while it waits; it is read and answered at once.
        poll = asyncio.ensure_future(f.fetch({}, max_wait_ms=5000))
        await asyncio.sleep(0.05)
        assert not poll.done() and counter.take() == []
        assert await w.produce(acks=1, partition=9) == ErrorCode.NONE
        [(p, r)] = await asyncio.wait_for(poll, 1)
        assert (p.partition, len(r.records) > 0) == (9, True) and counter.take() == [9]
        # Broker 3's fetch moves the HW of 7: listed at broker 2's next fetch (no records).
        await w.follower_fetch(3, 5, partition=7)
        counter.take()
        [(p, r)] = await f.fetch({9: 5})
        assert (p.partition, r.high_watermark, len(r.records)) == (7, 5, 0) and sorted(counter.take()) == [7, 9]
        # A partition that stops being led here answers an error at every fetch until it is gone.
        w.move_leader(3)
        [(p, r)] = await f.fetch({})
        assert (p.partition, r.error) == (0, ErrorCode.FENCED_LEADER_EPOCH) and counter.take() == [0]
        [(p, r)] = await f.fetch({})
        assert p.partition == 0 and counter.take() == [0]
        # The session ends: its watch leaves every partition.
        f.cache.remove(f.session_id)
        assert all(len(h.progress) == 0 for h in w.manager.partitions.values())

    run(scenario())


@pytest.mark.pure_python  # spies on methods of compiled instances (conftest.py)
def test_a_follower_unfenced_meanwhile_has_its_whole_session_read_again(
    tmp_path: Path, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eligibility (KIP-841) is recorded by a partition's reads: when the follower's changes,
    every partition of its session is read once more, or an idle one would keep the stale
    value and the follower would never rejoin its ISR."""
    from quorum.metadata.records import BrokerRegistrationChangeRecord

    async def scenario() -> None:
        w = World(tmp_path, partitions=N)
        f = Follower(w)
        counter = ReadCounter(monkeypatch)
        await f.fetch(dict.fromkeys(range(N), 0))
        await f.fetch({})
        assert len(counter.take()) == 2 * N
        w.apply([BrokerRegistrationChangeRecord(broker_id=2, broker_epoch=12, fenced=1)])
        await f.fetch({})
        assert len(counter.take()) == N  # fenced: recorded as ineligible everywhere
        state = w.manager.partitions[("t", 3)].state
        assert not state._followers[2].isr_eligible
        await f.fetch({})
        assert counter.take() == []
        w.apply([BrokerRegistrationChangeRecord(broker_id=2, broker_epoch=12, fenced=-1)])
        await f.fetch({})
        assert len(counter.take()) == N and state._followers[2].isr_eligible

    run(scenario())


@pytest.mark.pure_python  # spies on methods of compiled instances (conftest.py)
def test_an_idle_replica_fetcher_round_rebuilds_no_request(
    tmp_path: Path, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typing import cast

    from test_fetcher_sessions import ToyLeader, Wire

    from broker.kafka.server import KafkaRequestHandler
    from broker.kafka.services import BrokerServices, ListenerConfig
    from broker.replica.fetcher import ReplicaFetcher
    from quorum.wire.transport import RequestPeer

    positions = {"n": 0}
    real = PartitionState.fetch_position

    def counted(self: PartitionState, log: Any) -> tuple[int, int]:
        positions["n"] += 1
        return real(self, log)

    monkeypatch.setattr(PartitionState, "fetch_position", counted)

    async def scenario() -> None:
        w = World(tmp_path, leader=2, partitions=N)
        toy = ToyLeader()
        handler = KafkaRequestHandler(cast(BrokerServices, toy), ListenerConfig(listener_name="PLAINTEXT"))
        wire = cast(RequestPeer, Wire(handler))
        fetcher = ReplicaFetcher(w.manager, w.config, 2, lambda broker: None)
        for h in w.manager.partitions.values():
            fetcher.add(h)
        await fetcher._fetch_round(wire)  # full
        await fetcher._fetch_round(wire)  # the first incremental one (the full answer listed all)
        assert positions["n"] == 2 * N
        for _ in range(3):
            await fetcher._fetch_round(wire)
        assert positions["n"] == 2 * N, "an idle round looked at every partition"
        toy.produce(7, _assigned(records(5)))
        await fetcher._fetch_round(wire)  # t-7 answered with records: appended
        await fetcher._fetch_round(wire)  # names t-7 at 5
        assert toy.read[-1].partitions[0].fetch_offset == 5 and positions["n"] == 2 * N + 1
        fetcher._next_full_scan = 0.0  # the periodic safety net looks at everything
        await fetcher._fetch_round(wire)
        assert positions["n"] == 3 * N + 1

    run(scenario())


def _assigned(data: bytes) -> bytes:
    b = bytearray(data)
    b[12:16] = (0).to_bytes(4, "big", signed=True)
    return bytes(b)


def test_a_dropped_isr_expansion_releases_the_hw_without_another_fetch(tmp_path: Path, run: Run) -> None:
    """While broker 3's addition is in flight it holds the HW (KIP-497's maximal ISR); once the
    controller refuses it, the HW moves at once: the fetches of an idle session would not
    come to recompute it (an acks=all write waited for the next change of the partition)."""
    from typing import cast

    from test_replica_manager import TOPIC_ID

    from broker.isr import IsrSender
    from quorum.controller.requests import AlterPartitionItem
    from quorum.metadata.records import PartitionChangeRecord
    from quorum.node.controller_client import ControllerClient

    async def scenario() -> None:
        w = World(tmp_path)
        hosted = w.manager.partitions[("t", 0)]
        hosted.state.replica_lag_time_max_ms = 50  # broker 3, silent, stops holding the HW by time soon
        await w.follower_fetch(2, 0)
        await w.follower_fetch(3, 0)
        w.apply([PartitionChangeRecord(partition_id=0, topic_id=TOPIC_ID, isr=(1, 2))])  # broker 3 fenced
        hosted.state.on_isr_sent((1, 2, 3))  # its return proposed before the fencing was known
        produce = asyncio.ensure_future(w.produce(acks=-1))
        await asyncio.sleep(0.1)
        await w.follower_fetch(2, 5)
        await asyncio.sleep(0.05)
        assert not produce.done()  # broker 3, joining, holds the HW at 0
        sender = IsrSender(w.manager, cast(ControllerClient, None), lambda: w.image, lambda: 11)
        reg = hosted.registration
        item = AlterPartitionItem(TOPIC_ID, 0, reg.leader_epoch, (), 0, reg.partition_epoch)
        sender._forget([item], ErrorCode.INELIGIBLE_REPLICA)
        assert await asyncio.wait_for(produce, 1) == ErrorCode.NONE

    run(scenario())
