"""KIP-848 consumer groups: the assignors and the member reconciliation (revoke before
assign), through `GroupShard.consumer_heartbeat` as the broker calls it."""

from __future__ import annotations

import itertools
import uuid
from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from broker.group.assignors import range_assignment, uniform_assignment
from broker.group.consumer_group import MemberState
from broker.group.messages import CommitPartition, CommitRequest, ConsumerHeartbeatRequest, JoinRequest
from broker.group.shard import CoordinatorConfig, GroupShard
from quorum.kafka_errors import ErrorCode

E = ErrorCode
T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)
TOPICS = {"t1": (T1, 6), "t2": (T2, 3)}


@given(
    members=st.integers(1, 8),
    partitions=st.integers(0, 20),
    previous=st.lists(st.integers(0, 7), max_size=20),
)
def test_uniform_is_balanced_complete_and_sticky(members: int, partitions: int, previous: list[int]) -> None:
    names = [f"m{i}" for i in range(members)]
    subs = {m: frozenset({"t"}) for m in names}
    topics = {"t": (T1, partitions)}
    current = {
        m: {(T1, p) for p, owner in enumerate(previous[:partitions]) if owner % members == i}
        for i, m in enumerate(names)
    }
    out = uniform_assignment(subs, topics, current)
    flat = [tp for tps in out.values() for tp in tps]
    assert sorted(flat) == [(T1, p) for p in range(partitions)]  # every partition exactly once
    sizes = [len(out[m]) for m in names]
    assert max(sizes) - min(sizes) <= 1
    # Sticky: a member keeps min(what it had, its share) of its partitions.
    share = partitions // members
    for m in names:
        assert len(out[m] & current[m]) >= min(len(current[m]), share)


def test_range_gives_contiguous_ranges_per_topic_and_co_partitions() -> None:
    subs = {"a": frozenset({"t1", "t2"}), "b": frozenset({"t1", "t2"})}
    out = range_assignment(subs, TOPICS)
    assert out["a"] == {(T1, 0), (T1, 1), (T1, 2), (T2, 0), (T2, 1)}
    assert out["b"] == {(T1, 3), (T1, 4), (T1, 5), (T2, 2)}


ids = itertools.count()


def shard() -> GroupShard:
    return GroupShard(CoordinatorConfig(), new_id=lambda prefix: f"{prefix}-{next(ids)}")


def hb(s: GroupShard, member: str = "", epoch: int = 0, owned: set[tuple[uuid.UUID, int]] | None = None,
       subscribed: tuple[str, ...] | None = ("t1",), now: int = 0, **kw: object):  # type: ignore[no-untyped-def]  # fmt: skip
    req = ConsumerHeartbeatRequest(
        "g", member, epoch, kw.get("instance"), None, 30_000, subscribed, kw.get("assignor"),  # type: ignore[arg-type]
        None if owned is None else tuple(sorted(owned)), "client", "/127.0.0.1",
    )  # fmt: skip
    return s.consumer_heartbeat(req, TOPICS.get, now)[0]


def test_a_second_member_gets_partitions_only_after_the_first_revoked_them() -> None:
    s = shard()
    a = hb(s)
    assert a.error == E.NONE and a.member_epoch == 1 and len(a.assignment) == 6
    b = hb(s)
    assert b.member_epoch == 2 and b.assignment == ()  # its partitions are still a's
    a2 = hb(s, a.member_id, a.member_epoch, owned=set(a.assignment), subscribed=None)
    # a is asked to give up three partitions: it keeps its epoch until it did.
    assert a2.member_epoch == 1 and len(a2.assignment) == 3
    assert s.consumer_groups["g"].members[a.member_id].state == MemberState.UNREVOKED_PARTITIONS
    assert hb(s, b.member_id, b.member_epoch, owned=set(), subscribed=None).assignment == ()
    a3 = hb(s, a.member_id, a2.member_epoch, owned=set(a2.assignment), subscribed=None)  # revoked
    assert a3.member_epoch == 2 and a3.assignment == a2.assignment
    b2 = hb(s, b.member_id, b.member_epoch, owned=set(), subscribed=None)
    assert len(b2.assignment) == 3 and not set(b2.assignment) & set(a3.assignment)
    assert s.consumer_groups["g"].state() == "Stable"


def test_epoch_fencing_unknown_members_and_leaving() -> None:
    s = shard()
    a = hb(s)
    assert hb(s, a.member_id, a.member_epoch + 1, subscribed=None).error == E.FENCED_MEMBER_EPOCH
    assert hb(s, "nobody", 3, subscribed=None).error == E.UNKNOWN_MEMBER_ID
    assert hb(s, assignor="sticky").error == E.UNSUPPORTED_ASSIGNOR
    left = hb(s, a.member_id, -1, subscribed=None)
    assert left.error == E.NONE and left.member_epoch == -1
    assert s.consumer_groups["g"].state() == "Empty"


def test_a_silent_member_is_fenced_after_the_session_timeout() -> None:
    s = shard()
    a = hb(s, now=0)
    b = hb(s, now=0)
    hb(s, b.member_id, b.member_epoch, owned=set(), subscribed=None, now=40_000)
    s.tick(45_000)  # a's session (45 s) ran out
    assert list(s.consumer_groups["g"].members) == [b.member_id]
    b2 = hb(s, b.member_id, b.member_epoch, owned=set(), subscribed=None, now=45_001)
    assert len(b2.assignment) == 6 and a.member_id not in s.consumer_groups["g"].members


def test_commits_check_the_member_epoch_and_one_protocol_per_group() -> None:
    s = shard()
    a = hb(s)

    def commit(member: str, epoch: int) -> ErrorCode:
        req = CommitRequest("g", member, None, epoch, -1, (CommitPartition("t1", 0, 5),), 9)
        return s.commit(req, 0)[1][0]

    assert commit(a.member_id, a.member_epoch) == E.NONE
    assert commit(a.member_id, a.member_epoch - 1) == E.STALE_MEMBER_EPOCH
    assert commit("nobody", 1) == E.UNKNOWN_MEMBER_ID
    assert commit("", -1) == E.UNKNOWN_MEMBER_ID  # admin commits only to a group without members
    join = JoinRequest("g", "", None, "consumer", (("range", b""),), 10_000, 10_000, "c", "h", 5)
    assert s.join(join, 1, 0).replies[1].error == E.INCONSISTENT_GROUP_PROTOCOL
    assert [(g.group_id, g.group_type, g.state) for g in s.list_groups(None)] == [("g", "consumer", "Stable")]


def test_every_partition_is_held_by_at_most_one_member_at_every_step() -> None:
    s = shard()
    members: dict[str, tuple[int, set[tuple[uuid.UUID, int]]]] = {}
    for _ in range(3):
        r = hb(s)
        members[r.member_id] = (r.member_epoch, set(r.assignment))
    for _round in range(6):
        for m, (epoch, owned) in list(members.items()):
            r = hb(s, m, epoch, owned=owned, subscribed=None)
            assert r.error == E.NONE
            members[m] = (r.member_epoch, set(r.assignment))
            held = Counter(tp for _e, tps in members.values() for tp in tps)
            assert all(n == 1 for n in held.values()), held
    assert sorted(tp for _e, tps in members.values() for tp in tps) == [(T1, p) for p in range(6)]
    assert s.consumer_groups["g"].state() == "Stable"


def test_the_records_written_rebuild_the_group_on_a_new_coordinator() -> None:
    s = shard()
    log: list[tuple[object, object]] = []

    def beat(*args: object, **kw: object):  # type: ignore[no-untyped-def]
        req_member, epoch = args[0] if args else "", args[1] if len(args) > 1 else 0
        owned = kw.get("owned")
        req = ConsumerHeartbeatRequest(
            "g", req_member, epoch, None, None, 30_000, kw.get("subscribed", ("t1",)), None,  # type: ignore[arg-type]
            None if owned is None else tuple(sorted(owned)), "client", "/127.0.0.1",  # type: ignore[arg-type]
        )  # fmt: skip
        result, out = s.consumer_heartbeat(req, TOPICS.get, 0)
        log.extend(out.records)
        return result

    a = beat()
    b = beat()
    a = beat(a.member_id, a.member_epoch, owned=set(a.assignment), subscribed=None)
    a = beat(a.member_id, a.member_epoch, owned=set(a.assignment), subscribed=None)
    b = beat(b.member_id, b.member_epoch, owned=set(), subscribed=None)
    c = beat()
    beat(c.member_id, -1, subscribed=None)  # c leaves: its records become tombstones
    again = shard()
    for key, value in log:
        again.replay(key, value, 0)
    again.loaded(0)
    before, after = s.consumer_groups["g"], again.consumer_groups["g"]
    assert (after.group_epoch, after.assignment_epoch, after.topics) == (
        before.group_epoch, before.assignment_epoch, before.topics,
    )  # fmt: skip
    assert set(after.members) == {a.member_id, b.member_id}
    for m in after.members.values():
        old = before.members[m.member_id]
        assert (m.epoch, m.state, m.assigned, m.revoking, m.subscribed) == (
            old.epoch, old.state, old.assigned, old.revoking, old.subscribed,
        )  # fmt: skip
    assert after.target == before.target
    # The members carry on with the new coordinator at their epochs.
    r = again.consumer_heartbeat(
        ConsumerHeartbeatRequest("g", a.member_id, a.member_epoch, None, None, 30_000, None, None,
                                 tuple(sorted(a.assignment)), "client", "/h"), TOPICS.get, 1,
    )[0]  # fmt: skip
    assert r.error == E.NONE and r.member_epoch == again.consumer_groups["g"].assignment_epoch >= a.member_epoch


def test_a_steady_heartbeat_writes_nothing_and_a_failed_write_is_written_again() -> None:
    s = shard()

    def beat(member: str, epoch: int, owned: set[tuple[uuid.UUID, int]] | None, subscribed: tuple[str, ...] | None):  # type: ignore[no-untyped-def]  # noqa: E501
        req = ConsumerHeartbeatRequest(
            "g", member, epoch, None, None, 30_000, subscribed, None,
            None if owned is None else tuple(sorted(owned)), "client", "/h",
        )  # fmt: skip
        return s.consumer_heartbeat(req, TOPICS.get, 0)

    a, out = beat("", 0, set(), ("t1",))
    assert out.records  # the join is written
    steady, out = beat(a.member_id, a.member_epoch, set(a.assignment), None)
    assert steady.error == E.NONE and out.records == []  # nothing changed: nothing to write
    b, out = beat("", 0, set(), ("t1",))  # a second member: a new target for a too
    assert out.undo is not None
    out.undo(E.NOT_LEADER_OR_FOLLOWER)  # that write failed: the next change writes it all again
    _, again = beat(a.member_id, a.member_epoch, set(a.assignment), None)
    keys = {type(k).__name__ for k, _ in again.records}
    assert {
        "ConsumerGroupMemberMetadataKey",
        "ConsumerGroupTargetAssignmentMemberKey",
        "ConsumerGroupMetadataKey",
    } <= keys
    assert any(getattr(k, "member_id", None) == b.member_id for k, _ in again.records)
