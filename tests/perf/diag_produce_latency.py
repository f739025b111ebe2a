#!/usr/bin/env python
"""Where does an acks=all produce's latency go? A diagnostic companion of bench_dataplane.py.

    PYTHONPATH=. .venv/bin/python tests/perf/diag_produce_latency.py [--messages 400] [--keep]

Starts a 3+3 cluster (RF 3, min.insync.replicas 2, one partition) whose brokers run with
`diag_site/` on PYTHONPATH and $PYKRAFT_PRODUCE_DIAG_OUT set: `pykraft_produce_hooks`
timestamps (time.time(), wall clock, one machine) the leader's append, each follower's
receipt and append and its next Fetch, the leader's record of that Fetch, the high
watermark's move, the produce handler's return and the response's write. confluent-kafka
(acks=all, linger.ms=0) sends 100 B records one at a time (each delivered before the next),
so offset n is produce n. For each, the latency is split into:

    client send -> leader append done -> a follower's append done (fetch wake-up, answer,
    receipt) -> its next Fetch seen by the leader -> HW passes the record -> produce
    handler returns (purgatory, task wake-up, response encoding) -> response written
    -> client's delivery report

(the follower whose Fetch moved the HW), with percentiles of each part.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))
sys.path.insert(0, str(REPO))

PARTS = [
    ("to leader append", "client produce() -> leader's append done"),
    ("to follower append", "leader append done -> follower's append of it done (fetch wake-up, answer, receipt)"),
    ("to next fetch", "follower append done -> leader sees that follower's next Fetch"),
    ("to HW", "leader sees the Fetch -> HW passes the record"),
    ("to handler return", "HW moved -> produce handler returns (purgatory, wake-up, encode)"),
    ("to written", "handler returned -> response write done"),
    ("to client", "response written -> delivery report in the client"),
]


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def after(times: list[float], rows: list[list[Any]], t: float, pred: Any) -> list[Any] | None:
    i = bisect.bisect_left(times, t)
    while i < len(rows):
        if pred(rows[i]):
            return rows[i]
        i += 1
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=400)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    from confluent_kafka import Producer
    from metadata_cluster import start_cluster

    work = Path(tempfile.mkdtemp(prefix="pykraft-diag-produce-"))
    diag = work / "diag"
    diag.mkdir()
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), str(HERE / "diag_site"), os.environ.get("PYTHONPATH", "")])
    os.environ["PYKRAFT_PRODUCE_DIAG_OUT"] = str(diag)
    load0 = os.getloadavg()
    cluster = start_cluster(work / "cluster", brokers=3,
                            properties={"min.insync.replicas": "2", "auto.create.topics.enable": "false"})  # fmt: skip
    del os.environ["PYKRAFT_PRODUCE_DIAG_OUT"]
    sends: list[tuple[float, float, int]] = []
    try:
        bootstrap = ",".join(
            f"127.0.0.1:{cluster.nodes[b].plan.properties['listeners'].rsplit(':', 1)[1]}" for b in cluster.broker_ids
        )
        cluster.create_topic(cluster.broker_ids[0], "lat", partitions_count=1, replication_factor=3)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                             "enable.idempotence": False})  # fmt: skip
        payload = os.urandom(100)
        for i in range(args.warmup + args.messages):
            done: list[Any] = []
            t0 = time.time()
            producer.produce("lat", payload, partition=0, on_delivery=lambda err, msg, d=done: d.append((err, msg)))
            while not done:
                producer.poll(0.5)
            err, msg = done[0]
            if err is None and i >= args.warmup:
                sends.append((t0, time.time(), msg.offset()))
            elif err is not None and time.time() - t0 > 5:
                print(f"produce {i}: {err}")
        load1 = os.getloadavg()
        for b in cluster.broker_ids:  # SIGTERM: the hooks write their timestamps at exit
            cluster.terminate(b, timeout=30)
    finally:
        cluster.close()
    events: list[list[Any]] = []
    by_pid: dict[int, list[list[Any]]] = {}
    for f in diag.glob("produce-*.json"):
        rows = json.loads(f.read_text())
        by_pid[int(f.stem.split("-")[1])] = rows
        events += rows
    appends = {r[5]: r for r in events if r[0] == "append" and r[3] == "lat"}
    hws = sorted((r for r in events if r[0] == "hw"), key=lambda r: r[1])  # one partition
    hw_t = [r[1] for r in hws]
    f_appends = sorted((r for r in events if r[0] == "f_append" and r[3] == "lat"), key=lambda r: r[2])
    sees = sorted((r for r in events if r[0] == "leader_sees_fetch"), key=lambda r: r[1])
    sees_t = [r[1] for r in sees]
    leader_pid = next((pid for pid, rows in by_pid.items() if any(r[0] == "append" for r in rows)), None)
    leader_rows = by_pid.get(leader_pid, []) if leader_pid else []
    done_rows = sorted((r for r in leader_rows if r[0] == "produce_done"), key=lambda r: r[1])
    done_t = [r[1] for r in done_rows]
    written = sorted((r for r in leader_rows if r[0] == "written"), key=lambda r: r[2])
    written_t = [r[1] for r in written]
    parts: dict[str, list[float]] = {name: [] for name, _ in PARTS}
    totals: list[float] = []
    for t_send, t_ack, offset in sends:
        a = appends.get(offset)
        hw = after(hw_t, hws, a[2] if a else t_send, lambda r, o=offset: r[2] > o)
        if a is None or hw is None:
            continue
        # the follower append (of this offset) that finished last before the HW moved
        fa = [r for r in f_appends if r[5] <= offset < r[6] and r[2] <= hw[1]]
        if not fa:
            continue
        f = max(fa, key=lambda r: r[2])
        seen = after(sees_t, sees, f[2], lambda r, o=offset: r[3] > o)
        ret = after(done_t, done_rows, hw[1], lambda r: True)
        wr = after(written_t, written, ret[1] if ret else hw[1], lambda r: True)
        if seen is None or ret is None or wr is None:
            continue
        marks = [t_send, a[2], f[2], seen[1], hw[1], ret[1], wr[2], t_ack]
        for (name, _), x0, x1 in zip(PARTS, marks[:-1], marks[1:], strict=True):
            parts[name].append((x1 - x0) * 1000)
        totals.append((t_ack - t_send) * 1000)
    print(f"acks=all produce latency, 1 partition RF 3, {len(totals)} of {len(sends)} produces split; "
          f"load average {load0[0]:.1f} at start, {load1[0]:.1f} at end")  # fmt: skip
    print(f"{'part':<20} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'mean ms':>8}  what")
    for name, what in PARTS:
        xs = parts[name]
        mean = sum(xs) / len(xs) if xs else float("nan")
        print(f"{name:<20} {pct(xs, 0.5):8.2f} {pct(xs, 0.9):8.2f} {pct(xs, 0.99):8.2f} {mean:8.2f}  {what}")
    mean = sum(totals) / len(totals) if totals else float("nan")
    print(f"{'total':<20} {pct(totals, 0.5):8.2f} {pct(totals, 0.9):8.2f} {pct(totals, 0.99):8.2f} {mean:8.2f}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"kept {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
