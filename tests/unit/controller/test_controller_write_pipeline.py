"""The active controller's write path on a real two-voter quorum in one process (real
RaftNodes, log files, fsync, loopback): batches are pipelined, and a slow fsync on one
node does not hold up writes that do not need it.

A node's fsync is made slow by wrapping its FileLog's flush (a disk that takes its time):
the flush still runs, on the Raft node's worker thread, after the wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from quorum.controller.replication_control import ReplicationSettings
from quorum.controller.requests import BrokerEndpoint, BrokerRegistrationRequest, BrokerRegistrationResponse
from quorum.metadata.snapshot import MetadataStateMachine
from quorum.node.active_controller import NotControllerError, QuorumController
from quorum.node.config import config_from_properties
from quorum.node.free_ports import free_port
from quorum.node.raft_node import RaftNode
from tests.unit.controller.controller_harness import CLUSTER, controller_node


@dataclass(slots=True)
class Member:
    node: RaftNode
    sm: MetadataStateMachine
    controller: QuorumController


@dataclass(slots=True)
class Events:
    """What happened, in the order it happened (appended from the loop and the fsync thread)."""

    items: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, what: str) -> None:
        with self.lock:
            self.items.append(what)

    def index(self, what: str) -> int:
        with self.lock:
            return self.items.index(what)

    def count(self, prefix: str) -> int:
        with self.lock:
            return sum(1 for e in self.items if e.startswith(prefix))


def slow_fsync(member: Member, delay_s: float, events: Events | None = None) -> None:
    """Every fsync of this node's metadata log takes `delay_s` longer (recorded in `events`)."""
    log_ = member.node._log  # noqa: SLF001 - the real log, made slow
    assert log_ is not None
    flush: Callable[[], None] = log_.flush

    def slow() -> None:
        n = events.count("flush-start") if events is not None else 0
        if events is not None:
            events.add(f"flush-start {n}")
        time.sleep(delay_s)
        flush()
        if events is not None:
            events.add(f"flush-end {n}")

    log_.flush = slow  # type: ignore[method-assign]


async def start_quorum(tmp_path: Path, *, linger_ms: int) -> list[Member]:
    ports = {1: free_port(), 2: free_port()}
    voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in ports.items())
    members = []
    for i, port in ports.items():
        config = config_from_properties(
            {
                "process.roles": "controller",
                "node.id": str(i),
                "controller.quorum.voters": voters,
                "listeners": f"CONTROLLER://127.0.0.1:{port}",
                "log.dirs": str(tmp_path / f"node-{i}"),
                "controller.quorum.election.timeout.ms": "100",
            }
        )
        node, sm, controller = controller_node(
            config,
            settings=ReplicationSettings(num_partitions=1, default_replication_factor=1),
            append_linger_ms=linger_ms,
        )
        members.append(Member(node, sm, controller))
    for m in members:
        await m.node.start()
    return members


async def leader_and_follower(members: list[Member]) -> tuple[Member, Member]:
    for _ in range(1000):
        active = [m for m in members if m.controller.active]
        if active:
            other = next(m for m in members if m is not active[0])
            return active[0], other
        await asyncio.sleep(0.01)
    raise AssertionError("no active controller")


async def settled(member: Member) -> None:
    """Everything the leader wrote so far (its activation's records too) is committed."""
    core = member.node.core
    assert core is not None
    await until(lambda: core.high_watermark == core.log.end_offset and not member.node.flushing)


async def stop_quorum(members: list[Member]) -> None:
    for m in members:
        await m.controller.close()
    for m in members:
        await m.node.stop(graceful=False)


def register(broker_id: int) -> BrokerRegistrationRequest:
    return BrokerRegistrationRequest(
        broker_id=broker_id,
        cluster_id=CLUSTER,
        incarnation_id=uuid.uuid4(),
        listeners=(BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9000 + broker_id),),
    )


async def until(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


@pytest.mark.pure_python  # wraps a compiled FileLog's flush (conftest.py)
def test_a_write_is_appended_while_an_earlier_batch_waits_for_its_follower(tmp_path: Path) -> None:
    """While batch A is on the leader's disk and waits for the follower's (slow) fsync, a
    write B is appended to the log at once, as its own batch: it does not wait for A's
    commit (nor for controller.quorum.append.linger.ms, long here). Neither is answered
    before the follower has it."""

    async def scenario() -> None:
        members = await start_quorum(tmp_path, linger_ms=5_000)
        try:
            leader, follower = await leader_and_follower(members)
            core = leader.node.core
            assert core is not None
            await settled(leader)
            slow_fsync(follower, 1.0)
            end = core.log.end_offset
            a = asyncio.ensure_future(leader.controller.handle(register(10)))
            await until(lambda: core.log.end_offset > end and not leader.node.flushing)
            end_a = core.log.end_offset
            b = asyncio.ensure_future(leader.controller.handle(register(11)))
            await until(lambda: core.log.end_offset > end_a, timeout_s=0.5)  # not held behind A
            assert not a.done() and not b.done(), "answered before the follower had the records"
            answers = await asyncio.gather(a, b)
            assert all(isinstance(r, BrokerRegistrationResponse) and r.error_code == 0 for r in answers)
            brokers = leader.sm.image.cluster.brokers
            assert {10, 11} <= set(brokers)
        finally:
            await stop_quorum(members)

    asyncio.run(scenario())


@pytest.mark.pure_python  # wraps a compiled FileLog's flush (conftest.py)
def test_an_ack_that_arrives_during_an_fsync_commits_before_the_next_fsync(tmp_path: Path) -> None:
    """Writes keep coming while the leader's fsyncs are slow. The follower acks batch A
    while the leader fsyncs B; A is answered as soon as that fsync ends, not after one
    more fsync (of C, proposed meanwhile)."""

    async def scenario() -> None:
        members = await start_quorum(tmp_path, linger_ms=25)
        try:
            leader, _ = await leader_and_follower(members)
            await settled(leader)
            events = Events()
            slow_fsync(leader, 0.4, events)
            done: dict[str, asyncio.Future[object]] = {}
            for name, broker_id in (("A", 10), ("B", 11), ("C", 12)):
                fut = asyncio.ensure_future(leader.controller.handle(register(broker_id)))
                fut.add_done_callback(lambda _f, n=name: events.add(f"answer {n}"))
                done[name] = fut
                # the next write arrives while this one's batch is being fsynced
                flushes = len(done)
                await until(lambda k=flushes: events.count("flush-start") >= k)
            await asyncio.gather(*done.values())
            # flush 0 holds A, flush 1 B, flush 2 C.
            assert events.index("answer A") < events.index("flush-end 2"), events.items
        finally:
            await stop_quorum(members)

    asyncio.run(scenario())


@pytest.mark.pure_python  # wraps a compiled FileLog's flush (conftest.py)
def test_a_write_while_the_leader_hands_over_is_answered_not_controller(tmp_path: Path) -> None:
    """After `resign` the leader waits for a voter to catch up (here: the follower's slow
    fsync) and takes no writes meanwhile. A write that arrives then is refused
    (NOT_CONTROLLER) at once; its batch is not proposed to a core that refuses it (that
    raised inside a timer callback and left the write waiting for ever)."""

    async def scenario() -> None:
        members = await start_quorum(tmp_path, linger_ms=25)
        try:
            leader, follower = await leader_and_follower(members)
            await settled(leader)
            core = leader.node.core
            assert core is not None
            slow_fsync(follower, 1.0)
            a = asyncio.ensure_future(leader.controller.handle(register(10)))
            end = core.log.end_offset
            await until(lambda: core.log.end_offset > end)
            leader.node.resign()
            await until(lambda: not core.accepts_writes)
            assert core.is_leader  # still handing over: the follower has not caught up
            try:
                async with asyncio.timeout(2.0):
                    await leader.controller.handle(register(11))
            except NotControllerError:
                pass
            else:
                raise AssertionError("a write was taken while the leader was handing over")
            with contextlib.suppress(NotControllerError):
                await a
        finally:
            await stop_quorum(members)

    asyncio.run(scenario())
