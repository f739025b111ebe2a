"""Safety of the Raft core under a simulated hostile world.

1. `RaftSafety`: a Hypothesis stateful test over `tests.sim.harness.Cluster`. Rules
   run time (with or without a stream of proposals), propose, crash (also half-way
   through a Ready, losing what was not fsynced), restart, shut down gracefully,
   partition, block one direction, heal, set message loss and duplication, keep old
   messages and deliver them again much later, and run a "majority stays connected"
   phase that must make progress; half of the clusters fetch with a small fetch size, and
   half see a dead node's connections reset (its peers' requests fail at once).
   (The histories this rarely reaches by chance are built on purpose in test_histories.py.) The harness checks its
   invariants after every single event; the state machine adds its own after every
   step; teardown heals everything and checks liveness and the replicated state.
2. Seeded scenarios after Kafka's RaftEventSimulationTest (leader election and
   failover, total restart, partitions, back-to-back failures, KIP-996's partial
   partition with stable leadership), with and without snapshots.
3. Mutation tests: a deliberately broken high-watermark rule must be caught.

Profiles (see the top-level conftest.py): "ci" (default) keeps this file at about two
minutes on two cores; "long" (``--hypothesis-profile=long``) runs far more.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from quorum.raft.core import RaftCore
from quorum.raft.roles import LeaderState, Role
from tests.scale import long_profile
from tests.sim.harness import Cluster, InvariantViolation, Node

# ------------------------------------------------------------------ profiles

LONG = long_profile()
STATEFUL_EXAMPLES = 5000 if LONG else 800
STATEFUL_STEPS = 60 if LONG else 40
SCENARIO_SEEDS = range(60 if LONG else 5)

BASE_CONFIG = Cluster(0, voters=1).config

# Liveness is expected with pre-vote off too, since the core stopped letting a refused
# stale candidate restart everybody's election timer (the livelock pinned in
# tests/unit/raft/test_raft_core_bugs.py). Set to False to check only safety there.
LIVENESS_WITHOUT_PRE_VOTE = True
MAX_NODES = 7  # 5 voters + 2 observers


# ------------------------------------------------------------------- helpers


def live(c: Cluster) -> list[Node]:
    return [n for n in c.nodes.values() if n.core is not None]


def hw(node: Node) -> int:
    assert node.core is not None
    return node.core.high_watermark


def describe(c: Cluster) -> str:
    parts = []
    for n in c.nodes.values():
        if n.core is None:
            parts.append(f"{n.id}:down")
        else:
            parts.append(f"{n.id}:{n.core.role.value[:4]}/e{n.core.epoch}/hw{n.core.high_watermark}")
    return " ".join(parts)


def commit_one(c: Cluster, limit_ms: int = 60_000) -> bool:
    """Propose one value and wait until it commits; propose again if its leader is lost."""
    end = c.now + limit_ms
    while c.now < end:
        if not c.run_until(lambda: c.leader() is not None, end - c.now):
            return False
        leader = c.leader()
        assert leader is not None and leader.core is not None
        core, epoch, offset = leader.core, leader.core.epoch, leader.core.log.end_offset
        value = f"v{c.proposed}".encode()
        if not c.propose(1):
            continue

        def settled(offset: int = offset, leader: Node = leader, core: RaftCore = core) -> bool:
            return offset in c.committed or leader.core is not core or core.role is not Role.LEADER

        c.run_until(settled, min(10_000, max(end - c.now, 0)))
        if c.committed.get(offset) == (epoch, value):
            return True
    return False


def check_committed_values(c: Cluster) -> list[str]:
    """The committed values are unique and in proposal order; every state machine holds a prefix."""
    values = c.committed_values()
    numbers = [int(v[1:]) for v in values]
    assert numbers == sorted(set(numbers)), f"committed values duplicated or out of order: {values[-20:]}"
    for n in live(c):
        assert n.sm.values == values[: len(n.sm.values)], f"node {n.id} state machine diverged"
    return values


def converge(c: Cluster, limit_ms: int = 60_000) -> None:
    """Heal, restart everybody, commit something new, and wait until every node has it all."""
    c.heal()
    c.loss = c.duplicate = c.stash_rate = 0.0
    for node in c.nodes.values():
        node.armed_crash = None
        c.restart(node.id)
    assert commit_one(c, limit_ms), f"no progress after healing: {describe(c)}"
    target = c.committed_values()
    assert c.run_until(lambda: all(n.sm.values == target for n in c.nodes.values()), limit_ms), (
        f"state machines did not catch up: {describe(c)}"
    )
    assert check_committed_values(c) == target


# --------------------------------------------------------------- state machine

NODE = st.integers(1, MAX_NODES)


class RaftSafety(RuleBasedStateMachine):
    """Steps print as `state.crash(node=2)` etc.; node numbers beyond the cluster wrap
    around (node 5 of a 3-node cluster is node 2), and each step notes what it did."""

    def __init__(self) -> None:
        super().__init__()
        self.c: Cluster | None = None
        self.broken = False  # a step failed: teardown must not pile a second error on top
        self.leader_of_epoch: dict[int, int] = {}
        self.max_epoch: dict[int, int] = {}
        self.expect_liveness = True

    def __repr__(self) -> str:
        return f"RaftSafety({describe(self.c)})" if self.c else "RaftSafety(not started)"

    @property
    def cluster(self) -> Cluster:
        assert self.c is not None
        return self.c

    def node(self, n: int) -> int:
        ids = list(self.cluster.nodes)
        return ids[(n - 1) % len(ids)]

    @contextmanager
    def step(self, what: str) -> Iterator[Cluster]:
        c = self.cluster
        note(f"t={c.now}ms {what}")
        try:
            yield c
        except BaseException:
            self.broken = True
            note(f"  -> failed at t={c.now}ms: {describe(c)}")
            raise

    # ----------------------------------------------------------------- setup

    @initialize(
        voters=st.integers(1, 5),
        observers=st.integers(0, 2),
        snapshot_every=st.sampled_from([0, 10]),
        max_delay_ms=st.sampled_from([1, 5, 20]),
        pre_vote=st.booleans(),
        seed=st.integers(0, 2**16),
        warmup_ms=st.sampled_from([3_000, 0]),
        fetch_max_bytes=st.sampled_from([BASE_CONFIG.fetch_max_bytes, 1, 250]),
    )
    def start(
        self,
        voters: int,
        observers: int,
        snapshot_every: int,
        max_delay_ms: int,
        pre_vote: bool,
        seed: int,
        warmup_ms: int,
        fetch_max_bytes: int,
    ) -> None:
        """A new cluster; with a warm-up (usually), it has elected a leader and committed a little.
        A small fetch size cuts answers short (the follower's HW must stay within its log).
        Odd seeds report a dead node's connections as reset to its peers (`request_failed`)."""
        config = dataclasses.replace(BASE_CONFIG, pre_vote=pre_vote, fetch_max_bytes=fetch_max_bytes)
        self.c = Cluster(seed, voters, observers, config, snapshot_every, max_delay_ms, connection_resets=seed % 2 == 1)
        self.expect_liveness = pre_vote or LIVENESS_WITHOUT_PRE_VOTE
        with self.step(f"warm up {warmup_ms}ms with proposals") as c:
            c.run_for(warmup_ms, propose_every_ms=50)

    # ----------------------------------------------------------------- rules

    @rule(ms=st.sampled_from([10, 300, 1_000, 3_000, 8_000]))
    def run(self, ms: int) -> None:
        with self.step(f"run {ms}ms") as c:
            c.run_for(ms)

    @rule(ms=st.sampled_from([50, 500, 2_000, 5_000]), propose_every_ms=st.sampled_from([20, 100]))
    def run_with_proposals(self, ms: int, propose_every_ms: int) -> None:
        with self.step(f"run {ms}ms, proposing every {propose_every_ms}ms") as c:
            c.run_for(ms, propose_every_ms=propose_every_ms)

    @rule(count=st.integers(1, 20))
    def propose(self, count: int) -> None:
        with self.step(f"propose {count}") as c:
            c.propose(count)

    @rule(node=NODE)
    def crash(self, node: int) -> None:
        nid = self.node(node)
        with self.step(f"crash {nid}") as c:
            c.crash(nid)

    @rule(node=NODE, steps=st.integers(0, 4))
    def crash_mid_ready(self, node: int, steps: int) -> None:
        nid = self.node(node)
        with self.step(f"crash {nid} after {steps} persistence steps of its next Ready") as c:
            c.crash_mid_ready(nid, steps)

    @rule(mid_ready_steps=st.none() | st.integers(0, 4))
    def crash_leader(self, mid_ready_steps: int | None) -> None:
        """Leader changes are where the bugs are: crash the leader (maybe during its next write)."""
        leader = self.cluster.leader()
        what = "now" if mid_ready_steps is None else f"after {mid_ready_steps} persistence steps of its next Ready"
        with self.step(f"crash the leader ({leader.id if leader else 'none'}) {what}") as c:
            if leader is None:
                return
            if mid_ready_steps is None:
                c.crash(leader.id)
            else:
                c.crash_mid_ready(leader.id, mid_ready_steps)

    @rule()
    def isolate_leader(self) -> None:
        leader = self.cluster.leader()
        with self.step(f"isolate the leader ({leader.id if leader else 'none'})") as c:
            if leader is not None:
                c.partition([leader.id], [i for i in c.nodes if i != leader.id])

    @rule(node=NODE)
    def restart(self, node: int) -> None:
        nid = self.node(node)
        with self.step(f"restart {nid}") as c:
            c.restart(nid)

    @rule()
    def restart_all(self) -> None:
        with self.step("restart every crashed node") as c:
            for nid in c.nodes:
                c.restart(nid)

    @rule(node=NODE)
    def shutdown(self, node: int) -> None:
        nid = self.node(node)
        with self.step(f"shut down {nid} gracefully") as c:
            c.shutdown(nid)

    @rule(side=st.sets(NODE, min_size=1, max_size=MAX_NODES - 1))
    def partition(self, side: set[int]) -> None:
        group = {self.node(n) for n in side}
        rest = set(self.cluster.nodes) - group
        with self.step(f"partition {sorted(group)} | {sorted(rest)}") as c:
            c.partition(group, rest)

    @rule(source=NODE, destination=NODE)
    def block(self, source: int, destination: int) -> None:
        src, dst = self.node(source), self.node(destination)
        with self.step(f"block {src} -> {dst}") as c:
            c.block(src, dst)

    @rule()
    def heal(self) -> None:
        with self.step("heal the network") as c:
            c.heal()

    @rule(loss_pct=st.integers(0, 30), duplicate_pct=st.integers(0, 20))
    def set_network(self, loss_pct: int, duplicate_pct: int) -> None:
        with self.step(f"loss {loss_pct}%, duplication {duplicate_pct}%") as c:
            c.loss = loss_pct / 100
            c.duplicate = duplicate_pct / 100

    @rule(keep_pct=st.sampled_from([0, 5, 20]), count=st.integers(0, 30), node=st.none() | NODE)
    def replay_old_messages(self, keep_pct: int, count: int, node: int | None) -> None:
        """Keep a share of the messages sent from now on; deliver again up to `count` of those
        kept so far (to one node, or to anyone), with their old epochs and request ids."""
        nid = None if node is None else self.node(node)
        with self.step(f"keep {keep_pct}% of messages; replay {count} old ones to {nid or 'anyone'}") as c:
            c.stash_rate = keep_pct / 100
            c.replay(count, destination=nid)

    @rule(minority=st.sets(NODE, max_size=MAX_NODES))
    def majority_phase(self, minority: set[int]) -> None:
        """Cut a minority of voters (and maybe observers) off; the majority, all up and
        without message loss, must elect a leader and commit a new value."""
        c = self.cluster
        cut = {self.node(n) for n in minority}
        voters = [v for v in c.voter_ids if v in cut][: (len(c.voter_ids) - 1) // 2]
        small = set(voters) | (cut & set(c.observer_ids))
        big = set(c.nodes) - small
        with self.step(f"majority phase: {sorted(big)} stay connected, {sorted(small)} cut off") as c:
            c.partition(big, small)
            c.loss = 0.0
            for nid in sorted(big):
                c.nodes[nid].armed_crash = None
                c.restart(nid)
            before = max((hw(n) for n in live(c) if n.id in big), default=0)
            if not self.expect_liveness:
                c.run_for(5_000, propose_every_ms=50)
                return
            assert commit_one(c, 30_000), f"majority {sorted(big)} made no progress: {describe(c)}"
            after = max(hw(n) for n in live(c) if n.id in big)
            assert after > before
            assert all(hw(n) <= after for n in live(c) if n.id in small)

    # ------------------------------------------------------------- invariants

    @invariant()
    def at_most_one_leader_per_epoch(self) -> None:
        if self.c is None:
            return
        for n in live(self.c):
            assert n.core is not None
            if n.core.role is Role.LEADER:
                first = self.leader_of_epoch.setdefault(n.core.epoch, n.id)
                assert first == n.id, f"epoch {n.core.epoch} led by {first} and {n.id}"

    @invariant()
    def epochs_never_go_back(self) -> None:
        if self.c is None:
            return
        for n in self.c.nodes.values():
            epoch = n.core.epoch if n.core is not None else (n.disk.election.epoch if n.disk.election else 0)
            assert epoch >= self.max_epoch.get(n.id, 0), f"node {n.id} epoch went back to {epoch}"
            self.max_epoch[n.id] = epoch

    @invariant()
    def committed_data_identical_everywhere(self) -> None:
        if self.c is not None:
            check_committed_values(self.c)

    # --------------------------------------------------------------- liveness

    def teardown(self) -> None:
        c = self.c
        if c is None or self.broken:
            return
        note(f"teardown at t={c.now}ms: heal, restart all, expect progress; {describe(c)}")
        if self.expect_liveness:
            converge(c, 30_000)
            return
        c.heal()
        c.loss = c.duplicate = c.stash_rate = 0.0
        for node in c.nodes.values():
            node.armed_crash = None
            c.restart(node.id)
        c.run_for(10_000, propose_every_ms=50)
        check_committed_values(c)


@pytest.mark.timeout(0 if LONG else 600)
def test_raft_safety_stateful() -> None:
    run_state_machine_as_test(
        RaftSafety,
        settings=settings(
            max_examples=STATEFUL_EXAMPLES,
            stateful_step_count=STATEFUL_STEPS,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


# -------------------------------------------------- Kafka-style seeded scenarios


def shape(seed: int, min_voters: int = 1, max_voters: int = 5) -> tuple[int, int]:
    """(voters, observers) from the seed, like jqwik's @ForAll numVoters/numObservers."""
    voters = min_voters + seed % (max_voters - min_voters + 1)
    return voters, (seed // 5) % 3


def progress_until(c: Cluster, done: Callable[[], bool], limit_ms: int = 30_000, every_ms: int = 10) -> None:
    """Run with the leader appending a value every `every_ms` until `done()`."""
    end = c.now + limit_ms
    while not done():
        assert c.now < end, f"no progress in {limit_ms}ms: {describe(c)}"
        c.run_for(every_ms, propose_every_ms=every_ms)


def all_reached(c: Cluster, offset: int, among: Callable[[Node], bool] = lambda n: True) -> Callable[[], bool]:
    return lambda: all(hw(n) >= offset for n in live(c) if among(n))


def max_hw(c: Cluster) -> int:
    return max((hw(n) for n in live(c)), default=0)


def new_leader(c: Cluster, old: int, epoch: int) -> Callable[[], bool]:
    def check() -> bool:
        leader = c.leader()
        return leader is not None and leader.id != old and leader.core is not None and leader.core.epoch > epoch

    return check


def leader_of(c: Cluster) -> tuple[int, int]:
    leader = c.leader()
    assert leader is not None and leader.core is not None
    return leader.id, leader.core.epoch


SNAPSHOTS = pytest.mark.parametrize("snapshot_every", [0, 10], ids=["no-snapshots", "snapshots"])
SEEDS = pytest.mark.parametrize("seed", SCENARIO_SEEDS)


@SNAPSHOTS
@SEEDS
def test_can_elect_initial_leader(seed: int, snapshot_every: int) -> None:
    voters, observers = shape(seed)
    c = Cluster(seed, voters, observers, snapshot_every=snapshot_every)
    progress_until(c, all_reached(c, 10))
    converge(c)


@pytest.mark.parametrize("graceful", [False, True], ids=["crash", "shutdown"])
@SNAPSHOTS
@SEEDS
def test_can_elect_new_leader_after_old_leader_failure(seed: int, snapshot_every: int, graceful: bool) -> None:
    voters, observers = shape(seed, 3)
    c = Cluster(seed, voters, observers, snapshot_every=snapshot_every)
    progress_until(c, all_reached(c, 10))
    old, epoch = leader_of(c)
    (c.shutdown if graceful else c.crash)(old)
    progress_until(c, new_leader(c, old, epoch))
    progress_until(c, all_reached(c, max_hw(c) + 10))
    c.restart(old)
    progress_until(c, all_reached(c, max_hw(c) + 10))
    converge(c)


@SNAPSHOTS
@SEEDS
def test_can_recover_after_all_nodes_killed(seed: int, snapshot_every: int) -> None:
    voters, observers = shape(seed)
    c = Cluster(seed, voters, observers, snapshot_every=snapshot_every)
    progress_until(c, all_reached(c, 10))
    reached = max_hw(c)
    for nid in c.nodes:
        c.crash(nid)
    c.run_for(1_000)
    for nid in c.nodes:
        c.restart(nid)
    progress_until(c, all_reached(c, reached + 10))
    converge(c)


@SNAPSHOTS
@SEEDS
def test_can_elect_new_leader_after_old_leader_partitioned_away(seed: int, snapshot_every: int) -> None:
    voters, observers = shape(seed, 3)
    c = Cluster(seed, voters, observers, snapshot_every=snapshot_every)
    progress_until(c, all_reached(c, 10))
    old, epoch = leader_of(c)
    c.partition([old], [i for i in c.nodes if i != old])
    progress_until(c, new_leader(c, old, epoch))
    progress_until(c, all_reached(c, max_hw(c) + 10, lambda n: n.id != old))
    c.heal()
    progress_until(c, all_reached(c, max_hw(c) + 10))
    converge(c)


@SNAPSHOTS
@SEEDS
def test_can_make_progress_if_majority_is_reachable(seed: int, snapshot_every: int) -> None:
    _, observers = shape(seed)
    c = Cluster(seed, 5, observers, snapshot_every=snapshot_every)
    progress_until(c, all_reached(c, 10))
    minority = [1, 2]
    majority = [i for i in c.nodes if i not in minority]
    c.partition(minority, majority)
    c.run_for(10_000, propose_every_ms=10)
    minority_hw = max(hw(c.nodes[i]) for i in minority)
    majority_hw = min(hw(c.nodes[i]) for i in majority)
    assert majority_hw > minority_hw, describe(c)
    c.heal()
    progress_until(c, all_reached(c, max_hw(c) + 10))
    converge(c)


def back_to_back_leader_failures(c: Cluster) -> None:
    """The leader is cut off; the moment another leads, the first is back and the new one is
    cut off; once a third leads, everything heals and the cluster must commit past every log."""
    progress_until(c, all_reached(c, 10))
    first, epoch = leader_of(c)
    c.partition([first], [i for i in c.nodes if i != first])
    progress_until(c, new_leader(c, first, epoch))
    second, epoch = leader_of(c)
    c.partition([second], [i for i in c.nodes if i != second])  # and `first` is back
    progress_until(c, new_leader(c, second, epoch))
    # Not max_hw(c) + 10: the deposed leaders' uncommitted suffixes (hundreds of entries) are
    # not committed yet, and the new leader commits its own at its first commit in its epoch;
    # reaching past every log's end needs entries proposed after the heal.
    reached = max(n.core.log.end_offset for n in live(c) if n.core is not None)
    c.heal()
    progress_until(c, all_reached(c, reached + 10))


@SNAPSHOTS
@SEEDS
def test_can_make_progress_after_back_to_back_leader_failures(seed: int, snapshot_every: int) -> None:
    voters, observers = shape(seed, 3)
    c = Cluster(seed, voters, observers, snapshot_every=snapshot_every)
    back_to_back_leader_failures(c)
    converge(c)


def test_observer_of_a_deposed_leader_cuts_what_a_later_epoch_committed() -> None:
    """Issue 23, found by the long profile (back-to-back failures, seed 9, snapshots): 3 voters
    and observer 4. Leader 2 (epoch 1) is cut off and keeps appending; 4 follows it and
    acknowledges those entries. 3 leads epoch 2 and is cut off at once; 4 follows it (no data
    flows); 2 wins epoch 3 with its suffix. After the heal 2 commits that suffix in epoch 3,
    while 4, still in epoch 2, asks the deposed but still leading 3, which answers with a
    diverging epoch: 4 truncates entries that are committed, above its own HW. Kafka's
    followers do the same and Raft allows it (that ack was made in epoch 1 and never counted
    in epoch 3; see `Cluster._check_acked_kept`); the harness used to call it a violation
    ("acked-committed-kept"). The history must be reached, or this test says nothing."""
    seed = 9
    voters, observers = shape(seed, 3)
    assert (voters, observers) == (3, 1)
    c = Cluster(seed, voters, observers, snapshot_every=10)
    back_to_back_leader_failures(c)
    assert c.coverage["later_commit_cut_by_observer"] >= 1, f"the issue-23 history was not reached: {describe(c)}"
    converge(c)


# KIP-996's partial partition: A-C, B-D, C-D, C-E, D-E are the only links.
KIP996_LINKS = [("A", "C"), ("B", "D"), ("C", "D"), ("C", "E"), ("D", "E")]


def connect_only(c: Cluster, names: dict[str, int]) -> None:
    links = {(names[a], names[b]) for a, b in KIP996_LINKS}
    links |= {(b, a) for a, b in links}
    c.blocked = {(a, b) for a in c.nodes for b in c.nodes if a != b and (a, b) not in links}


def watch_stable_leadership(c: Cluster) -> list[tuple[int, int]]:
    """From now on, after every event: once someone leads, nobody else ever does, and no
    node moves past that leader's epoch (KIP-996's StableLeadership)."""
    first: list[tuple[int, int]] = []
    check = c.check

    def checking() -> None:
        check()
        leaders = {(n.id, n.core.epoch) for n in live(c) if n.core is not None and n.core.role is Role.LEADER}
        if not first and leaders:
            first.append(next(iter(leaders)))
        if first:
            if leaders - set(first):
                raise InvariantViolation(f"leadership moved from {first[0]} to {leaders}")
            epoch = first[0][1]
            if any(n.core is not None and n.core.epoch > epoch for n in live(c)):
                raise InvariantViolation(f"an epoch passed {epoch}: {describe(c)}")

    c.check = checking  # type: ignore[method-assign]
    return first


@SNAPSHOTS
@SEEDS
def test_leadership_assigned_only_once_in_kip996_partition(seed: int, snapshot_every: int) -> None:
    c = Cluster(seed, 5, snapshot_every=snapshot_every)
    connect_only(c, dict(zip("ABCDE", c.voter_ids, strict=True)))
    first = watch_stable_leadership(c)
    progress_until(c, lambda: bool(first))
    assert first[0][0] in (3, 4, 5)  # only C, D and E can reach a majority
    progress_until(c, all_reached(c, 10, lambda n: n.id in (3, 4, 5)))
    c.run_for(20_000, propose_every_ms=20)
    assert leader_of(c) == first[0]
    converge(c)


@SNAPSHOTS
@SEEDS
def test_leadership_does_not_change_in_kip996_partition_if_majority_reachable(seed: int, snapshot_every: int) -> None:
    c = Cluster(seed, 5, snapshot_every=snapshot_every)
    progress_until(c, all_reached(c, 10))
    leader, _ = leader_of(c)
    # The leader plays C, the best connected; the others fill A, B, D, E in order.
    others = [v for v in c.voter_ids if v != leader]
    connect_only(c, {"C": leader, **dict(zip("ABDE", others, strict=True))})
    first = watch_stable_leadership(c)
    c.run_for(20_000, propose_every_ms=20)
    assert first and first[0][0] == leader and leader_of(c) == first[0]
    progress_until(c, all_reached(c, max_hw(c) + 10, lambda n: n.id != others[0] and n.id != others[1]))
    converge(c)


# ------------------------------------------------ the invariant checker bites


def hw_counting_observers(self: RaftCore, ls: LeaderState) -> None:
    """MUTANT: the high watermark counts observers' fetch offsets as votes."""
    me = ls.voters.get(self.node_id)
    if me is not None:
        me.end_offset = self._flushed_end
    everyone = [*ls.voters.values(), *ls.observers.values()]
    offsets = sorted((p.end_offset for p in everyone), reverse=True)
    candidate = offsets[len(everyone) // 2]
    if candidate > ls.epoch_start_offset and candidate > self.high_watermark:
        ls.hw_known = True
        self.high_watermark = candidate
        self._complete_parked(ls, only_with_data=False)


def hw_off_by_one(self: RaftCore, ls: LeaderState) -> None:
    """MUTANT: the high watermark is read one position too high in the sorted offsets."""
    me = ls.voters.get(self.node_id)
    if me is not None:
        me.end_offset = self._flushed_end
    offsets = sorted((p.end_offset for p in ls.voters.values()), reverse=True)
    candidate = offsets[max(len(self.voters) // 2 - 1, 0)]
    if candidate > ls.epoch_start_offset and candidate > self.high_watermark:
        ls.hw_known = True
        self.high_watermark = candidate
        self._complete_parked(ls, only_with_data=False)


@pytest.mark.pure_python  # plants mutants in the Raft core (conftest.py)
@pytest.mark.parametrize("mutant", [hw_counting_observers, hw_off_by_one], ids=lambda f: f.__name__)
def test_invariant_checker_catches_a_broken_high_watermark(
    mutant: Callable[[RaftCore, LeaderState], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A leader cut off from the other voters but still fetched by observers: a broken HW
    rule commits what no majority of voters holds, and the harness must say so."""

    def scenario() -> None:
        c = Cluster(7, voters=3, observers=2)
        progress_until(c, all_reached(c, 5))
        leader, _ = leader_of(c)
        c.partition([leader, *c.observer_ids], [v for v in c.voter_ids if v != leader])
        c.run_for(2_000, propose_every_ms=10)

    scenario()  # the real rule passes
    monkeypatch.setattr(RaftCore, "_maybe_advance_hw", mutant)
    with pytest.raises(InvariantViolation, match="HW .* is on only|durable on only"):
        scenario()


@pytest.mark.pure_python  # plants mutants in the Raft core (conftest.py)
def test_stateful_machine_catches_a_mutant(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stateful test itself (not only a hand-made scenario) finds the off-by-one."""
    monkeypatch.setattr(RaftCore, "_maybe_advance_hw", hw_off_by_one)
    with pytest.raises(InvariantViolation):
        run_state_machine_as_test(
            RaftSafety,
            settings=settings(
                max_examples=30,
                stateful_step_count=10,
                deadline=None,
                derandomize=True,
                phases=[p for p in settings().phases if p.name != "shrink"],
                print_blob=False,
                suppress_health_check=list(HealthCheck),
            ),
        )
