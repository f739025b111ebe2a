"""Seeded histories of the transactions world (`tests.sim.txn.harness.World`).

`walk(seed)` draws the world's shape (one or two coordinator partitions, two to four data
partitions, two to four transactional ids, zero to two idempotent producers, how hostile
the network is) from `random.Random(seed)`, runs it for `duration_ms` of simulated time
(faults drawn by the world itself every `fault_every_ms`), then `settle`s: faults and
producers stop and liveness must follow. Every event is checked as it happens.
"""

from __future__ import annotations

import random

from tests.sim.txn.harness import SimConfig, World

DURATION_MS = 15_000


def config_for(seed: int) -> SimConfig:
    r = random.Random(seed * 7_919 + 11)
    return SimConfig(
        transactional_ids=r.randint(2, 4),
        coordinator_partitions=r.choice((1, 2)),
        data_partitions=r.randint(2, 4),
        idempotent_producers=r.randint(0, 2),
        loss=r.choice((0.0, 0.02, 0.08)),
        duplicate=r.choice((0.0, 0.05)),
        late_produce=r.choice((0.0, 0.03, 0.1)),
        append_fail=r.choice((0.0, 0.05, 0.15)),
        fault_probability=r.choice((0.1, 0.3)),
        stall_probability=r.choice((0.0, 0.01, 0.03)),
        produce_retries=r.choice((0, 0, 1, 4)),
    )


def walk(seed: int, config: SimConfig | None = None, duration_ms: int = DURATION_MS) -> World:
    w = World(config or config_for(seed), seed)
    w.run(duration_ms)
    w.check()
    w.settle()
    return w
