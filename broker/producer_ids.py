"""`ProducerIdManager`: this broker's source of producer ids (Kafka's RPCProducerIdManager).

Ids come in blocks of 1,000 from the active controller (AllocateProducerIds, KIP-730; see
`quorum.controller.producer_ids`), which commits each block to the metadata log before it
answers, so no two brokers, and no two blocks, ever share an id. The broker hands ids out of
its current block in order and asks for the next block once 90 % of the current one is used
(one request at a time), so a busy broker rarely waits. When the block is used up and the next
one has not arrived, a caller waits up to `wait_s` for it; after that the answer is
COORDINATOR_LOAD_IN_PROGRESS (Kafka's, which clients retry). A refused or unanswered request
is asked again after `retry_backoff_s`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Final

from quorum.controller.requests import AllocateProducerIdsRequest, AllocateProducerIdsResponse
from quorum.kafka_errors import ErrorCode
from quorum.node.controller_client import ControllerClient, ControllerUnavailableError

log = logging.getLogger(__name__)

PREFETCH_RATIO: Final = 0.9  # ask for the next block once this share of the current one is handed out


class ProducerIdManager:
    def __init__(
        self,
        client: ControllerClient,
        node_id: int,
        broker_epoch: Callable[[], int],
        *,
        wait_s: float = 5.0,
        retry_backoff_s: float = 0.1,
    ) -> None:
        self.client = client
        self.node_id = node_id
        self.broker_epoch = broker_epoch
        self.wait_s = wait_s
        self.retry_backoff_s = retry_backoff_s
        # Invariant: ids in [_next, _end) are this broker's and not handed out yet.
        self._next = 0
        self._end = 0
        self._block_first = 0
        self._pending: tuple[int, int] | None = None  # the next block (first, end), fetched ahead
        self._fetch: asyncio.Task[None] | None = None
        self._arrived = asyncio.Event()

    async def generate(self) -> tuple[ErrorCode, int]:
        """(NONE, a producer id never handed out before), or (COORDINATOR_LOAD_IN_PROGRESS, -1)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_s
        while True:
            code, pid = self.take_nowait()
            if code == ErrorCode.NONE:
                return code, pid
            remaining = deadline - loop.time()
            if remaining <= 0:
                return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, -1
            self._arrived.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self._arrived.wait()

    def take_nowait(self) -> tuple[ErrorCode, int]:
        """`generate` without waiting, for callers on the event loop that must not suspend (the
        transaction coordinator's sans-IO rules): (NONE, an id) from the current or prefetched
        block, else (COORDINATOR_LOAD_IN_PROGRESS, -1) with the next block requested, which
        the client's retry then finds. The first call of a broker only starts the prefetch."""
        if self._next >= self._end and self._pending is not None:
            (self._block_first, self._end), self._pending = self._pending, None
            self._next = self._block_first
        if self._next >= self._end:
            self._request_next_block()
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, -1
        pid = self._next
        self._next += 1
        if self._next - self._block_first >= PREFETCH_RATIO * (self._end - self._block_first):
            self._request_next_block()
        return ErrorCode.NONE, pid

    def prefetch(self) -> None:
        """Ask for a block now if none is at hand (a broker about to coordinate transactions)."""
        if self._next >= self._end and self._pending is None:
            self._request_next_block()

    def _request_next_block(self) -> None:
        if self._pending is None and (self._fetch is None or self._fetch.done()):
            self._fetch = asyncio.create_task(self._fetch_block(), name=f"producer-ids-{self.node_id}")

    async def _fetch_block(self) -> None:
        while True:
            request = AllocateProducerIdsRequest(self.node_id, self.broker_epoch())
            try:
                response = await self.client.call(request, timeout_s=10.0)
            except ControllerUnavailableError as exc:
                log.info("broker %d: no producer id block yet: %s", self.node_id, exc)
            else:
                assert isinstance(response, AllocateProducerIdsResponse)
                if response.error_code == 0 and response.producer_id_len > 0:
                    first = response.producer_id_start
                    self._pending = (first, first + response.producer_id_len)
                    log.info("broker %d: producer ids %d..%d", self.node_id, first, self._pending[1] - 1)
                    self._arrived.set()
                    return
                log.info("broker %d: AllocateProducerIds refused with error %d", self.node_id, response.error_code)
            await asyncio.sleep(self.retry_backoff_s)

    async def stop(self) -> None:
        if self._fetch is not None:
            self._fetch.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._fetch
