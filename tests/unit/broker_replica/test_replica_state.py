"""Unit tests of `broker.replica.state.PartitionState` (Kafka's partition replication rules)."""

from __future__ import annotations

import pytest

from broker.log.epoch_cache import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, end_offset_for
from broker.replica.follower import apply_fetch_answer
from broker.replica.state import (
    RECOVERING,
    FollowerFetchResult,
    FollowerPlan,
    FollowerStep,
    LeaderAnswer,
    PartitionState,
    Role,
)
from quorum.kafka_errors import ErrorCode
from tests.sim.replication.memlog import MemLog, Record

LAG = 30_000


def log_of(*epochs: int) -> MemLog:
    """A log with one record per given epoch (record ids 0, 1, 2, ...)."""
    log = MemLog()
    for i, e in enumerate(epochs):
        log.append(Record(e, i))
    return log


def leader(
    log: MemLog, *, epoch: int = 1, isr: tuple[int, ...] = (1, 2, 3), replicas: tuple[int, ...] = (1, 2, 3),
    min_isr: int = 1, now: int = 1_000_000,
) -> PartitionState:  # fmt: skip
    s = PartitionState(1, min_insync_replicas=min_isr, replica_lag_time_max_ms=LAG)
    assert s.become_leader(leader_epoch=epoch, partition_epoch=0, replicas=replicas, isr=isr, now_ms=now, log=log)
    return s


def fetch(
    s: PartitionState, log: MemLog, replica: int, offset: int, last_epoch: int, now: int = 1_000_000,
    *, current_leader_epoch: int = -1, isr_eligible: bool = True,
) -> FollowerFetchResult:  # fmt: skip
    return s.on_follower_fetch(
        replica_id=replica, fetch_offset=offset, last_fetched_epoch=last_epoch, now_ms=now, log=log,
        current_leader_epoch=current_leader_epoch, isr_eligible=isr_eligible,
    )  # fmt: skip


# ---------------------------------------------------------------- epoch cache


@pytest.mark.parametrize(
    ("requested", "expected"),
    [
        (UNDEFINED_EPOCH, (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)),
        (0, (0, 2)),  # older than every known epoch: ends where the first known one starts
        (1, (1, 5)),
        (2, (1, 5)),  # unknown epoch between two known ones: the floor, ending at the next start
        (3, (3, 9)),
        (4, (4, 12)),  # the latest: ends at the LEO
        (5, (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)),
    ],
)
def test_end_offset_for_epoch_follows_kafkas_cache(requested: int, expected: tuple[int, int]) -> None:
    assert end_offset_for([(1, 2), (3, 5), (4, 9)], requested, 12) == expected


def test_end_offset_for_empty_cache_is_undefined() -> None:
    assert end_offset_for([], 0, 0) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def test_truncate_at_or_past_the_end_still_trims_an_empty_epoch() -> None:
    log = log_of(1, 1)
    log.assign_epoch_start_offset(2, 2)  # a leader of epoch 2 that never wrote
    assert log.latest_epoch() == 2
    assert log.truncate_to(2) == []
    assert log.latest_epoch() == 1 and log.log_end_offset == 2


# ---------------------------------------------------------------- metadata transitions


def test_become_leader_assigns_the_epoch_start_and_ignores_stale_metadata() -> None:
    log = log_of(1, 1, 1)
    s = leader(log, epoch=4)
    assert log.epochs[-1] == (4, 3) and s.epoch_start_offset == 3
    assert not s.become_leader(leader_epoch=3, partition_epoch=9, replicas=(1, 2), isr=(1,), now_ms=0, log=log)
    assert not s.become_follower(leader_id=2, leader_epoch=4, partition_epoch=0, replicas=(1, 2), isr=(1, 2))
    assert s.is_leader and s.isr == (1, 2, 3)
    assert s.become_follower(leader_id=2, leader_epoch=5, partition_epoch=1, replicas=(1, 2, 3), isr=(2, 3))
    assert s.role is Role.FOLLOWER and s.leader_id == 2


def test_new_leader_counts_follower_ends_as_unknown_until_they_fetch() -> None:
    log = log_of(1, 1, 1, 1)
    s = leader(log, epoch=2)
    assert s.high_watermark == 0
    assert all(v.log_end_offset == -1 for v in s.followers())
    fetch(s, log, 2, 4, 1)
    assert s.high_watermark == 0  # replica 3 unknown
    r = fetch(s, log, 3, 3, 1)
    assert r.high_watermark_changed and s.high_watermark == 3
    r = fetch(s, log, 3, 4, 1)
    assert s.high_watermark == 4


def test_single_member_isr_commits_on_election_and_on_append() -> None:
    log = log_of(1, 1)
    s = leader(log, epoch=2, isr=(1,))
    assert s.high_watermark == 2
    log.append(Record(2, 9))
    assert s.on_local_append(0, log) and s.high_watermark == 3


def test_hw_waits_while_isr_is_below_min_isr() -> None:
    log = log_of(1, 1)
    s = leader(log, epoch=2, isr=(1,), min_isr=2)
    assert s.high_watermark == 0  # Kafka 3.7+: no HW progress under min ISR
    s.min_insync_replicas = 5  # capped by the replication factor (3): still under
    assert not s.on_local_append(0, log)


def test_hw_never_goes_back_and_never_passes_the_leader_end() -> None:
    log = log_of(1, 1, 1)
    s = leader(log, epoch=1)
    fetch(s, log, 2, 3, 1)
    fetch(s, log, 3, 3, 1)
    assert s.high_watermark == 3
    fetch(s, log, 2, 1, 1)  # a stale (reordered) fetch lowers the follower's known end
    assert s.high_watermark == 3


# ---------------------------------------------------------------- follower fetch validation


def test_fetch_epoch_checks() -> None:
    log = log_of(1)
    s = leader(log, epoch=3)
    assert fetch(s, log, 2, 1, 1, current_leader_epoch=2).error == ErrorCode.FENCED_LEADER_EPOCH
    assert fetch(s, log, 2, 1, 1, current_leader_epoch=4).error == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert fetch(s, log, 2, 1, 1, current_leader_epoch=3).error == ErrorCode.NONE
    assert fetch(s, log, 7, 1, 1).error == ErrorCode.NOT_LEADER_OR_FOLLOWER  # not a replica
    s.become_follower(leader_id=2, leader_epoch=4, partition_epoch=1, replicas=(1, 2, 3), isr=(2,))
    assert fetch(s, log, 3, 1, 1).error == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_diverging_epoch_answers_do_not_count_the_fetch() -> None:
    log = log_of(1, 1, 3, 3)  # epochs 1 at [0,2), 3 at [2,4)
    s = leader(log, epoch=4)
    # The follower has epoch-2 records at offsets 2..4: the leader ends epoch 2 ... at 2 (floor 1).
    r = fetch(s, log, 2, 5, 2)
    assert r.error == ErrorCode.NONE and r.diverging_epoch == (1, 2)
    assert s.follower(2) is not None and s.follower(2).log_end_offset == -1  # type: ignore[union-attr]
    # The same epoch, but past its end on the leader.
    assert fetch(s, log, 2, 3, 1).diverging_epoch == (1, 2)
    # A prefix: fine.
    assert fetch(s, log, 2, 2, 1).diverging_epoch is None
    # An epoch newer than anything the leader knows: OFFSET_OUT_OF_RANGE.
    log2 = log_of(1)
    s2 = leader(log2, epoch=1)
    assert fetch(s2, log2, 2, 1, 3).error == ErrorCode.OFFSET_OUT_OF_RANGE


def test_fetch_position_out_of_range() -> None:
    log = log_of(1, 1)
    s = leader(log, epoch=1)
    assert fetch(s, log, 2, 3, -1).error == ErrorCode.OFFSET_OUT_OF_RANGE
    log.start_offset = 0
    assert fetch(s, log, 2, 2, -1).error == ErrorCode.NONE


# ---------------------------------------------------------------- caught up, shrink, expand


def test_caught_up_as_of_the_previous_fetch() -> None:
    log = log_of(1, 1)
    s = leader(log, epoch=1, isr=(1, 2, 3), now=0)
    fetch(s, log, 2, 2, 1, now=1_000)  # caught up at 1000
    fetch(s, log, 3, 2, 1, now=1_000)
    log.append(Record(1, 5))
    fetch(s, log, 2, 2, 1, now=20_000)  # behind the current end, at the end of the previous fetch
    assert s.follower(2).last_caught_up_ms == 1_000  # type: ignore[union-attr]
    fetch(s, log, 2, 3, 1, now=40_000)  # reached the end seen at the previous fetch (3)
    assert s.follower(2).last_caught_up_ms == 40_000  # type: ignore[union-attr]
    assert s.out_of_sync_replicas(31_000, log) == ()  # 3 caught up at 1000, within the lag
    assert s.out_of_sync_replicas(31_001, log) == (3,)  # 3 stuck at 2 < 3 since 1000
    assert s.proposed_isr(31_001, None, log) == (1, 2)


def test_shrink_keeps_the_removed_member_in_the_hw_until_committed() -> None:
    log = log_of(1, 1)
    s = leader(log, epoch=1, now=0)
    fetch(s, log, 3, 0, 1, now=10)
    log.append(Record(1, 7))
    fetch(s, log, 2, 3, 1, now=39_000)
    assert s.high_watermark == 0  # 3 is at 0
    proposal = s.proposed_isr(40_000, LAG, log)
    assert proposal == (1, 2)
    s.on_isr_sent(proposal)
    assert s.maximal_isr == (1, 2, 3)
    fetch(s, log, 2, 3, 1, now=40_000)
    assert s.high_watermark == 0  # still waits for 3
    assert s.proposed_isr(40_000, LAG, log) is None  # one change at a time
    assert s.on_isr_committed(isr=(1, 2), leader_epoch=1, partition_epoch=1, now_ms=40_001, log=log)
    assert s.high_watermark == 3 and s.isr == (1, 2)


def test_expand_needs_hw_and_epoch_start_and_counts_at_once() -> None:
    log = log_of(1, 1, 1, 1)
    s = leader(log, epoch=2, isr=(1, 2), replicas=(1, 2, 3))
    log.append(Record(2, 9))
    fetch(s, log, 2, 5, 2)
    assert s.high_watermark == 5
    r = fetch(s, log, 3, 4, 1)  # HW is 5: not in sync
    assert not r.isr_expand_wanted
    s.high_watermark = 3  # (as if the HW had lagged) still below the epoch start (4)
    assert not fetch(s, log, 3, 3, 1).isr_expand_wanted
    s.high_watermark = 5
    r = fetch(s, log, 3, 5, 2)
    assert r.isr_expand_wanted
    proposal = s.proposed_isr(1_000_000, LAG, log)
    assert proposal == (1, 2, 3)
    s.on_isr_sent(proposal)
    assert s.maximal_isr == (1, 2, 3) and s.isr == (1, 2)
    log.append(Record(2, 10))
    fetch(s, log, 2, 6, 2)
    assert s.high_watermark == 5  # the joining replica holds it back already


def test_ineligible_follower_never_joins() -> None:
    log = log_of(1)
    s = leader(log, epoch=1, isr=(1,), replicas=(1, 2))
    assert not fetch(s, log, 2, 1, 1, isr_eligible=False).isr_expand_wanted
    assert s.proposed_isr(1_000_000, LAG, log) is None


def test_isr_failure_rules() -> None:
    log = log_of(1)
    s = leader(log, epoch=1, isr=(1,), replicas=(1, 2))
    fetch(s, log, 2, 1, 1)
    s.on_isr_sent((1, 2))
    s.on_isr_failed(None)  # unknown outcome: send the same again
    assert s.proposed_isr(1_000_000, LAG, log) == (1, 2)
    s.on_isr_sent((1, 2))
    s.on_isr_failed(ErrorCode.INVALID_UPDATE_VERSION)  # maybe applied: wait for metadata
    assert s.proposed_isr(1_000_000, LAG, log) is None and s.maximal_isr == (1, 2)
    assert s.become_leader(leader_epoch=1, partition_epoch=1, replicas=(1, 2), isr=(1, 2), now_ms=0, log=log)
    assert s.pending_isr is None and s.isr == (1, 2)
    s2 = leader(log_of(1), epoch=1, isr=(1,), replicas=(1, 2))
    s2.on_isr_sent((1, 2))
    s2.on_isr_failed(ErrorCode.INELIGIBLE_REPLICA)  # not applied: forget it
    assert s2.pending_isr is None and s2.maximal_isr == (1,)


def test_stale_commit_answer_is_ignored() -> None:
    log = log_of(1)
    s = leader(log, epoch=1, isr=(1,), replicas=(1, 2))
    s.become_leader(leader_epoch=1, partition_epoch=3, replicas=(1, 2), isr=(1, 2), now_ms=0, log=log)
    assert not s.on_isr_committed(isr=(1,), leader_epoch=1, partition_epoch=2, now_ms=0, log=log)
    assert s.isr == (1, 2)


def test_unclean_leader_reports_recovered_first() -> None:
    log = log_of(1)
    s = PartitionState(1)
    s.become_leader(
        leader_epoch=5,
        partition_epoch=2,
        replicas=(1, 2),
        isr=(1,),
        now_ms=0,
        log=log,
        leader_recovery_state=RECOVERING,
    )
    fetch(s, log, 2, 1, 1)
    assert s.proposed_isr(0, LAG, log) == (1,)


# ---------------------------------------------------------------- produce


def test_produce_checks_and_acks() -> None:
    log = log_of(1)
    s = leader(log, epoch=1, isr=(1, 2), replicas=(1, 2, 3), min_isr=2)
    assert s.check_produce(-1).error == ErrorCode.NONE
    assert s.check_produce(1, 3).error == ErrorCode.NONE
    assert s.check_produce(-1, 3).error == ErrorCode.NOT_ENOUGH_REPLICAS
    s.min_insync_replicas = 2
    log.append(Record(1, 1))
    assert s.is_acked(2, 1) is None
    fetch(s, log, 2, 2, 1)
    assert s.is_acked(2, 1) == ErrorCode.NONE
    s.become_follower(leader_id=2, leader_epoch=2, partition_epoch=1, replicas=(1, 2, 3), isr=(2,))
    assert s.is_acked(2, 1) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert s.check_produce(1).error == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_ack_after_the_isr_shrank_below_min_isr() -> None:
    log = log_of(1)
    s = leader(log, epoch=1, isr=(1, 2, 3), min_isr=2)
    fetch(s, log, 2, 1, 1)
    fetch(s, log, 3, 1, 1)
    log.append(Record(1, 2))
    fetch(s, log, 2, 2, 1)
    # 3 left, then 2 left (metadata), and finally 3's fetch is the last one needed... HW can't move under min ISR.
    later = 2_000_000  # 3 is no longer caught up, so it does not hold the HW once out of the ISR
    s.become_leader(leader_epoch=1, partition_epoch=1, replicas=(1, 2, 3), isr=(1, 2), now_ms=later, log=log)
    assert s.high_watermark == 2 and s.is_acked(2, 1) == ErrorCode.NONE
    s.become_leader(leader_epoch=1, partition_epoch=2, replicas=(1, 2, 3), isr=(1,), now_ms=later, log=log)
    assert s.is_acked(2, 1) == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND


def test_a_leadership_that_was_interrupted_does_not_ack_old_appends() -> None:
    log = log_of(1)
    s = leader(log, epoch=1, isr=(1,))
    s.become_follower(leader_id=2, leader_epoch=2, partition_epoch=1, replicas=(1, 2, 3), isr=(1, 2))
    s.become_leader(leader_epoch=3, partition_epoch=2, replicas=(1, 2, 3), isr=(1,), now_ms=0, log=log)
    assert s.is_acked(1, 1) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert s.is_acked(1, 3) == ErrorCode.NONE


# ---------------------------------------------------------------- follower side


def follower(log: MemLog, hw: int = 0, epoch: int = 5) -> PartitionState:
    s = PartitionState(2)
    s.set_initial_high_watermark(hw, log)
    assert s.become_follower(leader_id=1, leader_epoch=epoch, partition_epoch=0, replicas=(1, 2, 3), isr=(1, 2, 3))
    return s


def test_fetch_position_and_hw() -> None:
    log = log_of(1, 2)
    s = follower(log)
    assert s.fetch_position(log) == (2, 2)
    assert s.fetch_position(MemLog()) == (0, -1)
    assert s.on_follower_progress(9, log) == 2
    assert s.on_follower_progress(1, log) == 1


def test_truncation_same_epoch_and_multi_round() -> None:
    # Follower: epochs 1 [0,2), 2 [2,5). Leader answers (1, 3): epoch 1 ends at 3 on the leader.
    log = log_of(1, 1, 2, 2, 2)
    s = follower(log, hw=2)
    t = s.truncation((1, 3), log)
    assert (t.offset, t.completed, t.below_high_watermark) == (2, True, 0)
    # Leader's epoch 3 is newer than all the follower has: min(leader end, own end).
    t = s.truncation((3, 4), log)
    assert (t.offset, t.completed) == (4, True)
    # Follower epochs 1 [0,2), 3 [2,4); the leader ends epoch 2 at 3: the follower's floor of 2 is
    # epoch 1, ending at 2: truncate there and fetch again with epoch 1 (another round).
    log2 = log_of(1, 1, 3, 3)
    t = s.truncation((2, 3), log2)
    assert (t.offset, t.completed) == (2, False)
    # Epoch older than the follower knows (0): it ends where the follower's first epoch starts.
    assert s.truncation((0, 0), log).offset == 0
    # Undefined epoch: min(leader end, own end).
    assert s.truncation((-1, 3), log).offset == 3


def test_truncation_of_an_empty_epoch_of_a_former_leader_does_not_livelock() -> None:
    # Broker 2 led epoch 4 without writing, then broker 1 leads epoch 5 with a longer log.
    flog = log_of(3, 3)
    flog.assign_epoch_start_offset(4, 2)
    llog = log_of(3, 3, 3)
    s_leader = leader(llog, epoch=5)
    s = follower(flog)
    offset, last = s.fetch_position(flog)
    assert (offset, last) == (2, 4)
    r = fetch(s_leader, llog, 2, offset, last)
    assert r.diverging_epoch == (3, 3)
    assert r.diverging_epoch is not None
    t = s.truncation(r.diverging_epoch, flog)
    assert t.offset == 2 and t.completed
    flog.truncate_to(t.offset)
    assert s.fetch_position(flog) == (2, 3)
    assert fetch(s_leader, llog, 2, 2, 3).diverging_epoch is None


def test_truncation_below_hw_is_reported_as_loss() -> None:
    log = log_of(1, 1, 1, 1)
    s = follower(log, hw=4)
    t = s.truncation((0, 1), log)
    assert t.offset == 0 and t.below_high_watermark == 4
    log.truncate_to(t.offset)
    s.on_truncated(log)
    assert s.high_watermark == 0


def test_out_of_range_plans() -> None:
    log = log_of(1, 1, 1)
    s = follower(log)
    assert s.out_of_range_plan(0, 2, log) == FollowerPlan(FollowerStep.TRUNCATE, 2)
    assert s.out_of_range_plan(7, 9, log) == FollowerPlan(FollowerStep.RESTART, 7)
    assert s.out_of_range_plan(0, 5, log) == FollowerPlan(FollowerStep.BACKOFF)


def test_fetch_answer_plans() -> None:
    log = log_of(1, 1, 1)
    s = follower(log)
    ok = LeaderAnswer(ErrorCode.NONE, 3, 0)
    assert s.on_fetch_answer(3, ok, log) == FollowerPlan(FollowerStep.APPEND)
    assert s.on_fetch_answer(2, ok, log).step is FollowerStep.STALE
    oor = LeaderAnswer(ErrorCode.OFFSET_OUT_OF_RANGE, 3, 0)
    assert s.on_fetch_answer(3, oor, log).step is FollowerStep.ASK_LEADER_OFFSETS
    fenced = LeaderAnswer(ErrorCode.FENCED_LEADER_EPOCH)
    assert s.on_fetch_answer(3, fenced, log).step is FollowerStep.BACKOFF
    # A diverging answer at exactly the log end is still a truncation (it trims the epoch cache).
    diverging = LeaderAnswer(ErrorCode.NONE, 3, 0, (1, 3))
    assert s.on_fetch_answer(3, diverging, log) == FollowerPlan(FollowerStep.TRUNCATE, 3)


def test_empty_log_restarts_at_the_batch_holding_the_leaders_log_start() -> None:
    # DeleteRecords moved the leader's log start to 5, inside the batch [3, 7]; a new follower
    # restarted at 5 receives that whole batch: it restarts its empty log at 3, appends, and
    # adopts the leader's log start 5.
    log = MemLog(start_offset=5)
    s = follower(log)
    answer = LeaderAnswer(ErrorCode.NONE, 8, 5, first_batch=(3, 7))
    assert s.on_fetch_answer(5, answer, log) == FollowerPlan(FollowerStep.APPEND, 3)
    records = tuple(Record(1, i) for i in range(3, 8))
    plan = apply_fetch_answer(s, log, 5, answer, records)
    assert plan.offset == 3
    assert (log.log_start_offset, log.log_end_offset, s.high_watermark) == (5, 8, 8)
    # A non-empty log is never restarted by an answer.
    log2 = log_of(1, 1)
    assert s.on_fetch_answer(2, LeaderAnswer(ErrorCode.NONE, 3, 0, first_batch=(1, 3)), log2).offset == -1


def test_apply_truncates_an_empty_epoch_at_the_log_end() -> None:
    # Bug 1 of issue 19: this broker led epoch 4 and wrote nothing ((4, 2) in its cache), then
    # follows the leader of epoch 5. The leader answers "epoch 3 ends at 2" = our log end: the
    # truncation drops nothing but must drop the epoch-4 entry, or every fetch diverges again.
    flog = log_of(3, 3)
    flog.assign_epoch_start_offset(4, 2)
    llog = log_of(3, 3)
    s_leader = leader(llog, epoch=5)
    s = follower(flog)
    offset, last = s.fetch_position(flog)
    r = fetch(s_leader, llog, 2, offset, last)
    assert r.diverging_epoch == (3, 2)
    plan = apply_fetch_answer(s, flog, offset, LeaderAnswer(ErrorCode.NONE, 2, 0, r.diverging_epoch), ())
    assert plan == FollowerPlan(FollowerStep.TRUNCATE, 2)
    assert s.fetch_position(flog) == (2, 3)
    assert fetch(s_leader, llog, 2, 2, 3).diverging_epoch is None


def test_a_restarted_follower_drops_committed_records_its_leader_lost_and_reports_it() -> None:
    # Walk 375 of the replication simulation: the sole ISR member lost two committed epoch-0
    # records in a power loss and leads epoch 5 with one record of its own (HW 1). A follower
    # restarts with those two records and its checkpointed HW 2 over them (Kafka keeps that HW
    # until the first fetch). Its first answer diverges below the leader's earliest epoch: it
    # truncates to 0 and reports 2 offsets lost below its HW, and its HW never exceeds what it
    # shares with the leader; the next answer brings the leader's record.
    llog = MemLog()
    s_leader = leader(llog, epoch=5, isr=(1,))
    llog.append(Record(5, 2))
    flog = log_of(0, 0)
    s = follower(flog, hw=2)
    assert s.high_watermark == 2
    offset, last = s.fetch_position(flog)
    r = fetch(s_leader, llog, 2, offset, last)
    assert r.diverging_epoch == (0, 0)
    plan = apply_fetch_answer(s, flog, offset, LeaderAnswer(ErrorCode.NONE, 1, 0, r.diverging_epoch), ())
    assert (plan.step, plan.offset, plan.below_high_watermark) == (FollowerStep.TRUNCATE, 0, 2)
    assert (flog.log_end_offset, flog.epochs, s.high_watermark) == (0, [], 0)
    r = fetch(s_leader, llog, 2, *s.fetch_position(flog))
    assert r.error == ErrorCode.NONE and r.diverging_epoch is None
    plan = apply_fetch_answer(s, flog, 0, LeaderAnswer(ErrorCode.NONE, 1, 0), (Record(5, 2),))
    assert plan.step is FollowerStep.APPEND
    assert (flog.records, s.high_watermark) == (llog.records, 1)


def test_a_new_incarnation_of_a_follower_starts_from_nothing() -> None:
    # KIP-903: broker 2's fetches of epoch 12 put it at offset 3; it restarts (epoch 13) and
    # what it had may be gone: the leader forgets its position, and names the epoch its
    # position was counted under.
    log = log_of(1, 1, 1)
    s = leader(log, isr=(1, 3))
    s.on_follower_fetch(replica_id=2, fetch_offset=3, last_fetched_epoch=1, now_ms=1_000_000, log=log, broker_epoch=12)
    view = s.follower(2)
    assert view is not None and (view.log_end_offset, view.broker_epoch) == (3, 12)
    s.on_follower_fetch(replica_id=2, fetch_offset=1, last_fetched_epoch=1, now_ms=1_000_100, log=log, broker_epoch=13)
    view = s.follower(2)
    assert view is not None and (view.log_end_offset, view.broker_epoch) == (1, 13)
    assert view.last_caught_up_ms == -1  # caught up as epoch 12, never as 13


def test_a_follower_cut_off_at_a_frozen_hw_is_not_added_back() -> None:
    # Issue 19's replication simulation (property 5): ISR {1, 2}, min ISR 2. Follower 2 fetched
    # up to the log end, then was cut off; the leader appended, shrank the ISR to {1} after the
    # lag, and its HW froze at 3 (below min ISR). Follower 2's last known LEO is 3 >= HW: the
    # periodic check must not propose it again (it has not fetched since; the next check would
    # remove it again, forever).
    log = log_of(1, 1, 1)
    s = leader(log, isr=(1, 2), min_isr=2)
    t0 = 1_000_000
    fetch(s, log, 2, 3, 1, t0)
    log.append(Record(1, 3))
    s.on_local_append(t0 + 1, log)
    now = t0 + LAG + 10
    assert s.proposed_isr(now, None, log) == (1,)
    s.on_isr_sent((1,))
    s.on_isr_committed(isr=(1,), leader_epoch=1, partition_epoch=1, now_ms=now, log=log)
    assert s.high_watermark == 3
    assert s.proposed_isr(now + 1, None, log) is None
    # Once it fetches again (caught up), it joins.
    fetch(s, log, 2, 4, 1, now + 2)
    assert s.proposed_isr(now + 3, None, log) == (1, 2)


def test_an_isr_expansion_earned_by_a_previous_incarnation_is_dropped() -> None:
    # Broker 2 (epoch 12) caught up; the leader proposed adding it. Broker 2 lost power and came
    # back as epoch 13 with less: the expansion must not be sent again under epoch 13 (the
    # controller would accept it), and a fetch of epoch 12 read after one of 13 counts for nothing.
    log = log_of(1, 1, 1)
    s = leader(log, isr=(1, 3))
    s.on_follower_fetch(replica_id=3, fetch_offset=3, last_fetched_epoch=1, now_ms=1_000_000, log=log, broker_epoch=20)
    s.on_follower_fetch(replica_id=2, fetch_offset=3, last_fetched_epoch=1, now_ms=1_000_000, log=log, broker_epoch=12)
    assert s.proposed_isr(1_000_001, None, log) == (1, 3, 2)
    s.on_isr_sent((1, 3, 2))
    s.on_isr_failed(None)  # no answer: would be sent again
    r = s.on_follower_fetch(
        replica_id=2, fetch_offset=0, last_fetched_epoch=-1, now_ms=1_000_002, log=log, broker_epoch=13
    )
    assert r.error == ErrorCode.NONE and s.pending_isr is None
    assert s.proposed_isr(1_000_003, None, log) is None  # at offset 0: not in sync
    stale = s.on_follower_fetch(
        replica_id=2, fetch_offset=3, last_fetched_epoch=1, now_ms=1_000_004, log=log, broker_epoch=12
    )
    assert stale.error == ErrorCode.STALE_BROKER_EPOCH
    view = s.follower(2)
    assert view is not None and (view.log_end_offset, view.broker_epoch) == (0, 13)
