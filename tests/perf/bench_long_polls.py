"""Long polls at scale: what many idle partitions cost a 3-broker cluster (issue 22).

    PYTHONPATH=. .venv/bin/python tests/perf/bench_long_polls.py [--idle-seconds 30] [--records 300]
        [--profile DIR]   # py-spy of the first broker during the produce run at 3,000 partitions

On one real 3+3 cluster (`start_cluster`, RF 3, min.insync.replicas 2), with no client but
the benchmark's own:

1. topic ``lp90`` (90 partitions): sequential acks=all produce latency of one 100-byte record
   (confluent-kafka, linger.ms=0, one record in flight: produce, flush, next), round-robin
   over the partitions, ``--records`` measured after 30 warm-up records: p50/p99/max;
2. topics ``lp970-0..2`` (2,910 more partitions, 3,000 in all; preferred elections until
   each broker leads 1,000): each broker's CPU over
   ``--idle-seconds`` with no client (utime+stime from /proc, as cores), then the same
   latency run on ``lp90`` again (optionally under py-spy).

Prints the figures and the share of the machine other processes used meanwhile. Not collected
by pytest (tests/perf/conftest.py).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "perf"))
sys.path.insert(0, str(REPO / "tests" / "integration"))

from bench_dataplane import (  # noqa: E402
    CpuWindow,
    PySpy,
    loadavg,
    percentile,
    rd_logger,
    summarize_speedscope,
    wait_for_leaders,
)
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402
from metadata_cluster import start_cluster  # noqa: E402

VALUE = b"x" * 100


def latency_run(bootstrap: str, topic: str, partitions: int, records: int, work: Path) -> list[float]:
    """Milliseconds from produce() to the acks=all delivery report, one record at a time."""
    p = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "enable.idempotence": False,
         "logger": rd_logger(work)}  # fmt: skip
    )
    out: list[float] = []
    errors: list[object] = []
    for i in range(30 + records):
        errors.clear()
        t0 = time.perf_counter()
        p.produce(topic, VALUE, partition=i % partitions, on_delivery=lambda err, msg: errors.append(err))
        p.flush(30)
        ms = (time.perf_counter() - t0) * 1000
        if errors != [None]:
            raise RuntimeError(f"record {i}: {errors}")
        if i >= 30:
            out.append(ms)
    return sorted(out)


def leader_counts(bootstrap: str, work: Path) -> Counter[int]:
    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": rd_logger(work)})
    counts: Counter[int] = Counter()
    for t in admin.list_topics(timeout=30).topics.values():
        counts.update(p.leader for p in t.partitions.values())
    return counts


def leaders_per_broker(bootstrap: str, work: Path) -> str:
    """How many partitions each broker leads (a skew makes one broker the bottleneck)."""
    return ", ".join(f"broker {b}: {n}" for b, n in sorted(leader_counts(bootstrap, work).items()))


def balance_leaders(cluster: Any, bootstrap: str, work: Path, partitions: int) -> None:
    """Preferred elections until each broker leads a third of the partitions. Applying a
    970-partition delta stalls a broker's loop past broker.session.timeout.ms (3 s in these
    clusters) today, so the controller fences the brokers and leaderships pile up on whichever
    came back first; auto.leader.rebalance.enable is off here."""
    for _ in range(20):
        counts = leader_counts(bootstrap, work)
        if len(counts) == 3 and max(counts.values()) - min(counts.values()) <= 2 + partitions // 100:
            return  # the placement itself is within a partition or two of even
        cluster.post(cluster.broker_ids[0], "/elect-leaders", {"election_type": "PREFERRED", "partitions": None})
        time.sleep(3)
    print(f"(leaders still unbalanced: {leaders_per_broker(bootstrap, work)})", flush=True)


def show_latency(label: str, ms: list[float], cpu: CpuWindow) -> None:
    print(
        f"{label}: p50 {percentile(ms, 0.5):.2f} ms  p99 {percentile(ms, 0.99):.2f} ms  max {ms[-1]:.2f} ms "
        f"({len(ms)} records; brokers {cpu.cores('brokers'):.2f} cores, others {100 * cpu.others_share:.0f} %)",
        flush=True,
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--idle-seconds", type=float, default=30.0)
    ap.add_argument("--records", type=int, default=300)
    ap.add_argument("--profile", type=Path, default=None, help="py-spy broker 1 during the 3,000-partition run")
    ap.add_argument("--dir", type=Path, default=None)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-long-polls-", dir=args.dir))
    print(f"load average at start: {loadavg()}", flush=True)
    cluster = start_cluster(
        work / "cluster", brokers=3,
        properties={"min.insync.replicas": "2", "auto.create.topics.enable": "false"},
    )  # fmt: skip
    try:
        bootstrap = ",".join(
            f"127.0.0.1:{cluster.nodes[b].plan.properties['listeners'].rsplit(':', 1)[1]}" for b in cluster.broker_ids
        )
        brokers = {b: cluster.nodes[b].pid for b in cluster.broker_ids}
        groups = {"brokers": list(brokers.values())}
        b0 = cluster.broker_ids[0]
        cluster.create_topic(b0, "lp90", partitions_count=90, replication_factor=3)
        wait_for_leaders(bootstrap, "lp90", 90, work)
        balance_leaders(cluster, bootstrap, work, 90)
        time.sleep(3)
        with CpuWindow(groups) as cpu:
            ms = latency_run(bootstrap, "lp90", 90, args.records, work)
        show_latency("90 partitions, acks=all latency", ms, cpu)
        print(f"leaders: {leaders_per_broker(bootstrap, work)}", flush=True)

        t0 = time.monotonic()
        for k in range(3):  # three topics of 970: each create answers well within the REST client's timeout
            cluster.create_topic(b0, f"lp970-{k}", partitions_count=970, replication_factor=3)
            wait_for_leaders(bootstrap, f"lp970-{k}", 970, work, timeout=600)
        print(f"(2,910 more partitions led in {time.monotonic() - t0:.0f} s)", flush=True)
        balance_leaders(cluster, bootstrap, work, 3000)
        time.sleep(10)  # followers caught up, ISR settled
        print(f"leaders: {leaders_per_broker(bootstrap, work)}", flush=True)
        with CpuWindow(groups) as cpu:
            time.sleep(args.idle_seconds)
        per = ", ".join(f"broker {b} {cpu.per_pid[pid] / cpu.elapsed:.3f}" for b, pid in brokers.items())
        print(
            f"3,000 partitions idle, {cpu.elapsed:.0f} s: brokers {cpu.cores('brokers'):.3f} cores ({per}); "
            f"others {100 * cpu.others_share:.0f} %",
            flush=True,
        )
        spy = PySpy(brokers[b0], args.profile, "speedscope") if args.profile else None
        if spy:
            spy.start()
        try:
            with CpuWindow(groups) as cpu:
                ms = latency_run(bootstrap, "lp90", 90, args.records, work)
        finally:
            if spy:
                spy.stop()
        show_latency("3,000 partitions, acks=all latency", ms, cpu)
        print(f"leaders after the runs: {leaders_per_broker(bootstrap, work)}", flush=True)
        if spy and spy.out.exists():
            s = summarize_speedscope(spy.out, top=15)
            print(f"py-spy of broker {b0} ({s['samples']} samples, {spy.out}):")
            print("  self:      " + "; ".join(f"{n} {p}%" for n, p in s["self_pct"]))
            print("  inclusive: " + "; ".join(f"{n} {p}%" for n, p in s["inclusive_pct"]))
    finally:
        cluster.close()
        shutil.rmtree(work, ignore_errors=True)
    print(f"load average at end: {loadavg()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
