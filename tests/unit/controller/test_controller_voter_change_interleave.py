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
from quorum.controller.requests import BrokerRegistrationResponse
from quorum.node.feature_updates import static_voters
from quorum.raft.voter_change import UpgradeKRaftVersion
from tests.unit.controller.controller_harness import start, stop


async def scenario(tmp_path: Path) -> None:
    settings = ReplicationSettings(num_partitions=1, default_replication_factor=1)
    h = await start(tmp_path, settings=settings, directory_id=uuid.uuid4())
    node, controller = h.node, h.controller
    try:
        # The registration opens a batch (appended at the end of this loop turn); the upgrade
        # reaches the core in the same turn, before that batch is appended.
        registering = asyncio.create_task(controller.handle(h.registration(10)))
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
            second = await controller.handle(h.registration(11))
        assert isinstance(second, BrokerRegistrationResponse) and second.error_code == ErrorCode.NONE, second
    finally:
        await stop(h)


def test_a_voter_change_in_the_middle_of_an_open_batch_keeps_the_controller_active(tmp_path: Path) -> None:
    asyncio.run(scenario(tmp_path))
