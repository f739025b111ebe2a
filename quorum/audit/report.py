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
aggregated by Spark into at most a few hundred time buckets, so the report stays small
whatever the log's size.
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

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

__all__ = ["collect_plot_data", "write_report"]

BUCKETS = 300
MAX_BROKER_EVENTS = 2000  # broker events listed and drawn (the first ones, by offset)
MAX_INCIDENTS = 300  # incidents listed (the largest, by partitions whose leader changed)


def collect_plot_data(
    lagged: DataFrame,
    imbalance: DataFrame,
    copies: Sequence[dict[str, Any]],
    reference: Sequence[str],
    log_copies: Sequence[Any],
    brokers: DataFrame | None = None,
) -> dict[str, Any]:
    """Small, aggregated series for the plots (see the module docstring); one Spark job.

    `lagged`: the partition timeline with per-row changes (`quorum.audit.job.lag_timeline`), whose
    `_copy` indexes `log_copies`; `copies`: the per-copy documents of findings.json (offsets,
    timestamps, LeaderChange records).
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
    bucket = F.greatest(F.floor((F.col("batch_timestamp_ms") - F.lit(t0)) / F.lit(width)).cast("int"), F.lit(0))
    index = next(i for i, c in enumerate(log_copies) if c.log_dir == ref["log_dir"])
    p = lagged.where(F.col("_copy") == index).select(
        bucket.alias("bucket"), "d_live", "d_isr", "d_urp", "d_leaderless", "changes"
    )
    series = p.groupBy("bucket").agg(
        F.lit("partitions").alias("kind"),
        F.lit(None).cast("int").alias("broker_id"),
        F.sum("d_live").alias("live"),
        F.sum("d_isr").alias("isr"),
        F.sum("d_urp").alias("urp"),
        F.sum("d_leaderless").alias("leaderless"),
        F.sum("changes").alias("changes"),
        F.lit(None).cast("double").alias("ratio"),
    )
    imb = (
        imbalance.where(F.col("log_dir") == ref["log_dir"])
        .select("broker_id", bucket.alias("bucket"), "offset", "ratio")
        .groupBy("broker_id", "bucket")
        .agg(
            F.lit("imbalance").alias("kind"),
            F.lit(None).cast("bigint").alias("live"),
            F.lit(None).cast("bigint").alias("isr"),
            F.lit(None).cast("bigint").alias("urp"),
            F.lit(None).cast("bigint").alias("leaderless"),
            F.lit(None).cast("bigint").alias("changes"),
            F.max_by("ratio", "offset").alias("ratio"),
        )
    )
    if brokers is not None:
        events = (
            brokers.where((F.col("log_dir") == ref["log_dir"]) & (F.col("event") != "snapshot"))
            .select("offset", "batch_timestamp_ms", "broker_id", "broker_epoch", "event", "controller_epoch")
            .orderBy("offset", "broker_id")
            .limit(MAX_BROKER_EVENTS)
        )
        data["broker_events"] = [r.asDict() for r in events.collect()]
        data["incidents"] = _incidents(p_rows_of(lagged, index), brokers.where(F.col("log_dir") == ref["log_dir"]))
    rows = [r.asDict() for r in series.unionByName(imb).collect()]
    data["partition_series"] = sorted((r for r in rows if r["kind"] == "partitions"), key=lambda r: r["bucket"])
    data["imbalance"] = sorted(
        (r for r in rows if r["kind"] == "imbalance"), key=lambda r: (r["broker_id"], r["bucket"])
    )
    return data


# --------------------------------------------------------------------------- plots


def p_rows_of(lagged: DataFrame, index: int) -> DataFrame:
    """The reference copy's leadership changes (PartitionChangeRecords that moved or removed a leader)."""
    return lagged.where(
        (F.col("_copy") == index) & (F.col("change") == "PARTITION_CHANGE_RECORD") & (F.col("changes") == 1)
    )


def _incidents(changes: DataFrame, brokers: DataFrame) -> dict[str, Any]:
    """Leadership changes grouped by the controller batch that made them (one batch timestamp), each
    group with its cause: the fencing or controlled shutdown of a broker that led (its latest
    lifecycle event at the batch's time), an unclean election, a reassignment (the replicas changed), a lost leader
    (no eligible replica), a preferred leader election (the new leader is the first replica), else
    an election. Totals over every group; the MAX_INCIDENTS largest groups listed."""
    reassigned = F.col("p_replicas").isNotNull() & (F.col("p_replicas") != F.col("replicas"))
    groups = changes.groupBy("batch_timestamp_ms").agg(
        F.min("offset").alias("first_offset"),
        F.max("offset").alias("last_offset"),
        F.count("*").alias("partitions"),
        F.array_sort(F.collect_set("prev_leader")).alias("from_leaders"),
        F.array_sort(F.collect_set("leader")).alias("to_leaders"),
        F.sum(F.when(F.col("unclean"), 1).otherwise(0)).alias("unclean"),
        F.sum(F.when(reassigned, 1).otherwise(0)).alias("reassigned"),
        F.sum(F.when((F.col("leader") >= 0) & (F.col("leader") == F.element_at("replicas", 1)), 1).otherwise(0)).alias(
            "preferred"
        ),
        F.sum(F.when(F.col("leader") < 0, 1).otherwise(0)).alias("leaderless"),
    )
    # The state of each broker that lost leadership, as of the batch: its latest lifecycle event at
    # or before the batch's timestamp (the controller fences, or marks a broker shutting down, in
    # the batch that moves its leaderships, or earlier).
    leaders = groups.select("batch_timestamp_ms", F.explode("from_leaders").alias("broker_id")).where(
        F.col("broker_id") >= 0
    )
    lifecycle = brokers.where(F.col("event") != "snapshot").select(
        "broker_id", F.col("batch_timestamp_ms").alias("event_ms"), F.col("offset").alias("event_offset"), "event"
    )
    states = (
        leaders.join(lifecycle, "broker_id")
        .where(F.col("event_ms") <= F.col("batch_timestamp_ms"))
        .groupBy("batch_timestamp_ms", "broker_id")
        .agg(F.max_by("event", F.struct("event_ms", "event_offset")).alias("state"))
    )
    events = states.groupBy("batch_timestamp_ms").agg(
        F.array_sort(F.collect_set(F.when(F.col("state") == "fenced", F.col("broker_id")))).alias("fenced"),
        F.array_sort(F.collect_set(F.when(F.col("state") == "controlled_shutdown", F.col("broker_id")))).alias(
            "shutting_down"
        ),
    )
    fenced = F.coalesce(F.col("fenced"), F.array().cast("array<int>"))
    shutting = F.coalesce(F.col("shutting_down"), F.array().cast("array<int>"))
    cause = (
        F.when(F.size(F.array_intersect(fenced, F.col("from_leaders"))) > 0, F.lit("fencing"))
        .when(F.size(F.array_intersect(shutting, F.col("from_leaders"))) > 0, F.lit("controlled shutdown"))
        .when(F.col("unclean") > 0, F.lit("unclean election"))
        .when(F.col("reassigned") > 0, F.lit("reassignment"))
        .when(F.col("leaderless") == F.col("partitions"), F.lit("leader lost (no eligible replica)"))
        .when(F.col("preferred") == F.col("partitions"), F.lit("preferred leader election"))
        .otherwise(F.lit("leader election"))
    )
    involved = F.array_intersect(F.array_union(fenced, shutting), F.col("from_leaders"))
    caused = groups.join(events, "batch_timestamp_ms", "left").select(
        "*", cause.alias("cause"), involved.alias("brokers")
    )
    totals = {
        r["cause"]: {"incidents": int(r["incidents"]), "partitions": int(r["partitions"])}
        for r in caused.groupBy("cause")
        .agg(F.count("*").alias("incidents"), F.sum("partitions").alias("partitions"))
        .collect()
    }
    listed = [
        r.asDict(recursive=True)
        for r in caused.orderBy(F.desc("partitions"), "first_offset").limit(MAX_INCIDENTS).collect()
    ]
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
