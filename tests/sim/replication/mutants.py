"""Deliberately broken replication rules: the simulation must catch each of them.

Each mutant breaks one rule: a `PartitionState` subclass (the simulation builds every replica
with it through `SimConfig.state_factory`), or for the controller's leader choice a context
manager that swaps `quorum.controller.partition_change.build_partition_change` for the run
and restores it after.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass

from broker.replica.state import (
    FollowerPlan,
    FollowerStep,
    LeaderAnswer,
    LogView,
    PartitionState,
    ProduceCheck,
    Truncation,
    _Follower,
)
from quorum.controller import partition_change as pc
from quorum.kafka_errors import ErrorCode


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


class NoMinIsrOnProduce(PartitionState):
    """acks=-1 is accepted whatever the ISR's size (no NOT_ENOUGH_REPLICAS)."""

    def check_produce(self, acks: int, min_insync_replicas: int | None = None) -> ProduceCheck:
        return super().check_produce(0 if acks == -1 else acks, min_insync_replicas)


class AckedAtLeaderAppend(PartitionState):
    """An acks=-1 write completes as soon as the leader has it (acks=1's rule), not at the HW."""

    def is_acked(self, required_offset: int, append_leader_epoch: int) -> ErrorCode | None:
        if not self.is_leader or append_leader_epoch < self._leader_since_epoch:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return ErrorCode.NONE


class TruncateToOwnEpochEnd(PartitionState):
    """The truncation offset ignores where the leader's epoch ended: the follower keeps its own
    end of that epoch (records the leader never had, or overwrote)."""

    def truncation(self, diverging_epoch: tuple[int, int], log: LogView) -> Truncation:
        cut = super().truncation(diverging_epoch, log)
        own_epoch, own_end = log.end_offset_for_epoch(diverging_epoch[0])
        if own_epoch == diverging_epoch[0] and own_end > cut.offset:
            offset = min(own_end, log.log_end_offset)
            return Truncation(offset, cut.completed, max(0, self.high_watermark - offset))
        return cut


class JoinIsrBelowHighWatermark(PartitionState):
    """ISR eligibility: a follower joins the ISR once past the leader's epoch start, even below the HW."""

    def _is_in_sync(self, f: _Follower) -> bool:
        return f.log_end_offset >= self._epoch_start_offset


class NeverShrinkIsr(PartitionState):
    """The lag rule is gone: a follower that stops fetching stays in the ISR."""

    def out_of_sync_replicas(self, now_ms: int, log: LogView, lag_ms: int | None = None) -> tuple[int, ...]:
        return ()


class FollowerHwNotClamped(PartitionState):
    """The follower takes the leader's HW as is, even above its own log end."""

    def on_follower_progress(self, leader_high_watermark: int, log: LogView) -> int:
        if self.is_follower:
            self.high_watermark = max(self.high_watermark, leader_high_watermark)
        return self.high_watermark


class NoLeaderEpochFencing(PartitionState):
    """KIP-320's check is gone: a request of an older or newer leader epoch is served.

    NOT caught by the simulation (60 seeds x 4 configurations, and the stateful test): it is
    not in `MUTANTS`. A follower only fetches from the leader of its own epoch and drops
    answers of another epoch, and a stale request replayed to a broker that leads again is
    then refused by the divergence check; a history that needs the fence is still to be built."""

    def check_leader_epoch(self, current_leader_epoch: int, *, require_leader: bool = True) -> ErrorCode:
        return super().check_leader_epoch(-1, require_leader=require_leader)


class NoHwFreezeBelowMinIsr(PartitionState):
    """The HW advances while the committed ISR is smaller than min.insync.replicas (before
    Kafka 3.7): records only the leader has become readable."""

    def _high_watermark_frozen(self) -> bool:
        return False


class OutOfRangeRestartAtLeaderEnd(PartitionState):
    """A follower below the leader's log start restarts at the leader's log END, skipping the
    records between the leader's log start and end."""

    def out_of_range_plan(self, leader_log_start_offset: int, leader_log_end_offset: int, log: LogView) -> FollowerPlan:
        plan = super().out_of_range_plan(leader_log_start_offset, leader_log_end_offset, log)
        if plan.step is FollowerStep.RESTART:
            return FollowerPlan(FollowerStep.RESTART, leader_log_end_offset)
        return plan


class NoRestartAtBatchBase(PartitionState):
    """Bug 4 of issue 19: an empty log restarted at the leader's log start (inside a batch)
    appends the leader's first batch without restarting at its base offset first."""

    def on_fetch_answer(self, fetch_offset: int, answer: LeaderAnswer, log: LogView) -> FollowerPlan:
        plan = super().on_fetch_answer(fetch_offset, answer, log)
        if plan.step is FollowerStep.APPEND and plan.offset >= 0:
            return FollowerPlan(FollowerStep.APPEND)
        return plan


# ---------------------------------------------------------------- the controller's rules


@contextmanager
def controller_elects_out_of_isr() -> Iterator[None]:
    """The controller's leader choice ignores the ISR (any acceptable replica, in assignment
    order, when the leader must change) and records the election as clean."""
    original = pc.build_partition_change

    def mutated(
        state: pc.PartitionState, is_acceptable: Callable[[int], bool], **kwargs: object
    ) -> pc.PartitionChange | None:
        change = original(state, is_acceptable, **kwargs)  # type: ignore[arg-type]
        if change is None or change.leader != pc.NO_LEADER:
            return change
        target: Sequence[int] = kwargs.get("target_isr") or state.isr  # type: ignore[assignment]
        leader = next((r for r in state.replicas if is_acceptable(r)), pc.NO_LEADER)
        isr = tuple(target) if leader in target else (*target, leader)
        return pc.PartitionChange(leader=leader, isr=isr if leader >= 0 else change.isr)

    pc.build_partition_change = mutated  # type: ignore[assignment]
    try:
        yield
    finally:
        pc.build_partition_change = original


@dataclass(frozen=True)
class Mutant:
    name: str
    rule: str
    state: type[PartitionState] = PartitionState
    patch: Callable[[], AbstractContextManager[None]] = nullcontext


MUTANTS: tuple[Mutant, ...] = (
    Mutant("NoDivergenceCheck", "diverging epoch answers", NoDivergenceCheck),
    Mutant("HwFromCommittedIsr", "HW over the maximal ISR (KIP-497)", HwFromCommittedIsr),
    Mutant("NoEpochTrimAtLogEnd", "epoch-cache trim at the log end (bug 1)", NoEpochTrimAtLogEnd),
    Mutant("NoMinIsrOnProduce", "min.insync.replicas on produce", NoMinIsrOnProduce),
    Mutant("AckedAtLeaderAppend", "acks=-1 completes at the HW (is_acked)", AckedAtLeaderAppend),
    Mutant("TruncateToOwnEpochEnd", "the truncation offset", TruncateToOwnEpochEnd),
    Mutant("JoinIsrBelowHighWatermark", "ISR eligibility (in sync = at the HW)", JoinIsrBelowHighWatermark),
    Mutant("NeverShrinkIsr", "the lag rule (replica.lag.time.max.ms)", NeverShrinkIsr),
    Mutant("FollowerHwNotClamped", "the follower's HW clamp", FollowerHwNotClamped),
    Mutant("NoHwFreezeBelowMinIsr", "HW freeze below min ISR", NoHwFreezeBelowMinIsr),
    Mutant(
        "OutOfRangeRestartAtLeaderEnd", "out-of-range restart at the leader's log start", OutOfRangeRestartAtLeaderEnd
    ),
    Mutant("NoRestartAtBatchBase", "restart at the leader's first batch (bug 4)", NoRestartAtBatchBase),
    Mutant("ControllerElectsOutOfIsr", "the controller's clean leader choice", patch=controller_elects_out_of_isr),
)
