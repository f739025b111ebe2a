"""Directed generators: drive a simulated cluster into the histories where Raft breaks.

Random faults reach these histories only by luck; each generator here builds one on
purpose, step by step, and stops the simulation at the exact event where the next fault
matters (`Cluster.run_until_event`). The harness checks every safety property after every
event all along, and counts what the run reached (`Cluster.coverage`). A generator never
asserts liveness itself: when the cluster does not do what it needs (no leader in time,
say), it returns False and the caller goes on; the tests converge the cluster afterwards.

- `figure8`: a leader writes entries that reach nobody, a leader of a later epoch
  overwrites them, and the first leader comes back, leads again and replicates its old
  entries to a majority before anything of its new epoch is there (Figure 8 of the Raft
  paper); then the overwriting leader returns and wins.
- `lagging_follower`: a follower far behind catches up with responses cut short by a small
  fetch size, so the leader's high watermark is ahead of the follower's log end.
- `divergence_storm`: successive leaders are cut off with uncommitted writes, so that
  several nodes hold suffixes from different epochs; everything heals at once.
- `snapshot_catch_up`: a follower falls behind the leader's log start and must install a
  snapshot in chunks while the leader (or the follower) crashes mid-transfer.
- `deposed_leader_cut`: a voter acknowledged entries of a cut-off leader, which a later
  epoch commits while the voter, still in the epoch between, follows that epoch's deposed
  leader and truncates them (issue 23: Raft allows it; that ack never counted).
- `stale_messages`: old requests and answers (old epochs, old request ids) are delivered
  again long after, across leader changes; `stale_vote_replay` replays old vote grants to a
  candidate of the epoch another node already leads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from quorum.raft.config import RaftConfig
from quorum.raft.messages import VoteResponse
from quorum.raft.roles import FollowerState, LeaderState, Role
from tests.sim.harness import Cluster, Node

# The simulation's timing (see `Cluster`), with the fetch size and snapshot chunk size
# small enough that responses and snapshot transfers come in pieces.
BASE = Cluster(0, voters=1).config


def config(fetch_max_bytes: int = BASE.fetch_max_bytes, chunk_bytes: int = 64, pre_vote: bool = True) -> RaftConfig:
    return dataclasses.replace(
        BASE, fetch_max_bytes=fetch_max_bytes, snapshot_chunk_bytes=chunk_bytes, pre_vote=pre_vote
    )


def leader_in(c: Cluster, ids: set[int] | list[int], above_epoch: int = -1) -> Node | None:
    """A live leader among `ids` with an epoch above `above_epoch`."""
    for nid in ids:
        node = c.nodes[nid]
        if node.core is not None and node.core.role is Role.LEADER and node.core.epoch > above_epoch:
            return node
    return None


def settle(c: Cluster, limit_ms: int = 20_000) -> Node | None:
    """Heal, restart every node, and wait for a leader that has committed in its epoch."""
    c.heal()
    c.loss = c.duplicate = 0.0
    for nid in c.nodes:
        c.nodes[nid].armed_crash = None
        c.restart(nid)

    def ready() -> bool:
        leader = c.leader()
        if leader is None or leader.core is None:
            return False
        ls = leader.core.state
        return isinstance(ls, LeaderState) and ls.hw_known

    c.run_until(ready, limit_ms)
    c.run_for(200, propose_every_ms=20)
    return c.leader()


def _epoch(node: Node) -> int:
    assert node.core is not None
    return node.core.epoch


# ------------------------------------------------------------------ Figure 8


def figure8(
    c: Cluster, *, x_batches: int = 1, y_batches: int = 0, comeback: str = "restart", exit: str = "crash"
) -> bool:
    """Figure 8 and variants (needs >= 3 voters).

    1. Leader A (epoch a) is cut off and writes X (x_batches batches): only A has X.
    2. A goes away (comeback="restart": crashed; "heal": only isolated). A leader B of a
       later epoch b is elected from the rest; at that very event it writes Y (y_batches)
       after its LeaderChange at X's first offset, and crashes: B's entries are on B alone.
    3. A comes back with a majority-minus-one set C of the others (the rest stay cut off),
       and is the only node that can win: it leads again in epoch a2 > b, still holding X.
    4. The moment every node of C has acknowledged X, and before any of them holds A's
       epoch-a2 LeaderChange, A leaves (exit="crash", or "isolate") with its answers lost.
       X is now on a majority, but nothing of epoch a2 is: committing X here is the bug.
    5. B comes back: its log (epoch b) beats C's (epoch a), so it wins and truncates X
       everywhere. Then A returns and truncates X and its epoch-a2 LeaderChange.
    """
    voters = c.voter_ids
    if len(voters) < 3:
        return False
    a = settle(c)
    if a is None or a.core is None:
        return False
    a_epoch = _epoch(a)
    others = [n for n in c.nodes if n != a.id]
    c.partition([a.id], others)
    for _ in range(x_batches):
        if not c.propose(3):
            return False
    x_end = a.core.log.end_offset
    if comeback == "restart":
        c.crash(a.id)
    rest = [v for v in voters if v != a.id]
    if not c.run_until_event(lambda: leader_in(c, rest, a_epoch) is not None, 30_000):
        return False
    b = leader_in(c, rest, a_epoch)
    assert b is not None and b.core is not None
    b_epoch = _epoch(b)
    for _ in range(y_batches):
        b.core.propose([f"v{c.proposed}".encode()], c.now)
        c.proposed += 1
    c.drop_in_flight(source=b.id)
    c._send(b.drain())
    c.crash(b.id)
    majority = len(voters) // 2 + 1
    pool = [v for v in rest if v != b.id]
    followers = pool[: majority - 1]
    cut = [n for n in c.nodes if n not in followers and n != a.id]
    c.partition([a.id, *followers], cut)
    if comeback == "restart":
        c.restart(a.id)
    if not c.run_until_event(lambda: leader_in(c, [a.id], b_epoch) is not None, 30_000):
        return False

    def x_acknowledged() -> bool:
        core = a.core
        if core is None or not isinstance(core.state, LeaderState):
            return True  # A lost its leadership: give up here
        return all(core.state.voters[v].end_offset >= x_end for v in followers)

    c.run_until_event(x_acknowledged, 20_000)
    c.drop_in_flight(source=a.id)
    if exit == "crash":
        c.crash(a.id)
    else:
        c.partition([a.id], [n for n in c.nodes if n != a.id])
    # B returns to everyone but A; it (or a node that holds its entries) must win.
    c.partition([n for n in c.nodes if n != a.id], [a.id])
    c.restart(b.id)
    c.run_until(lambda: leader_in(c, [n for n in voters if n != a.id], b_epoch) is not None, 30_000)
    c.run_for(2_000, propose_every_ms=50)
    c.heal()
    c.restart(a.id)
    c.run_for(3_000, propose_every_ms=50)
    return True


# --------------------------------------------------------- partial fetches


def lagging_follower(c: Cluster, *, lag_ms: int = 3_000, crash_leader_midway: bool = False) -> bool:
    """A follower is cut off while the leader commits; then it catches up, one short
    response at a time (with a small fetch_max_bytes), the leader's HW ahead of its log end.
    Optionally the leader crashes while it catches up, and a new one finishes the job."""
    leader = settle(c)
    if leader is None or len(c.voter_ids) < 3:
        return False
    follower = next(v for v in c.voter_ids if v != leader.id)
    c.crash(follower)
    c.run_for(lag_ms, propose_every_ms=20)
    c.restart(follower)
    node = c.nodes[follower]
    if crash_leader_midway:

        def halfway() -> bool:
            lead = c.leader()
            return (
                node.core is not None
                and lead is not None
                and lead.core is not None
                and node.core.log.end_offset > node.core.log.start_offset
                and node.core.log.end_offset < lead.core.log.end_offset
            )

        c.run_until_event(halfway, 5_000)
        lead = c.leader()
        if lead is not None and lead.id != follower:
            c.crash(lead.id)
            c.run_for(4_000, propose_every_ms=50)
            c.restart(lead.id)
    c.run_for(3_000, propose_every_ms=20)
    return True


# ------------------------------------------------------ divergence storms


def divergence_storm(c: Cluster, *, writes: int = 2, with_follower: bool = False) -> bool:
    """Cut off leader after leader, each right after it wrote (and perhaps replicated to one
    follower) entries no majority has; while a majority stays together and elects the next.
    Each cut-off group keeps a suffix of its own epoch; then everything heals at once and
    every one of them must truncate to the same new leader."""
    leader = settle(c)
    if leader is None:
        return False
    voters = c.voter_ids
    majority = len(voters) // 2 + 1
    groups: list[list[int]] = []
    together = list(c.nodes)
    while True:
        lead = leader_in(c, together)
        if lead is None:
            break
        group = [lead.id]
        if with_follower:
            mates = [v for v in voters if v in together and v != lead.id]
            if mates:
                group.append(mates[0])
        remaining = [n for n in together if n not in group]
        if sum(1 for v in remaining if v in voters) < majority:
            break
        groups.append(group)
        together = remaining
        c.partition(*groups, together)
        for _ in range(writes):
            c.propose(2)
        if with_follower:
            c.run_for(30)  # the mate fetches the new entries
        old_epoch = _epoch(lead)
        if not c.run_until(lambda t=together, e=old_epoch: leader_in(c, t, e) is not None, 30_000):  # type: ignore[misc]
            break
        c.run_for(300, propose_every_ms=30)
    c.heal()
    c.run_for(3_000, propose_every_ms=30)
    return len(groups) > 0


# ------------------------------------------------------- snapshot installs


def snapshot_catch_up(c: Cluster, *, during: str = "crash-leader", lag_ms: int = 2_500) -> bool:
    """A follower is away while the others commit and snapshot (the cluster needs
    `snapshot_every`), so the leader's log starts beyond the follower's end: it is sent to
    the snapshot. Once the first chunk is in, `during` happens: "crash-leader" (a new leader
    serves its own snapshot from the start), "crash-follower" (the transfer starts over
    after a restart), or "isolate-leader"."""
    leader = settle(c)
    if leader is None or len(c.voter_ids) < 3:
        return False
    follower = next(v for v in c.voter_ids if v != leader.id)
    node = c.nodes[follower]
    c.crash(follower)

    def behind_log_start() -> bool:
        lead = c.leader()
        return lead is not None and lead.core is not None and lead.core.log.start_offset > node.disk.end_offset

    c.run_until(behind_log_start, lag_ms)
    c.run_for(200, propose_every_ms=20)
    c.restart(follower)

    def transferring() -> bool:
        core = node.core
        return (
            core is not None
            and isinstance(core.state, FollowerState)
            and core.state.snapshot is not None
            and (core.state.snapshot.position > 0)
        )

    if c.run_until_event(transferring, 5_000):
        lead = c.leader()
        if during == "crash-follower":
            c.crash(follower)
            c.run_for(300, propose_every_ms=20)
            c.restart(follower)
        elif lead is not None and lead.id != follower:
            if during == "crash-leader":
                c.crash(lead.id)
            else:
                c.partition([lead.id], [n for n in c.nodes if n != lead.id])
            c.run_for(5_000, propose_every_ms=30)
            c.heal()
            c.restart(lead.id)
    c.run_for(3_000, propose_every_ms=30)
    return True


# ------------------------------------------- a later commit cut by a stale follower


def deposed_leader_cut(c: Cluster) -> bool:
    """Needs >= 5 voters. With a majority m of n voters:

    1. Leader A (epoch a) is cut off with n - m - 1 other voters (B among them): it writes
       X, and B acknowledges X.
    2. B is cut off alone; the m others elect C (epoch b). At that very event C's messages are
       lost and C is cut off alone: nobody holds C's LeaderChange, and C keeps leading b.
    3. A, its other mates and the m - 1 others (B and C away) can only elect a node holding X
       (the m - 1 are no majority without them): it leads an epoch above b and commits X.
    4. B meets C alone: C's BeginQuorumEpoch makes B a follower of C in b, and C's answer
       to B's Fetch diverges at X: B truncates X, committed but not by epoch b or before.
    Then everything heals; B learns the new epoch and fetches X again."""
    voters = c.voter_ids
    if len(voters) < 5:
        return False
    a = settle(c)
    if a is None or a.core is None:
        return False
    a_epoch = _epoch(a)
    majority = len(voters) // 2 + 1
    mates = [v for v in voters if v != a.id][: len(voters) - majority - 1]
    b_id = mates[0]
    rest = [v for v in voters if v != a.id and v not in mates]
    c.partition([a.id, *mates], [n for n in c.nodes if n != a.id and n not in mates])
    if not c.propose(3):
        return False
    x_end = a.core.log.end_offset

    def b_acknowledged() -> bool:
        ls = a.core.state if a.core is not None else None
        return not isinstance(ls, LeaderState) or ls.voters[b_id].end_offset >= x_end

    c.run_until_event(b_acknowledged, 5_000)
    c.partition([b_id], [n for n in c.nodes if n != b_id and n not in rest], rest)
    if not c.run_until_event(lambda: leader_in(c, rest, a_epoch) is not None, 30_000):
        return False
    deposed = leader_in(c, rest, a_epoch)
    assert deposed is not None and deposed.core is not None
    b_epoch = _epoch(deposed)
    c.drop_in_flight(source=deposed.id)
    c.partition([deposed.id], [b_id], [n for n in c.nodes if n not in (deposed.id, b_id)])

    def committed_later() -> bool:
        return c.max_committed >= x_end and c.committed_epoch.get(x_end - 1, 0) > b_epoch

    c.run_until(committed_later, 20_000)
    c.partition([deposed.id, b_id], [n for n in c.nodes if n not in (deposed.id, b_id)])
    b = c.nodes[b_id]
    c.run_until(lambda: b.disk.end_offset < x_end, 3_000)
    c.heal()
    c.run_for(2_000, propose_every_ms=30)
    return True


# ------------------------------------------------------- stale and future


def stale_messages(c: Cluster, *, rounds: int = 3, replay: int = 40, duplicate: float = 0.1) -> bool:
    """Keep a share of all messages; change leaders a few times (isolate one, crash the
    next); after each change deliver a batch of the kept messages again: Fetch, Vote,
    BeginQuorumEpoch requests and answers of past epochs, with request ids a restarted
    node may be reusing. The isolated ones hear of the future when they return."""
    if settle(c) is None:
        return False
    c.stash_rate = 0.2
    c.duplicate = duplicate
    for r in range(rounds):
        lead = c.leader()
        if lead is None:
            c.run_for(2_000, propose_every_ms=30)
            continue
        old_epoch = _epoch(lead)
        if r % 2 == 0:
            c.partition([lead.id], [n for n in c.nodes if n != lead.id])
        else:
            c.crash(lead.id)
        c.run_until(lambda e=old_epoch: (x := c.leader()) is not None and _epoch(x) > e, 10_000)  # type: ignore[misc]
        c.replay(replay)
        c.run_for(1_000, propose_every_ms=30)
        c.heal()
        c.restart(lead.id)
        c.replay(replay)
        c.run_for(1_000, propose_every_ms=30)
    c.stash_rate = 0.0
    c.duplicate = 0.0
    return True


def stale_vote_replay(c: Cluster) -> bool:
    """Without pre-vote: old vote grants reach a candidate of the very epoch another node
    already leads. A candidate that counts an answer of a past epoch becomes a second
    leader of that epoch. (Needs `pre_vote=False` and >= 3 voters.)"""
    if c.config.pre_vote or len(c.voter_ids) < 3:
        return False
    c.stash_rate = 1.0
    c.stash_types = (VoteResponse,)
    lead = settle(c)
    c.stash_rate = 0.0
    if lead is None:
        return False
    first_epoch = _epoch(lead)
    c.partition([lead.id], [n for n in c.nodes if n != lead.id])
    others = [v for v in c.voter_ids if v != lead.id]

    def candidate_in_led_epoch() -> bool:
        core = lead.core
        if core is None or core.role is not Role.CANDIDATE:
            return False
        other = leader_in(c, others, first_epoch)
        return other is not None and _epoch(other) == core.epoch

    def passed() -> bool:
        other = leader_in(c, others, first_epoch)
        return lead.core is None or (other is not None and lead.core.epoch > _epoch(other))

    c.run_until_event(lambda: candidate_in_led_epoch() or passed(), 15_000)
    if candidate_in_led_epoch():
        c.replay(64, destination=lead.id, types=(VoteResponse,))
        c.run_for(50)
    c.heal()
    c.run_for(2_000, propose_every_ms=30)
    return True


GENERATORS: dict[str, Callable[..., bool]] = {
    "figure8": figure8,
    "lagging_follower": lagging_follower,
    "divergence_storm": divergence_storm,
    "snapshot_catch_up": snapshot_catch_up,
    "stale_messages": stale_messages,
    "stale_vote_replay": stale_vote_replay,
    "deposed_leader_cut": deposed_leader_cut,
}
