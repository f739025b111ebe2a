"""Defects found in the Raft core, each pinned by a minimal test.

All of them are fixed; the tests guard the fixes."""

from __future__ import annotations

import dataclasses

import pytest
from raft_helpers import CONFIG, Net, log_of, of_type  # type: ignore[import-not-found,unused-ignore]  # a sibling module on pytest's path

from quorum.raft.errors import ErrorCode
from quorum.raft.messages import EndQuorumEpochRequest, Envelope, FetchRequest, FetchResponse
from quorum.raft.roles import FollowerState, Role
from quorum.raft.types import ElectionState


def test_single_voter_leader_deadline_moves_on_after_tick() -> None:
    net = Net([1])
    net.fire(1)
    core = net[1]
    assert core.role is Role.LEADER
    for _ in range(3):
        now = core.next_deadline()
        net.tick(1, now)
        assert core.role is Role.LEADER  # a single voter never resigns (KAFKA-16144)
        assert core.next_deadline() > now, "tick() left a deadline in the past: the driver busy-loops"


def test_late_fetch_answer_does_not_cancel_the_successor_backoff() -> None:
    # Node 2 follows 1 in epoch 3 and has a Fetch in flight.
    net = Net([1, 2, 3], elections={2: ElectionState(epoch=3, leader_id=1)})
    (req,) = net.take(of_type(FetchRequest, src=2))
    net.drop()
    # Leader 1 resigns: successors (3, 2); node 2, second, should stand within 500 ms.
    net.deliver_one(Envelope(1, 2, 1, EndQuorumEpochRequest(1, 3, (3, 2))))
    promised = net.now + 500  # (election_backoff_max_ms >> (2 - 1)) << (1 - 1)
    assert net[2].next_deadline() <= promised
    # The answer to the Fetch sent before the resignation arrives afterwards (another connection).
    net.deliver_one(Envelope(1, 2, req.request_id, FetchResponse(ErrorCode.NONE, 1, 3, 0, 0)))
    state = net[2].state
    assert isinstance(state, FollowerState) and state.leader_resigned
    assert state.fetch_deadline <= promised, f"successor backoff lost: stands at {state.fetch_deadline}"


def stale_candidate_race(pre_vote: bool, seed: int) -> Net:
    """Two voters; node 2's log is one record longer. Node 1 (stale) times out first.
    Then time runs: always fire the earliest deadline, deliver everything at once."""
    config = dataclasses.replace(CONFIG, pre_vote=pre_vote)
    logs = {1: log_of((1, 2)), 2: log_of((1, 2), (1, 1))}
    net = Net(
        [1, 2], config=config, seed=seed, logs=logs, elections={1: ElectionState(epoch=1), 2: ElectionState(epoch=1)}
    )
    net.fire(1)
    net.stabilize()
    while not net.leaders() and net.now < 60_000:
        net.fire(min(net.cores, key=lambda i: net[i].next_deadline()))
        net.stabilize()
    return net


@pytest.mark.parametrize("seed", range(3))
def test_without_pre_vote_a_stale_candidate_does_not_livelock_the_quorum(seed: int) -> None:
    net = stale_candidate_race(pre_vote=False, seed=seed)
    assert net.leaders() == [2], f"no leader after {net.now} ms; epoch is {net[2].epoch}"


@pytest.mark.parametrize("seed", range(3))
def test_with_pre_vote_the_up_to_date_voter_wins_the_same_race(seed: int) -> None:
    net = stale_candidate_race(pre_vote=True, seed=seed)
    assert net.leaders() == [2] and net.now < 5_000
    assert net[2].epoch == 2  # the stale node's failed pre-votes burnt no epoch
