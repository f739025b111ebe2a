"""KIP-848 subscriptions by regular expression (ConsumerGroupHeartbeat's SubscribedTopicRegex),
through `GroupShard.consumer_heartbeat` as the broker calls it: resolved against every topic
(whole names), again every REGEX_REFRESH_INTERVAL_MS, written with the member and resolved
again by a new coordinator without a rebalance."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

from broker.group.consumer_group import REGEX_REFRESH_INTERVAL_MS
from broker.group.messages import ConsumerHeartbeatRequest, ConsumerHeartbeatResult
from broker.group.records import ConsumerGroupMemberMetadataKey
from broker.group.shard import CoordinatorConfig, GroupShard
from quorum.kafka_errors import ErrorCode

E = ErrorCode
ids = itertools.count()


class Image:
    """The topics a metadata image holds: name -> (id, partitions)."""

    def __init__(self, **topics: int) -> None:
        self.topics: dict[str, tuple[uuid.UUID, int]] = {}
        for name, n in topics.items():
            self.add(name, n)

    def add(self, name: str, partitions: int) -> uuid.UUID:
        tid = uuid.uuid5(uuid.NAMESPACE_DNS, name)
        self.topics[name] = (tid, partitions)
        return tid


def shard() -> GroupShard:
    return GroupShard(CoordinatorConfig(), new_id=lambda prefix: f"{prefix}-{next(ids)}")


def hb(
    s: GroupShard,
    image: Image,
    member: str = "",
    epoch: int = 0,
    *,
    regex: str | None = None,
    names: tuple[str, ...] | None = None,
    owned: tuple[tuple[uuid.UUID, int], ...] | None = None,
    now: int = 0,
    log: list[tuple[Any, Any]] | None = None,
) -> ConsumerHeartbeatResult:
    req = ConsumerHeartbeatRequest(
        "g", member, epoch, None, None, 30_000, names, None, owned, "client", "/127.0.0.1", subscribed_regex=regex
    )
    result, out = s.consumer_heartbeat(req, image.topics.get, now, lambda: list(image.topics))
    if log is not None:
        log.extend(out.records)
    return result


def topics_of(result: ConsumerHeartbeatResult, image: Image) -> set[str]:
    by_id = {tid: name for name, (tid, _) in image.topics.items()}
    return {by_id[tid] for tid, _ in result.assignment or ()}


def test_a_regex_member_gets_the_topics_whose_whole_name_matches() -> None:
    image = Image(**{"orders-eu": 2, "orders-us": 2, "old-orders-eu": 2, "payments": 2})
    s = shard()
    a = hb(s, image, regex="orders-.*")
    assert a.error == E.NONE and a.member_epoch == 1
    assert topics_of(a, image) == {"orders-eu", "orders-us"}  # not old-orders-eu: the whole name must match
    assert len(a.assignment or ()) == 4
    # Names and a regex together: both count.
    b = hb(s, image, regex="orders-eu", names=("payments",))
    assert b.error == E.NONE
    described = {m.member_id: m for m in s.describe_consumer_group("g").members}
    assert described[b.member_id].subscribed_regex == "orders-eu"
    assert described[b.member_id].subscribed == ("payments",)


def test_a_topic_created_later_joins_the_subscription_at_the_next_refresh() -> None:
    image = Image(**{"orders-eu": 2})
    s = shard()
    a = hb(s, image, regex="orders-.*", now=0)
    image.add("orders-us", 3)
    early = hb(s, image, a.member_id, a.member_epoch, owned=a.assignment, now=REGEX_REFRESH_INTERVAL_MS - 1)
    assert early.member_epoch == a.member_epoch and topics_of(early, image) == {"orders-eu"}
    later = hb(s, image, a.member_id, a.member_epoch, owned=a.assignment, now=REGEX_REFRESH_INTERVAL_MS)
    assert later.member_epoch > a.member_epoch  # the group epoch moved: a new assignment
    assert topics_of(later, image) == {"orders-eu", "orders-us"} and len(later.assignment or ()) == 5
    # A deleted topic leaves it the same way.
    del image.topics["orders-eu"]
    gone = hb(s, image, a.member_id, later.member_epoch, owned=later.assignment, now=2 * REGEX_REFRESH_INTERVAL_MS)
    assert topics_of(gone, image) == {"orders-us"}


def test_a_changed_regex_is_resolved_at_once() -> None:
    image = Image(**{"orders-eu": 2, "payments": 2})
    s = shard()
    a = hb(s, image, regex="orders-.*")
    b = hb(s, image, a.member_id, a.member_epoch, regex="pay.*", owned=a.assignment, now=1)
    assert b.member_epoch == a.member_epoch  # orders-eu must be revoked first
    c = hb(s, image, a.member_id, b.member_epoch, owned=(), now=2)
    assert topics_of(c, image) == {"payments"}


def test_bad_regexes_and_empty_subscriptions_get_kafka_errors_and_the_group_keeps_serving() -> None:
    image = Image(**{"orders-eu": 2})
    s = shard()
    bad = hb(s, image, regex="orders-(")
    assert bad.error == E.INVALID_REGULAR_EXPRESSION and bad.message and "orders-(" in bad.message
    assert int(E.INVALID_REGULAR_EXPRESSION) == 128
    none = hb(s, image)
    assert none.error == E.INVALID_REQUEST
    a = hb(s, image, regex="orders-.*")
    assert a.error == E.NONE and topics_of(a, image) == {"orders-eu"}
    worse = hb(s, image, a.member_id, a.member_epoch, regex="[", owned=a.assignment)
    assert worse.error == E.INVALID_REGULAR_EXPRESSION
    still = hb(s, image, a.member_id, a.member_epoch, owned=a.assignment)
    assert still.error == E.NONE and topics_of(still, image) == {"orders-eu"}


def test_a_new_coordinator_resolves_the_written_regex_without_a_rebalance() -> None:
    image = Image(**{"orders-eu": 2, "orders-us": 2})
    s = shard()
    log: list[tuple[Any, Any]] = []
    a = hb(s, image, regex="orders-.*", log=log)
    a = hb(s, image, a.member_id, a.member_epoch, owned=a.assignment, log=log)
    written = [v for k, v in log if isinstance(k, ConsumerGroupMemberMetadataKey) and v is not None]
    assert written and written[-1].subscribed_topic_regex == "orders-.*"
    again = shard()
    for key, value in log:
        again.replay(key, value, 0)
    again.loaded(0)
    group = again.consumer_groups["g"]
    epoch = group.group_epoch
    r = hb(again, image, a.member_id, a.member_epoch, owned=a.assignment, now=1)
    assert r.error == E.NONE and r.member_epoch == a.member_epoch and group.group_epoch == epoch
    assert topics_of(r, image) == {"orders-eu", "orders-us"}
