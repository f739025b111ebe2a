"""Voter-set changes (KIP-853's AddRaftVoter, RemoveRaftVoter, UpdateRaftVoter) as a pure rule.

`decide` says whether the leader may write a new VotersRecord now, and which set it holds.
Kafka 3.9's order of checks and its error codes:
  1. another change is waiting for its commit                 -> REQUEST_TIMED_OUT
  2. the leader has not committed in its epoch (HW unknown)   -> REQUEST_TIMED_OUT
  3. kraft.version 0 (static voters)                          -> UNSUPPORTED_VERSION
  4. the latest voter set in the log is not committed yet     -> REQUEST_TIMED_OUT
  5. add: the id is already a voter                           -> DUPLICATE_VOTER
     add: the replica does not support the kraft.version      -> INVALID_REQUEST
     add: the replica is not a caught-up observer             -> REQUEST_TIMED_OUT
     remove / update: no voter with that id and directory id  -> VOTER_NOT_FOUND
`decide_upgrade` is the same for UpdateFeatures kraft.version=1 on a static quorum (Kafka's
kraft.version upgrade): it writes a KRaftVersionRecord (1) and a VotersRecord made of the
static voters, each with the directory id of its fetches and its configured endpoints, and
is committed like any voter change. It is refused (INVALID_UPDATE_VERSION) while a voter's
directory id is unknown, for a version other than 0 or 1, and for a downgrade.
Rules 2 and 4 together keep at most one voter-set change uncommitted, and the first change
of an epoch behind a committed entry of that epoch: any two voter sets in use at once then
differ by one voter, so their majorities overlap (no two leaders in one epoch).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from quorum.raft.errors import ErrorCode
from quorum.raft.types import NodeId, Offset
from quorum.raft.voter_set import KRAFT_VERSION_DYNAMIC, ZERO_UUID, ReplicaKey, VoterNode, VoterSet

# An observer counts as caught up for AddRaftVoter if it held the leader's whole log at some
# point and fetched within this window (Kafka's LeaderState.isReplicaCaughtUp: one hour).
CAUGHT_UP_FETCH_WINDOW_MS = 60 * 60 * 1000


@dataclass(frozen=True, slots=True)
class AddVoter:
    node: VoterNode


@dataclass(frozen=True, slots=True)
class RemoveVoter:
    key: ReplicaKey


@dataclass(frozen=True, slots=True)
class UpdateVoter:
    node: VoterNode


@dataclass(frozen=True, slots=True)
class UpgradeKRaftVersion:
    """UpdateFeatures kraft.version=`version`. `static`: the voters of controller.quorum.voters
    with their endpoints (directory ids unknown there: the leader fills them in)."""

    version: int
    static: VoterSet
    validate_only: bool = False  # UpdateFeatures' ValidateOnly: check, write nothing


VoterChange = AddVoter | RemoveVoter | UpdateVoter | UpgradeKRaftVersion


@dataclass(frozen=True, slots=True)
class VoterChangeResult:
    """The answer to the change the driver submitted as `token` (RaftCore.change_voters)."""

    token: int
    error: ErrorCode
    message: str = ""


@dataclass(frozen=True, slots=True)
class ObserverFetchState:
    """What the leader knows of the replica to add. Times in ms on the core's clock; -1 = never."""

    last_fetch_ms: int
    last_caught_up_ms: int


@dataclass(frozen=True, slots=True)
class LeaderView:
    pending: bool  # a change this leader wrote is not committed yet (or not answered)
    hw_known: bool  # a majority holds an entry of this epoch
    high_watermark: Offset
    kraft_version: int
    voters: VoterSet  # the latest in the log
    voters_offset: Offset  # where the latest VotersRecord is, -1 = the bootstrap set
    now_ms: int


def decide(
    change: VoterChange, view: LeaderView, observer: ObserverFetchState | None
) -> tuple[ErrorCode, str, VoterSet | None]:
    """(NONE, "", new set) when the VotersRecord may be written, else (error, message, None)."""
    if view.pending:
        return ErrorCode.REQUEST_TIMED_OUT, "the leader is handling a previous voter change", None
    if not view.hw_known:
        return ErrorCode.REQUEST_TIMED_OUT, "the leader has not committed an entry in its epoch yet", None
    if view.kraft_version < KRAFT_VERSION_DYNAMIC:
        return ErrorCode.UNSUPPORTED_VERSION, f"kraft.version is {view.kraft_version}: the voters are static", None
    if view.voters_offset >= view.high_watermark:
        return ErrorCode.REQUEST_TIMED_OUT, f"the voter change at {view.voters_offset} is not committed yet", None
    match change:
        case AddVoter(node):
            if view.voters.node(node.node_id) is not None:
                return ErrorCode.DUPLICATE_VOTER, f"{node.node_id} is already a voter", None
            if not node.min_kraft_version <= view.kraft_version <= node.max_kraft_version:
                return (
                    ErrorCode.INVALID_REQUEST,
                    f"{node.key} does not support kraft.version {view.kraft_version}",
                    None,
                )
            if not _caught_up(observer, view.now_ms):
                return ErrorCode.REQUEST_TIMED_OUT, f"{node.key} is not a caught-up observer", None
            new = view.voters.add(node)
        case RemoveVoter(key):
            new = view.voters.remove(key)
        case UpdateVoter(node):
            new = view.voters.update(node)
        case UpgradeKRaftVersion():
            return ErrorCode.INVALID_REQUEST, "a kraft.version change goes through decide_upgrade", None
    if new is None:
        return ErrorCode.VOTER_NOT_FOUND, "no such voter in the voter set", None
    return ErrorCode.NONE, "", new


def decide_upgrade(
    change: UpgradeKRaftVersion, view: LeaderView, directory_ids: dict[NodeId, uuid.UUID]
) -> tuple[ErrorCode, str, VoterSet | None]:
    """(NONE, "", voters to write with kraft.version 1) when the upgrade may be written now;
    (NONE, message, None) when kraft.version already is `change.version` (nothing to do);
    else (error, message, None). `directory_ids`: each voter's, as its fetches (or, for the
    leader, its own meta.properties) said; a voter absent or with the zero uuid is unknown."""
    if view.pending:
        return ErrorCode.REQUEST_TIMED_OUT, "the leader is handling a previous voter change", None
    if change.version < view.kraft_version:
        return (
            ErrorCode.INVALID_UPDATE_VERSION,
            f"kraft.version cannot be downgraded from {view.kraft_version} to {change.version}",
            None,
        )
    if change.version > KRAFT_VERSION_DYNAMIC:
        return ErrorCode.INVALID_UPDATE_VERSION, f"kraft.version {change.version} is not supported", None
    if change.version == view.kraft_version:
        return ErrorCode.NONE, f"kraft.version is already {change.version}", None
    if not view.hw_known:
        return ErrorCode.REQUEST_TIMED_OUT, "the leader has not committed an entry in its epoch yet", None
    nodes: list[VoterNode] = []
    for voter in view.voters.nodes:
        directory = directory_ids.get(voter.node_id, ZERO_UUID)
        if directory == ZERO_UUID:
            return ErrorCode.INVALID_UPDATE_VERSION, f"voter {voter.node_id}'s directory id is not known yet", None
        configured = change.static.node(voter.node_id)
        if configured is None or not configured.endpoints:
            return ErrorCode.INVALID_UPDATE_VERSION, f"voter {voter.node_id} has no configured endpoint", None
        nodes.append(VoterNode(ReplicaKey(voter.node_id, directory), configured.endpoints, 0, KRAFT_VERSION_DYNAMIC))
    return ErrorCode.NONE, "", VoterSet.of(nodes)


def _caught_up(observer: ObserverFetchState | None, now_ms: int) -> bool:
    return (
        observer is not None
        and observer.last_caught_up_ms >= 0
        and observer.last_fetch_ms >= 0
        and observer.last_fetch_ms > now_ms - CAUGHT_UP_FETCH_WINDOW_MS
    )
