"""Deliberately broken replication rules: the simulation must catch each of them."""

from __future__ import annotations

from broker.replica.state import FollowerPlan, FollowerStep, LeaderAnswer, LogView, PartitionState, _Follower


class NoDivergenceCheck(PartitionState):
    """The leader ignores ``last_fetched_epoch``: a follower never learns that it diverged."""

    def _diverges(self, epoch: int, end: int, last_fetched_epoch: int, fetch_offset: int) -> bool:
        return False


class HwFromCommittedIsr(PartitionState):
    """The HW counts only the committed ISR (not KIP-497's maximal ISR, nor joining replicas)."""

    def _holds_high_watermark(self, replica_id: int, f: _Follower, leader_end: int, now_ms: int) -> bool:
        return replica_id in self.isr


class NoEpochTrimAtLogEnd(PartitionState):
    """Bug 1 of issue 19 (the fetcher's old guard): a diverging answer whose truncation point is
    the log end is skipped, so an empty epoch this broker led stays in its epoch cache and the
    leader answers the same divergence forever."""

    def on_fetch_answer(self, fetch_offset: int, answer: LeaderAnswer, log: LogView) -> FollowerPlan:
        plan = super().on_fetch_answer(fetch_offset, answer, log)
        if plan.step is FollowerStep.TRUNCATE and plan.offset >= log.log_end_offset:
            return FollowerPlan(FollowerStep.BACKOFF)
        return plan
