"""AddRaftVoter's TimeoutMs on a real RaftNode (real log files, fsync, loopback listener; the
request sent as bytes over TCP): the leader answers within the time the request asks for, not
after its own controller.quorum.request.timeout.ms (10 s here), and not at once.

- a new replica that never fetches: REQUEST_TIMED_OUT once TimeoutMs has passed;
- a new replica that starts fetching after the request came: added (NONE) within TimeoutMs;
- a VotersRecord that cannot commit (the new replica caught up, then stopped): REQUEST_TIMED_OUT
  at TimeoutMs, not at the node's request timeout.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from quorum.metadata.snapshot import MetadataStateMachine
from quorum.node.bootstrap_voters import write_bootstrap_checkpoint
from quorum.node.config import config_from_properties
from quorum.node.free_ports import free_port
from quorum.node.raft_node import RaftNode
from quorum.raft.errors import ErrorCode
from quorum.raft.voter_set import Endpoint, ReplicaKey, VoterNode, VoterSet
from quorum.wire import voter_codec
from quorum.wire.transport import request

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qk"
NODE_REQUEST_TIMEOUT_MS = 10_000  # the node's own bound, far from the TimeoutMs the tests send


class Quorum:
    """Voter 1 (bootstrapped alone, kraft.version 1) and the replicas that may join it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ports: dict[int, int] = {}
        self.dirs: dict[int, uuid.UUID] = {}
        self.nodes: dict[int, RaftNode] = {}

    def voter_node(self, node_id: int) -> VoterNode:
        if node_id not in self.ports:
            self.ports[node_id] = free_port()
            self.dirs[node_id] = uuid.uuid4()
        endpoint = Endpoint("CONTROLLER", "127.0.0.1", self.ports[node_id])
        return VoterNode(ReplicaKey(node_id, self.dirs[node_id]), (endpoint,), 0, 1)

    async def start(self, node_id: int) -> RaftNode:
        me = self.voter_node(node_id)
        data = self.root / f"node-{node_id}"
        if node_id == 1 and not data.exists():
            write_bootstrap_checkpoint(data, VoterSet.of([me]), timestamp_ms=int(time.time() * 1000))
        config = config_from_properties(
            {
                "process.roles": "controller",
                "node.id": str(node_id),
                "controller.quorum.bootstrap.servers": f"127.0.0.1:{self.ports[1]}",
                "listeners": f"CONTROLLER://127.0.0.1:{self.ports[node_id]}",
                "log.dirs": str(data),
                "controller.quorum.election.timeout.ms": "200",
                "controller.quorum.fetch.timeout.ms": "20000",  # no check-quorum resignation in a test
                "controller.quorum.request.timeout.ms": str(NODE_REQUEST_TIMEOUT_MS),
            }
        )
        node = RaftNode(
            config, cluster_id=CLUSTER, state_machine=MetadataStateMachine(), directory_id=self.dirs[node_id]
        )
        await node.start()
        self.nodes[node_id] = node
        return node

    async def stop(self, node_id: int) -> None:
        await self.nodes.pop(node_id).stop(graceful=False)

    async def leader_ready(self) -> None:
        node = self.nodes[1]
        for _ in range(1000):
            core = node.core
            if core is not None and core.is_leader and core.high_watermark > 0:
                return
            await asyncio.sleep(0.01)
        raise AssertionError("voter 1 did not lead and commit")

    async def add(self, node_id: int, timeout_ms: int) -> tuple[voter_codec.VoterCallAnswer, float]:
        """AddRaftVoter for `node_id` sent to voter 1: its answer and the seconds it took."""
        call = voter_codec.AddRaftVoter(CLUSTER, self.voter_node(node_id), timeout_ms)
        frame, api_key, version = voter_codec.encode_voter_request(call, correlation_id=7, client_id="test")
        started = time.monotonic()
        raw = await request("127.0.0.1", self.ports[1], frame, request_timeout_s=60)
        return voter_codec.decode_voter_response(api_key, version, raw), time.monotonic() - started


@asynccontextmanager
async def quorum(root: Path) -> AsyncIterator[Quorum]:
    q = Quorum(root)
    await q.start(1)
    try:
        await q.leader_ready()
        yield q
    finally:
        for node_id in list(q.nodes):
            await q.stop(node_id)


def test_a_replica_that_never_fetches_times_out_after_timeout_ms(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with quorum(tmp_path) as q:
            answer, took = await q.add(2, timeout_ms=1500)
            assert answer.error == ErrorCode.REQUEST_TIMED_OUT, answer
            assert answer.message and "not a caught-up observer" in answer.message, answer
            # At TimeoutMs: not at once (today's refusal of a lagging replica), not at the node's 10 s.
            assert 1.5 <= took < NODE_REQUEST_TIMEOUT_MS / 2000, took
            assert q.nodes[1].core is not None and q.nodes[1].core.voters == {1}

    asyncio.run(scenario())


def test_a_replica_that_catches_up_within_timeout_ms_is_added(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with quorum(tmp_path) as q:
            adding = asyncio.create_task(q.add(2, timeout_ms=30_000))
            await asyncio.sleep(0.5)  # the request is waiting at the leader; only now does 2 start
            assert not adding.done()
            await q.start(2)
            answer, took = await adding
            assert answer.error == ErrorCode.NONE, answer
            assert took >= 0.5
            core = q.nodes[1].core
            assert core is not None and core.voters_at(core.high_watermark)[1].is_voter(ReplicaKey(2, q.dirs[2]))

    asyncio.run(scenario())


def test_a_voters_record_that_cannot_commit_times_out_after_timeout_ms(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with quorum(tmp_path) as q:
            await q.start(3)  # an observer that catches up ...

            def caught_up() -> bool:
                d = q.nodes[1].describe()
                return any(o.replica_id == 3 and o.last_caught_up_ms >= 0 for o in d.observers)

            for _ in range(1000):
                if caught_up():
                    break
                await asyncio.sleep(0.01)
            assert caught_up()
            await q.stop(3)  # ... and stops: the VotersRecord {1, 3} needs its fetch to commit
            answer, took = await q.add(3, timeout_ms=1500)
            assert answer.error == ErrorCode.REQUEST_TIMED_OUT, answer
            assert 1.5 <= took < NODE_REQUEST_TIMEOUT_MS / 2000, took
            core = q.nodes[1].core
            assert core is not None and core.voters == {1, 3}  # written: it stays in the log, as in Kafka
            assert not core.voters_at(core.high_watermark)[1].is_voter(ReplicaKey(3, q.dirs[3]))

    asyncio.run(scenario())


def test_the_tool_asks_for_the_admin_request_timeout_at_most_and_no_more_than_is_left() -> None:
    add = voter_codec.AddRaftVoter(CLUSTER, Quorum(Path()).voter_node(2))
    assert add.timeout_ms == voter_codec.ADMIN_REQUEST_TIMEOUT_MS == 30_000  # Kafka's admin request.timeout.ms
    assert voter_codec.requested_timeout_ms(voter_codec.within_ms(add, 60_000)) == 30_000
    assert voter_codec.requested_timeout_ms(voter_codec.within_ms(add, 12_345)) == 12_345
    assert voter_codec.requested_timeout_ms(voter_codec.within_ms(add, -5)) == 0
    remove = voter_codec.RemoveRaftVoter(CLUSTER, ReplicaKey(2, uuid.uuid4()))
    assert voter_codec.within_ms(remove, 1) is remove and voter_codec.requested_timeout_ms(remove) == 0
