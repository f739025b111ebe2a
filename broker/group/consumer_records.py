"""A KIP-848 consumer group as `__consumer_offsets` records (types 3-8, Kafka's schemas in
`broker.group.records`), and back.

Writing: after every change the group's wanted records (its epoch, its subscribed topics'
metadata, its target assignment epoch, and per member its metadata, target assignment and
current assignment) are compared with those last written (`ConsumerGroup.persisted`); only
the records that differ are written, and a tombstone for each key no longer wanted.
Reading: `replay` applies one record to the groups being loaded; the result is the group
those records describe, with `persisted` set to them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from uuid import UUID

from broker.group.consumer_group import ConsumerGroup, ConsumerMember, MemberState, TopicPartition
from broker.group.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    TopicMetadata,
    TopicPartitions,
)

__all__ = ["CONSUMER_KEYS", "changed_records", "replay"]

CONSUMER_KEYS = (
    ConsumerGroupMetadataKey,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupCurrentMemberAssignmentKey,
)


def _partitions(tps: Iterable[TopicPartition]) -> tuple[TopicPartitions, ...]:
    by_topic: dict[UUID, list[int]] = {}
    for topic_id, p in sorted(tps):
        by_topic.setdefault(topic_id, []).append(p)
    return tuple(TopicPartitions(t, tuple(ps)) for t, ps in by_topic.items())


def _set(tps: Iterable[TopicPartitions]) -> set[TopicPartition]:
    return {(t.topic_id, p) for t in tps for p in t.partitions}


def wanted(group: ConsumerGroup, members: Iterable[str] | None = None) -> dict[Any, Any]:
    """The records (key -> value) that describe `group` now: its own, and those of `members`
    (None: every member) that are in it."""
    g = group.group_id
    out: dict[Any, Any] = {
        ConsumerGroupPartitionMetadataKey(g): ConsumerGroupPartitionMetadataValue(
            tuple(TopicMetadata(tid, name, n) for name, (tid, n) in sorted(group.topics.items()))
        ),
    }
    chosen = group.members.values() if members is None else [group.members[m] for m in members if m in group.members]
    for m in chosen:
        out[ConsumerGroupMemberMetadataKey(g, m.member_id)] = ConsumerGroupMemberMetadataValue(
            m.instance_id, m.rack_id, m.client_id, m.client_host, tuple(sorted(m.subscribed)), m.regex,
            m.server_assignor, m.rebalance_timeout_ms,
        )  # fmt: skip
        out[ConsumerGroupTargetAssignmentMemberKey(g, m.member_id)] = ConsumerGroupTargetAssignmentMemberValue(
            _partitions(group.target.get(m.member_id, ()))
        )
        out[ConsumerGroupCurrentMemberAssignmentKey(g, m.member_id)] = ConsumerGroupCurrentMemberAssignmentValue(
            m.epoch, m.previous_epoch, int(m.state), _partitions(m.assigned), _partitions(m.revoking)
        )
    out[ConsumerGroupTargetAssignmentMetadataKey(g)] = ConsumerGroupTargetAssignmentMetadataValue(
        group.assignment_epoch
    )
    out[ConsumerGroupMetadataKey(g)] = ConsumerGroupMetadataValue(group.group_epoch)
    return out


def changed_records(group: ConsumerGroup, *, deleted: bool = False) -> list[tuple[Any, Any]]:
    """The records that bring what was written of `group` to what it is now (or, with
    `deleted`, tombstones for all of it); `group.persisted` is updated to match. Only the
    group's own records and those of its dirty members are compared (`ConsumerGroup.dirty`;
    all of them when it is None). Member tombstones come first and the group's epoch record
    last, as Kafka orders them."""
    before = group.persisted
    if deleted:
        gone = [(k, None) for k in before]
        gone.sort(key=lambda kv: isinstance(kv[0], ConsumerGroupMetadataKey))  # the group's own record last
        group.persisted = {}
        return gone
    scope = group.dirty
    now = wanted(group, scope)

    def in_scope(key: Any) -> bool:
        member = getattr(key, "member_id", None)
        return scope is None or member is None or member in scope

    gone = [(k, None) for k in before if k not in now and in_scope(k)]
    gone.sort(key=lambda kv: isinstance(kv[0], ConsumerGroupMetadataKey))
    changed = [(k, v) for k, v in now.items() if before.get(k) != v]
    persisted = dict(before)
    for k, _ in gone:
        del persisted[k]
    persisted.update(changed)
    group.persisted = persisted
    group.dirty = set()
    return [*gone, *changed]


def replay(groups: dict[str, ConsumerGroup], key: Any, value: Any) -> None:
    """Apply one consumer-group record (in log order) to `groups`."""
    g = key.group
    group = groups.get(g)
    if value is None:
        if group is None:
            return
        group.persisted.pop(key, None)
        if isinstance(key, ConsumerGroupMetadataKey):
            del groups[g]
        elif isinstance(key, ConsumerGroupMemberMetadataKey):
            group.members.pop(key.member_id, None)
        elif isinstance(key, ConsumerGroupTargetAssignmentMemberKey):
            group.target.pop(key.member_id, None)
        elif isinstance(key, ConsumerGroupCurrentMemberAssignmentKey):
            member = group.members.get(key.member_id)
            if member is not None:
                member.assigned, member.revoking = set(), set()
        return
    if group is None:
        group = groups[g] = ConsumerGroup(g)
    group.persisted[key] = value
    if isinstance(key, ConsumerGroupMetadataKey):
        group.group_epoch = value.epoch
    elif isinstance(key, ConsumerGroupPartitionMetadataKey):
        group.topics = {t.topic_name: (t.topic_id, t.num_partitions) for t in value.topics}
    elif isinstance(key, ConsumerGroupTargetAssignmentMetadataKey):
        group.assignment_epoch = value.assignment_epoch
    elif isinstance(key, ConsumerGroupTargetAssignmentMemberKey):
        group.target[key.member_id] = _set(value.topic_partitions)
    elif isinstance(key, ConsumerGroupMemberMetadataKey):
        member = _member(group, key.member_id)
        member.instance_id, member.rack_id = value.instance_id, value.rack_id
        member.client_id, member.client_host = value.client_id, value.client_host
        member.subscribed = frozenset(value.subscribed_topic_names)
        if value.subscribed_topic_regex != member.regex:
            member.regex, member.regex_topics = value.subscribed_topic_regex or None, None
        member.server_assignor = value.server_assignor
        member.rebalance_timeout_ms = value.rebalance_timeout_ms
    elif isinstance(key, ConsumerGroupCurrentMemberAssignmentKey):
        member = _member(group, key.member_id)
        member.epoch, member.previous_epoch = value.member_epoch, value.previous_member_epoch
        member.state = MemberState(value.state) if value.state in (0, 1, 2) else MemberState.STABLE
        member.assigned = _set(value.assigned_partitions)
        member.revoking = _set(value.partitions_pending_revocation)


def _member(group: ConsumerGroup, member_id: str) -> ConsumerMember:
    member = group.members.get(member_id)
    if member is None:
        member = group.members[member_id] = ConsumerMember(member_id, None, None, "", "", 0)
    return member
