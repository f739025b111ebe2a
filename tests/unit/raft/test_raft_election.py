"""Elections of the Raft core: initial election, split votes, log freshness, durable
single votes, pre-vote (KIP-996), restart as Resigned. Hand-driven, fixed seeds."""

from __future__ import annotations

import dataclasses

import pytest
from raft_helpers import CONFIG, Net, log_of, new_core, of_type  # type: ignore[import-not-found,unused-ignore]  # a sibling module on pytest's path

from quorum.raft.errors import ErrorCode
from quorum.raft.messages import (
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    Envelope,
    FetchRequest,
    FetchResponse,
    VoteRequest,
    VoteResponse,
)
from quorum.raft.roles import CandidateState, Role
from quorum.raft.types import NO_LEADER, NO_VOTE, ControlType, ElectionState

NO_PRE_VOTE = dataclasses.replace(CONFIG, pre_vote=False)


def vote_request(src: int, dst: int, epoch: int, last_epoch: int, last_offset: int, *, pre: bool = False) -> Envelope:
    return Envelope(src, dst, 100 + src, VoteRequest(epoch, src, last_epoch, last_offset, pre_vote=pre))


def replies(net: Net, nid: int) -> list[VoteResponse]:
    return [e.message for e in net.readies[nid][-1].messages if isinstance(e.message, VoteResponse)]


# --------------------------------------------------------------- initial election


def test_single_voter_elects_itself_without_pre_vote() -> None:
    net = Net([1])
    assert net[1].role is Role.UNATTACHED and net[1].epoch == 0
    net.fire(1)
    core = net[1]
    assert core.role is Role.LEADER and core.epoch == 1 and core.leader_id == 1
    assert not net.pending  # nobody to ask
    # The first record of the epoch is the LeaderChange control record; alone, it commits at once.
    first = core.log.batches[0]
    assert first.control_type is ControlType.LEADER_CHANGE and first.epoch == 1
    assert core.high_watermark == 1
    assert [r.election for r in net.readies[1] if r.election] == [
        ElectionState(epoch=0),  # the initial state, written at start
        ElectionState(epoch=1, voted_id=1, leader_id=1),
    ]


@pytest.mark.parametrize("voters", [3, 5])
def test_initial_election(voters: int) -> None:
    ids = list(range(1, voters + 1))
    net = Net(ids)
    net.fire(1)
    assert net[1].role is Role.PROSPECTIVE and net[1].epoch == 0  # pre-vote does not bump the epoch
    pre_votes = net.take(of_type(VoteRequest))
    assert {e.destination for e in pre_votes} == set(ids) - {1}
    assert all(e.message.pre_vote and e.message.candidate_epoch == 0 for e in pre_votes)
    for e in pre_votes:
        net.deliver_one(e)
    # Granting a pre-vote changes nothing durable.
    assert all(net[i].epoch == 0 and net[i].voted_id == NO_VOTE for i in ids[1:])
    net.stabilize()
    assert net.leaders() == [1]
    assert all(net[i].epoch == 1 for i in ids)
    assert all(net[i].role is Role.FOLLOWER and net[i].leader_id == 1 for i in ids[1:])
    assert net[1].high_watermark == 1  # the LeaderChange record is on a majority


def test_a_voter_that_does_not_answer_does_not_block_the_majority() -> None:
    net = Net([1, 2, 3, 4, 5])
    net.fire(1)
    down = {4, 5}
    net.stabilize(lambda e: e.destination not in down and e.source not in down)
    assert net.leaders() == [1] and net[1].epoch == 1


# ------------------------------------------------------------------- split vote


def test_split_vote_then_resolution() -> None:
    """Four voters, two candidates in epoch 1, two votes each: nobody wins epoch 1;
    both back off (all rejections in), then one wins a later epoch."""
    net = Net([1, 2, 3, 4], config=NO_PRE_VOTE)
    net.tick(1, 1000)
    net.tick(2, 1000)
    net.tick(1, 2500)  # past both (randomized) election timeouts
    net.tick(2, 2500)
    assert net[1].role is net[2].role is Role.CANDIDATE
    assert net[1].epoch == net[2].epoch == 1
    # 3 hears from 1 first, 4 from 2 first.
    net.deliver(lambda e: (e.source, e.destination) in {(1, 3), (2, 4)})
    net.stabilize()
    assert net.leaders() == []
    assert net[3].voted_id == 1 and net[4].voted_id == 2
    for c in (1, 2):
        state = net[c].state
        assert isinstance(state, CandidateState) and state.backing_off
    # Time heals it: keep firing the earliest deadline and delivering everything.
    for _ in range(50):
        if net.leaders():
            break
        nid = min(net.cores, key=lambda i: net[i].next_deadline())
        net.fire(nid)
        net.stabilize()
    (leader,) = net.leaders()
    assert net[leader].epoch >= 2
    assert all(net[i].leader_id == leader and net[i].epoch == net[leader].epoch for i in net.cores)


# -------------------------------------------------------------- log freshness


@pytest.mark.parametrize("pre", [True, False])
def test_candidate_with_stale_log_is_refused(pre: bool) -> None:
    # The voter has (epoch 2, end 4); the candidate's last epoch is older, or same epoch but shorter.
    for last_epoch, last_offset in [(1, 10), (2, 3)]:
        net = Net([1, 2, 3], logs={2: log_of((1, 2), (2, 2))}, elections={2: ElectionState(epoch=2)})
        net.deliver_one(vote_request(1, 2, 2 if pre else 3, last_epoch, last_offset, pre=pre))
        (resp,) = replies(net, 2)
        assert resp.error is ErrorCode.NONE and not resp.vote_granted
        assert net[2].voted_id == NO_VOTE
    # At least as up to date (epoch first, then offset) is granted.
    for last_epoch, last_offset in [(2, 4), (2, 9), (3, 1)]:
        net = Net([1, 2, 3], logs={2: log_of((1, 2), (2, 2))}, elections={2: ElectionState(epoch=2)})
        epoch = 3 if pre else 4
        net.deliver_one(vote_request(1, 2, epoch, last_epoch, last_offset, pre=pre))
        (resp,) = replies(net, 2)
        assert resp.vote_granted
        assert net[2].voted_id == (NO_VOTE if pre else 1)


def test_stale_node_cannot_become_leader_but_a_fresh_one_does() -> None:
    # (Same batches where they overlap: a follower never holds part of a leader's batch.)
    logs = {1: log_of((1, 1)), 2: log_of((1, 1), (1, 2)), 3: log_of((1, 1), (1, 2))}
    elections = {i: ElectionState(epoch=1) for i in (1, 2, 3)}
    net = Net([1, 2, 3], logs=logs, elections=elections)
    net.fire(1)  # the stale node times out first
    net.stabilize()
    assert net[1].role in (Role.UNATTACHED, Role.PROSPECTIVE)
    assert net[1].epoch == 1  # its pre-vote failed: nobody's epoch moved
    assert all(net[i].epoch == 1 for i in (2, 3))
    net.fire(2)
    net.stabilize()
    assert net.leaders() == [2] and net[2].epoch == 2
    assert net[1].log.end_offset == net[2].log.end_offset == 4  # 1 caught up, LeaderChange included


def test_invalid_vote_requests_are_rejected() -> None:
    net = Net([1, 2, 3])
    # The candidate's last epoch must be below the epoch it stands in.
    net.deliver_one(vote_request(1, 2, 1, 1, 0))
    assert replies(net, 2)[0].error is ErrorCode.INVALID_REQUEST
    # Non-voters cannot stand.
    net.deliver_one(vote_request(9, 2, 1, 0, 0))
    assert replies(net, 2)[0].error is ErrorCode.INCONSISTENT_VOTER_SET
    assert net[2].voted_id == NO_VOTE and net[2].epoch == 0


# ---------------------------------------------------------- one durable vote


def test_vote_is_persisted_in_the_ready_that_sends_it() -> None:
    net = Net([1, 2, 3])
    net.deliver_one(vote_request(1, 2, 1, 0, 0))
    (ready,) = net.readies[2][-1:]
    granted = [e for e in ready.messages if isinstance(e.message, VoteResponse) and e.message.vote_granted]
    assert granted, ready
    assert ready.election == ElectionState(epoch=1, voted_id=1, leader_id=NO_LEADER)


def test_candidate_persists_its_self_vote_before_asking() -> None:
    net = Net([1, 2, 3], config=NO_PRE_VOTE)
    net.fire(1)
    ready = next(r for r in net.readies[1] if any(isinstance(e.message, VoteRequest) for e in r.messages))
    assert ready.election == ElectionState(epoch=1, voted_id=1)
    # Same with pre-vote: the standard VoteRequests leave in the Ready that persists the vote.
    net = Net([1, 2, 3])
    net.fire(1)
    net.stabilize(of_type((VoteRequest, VoteResponse)))
    standard = [
        r
        for r in net.readies[1]
        if any(isinstance(e.message, VoteRequest) and not e.message.pre_vote for e in r.messages)
    ]
    assert standard and standard[0].election is not None and standard[0].election.voted_id == 1
    assert standard[0].election.epoch == 1


def test_at_most_one_vote_per_epoch() -> None:
    net = Net([1, 2, 3, 4, 5])
    net.deliver_one(vote_request(1, 2, 5, 0, 0))
    assert replies(net, 2)[0].vote_granted
    net.deliver_one(vote_request(3, 2, 5, 0, 0))  # a second candidate, same epoch
    assert not replies(net, 2)[0].vote_granted
    net.deliver_one(vote_request(1, 2, 5, 0, 0))  # the first one asks again (a retry): same answer
    assert replies(net, 2)[0].vote_granted
    assert net[2].election_state == ElectionState(epoch=5, voted_id=1)
    # After a restart from the durable state the vote is still cast.
    again = Net([1, 2, 3, 4, 5], elections={2: net[2].election_state})
    again.deliver_one(vote_request(3, 2, 5, 9, 9))
    assert not replies(again, 2)[0].vote_granted
    # A later epoch is a new vote.
    again.deliver_one(vote_request(3, 2, 6, 0, 0))
    assert replies(again, 2)[0].vote_granted and again[2].election_state == ElectionState(epoch=6, voted_id=3)


def test_follower_refuses_standard_votes_in_its_epoch() -> None:
    net = Net([1, 2, 3])
    net.elect(1)
    net.deliver_one(vote_request(3, 2, 1, 1, 5))
    assert not replies(net, 2)[0].vote_granted


# --------------------------------------------------------------------- pre-vote


def _follower_of_1() -> Net:
    """Node 2 follows leader 1 in epoch 3, having just restarted (it has not fetched yet)."""
    elections = {2: ElectionState(epoch=3, leader_id=1)}
    net = Net([1, 2, 3], elections=elections, logs={2: log_of((1, 2))})
    net.drop()
    assert net[2].role is Role.FOLLOWER
    return net


def _answer_fetch(net: Net, *, error: ErrorCode = ErrorCode.NONE, hw: int = -1) -> None:
    (req,) = net.take(of_type(FetchRequest, dst=1))
    resp = FetchResponse(error, 1, 3, hw, 0)
    net.deliver_one(Envelope(1, 2, req.request_id, resp))


def test_pre_vote_follower_grants_until_it_has_fetched_then_refuses() -> None:
    net = _follower_of_1()
    net.deliver_one(vote_request(3, 2, 3, 1, 2, pre=True))
    assert replies(net, 2)[0].vote_granted  # no fetch from the leader yet (KIP-996)
    net.fire(2)  # resend its fetch
    net.drop(lambda e: not isinstance(e.message, FetchRequest))
    _answer_fetch(net)
    net.deliver_one(vote_request(3, 2, 3, 1, 2, pre=True))
    assert not replies(net, 2)[0].vote_granted  # the leader is alive as far as 2 knows
    assert net[2].epoch == 3 and net[2].role is Role.FOLLOWER  # and nothing changed


def test_pre_vote_follower_whose_leader_resigned_grants() -> None:
    net = _follower_of_1()
    net.fire(2)
    net.drop(lambda e: not isinstance(e.message, FetchRequest))
    _answer_fetch(net)
    net.deliver_one(Envelope(1, 2, 7, EndQuorumEpochRequest(1, 3, (3, 2))))
    net.deliver_one(vote_request(3, 2, 3, 1, 2, pre=True))
    assert replies(net, 2)[0].vote_granted
    assert net[2].voted_id == NO_VOTE and net[2].epoch == 3  # a pre-vote grant is not a vote


def test_pre_vote_in_a_higher_epoch_moves_the_voter_to_that_epoch() -> None:
    net = Net([1, 2, 3])
    net.deliver_one(vote_request(1, 2, 4, 0, 0, pre=True))
    (resp,) = replies(net, 2)
    assert resp.vote_granted and resp.pre_vote and net[2].epoch == 4 and net[2].voted_id == NO_VOTE


def test_lost_pre_vote_leaves_the_epoch_alone() -> None:
    net = Net([1, 2, 3])
    net.elect(1)
    net.pending.clear()
    net.fire(3)  # 3 believes the leader is gone; 1 and 2 know better
    net.stabilize(of_type((VoteRequest, VoteResponse)))
    assert [net[i].epoch for i in (1, 2, 3)] == [1, 1, 1]
    assert net[3].role in (Role.FOLLOWER, Role.PROSPECTIVE)
    assert net.leaders() == [1]


# ------------------------------------------------------------------ restart rules


def test_restarted_leader_comes_back_resigned() -> None:
    core = new_core(1, [1, 2, 3], election=ElectionState(epoch=3, voted_id=1, leader_id=1), log=log_of((3, 2)))
    assert core.role is Role.RESIGNED and core.epoch == 3
    assert core.leader_id == NO_LEADER  # it will not lead epoch 3 again
    # It can not be told to lead epoch 3 either, and it stands only in a later epoch.
    core.handle(Envelope(2, 1, 1, BeginQuorumEpochRequest(2, 3)), 0)
    assert core.role is Role.RESIGNED
    net = Net([1, 2, 3], elections={1: core.election_state}, logs={1: log_of((3, 2))})
    net.fire(1)
    net.stabilize()
    assert net.leaders() == [1] and net[1].epoch == 4


def test_single_voter_restarted_leader_leads_a_new_epoch() -> None:
    net = Net([1], elections={1: ElectionState(epoch=2, voted_id=1, leader_id=1)}, logs={1: log_of((2, 3))})
    core = net[1]
    assert core.role is Role.RESIGNED
    net.fire(1)
    core = net[1]
    assert core.role is Role.LEADER and core.epoch == 3


def test_restart_with_vote_for_self_is_candidate_again() -> None:
    net = Net([1, 2, 3], elections={1: ElectionState(epoch=2, voted_id=1)})
    assert net[1].role is Role.CANDIDATE and net[1].epoch == 2
    assert {e.destination for e in net.pending if isinstance(e.message, VoteRequest)} == {2, 3}


def test_log_epoch_ahead_of_quorum_state_wins_at_startup() -> None:
    core = new_core(1, [1, 2, 3], election=ElectionState(epoch=1, voted_id=2), log=log_of((1, 1), (4, 1)))
    assert core.role is Role.UNATTACHED and core.epoch == 4 and core.voted_id == NO_VOTE
