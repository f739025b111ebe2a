#!/usr/bin/env python
"""Where does a transaction's end go? A diagnostic companion of bench_producers.py (issue 21).

    PYTHONPATH=. .venv/bin/python tests/perf/diag_txn_latency.py [--partitions 36] [--size 10000]
                                                               [--seconds 8] [--keep]

Starts the 3+3 cluster of bench_producers.py (RF 3, min.insync.replicas 2, the same topic
configs) whose brokers run with `diag_site/` on PYTHONPATH and $PYKRAFT_TXN_DIAG_OUT set:
`pykraft_txn_hooks` timestamps (time.time(), wall clock, one machine) the coordinator's
EndTxn / AddPartitionsToTxn, its records and their commits, the marker requests, each
leader's WriteTxnMarkers, transactional Produce requests and the segment writes that take
over 0.5 ms. A confluent-kafka producer (1 KiB values, acks=all) runs transactions of
--size records for --seconds, timing begin_transaction(), its produce loop and
commit_transaction(). Per transaction (medians, p10, p90), from the client's commit:

    commit_transaction() called -> EndTxn at the coordinator (the flush: the last acks)
    -> PrepareCommit committed, EndTxn answered -> commit_transaction() returns
    -> next AddPartitionsToTxn arrives (held) ...
    EndTxn answered -> markers sent -> every leader answered (appended and replicated)
    -> completion record written -> committed (with the held request's Ongoing, if it rode
    along) -> held AddPartitionsToTxn answered -> first Produce of the next transaction

then each leader's WriteTxnMarkers time, and per broker the slow segment writes: wall time,
on the CPU, waiting for a CPU, and the rest (asleep: in the kernel, or waiting for the GIL).
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests" / "integration"))
sys.path.insert(0, str(REPO))

Event = tuple[float, list[Any]]  # (time, [name, fields...])


def spread(name: str, xs: list[float]) -> None:
    if not xs:
        print(f"  {name:<52} (none)")
        return
    xs = sorted(xs)
    p10, p90 = xs[len(xs) // 10], xs[len(xs) * 9 // 10]
    print(f"  {name:<52} n={len(xs):4d}  p50 {statistics.median(xs) * 1000:7.2f}  p10 {p10 * 1000:7.2f}  "
          f"p90 {p90 * 1000:7.2f} ms")  # fmt: skip


def first(events: list[Event], name: str, after: float, before: float = float("inf")) -> float | None:
    for t, e in events:
        if after <= t < before and e[0] == name:
            return t
    return None


def cpu_in(samples: tuple[list[str], list[list[float]]], start: float, end: float) -> dict[str, float]:
    """Each sampled process's CPU in [start, end], in cores (CPU seconds per second)."""
    names, rows = samples

    def at(t: float) -> list[float]:
        for a, b in zip(rows, rows[1:], strict=False):
            if a[0] <= t <= b[0]:
                f = (t - a[0]) / (b[0] - a[0]) if b[0] > a[0] else 0.0
                return [x + (y - x) * f for x, y in zip(a[1:], b[1:], strict=True)]
        return []

    lo, hi = at(start), at(end)
    if not lo or not hi or end <= start:
        return {}
    return {n: (h - lo_) / 1e9 / (end - start) for n, lo_, h in zip(names, lo, hi, strict=True)}


def phases(
    client: list[tuple[float, float, float, float]], events: list[Event], cpu_file: Path | None = None
) -> dict[str, list[tuple[float, float]]]:
    """Each transaction but the last: client times (begin, loop start, commit called,
    commit returned) and the brokers' events that follow its commit."""
    out: dict[str, list[float]] = {}
    cpu_windows: dict[str, list[tuple[float, float]]] = {
        "EndTxn answered -> AddPartitionsToTxn answered": [],
        "AddPartitionsToTxn answered -> EndTxn in": [],
    }

    def add(name: str, start: float | None, end: float | None) -> None:
        if start is not None and end is not None:
            out.setdefault(name, []).append(end - start)

    for i, (begin, loop, commit, returned) in enumerate(client[:-1]):
        nxt = client[i + 1]
        add("produce loop (client)", loop, commit)
        end_in = first(events, "endtxn_in", commit - 0.001, returned)
        end_out = first(events, "endtxn_out", end_in or returned, returned + 0.01) if end_in else None
        add("commit called -> EndTxn arrives (flush)", commit, end_in)
        add("EndTxn arrives -> answered (PrepareCommit)", end_in, end_out)
        add("EndTxn answered -> commit returns", end_out, returned)
        add("commit returns -> next AddPartitionsToTxn arrives", returned, first(events, "addp_in", returned - 0.05))
        if end_out is None:
            continue
        sent = first(events, "markers", end_out - 0.005)
        if sent is None:
            continue
        answers = sorted(t for t, e in events if e[0] == "mk_recv" and sent <= t < sent + 1.0)[:3]
        if not answers:
            continue
        add("markers sent -> last leader answered", sent, answers[-1])
        written = next((t for t, e in events if t >= answers[-1] and e[0] == "write"
                        and any(s in ("COMPLETE_COMMIT", "COMPLETE_ABORT") for s in e[2])), None)  # fmt: skip
        committed = first(events, "appended", written) if written is not None else None
        answered = first(events, "addp_out", committed) if committed is not None else None
        add("last leader answered -> completion written", answers[-1], written)
        add("completion written -> committed", written, committed)
        add("completion committed -> AddPartitionsToTxn answered", committed, answered)
        add("EndTxn answered -> AddPartitionsToTxn answered", end_out, answered)
        if answered is not None:
            cpu_windows["EndTxn answered -> AddPartitionsToTxn answered"].append((end_out, answered))
            nxt_end = first(events, "endtxn_in", nxt[2] - 0.001)
            if nxt_end is not None:
                cpu_windows["AddPartitionsToTxn answered -> EndTxn in"].append((answered, nxt_end))
            add("AddPartitionsToTxn answered -> first Produce", answered, first(events, "prod_in", answered))
        add("transaction (begin to next begin)", begin, nxt[0])
    for name, xs in out.items():
        spread(name, xs)
    if cpu_file is not None:
        print_cpu(cpu_file, cpu_windows)
    return cpu_windows


def print_cpu(cpu_file: Path, cpu_windows: dict[str, list[tuple[float, float]]]) -> None:
    lines = cpu_file.read_text().splitlines()
    samples = (lines[0].split()[1:], [[float(x) for x in line.split()] for line in lines[1:]])
    print("  CPU (cores, median over transactions) per process in each phase:")
    for label, windows in cpu_windows.items():
        per = [cpu_in(samples, a, b) for a, b in windows]
        per = [d for d in per if d]
        if not per:
            continue
        cols = "  ".join(f"{n} {statistics.median(d[n] for d in per):4.2f}" for n in samples[0])
        total = statistics.median(sum(d.values()) for d in per)
        # The brokers' CPU time in each window (ms, summed over the brokers), median.
        spent = [sum(v for n, v in d.items() if n.startswith("b")) * (b - a) * 1000
                 for d, (a, b) in zip(per, [w for w in windows if cpu_in(samples, *w)], strict=True)]  # fmt: skip
        print(f"    {label:<40} {cols}  all {total:4.2f}; brokers {statistics.median(spent):5.1f} CPU-ms")


def count_rounds(events: list[Event], windows: list[tuple[float, float]]) -> None:
    """Requests per transaction end (medians over the marker windows, EndTxn answered ->
    held AddPartitionsToTxn answered): WriteTxnMarkers, coordinator appends, and the
    follower Fetch answers per leader-follower pair (all, with records, empty)."""
    if not windows:
        return
    per: dict[str, list[float]] = {}
    for a, b in windows:
        inside = [e for t, e in events if a <= t <= b]
        fetches = [e for e in inside if e[0] == "fetch"]
        pairs = {(e[1], e[3]) for e in fetches} or {(0, 0)}
        counts = {
            "WriteTxnMarkers": sum(e[0] == "wtm_in" for e in inside),
            "coordinator appends committed": sum(e[0] == "appended" for e in inside),
            "follower Fetch answers": len(fetches),
            "  with records": sum(e[4] > 0 for e in fetches),
            "  empty (HW moves or expiry)": sum(e[4] == 0 for e in fetches),
            "leader-follower pairs that fetched": len(pairs),
            "Fetch answers per pair": len(fetches) / len(pairs),
            "partitions with records per Fetch": sum(e[4] for e in fetches) / max(1, sum(e[4] > 0 for e in fetches)),
        }
        for k, v in counts.items():
            per.setdefault(k, []).append(v)
    print("  requests per transaction end (median over the marker windows):")
    for k, xs in per.items():
        print(f"    {k:<40} {statistics.median(xs):6.1f}   (p10 {sorted(xs)[len(xs) // 10]:5.1f}, "
              f"p90 {sorted(xs)[len(xs) * 9 // 10]:5.1f})")  # fmt: skip


def samples_by_phase(diag: Path, windows: list[tuple[float, float]]) -> None:
    """Each broker's main-thread samples (--sample) inside the marker windows and elsewhere,
    by the outermost two project frames of the stack and the innermost one."""
    for f in sorted(diag.glob("txn-*.jsonl")):
        rows = [json.loads(line) for line in f.read_text().splitlines()]
        node = next((r[2] for r in rows if r[1] == "wtm_in"), None)
        if node is None:
            continue
        inside: dict[str, int] = {}
        outside: dict[str, int] = {}
        for r in rows:
            if r[1] != "sample":
                continue
            stack = r[2]
            label = " > ".join(stack[:2]) + (f" .. {stack[-1]}" if len(stack) > 2 else "") if stack else "(waiting)"
            bucket = inside if any(a <= r[0] <= b for a, b in windows) else outside
            bucket[label] = bucket.get(label, 0) + 1
        n_in, n_out = sum(inside.values()) or 1, sum(outside.values()) or 1
        print(f"broker {node}: main-thread samples in the marker windows {n_in}, elsewhere {n_out}")
        for label, n in sorted(inside.items(), key=lambda kv: -kv[1])[:14]:
            print(f"    {n / n_in * 100:5.1f}% (elsewhere {outside.get(label, 0) / n_out * 100:5.1f}%)  {label}")


def per_broker(diag: Path) -> None:
    for f in sorted(diag.glob("txn-*.jsonl")):
        rows = [json.loads(line) for line in f.read_text().splitlines()]
        if not any(r[1] == "wtm_in" for r in rows):
            continue  # a controller
        node = next(r[2] for r in rows if r[1] == "wtm_in")
        opened: list[float] = []
        windows: list[float] = []
        for r in rows:
            if r[1] == "wtm_in":
                opened.append(r[0])
            elif r[1] == "wtm_out" and opened:
                windows.append(r[0] - opened.pop(0))
        print(f"broker {node}:")
        spread("WriteTxnMarkers arrives -> answered", windows)
        slow = [r for r in rows if r[1] == "slow_write"]
        for kind, chosen in (("small (< 200 B)", [r for r in slow if r[3] < 200]),
                             ("data", [r for r in slow if r[3] >= 200])):  # fmt: skip
            wall, cpu, wait = (sum(r[i] for r in chosen) for i in (2, 4, 5))
            print(
                f"  slow segment writes, {kind:<15} {len(chosen):5d}: {wall * 1000:7.0f} ms, on the CPU "
                f"{cpu * 1000:6.0f}, waiting for a CPU {wait * 1000:6.0f}, asleep {(wall - cpu - wait) * 1000:6.0f}"
            )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=36)
    ap.add_argument("--size", type=int, default=10_000, help="records per transaction")
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--disk-budget-gb", type=float, default=4.0)
    ap.add_argument("--keep", action="store_true", help="keep the work directory (events, logs)")
    ap.add_argument("--py-spy", metavar="DIR", help="py-spy record (raw, 200 Hz) each broker into DIR for the run")
    ap.add_argument("--strace", metavar="DIR", help="strace -c -f each broker into DIR for the run (system calls)")
    ap.add_argument("--cpu", action="store_true", help="sample every process's CPU (2 ms), split it by phase")
    ap.add_argument("--sample", action="store_true", help="sample brokers' main-thread stacks (1 ms), split by phase")
    ap.add_argument("--profile", action="store_true", help="cProfile brokers' main threads in WriteTxnMarkers windows")
    args = ap.parse_args()
    from bench_dataplane import MSG_BYTES, PRODUCER_CONF, rd_logger, rest_create_topic, wait_for_leaders
    from confluent_kafka import Producer
    from metadata_cluster import start_cluster

    work = Path(tempfile.mkdtemp(prefix="pykraft-diag-txn-"))
    diag = work / "diag"
    diag.mkdir()
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), str(HERE / "diag_site"), os.environ.get("PYTHONPATH", "")])
    os.environ["PYKRAFT_TXN_DIAG_OUT"] = str(diag)
    if args.sample:
        os.environ["PYKRAFT_TXN_DIAG_SAMPLE"] = "1"
    if args.profile:
        os.environ["PYKRAFT_TXN_DIAG_PROFILE"] = "1"
    load0 = os.getloadavg()
    cluster = start_cluster(work / "cluster", brokers=3, properties={
        "min.insync.replicas": "2", "auto.create.topics.enable": "false", "log.retention.check.interval.ms": "1000",
        "transaction.state.log.num.partitions": "3", "offsets.topic.num.partitions": "3"})  # fmt: skip
    del os.environ["PYKRAFT_TXN_DIAG_OUT"]
    os.environ.pop("PYKRAFT_TXN_DIAG_SAMPLE", None)
    os.environ.pop("PYKRAFT_TXN_DIAG_PROFILE", None)
    client: list[tuple[float, float, float, float]] = []
    try:
        bootstrap = ",".join(
            f"127.0.0.1:{cluster.nodes[b].plan.properties['listeners'].rsplit(':', 1)[1]}" for b in cluster.broker_ids
        )
        topic = "diag-txn"
        rest_create_topic(cluster, topic, args.partitions, 3, args.disk_budget_gb * 1e9)
        wait_for_leaders(bootstrap, topic, args.partitions, work)
        producer = Producer({**PRODUCER_CONF, "bootstrap.servers": bootstrap, "acks": "all", "logger": rd_logger(work),
                             "enable.idempotence": True, "transactional.id": "diag-txn"})  # fmt: skip
        producer.init_transactions(60)
        spy = str(Path(sys.executable).parent / "py-spy")  # the venv's
        spies = []
        for b in cluster.broker_ids if args.py_spy else ():
            out = f"{args.py_spy}/broker-{b}.txt"
            cmd = [spy, "record", "-r", "200", "-f", "raw", "-d", str(round(args.seconds)), "--nonblocking", "-o", out]
            spies.append(subprocess.Popen([*cmd, "--pid", str(cluster.nodes[b].pid)], stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL))  # fmt: skip
        for b in cluster.broker_ids if args.strace else ():
            cmd = ["timeout", "-s", "INT", str(round(args.seconds)), "strace", "-c", "-f", "-o",
                   f"{args.strace}/broker-{b}.txt", "-p", str(cluster.nodes[b].pid)]  # fmt: skip
            spies.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        sampler = None
        if args.cpu:
            procs = [f"b{b}={cluster.nodes[b].pid}" for b in cluster.broker_ids]
            procs += [f"c{c}={cluster.nodes[c].pid}" for c in cluster.nodes if c not in cluster.broker_ids]
            sampler = subprocess.Popen([sys.executable, str(HERE / "cpu_sampler.py"), str(work / "cpu.txt"), "2",
                                        *procs, f"client={os.getpid()}"])  # fmt: skip
        payload = os.urandom(MSG_BYTES)
        sent = 0
        started = time.monotonic()
        while time.monotonic() < started + args.seconds:
            begin = time.time()
            producer.begin_transaction()
            loop = time.time()
            for _ in range(args.size):
                while True:
                    try:
                        producer.produce(topic, payload, partition=sent % args.partitions)
                        break
                    except BufferError:
                        producer.poll(0.0005)
                sent += 1
            commit = time.time()
            producer.commit_transaction(120)
            client.append((begin, loop, commit, time.time()))
        elapsed = time.monotonic() - started
        for spy in spies:
            spy.wait(30)
        if sampler is not None:
            sampler.kill()
            sampler.wait()
        load1 = os.getloadavg()
    finally:
        cluster.close()
    events: list[Event] = []
    for f in diag.glob("txn-*.jsonl"):
        events += [(r[0], r[1:]) for r in (json.loads(line) for line in f.read_text().splitlines())]
    events.sort(key=lambda e: e[0])
    print(f"{len(client)} transactions of {args.size} records on {args.partitions} partitions in {elapsed:.1f} s: "
          f"{sent * MSG_BYTES / 1e6 / elapsed:.1f} MB/s; load average {load0[0]:.2f} -> {load1[0]:.2f}")  # fmt: skip
    windows = phases(client, events, work / "cpu.txt" if args.cpu else None)
    if args.cpu and client:
        samples = (work / "cpu.txt").read_text().splitlines()
        names = samples[0].split()[1:]
        a, b = client[1][0], client[-1][0]  # the sampler starts after the first begin
        lo = cpu_in((names, [[float(x) for x in row.split()] for row in samples[1:]]), a, b)
        spent = sum(v for n, v in lo.items() if n.startswith("b")) * (b - a) * 1000
        print(f"  brokers' CPU per transaction, second begin to last begin: {spent / max(1, len(client) - 2):.2f} ms")
    count_rounds(events, windows["EndTxn answered -> AddPartitionsToTxn answered"])
    if args.sample:
        samples_by_phase(diag, windows["EndTxn answered -> AddPartitionsToTxn answered"])
    per_broker(diag)
    for prof in sorted(diag.glob("prof-*.out")) if args.profile else ():
        print(f"cProfile of {prof.name}, inside WriteTxnMarkers windows (by own time):")
        pstats.Stats(str(prof)).sort_stats("tottime").print_stats(25)
    if args.keep:
        print(f"kept {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
