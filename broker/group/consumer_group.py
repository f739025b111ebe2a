"""KIP-848 consumer groups (`group.protocol=consumer`): the data and the reconciliation rule.

The coordinator computes a target assignment for the whole group (the group's assignor,
`broker.group.assignors`) whenever the group epoch moves past the assignment epoch (a
member joined or left, a subscription or a subscribed topic's partition count changed).
Each member then moves towards its target on its own heartbeats (Kafka's
CurrentAssignmentBuilder), revoking before assigning:
- partitions it owns that its target does not hold are revoked first: the member stays in
  its epoch, in UNREVOKED_PARTITIONS, and gets only the partitions it keeps, until a
  heartbeat reports it no longer owns the revoked ones;
- then it takes the target epoch and those target partitions no other member still holds
  (in its assignment or pending revocation); the others wait (UNRELEASED_PARTITIONS) and
  are handed over on a later heartbeat, once released.
Invariant: a partition is in at most one member's `assigned` or `revoking` at any time.

The state of these groups is written to `__consumer_offsets` as Kafka's records of types
3-8 (`broker.group.consumer_records`) and loaded by the next coordinator with the offsets.

A member may subscribe by regular expression (KIP-848's SubscribedTopicRegex, matched with
Python's `re` against whole topic names where Kafka uses RE2/J): its topics are the names it
gave and those its regex matched at the last resolution (`GroupShard`, on its heartbeats).
The regex is written with the member; what it matched is not (Kafka's record type 16 is not
written): a new coordinator resolves it again at the member's first heartbeat.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Final
from uuid import UUID

TopicPartition = tuple[UUID, int]

# How often a group's regexes are matched again against the topics (ms), as Kafka's
# coordinator refreshes them at most every 10 s; a new or changed regex is resolved at once.
REGEX_REFRESH_INTERVAL_MS: Final = 10_000


class MemberState(IntEnum):
    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2


@dataclass(slots=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    subscribed: frozenset[str] = frozenset()
    server_assignor: str | None = None
    regex: str | None = None  # SubscribedTopicRegex (Python `re`, matching whole topic names)
    # The topics `regex` matched at the last resolution (None: not resolved since the load).
    regex_topics: frozenset[str] | None = None
    epoch: int = 0
    previous_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: set[TopicPartition] = field(default_factory=set)
    revoking: set[TopicPartition] = field(default_factory=set)

    def topics(self) -> frozenset[str]:
        """The topics the member subscribes to: by name and by its regex."""
        return self.subscribed | (self.regex_topics or frozenset())


@dataclass(slots=True)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, set[TopicPartition]] = field(default_factory=dict)
    topics: dict[str, tuple[UUID, int]] = field(default_factory=dict)  # subscribed topics' ids and sizes
    assignor: str = ""
    regex_resolved_ms: int = -REGEX_REFRESH_INTERVAL_MS  # when its regexes were last matched
    persisted: dict[Any, Any] = field(default_factory=dict)  # the records last written: key -> value
    # Members whose records may differ from `persisted` (None: any member): a heartbeat then
    # compares only those, not the whole group.
    dirty: set[str] | None = None

    def state(self) -> str:
        if not self.members:
            return "Empty"
        if self.assignment_epoch < self.group_epoch:
            return "Assigning"
        if any(m.epoch != self.assignment_epoch or m.state != MemberState.STABLE for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    def touch(self, member_id: str) -> None:
        if self.dirty is not None:
            self.dirty.add(member_id)

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.topics()}

    def held_by_others(self, member_id: str) -> set[TopicPartition]:
        return {tp for m in self.members.values() if m.member_id != member_id for tp in (*m.assigned, *m.revoking)}


def reconcile(group: ConsumerGroup, member: ConsumerMember, owned: set[TopicPartition] | None) -> None:
    """Move `member` towards its target (see the module doc). `owned`: the partitions the
    member reports owning in this heartbeat (None: not reported, unchanged)."""
    target = group.target.get(member.member_id, set())
    if member.state == MemberState.UNREVOKED_PARTITIONS:
        if owned is None or owned & member.revoking:
            return  # still revoking
        member.revoking = set()
    elif member.epoch == group.assignment_epoch and member.state == MemberState.STABLE:
        return
    revoke = member.assigned - target
    if revoke:
        member.assigned -= revoke
        member.revoking = revoke
        member.state = MemberState.UNREVOKED_PARTITIONS
        return
    taken = group.held_by_others(member.member_id)
    member.assigned = {tp for tp in target if tp not in taken}
    if member.epoch != group.assignment_epoch:
        member.previous_epoch, member.epoch = member.epoch, group.assignment_epoch
    member.state = MemberState.UNRELEASED_PARTITIONS if len(member.assigned) < len(target) else MemberState.STABLE
