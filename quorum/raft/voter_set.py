"""The set of voters (KIP-853) and its history along the log, as plain values.

A replica is named by its `ReplicaKey`: the node id and the directory id written in
its `meta.properties` at format time (`directory.id`). A controller whose disk was
wiped gets a new directory id: it is a new replica, not the voter it replaces.

kraft.version 0 is the static `controller.quorum.voters` configuration: the voters
are ids only (directory id `ZERO_UUID`) and never change. kraft.version 1 keeps the
voter set in the log as VotersRecord control records (and in snapshots); the voter
set in force at an offset is the last VotersRecord at or before it. As Kafka does,
elections and the high watermark use the *latest* voter set in the log, committed or
not; the leader lets at most one change be uncommitted at a time, so two voter sets in
use at once always share a majority.
"""

from __future__ import annotations

import uuid
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from mypy_extensions import mypyc_attr

from quorum.raft.types import NodeId, Offset

ZERO_UUID = uuid.UUID(int=0)
KRAFT_VERSION_STATIC = 0  # controller.quorum.voters, no voter-set records
KRAFT_VERSION_DYNAMIC = 1  # KIP-853: VotersRecord in the log


@dataclass(frozen=True, slots=True, order=True)
class ReplicaKey:
    node_id: NodeId
    directory_id: uuid.UUID = ZERO_UUID


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One listener of a voter (VotersRecord's Endpoint): e.g. ("CONTROLLER", host, port)."""

    name: str
    host: str
    port: int  # 0..65535 (uint16 on the wire)


@dataclass(frozen=True, slots=True)
class VoterNode:
    key: ReplicaKey
    endpoints: tuple[Endpoint, ...] = ()
    min_kraft_version: int = 0  # the kraft.version range the replica supports
    max_kraft_version: int = KRAFT_VERSION_DYNAMIC

    @property
    def node_id(self) -> NodeId:
        return self.key.node_id


@dataclass(frozen=True, slots=True)
class VoterSet:
    """Voters by node id; at most one replica per node id (Kafka's VoterSet)."""

    nodes: tuple[VoterNode, ...]  # sorted by node id

    @staticmethod
    def of(nodes: Iterable[VoterNode]) -> VoterSet:
        ordered = tuple(sorted(nodes, key=lambda n: n.node_id))
        ids = [n.node_id for n in ordered]
        if len(set(ids)) != len(ids):
            raise ValueError(f"a voter set holds each node id once: {ids}")
        return VoterSet(ordered)

    @staticmethod
    def static(ids: Iterable[NodeId]) -> VoterSet:
        """kraft.version 0: ids only, from controller.quorum.voters."""
        return VoterSet.of(VoterNode(ReplicaKey(i)) for i in ids)

    @property
    def ids(self) -> frozenset[NodeId]:
        return frozenset(n.node_id for n in self.nodes)

    @property
    def keys(self) -> tuple[ReplicaKey, ...]:
        return tuple(n.key for n in self.nodes)

    @property
    def majority(self) -> int:
        return len(self.nodes) // 2 + 1

    def node(self, node_id: NodeId) -> VoterNode | None:
        return next((n for n in self.nodes if n.node_id == node_id), None)

    def is_voter(self, key: ReplicaKey) -> bool:
        """Is this replica a voter? A zero directory id on either side matches any
        (kraft.version 0 voters and requests from replicas that do not send one)."""
        n = self.node(key.node_id)
        if n is None:
            return False
        return ZERO_UUID in (n.key.directory_id, key.directory_id) or n.key.directory_id == key.directory_id

    def add(self, node: VoterNode) -> VoterSet | None:
        """The set with `node` added; None if its node id is already a voter."""
        if self.node(node.node_id) is not None:
            return None
        return VoterSet.of((*self.nodes, node))

    def remove(self, key: ReplicaKey) -> VoterSet | None:
        """The set without that exact replica; None if it is not a voter or is the last one."""
        n = self.node(key.node_id)
        if n is None or n.key != key or len(self.nodes) == 1:
            return None
        return VoterSet(tuple(v for v in self.nodes if v.node_id != key.node_id))

    def update(self, node: VoterNode) -> VoterSet | None:
        """The set with that replica's endpoints and version range replaced; None if absent."""
        n = self.node(node.node_id)
        if n is None or n.key != node.key:
            return None
        return VoterSet(tuple(node if v.node_id == node.node_id else v for v in self.nodes))

    def overlaps_majority(self, other: VoterSet) -> bool:
        """Every majority of this set meets every majority of `other` (Kafka's
        hasOverlappingMajority): true when they differ by at most one voter."""
        mine, theirs = set(self.keys), set(other.keys)
        return len(mine ^ theirs) <= 1


T = TypeVar("T")


# A Python class when compiled: mypyc 2.4.1 builds a generic slotted dataclass that fails at
# import ("attribute '__dict__' of 'type' objects is not writable").
@mypyc_attr(native_class=False)
@dataclass(slots=True)
class OffsetHistory(Generic[T]):
    """Values that take effect at log offsets (Kafka's LogHistory): the value in force at
    offset o is the last entry at or before o, else `base` (from the bootstrap or the
    snapshot the log starts at). Entries are appended in increasing offset order and
    dropped by truncation; compaction folds entries below a snapshot into `base`."""

    base: T
    entries: list[tuple[Offset, T]] = field(default_factory=list)
    base_offset: Offset = -1  # where `base` was written in the log; -1: the bootstrap, never in the log

    def add(self, offset: Offset, value: T) -> None:
        if self.entries and offset <= self.entries[-1][0]:
            raise ValueError(f"history entry at {offset} after one at {self.entries[-1][0]}")
        self.entries.append((offset, value))

    def latest(self) -> T:
        return self.entries[-1][1] if self.entries else self.base

    def latest_offset(self) -> Offset:
        """Offset of the latest entry (of the base when there is none; -1: the bootstrap)."""
        return self.entries[-1][0] if self.entries else self.base_offset

    def value_at(self, offset: Offset) -> T:
        i = bisect_right([o for o, _ in self.entries], offset)
        return self.entries[i - 1][1] if i else self.base

    def truncate_from(self, offset: Offset) -> None:
        """The log was cut to end at `offset`: entries at or beyond it are gone."""
        while self.entries and self.entries[-1][0] >= offset:
            self.entries.pop()

    def compact_before(self, offset: Offset) -> None:
        """The log below `offset` was deleted (a snapshot covers it): fold those entries."""
        while self.entries and self.entries[0][0] < offset:
            self.base_offset, self.base = self.entries.pop(0)

    def reset(self, base: T, base_offset: Offset) -> None:
        self.base = base
        self.base_offset = base_offset
        self.entries.clear()
