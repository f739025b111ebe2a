"""Hypothesis strategies for the core's RPC messages (values that fit their wire types)."""

from __future__ import annotations

from hypothesis import strategies as st

from quorum.raft.describe import QuorumDescription, ReplicaDescription
from quorum.raft.errors import ErrorCode
from quorum.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    VoteRequest,
    VoteResponse,
)
from quorum.raft.types import Batch, ControlType, OffsetAndEpoch

i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
nat32 = st.integers(0, 2**31 - 1)
nat64 = st.integers(0, 2**63 - 1)
node_ids = st.integers(-1, 2**31 - 1)
errors = st.sampled_from(list(ErrorCode))

# On the wire an absent DivergingEpoch/SnapshotId is (epoch -1, offset -1); a present
# one always has epoch >= 0 and offset >= 0.
present_offset_epoch = st.builds(OffsetAndEpoch, epoch=nat32, offset=nat64)
any_offset_epoch = st.builds(OffsetAndEpoch, epoch=i32, offset=i64)
optional_offset_epoch = st.none() | present_offset_epoch


@st.composite
def batches(draw: st.DrawFn, max_batches: int = 4) -> tuple[Batch, ...]:
    n = draw(st.integers(0, max_batches))
    offset = draw(st.integers(0, 2**40))
    epoch = draw(st.integers(0, 1000))
    out = []
    for _ in range(n):
        control = draw(st.none() | st.sampled_from(list(ControlType)))
        records = tuple(draw(st.lists(st.binary(max_size=40), min_size=1, max_size=5)))
        out.append(
            Batch(
                base_offset=offset,
                epoch=epoch,
                records=records,
                timestamp_ms=draw(st.integers(0, 2**45)),
                control_type=control,
            )
        )
        offset += len(records)
        epoch += draw(st.integers(0, 2))
    return tuple(out)


vote_requests = st.builds(
    VoteRequest,
    candidate_epoch=i32,
    candidate_id=node_ids,
    last_offset_epoch=i32,
    last_offset=i64,
    pre_vote=st.booleans(),
)
begin_requests = st.builds(BeginQuorumEpochRequest, leader_id=node_ids, leader_epoch=i32)
end_requests = st.builds(
    EndQuorumEpochRequest,
    leader_id=node_ids,
    leader_epoch=i32,
    preferred_successors=st.lists(node_ids, max_size=8).map(tuple),
)
fetch_requests = st.builds(
    FetchRequest,
    replica_id=node_ids,
    current_leader_epoch=i32,
    fetch_offset=i64,
    last_fetched_epoch=i32,
    log_start_offset=i64,
    max_wait_ms=nat32,
    max_bytes=i32,
)
fetch_snapshot_requests = st.builds(
    FetchSnapshotRequest,
    replica_id=node_ids,
    current_leader_epoch=i32,
    snapshot_id=any_offset_epoch,
    position=i64,
    max_bytes=i32,
)
requests = st.one_of(vote_requests, begin_requests, end_requests, fetch_requests, fetch_snapshot_requests)

vote_responses = st.builds(
    VoteResponse, error=errors, leader_id=node_ids, leader_epoch=i32, vote_granted=st.booleans(), pre_vote=st.booleans()
)
begin_responses = st.builds(BeginQuorumEpochResponse, error=errors, leader_id=node_ids, leader_epoch=i32)
end_responses = st.builds(EndQuorumEpochResponse, error=errors, leader_id=node_ids, leader_epoch=i32)
fetch_responses = st.builds(
    FetchResponse,
    error=errors,
    leader_id=node_ids,
    leader_epoch=i32,
    high_watermark=i64,
    log_start_offset=i64,
    diverging_epoch=optional_offset_epoch,
    snapshot_id=optional_offset_epoch,
    batches=batches(),
)
fetch_snapshot_responses = st.builds(
    FetchSnapshotResponse,
    error=errors,
    leader_id=node_ids,
    leader_epoch=i32,
    snapshot_id=optional_offset_epoch,
    size=i64,
    position=i64,
    data=st.binary(max_size=300),
)
replicas = st.builds(
    ReplicaDescription, replica_id=node_ids, log_end_offset=i64, last_fetch_ms=i64, last_caught_up_ms=i64
)
quorum_descriptions = st.builds(
    QuorumDescription,
    leader_id=node_ids,
    leader_epoch=i32,
    high_watermark=i64,
    voters=st.lists(replicas, max_size=5).map(tuple),
    observers=st.lists(replicas, max_size=5).map(tuple),
)
cluster_ids = st.none() | st.text(max_size=30)
client_ids = st.none() | st.text(max_size=30)
endpoints = st.dictionaries(node_ids, st.tuples(st.text(min_size=1, max_size=20), st.integers(0, 65535)), max_size=4)
