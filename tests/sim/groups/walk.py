"""Seeded random histories of the group world (`tests.sim.groups.harness.World`).

`walk(seed)` starts a few consumers (some static), then draws `actions` events from
`random.Random(seed)`: time passing, consumption and commits, members starting, closing,
crashing, pausing, static restarts and duplicates (zombies), network loss and far delays,
replication stalls and refused appends, coordinator crashes and controlled moves, and an
admin deleting the offsets or the group once it is empty; then `settle` (the faults stop,
liveness must follow). Every event is checked as it happens.
"""

from __future__ import annotations

import random

from tests.sim.groups.harness import SimConfig, World

ACTIONS = 150


def walk(seed: int, config: SimConfig | None = None, actions: int = ACTIONS) -> World:
    r = random.Random(seed * 7_919 + 3)
    cfg = config or SimConfig(
        initial_rebalance_delay_ms=r.choice((0, 0, 3_000)),
        partitions=r.choice((3, 6, 7)),
        session_timeout_ms=r.choice((6_000, 10_000)),
        rebalance_timeout_ms=r.choice((4_000, 8_000)),
    )
    w = World(cfg, seed)
    statics = 0
    for _ in range(r.randint(2, 4)):
        if r.random() < 0.4:
            statics += 1
            w.start_member(f"i{statics}")
        else:
            w.start_member()
    for _ in range(actions):
        x = r.random()
        live = [m for m in w.members if m.live]
        if x < 0.25:
            w.run(r.choice((5, 20, 50, 200, 500, 1_000)))
        elif x < 0.40:
            for m in live:
                if r.random() < 0.5:
                    w.consume(m)
        elif x < 0.50:
            if live:
                m = r.choice(live)
                w.commit(m)
                if r.random() < 0.3:  # commitAsync in a poll loop: several commits in flight
                    if r.random() < 0.3:
                        w.refuse_next_appends(1)  # ... while the ISR flaps
                    w.consume(m)
                    w.commit(m)
        elif x < 0.54:
            if len(live) < 6:
                if r.random() < 0.4:
                    statics += 1
                    w.start_member(f"i{statics}")
                else:
                    w.start_member()
        elif x < 0.57:
            if live:
                w.close_member(r.choice(live))
        elif x < 0.60:
            if live:
                w.crash_member(r.choice(live))
        elif x < 0.64:
            if live:
                w.pause_member(r.choice(live), r.choice((300, 2_000, 5_000, 9_000)))
        elif x < 0.68:
            candidates = [m for m in w.members if m.instance is not None]
            if candidates:
                w.restart_static(r.choice(candidates), duplicate=r.random() < 0.4)
        elif x < 0.72:
            w.set_network(r.choice((0.0, 0.0, 0.05, 0.2)), r.choice((0.0, 0.0, 0.02)))
        elif x < 0.75:
            w.stall_replication(r.choice((100, 1_000, 3_000)))
        elif x < 0.77:
            if r.random() < 0.5:
                w.refuse_appends(r.choice((50, 500, 2_000)))
            else:
                w.refuse_next_appends(r.randint(1, 2))
        elif x < 0.80:
            w.crash_coordinator()
        elif x < 0.83:
            w.controlled_move()
        elif x < 0.86:
            w.admin_delete(r.choice(("delete_offsets", "delete_group", "describe_offsets", "describe_offsets")))
        elif x < 0.88:
            # Everyone goes (the group empties once static sessions expire); new ones come.
            for m in live:
                w.close_member(m)
            w.run(r.choice((1_000, 8_000)))
            w.admin_delete(r.choice(("delete_offsets", "delete_group")))
            for _ in range(r.randint(1, 3)):
                w.start_member()
        else:
            w.run(r.choice((2_000, 7_000)))
    w.settle()
    return w
