#!/usr/bin/env python
"""Why did a failover take long? A diagnostic companion of bench_quorum.py.

    python tests/perf/diag_failover.py [--mode SIGTERM|kill-9] [--times 10] [--election 1000 --fetch 2000]

Runs bench_quorum's failover loop with `diag_site/` on PYTHONPATH, so that every node
records its Vote / EndQuorumEpoch traffic (and the follower state before and after
each message) and logs the driver's DEBUG lines (failed requests) to node.log. Then
prints, for every failover slower than --slow-ms, all nodes' control messages in the
window, ms after the signal.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_quorum as bq  # noqa: E402


def control_events(root: Path) -> list[tuple[float, int, str, dict[str, Any]]]:
    out = []
    for node_dir in sorted(root.glob("controller-*")):
        nid = int(node_dir.name.split("-")[1])
        for f in node_dir.glob("diag-*.json"):
            pid = int(f.stem.split("-")[1])
            for t, direction, detail in json.loads(f.read_text())["control"]:
                out.append((t * 1000, nid, f"{direction} (pid {pid})", detail))
    return sorted(out, key=lambda x: x[0])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--mode", choices=["SIGTERM", "kill-9"], default="SIGTERM")
    ap.add_argument("--times", type=int, default=10)
    ap.add_argument("--election", type=int, default=1000)
    ap.add_argument("--fetch", type=int, default=2000)
    ap.add_argument("--slow-ms", type=float, default=500.0)
    ap.add_argument("--json-out")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="pykraft-diag-failover-"))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(HERE / "diag_site"), str(bq.REPO), os.environ.get("PYTHONPATH")])
    )
    os.environ["PYKRAFT_DIAG_OUT"] = "auto"
    os.environ["PYKRAFT_DIAG_DEBUG"] = "1"
    mode = "kill -9" if args.mode == "kill-9" else "SIGTERM"
    key = "kill9" if mode == "kill -9" else "sigterm"
    timing = bq.Timing("diag", args.election, args.fetch)
    try:
        result = bq.run_failover(work, timing, args.times, 1.0, 0.0, modes=(mode,))
        root = work / "failover-diag"
        events = control_events(root)
        runs = result[key]["runs"]
        print(f"{mode} at election {args.election} / fetch {args.fetch} ms:")
        print("  " + ", ".join(f"{r['failover_ms']:.0f}" if r["failover_ms"] else "timeout" for r in runs) + " ms")
        for i, r in enumerate(runs):
            if r["failover_ms"] is not None and r["failover_ms"] < args.slow_ms:
                continue
            t0 = r["signal_t_ms"]
            print(
                f"\n#{i + 1}: leader {r['old_leader']} epoch {r['old_epoch']} -> {r['new_leader']}: "
                f"{r['failover_ms']} ms"
            )
            print("  events:\n    " + "\n    ".join(r["trace"]))
            print("  control messages:")
            for t, nid, direction, detail in events:
                if t0 - 50 <= t <= t0 + (r["failover_ms"] or 5000) + 50:
                    print(f"    {t - t0:8.1f} ms  node {nid} {direction}: {json.dumps(detail)}")
        if args.json_out:
            Path(args.json_out).write_text(json.dumps(result, indent=2) + "\n")
    finally:
        bq.stop_all_started()
        if args.keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
