"""`ProducerIdManager.take_nowait`: the transaction coordinator's producer-id source never
waits on the event loop; without a block at hand it answers COORDINATOR_LOAD_IN_PROGRESS and
has the block fetched, and it asks for the next block ahead (at 90 %) so a busy coordinator
rarely finds none."""

from __future__ import annotations

import asyncio
from typing import Any

from broker.producer_ids import ProducerIdManager
from quorum.controller.requests import AllocateProducerIdsRequest, AllocateProducerIdsResponse
from quorum.kafka_errors import ErrorCode


class Controller:
    """Hands out blocks of 10 ids, each when the test releases it."""

    def __init__(self) -> None:
        self.asked = 0
        self.release = asyncio.Event()
        self.next_start = 0

    async def call(self, request: Any, timeout_s: float = 30.0) -> AllocateProducerIdsResponse:
        assert isinstance(request, AllocateProducerIdsRequest)
        self.asked += 1
        await self.release.wait()
        self.release.clear()
        start, self.next_start = self.next_start, self.next_start + 10
        return AllocateProducerIdsResponse(0, start, 10)


async def spin() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


def test_take_nowait_never_waits_and_prefetches_the_next_block() -> None:
    async def go() -> None:
        controller = Controller()
        ids = ProducerIdManager(controller, 4, lambda: 1)  # type: ignore[arg-type]
        assert ids.take_nowait() == (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, -1)  # no block yet: asked for one
        await spin()
        assert controller.asked == 1
        assert ids.take_nowait() == (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, -1)  # still one request only
        await spin()
        assert controller.asked == 1
        controller.release.set()
        await spin()
        got = [ids.take_nowait() for _ in range(9)]
        assert got == [(ErrorCode.NONE, i) for i in range(9)]
        await spin()
        assert controller.asked == 2  # 9 of 10 handed out: the next block is on its way
        controller.release.set()
        await spin()
        assert [ids.take_nowait()[1] for _ in range(3)] == [9, 10, 11]  # the old block's last, then the new one
        await ids.stop()

    asyncio.run(go())


def test_generate_still_waits_for_a_block() -> None:
    async def go() -> None:
        controller = Controller()
        ids = ProducerIdManager(controller, 4, lambda: 1, wait_s=5.0)  # type: ignore[arg-type]
        waiting = asyncio.create_task(ids.generate())
        await spin()
        assert not waiting.done()
        controller.release.set()
        assert await waiting == (ErrorCode.NONE, 0)
        await ids.stop()

    asyncio.run(go())
