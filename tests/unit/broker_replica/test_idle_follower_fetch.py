"""`PartitionState.on_idle_follower_fetch` (the O(1) path of a leader serving an idle
partition of a follower's fetch session) records exactly what `on_follower_fetch` would:
whenever it takes a fetch, the full rule applied to the same state gives the same follower
views and high watermark, answers nothing to read, no error, no divergence, no ISR change.
A seeded random walk of appends, fetches (right and wrong offsets, epochs, log starts,
broker epochs, eligibility) and time."""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Any

import pytest
from test_replica_manager import Run, World

from broker.log import PartitionLog
from broker.replica.requests import FetchParams, FetchPartition
from broker.replica.state import PartitionState
from quorum.kafka_errors import ErrorCode
from tests.sim.replication.memlog import MemLog, Record


def views(s: PartitionState) -> dict[int, str]:
    """Every field of the leader's view of each follower (a dataclass: its repr lists them)."""
    return {r: repr(f) for r, f in s._followers.items()}


@pytest.mark.pure_python  # spies on methods of compiled instances (conftest.py)
def test_the_idle_path_records_what_the_full_rule_records() -> None:
    rng = random.Random(227)
    taken = 0
    for _ in range(40):
        log = MemLog()
        for i in range(rng.randint(0, 3)):
            log.append(Record(0, i))
        s = PartitionState(1, min_insync_replicas=rng.choice([1, 2]), replica_lag_time_max_ms=3000)
        now = 1_000_000
        assert s.become_leader(
            leader_epoch=1, partition_epoch=0, replicas=(1, 2, 3), isr=(1, 2, 3), now_ms=now, log=log
        )
        for _ in range(200):
            now += rng.choice([0, 1, 50, 4000])
            if rng.random() < 0.1:
                log.append(Record(1, log.log_end_offset))
                s.on_local_append(now, log)
                continue
            end = log.log_end_offset
            replica = rng.choice([2, 3])
            f = s._followers.get(replica)
            offset = end if rng.random() < 0.7 else rng.randint(0, end)
            last_epoch = f.last_fetched_epoch if f is not None and rng.random() < 0.8 else rng.choice([-1, 0, 1])
            log_start = 0 if rng.random() < 0.9 else 1
            broker_epoch = 5 if rng.random() < 0.95 else 6
            eligible = rng.random() < 0.97
            kwargs = dict(
                replica_id=replica,
                fetch_offset=offset,
                last_fetched_epoch=last_epoch,
                log_start_offset=log_start,
                now_ms=now,
                log=log,
                broker_epoch=broker_epoch,
                isr_eligible=eligible,
            )
            idle = copy.deepcopy(s)
            if idle.on_idle_follower_fetch(**kwargs):  # type: ignore[arg-type]
                taken += 1
                hw = s.high_watermark
                full = s.on_follower_fetch(**kwargs)  # type: ignore[arg-type]
                assert full.error == ErrorCode.NONE and full.diverging_epoch is None
                assert not full.high_watermark_changed and not full.isr_expand_wanted
                assert s.high_watermark == hw == idle.high_watermark == offset == log.log_end_offset
                assert views(idle) == views(s)
                assert s.isr == idle.isr
            else:
                assert views(idle) == views(s)  # refused: nothing recorded
                s.on_follower_fetch(**kwargs)  # type: ignore[arg-type]
    assert taken > 200, f"the idle path was taken only {taken} times"


@pytest.mark.pure_python  # spies on methods of compiled instances (conftest.py)
def test_an_idle_follower_round_reads_no_log_and_runs_no_full_rule(
    tmp_path: Path, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A follower's fetch session names every partition it follows in every round; on an idle
    leader (40 partitions, everything replicated) the second round of each follower costs no
    log read and no `on_follower_fetch`: 3,300 such partitions took ~200 ms per round."""
    counts = {"read": 0, "rule": 0}
    real_read, real_rule = PartitionLog.read_range, PartitionState.on_follower_fetch

    def read(self: PartitionLog, *args: Any, **kwargs: Any) -> Any:
        counts["read"] += 1
        return real_read(self, *args, **kwargs)

    def rule(self: PartitionState, **kwargs: Any) -> Any:
        counts["rule"] += 1
        return real_rule(self, **kwargs)

    monkeypatch.setattr(PartitionLog, "read_range", read)
    monkeypatch.setattr(PartitionState, "on_follower_fetch", rule)

    async def scenario() -> None:
        n = 40
        w = World(tmp_path, partitions=n)
        for _ in range(2):
            for replica in (2, 3):
                [*_] = await w.manager.fetch(idle_round(replica, n))
        assert counts == {"read": 2 * n, "rule": 2 * n}  # the first round of each follower
        for _ in range(3):
            for replica in (2, 3):
                results = await w.manager.fetch(idle_round(replica, n))
                assert all(r.error == ErrorCode.NONE and r.high_watermark == 0 and not r.records for r in results)
        assert counts == {"read": 2 * n, "rule": 2 * n}, "idle rounds read the logs again"

    run(scenario())


def idle_round(replica: int, n: int) -> FetchParams:
    parts = tuple(
        FetchPartition("t", p, 0, 1 << 20, current_leader_epoch=0, last_fetched_epoch=-1, log_start_offset=0)
        for p in range(n)
    )
    return FetchParams(replica, 0, 1, 1 << 20, 0, parts, replica_epoch=10 + replica)
