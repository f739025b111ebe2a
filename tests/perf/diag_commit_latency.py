#!/usr/bin/env python
"""Where does commit latency go? A diagnostic companion of bench_quorum.py.

    python tests/perf/diag_commit_latency.py [--controllers 3] [--size 100] [--rate 1000]
                                             [--duration 10] [--warmup 2] [--keep]

Runs one synthetic-load cluster like bench_quorum.py, but starts its nodes with
`diag_site/` on PYTHONPATH: its sitecustomize wraps os.fsync and a few methods of
RaftCore/RaftNode to timestamp the commit path (behaviour unchanged, a few µs per
call added). For every proposal measured it splits the commit latency into:

    propose -> leader fsync done -> fetch response sent -> follower got it
    -> follower fsync done -> follower's next Fetch sent -> leader got it -> HW passed

(the follower being the one whose Fetch completed the majority), and prints
percentiles of each segment, the segments' mean share in the slowest 1 % of commits,
and per-node fsync and event-loop step times.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_quorum as bq  # noqa: E402

SEGMENTS = [
    ("leader fsync", "propose -> leader's append+fsync done"),
    ("to response", "leader fsync done -> Fetch response with the record sent"),
    ("to follower", "response sent -> follower's loop handles it"),
    ("follower fsync", "follower handles it -> follower's append+fsync done"),
    ("to next fetch", "follower fsync done -> its next Fetch sent"),
    ("to leader", "next Fetch sent -> leader's loop handles it"),
    ("to HW", "leader handles the Fetch -> high watermark passes the record"),
]


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def first_at_or_after(rows: list[list[Any]], times: list[float], t: float, pred: Any, key_col: int) -> list[Any] | None:
    """First row at or after time t whose column key_col satisfies pred."""
    i = bisect.bisect_left(times, t - 0.0005)
    while i < len(rows):
        if pred(rows[i][key_col]):
            return rows[i]
        i += 1
    return None


def analyse(leader: dict[str, Any], followers: dict[int, dict[str, Any]], warmup_s: float) -> dict[str, Any]:
    props = leader["propose"]
    if not props:
        raise RuntimeError("the leader recorded no proposals")
    t_start = props[0][0] + warmup_s

    def idx(rows: list[list[Any]], col: int = 0) -> list[float]:
        return [r[col] for r in rows]

    l_persist = leader["persist"]
    l_persist_t = idx(l_persist)
    l_send = leader["send_fetch_resp"]
    l_send_t = idx(l_send)
    l_recv = leader["recv_fetch_req"]
    l_recv_t = idx(l_recv)
    l_hw = leader["hw"]
    l_hw_t = idx(l_hw)
    fol = {}
    for nid, dump in followers.items():
        fol[nid] = {
            "recv": (dump["recv_fetch_resp"], idx(dump["recv_fetch_resp"])),
            "persist": (dump["persist"], idx(dump["persist"])),
            "send": (dump["send_fetch_req"], idx(dump["send_fetch_req"])),
        }

    segs: list[list[float]] = []
    windows: list[tuple[float, float, int]] = []  # (propose, HW, records) of each proposal followed
    for t_p, first, count in props:
        if t_p < t_start:
            continue
        end = first + count  # the record is committed once the HW reaches `end`
        b = first_at_or_after(l_persist, l_persist_t, t_p, lambda e, end=end: e >= end, 2)
        h = first_at_or_after(l_hw, l_hw_t, t_p, lambda hw, end=end: hw >= end, 1)
        if b is None or h is None:
            continue
        best = None
        for nid, f in fol.items():
            # the Fetch response that carried the record to this follower
            c = None
            i = bisect.bisect_left(l_send_t, b[0] - 0.0005)
            while i < len(l_send):
                if l_send[i][1] == nid and l_send[i][2] >= end:
                    c = l_send[i]
                    break
                i += 1
            if c is None:
                continue
            d = first_at_or_after(*f["recv"], c[0], lambda e, end=end: e >= end, 1)
            if d is None:
                continue
            e_ = first_at_or_after(*f["persist"], d[0], lambda e, end=end: e >= end, 2)
            if e_ is None:
                continue
            fs = first_at_or_after(*f["send"], e_[1], lambda o, end=end: o >= end, 1)
            if fs is None:
                continue
            g = None
            i = bisect.bisect_left(l_recv_t, fs[0] - 0.0005)
            while i < len(l_recv):
                if l_recv[i][1] == nid and l_recv[i][2] >= end:
                    g = l_recv[i]
                    break
                i += 1
            if g is None:
                continue
            if best is None or g[0] < best[-1][0]:
                best = (c, d, e_, fs, g)
        if best is None:
            continue
        c, d, e_, fs, g = best
        marks = [t_p, b[1], c[0], d[0], e_[1], fs[0], g[0], h[0]]
        seg = [max(0.0, (marks[i + 1] - marks[i]) * 1000) for i in range(len(marks) - 1)]
        seg.append((h[0] - t_p) * 1000)
        segs.append(seg)
        windows.append((t_p, h[0], count))
    if not segs:
        raise RuntimeError("no proposal could be followed along the commit path")
    totals = [s[-1] for s in segs]
    cut = pct(totals, 0.99)
    slow = [s for s in segs if s[-1] >= cut]
    slow_windows = [w for w, s in zip(windows, segs, strict=True) if s[-1] >= cut]
    out: dict[str, Any] = {"proposals": len(segs), "segments": {}, "slowest_1pct": {"n": len(slow)}}
    # Per record (as the synthetic load weighs it): a proposal made after a stall carries
    # every record that fell due during the stall.
    weighted = sorted((s[-1], w[2]) for s, w in zip(segs, windows, strict=True))
    total_records = sum(n for _, n in weighted)
    seen = 0
    for value, n in weighted:
        seen += n
        if seen >= 0.99 * total_records:
            out["per_record_p99"] = round(value, 3)
            break
    out["records_per_proposal"] = round(total_records / len(weighted), 2)
    out["slow_windows"] = slow_windows
    for i, (name, _) in enumerate([*SEGMENTS, ("total", "")]):
        xs = [s[i] for s in segs]
        out["segments"][name] = {
            "p50": round(pct(xs, 0.5), 3),
            "p90": round(pct(xs, 0.9), 3),
            "p99": round(pct(xs, 0.99), 3),
            "max": round(max(xs), 3),
            "mean": round(statistics.fmean(xs), 3),
        }
        out["slowest_1pct"][name] = round(statistics.fmean(s[i] for s in slow), 3)
    return out


def _cum_at(rows: list[list[Any]], times: list[float], t: float) -> float:
    """A cumulative counter sampled at `times`: its value at the last sample <= t."""
    i = bisect.bisect_right(times, t) - 1
    return rows[i][1] if i >= 0 else (rows[0][1] if rows else 0)


def stalls(dumps: dict[int, dict[str, Any]], windows: list[tuple[float, float, int]]) -> dict[str, Any]:
    """For commit windows (propose -> HW): per node, ms spent waiting for a CPU (run queue)
    and in cyclic GC during the window; mean over the windows."""
    out: dict[str, Any] = {}
    for nid, d in sorted(dumps.items()):
        rq = d.get("runq", [])
        rq_t = [r[0] for r in rq]
        gcs = d.get("gc", [])
        waits, gcms = [], []
        for t0, t1, _ in windows:
            waits.append((_cum_at(rq, rq_t, t1) - _cum_at(rq, rq_t, t0)) / 1e6 if rq else 0.0)
            gcms.append(sum(ms for ts, ms, _ in gcs if t0 <= ts <= t1))
        out[str(nid)] = {
            "runq_wait_ms": round(statistics.fmean(waits), 2) if waits else None,
            "gc_ms": round(statistics.fmean(gcms), 2) if gcms else None,
        }
    return out


def node_stats(d: dict[str, Any]) -> dict[str, Any]:
    fs = [x[1] for x in d["fsync"]]
    st = [x[1] for x in d["step"]]
    gcs = d.get("gc", [])
    rq = d.get("runq", [])
    span = (rq[-1][0] - rq[0][0]) if len(rq) > 1 else 0.0
    return {
        "gc_count": len(gcs),
        "gc_total_ms": round(sum(g[1] for g in gcs), 1),
        "gc_max_ms": round(max((g[1] for g in gcs), default=0.0), 2),
        "runq_wait_share": round((rq[-1][1] - rq[0][1]) / 1e9 / span, 3) if span > 0 else None,
        "fsyncs": len(fs),
        "fsync_p50": round(pct(fs, 0.5), 3),
        "fsync_p99": round(pct(fs, 0.99), 3),
        "fsync_max": round(max(fs, default=float("nan")), 3),
        "fsync_over_5ms": sum(1 for x in fs if x > 5),
        "steps": len(st),
        "step_p50": round(pct(st, 0.5), 3),
        "step_p99": round(pct(st, 0.99), 3),
        "step_max": round(max(st, default=float("nan")), 3),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--controllers", type=int, default=3)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--json-out")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="pykraft-diag-"))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(HERE / "diag_site"), str(bq.REPO), os.environ.get("PYTHONPATH")])
    )
    load_args = [
        "--synthetic-load-size",
        str(args.size),
        "--synthetic-load-rate",
        str(args.rate),
        "--synthetic-load-duration",
        str(args.duration),
        "--synthetic-load-warmup",
        str(args.warmup),
    ]
    meter = None
    try:
        busy_before = bq.cpu_busy()
        cluster = bq.BenchCluster(work / "cluster", {}, load_args, controllers=args.controllers)
        for nid in cluster.plans:
            os.environ["PYKRAFT_DIAG_OUT"] = str(cluster.plans[nid].directory / "diag.json")
            cluster.start(nid)
        os.environ.pop("PYKRAFT_DIAG_OUT")
        cluster.wait_leader()
        meter = bq.CpuMeter()
        report = None
        deadline = time.monotonic() + args.warmup + args.duration + 60
        while report is None and time.monotonic() < deadline:
            cluster.check_alive()
            for nid in cluster.plans:
                if cluster.report_path(nid).exists():
                    report = json.loads(cluster.report_path(nid).read_text())
            time.sleep(0.1)
        other = meter.other_share()
        cluster.stop_all()
        if report is None:
            raise RuntimeError("no load report")
        dumps = {nid: json.loads((p.directory / "diag.json").read_text()) for nid, p in cluster.plans.items()}
        leader = report["node_id"]
        result: dict[str, Any] = {
            "controllers": args.controllers,
            "record_size": args.size,
            "rate": args.rate,
            "load_report": report,
            "other_cpu_before": busy_before,
            "other_cpu_during": other,
            "nodes": {nid: {"leader": nid == leader, **node_stats(d)} for nid, d in dumps.items()},
        }
        if args.controllers > 1:
            followers = {nid: d for nid, d in dumps.items() if nid != leader}
            result["path"] = analyse(dumps[leader], followers, args.warmup)
            slow_windows = result["path"].pop("slow_windows")
            result["stalls_in_slowest_1pct"] = stalls(dumps, slow_windows)
        else:
            # One voter: commit = leader fsync; propose -> HW only.
            d = dumps[leader]
            t0 = d["propose"][0][0] + args.warmup
            hw_t = [h[0] for h in d["hw"]]
            xs = []
            for t_p, first, count in d["propose"]:
                if t_p < t0:
                    continue
                h = first_at_or_after(d["hw"], hw_t, t_p, lambda hw, end=first + count: hw >= end, 1)
                if h is not None:
                    xs.append((h[0] - t_p) * 1000)
            result["propose_to_hw"] = {"p50": pct(xs, 0.5), "p99": pct(xs, 0.99), "max": max(xs)}
        print(render(result))
        if args.json_out:
            Path(args.json_out).write_text(json.dumps(result, indent=2) + "\n")
    finally:
        bq.stop_all_started()
        if args.keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def render(r: dict[str, Any]) -> str:
    lr = r["load_report"]
    lines = [
        f"{r['controllers']} controller(s), {r['record_size']} B records at {r['rate'] or 'saturation'}/s: "
        f"{lr['records_per_s']:,.0f} committed/s, p50 {lr['p50_ms']} ms, p99 {lr['p99_ms']} ms, max {lr['max_ms']} ms "
        f"(other CPU before {bq._pct(r['other_cpu_before'])}, during {bq._pct(r['other_cpu_during'])})",
        "",
        "node  role      fsyncs  fsync p50  p99     max     >5ms  steps   step p50  p99     max",
    ]
    for nid, n in sorted(r["nodes"].items()):
        lines.append(
            f"{nid:<4}  {'leader' if n['leader'] else 'follower':<8}  {n['fsyncs']:<6}  {n['fsync_p50']:<9.3f}  "
            f"{n['fsync_p99']:<6.2f}  {n['fsync_max']:<6.2f}  {n['fsync_over_5ms']:<4}  {n['steps']:<6}  "
            f"{n['step_p50']:<8.3f}  {n['step_p99']:<6.2f}  {n['step_max']:.2f}"
        )
    lines.append("")
    lines.append("node  GC: count  total ms  max ms   waiting for a CPU (share of the run)")
    for nid, n in sorted(r["nodes"].items()):
        lines.append(
            f"{nid:<4}  {n['gc_count']:>9}  {n['gc_total_ms']:>8.1f}  {n['gc_max_ms']:>6.2f}   "
            f"{bq._pct(n['runq_wait_share'])}"
        )
    if "path" in r:
        p = r["path"]
        lines += [
            "",
            f"commit path of {p['proposals']} proposals (ms; 'slow 1%' = mean over the slowest 1 % of commits):",
            f"{'segment':<16}{'p50':>8}{'p90':>8}{'p99':>8}{'max':>8}{'mean':>8}{'slow 1%':>9}  what",
        ]
        for name, what in [*SEGMENTS, ("total", "propose -> HW passes the record")]:
            s = p["segments"][name]
            lines.append(
                f"{name:<16}{s['p50']:>8.2f}{s['p90']:>8.2f}{s['p99']:>8.2f}{s['max']:>8.2f}{s['mean']:>8.2f}"
                f"{p['slowest_1pct'][name]:>9.2f}  {what}"
            )
    if "path" in r:
        p = r["path"]
        lines.append(
            f"per-record p99 (as the load weighs it: {p['records_per_proposal']} records per proposal): "
            f"{p['per_record_p99']:.2f} ms"
        )
        st = r["stalls_in_slowest_1pct"]
        lines.append(
            "slowest 1 % of commits, mean per commit: "
            + "; ".join(
                f"node {nid} waited {x['runq_wait_ms']} ms for a CPU, {x['gc_ms']} ms in GC" for nid, x in st.items()
            )
        )
    if "propose_to_hw" in r:
        x = r["propose_to_hw"]
        lines.append(f"propose -> HW: p50 {x['p50']:.2f} ms, p99 {x['p99']:.2f} ms, max {x['max']:.2f} ms")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
