"""Waiting rooms for requests that cannot be answered yet (Kafka's delayed operations).

`AckWaiters`: one per leader partition. An `acks=all` produce waits until
`PartitionState.is_acked` answers for it (the high watermark passed its last record, or the
leadership ended); when the high watermark moves, every waiter it covers completes at once.
Waiters are kept in a heap by required offset, so completing costs O(completed · log n), not
O(waiting).

`ProgressSignal`: one per partition. A long-polling fetch (a consumer waiting for
`min_bytes`, a follower waiting for new records) waits for the next "something changed"
(an append on the leader, a high-watermark move, a leadership change) and then re-reads.
Spurious wake-ups are fine: the fetch re-checks and waits again until its deadline.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable

from broker.replica.state import PartitionState
from quorum.kafka_errors import ErrorCode


class AckWaiters:
    """The acks=-1 writes of one leader partition waiting for replication (Kafka's
    DelayedProduce). When they complete is `PartitionState.is_acked`'s rule alone: `complete`
    asks it for the waiters in order of their required offset and stops at the first still
    waiting (every later one needs a higher HW). Callback based and loop free, so the
    replication simulation drives this very class."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, int, Callable[[ErrorCode], None]]] = []
        self._seq = itertools.count()  # tie-breaker: callbacks do not compare

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, required_offset: int, append_leader_epoch: int, done: Callable[[ErrorCode], None]) -> None:
        """Wait for an acks=-1 write appended as leader in ``append_leader_epoch`` whose last
        offset is ``required_offset - 1``; ``done(code)`` is called once (see `complete`)."""
        heapq.heappush(self._heap, (required_offset, next(self._seq), append_leader_epoch, done))

    def complete(self, state: PartitionState) -> None:
        """Complete every waiter `state.is_acked` has an answer for (NONE, NOT_ENOUGH_REPLICAS_
        AFTER_APPEND, or NOT_LEADER_OR_FOLLOWER once the leadership that appended it ended)."""
        heap = self._heap
        while heap:
            required, _, epoch, done = heap[0]
            code = state.is_acked(required, epoch)
            if code is None:
                return
            heapq.heappop(heap)
            done(code)

    def fail_all(self, error: ErrorCode) -> None:
        """The partition is gone or its leadership ended: nobody waits for this leader any more."""
        heap, self._heap = self._heap, []
        for _, _, _, done in heap:
            done(error)


def future_callback(fut: asyncio.Future[ErrorCode]) -> Callable[[ErrorCode], None]:
    """A `AckWaiters` callback completing ``fut`` (unless it was cancelled: a timed-out produce)."""

    def done(code: ErrorCode) -> None:
        if not fut.done():
            fut.set_result(code)

    return done


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
