"""What DescribeQuorum reports: the leader's view of each replica's replication."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from quorum.raft.types import Epoch, NodeId, Offset
from quorum.raft.voter_set import ZERO_UUID


@dataclass(frozen=True, slots=True)
class ReplicaDescription:
    """One replica as the leader sees it. Times are ms on the driver's clock; -1 = unknown."""

    replica_id: NodeId
    log_end_offset: Offset  # -1 when the leader has not heard from it
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1
    directory_id: uuid.UUID = ZERO_UUID  # KIP-853 (zero: kraft.version 0, or not sent)


@dataclass(frozen=True, slots=True)
class QuorumDescription:
    leader_id: NodeId
    leader_epoch: Epoch
    high_watermark: Offset
    voters: tuple[ReplicaDescription, ...]
    observers: tuple[ReplicaDescription, ...]
