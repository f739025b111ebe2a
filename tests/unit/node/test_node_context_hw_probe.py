"""LocalNodeContext's read-your-writes: `leader_high_watermark` shares DescribeQuorum round
trips among concurrent callers, none answered by a round trip sent before it asked; `settle`
makes a read wait for the writes answered on this node before it, and a write wait for none."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest

from api.context import NotAvailableError
from quorum.controller.requests import (
    AlterConfigOp,
    AlterConfigOpType,
    AlterConfigsResource,
    AlterConfigsResult,
    ConfigResourceType,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from quorum.metadata.records import NoOpRecord, encode_record
from quorum.metadata.snapshot import MetadataStateMachine
from quorum.node.config import config_from_properties
from quorum.node.controller_client import ControllerClient
from quorum.node.node_context import LocalNodeContext
from quorum.node.raft_node import RaftNode
from quorum.raft.describe import QuorumDescription
from quorum.raft.types import Batch


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
        raft = cast(RaftNode, _NotLeader())
        super().__init__(
            config,
            cluster_id="c",
            raft=raft,
            state_machine=MetadataStateMachine(),
            client=ControllerClient(raft, client_id="test"),  # never connects: DescribeQuorum is the test's
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


class _Forwarding(_Context):
    """A node that forwards its writes: the active controller answers each one at once."""

    async def _forward_alter_configs(
        self, request: IncrementalAlterConfigsRequest
    ) -> tuple[IncrementalAlterConfigsResponse, bool]:
        results = tuple(AlterConfigsResult(r.resource_type, r.resource_name) for r in request.resources)
        return IncrementalAlterConfigsResponse(results), False


def _alter(topic: str) -> IncrementalAlterConfigsRequest:
    op = AlterConfigOp("retention.ms", AlterConfigOpType.SET, "1")
    return IncrementalAlterConfigsRequest((AlterConfigsResource(ConfigResourceType.TOPIC, topic, (op,)),))


def _apply_up_to(ctx: _Context, end: int) -> None:
    """Apply no-op batches until the image holds offsets [0, end)."""
    sm = ctx.state_machine
    while sm.applied_offset < end:
        sm.apply(Batch(sm.applied_offset, 1, (encode_record(NoOpRecord()),), timestamp_ms=0))


def test_a_forwarded_write_returns_once_answered_and_the_next_read_settles_it(tmp_path: Path) -> None:
    """Read-your-writes paid by the read: the write makes no DescribeQuorum; a read after it
    waits for one sent after the read began and for the image to apply its high watermark;
    a read with no write answered since the last settle makes none."""

    async def main() -> None:
        ctx = _Forwarding(tmp_path)
        await ctx.settle()
        assert ctx.sent == []  # nothing answered yet: nothing to settle
        response = await ctx.admin(_alter("t"))
        assert isinstance(response, IncrementalAlterConfigsResponse) and response.resources[0].error_code == 0
        assert ctx.sent == []  # the write did not wait for this node's image
        reader = asyncio.ensure_future(ctx.settle())
        await _settle()
        assert len(ctx.sent) == 1 and not reader.done()
        ctx.sent[0].set_result(3)  # the leader's high watermark: offsets [0, 3) are committed
        await _settle()
        assert not reader.done()  # this node has applied nothing yet
        _apply_up_to(ctx, 2)
        await _settle()
        assert not reader.done()
        _apply_up_to(ctx, 3)
        await asyncio.wait_for(reader, 1.0)
        await ctx.settle()
        assert len(ctx.sent) == 1  # settled: the next read makes no round trip
        await ctx.admin(_alter("t"))
        second = asyncio.ensure_future(ctx.settle())
        await _settle()
        assert len(ctx.sent) == 2 and not second.done()  # a new write: the next read settles again
        ctx.sent[1].set_result(3)
        await asyncio.wait_for(second, 1.0)

    asyncio.run(main())


def test_a_read_that_could_not_settle_settles_again(tmp_path: Path) -> None:
    async def main() -> None:
        ctx = _Forwarding(tmp_path)
        await ctx.admin(_alter("t"))
        first = asyncio.ensure_future(ctx.settle())
        await _settle()
        ctx.sent[0].set_result(-1)  # no leader answered: the read goes on, unsettled
        await asyncio.wait_for(first, 1.0)
        second = asyncio.ensure_future(ctx.settle())
        await _settle()
        assert len(ctx.sent) == 2  # so the next read tries again
        ctx.sent[1].set_result(0)
        await asyncio.wait_for(second, 1.0)

    asyncio.run(main())
