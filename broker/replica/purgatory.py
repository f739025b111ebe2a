"""Waiting rooms for requests that cannot be answered yet (Kafka's delayed operations).

`OffsetWaiters`: one per leader partition. An `acks=all` produce waits until the high
watermark reaches the offset after its last record; when the high watermark moves, every
waiter at or below it completes at once. Waiters are kept in a heap by required offset, so
advancing costs O(completed · log n), not O(waiting).

`ProgressSignal`: one per partition. A long-polling fetch (a consumer waiting for
`min_bytes`, a follower waiting for new records) waits for the next "something changed"
(an append on the leader, a high-watermark move, a leadership change) and then re-reads.
Spurious wake-ups are fine: the fetch re-checks and waits again until its deadline.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools

from quorum.kafka_errors import ErrorCode


class OffsetWaiters:
    def __init__(self) -> None:
        self._heap: list[tuple[int, int, asyncio.Future[ErrorCode]]] = []
        self._seq = itertools.count()  # tie-breaker: futures do not compare

    def __len__(self) -> int:
        return len(self._heap)

    def wait(self, required_offset: int) -> asyncio.Future[ErrorCode]:
        """A future completed with NONE once `advance(hw)` sees hw >= required_offset,
        or with an error code by `fail_all`. The caller bounds the wait (timeout_ms)."""
        fut: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._heap, (required_offset, next(self._seq), fut))
        return fut

    def advance(self, high_watermark: int, *, isr_ok: bool = True) -> None:
        """Complete the waiters whose records the high watermark now covers. When the ISR
        is smaller than min.insync.replicas (`isr_ok` False) they complete with
        NOT_ENOUGH_REPLICAS_AFTER_APPEND, as in Kafka."""
        result = ErrorCode.NONE if isr_ok else ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        heap = self._heap
        while heap and heap[0][0] <= high_watermark:
            _, _, fut = heapq.heappop(heap)
            if not fut.done():
                fut.set_result(result)

    def fail_all(self, error: ErrorCode) -> None:
        """Leadership was lost (or the partition removed): nobody waits for this leader any more."""
        heap, self._heap = self._heap, []
        for _, _, fut in heap:
            if not fut.done():
                fut.set_result(error)


class ProgressSignal:
    def __init__(self) -> None:
        self._waiters: list[asyncio.Future[None]] = []

    def waiter(self) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        return fut

    def notify(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def discard(self, fut: asyncio.Future[None]) -> None:
        """Forget a waiter that timed out (bounded memory with many idle long polls)."""
        try:
            self._waiters.remove(fut)
        except ValueError:
            pass


async def wait_any(futures: list[asyncio.Future[None]], timeout_s: float) -> bool:
    """Wait until one of `futures` completes or `timeout_s` passes; True if one completed."""
    if timeout_s <= 0 or not futures:
        return any(f.done() for f in futures)
    done, _ = await asyncio.wait(futures, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    return bool(done)
