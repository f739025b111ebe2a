"""LocalNodeContext.leader_high_watermark: concurrent writers share DescribeQuorum round
trips, and none is answered by a round trip sent before it asked (read-your-writes)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest

from api.context import NotAvailableError
from quorum.metadata.snapshot import MetadataStateMachine
from quorum.node.config import config_from_properties
from quorum.node.controller_client import ControllerClient
from quorum.node.node_context import LocalNodeContext
from quorum.node.raft_node import RaftNode
from quorum.raft.describe import QuorumDescription


@dataclass
class _NotLeader:
    core: None = None  # this node is no quorum leader: the high watermark needs a round trip


class _Context(LocalNodeContext):
    """The real probe logic; DescribeQuorum answered by the test, one round trip at a time."""

    def __init__(self, tmp: Path) -> None:
        config = config_from_properties(
            {
                "process.roles": "broker",
                "node.id": "4",
                "controller.quorum.voters": "1@127.0.0.1:1",
                "listeners": "PLAINTEXT://127.0.0.1:2",
                "controller.listener.names": "CONTROLLER",
                "log.dirs": str(tmp),
            }
        )
        super().__init__(
            config,
            cluster_id="c",
            raft=cast(RaftNode, _NotLeader()),
            state_machine=MetadataStateMachine(),
            client=cast(ControllerClient, None),
        )
        self.sent: list[asyncio.Future[int]] = []  # one per DescribeQuorum, in send order

    async def describe_quorum(self) -> QuorumDescription:
        answer: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.sent.append(answer)
        hw = await answer
        if hw < 0:
            raise NotAvailableError("no leader")
        return cast(Any, type("D", (), {"high_watermark": hw})())


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_callers_share_round_trips_sent_after_they_asked(tmp_path: Path) -> None:
    async def main() -> None:
        ctx = _Context(tmp_path)
        first = asyncio.ensure_future(ctx.leader_high_watermark())
        await _settle()
        assert len(ctx.sent) == 1
        later = [asyncio.ensure_future(ctx.leader_high_watermark()) for _ in range(50)]
        await _settle()
        assert len(ctx.sent) == 1  # they wait for the next round trip, not this one
        ctx.sent[0].set_result(10)
        await _settle()
        assert await first == 10
        assert len(ctx.sent) == 2 and not any(f.done() for f in later)
        ctx.sent[1].set_result(20)
        assert await asyncio.gather(*later) == [20] * 50
        await _settle()
        assert len(ctx.sent) == 2  # nobody waits: no third round trip

    asyncio.run(main())


def test_a_failed_round_trip_fails_its_callers_only(tmp_path: Path) -> None:
    async def main() -> None:
        ctx = _Context(tmp_path)
        first = asyncio.ensure_future(ctx.leader_high_watermark())
        await _settle()
        second = asyncio.ensure_future(ctx.leader_high_watermark())
        await _settle()
        ctx.sent[0].set_result(-1)
        with pytest.raises(NotAvailableError):
            await first
        await _settle()
        ctx.sent[1].set_result(7)
        assert await second == 7
        third = asyncio.ensure_future(ctx.leader_high_watermark())
        await _settle()
        assert len(ctx.sent) == 3
        ctx.sent[2].set_result(8)
        assert await third == 8

    asyncio.run(main())


def test_a_cancelled_caller_does_not_cancel_the_shared_round_trip(tmp_path: Path) -> None:
    async def main() -> None:
        ctx = _Context(tmp_path)
        a = asyncio.ensure_future(ctx.leader_high_watermark())
        b = asyncio.ensure_future(ctx.leader_high_watermark())
        await _settle()
        a.cancel()
        await _settle()
        ctx.sent[0].set_result(5)
        await _settle()
        ctx.sent[1].set_result(6)
        assert await b == 6
        assert a.cancelled()

    asyncio.run(main())
