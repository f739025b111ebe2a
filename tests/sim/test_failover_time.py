"""Liveness with a bound (issue 24): how long the quorum is without a leader after one stops.

Property: in every schedule without message loss, after the leader stops (kill -9, a
crash half-way through a Ready, or a graceful shutdown), a new leader is elected within
controller.quorum.fetch.timeout.ms + 2 x controller.quorum.election.timeout.ms. A dead
node is reported by TCP (its peers' requests fail: `Cluster.connection_resets`) or, as
a host that lost power, is simply silent; both must meet the bound.

The slow paths this pins: two survivors that stood together and granted each other's
pre-vote, then both stood as candidates in one epoch and each waited a whole election
timeout (crossed pre-votes); a survivor that refused the other's pre-vote until its own
fetch timeout; a resigning leader that handed over to a voter that was behind.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from quorum.raft.config import RaftConfig
from quorum.raft.roles import Role
from tests.scale import examples
from tests.sim.harness import Cluster
from tests.sim.test_safety import all_reached, describe, progress_until

DEFAULT = Cluster(0, voters=1).config  # Kafka's timeouts: election 1000 ms, fetch 2000 ms
FAST = RaftConfig(  # the integration test's: election 150 ms, fetch 300 ms
    election_timeout_ms=150,
    fetch_timeout_ms=300,
    election_backoff_max_ms=150,
    request_timeout_ms=300,
    fetch_max_wait_ms=100,
    snapshot_chunk_bytes=2048,
    max_batch_records=8,
)


def failover_bound_ms(config: RaftConfig) -> int:
    return config.fetch_timeout_ms + 2 * config.election_timeout_ms


@settings(
    max_examples=examples(300),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    seed=st.integers(0, 2**32 - 1),
    voters=st.sampled_from([3, 3, 5]),
    observers=st.integers(0, 1),
    fast=st.booleans(),
    resets=st.booleans(),
    how=st.sampled_from(["crash", "crash_mid_ready", "shutdown"]),
    propose_every_ms=st.sampled_from([0, 3, 20]),
    warmup_ms=st.sampled_from([0, 1, 7, 50, 400, 3_000]),
    max_delay_ms=st.integers(1, 10),
)
def test_new_leader_within_fetch_timeout_plus_two_election_timeouts(
    seed: int,
    voters: int,
    observers: int,
    fast: bool,
    resets: bool,
    how: str,
    propose_every_ms: int,
    warmup_ms: int,
    max_delay_ms: int,
) -> None:
    config = FAST if fast else DEFAULT
    c = Cluster(seed, voters, observers, config=config, max_delay_ms=max_delay_ms, connection_resets=resets)
    progress_until(c, all_reached(c, 5))
    c.run_for(warmup_ms, propose_every_ms=propose_every_ms)
    leader = c.leader()
    if leader is None or leader.core is None:
        progress_until(c, lambda: c.leader() is not None)
        leader = c.leader()
    assert leader is not None and leader.core is not None
    core = leader.core
    asked = c.now
    if how == "crash":
        c.crash(leader.id)
    elif how == "crash_mid_ready":
        c.crash_mid_ready(leader.id, steps=1)
        progress_until(c, lambda: not leader.up, every_ms=1)  # it dies on its next Ready
    else:
        c.shutdown(leader.id)
        # It stopped taking writes and waited, at most this long, for a voter to catch up.
        assert c.now - asked <= config.resign_catch_up_ms + config.election_timeout_ms, describe(c)
    assert c.leader_stopped is not None or c.failover_ms, f"{how}: no leader stop recorded"
    bound = failover_bound_ms(config)
    elected = c.run_until_event(lambda: bool(c.failover_ms), limit_ms=bound + 1, propose_every_ms=propose_every_ms)
    note(f"{how} of {leader.id} in epoch {core.epoch}: {describe(c)}; failover {c.failover_ms}")
    assert elected and c.failover_ms[0] <= bound, (
        f"no new leader within fetch timeout + 2 x election timeout = {bound} ms after the "
        f"{how} of leader {leader.id}: {describe(c)}"
    )
    new = c.leader()
    assert new is not None and new.core is not None and new.core.role is Role.LEADER
