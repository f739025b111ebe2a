"""`GroupShard`: who leads a generation (the member that sends the assignment)."""

from __future__ import annotations

from broker.group.messages import JoinRequest, JoinResult, SyncRequest
from broker.group.shard import CoordinatorConfig, GroupShard
from quorum.kafka_errors import ErrorCode

META = b"\x00\x00\x00\x00\x00\x01\x00\x01t\xff\xff\xff\xff"


def join(shard: GroupShard, member_id: str, instance: str | None, token: int, now: int) -> JoinResult | None:
    req = JoinRequest("g", member_id, instance, "consumer", (("range", META),), 10_000, 5_000, "c", "h", 5)
    reply = shard.join(req, token, now).replies.get(token)
    assert reply is None or isinstance(reply, JoinResult)
    return reply


def test_a_static_leader_that_does_not_rejoin_hands_the_lead_to_a_member_that_did() -> None:
    ids = iter(["s-1", "d-2"])
    shard = GroupShard(CoordinatorConfig(group_initial_rebalance_delay_ms=0), new_id=lambda prefix: next(ids))
    first = join(shard, "", "static", 1, 0)
    assert first is not None and first.leader == "s-1"
    shard.sync(SyncRequest("g", "s-1", "static", 1, "consumer", "range", (("s-1", b"x"),)), 2, 10)
    # A dynamic member joins (KIP-394: first the id); the static leader has crashed and stays
    # silent, kept (static) through the rebalance timeout.
    assert join(shard, "", None, 3, 20) == JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id="d-2")
    assert join(shard, "d-2", None, 4, 30) is None  # waits for the static leader
    out = shard.tick(30 + 5_000)
    answer = out.replies[4]
    assert isinstance(answer, JoinResult) and answer.error == ErrorCode.NONE
    assert answer.leader == "d-2"
    assert {m.member_id for m in answer.members} == {"s-1", "d-2"}  # the leader's answer lists them
