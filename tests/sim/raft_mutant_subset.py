"""A fast subset of the Raft core's mutants (`tests.sim.core_mutants`) for the default suite.

Each entry pairs a mutant with the directed history (`tests.sim.histories`) that reaches the
rule it breaks and the seeds that history needs on this machine; the mutant counts as caught
when the history or the convergence after it fails (an invariant of the harness, or no
progress). The full set against the whole CI profile stays in `tests/sim/mutation_check.py`
(``-m slow``).
"""

from __future__ import annotations

from collections.abc import Callable

from tests.sim import histories as h
from tests.sim.harness import Cluster
from tests.sim.test_safety import converge

History = Callable[[int], Cluster]


def _figure8(seed: int) -> Cluster:
    c = Cluster(seed, 3, 0, h.config())
    h.figure8(c, x_batches=2, y_batches=1, comeback="restart", exit="crash")
    return c


def _figure8_small_fetch(seed: int) -> Cluster:
    c = Cluster(seed, 3, 0, h.config(1))
    h.figure8(c, x_batches=1, y_batches=0, comeback="restart", exit="crash")
    return c


def _stale(seed: int) -> Cluster:
    c = Cluster(seed, 3, 0, h.config())
    h.stale_messages(c)
    return c


def _stale_votes(seed: int) -> Cluster:
    c = Cluster(seed, 3, 0, h.config())
    h.stale_vote_replay(c)
    return c


def _lagging(seed: int) -> Cluster:
    c = Cluster(seed, 3, 0, h.config(1))
    h.lagging_follower(c, lag_ms=3_000)
    return c


def _storm(seed: int) -> Cluster:
    c = Cluster(seed, 5, 0, h.config())
    h.divergence_storm(c, writes=2, with_follower=True)
    return c


def _snapshot(seed: int) -> Cluster:
    c = Cluster(seed, 3, 0, h.config(), 10)
    h.snapshot_catch_up(c, during="crash-leader")
    return c


HISTORIES: dict[str, History] = {
    "figure8": _figure8,
    "figure8_small_fetch": _figure8_small_fetch,
    "lagging": _lagging,
    "storm": _storm,
    "snapshot": _snapshot,
    "stale": _stale,
    "stale_votes": _stale_votes,
}


def caught(history: History, seeds: range) -> tuple[int, str] | None:
    """(seed, failure) of the first seed whose history or convergence fails, or None."""
    for seed in seeds:
        try:
            converge(history(seed), 30_000)
        except AssertionError as exc:
            return seed, str(exc).splitlines()[0][:200]
    return None


# mutant -> (history that catches it, seeds needed): measured; the rest of `core_mutants`
# (truncate_one_batch_too_far, stale_vote_response_counted) need the whole CI profile and
# run only in the slow mutation check.
SUBSET: dict[str, tuple[str, int]] = {
    "hw_over_old_epoch": ("figure8_small_fetch", 1),
    "future_epoch_keeps_role": ("stale", 1),
    "follower_hw_above_leo": ("lagging", 1),
    "no_divergence_check": ("figure8", 1),
    "hw_before_truncation": ("storm", 1),
    "snapshot_install_keeps_log": ("snapshot", 1),
    "snapshot_installed_early": ("snapshot", 1),
    "vote_without_log_check": ("snapshot", 1),
    "vote_not_persisted": ("figure8", 1),
}
