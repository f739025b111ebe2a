"""The classic group protocol's data: a group, its members, its states (plain values, no IO).

States and their transitions (Kafka's ClassicGroupState):
  Empty -> PreparingRebalance; PreparingRebalance -> CompletingRebalance | Empty;
  CompletingRebalance -> Stable | PreparingRebalance; Stable -> PreparingRebalance;
  any -> Dead (the group was deleted or its partition unloaded).
The rules that move a group between them are `broker.group.shard.GroupShard`'s.

Invariants:
- `static_members` maps each `group.instance.id` of a member to that member's id, and
  nothing else;
- `leader` is a member id of `members`, or None when there are none;
- a member waits for at most one JoinGroup and one SyncGroup answer (`join_token`,
  `sync_token`, the runtime's ids of the waiting requests).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import Enum

Token = int  # the runtime's id of a request waiting for its answer


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]  # (name, metadata), in the member's preference order
    assignment: bytes = b""
    join_token: Token | None = None
    sync_token: Token | None = None

    def metadata(self, protocol: str) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def protocol_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.protocols)


@dataclass(slots=True)
class ClassicGroup:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)  # in join order
    pending_members: set[str] = field(default_factory=set)  # KIP-394: ids handed out, not joined yet
    static_members: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    current_state_timestamp: int = -1  # ms; when the group entered its state (expiry of Empty groups)
    # The initial rebalance delay (group.initial.rebalance.delay.ms), while it runs:
    initial_delay_active: bool = False
    initial_remaining_ms: int = 0
    new_member_added: bool = False

    def transition(self, state: GroupState, now_ms: int) -> None:
        self.state = state
        self.current_state_timestamp = now_ms

    @property
    def is_empty(self) -> bool:
        return not self.members

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def candidate_protocols(self) -> set[str]:
        """The protocols every member supports."""
        it = iter(self.members.values())
        first = next(it, None)
        if first is None:
            return set()
        common = set(first.protocol_names())
        for m in it:
            common &= set(m.protocol_names())
        return common

    def supports(self, protocol_type: str, protocols: tuple[str, ...]) -> bool:
        """Whether a member with these protocols may join (Kafka's supportsProtocols)."""
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        return protocol_type == self.protocol_type and bool(self.candidate_protocols() & set(protocols))

    def select_protocol(self) -> str:
        """Each member votes for its most preferred protocol among those every member
        supports; the most votes win (ties: the first member's preference order)."""
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = next(name for name in m.protocol_names() if name in candidates)
            votes[choice] = votes.get(choice, 0) + 1
        order = next(iter(self.members.values())).protocol_names()
        return max((name for name in order if name in votes), key=lambda name: votes[name])

    def all_joined(self) -> bool:
        return not self.pending_members and all(m.join_token is not None for m in self.members.values())

    def subscribed_topics(self) -> set[str] | None:
        """The topics the members subscribe to, for a "consumer" group in a known state;
        None when unknown (then every offset counts as subscribed)."""
        if self.protocol_type != "consumer" or self.protocol is None:
            return None if self.members else set()
        topics: set[str] = set()
        for m in self.members.values():
            mine = consumer_subscription_topics(m.metadata(self.protocol))
            if mine is None:
                return None
            topics |= mine
        return topics


def consumer_subscription_topics(metadata: bytes) -> set[str] | None:
    """The topics of a ConsumerProtocolSubscription (any version: int16 version, then an
    array of int16-length strings); None when the bytes do not parse."""
    try:
        (count,) = struct.unpack_from(">i", metadata, 2)
        pos = 6
        topics: set[str] = set()
        if count < 0 or count > len(metadata):
            return None
        for _ in range(count):
            (n,) = struct.unpack_from(">h", metadata, pos)
            pos += 2
            if n < 0 or pos + n > len(metadata):
                return None
            topics.add(metadata[pos : pos + n].decode("utf-8"))
            pos += n
        return topics
    except (struct.error, UnicodeDecodeError):
        return None
