"""`AckWait`: the acks=-1 appends of one request, one future and one timer for all of them."""

from __future__ import annotations

import asyncio

from broker.replica.purgatory import AckWait
from quorum.kafka_errors import ErrorCode


def test_nothing_waiting_returns_at_once() -> None:
    async def go() -> None:
        w = AckWait()
        done = w.waiter(0)
        done(ErrorCode.NONE)  # completed while the request was still appending
        assert len(w) == 0
        await asyncio.wait_for(w.wait(10.0), 0.5)
        assert w.codes == {0: ErrorCode.NONE}

    asyncio.run(go())


def test_waits_for_every_append_then_answers_each_code() -> None:
    async def go() -> None:
        w = AckWait()
        first, second = w.waiter(0), w.waiter(2)
        loop = asyncio.get_running_loop()
        loop.call_later(0.01, first, ErrorCode.NONE)
        loop.call_later(0.02, second, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        await asyncio.wait_for(w.wait(10.0), 2)
        assert w.codes == {0: ErrorCode.NONE, 2: ErrorCode.NOT_LEADER_OR_FOLLOWER}
        assert len(w) == 0

    asyncio.run(go())


def test_a_timeout_leaves_the_late_appends_out_of_codes() -> None:
    async def go() -> None:
        w = AckWait()
        first, late = w.waiter(0), w.waiter(1)
        first(ErrorCode.NONE)
        await w.wait(0.02)
        assert w.codes == {0: ErrorCode.NONE}  # index 1: timed out (the caller's REQUEST_TIMED_OUT)
        late(ErrorCode.NONE)  # its HW move after the answer: nothing left to wake
        assert len(w) == 0

    asyncio.run(go())


def test_a_cancelled_request_drops_its_timer() -> None:
    async def go() -> None:
        w = AckWait()
        done = w.waiter(0)
        task = asyncio.ensure_future(w.wait(60.0))
        await asyncio.sleep(0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert task.cancelled()
        done(ErrorCode.NONE)  # the connection closed meanwhile: nothing to wake

    asyncio.run(go())
