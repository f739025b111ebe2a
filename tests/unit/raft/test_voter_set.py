"""VoterSet and OffsetHistory: KIP-853's voter-set rules as plain values."""

from __future__ import annotations

import uuid

from quorum.raft.voter_set import ZERO_UUID, OffsetHistory, ReplicaKey, VoterNode, VoterSet

A, B = uuid.uuid4(), uuid.uuid4()


def test_add_remove_update_follow_kafkas_rules() -> None:
    vs = VoterSet.of([VoterNode(ReplicaKey(1, A))])
    assert vs.add(VoterNode(ReplicaKey(1, B))) is None  # DUPLICATE_VOTER: the id is taken
    two = vs.add(VoterNode(ReplicaKey(2, B)))
    assert two is not None and two.ids == {1, 2}
    assert two.remove(ReplicaKey(2, A)) is None  # another directory: not that voter
    assert two.remove(ReplicaKey(2, B)) == vs
    assert vs.remove(ReplicaKey(1, A)) is None  # never the last voter
    assert two.update(VoterNode(ReplicaKey(3, A))) is None


def test_zero_directory_id_matches_any() -> None:
    static = VoterSet.static([1, 2, 3])
    assert static.is_voter(ReplicaKey(2, A))
    dynamic = VoterSet.of([VoterNode(ReplicaKey(2, A))])
    assert dynamic.is_voter(ReplicaKey(2, ZERO_UUID)) and dynamic.is_voter(ReplicaKey(2, A))
    assert not dynamic.is_voter(ReplicaKey(2, B))  # a wiped disk is a new replica


def test_overlapping_majority_only_one_change_apart() -> None:
    s3 = VoterSet.static([1, 2, 3])
    assert s3.overlaps_majority(VoterSet.static([1, 2, 3, 4]))
    assert s3.overlaps_majority(VoterSet.static([1, 2]))
    assert not s3.overlaps_majority(VoterSet.static([1, 2, 3, 4, 5]))
    assert not s3.overlaps_majority(VoterSet.static([1, 2, 4]))  # a swap is two changes


def test_history_value_at_truncate_and_compact() -> None:
    h: OffsetHistory[str] = OffsetHistory("boot")
    h.add(5, "a")
    h.add(9, "b")
    assert [h.value_at(o) for o in (0, 4, 5, 8, 9, 100)] == ["boot", "boot", "a", "a", "b", "b"]
    h.truncate_from(9)
    assert h.latest() == "a" and h.latest_offset() == 5
    h.add(12, "c")
    h.compact_before(10)
    assert h.base == "a" and h.entries == [(12, "c")]
