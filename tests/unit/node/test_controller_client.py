"""ControllerClient.ask_leader on real loopback sockets: a request to a leader that stopped
answering is given up after the request timeout, or as soon as another leader is known,
whichever comes first (a SIGSTOPped controller must not hold a broker's REST writes)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import cast

import pytest

from quorum.node.config import HostPort
from quorum.node.controller_client import ControllerClient
from quorum.node.free_ports import free_port
from quorum.node.raft_node import RaftNode
from quorum.wire import close_server, serve

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]

CORRELATION = 7


@dataclass
class _Core:
    leader_id: int


@dataclass
class _Leadership:
    """What ControllerClient reads of its RaftNode: the leader id and the voters' addresses."""

    core: _Core
    voters: dict[int, HostPort] = field(default_factory=dict)


def _frame() -> bytes:
    body = (18).to_bytes(2, "big") + (0).to_bytes(2, "big") + CORRELATION.to_bytes(4, "big") + b"\xff\xff"
    return len(body).to_bytes(4, "big") + body


async def _server(*, answer: bool) -> tuple[asyncio.Server, int]:
    async def handle(frame: bytes) -> bytes | None:
        if not answer:
            await asyncio.sleep(3600)  # a stopped process: the request is read, never answered
        body = frame[4:8] + b"answer"
        return len(body).to_bytes(4, "big") + body

    port = free_port()
    return await serve("127.0.0.1", port, handle), port


def _client(leadership: _Leadership) -> ControllerClient:
    return ControllerClient(cast(RaftNode, leadership), client_id="test")


def test_answer_from_the_leader_is_returned() -> None:
    async def main() -> bytes | None:
        server, port = await _server(answer=True)
        leadership = _Leadership(_Core(1), {1: HostPort("127.0.0.1", port)})
        client = _client(leadership)
        try:
            return await client.ask_leader(1, _frame(), CORRELATION, 18, 0, timeout_s=5.0)
        finally:
            await client.close()
            await close_server(server)

    raw = asyncio.run(main())
    assert raw is not None and raw.endswith(b"answer")


def test_silent_leader_is_given_up_at_the_timeout() -> None:
    async def main() -> tuple[bytes | None, float]:
        server, port = await _server(answer=False)
        client = _client(_Leadership(_Core(1), {1: HostPort("127.0.0.1", port)}))
        start = time.monotonic()
        try:
            return await client.ask_leader(1, _frame(), CORRELATION, 18, 0, timeout_s=0.4), time.monotonic() - start
        finally:
            await client.close()
            await close_server(server, grace_s=0.1)

    raw, waited = asyncio.run(main())
    assert raw is None
    assert 0.35 <= waited < 2.0, waited


def test_silent_leader_is_given_up_when_another_leader_is_known() -> None:
    async def main() -> tuple[bytes | None, float]:
        server, port = await _server(answer=False)
        leadership = _Leadership(_Core(1), {1: HostPort("127.0.0.1", port), 2: HostPort("127.0.0.1", port)})
        client = _client(leadership)

        async def elect_another() -> None:
            await asyncio.sleep(0.2)
            leadership.core.leader_id = 2

        start = time.monotonic()
        election = asyncio.ensure_future(elect_another())
        try:
            raw = await client.ask_leader(1, _frame(), CORRELATION, 18, 0, timeout_s=10.0)
            return raw, time.monotonic() - start
        finally:
            await election
            await client.close()
            await close_server(server, grace_s=0.1)

    raw, waited = asyncio.run(main())
    assert raw is None
    assert 0.2 <= waited < 1.5, waited  # not the 10 s timeout


def _frame_with(correlation: int, tag: bytes) -> bytes:
    body = (18).to_bytes(2, "big") + (0).to_bytes(2, "big") + correlation.to_bytes(4, "big") + b"\xff\xff" + tag
    return len(body).to_bytes(4, "big") + body


def test_ask_leader_is_not_queued_behind_writes_awaiting_their_commit() -> None:
    """The controller answers a connection's requests in order, and a write is answered only
    once committed: a DescribeQuorum sent on a write connection would wait for every write
    ahead of it. ask_leader has its own connection, answered while every write connection
    holds an unanswered write."""

    async def main() -> tuple[bytes | None, float, int]:
        release = asyncio.Event()

        async def handle(frame: bytes) -> bytes | None:
            if frame.endswith(b"write"):
                await release.wait()  # a write: answered once "committed"
            body = frame[4:8] + b"answer"
            return len(body).to_bytes(4, "big") + body

        port = free_port()
        server = await serve("127.0.0.1", port, handle)
        client = _client(_Leadership(_Core(1), {1: HostPort("127.0.0.1", port)}))
        writes = [
            asyncio.ensure_future(client.send(1, _frame_with(100 + i, b"write"), 100 + i, 44, 0))
            for i in range(client.connections)
        ]
        try:
            await asyncio.sleep(0.2)  # every write connection now holds a write
            assert not any(w.done() for w in writes)
            start = time.monotonic()
            raw = await client.ask_leader(1, _frame(), CORRELATION, 18, 0, timeout_s=1.0)
            waited = time.monotonic() - start
            release.set()
            answered = len(await asyncio.gather(*writes))
            return raw, waited, answered
        finally:
            release.set()
            await client.close()
            await close_server(server, grace_s=0.1)

    raw, waited, answered = asyncio.run(main())
    assert raw is not None and raw.endswith(b"answer"), "ask_leader waited behind the writes"
    assert waited < 0.5, waited
    assert answered == 8
