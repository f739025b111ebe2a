"""Transactional offset commits in the group coordinator (`GroupShard.txn_commit`,
`complete_transaction`, `replay_marker`, OffsetFetch's require_stable), Kafka 3.9's
OffsetMetadataManager rules, one behaviour each."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

from broker.group.classic import GroupState
from broker.group.messages import (
    CommitPartition,
    CommitRequest,
    ConsumerHeartbeatRequest,
    LeavingMember,
    TxnCommitRequest,
)
from broker.group.records import OffsetKey, OffsetValue
from broker.group.shard import CoordinatorConfig, GroupShard, Outcome
from quorum.kafka_errors import ErrorCode
from tests.unit.group.test_group_shard import G, join, shard, stable_group, tokens

E = ErrorCode
PID = 1000
TP = ("t", 0)


def txn(
    s: GroupShard, offset: int = 7, *, pid: int = PID, epoch: int = 0, member: str = "", generation: int = -1,
    instance: str | None = None, metadata: str = "", partition: int = 0, group: str = G,
) -> tuple[Outcome, list[ErrorCode]]:  # fmt: skip
    req = TxnCommitRequest(
        group, pid, epoch, (CommitPartition("t", partition, offset, 3, metadata),), member, instance, generation, "tx"
    )
    return s.txn_commit(req, 1_000)


def plain(s: GroupShard, offset: int, *, partition: int = 0) -> Outcome:
    out, errors = s.commit(CommitRequest(G, "", None, -1, -1, (CommitPartition("t", partition, offset),), 8), 2_000)
    assert errors == [E.NONE]
    return out


def fetched(s: GroupShard, *, stable: bool = False, partition: int = 0) -> tuple[int, ErrorCode]:
    (o,) = s.fetch_offsets(G, [("t", partition)], require_stable=stable)
    return o.offset, o.error


def written(out: Outcome) -> Outcome:
    """The outcome's append committed."""
    if out.written is not None:
        out.written()
    return out


# ------------------------------------------------------------------ pending, commit, abort


def test_a_transactional_offset_is_pending_invisible_and_unstable_until_its_transaction_ends() -> None:
    s = shard()
    written(plain(s, 3))
    out, errors = txn(s, 7)
    assert errors == [E.NONE]
    assert out.producer == (PID, 0)  # the runtime writes it as the producer's transactional batch
    assert out.records == [(OffsetKey(G, "t", 0), OffsetValue(7, 3, "", 1_000))]
    assert fetched(s) == (3, E.NONE)  # the committed offset, never the pending one
    assert fetched(s, stable=True) == (-1, E.UNSTABLE_OFFSET_COMMIT)
    assert fetched(s, stable=True, partition=1) == (-1, E.NONE)  # no pending offset there
    # Fetching all of the group's offsets: the same rule for the partitions it has.
    (every,) = s.fetch_offsets(G, None, require_stable=True)
    assert (every.topic, every.partition, every.error) == ("t", 0, E.UNSTABLE_OFFSET_COMMIT)


def test_commit_makes_the_pending_offsets_committed() -> None:
    s = shard()
    written(plain(s, 3))
    txn(s, 7)
    txn(s, 8, partition=1)
    s.complete_transaction(PID, committed=True)
    assert fetched(s, stable=True) == (7, E.NONE)
    assert fetched(s, stable=True, partition=1) == (8, E.NONE)
    assert s.pending_txn == {}


def test_abort_drops_the_pending_offsets() -> None:
    s = shard()
    written(plain(s, 3))
    txn(s, 7)
    s.complete_transaction(PID, committed=False)
    assert fetched(s, stable=True) == (3, E.NONE)
    assert s.pending_txn == {}
    s.complete_transaction(PID, committed=True)  # a marker with nothing pending: nothing happens
    assert fetched(s) == (3, E.NONE)


def test_a_later_offset_of_the_same_transaction_replaces_its_earlier_one() -> None:
    s = shard()
    txn(s, 7)
    txn(s, 9)
    s.complete_transaction(PID, committed=True)
    assert fetched(s) == (9, E.NONE)


def test_transactions_of_two_producers_complete_apart() -> None:
    s = shard()
    txn(s, 7, pid=1)
    txn(s, 8, pid=2, partition=1)
    s.complete_transaction(1, committed=False)
    assert fetched(s, stable=True, partition=1) == (-1, E.UNSTABLE_OFFSET_COMMIT)
    s.complete_transaction(2, committed=True)
    assert fetched(s, stable=True) == (-1, E.NONE) and fetched(s, partition=1) == (8, E.NONE)


def test_a_plain_commit_written_after_the_transactional_one_wins_at_commit() -> None:
    """Kafka's rule: the committed offset is the one whose record is later in the log."""
    s = shard()
    txn(s, 7)
    written(plain(s, 5))
    s.complete_transaction(PID, committed=True)
    assert fetched(s) == (5, E.NONE)


def test_a_plain_commit_written_before_the_transactional_one_is_replaced_at_commit() -> None:
    s = shard()
    written(plain(s, 50))
    txn(s, 7)
    s.complete_transaction(PID, committed=True)
    assert fetched(s) == (7, E.NONE)


# ------------------------------------------------------------------ errors


def test_txn_commit_errors_for_an_unknown_or_empty_group() -> None:
    s = shard()
    assert txn(s, group="")[1] == [E.INVALID_GROUP_ID]
    assert txn(s, generation=1)[1] == [E.ILLEGAL_GENERATION]  # unknown group at a generation
    assert G not in s.groups and s.pending_txn == {}
    out, errors = txn(s, metadata="x" * 4097)
    assert errors == [E.OFFSET_METADATA_TOO_LARGE] and not out.records
    assert G not in s.groups and s.pending_txn == {}  # nothing accepted: nothing kept
    assert txn(s)[1] == [E.NONE]  # generation -1: a simple group is created
    assert G in s.groups and s.groups[G].state == GroupState.EMPTY


def test_txn_commit_checks_the_member_and_generation_as_offset_commit_does() -> None:
    s = shard()
    a, _b = stable_group(s)
    gen = s.groups[G].generation
    assert txn(s, member=a, generation=gen)[1] == [E.NONE]
    assert txn(s, member=a, generation=gen + 1)[1] == [E.ILLEGAL_GENERATION]
    assert txn(s, member="nobody", generation=gen)[1] == [E.UNKNOWN_MEMBER_ID]
    assert txn(s, member="", generation=gen)[1] == [E.UNKNOWN_MEMBER_ID]
    # v0-2 carry no member and generation -1: accepted whatever the group's state (Kafka).
    assert txn(s)[1] == [E.NONE]


def test_txn_commit_is_accepted_during_completing_rebalance() -> None:
    """No REBALANCE_IN_PROGRESS for TxnOffsetCommit (Kafka checks the group state only for
    plain commits)."""
    s = shard()
    a, b = stable_group(s)
    s.leave(G, [LeavingMember(b)], next(tokens), 0)
    join(s, member=a)
    assert s.groups[G].state == GroupState.COMPLETING_REBALANCE
    gen = s.groups[G].generation
    req = CommitRequest(G, a, None, gen, -1, (CommitPartition("t", 0, 1),), 8)
    assert s.commit(req, 0)[1] == [E.REBALANCE_IN_PROGRESS]
    assert txn(s, member=a, generation=gen)[1] == [E.NONE]


def test_txn_commit_from_a_replaced_static_member_is_fenced() -> None:
    s = shard()
    t, out = join(s, instance="i1")
    old = out.replies[t].member_id
    t, out = join(s, instance="i1")  # the same instance, no member id: it replaces the old one
    new = next(r.member_id for r in out.replies.values() if r.member_id != old)
    gen = s.groups[G].generation
    assert txn(s, member=old, instance="i1", generation=gen)[1] == [E.FENCED_INSTANCE_ID]
    assert txn(s, member=new, instance="i1", generation=gen)[1] == [E.NONE]


def test_txn_commit_to_a_kip848_group_answers_illegal_generation_for_a_stale_epoch() -> None:
    s = GroupShard(CoordinatorConfig(), new_id=lambda prefix: f"{prefix}-{next(_ids)}")
    topics = {"t": (uuid.UUID(int=1), 2)}
    req = ConsumerHeartbeatRequest(
        G, "", 0, None, None, 30_000, ("t",), None, None, "client", "/127.0.0.1"
    )  # fmt: skip
    result = s.consumer_heartbeat(req, topics.get, 0)[0]
    assert result.error == E.NONE
    member, epoch = result.member_id, result.member_epoch
    assert txn(s, member=member, generation=epoch)[1] == [E.NONE]
    assert txn(s, member=member, generation=epoch + 1)[1] == [E.ILLEGAL_GENERATION]  # not STALE_MEMBER_EPOCH
    assert txn(s, member="nobody", generation=epoch)[1] == [E.UNKNOWN_MEMBER_ID]


_ids = itertools.count()


# ------------------------------------------------------------------ failed writes, deletes, expiry


def test_a_failed_txn_commit_write_restores_the_pending_offsets() -> None:
    s = shard()
    txn(s, 7)
    out, _ = txn(s, 9)
    assert out.undo is not None
    out.undo(E.INVALID_PRODUCER_EPOCH)
    s.complete_transaction(PID, committed=True)
    assert fetched(s) == (7, E.NONE)  # the write that failed is not part of the transaction
    s = shard()
    out, _ = txn(s, 7)
    assert out.undo is not None
    out.undo(E.NOT_LEADER_OR_FOLLOWER)
    assert s.pending_txn == {} and G not in s.groups  # the simple group it created goes too


def test_failed_writes_of_one_transaction_never_put_back_a_value_whose_own_write_failed() -> None:
    """Two writes of the same partition in one transaction, both refused (undone in order):
    the first's undo must not keep its value over the second, nor the second's put the
    first's back (found by the transactional simulation)."""
    s = shard()
    first, _ = txn(s, 7)
    second, _ = txn(s, 9)
    assert first.undo is not None and second.undo is not None
    first.undo(E.NOT_ENOUGH_REPLICAS)
    second.undo(E.NOT_ENOUGH_REPLICAS)
    assert fetched(s, stable=True) == (-1, E.NONE) and s.pending_txn == {}
    # The first refused, the second written: the second's value stays.
    s = shard()
    first, _ = txn(s, 7)
    second, _ = txn(s, 9)
    assert first.undo is not None
    first.undo(E.NOT_ENOUGH_REPLICAS)
    written(second)
    s.complete_transaction(PID, committed=True)
    assert fetched(s) == (9, E.NONE)


def test_a_refused_plain_commit_after_a_transactions_record_gives_back_the_transactions_offset() -> None:
    """The transaction commits while a later plain commit of the partition is being written:
    the plain one wins (later in the log); refused, it is undone to the transaction's offset,
    not to the value before both (found by the transactional simulation)."""
    s = shard()
    written(plain(s, 3))
    txn(s, 7)
    later = plain(s, 5)
    s.complete_transaction(PID, committed=True)
    assert fetched(s) == (5, E.NONE)
    assert later.undo is not None
    later.undo(E.NOT_ENOUGH_REPLICAS)
    assert fetched(s) == (7, E.NONE)


def test_offset_delete_drops_pending_offsets_and_a_failed_delete_puts_them_back() -> None:
    s = shard()
    txn(s, 7)
    top, errors, out = s.delete_offsets(G, [TP])
    assert top == E.NONE and errors == [E.NONE]
    assert out.records == [(OffsetKey(G, "t", 0), None)]  # a tombstone, though nothing is committed
    assert fetched(s, stable=True) == (-1, E.NONE)
    assert out.undo is not None
    out.undo(E.NOT_LEADER_OR_FOLLOWER)
    assert fetched(s, stable=True) == (-1, E.UNSTABLE_OFFSET_COMMIT)
    _top, _errors, out = s.delete_offsets(G, [TP])
    written(out)
    s.complete_transaction(PID, committed=True)
    assert fetched(s) == (-1, E.NONE)  # the tombstone came after it: nothing to commit


def delete(s: GroupShard) -> Outcome:
    _top, _errors, out = s.delete_offsets(G, [TP])
    return out


def undo(out: Outcome) -> None:
    assert out.undo is not None
    out.undo(E.NOT_ENOUGH_REPLICAS)


# The orders of refused tombstones and transactional writes of one partition that the
# transactional simulation found (each the state a replay of the written records gives):


def test_a_refused_tombstone_then_a_refused_later_write_leave_the_offset_before_both() -> None:
    s = shard()
    written(txn(s, 7)[0])
    tombstone = delete(s)
    later, _ = txn(s, 9)  # the same transaction writes the partition again
    undo(tombstone)
    undo(later)
    assert fetched(s, stable=True) == (-1, E.UNSTABLE_OFFSET_COMMIT)
    s.complete_transaction(PID, committed=True)
    assert fetched(s) == (7, E.NONE)


def test_a_refused_write_then_a_refused_tombstone_bring_back_nothing() -> None:
    s = shard()
    first, _ = txn(s, 7)
    tombstone = delete(s)
    undo(first)
    undo(tombstone)
    assert fetched(s, stable=True) == (-1, E.NONE)
    s.complete_transaction(PID, committed=True)
    assert fetched(s) == (-1, E.NONE)


def test_a_refused_tombstone_behind_a_later_one_does_not_bring_the_pending_offset_back() -> None:
    s = shard()
    written(txn(s, 7)[0])
    first, second = delete(s), delete(s)
    undo(first)
    written(second)
    assert fetched(s, stable=True) == (-1, E.NONE)
    s.complete_transaction(PID, committed=True)
    assert fetched(s) == (-1, E.NONE)


def test_a_transaction_committed_while_its_offsets_tombstone_is_written_keeps_them_if_it_is_refused() -> None:
    s = shard()
    written(txn(s, 7)[0])
    tombstone = delete(s)
    s.complete_transaction(PID, committed=True)  # the marker was before the tombstone in the log
    assert fetched(s) == (-1, E.NONE)
    undo(tombstone)
    assert fetched(s) == (7, E.NONE)


def test_deleting_a_group_writes_tombstones_for_its_pending_offsets() -> None:
    s = shard()
    txn(s, 7, partition=1)
    code, out = s.delete_group(G, 0)
    assert code == E.NONE
    assert (OffsetKey(G, "t", 1), None) in out.records
    written(out)
    s.complete_transaction(PID, committed=True)
    assert s.fetch_offsets(G, None) == []


def test_an_offset_with_a_pending_transactional_one_is_not_expired() -> None:
    s = shard()
    written(plain(s, 3))
    written(plain(s, 4, partition=1))
    txn(s, 7)
    out = s.expire_offsets(10**12)
    assert out.records == [(OffsetKey(G, "t", 1), None)]  # only the partition without one
    assert G in s.groups  # and the group stays (an open transaction holds its offsets)


# ------------------------------------------------------------------ replay


def replay_all(log: list[tuple[Any, ...]]) -> GroupShard:
    """A new shard loaded from `log`: (offset, key, value, producer id) records and
    ("marker", offset, producer id, committed) entries, in log order."""
    s = shard()
    for entry in log:
        if entry[0] == "marker":
            s.replay_marker(entry[2], entry[3], offset=entry[1])
        else:
            offset, key, value, pid = entry
            s.replay(key, value, 0, offset=offset, producer_id=pid)
    s.loaded(0)
    return s


def test_replay_puts_transactional_records_in_pending_and_markers_complete_them() -> None:
    k0, k1 = OffsetKey(G, "t", 0), OffsetKey(G, "t", 1)
    log: list[tuple[Any, ...]] = [
        (0, k0, OffsetValue(3, -1, "", 0), -1),
        (1, k0, OffsetValue(7, -1, "", 0), 1),  # producer 1: committed below
        (2, k1, OffsetValue(8, -1, "", 0), 2),  # producer 2: aborted below
        (3, k0, OffsetValue(9, -1, "", 0), 3),  # producer 3: still open
        ("marker", 4, 1, True),
        ("marker", 5, 2, False),
    ]
    s = replay_all(log)
    assert fetched(s) == (7, E.NONE)
    assert fetched(s, partition=1) == (-1, E.NONE)
    assert fetched(s, stable=True) == (-1, E.UNSTABLE_OFFSET_COMMIT)
    assert set(s.pending_txn) == {3}


def test_replay_keeps_kafkas_order_rule_by_log_offset() -> None:
    k0 = OffsetKey(G, "t", 0)
    v5, v7 = OffsetValue(5, -1, "", 0), OffsetValue(7, -1, "", 0)
    later_plain = [(0, k0, v7, 1), (1, k0, v5, -1), ("marker", 2, 1, True)]
    assert fetched(replay_all(later_plain)) == (5, E.NONE)
    earlier_plain = [(0, k0, v5, -1), (1, k0, v7, 1), ("marker", 2, 1, True)]
    assert fetched(replay_all(earlier_plain)) == (7, E.NONE)
    tombstone = [(0, k0, v7, 1), (1, k0, None, -1), ("marker", 2, 1, True)]
    assert fetched(replay_all(tombstone)) == (-1, E.NONE)


def test_a_replay_of_what_was_written_gives_the_same_offsets_and_pending_ones() -> None:
    s = shard()
    log: list[tuple[Any, ...]] = []

    def keep(out: Outcome, pid: int = -1) -> None:
        for key, value in out.records:
            log.append((len(log), key, value, pid))
        written(out)

    keep(plain(s, 3))
    keep(txn(s, 7, pid=1)[0], 1)
    keep(plain(s, 4, partition=1))
    keep(txn(s, 8, pid=2, partition=1)[0], 2)
    keep(txn(s, 9, pid=3, partition=2)[0], 3)
    keep(plain(s, 5, partition=1))
    for pid, committed in ((1, True), (2, True)):
        s.complete_transaction(pid, committed)
        log.append(("marker", len(log), pid, committed))
    again = replay_all(log)
    for p in range(3):
        for stable in (False, True):
            assert fetched(again, partition=p, stable=stable) == fetched(s, partition=p, stable=stable)
    assert {pid: set(v) for pid, v in again.pending_txn.items()} == {pid: set(v) for pid, v in s.pending_txn.items()}
