"""The Spark job behind `pykraft audit` and `pykraft export`.

1. Read every copy with the `pykraft-metadata` data source (one task per file) and write
   `records.parquet`; everything after reads that Parquet, so each record decodes once.
2. Replay each copy in log order: the rows of a copy (its replay snapshot, then its
   segments) are put in one partition (`repartition` by copy + `sortWithinPartitions`) and
   `mapInArrow` runs `quorum.audit.checks.CopyReplayer` (the shared `MetadataDelta` replay)
   over them, emitting `partitions_timeline.parquet`, `brokers_timeline.parquet`,
   `imbalance_timeline.parquet` and the semantic findings as rows.
3. Per-copy log checks as window functions (lag over file, position, offset), agreement
   between copies as a self-join on offset restricted to committed offsets, the epoch
   checks as window functions over the partition timeline.
4. `findings.json` and `report.html` (`quorum.audit.report`).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped,import-not-found,unused-ignore]
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from quorum.audit.baseline import copy_order
from quorum.audit.checks import (
    BROKER_FIELDS,
    CHECKS,
    COMMITTED_RULE,
    FINDING_FIELDS,
    IMBALANCE_FIELDS,
    MAX_OFFSETS,
    PARTITION_FIELDS,
    AuditSettings,
    CopyReplayer,
    Finding,
    copy_label,
    majority,
    merge_findings,
)
from quorum.audit.logdirs import LogCopy, resolve_copies
from quorum.audit.source import SOURCE_NAME, arrow_schema, register, spark_schema, to_arrow

__all__ = ["AuditResult", "run_audit", "spark_session"]

RECORDS = "records.parquet"
PARTITIONS = "partitions_timeline.parquet"
BROKERS = "brokers_timeline.parquet"
IMBALANCE = "imbalance_timeline.parquet"
FINDINGS = "findings.json"
REPORT = "report.html"


# --------------------------------------------------------------------------- the session


def spark_session(master: str = "local[*]", app_name: str = "pykraft-audit") -> SparkSession:
    """A SparkSession whose Python workers run this interpreter; quiet (WARN) and small when local."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    local = master.startswith("local")
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.pyspark.python", sys.executable)
        .config("spark.pyspark.driver.python", sys.executable)
        .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.debug.maxToStringFields", "200")
    )
    if local:
        builder = (
            builder.config("spark.sql.shuffle.partitions", "4")
            .config("spark.default.parallelism", "4")
            .config("spark.ui.enabled", "false")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
        )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    return spark


# --------------------------------------------------------------------------- the replay


def _union_fields() -> tuple[tuple[str, str], ...]:
    fields: dict[str, str] = {"row_kind": "STRING"}
    for group in (PARTITION_FIELDS, BROKER_FIELDS, IMBALANCE_FIELDS, FINDING_FIELDS):
        for name, kind in group:
            assert fields.setdefault(name, kind) == kind, name
    return tuple(fields.items())


REPLAY_FIELDS = _union_fields()
_REPLAY_INDEX = {name: i for i, (name, _) in enumerate(REPLAY_FIELDS)}
_KIND_FIELDS = {
    "partition": PARTITION_FIELDS,
    "broker": BROKER_FIELDS,
    "imbalance": IMBALANCE_FIELDS,
    "finding": FINDING_FIELDS,
    "summary": (("node_id", "INT"), ("log_dir", "STRING"), ("details", "STRING")),
}
_REPLAY_INPUT = (
    "log_dir",
    "node_id",
    "source_kind",
    "offset",
    "batch_base_offset",
    "leader_epoch",
    "batch_timestamp_ms",
    "is_control",
    "valid",
    "error_kind",
    "value",
)


class _ArrowSink:
    """Collects the replay's rows per kind; `drain` turns them into union-schema Arrow batches."""

    def __init__(self) -> None:
        self.rows: dict[str, list[tuple[Any, ...]]] = {kind: [] for kind in _KIND_FIELDS}
        self.pending = 0

    def partition(self, row: tuple[Any, ...]) -> None:
        self.rows["partition"].append(row)
        self.pending += 1

    def broker(self, row: tuple[Any, ...]) -> None:
        self.rows["broker"].append(row)
        self.pending += 1

    def imbalance(self, row: tuple[Any, ...]) -> None:
        self.rows["imbalance"].append(row)
        self.pending += 1

    def finding(self, f: Finding) -> None:
        self.rows["finding"].append(
            (f.node_id, f.log_dir, f.check, f.severity, f.subject, f.message, list(f.offsets),
             max(f.offset_count, len(f.offsets)), f.duration_ms, json.dumps(f.details, default=str))
        )  # fmt: skip
        self.pending += 1

    def summary(self, node_id: int | None, log_dir: str, doc: dict[str, Any]) -> None:
        self.rows["summary"].append((node_id, log_dir, json.dumps(doc, default=str)))
        self.pending += 1

    def drain(self, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        width = len(REPLAY_FIELDS)
        for kind, rows in self.rows.items():
            if not rows:
                continue
            index = [_REPLAY_INDEX[name] for name, _ in _KIND_FIELDS[kind]]
            out = []
            for row in rows:
                full: list[Any] = [None] * width
                full[0] = kind
                for i, value in zip(index, row, strict=True):
                    full[i] = value
                out.append(tuple(full))
            rows.clear()
            yield to_arrow(out, schema)
        self.pending = 0


def _replay_function(plans: dict[str, tuple[int | None, str | None, int, int]], settings: AuditSettings) -> Any:
    """The mapInArrow function: replays every copy whose rows arrive (contiguous, in log order)."""
    schema = arrow_schema(REPLAY_FIELDS)

    def replay(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        sink = _ArrowSink()
        current: str | None = None
        replayer: CopyReplayer | None = None
        snapshot_values: list[bytes] = []
        snapshot_ok = True
        snapshot_ts: int | None = None
        started = False

        def start_segments() -> None:
            nonlocal started
            started = True
            assert replayer is not None and current is not None
            _node, name, end, epoch = plans[current]
            if name is None:
                return
            if snapshot_ok and (snapshot_values or snapshot_ts is not None):
                replayer.load_snapshot(name, snapshot_values, end, epoch, snapshot_ts)
            else:
                replayer.stopped = {"offset": end - 1, "reason": f"snapshot {name} is unreadable"}

        def finish() -> None:
            if replayer is None or current is None:
                return
            if not started:
                start_segments()
            sink.summary(plans[current][0], current, replayer.finish())

        for batch in batches:
            cols = {name: batch.column(name).to_pylist() for name in _REPLAY_INPUT}
            for i in range(batch.num_rows):
                log_dir = cols["log_dir"][i]
                if log_dir != current:
                    finish()
                    current = log_dir
                    node_id = plans[log_dir][0]
                    replayer = CopyReplayer(log_dir, node_id, settings, sink)
                    snapshot_values, snapshot_ok, snapshot_ts, started = [], True, None, False
                assert replayer is not None
                if cols["source_kind"][i] == "snapshot":
                    if not cols["valid"][i]:
                        snapshot_ok = False
                    else:
                        if snapshot_ts is None:
                            snapshot_ts = cols["batch_timestamp_ms"][i]
                        if not cols["is_control"][i]:
                            snapshot_values.append(cols["value"][i])
                    continue
                if not started:
                    start_segments()
                replayer.feed(
                    cols["offset"][i],
                    cols["batch_base_offset"][i],
                    cols["leader_epoch"][i],
                    cols["batch_timestamp_ms"][i],
                    cols["is_control"][i],
                    bool(cols["valid"][i]),
                    cols["error_kind"][i],
                    cols["value"][i],
                )
            if sink.pending >= 20_000:
                yield from sink.drain(schema)
        finish()
        yield from sink.drain(schema)

    return replay


def replay_dataframe(records: DataFrame, copies: Sequence[LogCopy], settings: AuditSettings) -> DataFrame:
    """Every copy replayed by `CopyReplayer` (one task per copy): rows of REPLAY_FIELDS."""
    plans: dict[str, tuple[int | None, str | None, int, int]] = {}
    keep: Column = F.col("source_kind") == F.lit("segment")
    for copy in copies:
        snap = copy.replay_snapshot()
        if snap is None:
            plans[copy.log_dir] = (copy.node_id, None, 0, -1)
        else:
            plans[copy.log_dir] = (copy.node_id, snap.name, snap.end_offset, snap.epoch)
            keep = keep | ((F.col("log_dir") == F.lit(copy.log_dir)) & (F.col("source_file") == F.lit(snap.name)))
    rows = (
        records.where(keep)
        .select(*_REPLAY_INPUT, "source_file", "position")
        .withColumn("_snapshot_first", F.when(F.col("source_kind") == "snapshot", 0).otherwise(1))
        .repartition(max(1, len(copies)), "log_dir")
        .sortWithinPartitions("log_dir", "_snapshot_first", "source_file", "position", "offset")
    )
    return rows.mapInArrow(_replay_function(plans, settings), spark_schema(REPLAY_FIELDS))


def _select(df: DataFrame, kind: str, fields: Sequence[tuple[str, str]]) -> DataFrame:
    return df.where(F.col("row_kind") == kind).select(*[name for name, _ in fields])


# --------------------------------------------------------------------------- log checks and agreement

_ERROR_CHECK = {
    "crc_mismatch": "bad_crc",
    "corrupt_batch": "corrupt_batch",
    "bad_record": "undecodable_record",
    "bad_snapshot": "invalid_snapshot",
    "torn_tail": "torn_tail",
}


def _error_check(column: Column) -> Column:
    expr = F.lit("corrupt_batch")
    for kind, check in _ERROR_CHECK.items():
        expr = F.when(column == kind, F.lit(check)).otherwise(expr)
    return expr


def log_check_dataframe(records: DataFrame) -> DataFrame:
    """(log_dir, node_id, check, offset) events of the per-copy log checks (window functions)."""
    w = Window.partitionBy("log_dir").orderBy("source_file", "position", "offset")
    seg = records.where(F.col("source_kind") == "segment").select(
        "log_dir",
        "node_id",
        "source_file",
        "offset",
        "leader_epoch",
        "valid",
        "error_kind",
        F.lag("offset").over(w).alias("p_offset"),
        F.lag("leader_epoch").over(w).alias("p_epoch"),
        F.lag("valid").over(w).alias("p_valid"),
        F.lag("source_file").over(w).alias("p_file"),
    )
    valid = F.col("valid")
    both = valid & F.coalesce(F.col("p_valid"), F.lit(False))
    first_in_file = F.col("p_file").isNull() | (F.col("p_file") != F.col("source_file"))
    file_base = F.substring("source_file", 1, 20).cast("bigint")
    check = (
        F.when(~valid, _error_check(F.col("error_kind")))
        .when(first_in_file & (F.col("offset") != file_base), F.lit("offsets_not_contiguous"))
        .otherwise(F.lit(None))
    )
    # A row can raise two events (e.g. a gap that is also a file-base mismatch): one column each.
    events = seg.select(
        "log_dir",
        "node_id",
        "offset",
        F.array(
            check,
            F.when(both & (F.col("offset") != F.col("p_offset") + 1), F.lit("offsets_not_contiguous")),
            F.when(both & (F.col("leader_epoch") < F.col("p_epoch")), F.lit("leader_epoch_decreasing")),
        ).alias("checks"),
    ).select("log_dir", "node_id", F.explode("checks").alias("check"), "offset")
    snapshots = records.where((F.col("source_kind") == "snapshot") & ~valid).select(
        "log_dir", "node_id", _error_check(F.col("error_kind")).alias("check"), "offset"
    )
    return events.where(F.col("check").isNotNull()).unionByName(snapshots)


def epoch_check_dataframe(partitions: DataFrame) -> DataFrame:
    """(log_dir, node_id, check, subject, offset, expected, found) of the epoch checks (window functions)."""
    w = Window.partitionBy("log_dir", "topic_id", "partition_id").orderBy("offset")
    p = partitions.select(
        "log_dir",
        "node_id",
        "offset",
        "change",
        "leader_epoch",
        "partition_epoch",
        "leader_set",
        F.concat_ws("-", F.col("topic_name"), F.col("partition_id").cast("string")).alias("subject"),
        F.lag("change").over(w).alias("p_change"),
        F.lag("leader_epoch").over(w).alias("p_le"),
        F.lag("partition_epoch").over(w).alias("p_pe"),
    ).where(
        (F.col("change") == "PARTITION_CHANGE_RECORD")
        & F.col("p_change").isNotNull()
        & (F.col("p_change") != "REMOVE_TOPIC")
    )
    expected_le = F.col("p_le") + F.when(F.coalesce(F.col("leader_set"), F.lit(False)), 1).otherwise(0)
    cols = ("log_dir", "node_id", "subject", "offset")
    pe = p.where(F.col("partition_epoch") != F.col("p_pe") + 1).select(
        *cols,
        F.lit("partition_epoch_not_plus_one").alias("check"),
        (F.col("p_pe") + 1).alias("expected"),
        F.col("partition_epoch").alias("found"),
    )
    le = p.where(F.col("leader_epoch") != expected_le).select(
        *cols,
        F.lit("leader_epoch_not_plus_one").alias("check"),
        expected_le.alias("expected"),
        F.col("leader_epoch").alias("found"),
    )
    return pe.unionByName(le)


def _check_findings(records: DataFrame, partitions: DataFrame) -> list[Finding]:
    """The per-copy log checks and the epoch checks: one Spark job, one finding per (copy, check, subject)."""
    log_events = log_check_dataframe(records).select(
        "log_dir",
        "node_id",
        "check",
        F.lit(None).cast("string").alias("subject"),
        "offset",
        F.lit(None).cast("int").alias("expected"),
        F.lit(None).cast("int").alias("found"),
    )
    rows = (
        log_events.unionByName(epoch_check_dataframe(partitions).select(*log_events.columns))
        .groupBy("log_dir", "node_id", "check", "subject")
        .agg(
            F.count_distinct(F.coalesce(F.col("offset"), F.lit(-1))).alias("n"),
            F.slice(F.array_sort(F.collect_set("offset")), 1, MAX_OFFSETS).alias("offsets"),
            F.min_by("expected", "offset").alias("expected"),
            F.min_by("found", "offset").alias("found"),
        )
        .collect()
    )
    out = []
    for r in rows:
        n = int(r["n"])
        offsets = [int(o) for o in r["offsets"]]
        if r["subject"] is None:
            label = copy_label(r["node_id"], r["log_dir"])
            severity = "info" if r["check"] == "torn_tail" else "violation"
            message = f"{label}: {CHECKS[r['check']]} ({n} time{'s' if n != 1 else ''})"
            out.append(Finding(r["check"], severity, label, message, offsets, n, r["log_dir"], r["node_id"]))
        else:
            what = "partition epoch" if r["check"].startswith("partition") else "leader epoch"
            message = f"{r['subject']}: {what} {r['found']} where {r['expected']} was expected"
            details = {"expected": r["expected"], "found": r["found"]}
            out.append(
                Finding(
                    r["check"],
                    "violation",
                    r["subject"],
                    message,
                    offsets,
                    n,
                    r["log_dir"],
                    r["node_id"],
                    None,
                    details,
                )
            )
    return out


def _copy_stats(records: DataFrame) -> dict[str, Any]:
    """Per copy: row counts, offsets, epochs, timestamps, the voters and LeaderChange records (one job)."""
    seg = F.col("source_kind") == "segment"
    leader_change = (F.col("record_type") == "LEADER_CHANGE") & F.col("valid") & seg
    rows = (
        records.groupBy("log_dir", "node_id")
        .agg(
            F.count("*").alias("rows"),
            F.sum(F.when(~F.col("valid"), 1).otherwise(0)).alias("invalid_rows"),
            F.min(F.when(seg, F.col("offset"))).alias("first_offset"),
            F.max(F.when(seg & F.col("valid"), F.col("offset"))).alias("last_offset"),
            F.max(F.when(seg, F.col("leader_epoch"))).alias("last_epoch"),
            F.min(F.when(seg, F.col("batch_timestamp_ms"))).alias("t0"),
            F.max(F.when(seg, F.col("batch_timestamp_ms"))).alias("t1"),
            F.array_distinct(F.flatten(F.collect_list(F.when(leader_change, F.col("voters"))))).alias("voters"),
            F.collect_list(F.when(leader_change, F.struct("offset", "leader_epoch", "leader"))).alias("leader_changes"),
        )
        .collect()
    )
    return {r["log_dir"]: r.asDict(recursive=True) for r in rows}


def _agreement(records: DataFrame, copies: Sequence[LogCopy], voters: set[int]) -> tuple[list[Finding], dict[str, Any]]:
    """`replicas_disagree` findings under COMMITTED_RULE: a self-join on offset (one job)."""
    node_ids = {c.log_dir: c.node_id for c in copies}
    if len(copies) < 2:
        return [], {"rule": "single copy", "voters": sorted(voters)}
    seg = records.where((F.col("source_kind") == "segment") & F.col("valid")).select(
        "log_dir", "offset", "leader_epoch", "is_control", "value"
    )
    voter_dirs = [c.log_dir for c in copies if c.node_id in voters]
    q = majority(voters) if voters else 1
    if voters and len(voter_dirs) >= q:
        rule = "majority"
        holders = seg.where(F.col("log_dir").isin(voter_dirs))
        need = q
    else:
        rule, holders, need = "common", seg, len(copies)
    committed = (
        holders.groupBy("offset").agg(F.count_distinct("log_dir").alias("n")).where(F.col("n") >= need).select("offset")
    )
    a, b = seg.alias("a"), seg.alias("b")
    differ = (
        (F.col("a.leader_epoch") != F.col("b.leader_epoch"))
        | (F.col("a.is_control") != F.col("b.is_control"))
        | (F.col("a.value") != F.col("b.value"))
    )
    pairs = (
        a.join(b, (F.col("a.offset") == F.col("b.offset")) & (F.col("a.log_dir") < F.col("b.log_dir")))
        .where(differ)
        .select(F.col("a.log_dir").alias("dir_a"), F.col("b.log_dir").alias("dir_b"), F.col("a.offset").alias("offset"))
        .join(committed, "offset", "left_semi")
        .groupBy("dir_a", "dir_b")
        .agg(
            F.count("*").alias("n"),
            F.slice(F.array_sort(F.collect_list("offset")), 1, MAX_OFFSETS).alias("offsets"),
            F.lit(None).cast("bigint").alias("last"),
        )
    )
    stats = committed.agg(
        F.lit(None).cast("string").alias("dir_a"),
        F.lit(None).cast("string").alias("dir_b"),
        F.count("*").alias("n"),
        F.array().cast("array<bigint>").alias("offsets"),
        F.max("offset").alias("last"),
    )
    rows = pairs.unionByName(stats).collect()

    def rank(d: str) -> tuple[bool, int, str]:
        n = node_ids.get(d)
        return (n is None, n or 0, d)

    findings = []
    info: dict[str, Any] = {}
    for r in rows:
        if r["dir_a"] is None:
            info = {
                "committed_offsets": int(r["n"]),
                "committed_end_offset": (r["last"] + 1) if r["last"] is not None else 0,
            }
            continue
        x, y = sorted((r["dir_a"], r["dir_b"]), key=rank)
        lx, ly = copy_label(node_ids.get(x), x), copy_label(node_ids.get(y), y)
        n = int(r["n"])
        findings.append(
            Finding(
                "replicas_disagree",
                "violation",
                f"{lx} vs {ly}",
                f"{lx} and {ly} hold different records at {n} committed offset{'s' if n != 1 else ''}",
                offsets=[int(o) for o in r["offsets"]],
                offset_count=n,
                details={"log_dirs": [x, y]},
            )
        )
    info = {
        "rule": rule,
        "voters": sorted(voters),
        "majority": q,
        "voter_copies": sorted(nid for d in voter_dirs if (nid := node_ids.get(d)) is not None),
        **info,
    }
    return findings, info


# --------------------------------------------------------------------------- the job


@dataclass
class AuditResult:
    out_dir: Path
    findings: list[dict[str, Any]]
    document: dict[str, Any]
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def violations(self) -> list[dict[str, Any]]:
        return [f for f in self.findings if f["severity"] == "violation"]

    @property
    def exit_code(self) -> int:
        return 1 if self.violations else 0


def read_records(spark: SparkSession, copies: Sequence[LogCopy]) -> DataFrame:
    register(spark)
    return spark.read.format(SOURCE_NAME).option("paths", json.dumps([c.log_dir for c in copies])).load()


def run_audit(
    spark: SparkSession,
    paths: Sequence[str | Path],
    out_dir: str | Path,
    settings: AuditSettings | None = None,
    *,
    export_only: bool = False,
    report: bool = True,
) -> AuditResult:
    """Run the audit (or, with `export_only`, only write the Parquet tables) into `out_dir`."""
    settings = settings or AuditSettings()
    settings.validate()
    copies = resolve_copies(paths)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    t = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal t
        now = time.perf_counter()
        timings[name] = round(now - t, 3)
        t = now

    def uri(name: str) -> str:
        return (out / name).resolve().as_uri()

    read_records(spark, copies).write.mode("overwrite").parquet(uri(RECORDS))
    lap("read_and_export_records")
    records = spark.read.parquet(uri(RECORDS))
    replay = replay_dataframe(records, copies, settings).persist(StorageLevel.MEMORY_AND_DISK)
    _select(replay, "partition", PARTITION_FIELDS).write.mode("overwrite").parquet(uri(PARTITIONS))
    _select(replay, "broker", BROKER_FIELDS).write.mode("overwrite").parquet(uri(BROKERS))
    if export_only:
        replay.unpersist()
        lap("replay")
        return AuditResult(out, [], {"outputs": [RECORDS, PARTITIONS, BROKERS]}, timings)
    _select(replay, "imbalance", IMBALANCE_FIELDS).write.mode("overwrite").parquet(uri(IMBALANCE))
    side = replay.where(F.col("row_kind").isin("finding", "summary")).collect()
    replay.unpersist()
    lap("replay")

    raw: list[Finding] = []
    summaries: list[dict[str, Any]] = []
    for r in side:
        if r["row_kind"] == "summary":
            summaries.append(json.loads(r["details"]))
            continue
        raw.append(
            Finding(
                r["check"],
                r["severity"],
                r["subject"],
                r["message"],
                offsets=[int(o) for o in r["offsets"] or []],
                offset_count=int(r["offset_count"] or 0),
                log_dir=r["log_dir"],
                node_id=r["node_id"],
                duration_ms=r["duration_ms"],
                details=json.loads(r["details"]) if r["details"] else {},
            )
        )
    stats = _copy_stats(records)
    voters = {int(v) for st in stats.values() for v in st["voters"] or []}
    lap("copy_stats")
    partitions = spark.read.parquet(uri(PARTITIONS))
    raw.extend(_check_findings(records, partitions))
    lap("log_and_epoch_checks")
    agreement_found, agreement = _agreement(records, copies, voters)
    raw.extend(agreement_found)
    lap("agreement")

    by_dir = {s["log_dir"]: s for s in summaries}
    copy_docs = []
    for c in copies:
        st = stats.get(c.log_dir, {})
        copy_docs.append(
            {
                "log_dir": c.log_dir,
                "node_id": c.node_id,
                "voter": c.node_id in voters,
                "segments": [f.name for f in c.segments],
                "snapshots": [f.name for f in c.snapshots],
                "records": int(st.get("rows") or 0),
                "invalid_rows": int(st.get("invalid_rows") or 0),
                "first_offset": st.get("first_offset"),
                "last_offset": st.get("last_offset"),
                "last_epoch": st.get("last_epoch"),
                "first_timestamp_ms": st.get("t0"),
                "last_timestamp_ms": st.get("t1"),
                "leader_changes": st.get("leader_changes") or [],
                "replay": by_dir.get(c.log_dir, {}),
            }
        )
    order = copy_order(copy_docs, voters)
    findings = merge_findings(raw, order)
    counts = {sev: sum(1 for f in findings if f["severity"] == sev) for sev in ("violation", "warning", "info")}
    document: dict[str, Any] = {
        "tool": "pykraft audit",
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "inputs": [str(p) for p in paths],
        "settings": settings.as_dict(),
        "committed_rule": COMMITTED_RULE,
        "agreement": agreement,
        "reference_copy": order[0] if order else None,
        "summary": {
            "violations": counts["violation"],
            "warnings": counts["warning"],
            "info": counts["info"],
            "records": sum(d["records"] for d in copy_docs),
            "copies": copy_docs,
        },
        "checks": CHECKS,
        "findings": findings,
        "outputs": [RECORDS, PARTITIONS, BROKERS, IMBALANCE, FINDINGS] + ([REPORT] if report else []),
    }
    (out / FINDINGS).write_text(json.dumps(document, indent=2, default=str) + "\n")
    lap("findings")
    if report:
        from quorum.audit.report import collect_plot_data, write_report

        data = collect_plot_data(partitions, spark.read.parquet(uri(IMBALANCE)), copy_docs, order[:1])
        write_report(out / REPORT, document, data)
        lap("report")
    document["timings"] = timings
    return AuditResult(out, findings, document, timings)
