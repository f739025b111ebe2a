"""Deliberately broken rules of the Raft core: the quorum simulation must catch each one.

A mutant is a small edit of one method's source (`old` -> `new`, each occurring once),
compiled in the method's own module and patched onto its class for the duration of a run.
`tests/sim/mutation_check.py` runs the simulation's CI profile once per mutant and reports
which property caught it; `tests/sim/conftest.py` applies the mutant named in the
environment variable PYKRAFT_SIM_MUTANT to a whole pytest session.
"""

from __future__ import annotations

import inspect
import sys
import textwrap
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass

from quorum.raft.core import RaftCore
from quorum.raft.log import RaftLog

ENV = "PYKRAFT_SIM_MUTANT"


@dataclass(frozen=True)
class Mutant:
    name: str
    rule: str  # the rule it breaks, in a few words
    cls: type
    method: str
    old: str
    new: str

    def build(self) -> Callable[..., object]:
        original = getattr(self.cls, self.method)
        source = textwrap.dedent(inspect.getsource(original))
        if source.count(self.old) != 1:
            raise ValueError(f"mutant {self.name}: {self.old!r} occurs {source.count(self.old)} times")
        namespace = dict(vars(sys.modules[self.cls.__module__]))
        exec(compile(source.replace(self.old, self.new), f"<mutant {self.name}>", "exec"), namespace)  # noqa: S102
        function = namespace[self.method]
        assert callable(function)
        return function


MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "hw_over_old_epoch",
        "leader advances the HW only over an entry of its own epoch (Figure 8)",
        RaftCore,
        "_maybe_advance_hw",
        "if candidate <= ls.epoch_start_offset:",
        "if candidate <= ls.epoch_start_offset and False:",
    ),
    Mutant(
        "follower_hw_above_leo",
        "a follower's HW is at most its own log end offset",
        RaftCore,
        "_on_fetch_response",
        "self._update_follower_hw(min(leader_hw, self.log.end_offset))",
        "self._update_follower_hw(leader_hw)",
    ),
    Mutant(
        "no_divergence_check",
        "a fetch whose last epoch and offset disagree with the leader's log gets a diverging epoch",
        RaftLog,
        "validate_offset_and_epoch",
        "if end.epoch != epoch or end.offset < offset:",
        "if False:",
    ),
    Mutant(
        "truncate_one_batch_too_far",
        "the follower truncates exactly to the end offset of the diverging epoch",
        RaftLog,
        "truncation_offset_for",
        "return target",
        "return self._batches[self.index_of(target - 1)].base_offset if self.start_offset < target else target",
    ),
    Mutant(
        "hw_before_truncation",
        "a diverging answer truncates first; its HW is not applied to the old log (KAFKA-14704)",
        RaftCore,
        "_on_fetch_response",
        "self._truncate_diverging(resp.diverging_epoch)",
        "self._update_follower_hw(min(max(resp.high_watermark, 0), self.log.end_offset))\n"
        "        self._truncate_diverging(resp.diverging_epoch)",
    ),
    Mutant(
        "stale_vote_response_counted",
        "an answer carrying a stale epoch is refused (a vote granted in an old epoch)",
        RaftCore,
        "_on_vote_response",
        "if resp.leader_epoch != self.epoch or resp.error != ErrorCode.NONE",
        "if resp.error != ErrorCode.NONE",
    ),
    Mutant(
        "future_epoch_keeps_role",
        "a message from a future epoch makes the node leave its role for that epoch",
        RaftCore,
        "_observe_epoch",
        "if epoch > self.epoch:\n        if leader_id",
        "if epoch > self.epoch and self.role is Role.LEADER:\n"
        "        self._set_election(ElectionState(epoch, self.voted_id, self.node_id))\n"
        "        return True\n"
        "    if epoch > self.epoch:\n        if leader_id",
    ),
    Mutant(
        "snapshot_install_keeps_log",
        "installing a snapshot resets the log to start at the snapshot's end",
        RaftCore,
        "_install_snapshot",
        "self.log.reset_to_snapshot(sid)",
        "pass",
    ),
    Mutant(
        "snapshot_installed_early",
        "a snapshot is installed only once every chunk is in",
        RaftCore,
        "_on_fetch_snapshot_response",
        "if snap.position >= snap.size:",
        "if snap.position > 0:",
    ),
    Mutant(
        "vote_without_log_check",
        "a vote goes only to a candidate whose log is at least as up to date",
        RaftCore,
        "_log_up_to_date",
        "return (last_epoch, last_offset) >= (self.log.last_epoch, self.log.end_offset)",
        "return True",
    ),
    Mutant(
        "vote_not_persisted",
        "a vote is made durable before it is sent",
        RaftCore,
        "ready",
        "election = self._election if self._persisted != self._election else None",
        "election = self._election if self._persisted != self._election and self._election.voted_id < 0 else None",
    ),
)

BY_NAME = {m.name: m for m in MUTANTS}


@contextmanager
def applied(name: str) -> Iterator[Mutant]:
    """Patch the mutant in for the duration of the block."""
    mutant = BY_NAME[name]
    original = mutant.cls.__dict__[mutant.method]
    setattr(mutant.cls, mutant.method, mutant.build())
    try:
        yield mutant
    finally:
        setattr(mutant.cls, mutant.method, original)


def apply_forever(name: str) -> Mutant:
    mutant = BY_NAME[name]
    setattr(mutant.cls, mutant.method, mutant.build())
    return mutant


def first_caught(
    mutant_applied: AbstractContextManager[object],
    walk: Callable[[int], object],
    seeds: Iterable[int],
    violation: type[Exception],
) -> tuple[int, str] | None:
    """(seed, message) of the first seeded walk that raises `violation` while the mutant is
    applied (the simulations' shared "caught within N seeds" loop); None when none does."""
    with mutant_applied:
        for seed in seeds:
            try:
                walk(seed)
            except violation as exc:
                return seed, str(exc)
    return None
