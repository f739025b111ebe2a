#!/usr/bin/env python
"""Samples the CPU time of processes, for diagnostics that attribute CPU to phases.

    cpu_sampler.py OUT INTERVAL_MS NAME=PID ...

Every INTERVAL_MS writes one line to OUT: `time.time()` then, per NAME, the nanoseconds
its threads have spent on a CPU (the sum of /proc/PID/task/*/schedstat's first field).
Runs until killed or until every process is gone. A separate process, so that sampling
takes no GIL from the process being measured.
"""

from __future__ import annotations

import os
import sys
import time


def on_cpu_ns(pid: int) -> int:
    total = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return -1
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                total += int(f.read().split(None, 1)[0])
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total


def main() -> int:
    out, interval = sys.argv[1], int(sys.argv[2]) / 1000
    procs = [(name, int(pid)) for name, pid in (a.split("=") for a in sys.argv[3:])]
    with open(out, "w", buffering=1) as f:
        f.write(" ".join(["time"] + [name for name, _ in procs]) + "\n")
        while True:
            row = [on_cpu_ns(pid) for _, pid in procs]
            if all(v < 0 for v in row):
                return 0
            f.write(f"{time.time():.6f} " + " ".join(map(str, row)) + "\n")
            time.sleep(interval)


if __name__ == "__main__":
    raise SystemExit(main())
