"""When the answers of a coordinator partition's operations may go: sans-IO, in operation order.

Each operation of a `GroupShard` returns an `Outcome` (records to append, answers, an
`undo`). The runtime (`broker.group.runtime`) submits every outcome here in the order the
shard produced them, appends the records of those that have any, and reports each append's
result with `completed`. `drain` then hands back, in submission order, the answers that may
be sent. The rules:

- an outcome's answers go only once its own append (if it has records) and the append of
  every outcome submitted before it have completed, so no answer shows state that a failover
  could lose (an outcome without records still waits for the appends before it);
- when an append fails, the outcome's answers become that error (`append_error`'s mapping),
  and its `undo` runs (when asked to: not for a partition already unloaded), which restores
  the state and may add answers of its own; when it commits, its `written` runs; both in
  submission order, as the answers go (so undos compose: see `GroupShard`'s offsets);
- answers without records queued behind a failed append fail with it (they were computed
  from state its undo puts back);
- an outcome without records submitted after a failure is known is answered as it is.

Entries are numbered from 1 in submission order; nothing here reads a clock or does IO.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Final

from broker.group.messages import JoinResult, LeaveResult, SyncResult
from broker.group.shard import Outcome, append_error
from quorum.frozen_init import fast_frozen_init
from quorum.kafka_errors import ErrorCode

__all__ = ["Release", "WriteOrder", "error_reply"]

# mypyc loads a Final global directly, where `ErrorCode.NONE` is an attribute lookup on the
# enum class at each use.
_NONE: Final = ErrorCode.NONE


@dataclass(frozen=True, slots=True, init=False)
class Release:
    """The answers of one submitted outcome, ready to be sent."""

    entry: int  # `submit`'s number for the outcome
    code: ErrorCode  # its own append's result (NONE for an outcome without records)
    replies: dict[int, Any]

    # Compiled with the module (the dataclass decorator's __init__ would run as Python there);
    # uncompiled, fast_frozen_init replaces it.
    def __init__(self, entry: int, code: ErrorCode, replies: dict[int, Any]) -> None:
        object.__setattr__(self, "entry", entry)
        object.__setattr__(self, "code", code)
        object.__setattr__(self, "replies", replies)


fast_frozen_init(Release)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(slots=True, init=False)
class _Entry:
    number: int
    outcome: Outcome
    done: bool  # its append completed (or it has none)
    code: ErrorCode
    undo: bool  # run the outcome's undo if the append failed

    # An explicit __init__ (init=False): mypyc compiles it, while the dataclass decorator's runs
    # as interpreted Python in a compiled module, slower there than uncompiled.
    def __init__(
        self, number: int, outcome: Outcome, done: bool, code: ErrorCode = ErrorCode.NONE, undo: bool = True
    ) -> None:
        self.number = number
        self.outcome = outcome
        self.done = done
        self.code = code
        self.undo = undo


class WriteOrder:
    def __init__(self) -> None:
        self._queue: deque[_Entry] = deque()  # submitted, not yet released; in submission order
        self._by_number: dict[int, _Entry] = {}
        self._next = 1

    def submit(self, out: Outcome) -> int:
        """Queue `out`; its number (append `out.records` under it when there are any)."""
        entry = _Entry(self._next, out, done=not out.records)
        self._next += 1
        self._queue.append(entry)
        if out.records:
            self._by_number[entry.number] = entry
        return entry.number

    def completed(self, number: int, code: ErrorCode, *, undo: bool = True) -> None:
        """The append of entry `number` finished with `code`; on an error, run its undo."""
        entry = self._by_number.pop(number, None)
        if entry is None or entry.done:
            return
        entry.done = True
        entry.code = code
        entry.undo = undo
        if code == _NONE:
            return
        # Outcomes without records queued behind this one were computed from the state its
        # undo puts back: they fail with it (they showed what was not written).
        for later in self._queue:
            if later.number > number and not later.outcome.records and later.code == ErrorCode.NONE:
                later.code = code

    def pending(self) -> bool:
        """Whether an answer still waits (some append has not completed)."""
        return bool(self._queue)

    def drain(self) -> list[Release]:
        """The outcomes whose answers may go now, in submission order (each only once)."""
        out: list[Release] = []
        while self._queue and self._queue[0].done:
            entry = self._queue.popleft()
            outcome = entry.outcome
            replies = outcome.replies
            if entry.code == _NONE:
                if outcome.written is not None:
                    outcome.written()
            else:
                mapped = append_error(entry.code)
                replies = {t: error_reply(r, mapped) for t, r in replies.items()}
                if entry.undo and outcome.records and outcome.undo is not None:
                    replies.update(outcome.undo(entry.code))
            out.append(Release(entry.number, entry.code, replies))
        return out


def error_reply(reply: Any, code: ErrorCode) -> Any:
    """The answer `reply` becomes when its records could not be written."""
    if isinstance(reply, JoinResult):
        return JoinResult(code, member_id=reply.member_id)
    if isinstance(reply, SyncResult):
        return SyncResult(code)
    if isinstance(reply, LeaveResult):
        return LeaveResult(code)
    return reply
