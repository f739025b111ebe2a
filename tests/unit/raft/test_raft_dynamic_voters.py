"""KIP-853 in the Raft core: the voter set from the log, AddRaftVoter / RemoveRaftVoter /
UpdateRaftVoter one at a time, the removed leader's resignation, directory ids."""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence

from raft_helpers import CONFIG, Net, batch, new_core, of_type  # type: ignore[import-not-found,unused-ignore]  # a sibling module on pytest's path

from quorum.raft.core import RaftCore
from quorum.raft.errors import ErrorCode
from quorum.raft.kraft_control import voters_batch
from quorum.raft.log import RaftLog
from quorum.raft.messages import Envelope, FetchRequest, FetchResponse, VoteRequest, VoteResponse
from quorum.raft.roles import LeaderState, Role
from quorum.raft.types import ElectionState, OffsetAndEpoch
from quorum.raft.voter_change import AddVoter, RemoveVoter, UpdateVoter, VoterChangeResult
from quorum.raft.voter_set import Endpoint, ReplicaKey, VoterNode, VoterSet

DIRS = {i: uuid.UUID(int=0x1000 + i) for i in range(1, 10)}


def node(i: int, directory: uuid.UUID | None = None) -> VoterNode:
    return VoterNode(ReplicaKey(i, directory or DIRS[i]), (Endpoint("CONTROLLER", "127.0.0.1", 19090 + i),))


def dynamic_net(voters: list[int], observers: Sequence[int] = ()) -> Net:
    """Each replica knows its own directory id (meta.properties' directory.id)."""
    return Net(VoterSet.of(node(i) for i in voters), observers, directories=DIRS)


def results(net: Net, nid: int) -> list[VoterChangeResult]:
    return [r for ready in net.readies[nid] for r in ready.voter_changes]


def result_of(net: Net, nid: int, token: int) -> VoterChangeResult | None:
    return next((r for r in results(net, nid) if r.token == token), None)


def change(net: Net, nid: int, what: AddVoter | RemoveVoter | UpdateVoter) -> int:
    token = net[nid].change_voters(what, net.now)
    net.flush(nid)
    return token


def start_standalone(observers: list[int]) -> Net:
    """One voter (node 1, `storage format --standalone`) leading, observers fetching."""
    net = dynamic_net([1], observers)
    net.fire(1)
    assert net[1].role is Role.LEADER
    for o in observers:
        net.fire(o)  # an observer asks a voter who leads
    net.stabilize()
    net[1].propose([b"x"], net.now)
    net.flush(1)
    net.stabilize()
    return net


def test_grow_one_to_three_one_committed_change_at_a_time() -> None:
    net = start_standalone([2, 3])
    t2 = change(net, 1, AddVoter(node(2)))
    # The VotersRecord is in the log and already counts (Kafka: the latest set is used)...
    assert net[1].voters == {1, 2}
    # ...but the change is answered only once committed, and none other starts meanwhile.
    assert result_of(net, 1, t2) is None
    t3 = change(net, 1, AddVoter(node(3)))
    assert result_of(net, 1, t3) == VoterChangeResult(t3, ErrorCode.REQUEST_TIMED_OUT, result_of(net, 1, t3).message)  # type: ignore[union-attr]
    net.stabilize()
    assert result_of(net, 1, t2) == VoterChangeResult(t2, ErrorCode.NONE)
    assert net[2].voters == {1, 2} and net[2].is_voter and not net[3].is_voter
    t3 = change(net, 1, AddVoter(node(3)))
    net.stabilize()
    assert result_of(net, 1, t3) == VoterChangeResult(t3, ErrorCode.NONE)
    assert all(net[i].voters == {1, 2, 3} for i in (1, 2, 3))
    ls = net[1].state
    assert isinstance(ls, LeaderState) and set(ls.voters) == {1, 2, 3} and not ls.observers
    # The new voters count toward the high watermark: with 2 and 3 silent nothing commits.
    hw = net[1].high_watermark
    net[1].propose([b"y"], net.now)
    net.flush(1)
    net.drop(lambda e: e.source in (2, 3))
    assert net[1].high_watermark == hw


def test_kafkas_refusals() -> None:
    net = start_standalone([2])
    cases = [
        (AddVoter(node(1)), ErrorCode.DUPLICATE_VOTER),
        (AddVoter(node(5)), ErrorCode.REQUEST_TIMED_OUT),  # never fetched: not caught up
        (AddVoter(node(2, uuid.UUID(int=7))), ErrorCode.REQUEST_TIMED_OUT),  # another replica of 2
        (AddVoter(VoterNode(ReplicaKey(2, DIRS[2]), (), 0, 0)), ErrorCode.INVALID_REQUEST),  # kraft.version 0 only
        (RemoveVoter(ReplicaKey(1, uuid.UUID(int=7))), ErrorCode.VOTER_NOT_FOUND),  # wrong directory id
        (RemoveVoter(ReplicaKey(1, DIRS[1])), ErrorCode.VOTER_NOT_FOUND),  # never the last voter
        (UpdateVoter(node(4)), ErrorCode.VOTER_NOT_FOUND),
    ]
    for what, error in cases:
        token = change(net, 1, what)
        r = result_of(net, 1, token)
        assert r is not None and r.error == error, (what, r)
    token = change(net, 2, AddVoter(node(3)))
    assert result_of(net, 2, token).error == ErrorCode.NOT_LEADER_OR_FOLLOWER  # type: ignore[union-attr]
    assert net[1].voters == {1}


def test_static_voters_cannot_change() -> None:
    net = Net([1, 2, 3])
    net.elect(1)
    net.stabilize()
    token = change(net, 1, RemoveVoter(ReplicaKey(3)))
    assert result_of(net, 1, token).error == ErrorCode.UNSUPPORTED_VERSION  # type: ignore[union-attr]


def test_a_new_leader_changes_voters_only_after_committing_in_its_epoch() -> None:
    net = dynamic_net([1, 2, 3], [4])
    net.fire(1)
    net.stabilize(of_type((VoteRequest, VoteResponse)))  # elected; no fetch has come yet
    assert net[1].role is Role.LEADER
    token = change(net, 1, RemoveVoter(ReplicaKey(3, DIRS[3])))  # its LeaderChange is not committed yet
    assert result_of(net, 1, token).error == ErrorCode.REQUEST_TIMED_OUT  # type: ignore[union-attr]


def test_removed_leader_leads_until_the_change_commits_then_resigns() -> None:
    net = dynamic_net([1, 2, 3])
    net.elect(1)
    net.stabilize()
    token = change(net, 1, RemoveVoter(ReplicaKey(1, DIRS[1])))
    assert net[1].voters == {2, 3} and net[1].role is Role.LEADER  # not a voter, still the leader
    net.stabilize(of_type((FetchRequest, FetchResponse)))
    net.flush_all()
    assert result_of(net, 1, token) == VoterChangeResult(token, ErrorCode.NONE)
    assert net[1].role is Role.RESIGNED
    net.stabilize()
    while not any(net[i].role is Role.LEADER for i in (2, 3)):
        nid = min((2, 3), key=lambda i: net[i].next_deadline())
        net.fire(nid)
        net.stabilize()
    new_leader = next(i for i in (2, 3) if net[i].role is Role.LEADER)
    assert net[new_leader].epoch > net[1].epoch - 1
    # The old leader follows as an observer, and never stands again.
    net.fire(1)
    net.stabilize()
    assert not net[1].is_voter and net[1].role in (Role.UNATTACHED, Role.FOLLOWER)


def test_removed_leader_restarts_as_an_observer() -> None:
    net = dynamic_net([1, 2, 3])
    net.elect(1)
    net.stabilize()
    change(net, 1, RemoveVoter(ReplicaKey(1, DIRS[1])))
    net.stabilize(of_type((FetchRequest, FetchResponse)))
    net.flush_all()
    old = net[1]
    initial = VoterSet.of(node(i) for i in (1, 2, 3))
    restarted = new_core(1, initial, election=old.election_state, log=old.log, directory_id=DIRS[1])
    assert restarted.voters == {2, 3} and restarted.role is Role.UNATTACHED


def test_a_wiped_voter_is_a_new_replica() -> None:
    """Voter 3's disk was wiped: same id, new directory id. It neither votes as 3 nor counts
    toward the high watermark until it is added again."""
    net = dynamic_net([1, 2, 3])
    net.elect(1)
    net.stabilize()
    wiped = uuid.UUID(int=0xDEAD)
    net[3].directory_id = wiped
    ask = VoteRequest(5, 2, 1, 1, voter_directory_id=DIRS[3])
    net.deliver_one(Envelope(2, 3, 77, ask))
    (answer,) = net.take(lambda e: e.source == 3 and e.request_id == 77)
    assert isinstance(answer.message, VoteResponse) and answer.message.error == ErrorCode.INVALID_VOTER_KEY
    # Its fetches are an observer's: with 2 silent, nothing commits.
    hw = net[1].high_watermark
    net[1].propose([b"z"], net.now)
    net.flush(1)
    net.stabilize(lambda e: 2 not in (e.source, e.destination))
    assert net[1].high_watermark == hw
    ls = net[1].state
    assert isinstance(ls, LeaderState) and ls.observers[3].directory_id == wiped
    # Replace it: remove the old replica, add the new one once it caught up.
    net.stabilize()
    t = change(net, 1, RemoveVoter(ReplicaKey(3, DIRS[3])))
    net.stabilize()
    assert result_of(net, 1, t).error == ErrorCode.NONE  # type: ignore[union-attr]
    t = change(net, 1, AddVoter(node(3, wiped)))
    net.stabilize()
    assert result_of(net, 1, t).error == ErrorCode.NONE  # type: ignore[union-attr]
    assert net[2].voter_set.node(3) == node(3, wiped) and net[3].is_voter


def test_an_uncommitted_voter_change_is_undone_by_truncation() -> None:
    """Node 2 holds an epoch-1 VotersRecord adding 4 that never committed; the epoch-2
    leader's log lacks it: node 2 truncates and the voter set goes back to {1, 2, 3}."""
    vs = VoterSet.of(node(i) for i in (1, 2, 3))
    grown = VoterSet.of(node(i) for i in (1, 2, 3, 4))
    logs = {i: RaftLog([batch(0, 1, 2)]) for i in (1, 2, 3)}
    logs[2].append(voters_batch(2, 1, grown, 0))
    net = Net(vs, logs=logs, elections={i: ElectionState(epoch=1) for i in (1, 2, 3)}, directories=DIRS)
    assert net[2].voters == {1, 2, 3, 4} and net[2].voters_at(2) == (1, vs)
    net.elect(1, among=[1, 3])
    net.stabilize()
    assert net[2].log.end_offset == net[1].log.end_offset and net[2].voters == {1, 2, 3}


def test_a_snapshot_sets_the_voters_below_it() -> None:
    """A replica formatted without voters holds the leader's snapshot at 10 and a VotersRecord
    after it: the set below 10 comes from the snapshot's records (the driver reads them)."""
    sid = OffsetAndEpoch(epoch=2, offset=10)
    grown = VoterSet.of(node(i) for i in (1, 2, 3, 4))
    five = VoterSet.of(node(i) for i in (1, 2, 3, 4, 5))
    log = RaftLog([voters_batch(10, 2, five, 0)], start_offset=10, snapshot_id=sid)
    core = RaftCore(
        node_id=4,
        voters=VoterSet(()),
        config=CONFIG,
        rng=random.Random(0),
        now_ms=0,
        log=log,
        directory_id=DIRS[4],
        bootstrap=[1],
    )  # formatted without voters: it asks node 1 (controller.quorum.bootstrap.servers)
    assert core.voters == five.ids and core.voters_at(10)[1] == VoterSet(())
    core.load_snapshot_voters(sid, 1, grown)
    assert core.voters_at(10) == (1, grown) and core.voters == five.ids
    core.load_snapshot_voters(OffsetAndEpoch(epoch=1, offset=5), 1, VoterSet.of([node(1)]))  # stale: ignored
    assert core.voters_at(10) == (1, grown)
