"""The classic group protocol's rules (`broker.group.shard.GroupShard`), one behaviour each,
with Kafka's error codes; the simulation (tests/sim/groups) checks their interplay."""

from __future__ import annotations

import itertools
import struct
from typing import Any

import pytest

from broker.group.classic import GroupState
from broker.group.messages import (
    CommitPartition,
    CommitRequest,
    HeartbeatRequest,
    JoinRequest,
    JoinResult,
    LeavingMember,
    SyncRequest,
    SyncResult,
)
from broker.group.records import GroupKey, OffsetKey
from broker.group.shard import CoordinatorConfig, GroupShard, Outcome
from quorum.kafka_errors import ErrorCode

E = ErrorCode
G = "g"


def subscription(*topics: str) -> bytes:
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


def shard(delay: int = 0, **kw: Any) -> GroupShard:
    ids = itertools.count(1)
    return GroupShard(
        CoordinatorConfig(group_initial_rebalance_delay_ms=delay, **kw), new_id=lambda prefix: f"{prefix}-{next(ids)}"
    )


def join_req(member: str = "", instance: str | None = None, version: int = 5, session: int = 10_000,
             protocols: tuple[tuple[str, bytes], ...] = (("range", subscription("t")),)) -> JoinRequest:  # fmt: skip
    return JoinRequest(G, member, instance, "consumer", protocols, session, 30_000, "client", "/127.0.0.1", version)


tokens = itertools.count(100)


def join(s: GroupShard, now: int = 0, **kw: Any) -> tuple[int, Outcome]:
    t = next(tokens)
    return t, s.join(join_req(**kw), t, now)


def new_member(s: GroupShard, now: int = 0, **kw: Any) -> tuple[int, Outcome]:
    """KIP-394: the id first, then the join with it."""
    t, out = join(s, now, **kw)
    reply = out.replies[t]
    assert reply.error == E.MEMBER_ID_REQUIRED and reply.member_id
    return join(s, now, member=reply.member_id, **kw)


def stable_group(s: GroupShard, n: int = 2) -> list[str]:
    """n members, joined and synced; the leader first. Every id is handed out first (KIP-394),
    so the rebalance completes when the last pending member joins."""
    ids = []
    for _ in range(n):
        t, out = join(s)
        ids.append(out.replies[t].member_id)
    joins = [join(s, member=m) for m in ids]
    answers = joins[-1][1].replies
    assert all(answers[t].error == E.NONE for t, _ in joins)
    leader = answers[joins[0][0]].leader
    gen = answers[joins[0][0]].generation
    ordered = [leader] + [m for m in ids if m != leader]
    for m in ordered[1:]:
        s.sync(SyncRequest(G, m, None, gen, None, None, ()), next(tokens), 0)
    assignments = tuple((m, m.encode()) for m in ordered)
    out = s.sync(SyncRequest(G, leader, None, gen, None, None, assignments), next(tokens), 0)
    assert all(r.error == E.NONE for r in out.replies.values()) and len(out.replies) == n
    assert s.groups[G].state == GroupState.STABLE
    return ordered


def test_kip394_member_id_required_then_join_and_a_pending_id_expires() -> None:
    s = shard()
    t, out = join(s)
    assert out.replies[t].error == E.MEMBER_ID_REQUIRED
    assert out.replies[t].member_id in s.groups[G].pending_members
    s.tick(10_000)  # one session timeout later, the id is forgotten and the unused group with it
    assert G not in s.groups


def test_a_rebalance_completes_once_every_known_member_rejoined_and_only_the_leader_gets_members() -> None:
    s = shard()
    a_token, a_out = new_member(s)
    first = a_out.replies[a_token]
    assert first.error == E.NONE and first.generation == 1 and first.leader == first.member_id
    assert [m.member_id for m in first.members] == [first.member_id]
    # A second member: the group prepares a rebalance and waits for the first to rejoin.
    b_token, b_out = new_member(s)
    assert b_token not in b_out.replies and s.groups[G].state == GroupState.PREPARING_REBALANCE
    t, out = join(s, member=first.member_id)
    answers = out.replies
    assert answers[t].generation == 2 and answers[b_token].generation == 2
    assert len(answers[t].members) == 2 and answers[b_token].members == ()


def test_the_initial_rebalance_delay_holds_the_first_join_and_is_extended_by_newcomers() -> None:
    s = shard(delay=3000)
    t, out = new_member(s, now=0)
    assert t not in out.replies and s.next_deadline() == 3000
    t2, _ = new_member(s, now=1000)
    assert s.tick(2999).replies == {}
    out = s.tick(3000)  # a member joined meanwhile: another delay
    assert out.replies == {}
    out = s.tick(6000)
    assert {t, t2} <= set(out.replies) and out.replies[t].generation == 1


def test_sync_waits_for_the_leader_writes_the_group_and_answers_each_its_assignment() -> None:
    s = shard()
    a, b = stable_group(s)
    (key, value) = s._group_record(s.groups[G], 0)
    assert isinstance(key, GroupKey) and value is not None
    assert {m.member_id: m.assignment for m in value.members} == {a: a.encode(), b: b.encode()}


def test_heartbeat_errors() -> None:
    s = shard()
    a, b = stable_group(s)
    gen = s.groups[G].generation
    assert s.heartbeat(HeartbeatRequest(G, a, None, gen), 0) == E.NONE
    assert s.heartbeat(HeartbeatRequest(G, a, None, gen + 1), 0) == E.ILLEGAL_GENERATION
    assert s.heartbeat(HeartbeatRequest(G, "nobody", None, gen), 0) == E.UNKNOWN_MEMBER_ID
    assert s.heartbeat(HeartbeatRequest("other", a, None, gen), 0) == E.UNKNOWN_MEMBER_ID
    s.leave(G, [LeavingMember(b)], next(tokens), 0)
    assert s.heartbeat(HeartbeatRequest(G, a, None, gen), 0) == E.REBALANCE_IN_PROGRESS


def test_a_silent_member_is_removed_after_its_session_timeout_and_the_group_rebalances() -> None:
    s = shard()
    a, b = stable_group(s)
    s.heartbeat(HeartbeatRequest(G, a, None, s.groups[G].generation), 9_000)
    s.tick(10_000)  # b's session (10 s from its sync at 0) ran out; a heartbeated at 9 s
    assert b not in s.groups[G].members and a in s.groups[G].members
    assert s.groups[G].state == GroupState.PREPARING_REBALANCE


def test_leave_group_batch_with_unknown_and_static_members() -> None:
    s = shard()
    a, b = stable_group(s)
    t = next(tokens)
    out = s.leave(G, [LeavingMember(a), LeavingMember("nobody"), LeavingMember("", "no-instance")], t, 0)
    result = out.replies[t]
    assert [e for _, e in result.members] == [E.NONE, E.UNKNOWN_MEMBER_ID, E.UNKNOWN_MEMBER_ID]
    assert list(s.groups[G].members) == [b]


def test_static_member_rejoin_in_a_stable_group_takes_the_old_place_and_fences_the_old_id() -> None:
    s = shard()
    t1, out = join(s, instance="i1")  # static members get an id at once, no MEMBER_ID_REQUIRED
    old = out.replies[t1]
    assert old.error == E.NONE
    s.sync(SyncRequest(G, old.member_id, "i1", old.generation, None, None, ((old.member_id, b"p0"),)), 1, 0)
    t2, out = join(s, instance="i1")
    new = out.replies[t2]
    assert new.error == E.NONE and new.generation == old.generation and new.member_id != old.member_id
    assert out.records and isinstance(out.records[0][0], GroupKey)  # the new id is persisted
    assert s.groups[G].state == GroupState.STABLE
    assert s.heartbeat(HeartbeatRequest(G, old.member_id, "i1", old.generation), 0) == E.FENCED_INSTANCE_ID
    sync = s.sync(SyncRequest(G, new.member_id, "i1", new.generation, None, None, ()), 5, 0)
    assert sync.replies[5] == SyncResult(E.NONE, "consumer", "range", b"p0")


def commit(s: GroupShard, member: str, gen: int, *, version: int = 8, metadata: str = "", offset: int = 5,
           instance: str | None = None) -> tuple[Outcome, list[ErrorCode]]:  # fmt: skip
    req = CommitRequest(G, member, instance, gen, -1, (CommitPartition("t", 0, offset, 3, metadata),), version)
    return s.commit(req, 0)


def test_the_metadata_limit_counts_utf8_bytes() -> None:
    """offset.metadata.max.bytes is in UTF-8 bytes, not characters; "" passes any limit but a
    negative one."""
    s = shard(offset_metadata_max_bytes=4)
    assert commit(s, "", -1, metadata="")[1] == [E.NONE]
    assert commit(s, "", -1, metadata="\u00e9\u00e9")[1] == [E.NONE]  # 2 characters, 4 bytes
    assert commit(s, "", -1, metadata="\u00e9\u00e9a")[1] == [E.OFFSET_METADATA_TOO_LARGE]  # 3 characters, 5 bytes
    assert commit(s, "", -1, metadata="\U0001f600")[1] == [E.NONE]  # 1 character, 4 bytes
    assert commit(shard(offset_metadata_max_bytes=0), "", -1, metadata="")[1] == [E.NONE]
    assert commit(shard(offset_metadata_max_bytes=0), "", -1, metadata="a")[1] == [E.OFFSET_METADATA_TOO_LARGE]
    assert commit(shard(offset_metadata_max_bytes=-1), "", -1, metadata="")[1] == [E.OFFSET_METADATA_TOO_LARGE]


def test_a_refused_commit_removes_the_group_it_created() -> None:
    s = shard()
    out, errors = commit(s, "", -1)
    assert errors == [E.NONE] and G in s.groups
    assert out.undo is not None
    out.undo(E.NOT_ENOUGH_REPLICAS)
    assert G not in s.groups and G not in s.offsets
    # Committed: the group and its offset stay.
    out, _ = commit(s, "", -1)
    assert out.written is not None
    out.written()
    assert G in s.groups and s.offsets[G][("t", 0)].offset == 5


def test_commit_rules() -> None:
    s = shard()
    assert commit(s, "", 3)[1] == [E.ILLEGAL_GENERATION]  # an unknown group at a generation
    assert commit(s, "", 3, version=9)[1] == [E.GROUP_ID_NOT_FOUND]
    out, errors = commit(s, "", -1)  # a simple consumer: the group is created
    assert errors == [E.NONE] and out.records and G in s.groups
    s = shard()
    a, b = stable_group(s)
    gen = s.groups[G].generation
    assert commit(s, a, gen)[1] == [E.NONE]
    assert commit(s, a, gen + 1)[1] == [E.ILLEGAL_GENERATION]
    assert commit(s, "nobody", gen)[1] == [E.UNKNOWN_MEMBER_ID]
    assert commit(s, "", -1)[1] == [E.UNKNOWN_MEMBER_ID]  # a live group refuses commits from outside it
    assert commit(s, a, -1)[1] == [E.ILLEGAL_GENERATION]  # a member must give its generation
    assert commit(s, a, gen, metadata="x" * 4097)[1] == [E.OFFSET_METADATA_TOO_LARGE]
    # CompletingRebalance: REBALANCE_IN_PROGRESS.
    s.leave(G, [LeavingMember(b)], next(tokens), 0)
    join(s, member=a)
    assert s.groups[G].state == GroupState.COMPLETING_REBALANCE
    assert commit(s, a, s.groups[G].generation)[1] == [E.REBALANCE_IN_PROGRESS]


def test_a_failed_commit_write_restores_the_previous_offset() -> None:
    s = shard()
    commit(s, "", -1, offset=5)
    out, _ = commit(s, "", -1, offset=9)
    assert s.fetch_offsets(G, [("t", 0)])[0].offset == 9
    assert out.undo is not None
    out.undo(E.NOT_LEADER_OR_FOLLOWER)
    assert s.fetch_offsets(G, [("t", 0)])[0].offset == 5


def test_a_failed_group_write_after_sync_answers_an_error_and_rebalances() -> None:
    s = shard()
    t, out = new_member(s)
    a = out.replies[t]
    out = s.sync(SyncRequest(G, a.member_id, None, a.generation, None, None, ((a.member_id, b"x"),)), 7, 0)
    assert out.undo is not None
    answers = out.undo(E.NOT_LEADER_OR_FOLLOWER)
    assert answers[7] == SyncResult(E.NOT_COORDINATOR)
    assert s.groups[G].state == GroupState.PREPARING_REBALANCE


def test_replay_of_what_was_written_rebuilds_groups_and_offsets() -> None:
    s = shard()
    log: list[Any] = []
    a, b = stable_group(s)
    log.append(s._group_record(s.groups[G], 0))
    out, _ = commit(s, a, s.groups[G].generation, offset=42)
    log.extend(out.records)
    out, _ = commit(s, a, s.groups[G].generation, offset=43)
    log.extend(out.records)
    again = shard()
    for key, value in log:
        again.replay(key, value, 0)
    again.loaded(0)
    g = again.groups[G]
    assert g.state == GroupState.STABLE and g.leader == a and list(g.members) == [a, b]
    assert g.members[b].assignment == b.encode()
    assert again.fetch_offsets(G, None)[0].offset == 43
    again.replay(OffsetKey(G, "t", 0), None, 0)  # a tombstone deletes
    assert again.fetch_offsets(G, [("t", 0)])[0].offset == -1


def test_offsets_of_an_empty_group_expire_after_the_retention_and_the_group_goes() -> None:
    s = shard(offsets_retention_ms=1000)
    (a,) = stable_group(s, 1)
    assert commit(s, a, s.groups[G].generation)[1] == [E.NONE]
    s.leave(G, [LeavingMember(a)], next(tokens), 0)  # Empty from now (0 ms)
    assert s.groups[G].state == GroupState.EMPTY
    assert s.expire_offsets(999).records == []
    out = s.expire_offsets(1000)
    assert (OffsetKey(G, "t", 0), None) in out.records and (GroupKey(G), None) in out.records
    assert G not in s.groups


def test_delete_groups_and_offset_delete() -> None:
    s = shard()
    assert s.delete_group(G, 0)[0] == E.GROUP_ID_NOT_FOUND
    a, _b = stable_group(s)
    assert s.delete_group(G, 0)[0] == E.NON_EMPTY_GROUP
    commit(s, a, s.groups[G].generation)
    top, errors, _ = s.delete_offsets(G, [("t", 0), ("other", 0)])
    assert top == E.NONE and errors == [E.GROUP_SUBSCRIBED_TO_TOPIC, E.NONE]


def test_describe_and_list() -> None:
    s = shard()
    a, b = stable_group(s)
    d = s.describe(G)
    assert d.state == "Stable" and d.protocol == "range" and [m.member_id for m in d.members] == [a, b]
    assert s.describe("unknown").state == "Dead"
    assert [g.group_id for g in s.list_groups({"stable"})] == [G]
    assert s.list_groups({"Empty"}) == []


@pytest.mark.parametrize("session", [5_999, 1_800_001])
def test_session_timeouts_outside_the_broker_bounds_are_refused(session: int) -> None:
    s = shard()
    t, out = join(s, session=session)
    assert out.replies[t] == JoinResult(E.INVALID_SESSION_TIMEOUT, member_id="")
