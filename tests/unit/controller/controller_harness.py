"""A real single-voter RaftNode (real log files, fsync, a loopback listener) running the real
QuorumController in this process, for the controller tests of this directory: `start` it on a
directory, drive it with Harness's broker requests, `stop` it (a later `start` on the same
directory replays its log)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from quorum.controller.replication_control import ReplicationSettings
from quorum.controller.requests import (
    BrokerEndpoint,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
)
from quorum.metadata.snapshot import MetadataStateMachine
from quorum.node.active_controller import QuorumController
from quorum.node.config import NodeConfig, config_from_properties
from quorum.node.free_ports import free_port
from quorum.node.raft_node import RaftNode
from quorum.raft.voter_set import ZERO_UUID

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qk"


class Harness:
    """The node, its metadata image (`sm.image`: what brokers and the REST API read) and the
    controller; `incarnations` keeps one incarnation id per broker id, so a broker registers
    again as the same process."""

    def __init__(self, node: RaftNode, sm: MetadataStateMachine, controller: QuorumController) -> None:
        self.node = node
        self.sm = sm
        self.controller = controller
        self.incarnations: dict[int, uuid.UUID] = {}

    def registration(self, broker_id: int, rack: str | None = None) -> BrokerRegistrationRequest:
        """Broker `broker_id`'s registration (PLAINTEXT on port 9000 + id)."""
        return BrokerRegistrationRequest(
            broker_id=broker_id,
            cluster_id=CLUSTER,
            incarnation_id=self.incarnations.setdefault(broker_id, uuid.uuid4()),
            listeners=(BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9000 + broker_id),),
            rack=rack,
        )

    async def register(self, broker_id: int, rack: str | None = None) -> int:
        """Register the broker (an answer without error expected); its broker epoch."""
        resp = await self.controller.handle(self.registration(broker_id, rack))
        assert isinstance(resp, BrokerRegistrationResponse)
        assert resp.error_code == 0, resp
        return resp.broker_epoch

    async def heartbeat(self, broker_id: int, epoch: int, **kw: bool) -> BrokerHeartbeatResponse:
        req = BrokerHeartbeatRequest(
            broker_id=broker_id,
            broker_epoch=epoch,
            current_metadata_offset=self.sm.image.offset,
            want_fence=kw.get("want_fence", False),
            want_shut_down=kw.get("want_shut_down", False),
        )
        resp = await self.controller.handle(req)
        assert isinstance(resp, BrokerHeartbeatResponse)
        return resp

    async def unfenced_brokers(self, *ids: int, racks: bool = False) -> dict[int, int]:
        epochs = {}
        for b in ids:
            epochs[b] = await self.register(b, rack=f"r{b % 3}" if racks else None)
        for b, e in epochs.items():
            resp = await self.heartbeat(b, e)
            assert resp.error_code == 0 and not resp.is_fenced, resp
        return epochs


DEFAULT_SETTINGS = ReplicationSettings(num_partitions=3, default_replication_factor=2)
START_POLLS = 1000  # every 10 ms: a single voter elects itself and commits its first batch by then


def controller_node(
    config: NodeConfig,
    *,
    settings: ReplicationSettings = DEFAULT_SETTINGS,
    session_timeout_ms: int = 60_000,
    directory_id: uuid.UUID = ZERO_UUID,
    append_linger_ms: int = 25,
) -> tuple[RaftNode, MetadataStateMachine, QuorumController]:
    """A RaftNode and the QuorumController it drives, wired to each other, not started (no
    idle writes, no automatic leader rebalance)."""
    sm = MetadataStateMachine()
    holder: list[QuorumController] = []
    node = RaftNode(
        config,
        cluster_id=CLUSTER,
        state_machine=sm,
        on_first_commit=lambda epoch: holder[0].on_first_commit(epoch),
        on_role_change=lambda role, epoch: holder[0].on_role_change(role, epoch),
        directory_id=directory_id,
    )
    controller = QuorumController(
        node,
        sm,
        cluster_id=CLUSTER,
        settings=settings,
        session_timeout_ms=session_timeout_ms,
        idle_interval_ms=0,
        auto_rebalance=False,
        rebalance_interval_s=300,
        imbalance_percentage=10,
        append_linger_ms=append_linger_ms,
    )
    holder.append(controller)
    return node, sm, controller


async def start(
    tmp_path: Path,
    session_timeout_ms: int = 60_000,
    *,
    settings: ReplicationSettings = DEFAULT_SETTINGS,
    directory_id: uuid.UUID = ZERO_UUID,
) -> Harness:
    """Start node 1, the only voter, on tmp_path/data and wait until its controller is active.
    `directory_id`: the metadata log dir's directory.id (KIP-853; a kraft.version upgrade
    needs one)."""
    port = free_port()
    config = config_from_properties(
        {
            "process.roles": "controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{port}",
            "listeners": f"CONTROLLER://127.0.0.1:{port}",
            "log.dirs": str(tmp_path / "data"),
            "controller.quorum.election.timeout.ms": "50",
        }
    )
    node, sm, controller = controller_node(
        config, settings=settings, session_timeout_ms=session_timeout_ms, directory_id=directory_id
    )
    await node.start()
    h = Harness(node, sm, controller)
    for _ in range(START_POLLS):
        if controller.active:
            break
        await asyncio.sleep(0.01)
    if not controller.active:
        await stop(h)
        raise AssertionError("single voter never became the active controller")
    return h


async def stop(h: Harness) -> None:
    await h.controller.close()
    await h.node.stop(graceful=False)


def run(coro: object) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]
