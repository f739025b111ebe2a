"""`GroupShard`'s undo of writes that failed: what a refused append puts back, and what not.

Each case was found by the group simulation (tests/sim/groups/): an undo that put back an
offset over a later change, or a delete that had no undo at all, left the coordinator's
memory and the partition's log disagreeing, and an acknowledged commit or delete was lost
after the next coordinator move."""

from __future__ import annotations

from broker.group.messages import CommitPartition, CommitRequest
from broker.group.records import GroupKey, OffsetKey
from broker.group.shard import CoordinatorConfig, GroupShard
from quorum.kafka_errors import ErrorCode

REFUSED = ErrorCode.NOT_ENOUGH_REPLICAS


def commit(shard: GroupShard, offset: int, partition: int = 0) -> CommitRequest:
    return CommitRequest("g", "", None, -1, -1, (CommitPartition("t", partition, offset),), 8)


def offset_of(shard: GroupShard, partition: int = 0) -> int:
    (o,) = shard.fetch_offsets("g", [("t", partition)])
    return o.offset


def test_a_refused_commit_does_not_undo_a_later_one() -> None:
    shard = GroupShard(CoordinatorConfig())
    shard.commit(commit(shard, 3), 0)  # written
    refused, _ = shard.commit(commit(shard, 5), 1)
    later, errors = shard.commit(commit(shard, 7), 2)  # written and acknowledged
    assert errors == [ErrorCode.NONE]
    assert refused.undo is not None
    refused.undo(REFUSED)
    assert offset_of(shard) == 7
    # Its own change is still undone when nothing came after it.
    again, _ = shard.commit(commit(shard, 9), 3)
    assert again.undo is not None
    again.undo(REFUSED)
    assert offset_of(shard) == 7


def test_a_refused_offset_delete_puts_the_offsets_back() -> None:
    shard = GroupShard(CoordinatorConfig())
    shard.commit(commit(shard, 3), 0)
    top, errors, out = shard.delete_offsets("g", [("t", 0)])
    assert (top, errors) == (ErrorCode.NONE, [ErrorCode.NONE])
    assert offset_of(shard) == -1
    assert out.undo is not None
    out.undo(REFUSED)
    assert offset_of(shard) == 3


def test_a_refused_group_delete_puts_the_group_and_its_offsets_back() -> None:
    shard = GroupShard(CoordinatorConfig())
    shard.commit(commit(shard, 3), 0)
    code, out = shard.delete_group("g", 1)
    assert code == ErrorCode.NONE and "g" not in shard.groups
    assert out.undo is not None
    out.undo(REFUSED)
    assert offset_of(shard) == 3
    assert shard.groups["g"].state.value == "Empty"


def test_a_group_delete_tombstones_an_offset_whose_delete_is_still_being_written() -> None:
    shard = GroupShard(CoordinatorConfig())
    shard.commit(commit(shard, 3), 0)
    _, _, pending = shard.delete_offsets("g", [("t", 0)])  # its append is still out
    code, out = shard.delete_group("g", 1)
    assert code == ErrorCode.NONE
    assert (OffsetKey("g", "t", 0), None) in out.records
    assert (GroupKey("g"), None) in out.records
    # The first delete is refused after the group delete was written: nothing comes back.
    assert pending.undo is not None
    pending.undo(REFUSED)
    assert offset_of(shard) == -1


def test_a_refused_expiry_puts_the_offsets_and_the_group_back() -> None:
    shard = GroupShard(CoordinatorConfig(offsets_retention_ms=10))
    shard.commit(commit(shard, 3), 0)
    out = shard.expire_offsets(100)
    assert (GroupKey("g"), None) in out.records and "g" not in shard.groups
    assert out.undo is not None
    out.undo(REFUSED)
    assert offset_of(shard) == 3 and "g" in shard.groups


def test_two_refused_writes_of_one_offset_put_back_the_value_before_both() -> None:
    shard = GroupShard(CoordinatorConfig())
    first, _ = shard.commit(commit(shard, 3), 0)
    assert first.written is not None
    first.written()
    x, _ = shard.commit(commit(shard, 5), 1)
    y, _ = shard.commit(commit(shard, 7), 2)
    assert x.undo is not None and y.undo is not None
    x.undo(REFUSED)  # (the runtime settles in submission order)
    assert offset_of(shard) == 7
    y.undo(REFUSED)
    assert offset_of(shard) == 3  # not 5: that write failed too


def test_two_refused_deletes_put_the_offset_back() -> None:
    shard = GroupShard(CoordinatorConfig())
    shard.commit(commit(shard, 3), 0)
    _, _, first = shard.delete_offsets("g", [("t", 0)])
    _, _, second = shard.delete_offsets("g", [("t", 0)])  # tombstones it again
    assert first.undo is not None and second.undo is not None
    first.undo(REFUSED)
    second.undo(REFUSED)
    assert offset_of(shard) == 3
