"""Waiting rooms for requests that cannot be answered yet (Kafka's delayed operations).

`AckWaiters`: one per leader partition. An `acks=all` produce waits until
`PartitionState.is_acked` answers for it (the high watermark passed its last record, or the
leadership ended); when the high watermark moves, every waiter it covers completes at once.
Waiters are kept in a heap by required offset, so completing costs O(completed · log n), not
O(waiting).

`FetchWatchers`: one per partition; `FetchWaiter`: one per waiting Fetch. A long-polling
fetch (a consumer waiting for `min_bytes`, a follower waiting for new records) registers its
one waiter with every partition it reads, once for the whole wait; a partition wakes only the
waiters that can read more from what changed (consumers: the high watermark or log start;
followers: the log end; both: a role change), telling each which of its partitions changed,
so the fetch re-reads those alone. Spurious wake-ups are fine: the fetch re-checks and waits
again until its deadline.

`SessionWatch`: one per follower's KIP-227 fetch session, registered with the
`FetchWatchers` of each session partition for as long as the partition stays in the
session (not once per fetch). It collects the partitions where something a follower must
learn happened since the session's last fetch read them: the log end moved (wakes the
session's long poll), the high watermark or log start moved (noted; a follower's long
poll is not woken for it, it is answered with the next records or at expiry), a role or
leadership change (wakes). An incremental fetch of the session reads those and the
partitions its request names, nothing else: a round costs O(what changed), not O(session).
It is also the clock of the fetches that skipped a partition (`PartitionClock`).
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import itertools
from collections.abc import Callable, Iterable

from broker.replica.requests import FetchPartition
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


class AckWait:
    """The acks=-1 appends of one request (a Produce, a WriteTxnMarkers) waiting in their
    partitions' `AckWaiters`: one future and one timer for the request, however many
    partitions it names (not a future per partition and `asyncio.wait`, which cost a timer,
    a set and an extra loop turn per request). `waiter(index)` is the `AckWaiters` callback
    of the append at `index` in the request; `codes` holds the codes of those completed."""

    __slots__ = ("_fut", "_left", "codes")

    def __init__(self) -> None:
        self.codes: dict[int, ErrorCode] = {}
        self._left = 0
        self._fut: asyncio.Future[None] | None = None

    def __len__(self) -> int:
        """Appends still waiting."""
        return self._left

    def waiter(self, index: int) -> Callable[[ErrorCode], None]:
        self._left += 1
        return functools.partial(self._done, index)

    def _done(self, index: int, code: ErrorCode) -> None:
        self.codes[index] = code
        self._left -= 1
        fut = self._fut
        if self._left == 0 and fut is not None and not fut.done():
            fut.set_result(None)

    async def wait(self, timeout_s: float) -> None:
        """Until every append completed or `timeout_s` passed (at once when none waits);
        the appends not in `codes` then timed out. A completion after it changes nothing
        the caller read."""
        if self._left == 0:
            return
        loop = asyncio.get_running_loop()
        fut = self._fut = loop.create_future()
        timer = loop.call_later(timeout_s, _resolve_none, fut)
        try:
            await fut
        finally:
            timer.cancel()
            self._fut = None


def _resolve_none(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class _Wakeup:
    """The one long poll of a waiter: `wait` returns True on `fire`, False once its timeout
    passes or after `stop`. A fire while nobody waits is not kept: the owner keeps what changed
    and checks it before waiting."""

    __slots__ = ("_fut", "_stopped")

    def __init__(self) -> None:
        self._fut: asyncio.Future[bool] | None = None
        self._stopped = False

    def fire(self) -> None:
        fut = self._fut
        if fut is not None and not fut.done():
            fut.set_result(True)

    def stop(self) -> None:
        """End the wait now and every later one as if it expired (False)."""
        self._stopped = True
        fut = self._fut
        if fut is not None and not fut.done():
            fut.set_result(False)

    async def wait(self, timeout_s: float) -> bool:
        if timeout_s <= 0 or self._stopped:
            return False
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        self._fut = fut
        timer = loop.call_later(timeout_s, _resolve, fut, False)
        try:
            return await fut
        finally:
            timer.cancel()
            self._fut = None


class FetchWaiter:
    """One waiting Fetch (Kafka's DelayedFetch): registered once in the `FetchWatchers` of each
    of its partitions for the whole wait, woken with the index (in the fetch's partition
    order) of each partition that changed. Wakes between two waits accumulate, so none is
    lost while the fetch re-reads."""

    __slots__ = ("_changed", "_wakeup")

    def __init__(self) -> None:
        self._changed: set[int] = set()
        self._wakeup = _Wakeup()

    def wake(self, index: int) -> None:
        self._changed.add(index)
        self._wakeup.fire()

    async def wait(self, timeout_s: float) -> bool:
        """Until a wake (True, at once if one came since the last `take_changed`) or
        `timeout_s` seconds pass (False)."""
        return bool(self._changed) or await self._wakeup.wait(timeout_s)

    def interrupt(self) -> None:
        """End the wait now and every later one as if it expired (`wait` answers False): the
        fetch answers with what it has (`FetchParams.yield_to`)."""
        self._wakeup.stop()

    def take_changed(self) -> set[int]:
        """The indexes woken since the last call."""
        changed, self._changed = self._changed, set()
        return changed


def _resolve(fut: asyncio.Future[bool], value: bool) -> None:
    if not fut.done():
        fut.set_result(value)


class FetchWatchers:
    """The long polls waiting on one hosted partition, in two sets keyed by their waiter (so
    adding and removing one is O(1), and a wake is O(waiters of this partition)):

    - consumers (replica id < 0) read up to the high watermark: woken when it or the log
      start moves (`offsets_moved`);
    - followers read up to the log end: woken when it moves (`log_end_moved`), not by a high
      watermark move nor by another follower's fetch recording its position;
    - both on `notify`: a leadership or role change, the partition removed, an error, a log
      start moved by DeleteRecords.

    Each set maps a waiter to the index of this partition in its fetch.
    """

    __slots__ = ("_consumers", "_followers", "_high_watermark", "_log_start_offset", "_sessions")

    def __init__(self) -> None:
        self._consumers: dict[FetchWaiter, int] = {}
        self._followers: dict[FetchWaiter, int] = {}
        self._sessions: dict[SessionWatch, Key] = {}  # follower sessions holding this partition
        self._high_watermark = -1  # as last signalled to consumers
        self._log_start_offset = -1

    def __len__(self) -> int:
        return len(self._consumers) + len(self._followers) + len(self._sessions)

    def watch(self, waiter: FetchWaiter, index: int, *, follower: bool) -> None:
        (self._followers if follower else self._consumers)[waiter] = index

    def unwatch(self, waiter: FetchWaiter) -> None:
        self._consumers.pop(waiter, None)
        self._followers.pop(waiter, None)

    def watch_session(self, session: SessionWatch, key: Key) -> None:
        self._sessions[session] = key

    def unwatch_session(self, session: SessionWatch) -> None:
        self._sessions.pop(session, None)

    def log_end_moved(self) -> None:
        for waiter, index in self._followers.items():
            waiter.wake(index)
        for session, key in self._sessions.items():
            session.wake(key)

    def offsets_moved(self, high_watermark: int, log_start_offset: int) -> None:
        """Wake the consumers if the high watermark or the log start differ from the last call's."""
        if high_watermark == self._high_watermark and log_start_offset == self._log_start_offset:
            return
        self._high_watermark = high_watermark
        self._log_start_offset = log_start_offset
        for waiter, index in self._consumers.items():
            waiter.wake(index)
        for session, key in self._sessions.items():
            session.note(key)

    def notify(self) -> None:
        for waiters in (self._consumers, self._followers):
            for waiter, index in waiters.items():
                waiter.wake(index)
        for session, key in self._sessions.items():
            session.wake(key)


Key = tuple[str, int]


class PartitionClock:
    """The time of the latest fetch of a session that held one partition (`last_fetch_ms`,
    epoch milliseconds, -1 before any): the leader's `PartitionState` reads it to account
    for the fetches that skipped the partition because nothing changed for it. Frozen when
    the partition leaves the session (or the session ends): later fetches did not ask for it."""

    __slots__ = ("_frozen_ms", "_session")

    def __init__(self, session: SessionWatch) -> None:
        self._session: SessionWatch | None = session
        self._frozen_ms = -1

    @property
    def last_fetch_ms(self) -> int:
        session = self._session
        return self._frozen_ms if session is None else session.last_fetch_ms

    def freeze(self) -> None:
        if self._session is not None:
            self._frozen_ms = self._session.last_fetch_ms
            self._session = None


class SessionWatch:
    """A follower fetch session's standing registration with its partitions' `FetchWatchers`
    (see the module docstring). `changed` holds the partitions to read at the session's
    next fetch; `wait` is its long poll. Registration (`register`) is the replica manager's,
    at the first read of each partition after it joins the session (or moves to another
    `HostedPartition`); leaving is `forget` / `close`, which the session cache calls."""

    __slots__ = ("_clocks", "_wakeup", "_watching", "changed", "extra", "follower", "last_fetch_ms", "request_of")

    def __init__(self, request_of: Callable[[Key], FetchPartition | None], changed: Iterable[Key] = ()) -> None:
        self.request_of = request_of
        """The session's request for a partition (None: not in the session)."""
        self.extra: list[FetchPartition] = []
        """The partitions the last fetch read beyond its `FetchParams.partitions` (they changed
        while it waited), in the order of its results."""
        self.changed: set[Key] = set(changed)
        """Partitions to read at the next fetch (their log end, HW, log start or role moved,
        an error to answer again, or not registered yet)."""
        self.last_fetch_ms = -1
        """When the session's latest fetch read its partitions (epoch ms)."""
        self.follower: tuple[int, bool] | None = None
        """(broker epoch, ISR-eligible) of the follower as its partitions' reads recorded it:
        the manager reads them all again when that changes (a skipped read records nothing)."""
        self._watching: dict[Key, FetchWatchers | None] = {}
        self._clocks: dict[Key, PartitionClock] = {}
        self._wakeup = _Wakeup()

    def __len__(self) -> int:
        return len(self._watching)

    def wake(self, key: Key) -> None:
        self.changed.add(key)
        self._wakeup.fire()

    def note(self, key: Key) -> None:
        """Read `key` at the next fetch, without waking a waiting one."""
        self.changed.add(key)

    def register(self, key: Key, watchers: FetchWatchers | None) -> PartitionClock:
        """Watch `key` through `watchers` (None: not hosted here; nothing to watch), leaving
        any other it was watched through. Returns the partition's clock in this session."""
        watching = self._watching
        old = watching.get(key)  # one lookup when nothing moved (None: not watched, or not hosted)
        if old is not watchers or (watchers is None and key not in watching):
            if old is not None:
                old.unwatch_session(self)
            if watchers is not None:
                watchers.watch_session(self, key)
            watching[key] = watchers
        clock = self._clocks.get(key)
        if clock is None:
            clock = self._clocks[key] = PartitionClock(self)
        return clock

    def keys(self) -> list[Key]:
        """The partitions registered (read at least once since they joined the session)."""
        return list(self._watching)

    def is_registered(self, key: Key, watchers: FetchWatchers | None) -> bool:
        return key in self._watching and self._watching[key] is watchers

    def forget(self, key: Key) -> None:
        """`key` left the session."""
        watchers = self._watching.pop(key, None)
        if watchers is not None:
            watchers.unwatch_session(self)
        clock = self._clocks.pop(key, None)
        if clock is not None:
            clock.freeze()
        self.changed.discard(key)

    def close(self) -> None:
        """The session ended: leave every partition (O(session), once)."""
        for key in list(self._watching):
            self.forget(key)
        for clock in self._clocks.values():
            clock.freeze()
        self._clocks.clear()
        self.changed.clear()

    async def wait(self, timeout_s: float) -> bool:
        """Until a wake (True, at once if `changed` holds something) or `timeout_s` seconds
        pass (False)."""
        return bool(self.changed) or await self._wakeup.wait(timeout_s)
