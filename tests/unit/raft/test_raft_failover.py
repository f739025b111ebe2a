"""Failover without tails (issue 24): the orders of messages that made elections slow.

- Crossed pre-votes: two survivors of a dead leader stand at the same time; each granted
  the other's pre-vote, both became candidates in one epoch, refused each other's vote and
  waited a whole election timeout. A prospective voter now grants only a voter that outranks
  it (longer log, then smaller id) and then stops standing.
- Detection: a follower whose request to its leader fails (connection refused or reset,
  `request_failed`) stands at once; the others grant its pre-vote only if they lost the
  leader too, so a live leader is not disturbed.
- Graceful resignation: the leader takes no more writes, lets a voter catch up, then sends
  EndQuorumEpoch with the voters ranked by fetch state.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from quorum.raft.errors import NotLeaderError
from quorum.raft.messages import EndQuorumEpochRequest, Envelope, FetchRequest, FetchResponse, VoteRequest
from quorum.raft.roles import FollowerState, ResignedState, Role
from tests.unit.raft.raft_helpers import Net, of_type


def settled(voters: int = 3, leader: int = 1) -> Net:
    net = Net(list(range(1, voters + 1)))
    net.elect(leader)
    net.stabilize()
    return net


def kill(net: Net, nid: int) -> None:
    """The process is gone: its core and everything sent to it."""
    del net.cores[nid]
    net.drop(lambda e: e.destination == nid or e.source == nid)


def to_dead(dead: int) -> Callable[[Envelope], bool]:
    return lambda e: e.destination == dead


def fetch_timeout_of(net: Net, *nids: int) -> int:
    """The latest fetch deadline of these followers: all of them stand by then."""
    deadlines = []
    for nid in nids:
        state = net[nid].state
        assert isinstance(state, FollowerState)
        deadlines.append(state.fetch_deadline)
    return max(deadlines)


def inflight_fetch(net: Net, nid: int) -> int:
    state = net[nid].state
    assert isinstance(state, FollowerState) and state.inflight_id >= 0
    return state.inflight_id


@pytest.mark.parametrize("first", [2, 3])
def test_crossed_pre_votes_make_one_candidate(first: int) -> None:
    net = settled()
    epoch = net[2].epoch
    kill(net, 1)
    # Both fetch timeouts fire at the same instant; both stand; their pre-votes cross.
    net.now = fetch_timeout_of(net, 2, 3)
    net.tick(first)
    net.tick(5 - first)
    assert net[2].role is Role.PROSPECTIVE and net[3].role is Role.PROSPECTIVE
    net.drop(to_dead(1))
    net.deliver(of_type(VoteRequest))  # each gets the other's pre-vote before any answer
    net.drop(to_dead(1))
    # At most one of them may go on to be a candidate of the next epoch.
    for _ in range(20):
        candidates = [n for n in (2, 3) if net[n].role is Role.CANDIDATE and net[n].epoch == epoch + 1]
        assert len(candidates) <= 1, "both survivors stand as candidates in one epoch"
        if not net.deliver(lambda e: e.destination != 1):
            break
        net.drop(to_dead(1))
    assert net.leaders() == [2], "the voter that outranks the other (equal logs: the smaller id) leads"
    assert net[2].epoch == epoch + 1


def test_a_prospective_voter_grants_only_a_voter_that_outranks_it() -> None:
    net = settled()
    kill(net, 1)
    net.now = fetch_timeout_of(net, 2, 3)
    net.tick(2)
    net.tick(3)
    net.drop(to_dead(1))
    net.deliver(of_type(VoteRequest, src=3, dst=2))
    answers = [e.message for e in net.pending if e.source == 2 and e.destination == 3]
    assert any(getattr(m, "vote_granted", None) is False for m in answers)  # 2 outranks 3: refused
    assert any(isinstance(m, VoteRequest) and m.pre_vote for m in answers)  # and 2 asks 3 again at once
    assert net[2].role is Role.PROSPECTIVE
    net.deliver(of_type(VoteRequest, src=2, dst=3))
    assert net[3].role is not Role.PROSPECTIVE  # 3 granted and stopped standing


def test_a_reset_connection_to_the_leader_starts_a_pre_vote_at_once() -> None:
    net = settled()
    epoch, t0 = net[2].epoch, net.now
    kill(net, 1)
    for nid in (2, 3):
        net[nid].request_failed(1, inflight_fetch(net, nid), net.now)
        net.flush(nid)
        assert net[nid].role is Role.PROSPECTIVE
    net.drop(to_dead(1))
    for _ in range(20):
        if not net.deliver(lambda e: e.destination != 1):
            break
        net.drop(to_dead(1))
    # Elected without the clock moving: no fetch timeout, no election timeout.
    assert net.leaders() == [2] and net[2].epoch == epoch + 1
    assert net.now == t0


def test_a_reset_seen_by_one_follower_does_not_disturb_a_live_leader() -> None:
    net = settled()
    epoch = net[1].epoch
    net[2].request_failed(1, inflight_fetch(net, 2), net.now)
    net.flush(2)
    assert net[2].role is Role.PROSPECTIVE
    net.stabilize()
    # The leader and the follower that still hears it refuse; 2 goes back to following.
    assert net.leaders() == [1] and all(net[n].epoch == epoch for n in (1, 2, 3))
    assert net[2].role is Role.FOLLOWER and net[2].leader_id == 1


def test_an_unreachable_leader_does_not_make_a_voter_stand_again_and_again() -> None:
    """After a lost pre-vote the voter follows again without having fetched: a fetch that
    fails at once (connection refused) leaves it waiting for its backoff, not standing."""
    net = Net([1, 2, 3])
    net.elect(1)
    net.stabilize()
    kill(net, 1)
    kill(net, 3)
    net[2].request_failed(1, inflight_fetch(net, 2), net.now)
    net.flush(2)
    assert net[2].role is Role.PROSPECTIVE
    for env in net.take(of_type(VoteRequest, src=2)):
        net[2].request_failed(env.destination, env.request_id, net.now)
    net.flush(2)
    assert net[2].role is Role.FOLLOWER  # both refused: the pre-vote is lost
    for _ in range(3):
        net.drop()
        state = net[2].state
        assert isinstance(state, FollowerState)
        if state.inflight_id >= 0:
            net[2].request_failed(1, state.inflight_id, net.now)
            net.flush(2)
        assert net[2].role is Role.FOLLOWER, "stood again at once after a refused fetch"


def test_a_failed_vote_request_counts_as_refused() -> None:
    net = Net([1, 2, 3, 4, 5])
    net.elect(1)
    net.stabilize()
    for dead in (1, 4):
        kill(net, dead)
    net.now = fetch_timeout_of(net, 2)
    net.tick(2)
    assert net[2].role is Role.PROSPECTIVE
    # 1 and 4 are gone (refused connections); 3 and 5 still follow 1 and refuse.
    for env in net.take(of_type(VoteRequest, src=2)):
        if env.destination in (1, 4):
            net[2].request_failed(env.destination, env.request_id, net.now)
        else:
            net.deliver_one(env)
    net.flush(2)
    net.deliver(lambda e: e.destination == 2 and not isinstance(e.message, FetchResponse))
    assert net[2].role is Role.FOLLOWER  # the pre-vote is lost at once: 4 of 5 refused


def test_resignation_waits_until_a_voter_holds_the_whole_log() -> None:
    net = settled()
    leader = net[1]
    epoch = leader.epoch
    end_before = leader.log.end_offset
    leader.propose([b"a", b"b", b"c"], net.now)
    net.flush(1)  # the answers to the parked fetches carry them; nobody has them yet
    leader.resign(net.now)
    net.flush(1)
    # Still leading, but not taking writes; nobody was told to stand yet.
    assert leader.role is Role.LEADER and not leader.accepts_writes
    with pytest.raises(NotLeaderError):
        leader.propose([b"d"], net.now)
    assert not any(isinstance(e.message, EndQuorumEpochRequest) for e in net.pending)
    net.stabilize()
    assert isinstance(leader.state, ResignedState)
    successor = leader.state.successors[0]
    assert net[successor].log.end_offset == leader.log.end_offset  # it holds the whole log
    net.fire(successor)  # EndQuorumEpoch made its deadline "now"
    net.stabilize()
    new = net.leaders()
    assert len(new) == 1 and new[0] != 1 and net[new[0]].epoch == epoch + 1
    assert leader.role is Role.FOLLOWER and leader.leader_id == new[0]
    # What the old leader accepted before it resigned is in the new leader's log and committed.
    records = [r for b in net[new[0]].log.batches for r in b.records]
    assert [b"a", b"b", b"c"] == [r for r in records if r in (b"a", b"b", b"c")]
    assert net[new[0]].high_watermark > end_before + 3


def test_resignation_hands_over_at_its_bound_if_nobody_catches_up() -> None:
    net = settled()
    leader = net[1]
    leader.propose([b"a"], net.now)
    net.flush(1)
    net.drop()
    leader.resign(net.now)
    net.flush(1)
    assert leader.role is Role.LEADER
    net.tick(1, net.now + leader.config.resign_catch_up_ms)
    assert isinstance(leader.state, ResignedState)
    assert net.take(of_type(EndQuorumEpochRequest))


def test_successors_are_ranked_by_fetch_state() -> None:
    """A voter that has not fetched for a fetch timeout goes last, whatever it had."""
    net = settled()
    leader = net[1]
    kill(net, 2)
    net.now += leader.config.fetch_timeout_ms + 1
    leader.propose([b"x"], net.now)
    net.flush(1)
    net.stabilize(lambda e: e.destination != 2)  # 3 fetches, catches up
    leader.resign(net.now)
    net.flush(1)
    ends = [e.message for e in net.pending if isinstance(e.message, EndQuorumEpochRequest)]
    assert ends and ends[0].preferred_successors == (3, 2)


def test_a_refused_fetch_is_a_resignation_that_does_not_name_this_voter() -> None:
    net = settled()
    leader = net[1]
    leader.resign(net.now)
    net.flush(1)
    assert isinstance(leader.state, ResignedState)
    net.drop(of_type(EndQuorumEpochRequest))  # lost: only the refused fetches tell
    net.stabilize(lambda e: isinstance(e.message, FetchRequest | FetchResponse))
    for nid in (2, 3):
        state = net[nid].state
        assert isinstance(state, FollowerState) and state.leader_resigned
        assert state.fetch_deadline <= net.now + leader.config.election_backoff_max_ms
