"""The roles a replica can be in, the data each keeps, and the allowed transitions.

Roles follow Kafka's QuorumState after KIP-996. Voters may be any role;
observers (non-voters, e.g. brokers) are only Unattached or Follower.

    From          To                      When
    Unattached    Prospective             election timeout (voters)
    Unattached    Follower                a leader is discovered in an epoch >= ours
    Prospective   Candidate               a majority granted the pre-vote
    Prospective   Unattached | Follower   pre-vote lost or timed out, or granted to a voter that
                                          outranks it (Follower if a leader is known)
    Candidate     Prospective             election lost or timed out, after backoff
    Candidate     Leader                  a majority granted the vote
    Leader        Resigned                graceful shutdown (once a voter holds the whole log, or
                                          after resign_catch_up_ms), or check-quorum failure
    Follower      Prospective             fetch timeout, or a request to the leader failed (voters)
    Resigned      Prospective             election timeout
    any           Unattached | Follower   a higher epoch is learned

With pre-vote disabled, Candidate replaces Prospective in every row above.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from enum import Enum

from quorum.raft.types import NodeId, Offset, OffsetAndEpoch
from quorum.raft.voter_change import VoterChange
from quorum.raft.voter_set import ZERO_UUID


class Role(Enum):
    UNATTACHED = "Unattached"
    PROSPECTIVE = "Prospective"
    CANDIDATE = "Candidate"
    LEADER = "Leader"
    FOLLOWER = "Follower"
    RESIGNED = "Resigned"


# Transitions within one epoch or to a higher one; entering Unattached or
# Follower on a higher epoch is allowed from every role and checked separately.
ALLOWED_TRANSITIONS: dict[Role, frozenset[Role]] = {
    Role.UNATTACHED: frozenset({Role.PROSPECTIVE, Role.CANDIDATE, Role.FOLLOWER}),
    Role.PROSPECTIVE: frozenset({Role.CANDIDATE, Role.UNATTACHED, Role.FOLLOWER}),
    Role.CANDIDATE: frozenset({Role.PROSPECTIVE, Role.CANDIDATE, Role.LEADER, Role.FOLLOWER, Role.UNATTACHED}),
    Role.LEADER: frozenset({Role.RESIGNED}),
    Role.FOLLOWER: frozenset({Role.PROSPECTIVE, Role.CANDIDATE}),
    Role.RESIGNED: frozenset({Role.PROSPECTIVE, Role.CANDIDATE}),
}

OBSERVER_ROLES = frozenset({Role.UNATTACHED, Role.FOLLOWER})


@dataclass(slots=True)
class UnattachedState:
    # Voters: when to start an election. Observers: when to probe a voter for the leader.
    deadline: int


@dataclass(slots=True)
class ProspectiveState:
    deadline: int
    leader_id: NodeId  # leader known in this epoch before the pre-vote, or -1
    granted: set[NodeId] = field(default_factory=set)
    rejected: set[NodeId] = field(default_factory=set)
    resend_ms: int = 0  # when to ask again the voters that have not granted
    vote_requests: set[int] = field(default_factory=set)  # request ids of the pre-votes sent


@dataclass(slots=True)
class CandidateState:
    deadline: int  # election timeout, then backoff end once the election is lost
    granted: set[NodeId] = field(default_factory=set)
    rejected: set[NodeId] = field(default_factory=set)
    backing_off: bool = False
    resend_ms: int = 0  # when to ask again the voters that have not answered
    vote_requests: set[int] = field(default_factory=set)  # request ids of the votes sent


@dataclass(slots=True)
class SnapshotFetch:
    snapshot_id: OffsetAndEpoch
    position: int = 0  # bytes received so far
    size: int = -1  # total size, -1 until the first answer


@dataclass(slots=True)
class FollowerState:
    leader_id: NodeId
    fetch_deadline: int  # no successful answer from the leader by then -> election (voters)
    has_fetched: bool = False  # since becoming follower in this epoch (KIP-996)
    leader_resigned: bool = False  # the leader sent EndQuorumEpoch
    inflight_id: int = -1  # request id of the outstanding Fetch/FetchSnapshot, -1 = none
    inflight_sent_ms: int = 0
    next_fetch_ms: int = 0  # backoff after an error answer
    snapshot: SnapshotFetch | None = None


@dataclass(slots=True)
class ReplicaProgress:
    """What the leader knows of one replica. -1 = not heard from yet."""

    end_offset: Offset = -1
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1
    hw_sent: Offset = -2  # the high watermark in the last answer sent to it (-1 = unknown)
    leader_end_at_last_fetch: Offset = -1  # the leader's log end when it last fetched
    directory_id: uuid.UUID = ZERO_UUID  # as its last fetch said (KIP-853)


@dataclass(slots=True)
class ParkedFetch:
    source: NodeId
    request_id: int
    fetch_offset: Offset
    max_bytes: int
    deadline: int
    as_voter: bool = True  # it fetched as a voter (its progress is in LeaderState.voters)


@dataclass(slots=True)
class PendingVoterChange:
    """A voter change the leader accepted: answered once its VotersRecord (at `offset`) is
    committed, or REQUEST_TIMED_OUT at `deadline` (the record stays in the log)."""

    token: int
    change: VoterChange
    offset: Offset
    deadline: int


@dataclass(slots=True)
class LeaderState:
    epoch_start_offset: Offset  # offset of this epoch's LeaderChange record
    voters: dict[NodeId, ReplicaProgress]
    observers: dict[NodeId, ReplicaProgress]
    check_quorum_deadline: int
    begin_quorum_unacked: set[NodeId]
    begin_quorum_resend_ms: int
    fetched_voters: set[NodeId] = field(default_factory=set)
    parked: list[ParkedFetch] = field(default_factory=list)
    hw_known: bool = False  # a majority has reached past epoch_start_offset
    resign_deadline: int = -1  # resigning: no more writes; hand over by then (ms), -1 = not resigning
    voter_change: PendingVoterChange | None = None


@dataclass(slots=True)
class ResignedState:
    deadline: int  # when to stand for election again
    successors: tuple[NodeId, ...]
    unacked: set[NodeId]
    resend_ms: int


RoleState = UnattachedState | ProspectiveState | CandidateState | FollowerState | LeaderState | ResignedState
