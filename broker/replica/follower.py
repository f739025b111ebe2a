"""Carrying out a follower's plan for one partition of a fetch answer, on any log.

`PartitionState.on_fetch_answer` decides (sans IO) what an answer means; `apply_fetch_answer`
does it, in the one order that is right, on a `FollowerLog`: the broker's `PartitionLog`
(records are the leader's batch bytes) or the replication simulation's in-memory log
(records are tuples). Both the replica fetcher and the simulation call these two functions,
so the simulation checks the code the broker runs. Errors of the log (a corrupt batch, a
storage error) propagate to the caller, which backs off.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

from broker.replica.state import FollowerPlan, FollowerStep, LeaderAnswer, LogView, PartitionState

R_contra = TypeVar("R_contra", contravariant=True)


class FollowerLog(LogView, Protocol[R_contra]):
    """What a follower does to its log."""

    def append_as_follower(self, records: R_contra) -> object:
        """Append the leader's records (offsets and epochs assigned); records wholly below the
        log end are skipped; the first one kept must start at the log end."""
        ...

    def truncate_to(self, offset: int) -> object:
        """Drop every offset >= ``offset`` and every epoch-cache entry starting at or past it
        (also when nothing is dropped)."""
        ...

    def truncate_fully_and_start_at(self, offset: int) -> object:
        """Empty the log (epoch cache included) and start it at ``offset``."""
        ...

    def delete_records_before(self, offset: int) -> object:
        """Move the log start offset up to ``offset`` (<= log end)."""
        ...


def apply_fetch_answer(
    state: PartitionState, log: FollowerLog[R_contra], fetch_offset: int, answer: LeaderAnswer, records: R_contra
) -> FollowerPlan:
    """Decide and carry out what one partition of a fetch answer means (see `FollowerStep`).
    Returns the plan: the caller backs off on BACKOFF, asks the leader's offsets on
    ASK_LEADER_OFFSETS (then `apply_leader_offsets`) and logs a truncation below the HW."""
    plan = state.on_fetch_answer(fetch_offset, answer, log)
    if plan.step is FollowerStep.APPEND:
        if plan.offset >= 0:
            log.truncate_fully_and_start_at(plan.offset)
        log.append_as_follower(records)
        start = state.log_start_to_adopt(answer.log_start_offset, log)
        if start is not None:
            log.delete_records_before(start)
        state.on_follower_progress(answer.high_watermark, log)
    else:
        _apply_cut(state, log, plan)
    return plan


def apply_leader_offsets(
    state: PartitionState, log: FollowerLog[R_contra], leader_log_start_offset: int, leader_log_end_offset: int
) -> FollowerPlan:
    """After OFFSET_OUT_OF_RANGE, with the leader's log start and end: carry out `out_of_range_plan`."""
    plan = state.out_of_range_plan(leader_log_start_offset, leader_log_end_offset, log)
    _apply_cut(state, log, plan)
    return plan


def _apply_cut(state: PartitionState, log: FollowerLog[R_contra], plan: FollowerPlan) -> None:
    if plan.step is FollowerStep.TRUNCATE:
        log.truncate_to(plan.offset)
        state.on_truncated(log)
    elif plan.step is FollowerStep.RESTART:
        log.truncate_fully_and_start_at(plan.offset)
        state.on_truncated(log)
