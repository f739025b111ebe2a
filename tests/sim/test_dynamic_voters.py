"""KIP-853 under the simulation: voters added, removed and replaced (wiped disks) while
nodes crash (also half-way through a Ready), the network partitions, loses and duplicates
messages, and leaders change. The harness checks its safety invariants after every event
(one leader per epoch, nothing committed lost or changed, ...) and, with dynamic voters,
at most one uncommitted voter change in a leader's log, one voter changed at a time, and
no new leader whose voter set shares no majority with the committed one.

Each seed is one random schedule (a pure function of the seed). The end of each run
heals everything and requires progress and one voter set everywhere. `DYNAMIC_SEEDS`
grows tenfold under the long profile.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from quorum.raft.core import RaftCore
from quorum.raft.errors import ErrorCode
from quorum.raft.voter_change import AddVoter, RemoveVoter
from quorum.raft.voter_set import ReplicaKey, VoterSet
from tests.scale import long_profile
from tests.sim.core_mutants import Mutant
from tests.sim.harness import Cluster, InvariantViolation, Node

LONG = long_profile()
DYNAMIC_SEEDS = range(300 if LONG else 6)
STEPS = 60 if LONG else 30
TOTALS: Counter[str] = Counter()
_RAN: set[int] = set()  # seeds whose schedule added to TOTALS


def _live(c: Cluster) -> list[Node]:
    return [n for n in c.nodes.values() if n.core is not None]


def _settle(c: Cluster, limit_ms: int = 30_000) -> None:
    """Run with proposals until a leader commits what it proposed."""
    target = c.proposed + 1
    ok = c.run_until(lambda: c.leader() is not None and c.max_committed > 0 and _values(c) >= target, limit_ms)
    if not ok:
        c.run_for(1_000, propose_every_ms=50)


def _values(c: Cluster) -> int:
    return len(c.committed_values())


def _voter_ids(c: Cluster) -> list[int]:
    leader = c.leader()
    return sorted(leader.core.voters) if leader is not None and leader.core is not None else []


def _stale(c: Cluster, voters: VoterSet) -> list[ReplicaKey]:
    """Voters whose disk was wiped: their node runs as another replica now."""
    return [n.key for n in voters.nodes if c.nodes[n.node_id].directory_id != n.key.directory_id]


def _request(c: Cluster, rng: random.Random, kind: str) -> None:
    """Ask the leader for a change. A wiped voter is a lost replica: as an operator would,
    remove it first (removing a live voter then would leave a set without a live majority)."""
    leader = c.leader()
    if leader is None or leader.core is None:
        return
    voters = leader.core.voter_set
    stale = _stale(c, voters)
    if stale:
        c.change_voters(RemoveVoter(stale[0]))
        TOTALS["replacements"] += 1
        return
    if kind == "add":
        candidates = [n for n in c.nodes if n not in voters.ids and c.nodes[n].up]
        if candidates:
            key = c.change_voters(AddVoter(c.voter_node(rng.choice(candidates))))
            TOTALS["add_requests"] += key is not None
    else:
        if len(voters.nodes) <= 1:
            return
        node = rng.choice(voters.nodes)
        if kind == "remove_leader":
            node = voters.node(leader.id) or node
        key = c.change_voters(RemoveVoter(node.key))
        TOTALS["remove_requests"] += 1
        if key is not None and node.node_id == leader.id:
            c.run_until(lambda: key in c.voter_results, 3_000)
            result = c.voter_results.get(key)
            TOTALS["leaders_removed"] += result is not None and result.error is ErrorCode.NONE


def run_schedule(seed: int, steps: int = STEPS) -> Cluster:
    rng = random.Random(seed)
    voters = rng.choice([1, 1, 3])
    c = Cluster(
        seed,
        voters=voters,
        observers=5 - voters,
        snapshot_every=rng.choice([0, 10]),
        max_delay_ms=rng.choice([1, 5, 20]),
        connection_resets=seed % 2 == 1,
        dynamic=True,
    )
    c.run_for(3_000, propose_every_ms=50)
    for _ in range(steps):
        event = rng.choices(
            [
                "run",
                "add",
                "remove",
                "remove_leader",
                "crash",
                "crash_mid_ready",
                "restart",
                "crash_leader",
                "partition",
                "heal",
                "loss",
                "wipe",
            ],
            weights=[6, 5, 4, 1, 2, 1, 3, 1, 1, 2, 1, 1],
        )[0]
        TOTALS[f"event_{event}"] += 1
        ids = list(c.nodes)
        if event == "run":
            c.run_for(rng.choice([100, 500, 2_000, 5_000]), propose_every_ms=rng.choice([0, 20, 100]))
        elif event in ("add", "remove", "remove_leader"):
            _request(c, rng, event)
            c.run_for(rng.choice([10, 200, 1_500]), propose_every_ms=50)
        elif event == "crash":
            c.crash(rng.choice(ids))
        elif event == "crash_mid_ready":
            c.crash_mid_ready(rng.choice(ids), rng.randint(0, 4))
        elif event == "restart":
            for n in ids:
                if not c.nodes[n].up and rng.random() < 0.7:
                    c.restart(n)
        elif event == "crash_leader":
            leader = c.leader()
            if leader is not None:
                c.crash(leader.id)
        elif event == "partition":
            side = set(rng.sample(ids, rng.randint(1, len(ids) - 1)))
            c.partition(side, set(ids) - side)
        elif event == "heal":
            c.heal()
            c.loss = c.duplicate = 0.0
        elif event == "loss":
            c.loss, c.duplicate = rng.choice([0.0, 0.05, 0.2]), rng.choice([0.0, 0.1])
        elif event == "wipe":
            _wipe_one(c, rng)
    _finish(c)
    return c


def _wipe_one(c: Cluster, rng: random.Random) -> None:
    """Lose one node's disk: an observer, or a voter only while the other voters hold every
    committed entry on a majority (a wipe is a lost replica, within Raft's fault budget only
    if the rest still hold a majority). The voter is then replaced: removed by its old
    directory id, and added again with its new one once caught up (`_request` may do it)."""
    node_id = rng.choice(list(c.nodes))
    committed = c.committed_voter_set()
    for voters in c.voter_sets_in_use():
        if _stale(c, voters) or (node_id in voters.ids and len(voters.nodes) < 3):
            return  # one lost replica at a time, and never one of a set that cannot lose one
    if node_id in committed.ids and c.max_committed:
        others = [n for n in committed.nodes if n.node_id != node_id]
        held = sum(c._disk_holds_committed(c.nodes[n.node_id], c.max_committed - 1) for n in others)  # noqa: SLF001
        if held < committed.majority:
            return
    c.wipe(node_id)
    c.restart(node_id)
    TOTALS["wipes"] += 1


def _finish(c: Cluster) -> None:
    """Heal, restart everything, and require progress and one voter set everywhere."""
    c.heal()
    c.loss = c.duplicate = 0.0
    for n in list(c.nodes):
        c.nodes[n].armed_crash = None
        c.restart(n)
    before = _values(c)
    c.run_for(5_000, propose_every_ms=50)
    for _ in range(5):  # replace what was wiped
        leader = c.leader()
        if leader is None or leader.core is None or not _stale(c, leader.core.voter_set):
            break
        _request(c, random.Random(0), "remove")
        c.run_for(3_000, propose_every_ms=50)
    c.run_for(15_000, propose_every_ms=50)
    assert _values(c) > before, f"no progress after healing: {_voter_ids(c)}"
    leader = c.leader()
    assert leader is not None and leader.core is not None
    assert leader.core.is_voter, f"leader {leader.id} is not one of the voters {sorted(leader.core.voters)}"
    c.run_for(3_000)
    sets = {frozenset(n.core.voters) for n in _live(c) if n.core is not None}
    assert len(sets) == 1, f"voter sets differ after healing: {sets}"
    for result in c.voter_results.values():
        TOTALS[f"result_{result.error.name}"] += 1
    TOTALS["max_voters"] = max(TOTALS["max_voters"], len(leader.core.voters))


@pytest.mark.parametrize("seed", DYNAMIC_SEEDS)
def test_voter_changes_keep_every_safety_rule(seed: int) -> None:
    run_schedule(seed)
    _RAN.add(seed)


def test_voter_change_histories_were_reached() -> None:
    """The schedules above really changed voters (runs after them in the same session)."""
    for seed in DYNAMIC_SEEDS:
        if seed not in _RAN:
            run_schedule(seed)
            _RAN.add(seed)
    assert TOTALS["result_NONE"] >= 5, TOTALS  # changes committed
    assert TOTALS["result_REQUEST_TIMED_OUT"] >= 1, TOTALS  # refused while one was in flight, or lost
    assert TOTALS["replacements"] >= 1, TOTALS  # a wiped voter removed by its old directory id
    assert TOTALS["leaders_removed"] >= 1, TOTALS
    assert TOTALS["max_voters"] >= 3, TOTALS
    print(f"\ndynamic voters coverage: {dict(sorted(TOTALS.items()))}")


def test_growing_and_shrinking_under_load_loses_nothing() -> None:
    """1 -> 3 -> 5 -> 3 voters while proposals run, one committed change at a time."""
    c = Cluster(7, voters=1, observers=4, dynamic=True)
    c.run_for(2_000, propose_every_ms=20)
    add_ms: list[int] = []
    for target in (2, 3, 4, 5):
        start = c.now
        key = c.change_voters(AddVoter(c.voter_node(target)))
        assert key is not None
        assert c.run_until_event(lambda key=key: key in c.voter_results, 5_000, propose_every_ms=20)
        assert c.voter_results[key].error is ErrorCode.NONE, c.voter_results[key]
        add_ms.append(c.now - start)
        c.run_for(200, propose_every_ms=20)
    # Adding a caught-up observer costs a fetch round trip or two (simulated ms; target < 1 s).
    print(f"\nadd a caught-up voter (simulated ms): {add_ms}")
    assert max(add_ms) < 1_000, add_ms
    assert _voter_ids(c) == [1, 2, 3, 4, 5]
    for gone in (5, 4):
        key = c.change_voters(RemoveVoter(c.voter_node(gone).key))
        assert key is not None
        assert c.run_until(lambda key=key: key in c.voter_results, 5_000)
        assert c.voter_results[key].error is ErrorCode.NONE
        c.run_for(200, propose_every_ms=20)
    assert _voter_ids(c) == [1, 2, 3]
    before = c.proposed
    c.run_for(2_000, propose_every_ms=20)
    assert _values(c) >= before
    assert c.committed_values() == [f"v{i}" for i in range(len(c.committed_values()))]


def test_a_leader_that_removed_itself_and_lost_leadership_before_the_change_committed_is_replaced() -> None:
    """Voters {A, B}; leader A, cut off from B, writes the change that removes it, then
    crashes. A's log is the longest (it holds the change, B does not) and its latest voter set
    is {B}: were A an observer now, B could never win A's vote and A would never stand
    (long-profile seeds 68 and 69 found this deadlock). A stands while its removal is not
    known to be committed, wins B's vote (counted in {B}, not its own), commits the change
    and resigns; B leads {B}."""
    c = Cluster(68, voters=2, dynamic=True)
    _settle(c)
    a = c.leader()
    assert a is not None and a.core is not None
    b = next(n for n in c.voter_ids if n != a.id)
    c.partition([a.id], [b])
    key = c.change_voters(RemoveVoter(c.voter_node(a.id).key))
    assert key is not None
    c.run_for(100)
    a_core = c.nodes[a.id].core
    assert a_core is not None and a_core.voters == {b}, f"the change is not in A's log: {c.voter_results.get(key)}"
    c.crash(a.id)
    c.heal()
    c.restart(a.id)

    def b_leads_alone() -> bool:
        leader = c.leader()
        return leader is not None and leader.id == b and c.committed_voter_set().ids == {b}

    assert c.run_until(b_leads_alone, 30_000), f"no leader of {{{b}}}: leader {c.leader()}"
    before = _values(c)
    c.run_for(2_000, propose_every_ms=50)
    assert _values(c) > before, "B commits nothing"


# ------------------------------------------------------------------ mutants

VOTER_MUTANTS = (
    Mutant(
        "two_changes_in_flight",
        "a leader writes a voter change only once the previous one is committed",
        RaftCore,
        "change_voters",
        "error, message, new = decide(change, view, observer)",
        "error, message, new = decide(change, replace(view, pending=False, voters_offset=-1), observer)",
    ),
    Mutant(
        "wiped_replica_counts_as_voter",
        "a fetch counts toward the HW only from the voter's own directory id",
        RaftCore,
        "_on_fetch_request",
        "is_voter = self.voter_set.is_voter(ReplicaKey(source, req.replica_directory_id))",
        "is_voter = source in self.voters",
    ),
    Mutant(
        "removed_leader_stays",
        "a leader that the committed voter set no longer holds resigns",
        RaftCore,
        "_maybe_resign_removed",
        "if committed and not self.is_voter and ls.voter_change is None:",
        "if False:",
    ),
    Mutant(
        "leader_ignores_new_voters",
        "the leader counts the latest voter set (committed or not) for its HW",
        RaftCore,
        "_track_control",
        "if notify:",
        "if False:",
    ),
)


@contextmanager
def _mutated(mutant: Mutant) -> Iterator[None]:
    original = mutant.cls.__dict__[mutant.method]
    setattr(mutant.cls, mutant.method, mutant.build())
    try:
        yield
    finally:
        setattr(mutant.cls, mutant.method, original)


def caught_by(mutant: Mutant, seeds: range = range(40)) -> str | None:
    """The property (or failed liveness check) that first catches the mutant, or None."""
    with _mutated(mutant):
        for seed in seeds:
            try:
                run_schedule(seed)
                if mutant.name == "removed_leader_stays":
                    continue  # judged by the liveness check below
            except InvariantViolation as e:
                return e.prop
            except AssertionError as e:
                return f"liveness: {str(e).splitlines()[0][:60]}"
            except Exception as e:  # noqa: BLE001  (the broken core fails on its own)
                return f"crash: {type(e).__name__}"
    return None


@pytest.mark.pure_python  # plants mutants in the Raft core (conftest.py)
@pytest.mark.slow
@pytest.mark.parametrize("mutant", VOTER_MUTANTS, ids=lambda m: m.name)
def test_voter_change_mutants_are_caught(mutant: Mutant) -> None:
    prop = caught_by(mutant)
    print(f"\n{mutant.name} ({mutant.rule}): caught by {prop}")
    assert prop is not None, f"mutant {mutant.name} survived: {mutant.rule}"
