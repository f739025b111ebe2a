"""The Raft core's RPC messages: typed, frozen, slotted; no wire format here.

Each request/response pair mirrors a Kafka KRaft RPC (KIP-595, KIP-630, KIP-996)
with only the fields the core needs. `quorum.wire` maps them to and from the
Kafka protocol. An `Envelope` carries one message between two nodes; a response
carries the `request_id` of the request it answers, so the core can match them
without assuming the network is ordered or reliable.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Final

from quorum.frozen_init import fast_frozen_init
from quorum.raft.errors import ErrorCode
from quorum.raft.types import Batch, Epoch, NodeId, Offset, OffsetAndEpoch
from quorum.raft.voter_set import ZERO_UUID


@dataclass(frozen=True, slots=True)
class VoteRequest:
    """Vote (api key 52). `pre_vote` (KIP-996): `candidate_epoch` is the sender's
    current epoch, not bumped, and granting changes no durable state."""

    candidate_epoch: Epoch
    candidate_id: NodeId
    last_offset_epoch: Epoch
    last_offset: Offset  # the candidate's log end offset (exclusive)
    pre_vote: bool = False
    # KIP-853: the directory id the candidate has for the receiving voter (zero: unknown).
    # A replica whose own directory id differs (its disk was wiped) refuses: INVALID_VOTER_KEY.
    voter_directory_id: uuid.UUID = ZERO_UUID


fast_frozen_init(VoteRequest)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class VoteResponse:
    error: ErrorCode
    leader_id: NodeId
    leader_epoch: Epoch
    vote_granted: bool
    pre_vote: bool = False


fast_frozen_init(VoteResponse)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochRequest:
    """BeginQuorumEpoch (53): a new leader announces itself to the voters."""

    leader_id: NodeId
    leader_epoch: Epoch


fast_frozen_init(BeginQuorumEpochRequest)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochResponse:
    error: ErrorCode
    leader_id: NodeId
    leader_epoch: Epoch


fast_frozen_init(BeginQuorumEpochResponse)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class EndQuorumEpochRequest:
    """EndQuorumEpoch (54): a resigning leader; successors most caught-up first."""

    leader_id: NodeId
    leader_epoch: Epoch
    preferred_successors: tuple[NodeId, ...]


fast_frozen_init(EndQuorumEpochRequest)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class EndQuorumEpochResponse:
    error: ErrorCode
    leader_id: NodeId
    leader_epoch: Epoch


fast_frozen_init(EndQuorumEpochResponse)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """Fetch (1) of `__cluster_metadata-0`.

    `fetch_offset` acknowledges every record below it (the replica has them
    durably); `last_fetched_epoch` is the epoch of the record at fetch_offset-1
    (or of the replica's snapshot when its log is empty at the snapshot end).
    `max_wait_ms` > 0 lets the leader park the request until data arrives.
    """

    replica_id: NodeId
    current_leader_epoch: Epoch
    fetch_offset: Offset
    last_fetched_epoch: Epoch
    log_start_offset: Offset = 0
    max_wait_ms: int = 0
    max_bytes: int = 8 * 1024 * 1024
    replica_directory_id: uuid.UUID = ZERO_UUID  # KIP-853 (zero: not sent)


fast_frozen_init(FetchRequest)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class FetchResponse:
    error: ErrorCode
    leader_id: NodeId
    leader_epoch: Epoch
    high_watermark: Offset = -1
    log_start_offset: Offset = 0
    diverging_epoch: OffsetAndEpoch | None = None
    snapshot_id: OffsetAndEpoch | None = None
    batches: tuple[Batch, ...] = ()


fast_frozen_init(FetchResponse)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class FetchSnapshotRequest:
    """FetchSnapshot (59): `position` is the number of snapshot bytes already held."""

    replica_id: NodeId
    current_leader_epoch: Epoch
    snapshot_id: OffsetAndEpoch
    position: int
    max_bytes: int = 1024 * 1024


fast_frozen_init(FetchSnapshotRequest)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class FetchSnapshotResponse:
    error: ErrorCode
    leader_id: NodeId
    leader_epoch: Epoch
    snapshot_id: OffsetAndEpoch | None = None
    size: int = 0  # total size of the snapshot in bytes
    position: int = 0  # where `data` starts in the snapshot
    data: bytes = b""


fast_frozen_init(FetchSnapshotResponse)  # not a decorator: mypyc makes a decorated class a Python class


Request = VoteRequest | BeginQuorumEpochRequest | EndQuorumEpochRequest | FetchRequest | FetchSnapshotRequest
Response = VoteResponse | BeginQuorumEpochResponse | EndQuorumEpochResponse | FetchResponse | FetchSnapshotResponse
Message = Request | Response
# The request classes as a tuple for isinstance: a union written in an expression would be
# built anew at every evaluation (about 150 ns per envelope).
REQUEST_TYPES: Final = (VoteRequest, BeginQuorumEpochRequest, EndQuorumEpochRequest, FetchRequest, FetchSnapshotRequest)


@dataclass(frozen=True, slots=True)
class Envelope:
    """One message from `source` to `destination`.

    `request_id` is chosen by the requester and echoed in the response; it is
    unique per requester for the life of its core object.
    """

    source: NodeId
    destination: NodeId
    request_id: int
    message: Message

    @property
    def is_request(self) -> bool:
        return isinstance(self.message, REQUEST_TYPES)


fast_frozen_init(Envelope)  # not a decorator: mypyc makes a decorated class a Python class
