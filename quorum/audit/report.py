"""`report.html`: the audit's findings for people, with plots (matplotlib, embedded as PNG).

Plots, from the reference copy (a voter copy with the longest log) unless noted:
leadership changes and ISR size over time, the brokers' register / fence / unfence /
controlled-shutdown timeline (drawn, and listed), the leadership incidents with their causes
(listed), leaderless time per partition (from the
`partition_leaderless` findings), leader imbalance per broker over time, and the controller
epochs over offsets (every copy). Times are batch timestamps (the writing controller's
wall clock), drawn on a UTC wall-clock axis; counts are drawn on integer axes. The page
fits a 1,280 px window without horizontal scrolling (fixed-width tables that wrap, images
scaled to the page). The plot data is
aggregated into at most a few hundred time buckets (per batch by the replay tasks, then per
bucket here), so the report stays small whatever the log's size.
"""

from __future__ import annotations

import base64
import html
import io
import json
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = ["collect_plot_data", "write_report"]

BUCKETS = 300
MAX_BROKER_EVENTS = 2000  # broker events listed and drawn (the first ones, by offset)
MAX_INCIDENTS = 300  # incidents listed (the largest, by partitions whose leader changed)


def collect_plot_data(
    plot: dict[str, Any] | None,
    imbalance: Sequence[dict[str, Any]],
    copies: Sequence[dict[str, Any]],
    reference: Sequence[str],
    brokers: Sequence[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Small, aggregated series for the plots (see the module docstring).

    `plot`: the reference copy's per-batch aggregates from the replay tasks
    (`quorum.audit.job.merge_plot_data`: the partition series and the leadership change groups,
    per batch timestamp); `copies`: the per-copy documents of findings.json (offsets,
    timestamps, LeaderChange records); `imbalance` and `brokers`: the reference copy's rows of the
    imbalance and broker timelines (IMBALANCE_FIELDS, BROKER_FIELDS; a few per batch at most).
    """
    data: dict[str, Any] = {"reference": reference[0] if reference else None}
    data["epochs"] = [
        {"log_dir": c["log_dir"], "node_id": c["node_id"], "last": c["last_offset"], "changes": c["leader_changes"]}
        for c in copies
        if c["leader_changes"]
    ]
    ref = next((c for c in copies if reference and c["log_dir"] == reference[0]), None)
    if ref is None or ref["first_timestamp_ms"] is None:
        return data
    t0, t1 = int(ref["first_timestamp_ms"]), int(ref["last_timestamp_ms"])
    width = max(1, (t1 - t0) // BUCKETS + 1)
    data["t0"], data["bucket_ms"] = t0, width

    def bucket_of(ts: int) -> int:
        return max((ts - t0) // width, 0)

    series: dict[int, list[int]] = {}
    for ts, *values in (plot or {}).get("series", []):
        acc = series.setdefault(bucket_of(ts), [0, 0, 0, 0, 0])
        for i, v in enumerate(values):
            acc[i] += v
    data["partition_series"] = [
        {"kind": "partitions", "bucket": b, "live": v[0], "isr": v[1], "urp": v[2], "leaderless": v[3],
         "changes": v[4]}
        for b, v in sorted(series.items())
    ]  # fmt: skip
    # Per broker and bucket: the ratio of the bucket's last row (by offset).
    last: dict[tuple[int, int], tuple[int, float]] = {}
    for r in imbalance:
        if r["log_dir"] != ref["log_dir"] or r["batch_timestamp_ms"] is None:
            continue
        key = (int(r["broker_id"]), bucket_of(int(r["batch_timestamp_ms"])))
        if key not in last or r["offset"] > last[key][0]:
            last[key] = (r["offset"], r["ratio"])
    data["imbalance"] = [
        {"kind": "imbalance", "broker_id": b, "bucket": k, "ratio": ratio}
        for (b, k), (_, ratio) in sorted(last.items())
    ]
    if brokers is not None:
        fields = ("offset", "batch_timestamp_ms", "broker_id", "broker_epoch", "event", "controller_epoch")
        lifecycle = [
            {f: r[f] for f in fields} for r in brokers if r["log_dir"] == ref["log_dir"] and r["event"] != "snapshot"
        ]
        lifecycle.sort(key=lambda e: (e["offset"], e["broker_id"]))
        data["broker_events"] = lifecycle[:MAX_BROKER_EVENTS]
        data["incidents"] = _incidents((plot or {}).get("groups", []), lifecycle)
    return data


# --------------------------------------------------------------------------- plots


def _incidents(groups: Sequence[dict[str, Any]], lifecycle: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Leadership changes grouped by the controller batch that made them (one batch timestamp;
    `groups` from the replay), each group with its cause: the fencing or controlled shutdown of
    a broker that led (its latest lifecycle event at the batch's time), an unclean election, a
    reassignment (the replicas changed), a lost leader (no eligible replica), a preferred leader
    election (the new leader is the first replica), else an election. Totals over every group;
    the MAX_INCIDENTS largest groups listed."""
    import bisect

    # Per broker, its lifecycle events by (time, offset): the latest at or before a batch's time.
    events: dict[int, list[tuple[int, int, str]]] = defaultdict(list)
    for e in lifecycle:
        events[int(e["broker_id"])].append((int(e["batch_timestamp_ms"]), int(e["offset"]), e["event"]))
    for evs in events.values():
        evs.sort()
    totals: dict[str, dict[str, int]] = {}
    caused = []
    for g in groups:
        ts = int(g["batch_timestamp_ms"])
        fenced: list[int] = []
        shutting: list[int] = []
        had_state = False
        for b in g["from_leaders"]:
            if b < 0 or b not in events:
                continue
            evs = events[b]
            k = bisect.bisect_right(evs, (ts, float("inf"), ""))
            if k == 0:
                continue
            had_state = True
            state = evs[k - 1][2]
            if state == "fenced":
                fenced.append(b)
            elif state == "controlled_shutdown":
                shutting.append(b)
        from_leaders = set(g["from_leaders"])
        if fenced:
            cause = "fencing"
        elif shutting:
            cause = "controlled shutdown"
        elif g["unclean"] > 0:
            cause = "unclean election"
        elif g["reassigned"] > 0:
            cause = "reassignment"
        elif g["leaderless"] == g["partitions"]:
            cause = "leader lost (no eligible replica)"
        elif g["preferred"] == g["partitions"]:
            cause = "preferred leader election"
        else:
            cause = "leader election"
        involved = [b for b in dict.fromkeys(sorted(fenced) + sorted(shutting)) if b in from_leaders]
        row = dict(g)
        row.update(
            fenced=sorted(fenced) if had_state else None,
            shutting_down=sorted(shutting) if had_state else None,
            cause=cause,
            brokers=involved,
        )
        caused.append(row)
        t = totals.setdefault(cause, {"incidents": 0, "partitions": 0})
        t["incidents"] += 1
        t["partitions"] += int(g["partitions"])
    listed = sorted(caused, key=lambda r: (-r["partitions"], r["first_offset"]))[:MAX_INCIDENTS]
    listed.sort(key=lambda r: r["first_offset"])
    return {"totals": totals, "listed": listed}


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _utc(ms: float) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def _x(ms: float) -> float:
    """A wall-clock time in ms as a matplotlib date number (days since its default epoch, 1970-01-01)."""
    return ms / 86_400_000


def _time_axis(ax: Any) -> None:
    import matplotlib.dates as mdates

    locator = mdates.AutoDateLocator(tz=UTC)  # type: ignore[no-untyped-call]
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, tz=UTC))  # type: ignore[no-untyped-call]
    ax.set_xlabel("time (UTC, batch timestamps)")


def _integer_axis(axis: Any) -> None:
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


_BROKER_MARKERS = {
    "registered": ("o", "tab:blue"),
    "unfenced": ("^", "tab:green"),
    "fenced": ("v", "tab:red"),
    "controlled_shutdown": ("s", "tab:orange"),
    "unregistered": ("x", "black"),
}


def _plots(doc: dict[str, Any], data: dict[str, Any]) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out: list[tuple[str, str]] = []
    width = data.get("bucket_ms", 1)
    t0 = int(data.get("t0", 0))
    series = data.get("partition_series") or []
    if series:
        xs, live, isr, urp, leaderless, changes = [], [], [], [], [], []
        acc: dict[str, int] = defaultdict(int)
        for r in series:
            for k in ("live", "isr", "urp", "leaderless"):
                acc[k] += int(r[k] or 0)
            xs.append(_x(t0 + r["bucket"] * width))
            live.append(acc["live"])
            isr.append(acc["isr"] / acc["live"] if acc["live"] else 0)
            urp.append(acc["urp"])
            leaderless.append(acc["leaderless"])
            changes.append(int(r["changes"] or 0))
        fig, (a1, a2) = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True)
        a1.bar(xs, changes, width=max(width / 86_400_000, 1e-9), align="edge", color="tab:orange")
        a1.set_ylabel("leadership changes")
        _integer_axis(a1.yaxis)
        a1.set_title("Leadership changes and ISR size over time")
        a2.step(xs, isr, where="post", label="mean ISR size")
        a2.step(xs, urp, where="post", label="under-replicated partitions")
        a2.step(xs, leaderless, where="post", label="leaderless partitions")
        _time_axis(a2)
        _integer_axis(a2.yaxis)
        a2.legend(loc="best", fontsize="small")
        out.append(("Leadership changes and ISR size", _png(fig)))
    events = data.get("broker_events") or []
    if events:
        ids = sorted({int(e["broker_id"]) for e in events})
        fig, ax = plt.subplots(figsize=(9, max(2.2, 0.45 * len(ids) + 1.2)))
        for kind, (marker, color) in _BROKER_MARKERS.items():
            mine = [e for e in events if e["event"] == kind]
            if mine:
                ax.scatter([_x(e["batch_timestamp_ms"]) for e in mine], [e["broker_id"] for e in mine],
                           marker=marker, color=color, label=kind.replace("_", " "), zorder=3)  # fmt: skip
        ax.set_yticks(ids)
        ax.set_ylabel("broker")
        ax.set_title("Broker lifecycle: register, fence, unfence, controlled shutdown")
        _time_axis(ax)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
        out.append(("Broker lifecycle", _png(fig)))
    leaderless_time: dict[str, int] = defaultdict(int)
    for f in doc["findings"]:
        if f["check"] == "partition_leaderless" and f.get("duration_ms"):
            leaderless_time[f["subject"]] += int(f["duration_ms"])
    if leaderless_time:
        top = sorted(leaderless_time.items(), key=lambda kv: -kv[1])[:30]
        fig, ax = plt.subplots(figsize=(9, max(2.0, 0.28 * len(top) + 1)))
        ax.barh([k for k, _ in reversed(top)], [v / 1000 for _, v in reversed(top)], color="tab:red")
        ax.set_xlabel("seconds without a leader")
        ax.set_title("Leaderless time per partition" + (" (top 30)" if len(leaderless_time) > 30 else ""))
        out.append(("Leaderless time per partition", _png(fig)))
    imb = data.get("imbalance") or []
    if imb:
        by_broker: dict[int, tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
        for r in imb:
            xs_b, ys_b = by_broker[int(r["broker_id"])]
            xs_b.append(_x(t0 + r["bucket"] * width))
            ys_b.append(100 * float(r["ratio"]))
        fig, ax = plt.subplots(figsize=(9, 3.5))
        for broker, (xs_b, ys_b) in sorted(by_broker.items()):
            ax.step(xs_b, ys_b, where="post", label=f"broker {broker}")
        pct = doc["settings"].get("leader.imbalance.per.broker.percentage", 10)
        ax.axhline(pct, color="grey", linestyle="--", label=f"threshold {pct}%")
        ax.set_ylabel("leader imbalance %")
        _time_axis(ax)
        ax.set_title("Leader imbalance per broker")
        ax.legend(loc="best", fontsize="small")
        out.append(("Leader imbalance per broker", _png(fig)))
    epochs = data.get("epochs") or []
    if epochs:
        fig, ax = plt.subplots(figsize=(9, 3.5))
        for copy in sorted(epochs, key=lambda c: (c["node_id"] is None, c["node_id"] or 0)):
            elections: list[dict[str, Any]] = sorted(copy["changes"], key=lambda lc: int(lc["offset"]))
            xs_e = [lc["offset"] for lc in elections]
            ys_e = [lc["leader_epoch"] for lc in elections]
            if copy["last"] is not None and copy["last"] > xs_e[-1]:
                xs_e.append(copy["last"])
                ys_e.append(ys_e[-1])
            label = f"node {copy['node_id']}" if copy["node_id"] is not None else copy["log_dir"]
            ax.step(xs_e, ys_e, where="post", label=label, alpha=0.8)
            for lc in elections:
                ax.annotate(f"L{lc['leader']}", (lc["offset"], lc["leader_epoch"]), fontsize="x-small")
        ax.set_xlabel("offset")
        ax.set_ylabel("controller epoch")
        _integer_axis(ax.xaxis)
        _integer_axis(ax.yaxis)
        ax.set_title("Controller epochs over offsets (LeaderChange records; L = leader)")
        ax.legend(loc="best", fontsize="small")
        out.append(("Controller epochs over offsets", _png(fig)))
    return out


# --------------------------------------------------------------------------- html

_CSS = """
body { font-family: sans-serif; margin: 1.5em auto; max-width: 1200px; padding: 0 1em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; max-width: 100%; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top;
         overflow-wrap: anywhere; word-break: break-word; }
img { max-width: 100%; height: auto; }
p, code { overflow-wrap: anywhere; }
th { background: #f0f0f0; }
.violation { color: #b00020; font-weight: bold; }
.warning { color: #a65e00; }
.info { color: #555; }
.ok { color: #1b7f1b; font-weight: bold; }
code { font-size: 0.9em; }
"""


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _offsets(f: dict[str, Any]) -> str:
    shown = ", ".join(str(o) for o in f["offsets"][:12])
    more = f["offset_count"] - min(len(f["offsets"]), 12)
    return html.escape(shown + (f" (+{more} more)" if more > 0 else ""))


def write_report(path: Path, doc: dict[str, Any], data: dict[str, Any]) -> Path:
    summary = doc["summary"]
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>pykraft metadata log audit</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>pykraft metadata log audit</h1>",
        f"<p>Generated {html.escape(doc['generated_at'])} from {len(summary['copies'])} "
        f"cop{'ies' if len(summary['copies']) != 1 else 'y'} ({summary['records']} records).</p>",
    ]
    if summary["violations"]:
        parts.append(f"<p class='violation'>{summary['violations']} violation(s)</p>")
    else:
        parts.append("<p class='ok'>No violations.</p>")
    parts.append(f"<p>{summary['warnings']} warning(s), {summary['info']} informational finding(s).</p>")
    parts.append("<h2>Copies</h2>")
    rows = []
    for c in summary["copies"]:
        replay = c.get("replay") or {}
        stopped = replay.get("stopped")
        rows.append(
            [
                html.escape(str(c["node_id"])),
                "yes" if c["voter"] else "no",
                html.escape(c["log_dir"]),
                c["records"],
                html.escape(f"{c['first_offset']}..{c['last_offset']}"),
                c["last_epoch"],
                len(c["segments"]),
                len(c["snapshots"]),
                c["invalid_rows"],
                html.escape(stopped["reason"] if stopped else "complete"),
            ]
        )
    parts.append(
        _table(
            ["node", "voter", "log dir", "rows", "offsets", "last epoch", "segments", "snapshots", "invalid", "replay"],
            rows,
        )
    )
    agreement = doc.get("agreement", {})
    parts.append("<h2>Replica agreement</h2>")
    parts.append(f"<p>{html.escape(doc['committed_rule'])}</p>")
    parts.append(f"<p><code>{html.escape(json.dumps(agreement))}</code></p>")
    for severity, title in (("violation", "Violations"), ("warning", "Warnings"), ("info", "Information")):
        found = [f for f in doc["findings"] if f["severity"] == severity]
        parts.append(f"<h2>{title} ({len(found)})</h2>")
        if found:
            parts.append(
                _table(
                    ["check", "subject", "message", "offsets", "nodes"],
                    [
                        [
                            f"<span class='{severity}'>{html.escape(f['check'])}</span>",
                            html.escape(f["subject"]),
                            html.escape(f["message"]),
                            _offsets(f),
                            html.escape(", ".join(str(n) for n in f.get("nodes", []))),
                        ]
                        for f in found[:500]
                    ],
                )
            )
    plots = _plots(doc, data)
    if plots:
        parts.append("<h2>Plots</h2>")
        if data.get("reference"):
            parts.append(f"<p>Timelines of the reference copy {html.escape(str(data['reference']))}.</p>")
        for title, png in plots:
            parts.append(
                f"<h3>{html.escape(title)}</h3><img alt='{html.escape(title)}' src='data:image/png;base64,{png}'>"
            )
    incidents = data.get("incidents") or {}
    if incidents.get("totals"):
        totals = incidents["totals"]
        listed = incidents["listed"]
        count = sum(t["incidents"] for t in totals.values())
        parts.append(f"<h2>Leadership incidents ({count})</h2>")
        parts.append(
            "<p>Leadership changes of the reference copy, grouped by the controller batch that made them, "
            "with their cause. Totals:</p>"
        )
        parts.append(
            _table(
                ["cause", "incidents", "partitions"],
                [[html.escape(c), t["incidents"], t["partitions"]] for c, t in sorted(totals.items())],
            )
        )
        if len(listed) < count:
            parts.append(f"<p>The {len(listed)} largest incidents, in log order:</p>")

        def ids(values: Sequence[Any]) -> str:
            return html.escape(", ".join("none" if v is not None and v < 0 else str(v) for v in values or []))

        parts.append(
            _table(
                ["time (UTC)", "offsets", "cause", "partitions", "from leaders", "to leaders"],
                [
                    [
                        html.escape(_utc(r["batch_timestamp_ms"]).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]),
                        html.escape(f"{r['first_offset']}..{r['last_offset']}"),
                        html.escape(r["cause"] + (f" (broker {ids(r['brokers'])})" if r["brokers"] else "")),
                        r["partitions"],
                        ids(r["from_leaders"]),
                        ids(r["to_leaders"]),
                    ]
                    for r in listed
                ],
            )
        )
    if data.get("broker_events"):
        events = data["broker_events"]
        parts.append(f"<h2>Broker lifecycle events ({len(events)})</h2>")
        parts.append(
            _table(
                ["time (UTC)", "offset", "broker", "event", "broker epoch", "controller epoch"],
                [
                    [
                        html.escape(_utc(e["batch_timestamp_ms"]).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]),
                        e["offset"],
                        e["broker_id"],
                        html.escape(str(e["event"]).replace("_", " ")),
                        e["broker_epoch"] if e["broker_epoch"] is not None else "",
                        e["controller_epoch"] if e["controller_epoch"] is not None else "",
                    ]
                    for e in events
                ],
            )
        )
    parts.append("<h2>Settings</h2>")
    parts.append(
        _table(["config", "value"], [[html.escape(k), html.escape(str(v))] for k, v in doc["settings"].items()])
    )
    parts.append("<h2>Checks</h2>")
    parts.append(_table(["check", "meaning"], [[html.escape(k), html.escape(v)] for k, v in doc["checks"].items()]))
    parts.append("</body></html>")
    path.write_text("\n".join(parts), encoding="utf-8")
    return path
