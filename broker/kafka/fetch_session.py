"""KIP-227 incremental fetch sessions: the broker's session cache.

A fetch names its session with (session_id, session_epoch):
- (0, -1): sessionless full fetch; the response lists every requested partition, id 0.
- (any, 0): full fetch that opens a session (closing `session_id` if it was one); the
  response carries the new id, or 0 when the cache has no room for it.
- (id, -1): close session `id`, then a sessionless full fetch.
- (id, n > 0): incremental fetch on session `id`, whose expected epoch must be n
  (INVALID_FETCH_SESSION_EPOCH otherwise, FETCH_SESSION_ID_NOT_FOUND for an unknown id).
  The request's partitions are added to / update the session, `forgotten` ones leave it;
  the session's partitions are fetched (a follower's: only those that can have changed, see
  below), and the response lists only those with something
  new: records, an error, a changed high watermark / last stable offset / log start
  offset, a diverging epoch or a preferred read replica (after an error the partition is
  listed again when the error is gone; a changed leader epoch in the request lists it once).
  Partitions that returned records
  move to the end of the session's order (fairness across partitions, as Kafka does).
  The next expected epoch is n + 1 (wrapping to 1 after 2**31 - 1).
  A follower's (privileged) session reads only what can have changed: the partitions the
  request names and those its `SessionWatch` saw move (log end, HW, log start, role) or
  answered an error last time; the others would be left out of the answer anyway, so an
  incremental fetch costs O(changed), not O(session) (a new session's first incremental
  fetch reads them all once, to register its watch; a change of the follower's broker
  epoch or eligibility reads them all once more). Consumers' sessions read every partition
  (their redirects and isolation levels are decided per fetch).

The cache holds at most `max_slots` sessions (Kafka's
`max.incremental.fetch.session.cache.slots`, 1000). When full, a new session may evict,
in Kafka's order of preference: a session unused for `eviction_ms` (120 s; the least
recently used first); else, for a privileged (follower) session, the least recently used
unprivileged one; else an unprivileged session smaller than the new one (fewest
partitions, then least recently used). Otherwise the fetch proceeds without a session.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Final

from broker.kafka.services import FetchPartition, FetchPartitionResult
from broker.replica.purgatory import SessionWatch
from quorum.kafka_errors import ErrorCode

# ErrorCode.NONE loaded once: in compiled code `ErrorCode.X` is a lookup through
# EnumType.__getattr__ (~900 instructions), and the data path asks it per partition.
_NONE: Final = ErrorCode.NONE

__all__ = ["FetchContext", "FetchSession", "FetchSessionCache", "SessionError"]

INVALID_SESSION_ID: Final = 0
INITIAL_EPOCH: Final = 0
FINAL_EPOCH: Final = -1
_MAX_EPOCH: Final = 2**31 - 1

Key = tuple[str, int]


@dataclass(slots=True)
class _Cached:
    request: FetchPartition
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    order: int = 0  # its place in the session's order (ascending = insertion order of `partitions`)


@dataclass(slots=True)
class FetchSession:
    id: int
    privileged: bool  # a follower's session (may evict consumers')
    partitions: dict[Key, _Cached]  # insertion order = response order
    epoch: int  # the next expected epoch
    created_ms: int
    last_used_ms: int
    watch: SessionWatch | None = None  # a follower's session: what changed (see the module docstring)
    next_order: int = 0

    def place_last(self, key: Key, cached: _Cached) -> None:
        """(Re)insert `key` at the end of the session's order."""
        self.partitions.pop(key, None)
        cached.order = self.next_order
        self.next_order += 1
        self.partitions[key] = cached

    def request_of(self, key: Key) -> FetchPartition | None:
        cached = self.partitions.get(key)
        return None if cached is None else cached.request

    def close(self) -> None:
        if self.watch is not None:
            self.watch.close()


@dataclass(frozen=True, slots=True)
class SessionError:
    """A fetch the session rules refuse: answer `error` at the top level, no partitions."""

    error: ErrorCode


def _next_epoch(epoch: int) -> int:
    return 1 if epoch >= _MAX_EPOCH else epoch + 1


class FetchContext:
    """What one fetch must read (`partitions`) and how to shape its answer (`respond`)."""

    __slots__ = ("_cache", "_creating", "_now_ms", "_partitions", "_privileged", "_session")

    def __init__(
        self,
        cache: FetchSessionCache,
        partitions: tuple[FetchPartition, ...],
        *,
        session: FetchSession | None,
        creating: bool,
        privileged: bool,
        now_ms: int,
    ) -> None:
        self._cache = cache
        self._partitions = partitions
        self._session = session
        self._creating = creating
        self._privileged = privileged
        self._now_ms = now_ms

    @property
    def partitions(self) -> tuple[FetchPartition, ...]:
        """What the fetch reads (after it: and what its wait read beyond, `SessionWatch.extra`)."""
        watch = self.watch
        if watch is not None and watch.extra:
            return self._partitions + tuple(watch.extra)
        return self._partitions

    @property
    def watch(self) -> SessionWatch | None:
        """The follower session's watch, for an incremental fetch (`FetchParams.session`)."""
        return None if self._session is None else self._session.watch

    @property
    def incremental(self) -> bool:
        return self._session is not None

    def respond(
        self, results: Sequence[FetchPartitionResult]
    ) -> tuple[int, list[tuple[FetchPartition, FetchPartitionResult]]]:
        """(session id to answer, the partitions the response lists, in order)."""
        partitions = self.partitions
        if len(partitions) != len(results):  # zip(strict=True)'s check: a keyword call costs ~12k instructions compiled
            raise ValueError(f"{len(results)} results for {len(partitions)} partitions")
        pairs = list(zip(partitions, results))  # noqa: B905 - lengths checked above
        session = self._session
        if session is None:
            session_id = INVALID_SESSION_ID
            if self._creating:
                created = self._cache.maybe_create(pairs, self._privileged, self._now_ms)
                session_id = created.id if created is not None else INVALID_SESSION_ID
            return session_id, pairs
        out: list[tuple[FetchPartition, FetchPartitionResult]] = []
        moved: list[Key] = []
        watch = session.watch
        for req, res in pairs:
            key = (req.topic, req.partition)
            cached = session.partitions.get(key)
            if cached is None:  # cannot happen: partitions came from the session
                continue
            changed = (
                len(res.records) > 0
                or res.error != _NONE
                or res.high_watermark != cached.high_watermark
                or res.last_stable_offset != cached.last_stable_offset
                or res.log_start_offset != cached.log_start_offset
                or res.diverging_epoch is not None
                or res.preferred_read_replica >= 0
            )
            # After an error the cached HW is -1 (Kafka's rule): the partition is listed again
            # once the error is gone, even if its HW did not move meanwhile.
            cached.high_watermark = res.high_watermark if res.error == _NONE else -1
            cached.last_stable_offset = res.last_stable_offset
            cached.log_start_offset = res.log_start_offset
            if changed:
                out.append((req, res))
                if len(res.records) > 0:
                    moved.append(key)
            if watch is not None and res.error != _NONE:
                watch.note(key)  # an error is answered again at each fetch until it is gone
        for key in moved:
            session.place_last(key, session.partitions[key])
        return session.id, out


class FetchSessionCache:
    def __init__(self, max_slots: int = 1000, eviction_ms: int = 120_000, *, seed: int | None = None) -> None:
        self.max_slots = max_slots
        self.eviction_ms = eviction_ms
        self._sessions: dict[int, FetchSession] = {}
        self._random = random.Random(seed)  # noqa: S311 - ids need uniqueness, not secrecy
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def remove(self, session_id: int) -> None:
        session = self._sessions.pop(session_id, None)
        if session is not None:
            session.close()

    def new_context(
        self,
        session_id: int,
        epoch: int,
        partitions: Sequence[FetchPartition],
        forgotten: Sequence[Key],
        *,
        privileged: bool,
        now_ms: int,
    ) -> FetchContext | SessionError:
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self.remove(session_id)
            return FetchContext(
                self,
                _dedupe(partitions),
                session=None,
                creating=epoch == INITIAL_EPOCH,
                privileged=privileged,
                now_ms=now_ms,
            )
        if epoch < 0:
            return SessionError(ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        session = self._sessions.get(session_id) if session_id != INVALID_SESSION_ID else None
        if session is None:
            return SessionError(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return SessionError(ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        named: list[Key] = []
        for p in partitions:
            key = (p.topic, p.partition)
            named.append(key)
            cached = session.partitions.get(key)
            if cached is None:
                session.place_last(key, _Cached(p))
            elif p.current_leader_epoch != cached.request.current_leader_epoch:
                # A new leader epoch: the next answer lists the partition whatever changed, so
                # that a follower which dropped an answer of the old epoch (it moved on while
                # the fetch was out) learns the HW and log start again. (pykraft's rule.)
                session.partitions[key] = _Cached(p, order=cached.order)
            else:
                cached.request = p
        watch = session.watch
        for key in forgotten:
            session.partitions.pop(key, None)
            if watch is not None:
                watch.forget(key)
        session.epoch = _next_epoch(epoch)
        session.last_used_ms = now_ms
        if watch is None:
            wanted = tuple(c.request for c in session.partitions.values())
        else:
            # Only what can have changed, in the session's order.
            watch.extra = []  # of the previous fetch
            keys, watch.changed = watch.changed, set()
            keys.update(named)
            chosen = [c for c in map(session.partitions.get, keys) if c is not None]
            chosen.sort(key=lambda c: c.order)
            wanted = tuple(c.request for c in chosen)
        return FetchContext(self, wanted, session=session, creating=False, privileged=privileged, now_ms=now_ms)

    def maybe_create(
        self, pairs: Sequence[tuple[FetchPartition, FetchPartitionResult]], privileged: bool, now_ms: int
    ) -> FetchSession | None:
        """A new session holding `pairs` (with their response values), or None (no room)."""
        if self.max_slots <= 0:
            return None
        if len(self._sessions) >= self.max_slots and not self._evict_for(len(pairs), privileged, now_ms):
            return None
        session_id = self._random.randint(1, _MAX_EPOCH)
        while session_id in self._sessions:
            session_id = self._random.randint(1, _MAX_EPOCH)
        parts: dict[Key, _Cached] = {}
        for i, (req, res) in enumerate(pairs):
            parts[(req.topic, req.partition)] = _Cached(
                req, res.high_watermark, res.last_stable_offset, res.log_start_offset, i
            )
        session = FetchSession(session_id, privileged, parts, 1, now_ms, now_ms, next_order=len(parts))
        if privileged:
            # Every partition is read by the first incremental fetch, which registers the watch.
            session.watch = SessionWatch(session.request_of, parts)
        self._sessions[session_id] = session
        return session

    def _evict_for(self, size: int, privileged: bool, now_ms: int) -> bool:
        sessions = list(self._sessions.values())
        lru = min(sessions, key=lambda s: s.last_used_ms)
        victim: FetchSession | None = None
        if now_ms - lru.last_used_ms > self.eviction_ms:
            victim = lru
        else:
            unprivileged = [s for s in sessions if not s.privileged]
            if privileged and unprivileged:
                victim = min(unprivileged, key=lambda s: s.last_used_ms)
            elif unprivileged:
                smallest = min(unprivileged, key=lambda s: (len(s.partitions), s.last_used_ms))
                if len(smallest.partitions) < size:
                    victim = smallest
        if victim is None:
            return False
        del self._sessions[victim.id]
        victim.close()
        self.evictions += 1
        return True


def _dedupe(partitions: Sequence[FetchPartition]) -> tuple[FetchPartition, ...]:
    """A partition named twice in one request keeps its last entry, at its first place."""
    seen: dict[Key, FetchPartition] = {}
    for p in partitions:
        key = (p.topic, p.partition)
        if key in seen:
            seen[key] = replace(p)
        else:
            seen[key] = p
    return tuple(seen.values())
