"""`broker.group.write_order.WriteOrder`: when a coordinator partition's answers may go."""

from __future__ import annotations

from typing import Any

from broker.group.messages import JoinResult, SyncResult
from broker.group.records import GroupKey, OffsetKey, OffsetValue
from broker.group.shard import Outcome
from broker.group.write_order import WriteOrder
from quorum.kafka_errors import ErrorCode

RECORD = (OffsetKey("g", "t", 0), OffsetValue(1, -1, "", 0))


def released(order: WriteOrder) -> dict[int, Any]:
    out: dict[int, Any] = {}
    for r in order.drain():
        out.update(r.replies)
    return out


def test_answers_wait_for_their_own_append_and_every_earlier_one() -> None:
    order = WriteOrder()
    first = order.submit(Outcome([RECORD], {1: SyncResult(ErrorCode.NONE)}))
    second = order.submit(Outcome([(GroupKey("g"), None)], {2: SyncResult(ErrorCode.NONE)}))
    order.submit(Outcome([], {3: SyncResult(ErrorCode.NONE)}))
    assert released(order) == {}
    order.completed(second, ErrorCode.NONE)
    assert released(order) == {}  # the first append is still out
    order.completed(first, ErrorCode.NONE)
    assert set(released(order)) == {1, 2, 3}
    assert not order.pending()


def test_a_failed_append_answers_its_error_and_runs_the_undo() -> None:
    order = WriteOrder()
    undone: list[ErrorCode] = []

    def undo(code: ErrorCode) -> dict[int, Any]:
        undone.append(code)
        return {9: JoinResult(ErrorCode.REBALANCE_IN_PROGRESS)}

    before = order.submit(Outcome([RECORD], {}))
    n = order.submit(Outcome([RECORD], {1: SyncResult(ErrorCode.NONE)}, undo))
    order.completed(n, ErrorCode.NOT_ENOUGH_REPLICAS)
    assert undone == []  # undos run in submission order, as the answers go
    order.completed(before, ErrorCode.NONE)
    assert released(order) == {
        1: SyncResult(ErrorCode.COORDINATOR_NOT_AVAILABLE),
        9: JoinResult(ErrorCode.REBALANCE_IN_PROGRESS),
    }
    assert undone == [ErrorCode.NOT_ENOUGH_REPLICAS]


def test_written_runs_when_the_append_commits_in_submission_order() -> None:
    order = WriteOrder()
    seen: list[str] = []
    first = order.submit(Outcome([RECORD], {}, lambda code: seen.append("undo 1") or {}, lambda: seen.append("1")))
    second = order.submit(Outcome([RECORD], {}, lambda code: seen.append("undo 2") or {}, lambda: seen.append("2")))
    order.completed(second, ErrorCode.NOT_ENOUGH_REPLICAS)
    order.completed(first, ErrorCode.NONE)
    order.drain()
    assert seen == ["1", "undo 2"]


def test_an_answer_without_records_queued_behind_a_failed_append_fails_with_it() -> None:
    """A SyncGroup answered from the Stable state the leader's (then refused) group record made
    must not go out as a success: that generation was never written (found by the group
    simulation: two members answered the same partition in one generation)."""
    order = WriteOrder()
    leader = order.submit(Outcome([RECORD], {1: SyncResult(ErrorCode.NONE, assignment=b"a")}, lambda code: {}))
    order.submit(Outcome([], {2: SyncResult(ErrorCode.NONE, assignment=b"b")}))
    order.completed(leader, ErrorCode.NOT_ENOUGH_REPLICAS)
    answers = released(order)
    assert answers[2] == SyncResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    # An answer without records submitted after the failure is known goes as it is.
    order.submit(Outcome([], {3: SyncResult(ErrorCode.NONE)}))
    assert released(order) == {3: SyncResult(ErrorCode.NONE)}


def test_an_unloaded_partition_skips_the_undo() -> None:
    order = WriteOrder()
    undone: list[ErrorCode] = []
    n = order.submit(Outcome([RECORD], {1: SyncResult(ErrorCode.NONE)}, lambda code: undone.append(code) or {}))
    order.completed(n, ErrorCode.NOT_LEADER_OR_FOLLOWER, undo=False)
    assert undone == []
    assert released(order) == {1: SyncResult(ErrorCode.NOT_COORDINATOR)}
