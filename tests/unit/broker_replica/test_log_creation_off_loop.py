"""A metadata delta that brings many partitions creates their logs off the event loop
(`broker.replica.log_creator`): the loop keeps serving meanwhile, and each partition is
then hosted as the image says when its log exists (a delta applied meanwhile may have
moved or deleted it). Broker 1's `ReplicaManager` on real logs (`World`)."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from test_replica_manager import Run, World

from quorum.metadata.records import PartitionChangeRecord, PartitionRecord, RemoveTopicRecord, TopicRecord

BIG = uuid.UUID(int=99)


def create_topic(w: World, name: str, topic_id: uuid.UUID, partitions: int, *, leader: int = 1) -> None:
    w.apply(
        [TopicRecord(name=name, topic_id=topic_id)]
        + [
            PartitionRecord(
                partition_id=p,
                topic_id=topic_id,
                replicas=(1, 2, 3),
                isr=(1, 2, 3),
                leader=leader if p % 2 == 0 else 2,
                leader_epoch=0,
                partition_epoch=0,
            )  # fmt: skip
            for p in range(partitions)
        ]
    )


def log_dirs(root: Path, pattern: str) -> list[Path]:
    return list(root.glob(pattern))


def creating(w: World) -> bool:
    return bool(w.manager._log_creator.pending)


async def until_hosted(w: World, n: int, topic: str = "big", timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while sum(1 for tp in w.manager.partitions if tp[0] == topic) < n or creating(w):
        assert time.monotonic() < deadline, "the logs were never hosted"
        await asyncio.sleep(0.02)


def test_a_delta_of_two_thousand_new_partitions_does_not_stall_the_loop(
    tmp_path: Path, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Creating a log costs a directory and three files (0.5 ms to 5 ms each on this machine's
    disk): 2,000 of them on the loop stall it for 1 s to 10 s (a broker fenced at a 3 s
    session timeout). Off the loop, every log's files are made on a worker thread, and the
    longest gap between two ticks of a 10 ms ticker is a small part of the whole creation
    (on the loop it would be all of it). The gaps are counted in the loop thread's CPU time
    and compared with the process's CPU time for the whole creation, so that a runner whose
    other load preempts the loop (a wall-clock gap with no work of ours in it) cannot fail
    the check, while logs made on the loop (the loop thread's CPU between two ticks is then
    nearly all of it) still do."""
    import threading

    import broker.replica.log_creator as log_creator

    n = 2000
    threads: set[int] = set()
    real_create = log_creator.create_new_log

    def recording_create(plan: Any) -> Any:
        threads.add(threading.get_ident())
        return real_create(plan)

    monkeypatch.setattr(log_creator, "create_new_log", recording_create)

    async def scenario() -> None:
        w = World(tmp_path)
        gaps: list[float] = []  # the loop thread's CPU seconds between two ticks
        stop = False

        async def ticker() -> None:
            last = time.thread_time()
            while not stop:
                await asyncio.sleep(0.01)
                now = time.thread_time()
                gaps.append(now - last)
                last = now

        tick = asyncio.create_task(ticker())
        await asyncio.sleep(0.05)
        started = time.process_time()
        create_topic(w, "big", BIG, n)
        await until_hosted(w, n)
        took = time.process_time() - started  # CPU seconds of every thread of the process
        stop = True
        await tick
        assert threads, "no log was made by the off-loop creator"
        assert threading.get_ident() not in threads, "a log was created on the loop's thread"
        # Off the loop the longest stall is the delta's own planning or one chunk's hosting
        # (a few % of the whole); on the loop it is the whole creation (1 s quiet, 6 s busy).
        print(f"longest loop stall {max(gaps):.3f} CPU s of {took:.3f} CPU s creating {n} logs")
        assert max(gaps) < took / 4, f"the loop stalled {max(gaps):.2f} CPU s of the {took:.2f} CPU s creating {n} logs"
        for p in (0, 1, n - 1):
            hosted = w.manager.partitions[("big", p)]
            assert hosted.state.is_leader == (p % 2 == 0)
            assert hosted.topic_id == BIG and hosted.log.log_end_offset == 0
        assert len(log_dirs(tmp_path, "big-*")) == n

    run(scenario())


def test_partitions_moved_or_deleted_while_their_logs_are_created_end_as_the_image_says(
    tmp_path: Path, run: Run
) -> None:
    n = 300

    async def scenario() -> None:
        w = World(tmp_path)
        create_topic(w, "big", BIG, n)
        assert creating(w)  # off the loop
        # Meanwhile: partition 0 moves to broker 3 (epoch 1), partition 1 leaves broker 1.
        w.apply(
            [
                PartitionChangeRecord(partition_id=0, topic_id=BIG, leader=3, isr=(1, 2, 3)),
                PartitionChangeRecord(partition_id=1, topic_id=BIG, replicas=(2, 3, 4), isr=(2, 3), leader=2),
            ]
        )
        await until_hosted(w, n - 1)
        zero = w.manager.partitions[("big", 0)]
        assert not zero.state.is_leader and zero.state.leader_epoch == 1
        assert ("big", 1) not in w.manager.partitions and w.logs.get("big", 1) is None
        assert not log_dirs(tmp_path, "big-1")
        # A topic deleted while its logs are created leaves nothing hosted.
        other = uuid.UUID(int=100)
        create_topic(w, "gone", other, n)
        w.apply([RemoveTopicRecord(topic_id=other)])
        await until_hosted(w, n - 1)
        assert not [tp for tp in w.manager.partitions if tp[0] == "gone"]
        assert not [tp for tp in w.logs.logs if tp[0] == "gone"]
        assert not [d for d in log_dirs(tmp_path, "gone-*") if not d.name.endswith("-delete")]

    run(scenario())


def test_internal_topics_are_hosted_when_the_delta_is_applied(tmp_path: Path, run: Run) -> None:
    """The group coordinator looks at the hosted `__consumer_offsets` partitions right after
    each delta: they never wait for the log creator, however many partitions come with them."""

    async def scenario() -> None:
        w = World(tmp_path)
        offsets = uuid.UUID(int=101)
        w.apply(
            [TopicRecord(name="__consumer_offsets", topic_id=offsets), TopicRecord(name="big", topic_id=BIG)]
            + [
                PartitionRecord(
                    partition_id=p,
                    topic_id=t,
                    replicas=(1, 2, 3),
                    isr=(1, 2, 3),
                    leader=1,
                    leader_epoch=0,
                    partition_epoch=0,
                )  # fmt: skip
                for t in (offsets, BIG)
                for p in range(100)
            ]
        )
        assert all(("__consumer_offsets", p) in w.manager.partitions for p in range(100))
        assert creating(w)  # the user topic's 100 logs: off the loop
        await until_hosted(w, 100)

    run(scenario())
