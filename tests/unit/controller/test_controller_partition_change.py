"""Leader election and ISR changes (PartitionChangeBuilder), AlterPartition validation, imbalance."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quorum.controller.errors import ErrorCode
from quorum.controller.partition_change import (
    NO_LEADER,
    NO_LEADER_CHANGE,
    BrokerRegistrationState,
    Election,
    IsrMember,
    LeaderRecoveryState,
    PartitionChange,
    PartitionState,
    alter_partition_change,
    apply_change,
    broker_unfenced,
    brokers_over_threshold,
    build_partition_change,
    can_preferred_replica_lead,
    elect_leader,
    elect_preferred,
    imbalance,
    ineligible_replicas,
    is_imbalanced,
    remove_broker_from_partition,
    validate_alter_partition,
)
from quorum.controller.requests import AlterPartitionItem, AlterPartitionRequest

RECOVERED = LeaderRecoveryState.RECOVERED
RECOVERING = LeaderRecoveryState.RECOVERING


def everyone(_: int) -> bool:
    return True


def all_but(*down: int):
    return lambda b: b not in down


def part(replicas, isr, leader, *, le=5, pe=7, lrs=RECOVERED) -> PartitionState:
    return PartitionState(tuple(replicas), tuple(isr), leader, le, pe, lrs)


# ----------------------------------------------------------------------------- election branches


def test_no_change_is_none():
    assert build_partition_change(part([1, 2, 3], [1, 2, 3], 1), everyone) is None
    assert build_partition_change(part([1, 2, 3], [1, 2, 3], 1), everyone, target_isr=[1, 2, 3]) is None


def test_follower_leaves_isr_leader_kept():
    change = remove_broker_from_partition(part([1, 2, 3], [1, 2, 3], 1), 2, everyone)
    assert change == PartitionChange(leader=NO_LEADER_CHANGE, isr=(1, 3))


def test_leader_fenced_first_replica_in_assignment_order_that_is_in_isr():
    # ISR order is (3, 2, 1); assignment order decides: 2 comes before 3 in replicas.
    state = part([1, 2, 3], [3, 2, 1], 1)
    assert remove_broker_from_partition(state, 1, all_but(1)) == PartitionChange(leader=2, isr=(3, 2))


def test_removed_broker_is_never_acceptable_even_if_the_predicate_says_so():
    state = part([1, 2], [1, 2], 1)
    assert remove_broker_from_partition(state, 1, everyone) == PartitionChange(leader=2, isr=(2,))


def test_unacceptable_isr_member_is_skipped():
    # 2 is in the ISR but in controlled shutdown (not acceptable): 3 leads.
    state = part([1, 2, 3], [1, 2, 3], 1)
    assert remove_broker_from_partition(state, 1, all_but(1, 2)) == PartitionChange(leader=3, isr=(2, 3))


def test_last_isr_member_goes_partition_leaderless_isr_kept():
    state = part([1, 2, 3], [1], 1)
    change = remove_broker_from_partition(state, 1, all_but(1))
    assert change == PartitionChange(leader=NO_LEADER, isr=None)
    after = apply_change(state, change)
    assert (after.leader, after.isr, after.leader_epoch, after.partition_epoch) == (NO_LEADER, (1,), 6, 8)


def test_no_acceptable_isr_member_left_isr_still_shrinks():
    state = part([1, 2, 3], [1, 2], 1)
    assert remove_broker_from_partition(state, 1, all_but(1, 2)) == PartitionChange(leader=NO_LEADER, isr=(2,))


def test_unclean_election_when_allowed():
    state = part([1, 2, 3], [1], 1)
    change = remove_broker_from_partition(state, 1, all_but(1, 2), unclean_allowed=True)
    assert change == PartitionChange(leader=3, isr=(3,), leader_recovery_state=RECOVERING, unclean=True)
    after = apply_change(state, change)
    assert (after.leader, after.isr, after.leader_recovery_state) == (3, (3,), RECOVERING)


def test_unclean_election_already_recovering_keeps_state():
    state = part([1, 2, 3], [1], NO_LEADER, lrs=RECOVERING)
    change = build_partition_change(state, all_but(1), election=Election.UNCLEAN)
    assert change == PartitionChange(leader=2, isr=(2,), leader_recovery_state=None, unclean=True)


def test_unclean_election_prefers_a_clean_leader():
    state = part([1, 2, 3], [1, 3], 1)
    assert remove_broker_from_partition(state, 1, all_but(1), unclean_allowed=True) == PartitionChange(
        leader=3, isr=(3,)
    )


def test_unclean_election_with_nobody_acceptable():
    state = part([1, 2, 3], [1], 1)
    assert remove_broker_from_partition(state, 1, all_but(1, 2, 3), unclean_allowed=True) == PartitionChange(
        leader=NO_LEADER
    )


def test_leaderless_partition_already_leaderless_is_none():
    assert build_partition_change(part([1, 2], [1], NO_LEADER), all_but(1)) is None


def test_unfenced_broker_regains_leadership_of_leaderless_partition():
    state = part([1, 2, 3], [2], NO_LEADER)
    # The registration still shows 2 fenced: broker_unfenced counts it as acceptable anyway.
    assert broker_unfenced(state, 2, all_but(2)) == PartitionChange(leader=2)
    assert build_partition_change(state, all_but(2)) is None


def test_unfenced_broker_outside_isr_leads_only_if_unclean_allowed():
    state = part([1, 2, 3], [1], NO_LEADER)
    assert broker_unfenced(state, 3, all_but(1, 2)) is None
    assert broker_unfenced(state, 3, all_but(1, 2), unclean_allowed=True) == PartitionChange(
        leader=3, isr=(3,), leader_recovery_state=RECOVERING, unclean=True
    )


def test_isr_reordering_is_a_change():
    assert build_partition_change(part([1, 2], [1, 2], 1), everyone, target_isr=[2, 1]) == PartitionChange(isr=(2, 1))


def test_isr_shrink_bumps_leader_epoch_only_on_old_metadata_versions():
    state = part([1, 2, 3], [1, 2, 3], 1)
    assert build_partition_change(state, everyone, target_isr=[1, 2]) == PartitionChange(isr=(1, 2))
    change = build_partition_change(state, everyone, target_isr=[1, 2], bump_leader_epoch_on_isr_shrink=True)
    assert change == PartitionChange(leader=1, isr=(1, 2))
    assert apply_change(state, change).leader_epoch == 6
    # An expansion never bumps.
    assert build_partition_change(
        part([1, 2, 3], [1, 2], 1), everyone, target_isr=[1, 2, 3], bump_leader_epoch_on_isr_shrink=True
    ) == PartitionChange(isr=(1, 2, 3))


def test_target_leader_recovery_state():
    state = part([1, 2], [1], 1, lrs=RECOVERING)
    assert build_partition_change(state, everyone, target_leader_recovery_state=RECOVERED) == PartitionChange(
        leader_recovery_state=RECOVERED
    )
    assert build_partition_change(state, everyone, target_leader_recovery_state=RECOVERING) is None


# ----------------------------------------------------------------------------- preferred election


def test_preferred_replica_elected_when_in_isr_and_acceptable():
    state = part([1, 2, 3], [1, 2, 3], 2)
    assert elect_preferred(state, everyone) == PartitionChange(leader=1)
    assert can_preferred_replica_lead(state, everyone)


def test_preferred_not_in_isr_keeps_current_leader():
    state = part([1, 2, 3], [2, 3], 2)
    assert elect_preferred(state, everyone) is None
    assert not can_preferred_replica_lead(state, everyone)


def test_preferred_unacceptable_keeps_current_leader():
    assert elect_preferred(part([1, 2, 3], [1, 2, 3], 2), all_but(1)) is None


def test_preferred_falls_back_to_other_replicas_when_leader_invalid():
    state = part([1, 2, 3], [1, 3], NO_LEADER)
    assert elect_preferred(state, all_but(1)) == PartitionChange(leader=3)


def test_preferred_never_elects_uncleanly():
    assert elect_preferred(part([1, 2, 3], [1], NO_LEADER), all_but(1)) is None


# ----------------------------------------------------------------------------- ElectLeaders


def test_elect_leaders_preferred_outcomes():
    assert elect_leader(part([1, 2], [1, 2], 1), Election.PREFERRED, everyone) == (ErrorCode.ELECTION_NOT_NEEDED, None)
    assert elect_leader(part([1, 2], [1, 2], 2), Election.PREFERRED, everyone) == (
        ErrorCode.NONE,
        PartitionChange(leader=1),
    )
    assert elect_leader(part([1, 2], [2], 2), Election.PREFERRED, everyone) == (
        ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
        None,
    )


def test_elect_leaders_unclean_outcomes():
    assert elect_leader(part([1, 2], [1, 2], 2), Election.UNCLEAN, everyone) == (ErrorCode.ELECTION_NOT_NEEDED, None)
    code, change = elect_leader(part([1, 2], [1], NO_LEADER), Election.UNCLEAN, all_but(1))
    assert code == ErrorCode.NONE
    assert change == PartitionChange(leader=2, isr=(2,), leader_recovery_state=RECOVERING, unclean=True)
    assert elect_leader(part([1, 2], [1], NO_LEADER), Election.UNCLEAN, all_but(1, 2)) == (
        ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
        None,
    )
    # A clean choice is still preferred by an unclean request.
    assert elect_leader(part([1, 2], [2], NO_LEADER), Election.UNCLEAN, everyone) == (
        ErrorCode.NONE,
        PartitionChange(leader=2),
    )
    with pytest.raises(ValueError):
        elect_leader(part([1], [1], 1), Election.ONLINE, everyone)


# ----------------------------------------------------------------------------- apply


def test_apply_change_epochs():
    state = part([1, 2], [1, 2], 1, le=3, pe=9)
    isr_only = apply_change(state, PartitionChange(isr=(1,)))
    assert (isr_only.leader, isr_only.isr, isr_only.leader_epoch, isr_only.partition_epoch) == (1, (1,), 3, 10)
    same_leader = apply_change(state, PartitionChange(leader=1))
    assert (same_leader.leader_epoch, same_leader.partition_epoch) == (4, 10)
    recovered = apply_change(part([1], [1], 1, lrs=RECOVERING), PartitionChange(leader_recovery_state=RECOVERED))
    assert recovered.leader_recovery_state == RECOVERED


# ----------------------------------------------------------------------------- AlterPartition


REGS = {
    1: BrokerRegistrationState(epoch=100),
    2: BrokerRegistrationState(epoch=200),
    3: BrokerRegistrationState(epoch=300),
    4: BrokerRegistrationState(epoch=400, fenced=True),
    5: BrokerRegistrationState(epoch=500, in_controlled_shutdown=True),
}
STATE = part([1, 2, 3, 4, 5], [1, 2], 1, le=5, pe=7)
TOPIC_ID = uuid.UUID(int=7)


def req(
    *, broker=1, broker_epoch=100, le=5, pe=7, isr=((1, 100), (2, 200)), lrs=RECOVERED
) -> tuple[AlterPartitionRequest, AlterPartitionItem]:
    """An AlterPartition request from `broker` for one partition, and that partition's item."""
    item = AlterPartitionItem(TOPIC_ID, 0, le, tuple(IsrMember(b, e) for b, e in isr), lrs, pe)
    return AlterPartitionRequest(broker, broker_epoch, (item,)), item


@pytest.mark.parametrize(
    ("request_", "state", "expected"),
    [
        (req(), STATE, ErrorCode.NONE),
        (req(isr=((1, 100), (2, 200), (3, 300))), STATE, ErrorCode.NONE),
        (req(isr=((1, -1), (3, -1))), STATE, ErrorCode.NONE),
        (req(broker_epoch=99), STATE, ErrorCode.STALE_BROKER_EPOCH),
        (req(broker=9, broker_epoch=1), STATE, ErrorCode.STALE_BROKER_EPOCH),
        (req(), None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        (req(le=6), STATE, ErrorCode.NOT_CONTROLLER),
        (req(pe=8), STATE, ErrorCode.NOT_CONTROLLER),
        (req(le=4), STATE, ErrorCode.FENCED_LEADER_EPOCH),
        (req(broker=2, broker_epoch=200), STATE, ErrorCode.INVALID_REQUEST),
        (req(pe=6), STATE, ErrorCode.INVALID_UPDATE_VERSION),
        (req(isr=((1, 100), (9, -1))), STATE, ErrorCode.INVALID_REQUEST),
        (req(isr=((1, 100), (1, 100))), STATE, ErrorCode.INVALID_REQUEST),
        (req(isr=((1, 100), (-3, -1))), part([1, 2, -3], [1], 1, le=5, pe=7), ErrorCode.INVALID_REQUEST),
        (req(isr=((2, 200),)), STATE, ErrorCode.INVALID_REQUEST),
        (req(isr=()), STATE, ErrorCode.INVALID_REQUEST),
        (req(lrs=RECOVERING), part([1, 2], [1], 1, le=5, pe=7, lrs=RECOVERING), ErrorCode.INVALID_REQUEST),
        (req(isr=((1, 100),), lrs=RECOVERING), STATE, ErrorCode.INVALID_REQUEST),
        (req(isr=((1, 100),), lrs=RECOVERING), part([1, 2], [1], 1, le=5, pe=7, lrs=RECOVERING), ErrorCode.NONE),
        (
            req(isr=((1, 100), (2, 200)), lrs=RECOVERED),
            part([1, 2], [1], 1, le=5, pe=7, lrs=RECOVERING),
            ErrorCode.NONE,
        ),
        (req(isr=((1, 100), (4, 400))), STATE, ErrorCode.INELIGIBLE_REPLICA),
        (req(isr=((1, 100), (5, 500))), STATE, ErrorCode.INELIGIBLE_REPLICA),
        (req(isr=((1, 100), (2, 201))), STATE, ErrorCode.INELIGIBLE_REPLICA),
        (req(isr=((1, 100), (6, -1))), part([1, 6], [1], 1, le=5, pe=7), ErrorCode.INELIGIBLE_REPLICA),
    ],
)
def test_alter_partition_validation(request_, state, expected):
    assert validate_alter_partition(state, *request_, REGS) == expected


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        # Stale broker epoch beats everything, even an unknown partition.
        (req(broker_epoch=1, le=0), ErrorCode.STALE_BROKER_EPOCH),
        # A newer leader epoch is NOT_CONTROLLER even from a non-leader with an older partition epoch.
        (req(broker=2, broker_epoch=200, le=6, pe=1), ErrorCode.NOT_CONTROLLER),
        # A newer partition epoch beats an older leader epoch.
        (req(le=4, pe=8), ErrorCode.NOT_CONTROLLER),
        # An older leader epoch beats "not the leader".
        (req(broker=2, broker_epoch=200, le=4), ErrorCode.FENCED_LEADER_EPOCH),
        # "Not the leader" beats an older partition epoch.
        (req(broker=2, broker_epoch=200, pe=6), ErrorCode.INVALID_REQUEST),
        # An older partition epoch beats a bad ISR.
        (req(pe=6, isr=((9, -1),)), ErrorCode.INVALID_UPDATE_VERSION),
        # A bad ISR beats ineligible members.
        (req(isr=((4, 400),)), ErrorCode.INVALID_REQUEST),
    ],
)
def test_alter_partition_validation_order(request_, expected):
    assert validate_alter_partition(STATE, *request_, REGS) == expected


def test_alter_partition_ineligible_on_old_versions_is_operation_not_attempted():
    request_ = req(isr=((1, 100), (4, 400)))
    assert validate_alter_partition(STATE, *request_, REGS, request_version=1) == ErrorCode.OPERATION_NOT_ATTEMPTED
    assert validate_alter_partition(STATE, *request_, REGS, request_version=2) == ErrorCode.INELIGIBLE_REPLICA


def test_ineligible_replica_reasons():
    members = [IsrMember(9), IsrMember(5, 500), IsrMember(4, 400), IsrMember(2, 7), IsrMember(1, -1)]
    assert ineligible_replicas(members, REGS) == [
        (9, "not registered"),
        (5, "shutting down"),
        (4, "fenced"),
        (2, "broker epoch mismatch: requested=7 VS expected=200"),
    ]


def test_alter_partition_change():
    change = alter_partition_change(STATE, req(isr=((1, 100), (2, 200), (3, 300)))[1], everyone)
    assert change == PartitionChange(isr=(1, 2, 3))
    after = apply_change(STATE, change)
    assert (after.isr, after.leader_epoch, after.partition_epoch) == ((1, 2, 3), 5, 8)
    recovering = part([1, 2], [1], 1, lrs=RECOVERING)
    assert alter_partition_change(recovering, req(isr=((1, 100), (2, 200)))[1], everyone) == PartitionChange(
        isr=(1, 2), leader_recovery_state=RECOVERED
    )


# ----------------------------------------------------------------------------- imbalance


def test_imbalance_ratio_per_preferred_broker():
    partitions = [
        ((1, 2, 3), 1),
        ((1, 2, 3), 2),
        ((1, 3, 2), NO_LEADER),
        ((1, 2, 3), 1),
        ((2, 3, 1), 2),
        ((3, 1, 2), 1),
        ((), NO_LEADER),
    ]
    ratios = imbalance(partitions, brokers=[1, 2, 3, 4])
    assert ratios == {1: 0.5, 2: 0.0, 3: 1.0, 4: 0.0}
    assert imbalance(partitions) == {1: 0.5, 2: 0.0, 3: 1.0}
    assert brokers_over_threshold(ratios) == [1, 3]
    assert brokers_over_threshold(ratios, 50) == [3]
    assert brokers_over_threshold({1: 0.1}, 10) == []


def test_is_imbalanced():
    assert is_imbalanced((1, 2), 2)
    assert is_imbalanced((1, 2), NO_LEADER)
    assert not is_imbalanced((1, 2), 1)
    assert not is_imbalanced((), NO_LEADER)


# ----------------------------------------------------------------------------- properties


@st.composite
def partition_case(draw):
    replicas = draw(st.lists(st.integers(0, 9), min_size=1, max_size=5, unique=True))
    isr = draw(st.lists(st.sampled_from(replicas), min_size=1, unique=True))
    leader = draw(st.sampled_from([*isr, NO_LEADER]))
    down = draw(st.sets(st.integers(0, 9)))
    removed = draw(st.sampled_from(replicas))
    unclean = draw(st.booleans())
    return part(replicas, isr, leader), down, removed, unclean


@given(partition_case())
def test_property_fencing_keeps_metadata_invariants(case):
    state, down, removed, unclean = case

    def acceptable(b: int) -> bool:
        return b not in down

    change = remove_broker_from_partition(state, removed, acceptable, unclean_allowed=unclean)
    after = state if change is None else apply_change(state, change)
    assert after.isr, "the ISR is never empty with ELR off"
    assert set(after.isr) <= set(after.replicas)
    assert len(set(after.isr)) == len(after.isr)
    assert after.leader != removed
    if after.leader != NO_LEADER:
        assert after.leader in after.isr
        assert acceptable(after.leader)
    if removed in after.isr:
        assert after.isr == (removed,) and after.leader == NO_LEADER
    if change is not None:
        assert after.partition_epoch == state.partition_epoch + 1
        assert after.leader_epoch == state.leader_epoch + (change.leader != NO_LEADER_CHANGE)
        assert change.unclean == (change.leader_recovery_state == RECOVERING)
        if not unclean:
            assert not change.unclean
            assert set(after.isr) <= set(state.isr)


@given(partition_case())
def test_property_preferred_election_elects_preferred_or_changes_nothing_useful(case):
    state, down, _, _ = case

    def acceptable(b: int) -> bool:
        return b not in down

    change = elect_preferred(state, acceptable)
    if can_preferred_replica_lead(state, acceptable) and state.leader != state.replicas[0]:
        assert change == PartitionChange(leader=state.replicas[0])
    if change is not None:
        assert not change.unclean and change.isr is None
