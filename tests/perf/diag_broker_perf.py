#!/usr/bin/env python
"""Where a broker's CPU goes, kernel and C included: `perf record` of the brokers while
acks=all runs, printed by shared object, by symbol and by system call.

    PYTHONPATH=. .venv/bin/python tests/perf/diag_broker_perf.py [--rate-mb 100] [--seconds 8] [--out DIR]

A 3+3 cluster (bench_dataplane.py's), 9 partitions RF 3, the C producer (1 KiB values, the
benchmark's settings): acks=all as fast as it goes, then at `--rate-mb`; each run on a new
topic, after an unrecorded one of the same kind (the first segments, the connections), with
`perf record -g` on every broker (`-F 499`). py-spy cannot see into the compiled modules (their
time shows as `Runner.run`); perf names their C functions (`CPyDef_<module>___<function>`),
libpython's, the kernel's and the C libraries'. `perf report -i DIR/max.data` for more; for
the compiled callers of libpython's time, record again with `--call-graph dwarf`.

Needs `perf` (linux-perf) and kernel.perf_event_paranoid <= 1 (or root).
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "integration")]

import bench_dataplane as bd  # noqa: E402

PARTITIONS = 9
SYSCALLS = ("__x64_sys_", "ksys_", "do_sys_openat2", "handle_softirqs", "exc_page_fault")


def perf_report(data: Path, *args: str) -> list[str]:
    out = subprocess.run(
        ["perf", "report", "-i", str(data), "--stdio", "-g", "none", *args],  # noqa: S607
        capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip
    return [line for line in out.splitlines() if line.strip() and not line.startswith("#")]


def summarize(data: Path, mb: float, top: int) -> None:
    script = subprocess.run(
        ["perf", "script", "-i", str(data), "-F", "pid", "-G"],  # noqa: S607 - one line per sample
        capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip
    samples = sum(1 for line in script.splitlines() if line.strip())
    print(f"  {samples} samples at 499 Hz for {mb:,.0f} MB acknowledged: {samples / 499 / mb * 1000:.2f} ms per MB")
    print("  by shared object:")
    for line in perf_report(data, "--no-children", "--sort", "dso")[:8]:
        print("   ", line.strip())
    print(f"  top {top} symbols (self):")
    for line in perf_report(data, "--no-children", "--sort", "dso,sym")[:top]:
        print("   ", line.strip())
    print("  system calls, faults and soft interrupts (with what they call):")
    for line in perf_report(data, "--children", "--sort", "sym"):
        if any(s in line for s in SYSCALLS):
            print("   ", line.strip())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate-mb", type=float, default=100.0, help="MB/s of the rate-limited run (0: none)")
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--out", type=Path, default=None, help="keep perf's data files here")
    args = ap.parse_args()
    if shutil.which("perf") is None:
        print("perf not found (apt-get install linux-perf)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="diag-broker-perf-"))
    out = args.out or work / "perf"
    out.mkdir(parents=True, exist_ok=True)
    bd.FAST_PRODUCER = bd.c_client_exe(work, bd.FAST_PRODUCER_C)
    rates = [None] + ([args.rate_mb] if args.rate_mb > 0 else [])
    try:
        with bd.pykraft_cluster(work / "cluster", 3, bd.cluster_properties(3), keep=False) as cluster:
            bootstrap = bd.bootstrap_of(cluster)
            groups = bd.broker_groups(cluster)
            pids = ",".join(str(p) for p in groups["brokers"])
            n = 0
            for rate in rates:
                name = "max" if rate is None else f"rate{rate:g}"
                for recorded in (False, True):
                    topic = f"diag-{n}"
                    n += 1
                    bd.rest_create_topic(cluster, topic, PARTITIONS, 3, 4e9)
                    bd.wait_for_leaders(bootstrap, topic, PARTITIONS, work)
                    run = bd.Run("pykraft", 3, 3, PARTITIONS, "all", rate)
                    perf = None
                    if recorded:
                        perf = subprocess.Popen(
                            ["perf", "record", "-g", "-F", "499", "-p", pids, "-o", str(out / f"{name}.data")],  # noqa: S607
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                        )  # fmt: skip
                    msgs = None if rate is None else rate * bd.MB / bd.MSG_BYTES
                    bd.produce_run(run, bootstrap, topic, args.seconds, groups, work, rate_msgs_s=msgs)
                    if perf is not None:
                        perf.send_signal(signal.SIGINT)
                        perf.wait()
                        print(
                            f"\nacks=all {name}: {run.mb_s:.1f} MB/s, p50 {run.p50_ms:.1f} / p99 {run.p99_ms:.1f} ms, "
                            f"{run.broker_cpu_ms_per_mb:.2f} ms of broker CPU per MB (/proc), "
                            f"brokers {run.broker_cores:.2f} cores, runq {run.broker_runq:.2f}",
                            flush=True,
                        )
                        summarize(out / f"{name}.data", run.mb_s * run.seconds, args.top)
                    bd.rest_delete_topic(cluster, topic)
    finally:
        if args.out is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
