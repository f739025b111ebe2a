"""Replica placement: Kafka's assignReplicasToBrokers, rack-unaware and rack-aware, and expansion.

Expected layouts come from Kafka's own documentation and tests (AdminUtils javadoc,
AdminRackAwareTest) or are derived by hand from the algorithm, step by step, in comments.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quorum.controller.errors import (
    ControllerError,
    ErrorCode,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    RackAwarenessError,
)
from quorum.controller.placement import (
    ALL_REPLICAS_FENCED,
    BrokerPlacement,
    RackAwareMode,
    assign_new_partitions,
    assign_replicas,
    check_partition_increase,
    initial_isr,
    rack_alternated_broker_list,
    replication_failure_message,
    validate_manual_assignment,
    validate_manual_new_partitions,
)

GOLDEN = {
    0: (0, 1, 2),
    1: (1, 2, 3),
    2: (2, 3, 4),
    3: (3, 4, 0),
    4: (4, 0, 1),
    5: (0, 2, 3),
    6: (1, 3, 4),
    7: (2, 4, 0),
    8: (3, 0, 1),
    9: (4, 1, 2),
}


def brokers(*ids: int) -> list[BrokerPlacement]:
    return [BrokerPlacement(i) for i in ids]


def racked(mapping: dict[int, str]) -> list[BrokerPlacement]:
    return [BrokerPlacement(i, r) for i, r in mapping.items()]


# ----------------------------------------------------------------------------- rack-unaware


def test_golden_table_five_brokers_ten_partitions_rf3():
    assert assign_replicas(brokers(0, 1, 2, 3, 4), 10, 3, start_index=0) == GOLDEN
    assert assign_replicas(brokers(0, 1, 2, 3, 4), 10, 3, start_index=0, next_replica_shift=0) == GOLDEN


def test_broker_order_does_not_matter():
    assert assign_replicas(brokers(3, 1, 4, 0, 2), 10, 3, start_index=0) == GOLDEN


def test_non_contiguous_broker_ids_use_sorted_positions():
    # The same layout with broker ids 10, 20, ... standing in for positions 0, 1, ...
    ids = [10, 20, 30, 40, 50]
    result = assign_replicas(brokers(*ids), 10, 3, start_index=0)
    assert result == {p: tuple(ids[i] for i in rs) for p, rs in GOLDEN.items()}


def test_start_index_and_shift_rotate_the_layout():
    # start 2, shift 2 (a fixed start index is also the shift, as in Kafka):
    # p0: first = 2; followers at 2 + 1 + (2 + j) % 4 → 5%5=0, 6%5=1 → (2, 0, 1)
    # p3: first = 0; followers at 0 + 1 + (2 + j) % 4 → 3, 4 → (0, 3, 4)
    result = assign_replicas(brokers(0, 1, 2, 3, 4), 5, 3, start_index=2)
    assert result[0] == (2, 0, 1)
    assert result[3] == (0, 3, 4)
    # An explicit shift overrides: start 2, shift 0 → p0 = (2, 3, 4)
    assert assign_replicas(brokers(0, 1, 2, 3, 4), 1, 3, start_index=2, next_replica_shift=0)[0] == (2, 3, 4)


def test_first_partition_continues_the_numbering():
    result = assign_replicas(brokers(0, 1, 2, 3, 4), 3, 3, start_index=0, first_partition=5)
    # p5 crosses a multiple of 5, so the shift is 1 there: (0, 2, 3) as in the golden table.
    assert result == {5: (0, 2, 3), 6: (1, 3, 4), 7: (2, 4, 0)}
    # Kafka clamps a negative start partition to 0.
    assert assign_replicas(brokers(0, 1, 2, 3, 4), 10, 3, start_index=0, first_partition=-1) == GOLDEN


def test_single_broker_rf1():
    assert assign_replicas(brokers(7), 3, 1, start_index=0) == {0: (7,), 1: (7,), 2: (7,)}


def test_random_start_comes_from_rng_start_index_first():
    expected_rng = random.Random(1234)
    start = expected_rng.randrange(5)
    shift = expected_rng.randrange(5)
    expected = assign_replicas(brokers(0, 1, 2, 3, 4), 10, 3, start_index=start, next_replica_shift=shift)
    assert assign_replicas(brokers(0, 1, 2, 3, 4), 10, 3, rng=random.Random(1234)) == expected


def test_random_start_without_rng_is_still_valid():
    result = assign_replicas(brokers(0, 1, 2), 6, 2)
    assert sorted(result) == list(range(6))
    assert all(len(set(r)) == 2 for r in result.values())


def test_random_start_with_fixed_shift():
    expected_rng = random.Random(7)
    start = expected_rng.randrange(5)
    expected = assign_replicas(brokers(0, 1, 2, 3, 4), 10, 3, start_index=start, next_replica_shift=1)
    assert assign_replicas(brokers(0, 1, 2, 3, 4), 10, 3, next_replica_shift=1, rng=random.Random(7)) == expected


def test_negative_start_is_a_programming_error():
    with pytest.raises(ValueError):
        assign_replicas(brokers(0, 1, 2), 1, 1, start_index=-1)


def test_duplicate_broker_ids_are_a_programming_error():
    with pytest.raises(ValueError):
        assign_replicas(brokers(0, 1, 1), 1, 1, start_index=0)


# ----------------------------------------------------------------------------- errors


def test_zero_partitions():
    with pytest.raises(InvalidPartitionsError) as e:
        assign_replicas(brokers(0, 1), 0, 1, start_index=0)
    assert e.value.code == ErrorCode.INVALID_PARTITIONS == 37
    assert e.value.message == "Number of partitions must be larger than 0."


@pytest.mark.parametrize("rf", [0, -1])
def test_non_positive_replication_factor(rf):
    with pytest.raises(InvalidReplicationFactorError) as e:
        assign_replicas(brokers(0, 1), 3, rf, start_index=0)
    assert e.value.code == ErrorCode.INVALID_REPLICATION_FACTOR == 38
    assert e.value.message == f"Invalid replication factor {rf}: the replication factor must be positive."


def test_replication_factor_above_broker_count_uses_krafts_words():
    with pytest.raises(InvalidReplicationFactorError) as e:
        assign_replicas(brokers(0), 3, 3, start_index=0)
    assert e.value.message == (
        "The target replication factor of 3 cannot be reached because only 1 broker(s) are registered."
    )
    assert replication_failure_message(3, e.value.message) == (
        "Unable to replicate the partition 3 time(s): The target replication factor of 3 cannot be "
        "reached because only 1 broker(s) are registered."
    )


def test_all_brokers_fenced():
    fenced = [BrokerPlacement(0, fenced=True), BrokerPlacement(1, fenced=True)]
    with pytest.raises(InvalidReplicationFactorError, match=r"^All brokers are currently fenced\.$"):
        assign_replicas(fenced, 1, 1, start_index=0)
    # No broker at all: KRaft's placer says the same (its fenced check comes first).
    with pytest.raises(InvalidReplicationFactorError, match="All brokers are currently fenced"):
        assign_replicas([], 1, 1, start_index=0)


def test_fenced_brokers_count_towards_the_replication_factor():
    # 2 unfenced + 1 fenced: RF 3 is reachable (KRaft checks registered brokers), so all three are used.
    pool = [BrokerPlacement(0), BrokerPlacement(1), BrokerPlacement(2, fenced=True)]
    result = assign_replicas(pool, 3, 3, start_index=0)
    assert all(sorted(r) == [0, 1, 2] for r in result.values())


def test_fenced_brokers_are_avoided_when_enough_unfenced_remain():
    pool = [BrokerPlacement(i, fenced=(i == 2)) for i in range(5)]
    result = assign_replicas(pool, 8, 3, start_index=0)
    assert all(2 not in r for r in result.values())
    # The layout is the rack-unaware one over [0, 1, 3, 4].
    assert result == assign_replicas(brokers(0, 1, 3, 4), 8, 3, start_index=0)


def test_mixed_racks_enforced_is_an_error():
    pool = [BrokerPlacement(0, "r1"), BrokerPlacement(1, "r2"), BrokerPlacement(2)]
    with pytest.raises(RackAwarenessError) as e:
        assign_replicas(pool, 3, 2, start_index=0)
    assert e.value.message == "Not all brokers have rack information for replica rack aware assignment."
    assert e.value.code == ErrorCode.INVALID_REPLICA_ASSIGNMENT


@pytest.mark.parametrize("mode", [RackAwareMode.SAFE, RackAwareMode.DISABLED])
def test_mixed_racks_safe_or_disabled_ignores_racks(mode):
    pool = [BrokerPlacement(i, "r1" if i < 3 else None) for i in range(5)]
    assert assign_replicas(pool, 10, 3, start_index=0, rack_aware_mode=mode) == GOLDEN


def test_disabled_ignores_complete_racks_too():
    pool = [BrokerPlacement(i, f"r{i % 2}") for i in range(5)]
    assert assign_replicas(pool, 10, 3, start_index=0, rack_aware_mode=RackAwareMode.DISABLED) == GOLDEN


# ----------------------------------------------------------------------------- rack-aware


def test_rack_alternated_list_from_kafkas_javadoc():
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated_broker_list(racks) == [0, 3, 1, 5, 4, 2]
    del racks[5]
    assert rack_alternated_broker_list(racks) == [0, 3, 1, 4, 2]
    three_by_three = {i: f"rack{i // 3 + 1}" for i in range(9)}
    assert rack_alternated_broker_list(three_by_three) == [0, 3, 6, 1, 4, 7, 2, 5, 8]


def test_rack_aware_assignment_from_kafkas_javadoc():
    # AdminUtils' javadoc / AdminRackAwareTest: 6 partitions round-robin over [0, 3, 1, 5, 4, 2],
    # then partition 6 shifts its followers: 0 -> 0,4,2 instead of repeating 0,3,1.
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert assign_replicas(racked(racks), 7, 3, start_index=0) == {
        0: (0, 3, 1),
        1: (3, 1, 5),
        2: (1, 5, 4),
        3: (5, 4, 2),
        4: (4, 2, 0),
        5: (2, 0, 3),
        6: (0, 4, 2),
    }


def test_rack_aware_skips_used_racks_until_every_rack_has_a_replica():
    # Racks a: 0,3,4  b: 1  c: 2 → alternated [0, 1, 2, 3, 4]; n = 5, 3 racks, start = shift = 2,
    # so followers step by shift * racks = 6 at first.
    # p2: leader 4 (a). k0 → index (4+1+(6+0)%4)%5 = 2: broker 2 (c) taken. k1 → 3: broker 3 is
    #     rack a, already used while b is missing: skipped. k2 → 0 (a): skipped. k3 → 1 (b): taken;
    #     now every rack has one. k4 → 2: already has a replica: skipped. k5 → 3: taken.
    # p5: 5 is a multiple of n, so the shift becomes 3 (step 9): leader 2, then 4 (a), 0 skipped
    #     (a used, b missing), 1 (b), 3.
    pool = racked({0: "a", 1: "b", 2: "c", 3: "a", 4: "a"})
    assert assign_replicas(pool, 6, 4, start_index=2) == {
        0: (2, 0, 1, 3),
        1: (3, 1, 2, 4),
        2: (4, 2, 1, 3),
        3: (0, 1, 2, 3),
        4: (1, 4, 2, 3),
        5: (2, 4, 1, 3),
    }


def test_rack_aware_more_replicas_than_racks_covers_every_rack():
    pool = racked({0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack2"})
    result = assign_replicas(pool, 6, 5, rng=random.Random(3))
    racks = {b.id: b.rack for b in pool}
    assert all(len(r) == 5 and {racks[b] for b in r} == {"rack1", "rack2", "rack3"} for r in result.values())


def test_rack_aware_single_rack_spreads_leaders():
    pool = racked({i: "rack1" for i in range(6)})
    result = assign_replicas(pool, 6, 3, rng=random.Random(5))
    assert Counter(r[0] for r in result.values()) == Counter(range(6))


# ----------------------------------------------------------------------------- properties


@st.composite
def unaware_case(draw):
    ids = draw(st.lists(st.integers(0, 60), min_size=1, max_size=12, unique=True))
    n = len(ids)
    rf = draw(st.integers(1, n))
    partitions = draw(st.integers(1, 4 * n + 3))
    start = draw(st.integers(0, 3 * n))
    shift = draw(st.integers(0, 3 * n))
    first = draw(st.integers(0, 30))
    return ids, rf, partitions, start, shift, first


@given(unaware_case())
def test_property_rack_unaware_replicas_distinct_and_leaders_even(case):
    ids, rf, partitions, start, shift, first = case
    result = assign_replicas(
        brokers(*ids), partitions, rf, start_index=start, next_replica_shift=shift, first_partition=first
    )
    assert sorted(result) == list(range(first, first + partitions))
    for replicas in result.values():
        assert len(replicas) == rf
        assert len(set(replicas)) == rf
        assert set(replicas) <= set(ids)
    leaders = Counter(r[0] for r in result.values())
    low, high = partitions // len(ids), -(-partitions // len(ids))
    assert all(low <= leaders.get(b, 0) <= high for b in ids)


@given(unaware_case())
def test_property_rack_unaware_even_replicas_when_partitions_are_a_multiple(case):
    ids, rf, _, start, shift, _ = case
    n = len(ids)
    partitions = n * (1 + start % 3)
    result = assign_replicas(brokers(*ids), partitions, rf, start_index=start, next_replica_shift=shift)
    replicas = Counter(b for r in result.values() for b in r)
    leaders = Counter(r[0] for r in result.values())
    assert all(leaders[b] == partitions // n for b in ids)
    assert all(replicas[b] == partitions * rf // n for b in ids)


@st.composite
def aware_case(draw):
    ids = draw(st.lists(st.integers(0, 60), min_size=1, max_size=12, unique=True))
    racks = {i: draw(st.sampled_from(["r1", "r2", "r3", "r4"])) for i in ids}
    rf = draw(st.integers(1, len(ids)))
    partitions = draw(st.integers(1, 4 * len(ids) + 3))
    start = draw(st.integers(0, 2 * len(ids)))
    shift = draw(st.integers(0, 2 * len(ids)))
    return racks, rf, partitions, start, shift


@given(aware_case())
def test_property_rack_aware_spans_min_rf_racks(case):
    racks, rf, partitions, start, shift = case
    result = assign_replicas(racked(racks), partitions, rf, start_index=start, next_replica_shift=shift)
    num_racks = len(set(racks.values()))
    assert len(result) == partitions
    for replicas in result.values():
        assert len(replicas) == rf
        assert len(set(replicas)) == rf
        assert len({racks[b] for b in replicas}) == min(rf, num_racks)
    leaders = Counter(r[0] for r in result.values())
    low, high = partitions // len(racks), -(-partitions // len(racks))
    assert all(low <= leaders.get(b, 0) <= high for b in racks)


@given(st.integers(1, 4), st.integers(1, 3), st.integers(1, 3), st.data())
def test_property_rack_aware_perfectly_even_with_equal_racks_and_rf_equal_to_racks(num_racks, per_rack, mult, data):
    # Kafka's promise: RF = #racks and equally sized racks → replicas even across brokers and racks.
    n = num_racks * per_rack
    racks = {i: f"rack{i % num_racks}" for i in range(n)}
    start = data.draw(st.integers(0, n - 1))
    shift = data.draw(st.integers(0, n - 1))
    result = assign_replicas(racked(racks), n * mult, num_racks, start_index=start, next_replica_shift=shift)
    replicas = Counter(b for r in result.values() for b in r)
    assert set(replicas.values()) == {mult * num_racks}
    assert all(len({racks[b] for b in r}) == num_racks for r in result.values())


# ----------------------------------------------------------------------------- adding partitions


def test_expansion_starts_at_partition_zeros_leader():
    # partition 0 led by broker 0 → start index 0 (also the shift); ids continue from 10.
    # p10: 10 is a multiple of 5, so the shift becomes 1: (0, 2, 3), and so on.
    result = assign_new_partitions(brokers(0, 1, 2, 3, 4), GOLDEN, 15, topic="t")
    assert result == {10: (0, 2, 3), 11: (1, 3, 4), 12: (2, 4, 0), 13: (3, 0, 1), 14: (4, 1, 2)}


def test_expansion_start_index_is_the_first_broker_at_or_above_the_leader():
    existing = {0: (3, 5), 1: (5, 1)}
    # sorted brokers [1, 3, 5]; first id >= 3 is at index 1 → start = shift = 1.
    # p2: first (2 + 1) % 3 = 0 → broker 1; follower at 0 + 1 + (1 + 0) % 2 = 2 → broker 5.
    assert assign_new_partitions(brokers(1, 3, 5), existing, 3, topic="t") == {2: (1, 5)}
    # A leader above every id → index 0.
    assert assign_new_partitions(brokers(1, 3, 5), {0: (9, 1)}, 2, topic="t") == (
        assign_replicas(brokers(1, 3, 5), 1, 2, start_index=0, first_partition=1)
    )


def test_expansion_errors():
    with pytest.raises(InvalidPartitionsError, match=r"^Topic already has 10 partition\(s\)\.$"):
        assign_new_partitions(brokers(0, 1, 2, 3, 4), GOLDEN, 10, topic="t")
    with pytest.raises(InvalidPartitionsError) as e:
        assign_new_partitions(brokers(0, 1, 2, 3, 4), GOLDEN, 4, topic="orders")
    assert e.value.message == "The topic orders currently has 10 partition(s); 4 would not be an increase."
    with pytest.raises(InvalidReplicationFactorError, match="only 2 broker"):
        assign_new_partitions(brokers(0, 1), GOLDEN, 12, topic="t")
    with pytest.raises(ControllerError, match="appears to have no partitions"):
        assign_new_partitions(brokers(0, 1), {}, 2, topic="t")
    assert check_partition_increase("t", 3, 5) == 2


# ----------------------------------------------------------------------------- manual assignments


def test_manual_assignment_accepted():
    result = validate_manual_assignment([(1, [2, 0]), (0, [0, 1])], registered={0, 1, 2}, active={0, 1, 2})
    assert result == {1: (2, 0), 0: (0, 1)}


@pytest.mark.parametrize(
    ("assignments", "kwargs", "error", "message"),
    [
        (
            [(0, [0])],
            {"replication_factor": 1},
            InvalidRequestError,
            "A manual partition assignment was specified, but replication factor was not set to -1.",
        ),
        (
            [(0, [0])],
            {"num_partitions": 1},
            InvalidRequestError,
            "A manual partition assignment was specified, but numPartitions was not set to -1.",
        ),
        (
            [(0, [0]), (0, [1])],
            {},
            InvalidReplicaAssignmentError,
            "Found multiple manual partition assignments for partition 0",
        ),
        (
            [(0, [])],
            {},
            InvalidReplicaAssignmentError,
            "The manual partition assignment includes an empty replica list.",
        ),
        (
            [(0, [0, 9])],
            {},
            InvalidReplicaAssignmentError,
            "The manual partition assignment includes broker 9, but no such broker is registered.",
        ),
        (
            [(0, [1, 0, 1])],
            {},
            InvalidReplicaAssignmentError,
            "The manual partition assignment includes the broker 1 more than once.",
        ),
        (
            [(0, [0, 1]), (1, [2])],
            {},
            InvalidReplicaAssignmentError,
            "The manual partition assignment includes a partition with 1 replica(s), but this is not consistent "
            "with previous partitions, which have 2 replica(s).",
        ),
        (
            [(0, [3])],
            {},
            InvalidReplicaAssignmentError,
            "All brokers specified in the manual partition assignment for partition 0 are fenced or in "
            "controlled shutdown.",
        ),
        (
            [(0, [0]), (2, [1])],
            {},
            InvalidReplicaAssignmentError,
            "partitions should be a consecutive 0-based integer sequence",
        ),
    ],
)
def test_manual_assignment_errors(assignments, kwargs, error, message):
    with pytest.raises(error) as e:
        validate_manual_assignment(assignments, registered={0, 1, 2, 3}, active={0, 1, 2}, **kwargs)
    assert e.value.message == message


def test_manual_new_partitions():
    common = {"topic": "t", "current_partitions": 2, "replication_factor": 2, "registered": {0, 1, 2}, "active": {0, 1}}
    assert validate_manual_new_partitions([[0, 1], [2, 0]], total_partitions=4, **common) == {2: (0, 1), 3: (2, 0)}
    with pytest.raises(InvalidReplicaAssignmentError) as e:
        validate_manual_new_partitions([[0, 1]], total_partitions=4, **common)
    assert e.value.message == "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified."
    with pytest.raises(InvalidReplicaAssignmentError, match="with 1 replica"):
        validate_manual_new_partitions([[0]], total_partitions=3, **common)
    with pytest.raises(InvalidReplicaAssignmentError, match="for partition 3 are fenced"):
        validate_manual_new_partitions([[0, 1], [2, 3]], total_partitions=4, **{**common, "registered": {0, 1, 2, 3}})
    with pytest.raises(InvalidPartitionsError, match="already has 2"):
        validate_manual_new_partitions([], total_partitions=2, **common)


def test_initial_isr_keeps_assignment_order_of_active_replicas():
    assert initial_isr((3, 1, 2), lambda b: b != 1) == (3, 2)
    assert initial_isr((1,), lambda b: False) == ()
    assert ALL_REPLICAS_FENCED == "All brokers are currently fenced or in controlled shutdown."
