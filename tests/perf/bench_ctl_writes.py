#!/usr/bin/env python
"""Controller writes of `bench_peers.py` (64 clients, IncrementalAlterConfigs on the active
controller) with each process's CPU per write: for comparing code versions on a busy machine.

    python tests/perf/bench_ctl_writes.py [--repo DIR] [--client FILE] [--clients 64] [--seconds 4] [--rounds 2]
                                          [--no-broker] [--perf DIR]

Starts `bench_peers.py`'s pykraft quorum (3 controllers + 1 broker, defaults) from the code
in --repo (default: this checkout), runs `bench_peers.run_clients` --rounds times, and prints
per round the writes/s, p50/p99 and the CPU (utime + stime from /proc/PID/stat) that each
node and this process (the clients) spent per write, in µs. On a shared machine writes/s
follow the other loads; CPU per write much less so. `--client` takes the clients (and the
cluster set-up) from another `bench_peers.py`, so that two code versions meet the same load
generator: `--repo /other/checkout --client tests/perf/bench_peers.py`. Every process it
starts is stopped by pid. Not a pytest module.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_perf(out: str, pids: dict[int, int], leader: int, broker: int | None) -> list[subprocess.Popen[bytes]]:
    """`perf record` (DWARF call graphs, 199 Hz) of each node for the round: OUT/leader.data,
    OUT/follower-N.data, OUT/broker.data (read them with `perf report -i F --no-children`)."""
    Path(out).mkdir(parents=True, exist_ok=True)
    recorders = []
    for member, pid in pids.items():
        name = "leader" if member == leader else "broker" if member == broker else f"follower-{member}"
        cmd = ["perf", "record", "--call-graph", "dwarf,16384", "-F", "199", "-p", str(pid), "-o", f"{out}/{name}.data"]
        recorders.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return recorders


def load_bench_peers(repo: Path, client: Path) -> Any:
    # The nodes run from `repo` (they are started with `python -m api.cli` in the current
    # directory); the quorum modules the clients use come from there too.
    sys.path.insert(0, str(repo))
    sys.path.insert(0, str(client.parent))
    sys.path.append(str(client.parents[2]))  # bench_peers adds its own checkout only when absent
    os.chdir(repo)
    spec = importlib.util.spec_from_file_location("bench_peers", client)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_peers"] = module
    spec.loader.exec_module(module)
    return module


async def run(bp: Any, args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-ctl-writes-"))
    system = bp.Pykraft(work / "pykraft", bp.DEFAULTS)
    try:
        system.start()
        await system.wait_ready()
        await system.prepare(args.clients)
        if args.no_broker:  # the quorum alone, as bench_peers.py's headline figure
            await system.set_observers(False)
        for _ in range(args.rounds):
            leader = await system.wait_ready()
            pids = {m: p.pid for m, p in system.procs.items()}
            before = {m: cpu_s(pid) for m, pid in pids.items()}
            recorders = start_perf(args.perf, pids, leader, system.broker) if args.perf else []
            me, t0 = time.process_time(), time.perf_counter()
            out = await bp.run_clients(system, leader, args.clients, args.seconds, 1.0)
            elapsed = time.perf_counter() - t0
            for rec in recorders:
                rec.send_signal(signal.SIGINT)
            for rec in recorders:
                rec.wait()
            after = {m: cpu_s(pid) for m, pid in pids.items()}
            writes = out["writes_per_s"] * elapsed  # the warm-up's writes too, at the same rate
            role = {m: "leader" if m == leader else "broker" if m == system.broker else f"follower {m}" for m in pids}
            per_write = {role[m]: round((after[m] - before[m]) / writes * 1e6, 1) for m in pids}
            per_write["clients"] = round((time.process_time() - me) / writes * 1e6, 1)
            line = {
                "time": time.strftime("%H:%M:%S"),
                "load": round(os.getloadavg()[0], 1),
                "writes_per_s": out["writes_per_s"],
                "p50_ms": out["p50_ms"],
                "p99_ms": out["p99_ms"],
                "errors": out["errors"],
                "cpu_us_per_write": per_write,
            }
            print(json.dumps(line), flush=True)
    finally:
        system.stop()
        bp.stop_all_started()
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--repo", default=str(HERE.parents[1]), help="the checkout whose nodes run")
    ap.add_argument("--client", default=None, help="the bench_peers.py whose clients run (default: --repo's)")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--no-broker", action="store_true", help="stop the broker once the topics exist")
    ap.add_argument("--perf", metavar="DIR", help="perf record each node during every round (Linux perf) into DIR")
    args = ap.parse_args()
    repo = Path(args.repo).resolve()
    client = Path(args.client).resolve() if args.client else repo / "tests/perf/bench_peers.py"
    bp = load_bench_peers(repo, client)
    if hasattr(bp, "run_loop"):  # uvloop when installed, as bench_peers runs
        bp.run_loop(run(bp, args))
    else:
        asyncio.run(run(bp, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
