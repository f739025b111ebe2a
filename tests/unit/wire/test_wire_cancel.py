"""A `PeerClient.send` cancelled just as its connection opens is cancelled, not carried on.

Python 3.11's `asyncio.wait_for` returns the inner result when the inner awaitable is done as
the cancellation arrives; the connect used it, so such a send went on and waited for its
answer (up to its request timeout) while its caller was stopping: a broker's shutdown waits
for the requests it cancels (ControllerClient, replica fetchers). The test opens the
connection and cancels the send in one go, before the sending task resumes."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from quorum.wire.transport import PeerClient


@pytest.mark.pure_python  # replaces a method of a compiled class (conftest.py)
def test_a_send_cancelled_as_its_connection_opens_is_cancelled(
    run: Callable[[Coroutine[Any, Any, str]], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> str:
        ours, theirs = socket.socketpair()
        opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        peer = PeerClient("127.0.0.1", 9, connect_timeout_s=5.0, request_timeout_s=30.0)
        conn = await peer._open(sock=ours)  # the connection the send gets, made up front

        async def open_when_told(self: PeerClient) -> Any:
            await opened
            return conn

        monkeypatch.setattr(PeerClient, "_open", open_when_told)
        frame = (8).to_bytes(4, "big") + bytes(8)
        sending = asyncio.ensure_future(peer.send(frame, 0, 0, 0))
        for _ in range(3):
            await asyncio.sleep(0)  # the send waits for its connection
        opened.set_result(None)
        sending.cancel()  # before the sending task resumes with the connection
        done, _ = await asyncio.wait({sending}, timeout=2.0)
        await peer.close()  # ends a send that went on (its answer never comes)
        await asyncio.wait({sending})
        theirs.close()
        if not done:
            return f"the send went on after it was cancelled ({sending.exception()!r} once the peer closed)"
        return "cancelled" if sending.cancelled() else f"not cancelled: {sending.exception()!r}"

    assert run(scenario()) == "cancelled"
