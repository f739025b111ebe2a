"""KIP-227 fetch sessions, the fetching side (what Kafka's FetchSessionHandler does for a follower).

One `FetchSessionHandler` per replica fetcher (per leader) keeps the session's partitions
as last sent and the metadata of the next request, (session id, epoch):

- (0, 0): a full fetch that asks the leader to open a session (the first fetch, and after
  any failure);
- (id, 0): a full fetch that closes session `id` and asks for a new one;
- (id, n >= 1): an incremental fetch on session `id`. It names only the partitions added
  to the session or whose request changed (fetch offset, log start offset, leader epoch,
  last fetched epoch, max bytes), and lists in `forgotten` those that left it (removed from
  the fetcher, or backing off). The leader reads every partition of the session and
  answers only those with something new (records, an error, a moved high watermark or log
  start, a diverging epoch): a partition left out of an answer needs nothing done.

Answers (`handle_response`): a top-level FETCH_SESSION_ID_NOT_FOUND makes the next fetch
(0, 0), any other top-level error (INVALID_FETCH_SESSION_EPOCH, ...) (id, 0); a full
answer must list exactly the partitions sent, an incremental one none outside the session
(else the answer is not used and the next fetch is full); a full answer with session id 0
(the leader had no room) keeps the fetcher sessionless, one with an id opens session id at
epoch 1; each used incremental answer moves the epoch on (wrapping from 2**31 - 1 to 1). A
request that got no answer (`handle_error`: timeout, broken connection, an undecodable
response) makes the next fetch (id, 0): the leader may have moved the session on.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from broker.replica.fetch_wire import FetchPartitionRequest
from quorum.frozen_init import fast_frozen_init
from quorum.kafka_errors import ErrorCode

__all__ = ["FINAL_EPOCH", "INITIAL_EPOCH", "INVALID_SESSION_ID", "FetchSessionHandler", "SessionRequest"]

log = logging.getLogger(__name__)

INVALID_SESSION_ID: Final = 0
INITIAL_EPOCH: Final = 0
FINAL_EPOCH: Final = -1
_MAX_EPOCH: Final = 2**31 - 1

Key = tuple[str, int]


def _next_epoch(epoch: int) -> int:
    return 1 if epoch >= _MAX_EPOCH else epoch + 1


@dataclass(frozen=True, slots=True, init=False)
class SessionRequest:
    """What one Fetch carries for its session, and what the leader will read for it."""

    session_id: int
    session_epoch: int
    to_send: tuple[FetchPartitionRequest, ...]
    """Full: every partition of the session; incremental: the added and changed ones."""
    forgotten: tuple[Key, ...]
    session: Mapping[Key, FetchPartitionRequest]
    """Every partition the leader reads for this request, as last sent (a read-only view of
    the handler's session: valid until its next `build`)."""

    # Compiled with the module (the dataclass decorator's __init__ would run as Python there);
    # uncompiled, fast_frozen_init replaces it.
    def __init__(
        self,
        session_id: int,
        session_epoch: int,
        to_send: tuple[FetchPartitionRequest, ...],
        forgotten: tuple[Key, ...],
        session: Mapping[Key, FetchPartitionRequest],
    ) -> None:
        object.__setattr__(self, "session_id", session_id)
        object.__setattr__(self, "session_epoch", session_epoch)
        object.__setattr__(self, "to_send", to_send)
        object.__setattr__(self, "forgotten", forgotten)
        object.__setattr__(self, "session", session)

    @property
    def full(self) -> bool:
        return self.session_epoch in (INITIAL_EPOCH, FINAL_EPOCH)


fast_frozen_init(SessionRequest)  # not a decorator: mypyc makes a decorated class a Python class


def same_request(a: FetchPartitionRequest | None, b: FetchPartitionRequest) -> bool:
    """`a == b`, field by field in compiled code (the dataclass's __eq__ runs as Python and
    builds two tuples: ~6,000 instructions per partition of every follower fetch). Every field
    of `FetchPartitionRequest` is compared (test_fetch_session_client holds it to `==`)."""
    return a is b or (
        a is not None
        and a.fetch_offset == b.fetch_offset
        and a.partition == b.partition
        and a.topic == b.topic
        and a.current_leader_epoch == b.current_leader_epoch
        and a.last_fetched_epoch == b.last_fetched_epoch
        and a.log_start_offset == b.log_start_offset
        and a.partition_max_bytes == b.partition_max_bytes
    )


class FetchSessionHandler:
    def __init__(self, name: str = "") -> None:
        self.name = name  # for log lines: who fetches from whom
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH  # of the next request
        self._partitions: dict[Key, FetchPartitionRequest] = {}  # the session, as last sent

    def build(self, wanted: Iterable[FetchPartitionRequest]) -> SessionRequest:
        """The next request for the partitions the fetcher wants now (each named once)."""
        view = MappingProxyType(self._partitions)
        if self.epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            self._partitions.clear()
            for p in wanted:
                self._partitions[(p.topic, p.partition)] = p
            return SessionRequest(self.session_id, self.epoch, tuple(self._partitions.values()), (), view)
        changed: list[FetchPartitionRequest] = []
        current = self._partitions
        seen: set[Key] = set()
        for p in wanted:
            key = (p.topic, p.partition)
            seen.add(key)
            prev = current.get(key)
            if not same_request(prev, p):  # identity first: a fetcher reuses unchanged requests
                current[key] = p
                changed.append(p)
        forgotten = tuple(key for key in current if key not in seen) if len(seen) != len(current) else ()
        for key in forgotten:
            del current[key]
        return SessionRequest(self.session_id, self.epoch, tuple(changed), forgotten, view)

    def build_changes(self, wanted: Mapping[Key, FetchPartitionRequest], changed: Iterable[Key]) -> SessionRequest:
        """`build(wanted.values())` when only the partitions in `changed` may differ from the
        session as last sent (a key of `changed` missing from `wanted` left it): an
        incremental request costs O(changed), not O(wanted). A full one names all of `wanted`."""
        if self.epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            return self.build(wanted.values())
        current = self._partitions
        to_send: list[FetchPartitionRequest] = []
        forgotten: list[Key] = []
        for key in changed:
            p = wanted.get(key)
            prev = current.get(key)
            if p is None:
                if prev is not None:
                    del current[key]
                    forgotten.append(key)
            elif not same_request(prev, p):
                current[key] = p
                to_send.append(p)
        return SessionRequest(
            self.session_id, self.epoch, tuple(to_send), tuple(forgotten), MappingProxyType(self._partitions)
        )

    def handle_response(self, sent: SessionRequest, error: ErrorCode, session_id: int, keys: Iterable[Key]) -> bool:
        """Whether the answer to `sent` (top-level `error`, `session_id`, the partitions it
        lists) may be applied; moves the session on either way."""
        if error != ErrorCode.NONE:
            log.info("%s: fetch session %d epoch %d refused: %s", self.name, sent.session_id, sent.session_epoch,
                     error.name)  # fmt: skip
            if error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND:
                self.session_id = INVALID_SESSION_ID
            self.epoch = INITIAL_EPOCH
            return False
        listed = set(keys)
        extra = listed.difference(self._partitions)
        if sent.full:
            if extra or len(listed) != len(self._partitions):
                log.info("%s: full fetch answer lists %d partitions not asked and omits %d", self.name, len(extra),
                         len(set(self._partitions).difference(listed)))  # fmt: skip
                self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
                return False
            if session_id == INVALID_SESSION_ID:
                self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH  # no session: full again
            else:
                self.session_id, self.epoch = session_id, _next_epoch(INITIAL_EPOCH)
            return True
        if extra:
            log.info("%s: incremental fetch answer lists %d partitions outside session %d", self.name, len(extra),
                     self.session_id)  # fmt: skip
            self.epoch = INITIAL_EPOCH
            return False
        if session_id == INVALID_SESSION_ID:  # the leader closed the session
            self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
        else:
            self.epoch = _next_epoch(self.epoch)
        return True

    def handle_error(self) -> None:
        """The request got no usable answer: the next fetch is full (closing the session)."""
        self.epoch = INITIAL_EPOCH
