"""Replication in the Raft core: divergence and truncation, the high-watermark rules,
and the leader's bookkeeping of voters and observers. Hand-driven, no clocks."""

from __future__ import annotations

from dataclasses import replace

import pytest
from raft_helpers import CONFIG, Net, batch, log_of, of_type  # type: ignore[import-not-found,unused-ignore]  # a sibling module on pytest's path

from quorum.raft.errors import ErrorCode, FatalQuorumError, NotLeaderError
from quorum.raft.messages import (
    BeginQuorumEpochRequest,
    Envelope,
    FetchRequest,
    FetchResponse,
    VoteRequest,
    VoteResponse,
)
from quorum.raft.roles import LeaderState, Role
from quorum.raft.types import ElectionState, OffsetAndEpoch

VOTES = of_type((VoteRequest, VoteResponse))


def fetch(src: int, epoch: int, offset: int, last_epoch: int, *, dst: int = 1, rid: int = 900) -> Envelope:
    return Envelope(src, dst, rid, FetchRequest(src, epoch, offset, last_epoch, max_wait_ms=0))


def answers(net: Net, nid: int, to: int) -> list[FetchResponse]:
    return [
        e.message
        for r in net.readies[nid]
        for e in r.messages
        if isinstance(e.message, FetchResponse) and e.destination == to
    ]


def leader_state(net: Net, nid: int = 1) -> LeaderState:
    state = net[nid].state
    assert isinstance(state, LeaderState)
    return state


# ----------------------------------------------------------------- divergence


def test_follower_with_longer_epoch_truncates_to_the_leaders_end_of_that_epoch() -> None:
    """Node 2 holds epoch-2 records [5, 7) that the epoch-2 leader never got to the others.

    Node 1 wins epoch 3 with node 3's vote; node 2's Fetch(7, last epoch 2) gets
    DivergingEpoch(epoch 2, end 5), node 2 truncates to 5, fetches again, converges."""
    common = [batch(0, 1, 3), batch(3, 2, 2)]
    logs = {
        1: log_of((1, 3), (2, 2)),
        2: log_of((1, 3), (2, 2), (2, 2)),
        3: log_of((1, 3), (2, 2)),
    }
    assert [b for b in logs[2].batches[:2]] == common
    net = Net([1, 2, 3], logs=logs, elections={i: ElectionState(epoch=2) for i in (1, 2, 3)})
    net.fire(1)
    net.stabilize(lambda e: VOTES(e) and 2 not in (e.source, e.destination))
    assert net[1].role is Role.LEADER and net[1].epoch == 3
    net.drop(VOTES)
    # Node 2 learns of the leader and fetches from its own end.
    net.deliver(of_type(BeginQuorumEpochRequest, dst=2))
    (req,) = net.take(of_type(FetchRequest, src=2))
    assert (req.message.fetch_offset, req.message.last_fetched_epoch) == (7, 2)
    net.deliver_one(req)
    (resp,) = answers(net, 1, to=2)
    assert resp.diverging_epoch == OffsetAndEpoch(epoch=2, offset=5) and resp.batches == ()
    # A diverging answer is no proof of replication (KAFKA-13141).
    assert leader_state(net).voters[2].end_offset == -1
    net.deliver(of_type(FetchResponse, dst=2))
    assert net[2].log.end_offset == 5
    assert net.readies[2][-1].truncate_to == 5 and net.readies[2][-1].must_sync
    net.stabilize(lambda e: 3 not in (e.source, e.destination))
    assert list(net[2].log.batches) == list(net[1].log.batches)
    assert net[2].log.end_offset == 6 and net[1].high_watermark == 6


def test_follower_with_an_epoch_the_leader_never_had_truncates_to_the_previous_epoch() -> None:
    logs = {
        1: log_of((1, 3), (3, 1)),
        2: log_of((1, 3), (2, 3)),
        3: log_of((1, 3), (3, 1)),
    }
    net = Net([1, 2, 3], logs=logs, elections={i: ElectionState(epoch=3) for i in (1, 2, 3)})
    net.fire(1)
    net.stabilize(VOTES)
    assert net[1].role is Role.LEADER and net[1].epoch == 4
    net.stabilize()
    (first, *_) = answers(net, 1, to=2)
    assert first.diverging_epoch == OffsetAndEpoch(epoch=1, offset=3)
    assert any(r.truncate_to == 3 for r in net.readies[2])
    assert list(net[2].log.batches) == list(net[1].log.batches) == list(net[3].log.batches)
    assert [b.epoch for b in net[2].log.batches] == [1, 3, 4]


def _follower_with_hw(hw: int) -> Net:
    """Node 2 follows 1 in epoch 3 with log e1[0,3) e2[3,7), and has learned HW `hw`."""
    net = Net([1, 2, 3], elections={2: ElectionState(epoch=3, leader_id=1)}, logs={2: log_of((1, 3), (2, 4))})
    (req,) = net.take(of_type(FetchRequest, src=2))
    net.drop()
    net.deliver_one(Envelope(1, 2, req.request_id, FetchResponse(ErrorCode.NONE, 1, 3, hw, 0)))
    assert net[2].high_watermark == hw
    return net


def test_truncation_below_the_high_watermark_is_fatal() -> None:
    net = _follower_with_hw(6)
    (req,) = net.take(of_type(FetchRequest, src=2))
    bad = FetchResponse(ErrorCode.NONE, 1, 3, 6, 0, diverging_epoch=OffsetAndEpoch(epoch=1, offset=3))
    with pytest.raises(FatalQuorumError):
        net[2].handle(Envelope(1, 2, req.request_id, bad), net.now)
    assert net[2].log.end_offset == 7  # nothing was cut


def test_truncation_down_to_the_high_watermark_is_allowed() -> None:
    net = _follower_with_hw(3)
    (req,) = net.take(of_type(FetchRequest, src=2))
    ok = FetchResponse(ErrorCode.NONE, 1, 3, 3, 0, diverging_epoch=OffsetAndEpoch(epoch=1, offset=3))
    net.deliver_one(Envelope(1, 2, req.request_id, ok))
    assert net[2].log.end_offset == 3 and net[2].high_watermark == 3


def test_follower_high_watermark_never_decreases_and_never_passes_its_log() -> None:
    net = _follower_with_hw(5)
    (req,) = net.take(of_type(FetchRequest, src=2))
    net.deliver_one(Envelope(1, 2, req.request_id, FetchResponse(ErrorCode.NONE, 1, 3, 4, 0)))
    assert net[2].high_watermark == 5
    (req,) = net.take(of_type(FetchRequest, src=2))
    net.deliver_one(Envelope(1, 2, req.request_id, FetchResponse(ErrorCode.NONE, 1, 3, 50, 0)))
    assert net[2].high_watermark == 7  # min(leader HW, local end)
    # A stale answer (to an older request) changes nothing.
    net.deliver_one(Envelope(1, 2, req.request_id, FetchResponse(ErrorCode.NONE, 1, 3, 1, 0)))
    assert net[2].high_watermark == 7


# ------------------------------------------------------------- high watermark


def _leader_over_old_log() -> Net:
    """Node 1 leads epoch 2 over 5 uncommitted epoch-1 records (LeaderChange at 5);
    only node 3 voted. Nobody has fetched yet."""
    logs = {i: log_of((1, 2), (1, 3)) for i in (1, 2, 3)}
    net = Net([1, 2, 3], [4], logs=logs, elections={i: ElectionState(epoch=1) for i in (1, 2, 3)})
    net.drop()
    net.fire(1)
    net.stabilize(lambda e: VOTES(e) and 2 not in (e.source, e.destination))
    net.drop()
    assert net[1].role is Role.LEADER and net[1].epoch == 2
    assert leader_state(net).epoch_start_offset == 5
    return net


def test_hw_waits_for_a_majority_past_the_epoch_start() -> None:
    net = _leader_over_old_log()
    # Node 3 holds every old record: a majority has offset 5, but that is not past the epoch start.
    net.deliver_one(fetch(3, 2, 5, 1, rid=1))
    (resp,) = answers(net, 1, to=3)
    assert resp.high_watermark == -1  # a new leader does not know its HW yet
    assert len(resp.batches) == 1 and resp.batches[0].base_offset == 5
    assert not leader_state(net).hw_known
    assert net[1].describe().high_watermark == -1
    assert net[1].high_watermark == 0
    # Once node 3 has the LeaderChange record, everything up to it commits at once.
    net.deliver_one(fetch(3, 2, 6, 2, rid=2))
    assert leader_state(net).hw_known and net[1].high_watermark == 6
    assert answers(net, 1, to=3)[-1].high_watermark == 6
    assert [b.base_offset for b in net.applied[1]] == [0, 2, 5]


def test_hw_never_decreases_on_a_stale_fetch() -> None:
    net = _leader_over_old_log()
    net.deliver_one(fetch(3, 2, 6, 2, rid=1))
    net[1].propose([b"a", b"b"], net.now)
    net.flush(1)
    net.deliver_one(fetch(3, 2, 8, 2, rid=2))
    assert net[1].high_watermark == 8
    net.deliver_one(fetch(3, 2, 6, 2, rid=1))  # a duplicated old request
    assert net[1].high_watermark == 8
    assert leader_state(net).voters[3].end_offset == 6  # progress is what the replica last said
    assert answers(net, 1, to=3)[-1].high_watermark == 8


def test_observers_never_count_toward_the_hw() -> None:
    net = _leader_over_old_log()
    for rid, offset in enumerate([5, 6], start=1):
        net.deliver_one(fetch(4, 2, offset, 1 if offset == 5 else 2, rid=rid))
    net[1].propose([b"a"], net.now)
    net.flush(1)
    net.deliver_one(fetch(4, 2, 7, 2, rid=3))
    ls = leader_state(net)
    assert not ls.hw_known and net[1].high_watermark == 0
    assert ls.observers[4].end_offset == 7 and 4 not in ls.voters
    assert all(r.high_watermark == -1 for r in answers(net, 1, to=4))
    # One voter is enough (with the leader) for a majority of three.
    net.deliver_one(fetch(2, 2, 7, 2, rid=4))
    assert net[1].high_watermark == 7
    described = net[1].describe()
    assert [r.replica_id for r in described.observers] == [4]
    assert [r.replica_id for r in described.voters] == [1, 2, 3]


def test_leader_hw_counts_its_own_flushed_end_only() -> None:
    """The leader's own offset counts once the driver has made it durable (advance())."""
    net = _leader_over_old_log()
    net.deliver_one(fetch(3, 2, 6, 2, rid=1))
    net[1].propose([b"a"], net.now)
    ready = net[1].ready()  # handed to the driver, not yet carried out
    net.deliver_one(fetch(3, 2, 7, 2, rid=2))
    assert net[1].high_watermark == 6  # 3 has 7, but the leader's copy is not flushed
    net[1].advance(ready)
    assert net[1].high_watermark == 7


def test_fetch_validation_errors() -> None:
    net = _leader_over_old_log()
    cases = [
        (FetchRequest(3, 2, -1, 1), ErrorCode.INVALID_REQUEST),
        (FetchRequest(3, 2, 5, 3), ErrorCode.INVALID_REQUEST),  # last fetched epoch beyond its epoch
        (FetchRequest(3, 1, 5, 1), ErrorCode.FENCED_LEADER_EPOCH),
        (FetchRequest(3, 3, 5, 1), ErrorCode.UNKNOWN_LEADER_EPOCH),
    ]
    for rid, (req, error) in enumerate(cases):
        net.deliver_one(Envelope(3, 1, rid, req))
        assert answers(net, 1, to=3)[-1].error is error
    assert leader_state(net).voters[3].end_offset == -1
    # A follower is not the leader.
    net.deliver_one(Envelope(2, 3, 77, FetchRequest(2, 2, 5, 1)))
    (resp,) = [e.message for e in net.readies[3][-1].messages if isinstance(e.message, FetchResponse)]
    assert resp.error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_LEADER_EPOCH)


def test_only_the_leader_accepts_proposals() -> None:
    net = _leader_over_old_log()
    with pytest.raises(NotLeaderError):
        net[3].propose([b"x"], net.now)
    first = net[1].propose([b"x"] * 20, net.now)
    assert first == 6
    assert [len(b.records) for b in net[1].log.batches_between(6, 26)] == [8, 8, 4]  # max_batch_records


def test_voters_fsync_what_they_append_and_observers_do_not() -> None:
    """A voter's append is its ack toward the HW, so it is fsynced before the next Fetch;
    an observer's log counts toward nothing and its appends skip the fsync (as Kafka's
    observers do); both still get every record."""
    net = Net([1, 2, 3], observers=[4])
    net.elect(1, among=[1, 2, 3])
    net[1].propose([b"a", b"b"], net.now)
    net.flush(1)
    net.fire(2)
    net.fire(4)
    net.stabilize()
    appended = {nid: [r for r in net.readies[nid] if r.entries] for nid in (2, 4)}
    assert appended[2] and all(r.must_sync for r in appended[2])
    assert appended[4] and not any(r.must_sync for r in appended[4])


def test_an_observer_that_may_become_a_voter_fsyncs_what_it_appends() -> None:
    """A controller observing the quorum (about to be added as a voter) fsyncs its appends:
    the leader that adds it counts its fetch offset toward the HW at once, and that offset
    covers what it appended as an observer (KAFKA-17332)."""
    net = Net([1, 2, 3], observers=[4], config=replace(CONFIG, sync_as_observer=True))
    net.elect(1, among=[1, 2, 3])
    net[1].propose([b"a", b"b"], net.now)
    net.flush(1)
    net.fire(4)
    net.stabilize()
    appended = [r for r in net.readies[4] if r.entries]
    assert not net[4].is_voter
    assert appended and all(r.must_sync for r in appended)
    assert net[4].log.end_offset == net[2].log.end_offset == net[1].log.end_offset


# ----------------------------------------------------------------- a leader's fsync overlaps replication


def test_a_leaders_ready_sends_before_its_fsync_and_its_own_ack_waits_for_it() -> None:
    """A leader's Ready says its messages may leave before its fsync (`send_before_sync`):
    followers fetch entries the leader has not fsynced yet. The leader's own share of the
    high watermark is its flushed end, moved only by `advance` (after its fsync): with one
    follower's ack of the new entries, nothing new commits until then; with both followers',
    a majority of durable copies exists without the leader's."""
    for followers in ((2,), (2, 3)):
        net = Net([1, 2, 3])
        net.elect(1, among=[1, 2, 3])
        net.stabilize()
        leader = net[1]
        hw = leader.high_watermark
        first = leader.propose([b"a", b"b"], net.now)
        ready = leader.ready()  # the driver appended, sends, and is still fsyncing
        assert ready.entries and ready.must_sync and ready.send_before_sync
        net.pending.extend(ready.messages)

        def among(e: Envelope, group: tuple[int, ...] = (1, *followers)) -> bool:
            return e.source in group and e.destination in group

        # The followers' parked fetches were answered with the new entries: they append and
        # fsync them (Net.flush) and ack with their next fetch.
        assert {e.destination for e in ready.messages if isinstance(e.message, FetchResponse)} == {2, 3}
        net.stabilize(among)
        assert all(net[f].log.end_offset == first + 2 for f in followers)
        if len(followers) == 2:
            assert leader.high_watermark == first + 2  # two durable copies of three
        else:
            assert leader.high_watermark == hw  # one durable copy: the leader's fsync is not done
        leader.advance(ready)  # the leader's fsync ended
        assert leader.high_watermark == first + 2


def test_only_a_leaders_plain_ready_sends_before_its_fsync() -> None:
    net = Net([1, 2, 3], observers=[4])
    net.elect(1, among=[1, 2, 3])
    net.stabilize()
    net[1].propose([b"a"], net.now)
    (ready,) = net.flush(1)
    assert ready.send_before_sync
    net.fire(2)
    net.fire(4)
    net.stabilize()
    for nid in (2, 3, 4):
        assert net.readies[nid] and not any(r.send_before_sync for r in net.readies[nid])
    # Node 1's Readies as candidate and new leader persisted election state: those waited.
    claims = [r for r in net.readies[1] if r.election is not None]
    assert claims and not any(r.send_before_sync for r in claims)
