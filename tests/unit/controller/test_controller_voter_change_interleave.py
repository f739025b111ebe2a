"""A voter-set change (here the kraft.version upgrade of a static quorum) that the Raft core
appends while the active controller holds an open batch must not cost the controller its
activity: the batch goes to the log first, at the offsets the controller gave its records,
and the controller keeps serving. (Before, the controller found the log end moved "under"
it, failed the write and stayed inactive while its node went on leading: every broker write
was answered NOT_CONTROLLER until the next election.) A real single-voter RaftNode (real
log files, fsync, loopback listener) with the real QuorumController."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from quorum.controller.errors import ErrorCode
from quorum.controller.replication_control import ReplicationSettings
from quorum.controller.requests import BrokerEndpoint, BrokerRegistrationRequest, BrokerRegistrationResponse
from quorum.metadata.snapshot import MetadataStateMachine
from quorum.node.active_controller import QuorumController
from quorum.node.config import config_from_properties
from quorum.node.feature_updates import static_voters
from quorum.node.free_ports import free_port
from quorum.node.raft_node import RaftNode
from quorum.raft.voter_change import UpgradeKRaftVersion

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qk"


def registration(broker_id: int) -> BrokerRegistrationRequest:
    return BrokerRegistrationRequest(
        broker_id=broker_id,
        cluster_id=CLUSTER,
        incarnation_id=uuid.uuid4(),
        listeners=(BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9000 + broker_id),),
    )


async def scenario(tmp_path: Path) -> None:
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
    sm = MetadataStateMachine()
    holder: list[QuorumController] = []
    node = RaftNode(
        config,
        cluster_id=CLUSTER,
        state_machine=sm,
        on_first_commit=lambda epoch: holder[0].on_first_commit(epoch),
        on_role_change=lambda role, epoch: holder[0].on_role_change(role, epoch),
        directory_id=uuid.uuid4(),
    )
    controller = QuorumController(
        node,
        sm,
        cluster_id=CLUSTER,
        settings=ReplicationSettings(num_partitions=1, default_replication_factor=1),
        session_timeout_ms=60_000,
        idle_interval_ms=0,
        auto_rebalance=False,
        rebalance_interval_s=300,
        imbalance_percentage=10,
    )
    holder.append(controller)
    await node.start()
    try:
        for _ in range(1000):
            if controller.active:
                break
            await asyncio.sleep(0.01)
        assert controller.active, "single voter never became the active controller"
        # The registration opens a batch (appended at the end of this loop turn); the upgrade
        # reaches the core in the same turn, before that batch is appended.
        registering = asyncio.create_task(controller.handle(registration(10)))
        await asyncio.sleep(0)
        upgraded = node.change_voters(UpgradeKRaftVersion(1, static_voters(node)))
        async with asyncio.timeout(10):
            first = await registering
            result = await upgraded
        assert isinstance(first, BrokerRegistrationResponse) and first.error_code == ErrorCode.NONE, first
        assert result.error == ErrorCode.NONE, result
        assert node.core is not None and node.core.kraft_version == 1
        # Still the active controller: the next write succeeds.
        assert controller.active
        async with asyncio.timeout(10):
            second = await controller.handle(registration(11))
        assert isinstance(second, BrokerRegistrationResponse) and second.error_code == ErrorCode.NONE, second
    finally:
        await controller.close()
        await node.stop(graceful=False)


def test_a_voter_change_in_the_middle_of_an_open_batch_keeps_the_controller_active(tmp_path: Path) -> None:
    asyncio.run(scenario(tmp_path))
