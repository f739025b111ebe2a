"""The Spark job behind `pykraft audit` and `pykraft export`.

1. Read every copy with the `pykraft-metadata` data source (one task per segment range of about
   4 MiB, cut at batch boundaries, and per snapshot) and write `records.parquet`; everything
   after reads that Parquet, so each record decodes once into its columns.
2. Replay: one task per (copy, shard), with no shuffle. A copy is split into shards by topic id
   when there are fewer copies than cores (each shard replays every non-partition record and the
   partition records of its topics). Each task reads its rows straight from records.parquet
   (pyarrow, filtered and sorted into log order), runs `quorum.audit.checks.CopyReplayer` (the
   shared `MetadataDelta` replay) and the epoch checks on the partition rows it emits, writes its
   part of `partitions_timeline.parquet` itself, and returns the broker rows, findings, imbalance
   deltas and summaries to Spark; shard 0 of a copy also runs the copy's log checks
   (`LogChecker`, as the plain loop does). The per-broker leader counts the shards emit are summed
   by window functions into `imbalance_timeline.parquet` and the `leader_imbalance` findings.
3. Agreement between copies as a self-join on offset restricted to committed offsets.
4. `findings.json` and `report.html` (`quorum.audit.report`).

Runs on `local[*]` by default and on any cluster given `--master`: the log directories
(read by the executors) and the output directory must then be on storage every node sees,
and the executors need this Python environment (PYSPARK_PYTHON is set to it).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
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
    IMBALANCE_DELTA_FIELDS,
    IMBALANCE_FIELDS,
    MAX_OFFSETS,
    PARTITION_FIELDS,
    AuditSettings,
    CopyReplayer,
    Finding,
    LogChecker,
    copy_label,
    epoch_findings,
    epoch_step,
    log_findings,
    majority,
    merge_findings,
    merge_shards,
)
from quorum.audit.logdirs import LogCopy, resolve_copies
from quorum.audit.source import SOURCE_NAME, arrow_schema, register, spark_schema

__all__ = ["AuditResult", "run_audit", "spark_session"]

RECORDS = "records.parquet"
PARTITIONS = "partitions_timeline.parquet"
BROKERS = "brokers_timeline.parquet"
IMBALANCE = "imbalance_timeline.parquet"
FINDINGS = "findings.json"
REPORT = "report.html"


# --------------------------------------------------------------------------- the session


def spark_session(
    master: str = "local[*]", app_name: str = "pykraft-audit", conf: Sequence[tuple[str, str]] = ()
) -> SparkSession:
    """A SparkSession whose Python workers run this interpreter; quiet (WARN) and small when local.

    `conf`: Spark settings (`--conf NAME=VALUE`) applied last, e.g. spark.executor.memory or
    spark.kubernetes.container.image for a cluster.
    """
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
    if not local and os.environ.get("PYTHONPATH"):
        # Executors import quorum.audit (the data source, the replay): the driver's path, if it has one.
        builder = builder.config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
    if local:
        # The local driver is the executor too: room for the cached replay output of large logs.
        builder = builder.config("spark.driver.memory", "2g")
    if local:
        builder = (
            builder.config("spark.sql.shuffle.partitions", "4")
            # Keep every shuffle at 4 partitions: the audit's shuffles are small enough that adaptive
            # coalescing would merge them into one task, i.e. one core.
            .config("spark.sql.adaptive.coalescePartitions.enabled", "false")
            .config("spark.ui.enabled", "false")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
        )
    for name, value in conf:
        builder = builder.config(name, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    return spark


# --------------------------------------------------------------------------- the replay


def _union_fields() -> tuple[tuple[str, str], ...]:
    fields: dict[str, str] = {"row_kind": "STRING"}
    for group in (PARTITION_FIELDS, BROKER_FIELDS, IMBALANCE_DELTA_FIELDS, FINDING_FIELDS, _SUMMARY_FIELDS):
        for name, kind in group:
            assert fields.setdefault(name, kind) == kind, name
    return tuple(fields.items())


_SUMMARY_FIELDS = (("node_id", "INT"), ("log_dir", "STRING"), ("details", "STRING"))
REPLAY_FIELDS = _union_fields()
_PARTITION_SCHEMA = arrow_schema(PARTITION_FIELDS)
_KIND_FIELDS = {
    "partition": PARTITION_FIELDS,
    "broker": BROKER_FIELDS,
    "imbalance_delta": IMBALANCE_DELTA_FIELDS,
    "finding": FINDING_FIELDS,
    "summary": _SUMMARY_FIELDS,
}
# The replay's input columns (after the shuffle: small, numeric but for the record bytes).
_REPLAY_INPUT = (
    "_copy",
    "_snapshot",
    "offset",
    "batch_base_offset",
    "batch_last_offset",
    "leader_epoch",
    "batch_timestamp_ms",
    "is_control",
    "valid",
    "error_kind",
    "value",
    "shard",
    "foreign",
)


class _ArrowSink:
    """Collects the replay's rows per kind; `drain` turns them into union-schema Arrow batches.

    With `write_partitions`, the partition rows (most of the output) go to it instead, as Arrow
    batches of PARTITION_FIELDS: the task writes them to Parquet itself, so that they never
    cross into the JVM as wide union rows.
    """

    def __init__(self, write_partitions: Callable[[pa.RecordBatch], None] | None = None) -> None:
        self.rows: dict[str, list[tuple[Any, ...]]] = {kind: [] for kind in _KIND_FIELDS}
        self.pending = 0
        self.write_partitions = write_partitions
        # The epoch checks, as the rows are emitted (in offset order per partition): the previous
        # row of each (topic id, partition), and the events found.
        self._last: dict[tuple[str, int], tuple[Any, ...]] = {}
        self.epoch_events: list[tuple[str, str, int, int, int]] = []

    def partition(self, row: tuple[Any, ...]) -> None:
        self.rows["partition"].append(row)
        self.pending += 1
        key = (row[6], row[8])
        found = epoch_step(self._last.get(key), row)
        if found:
            self.epoch_events.extend(found)
        self._last[key] = row

    def reset_epochs(self) -> None:
        self._last.clear()
        self.epoch_events.clear()

    def broker(self, row: tuple[Any, ...]) -> None:
        self.rows["broker"].append(row)
        self.pending += 1

    def imbalance(self, row: tuple[Any, ...]) -> None:  # pragma: no cover - imbalance_deltas mode only
        raise AssertionError("the Spark replay emits imbalance deltas")

    def imbalance_delta(self, row: tuple[Any, ...]) -> None:
        self.rows["imbalance_delta"].append(row)
        self.pending += 1

    def finding(self, f: Finding) -> None:
        self.rows["finding"].append(
            (f.node_id, f.log_dir, f.check, f.severity, f.subject, f.message, list(f.offsets),
             max(f.offset_count, len(f.offsets)), f.duration_ms, json.dumps(f.details, default=str), f.accumulated)
        )  # fmt: skip
        self.pending += 1

    def summary(self, node_id: int | None, log_dir: str, doc: dict[str, Any]) -> None:
        self.rows["summary"].append((node_id, log_dir, json.dumps(doc, default=str)))
        self.pending += 1

    def drain(self, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        """One Arrow batch per kind: its own columns from its rows, nulls in the others."""
        for kind, rows in self.rows.items():
            if not rows:
                continue
            n = len(rows)
            if kind == "partition" and self.write_partitions is not None:
                columns = zip(zip(*rows, strict=True), _PARTITION_SCHEMA, strict=True)
                arrays = [pa.array(col, type=f.type) for col, f in columns]
                self.write_partitions(pa.RecordBatch.from_arrays(arrays, schema=_PARTITION_SCHEMA))
                rows.clear()
                continue
            own = dict(zip([name for name, _ in _KIND_FIELDS[kind]], zip(*rows, strict=True), strict=True))
            arrays = []
            for f in schema:
                if f.name == "row_kind":
                    arrays.append(pa.array([kind] * n, type=f.type))
                elif f.name in own:
                    arrays.append(pa.array(own[f.name], type=f.type))
                else:
                    arrays.append(pa.nulls(n, type=f.type))
            rows.clear()
            yield pa.RecordBatch.from_arrays(arrays, schema=schema)
        self.pending = 0


def _replay_function(
    plans: list[tuple[str, int | None, str | None, int, int]], settings: AuditSettings, shards: int
) -> Any:
    """The mapInArrow function: replays every (copy, shard) whose rows arrive, contiguous and in log order."""
    schema = arrow_schema(REPLAY_FIELDS)

    def replay(
        batches: Iterator[pa.RecordBatch], write_partitions: Callable[[pa.RecordBatch], None] | None = None
    ) -> Iterator[pa.RecordBatch]:
        sink = _ArrowSink(write_partitions)
        current: tuple[int, int] | None = None
        replayer: CopyReplayer | None = None
        snapshot_values: list[bytes] = []
        snapshot_ok = True
        snapshot_ts: int | None = None
        started = False

        def start_segments() -> None:
            nonlocal started
            started = True
            assert replayer is not None and current is not None
            _dir, _node, name, end, epoch = plans[current[0]]
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
            log_dir, node_id = plans[current[0]][:2]
            summary = replayer.finish()
            for f in epoch_findings(log_dir, node_id, sink.epoch_events):
                sink.finding(f)
            sink.epoch_events.clear()
            sink.summary(node_id, log_dir, summary)

        for batch in batches:
            cols = {name: batch.column(name).to_pylist() for name in _REPLAY_INPUT}
            copy_col = cols["_copy"]
            shard_col = cols["shard"]
            foreign_col = cols["foreign"]
            for i in range(batch.num_rows):
                key = (copy_col[i], shard_col[i])
                if key != current:
                    finish()
                    current = key
                    log_dir, node_id = plans[key[0]][:2]
                    replayer = CopyReplayer(log_dir, node_id, settings, sink, shard=key[1], imbalance_deltas=True)
                    sink.reset_epochs()
                    snapshot_values, snapshot_ok, snapshot_ts, started = [], True, None, False
                assert replayer is not None
                if cols["_snapshot"][i]:
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
                    cols["batch_last_offset"][i],
                    cols["leader_epoch"][i],
                    cols["batch_timestamp_ms"][i],
                    cols["is_control"][i],
                    bool(cols["valid"][i]),
                    cols["error_kind"][i],
                    cols["value"][i],
                    bool(foreign_col[i]),
                )
            if sink.pending >= 20_000:
                yield from sink.drain(schema)
        finish()
        yield from sink.drain(schema)

    return replay


def replay_shards(spark: SparkSession, copies: int) -> int:
    """Shards per copy: enough to keep every core busy when there are fewer copies than cores."""
    cores = max(1, spark.sparkContext.defaultParallelism)
    return max(1, min(8, cores // max(1, copies)))


def _owner_shards(topic_ids: pa.Array, shards: int) -> pa.Array:
    """Each row's owning shard (int32) from its topic id string: crc32 of the id modulo `shards`,
    computed once per distinct id (the same on every executor, unlike Python's salted hash)."""
    import pyarrow.compute as pc  # type: ignore[import-untyped,import-not-found,unused-ignore]

    uniques = pc.unique(topic_ids)
    owners = pa.array(
        [zlib.crc32(t.encode()) % shards if t is not None else 0 for t in uniques.to_pylist()], pa.int32()
    )
    return pc.take(owners, pc.index_in(topic_ids, value_set=uniques))


def copy_replay_input(records_path: str, plan: tuple[str, int | None, str | None, int, int], copy: int,
                      shard: int, shards: int) -> pa.Table:  # fmt: skip
    """One (copy, shard)'s replay input, read straight from records.parquet with pyarrow: the rows of
    its replay snapshot, then of its segments, in log order, with the columns of `_REPLAY_INPUT`.

    A shard keeps every record but the partition records of other shards' topics, of which it keeps
    only the first row of each batch (marked `foreign`: it closes the previous batch).
    """
    import pyarrow.compute as pc  # type: ignore[import-untyped,import-not-found,unused-ignore]
    import pyarrow.dataset as ds  # type: ignore[import-untyped,import-not-found,unused-ignore]

    log_dir, _node, snapshot_name, _end, _epoch = plan
    keep = ds.field("source_kind") == "segment"
    if snapshot_name is not None:
        keep = keep | (ds.field("source_file") == snapshot_name)
    columns = [c for c in _REPLAY_INPUT if c not in ("_copy", "_snapshot", "shard", "foreign")]
    columns += ["source_kind", "source_file", "position", "record_type", "topic_id"]
    table = ds.dataset(records_path, format="parquet").to_table(
        columns=columns, filter=(ds.field("log_dir") == log_dir) & keep
    )
    n = table.num_rows
    snapshot = pc.equal(table["source_kind"], "snapshot")
    table = table.append_column("_snapshot", snapshot).append_column(
        "_file", pc.cast(pc.utf8_slice_codeunits(table["source_file"], 0, 20), pa.int64())
    )
    table = table.append_column("_not_snapshot", pc.invert(snapshot))
    table = table.sort_by([("_not_snapshot", "ascending"), ("_file", "ascending"), ("position", "ascending"),
                           ("offset", "ascending")])  # fmt: skip
    foreign = pa.array([False] * n) if n else pa.array([], pa.bool_())
    if shards > 1 and n:
        owned = pc.and_(
            pc.is_in(table["record_type"], value_set=pa.array(["PARTITION_RECORD", "PARTITION_CHANGE_RECORD"])),
            pc.fill_null(table["valid"], False),
        )
        owned = pc.fill_null(owned, False)
        mine = pc.equal(_owner_shards(table["topic_id"], shards), shard)
        first_of_batch = pc.and_(pc.invert(table["_snapshot"]), pc.equal(table["offset"], table["batch_base_offset"]))
        other = pc.and_(owned, pc.invert(pc.fill_null(mine, False)))
        keep_rows = pc.or_(pc.invert(other), pc.fill_null(first_of_batch, False))
        foreign = pc.filter(other, keep_rows)
        table = table.filter(keep_rows)
    n = table.num_rows
    table = table.append_column("_copy", pa.array([copy] * n, pa.int64()))
    table = table.append_column("shard", pa.array([shard] * n, pa.int32())).append_column("foreign", foreign)
    return table.select(list(_REPLAY_INPUT))


def copy_log_findings(records_path: str, log_dir: str, node_id: int | None) -> list[Finding]:
    """The per-copy log checks (`LogChecker`, as the plain loop runs them) over one copy's rows of
    records.parquet: every segment row in file order, and the invalid rows of its snapshots."""
    import pyarrow.compute as pc  # type: ignore[import-untyped,import-not-found,unused-ignore]
    import pyarrow.dataset as ds  # type: ignore[import-untyped,import-not-found,unused-ignore]

    table = ds.dataset(records_path, format="parquet").to_table(
        columns=["source_kind", "source_file", "position", "offset", "leader_epoch", "valid", "error_kind"],
        filter=ds.field("log_dir") == log_dir,
    )
    checker = LogChecker()
    snapshots = table.filter(pc.and_(pc.equal(table["source_kind"], "snapshot"), pc.invert(table["valid"])))
    for kind, offset in zip(snapshots["error_kind"].to_pylist(), snapshots["offset"].to_pylist(), strict=True):
        checker.invalid(kind, offset)
    segments = table.filter(pc.equal(table["source_kind"], "segment"))
    segments = segments.append_column(
        "_file", pc.cast(pc.utf8_slice_codeunits(segments["source_file"], 0, 20), pa.int64())
    ).sort_by([("_file", "ascending"), ("position", "ascending"), ("offset", "ascending")])
    row = checker.row
    for args in zip(*(segments[c].to_pylist() for c in ("source_file", "offset", "leader_epoch", "valid",
                                                         "error_kind")), strict=True):  # fmt: skip
        row(*args)
    return log_findings(log_dir, node_id, checker.events)


def replay_tasks_dataframe(
    spark: SparkSession,
    records_path: str,
    copies: Sequence[LogCopy],
    settings: AuditSettings,
    shards: int = 1,
    partitions_path: str | None = None,
) -> DataFrame:
    """Every copy replayed by `CopyReplayer` in `shards` tasks per copy: rows of REPLAY_FIELDS.

    No shuffle: one task per (copy, shard), each reading its rows from records.parquet itself (the
    output directory is on storage every executor sees, as the audit requires). Shard 0 of each
    copy also runs the copy's log checks; the epoch checks run on the partition rows as they are
    emitted.

    With `partitions_path` (an existing, empty directory), each task writes its partition timeline rows
    there as `part-<copy>-<shard>.parquet` (PARTITION_FIELDS; a retried task rewrites its own file)
    and the DataFrame carries every other kind of row.
    """
    plans: list[tuple[str, int | None, str | None, int, int]] = []
    for copy in copies:
        snap = copy.replay_snapshot()
        if snap is None:
            plans.append((copy.log_dir, copy.node_id, None, 0, -1))
        else:
            plans.append((copy.log_dir, copy.node_id, snap.name, snap.end_offset, snap.epoch))
    groups = max(1, len(copies) * shards)
    replay = _replay_function(plans, settings, shards)
    schema = arrow_schema(REPLAY_FIELDS)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for group in batch.column("id").to_pylist():
                copy, shard = divmod(int(group), shards)
                if shard == 0:  # the copy's log checks: one task per copy
                    sink = _ArrowSink()
                    for finding in copy_log_findings(records_path, plans[copy][0], plans[copy][1]):
                        sink.finding(finding)
                    yield from sink.drain(schema)
                table = copy_replay_input(records_path, plans[copy], copy, shard, shards)
                if partitions_path is None:
                    yield from replay(iter(table.to_batches(max_chunksize=8192)))
                    continue
                import pyarrow.parquet as pq  # type: ignore[import-untyped,import-not-found,unused-ignore]

                final = os.path.join(partitions_path, f"part-{copy:05d}-{shard:05d}.parquet")
                tmp = os.path.join(partitions_path, f".part-{copy:05d}-{shard:05d}.parquet.tmp")
                with pq.ParquetWriter(tmp, _PARTITION_SCHEMA) as writer:
                    yield from replay(iter(table.to_batches(max_chunksize=8192)), writer.write_batch)
                os.replace(tmp, final)

    tasks = spark.range(0, groups, 1, numPartitions=groups)
    return tasks.mapInArrow(run, spark_schema(REPLAY_FIELDS))


def imbalance_dataframes(deltas: DataFrame, ends: DataFrame, settings: AuditSettings) -> tuple[DataFrame, DataFrame]:
    """The leader imbalance timeline (IMBALANCE_FIELDS) and its episodes, from the shards' count changes.

    Per copy and broker, in offset order: running sums of the preferred / not-led / fixable
    counts and the last known liveness (window functions) give Kafka's ratio after every
    batch that changed it; an episode is a run of batches where the broker is live, above
    the threshold and (with the auto rebalance) has a fixable partition; episodes longer
    than the check interval are returned with their start, end and duration (an episode
    still open at the end of the copy lasts until its last batch timestamp, `ends`).
    """
    per_batch = deltas.groupBy("node_id", "log_dir", "broker_id", "offset", "batch_timestamp_ms").agg(
        F.sum("d_preferred").alias("d_pref"),
        F.sum("d_not_led").alias("d_not_led"),
        F.sum("d_fixable").alias("d_fixable"),
        F.max("live").alias("live_now"),
    )
    w = Window.partitionBy("log_dir", "broker_id").orderBy("offset")
    upto = w.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    state = per_batch.select(
        "node_id",
        "log_dir",
        "broker_id",
        "offset",
        "batch_timestamp_ms",
        F.sum("d_pref").over(upto).cast("int").alias("preferred"),
        F.sum("d_not_led").over(upto).cast("int").alias("not_led"),
        F.sum("d_fixable").over(upto).alias("fixable"),
        F.coalesce(F.last("live_now", ignorenulls=True).over(upto), F.lit(False)).alias("live"),
    ).withColumn(
        "ratio",
        F.when(F.col("preferred") > 0, F.col("not_led") / F.col("preferred")).otherwise(F.lit(0.0)).cast("double"),
    )
    over = F.col("live") & (F.col("ratio") > F.lit(settings.imbalance_percentage / 100))
    if settings.auto_rebalance:
        over = over & (F.col("fixable") > 0)
    state = state.withColumn("over", over).select(
        "*",
        (
            F.lag("ratio").over(w).isNull()
            | (F.lag("ratio").over(w) != F.col("ratio"))
            | (F.lag("live").over(w) != F.col("live"))
        ).alias("changed"),
        (F.col("over") != F.coalesce(F.lag("over").over(w), F.lit(False))).alias("flips"),
    )
    state = state.persist(StorageLevel.MEMORY_AND_DISK)  # for the timeline and the episodes
    timeline = state.where(F.col("changed")).select(*[name for name, _ in IMBALANCE_FIELDS])
    transitions = (
        state.where(F.col("flips"))
        .select(
            "node_id",
            "log_dir",
            "broker_id",
            "offset",
            "batch_timestamp_ms",
            "over",
            F.lead("offset").over(w).alias("end_offset"),
            F.lead("batch_timestamp_ms").over(w).alias("end_ts"),
        )
        .where(F.col("over"))
    )
    episodes = (
        transitions.join(ends, "log_dir")
        .select(
            "node_id",
            "log_dir",
            "broker_id",
            F.col("offset").alias("start_offset"),
            F.coalesce(F.col("end_offset"), F.col("last_offset")).alias("end_offset"),
            (F.coalesce(F.col("end_ts"), F.col("last_ts")) - F.col("batch_timestamp_ms")).alias("duration_ms"),
            F.col("end_offset").isNull().alias("ongoing"),
        )
        .where(F.col("duration_ms") > F.lit(settings.imbalance_interval_ms))
    )
    return timeline, episodes


def _imbalance_findings(episodes: list[Any], settings: AuditSettings) -> list[Finding]:
    pct = settings.imbalance_percentage
    interval_s = settings.imbalance_interval_ms // 1000
    out = []
    for r in episodes:
        b, start, end, duration = r["broker_id"], int(r["start_offset"]), int(r["end_offset"]), int(r["duration_ms"])
        out.append(
            Finding(
                "leader_imbalance",
                "violation" if settings.auto_rebalance else "warning",
                f"broker {b}",
                f"broker {b}: leader imbalance above {pct}% for {duration} ms (offsets {start}..{end}), longer "
                f"than the {interval_s} s check interval"
                + ("" if settings.auto_rebalance else " (auto.leader.rebalance.enable=false)"),
                offsets=[start, end],
                offset_count=2,
                log_dir=r["log_dir"],
                node_id=r["node_id"],
                duration_ms=duration,
                details={
                    "from_offset": start,
                    "to_offset": end,
                    "ongoing": bool(r["ongoing"]),
                    "threshold_percentage": pct,
                },
            )
        )
    return out


def _select(df: DataFrame, kind: str, fields: Sequence[tuple[str, str]]) -> DataFrame:
    return df.where(F.col("row_kind") == kind).select(*[name for name, _ in fields])


# --------------------------------------------------------------------------- log checks and agreement


def copy_index(copies: Sequence[LogCopy]) -> Column:
    """The index of a row's copy in `copies` (from its log_dir): shuffles carry this int, not the path."""
    index: Column = F.lit(0)
    for i, copy in enumerate(copies):
        index = F.when(F.col("log_dir") == F.lit(copy.log_dir), F.lit(i)).otherwise(index)
    return index


def lag_timeline(partitions: DataFrame, copies: Sequence[LogCopy]) -> DataFrame:
    """The partition timeline with each row's changes from its predecessor (one window: per copy and
    partition, by offset), for the report's series and incidents; `_copy` indexes `copies`."""
    w = Window.partitionBy("_copy", "topic_id", "partition_id").orderBy("offset")
    removed = F.col("change") == "REMOVE_TOPIC"
    derived = partitions.select(
        copy_index(copies).alias("_copy"),
        "offset",
        "batch_timestamp_ms",
        "change",
        "topic_id",
        "topic_name",
        "partition_id",
        "leader",
        "prev_leader",
        "replicas",
        "unclean",
        F.when(removed, 0).otherwise(1).alias("live"),
        F.when(removed, 0).otherwise(F.col("isr_size")).alias("isr"),
        F.when(removed | (F.col("isr_size") >= F.size("replicas")), 0).otherwise(1).alias("urp"),
        F.when(removed | (F.col("leader") >= 0), 0).otherwise(1).alias("leaderless"),
        F.when((F.col("change") == "PARTITION_CHANGE_RECORD") & F.col("leader_changed"), 1)
        .otherwise(0)
        .alias("changes"),
    )
    return derived.select(
        "*",
        F.lag("replicas").over(w).alias("p_replicas"),
        *[
            (F.col(n) - F.coalesce(F.lag(n).over(w), F.lit(0))).alias(f"d_{n}")
            for n in ("live", "isr", "urp", "leaderless")
        ],
    )


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


def _merge_summaries(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """One copy's replay summary from its shards' (shard 0 has the copy-wide figures)."""
    docs = sorted(docs, key=lambda d: d["shard"])
    merged = dict(docs[0])
    merged.pop("shard", None)
    merged["shards"] = len(docs)
    merged["partitions"] = sum(d["partitions"] for d in docs)
    merged["last_offset"] = max(d["last_offset"] for d in docs)
    stamps = [d["last_timestamp_ms"] for d in docs if d["last_timestamp_ms"] is not None]
    merged["last_timestamp_ms"] = max(stamps) if stamps else None
    stops = [d["stopped"] for d in docs if d["stopped"]]
    merged["stopped"] = min(stops, key=lambda x: x["offset"]) if stops else None
    return merged


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
    shards: int | None = None,
) -> AuditResult:
    """Run the audit (or, with `export_only`, only write the Parquet tables) into `out_dir`.

    `shards`: replay tasks per copy (default: enough to use every core, see `replay_shards`).
    """
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
    shards = shards or replay_shards(spark, len(copies))
    records_path = str((out / RECORDS).resolve())
    partitions_path = (out / PARTITIONS).resolve()
    shutil.rmtree(partitions_path, ignore_errors=True)
    partitions_path.mkdir(parents=True)
    replay = replay_tasks_dataframe(spark, records_path, copies, settings, shards, str(partitions_path)).persist(
        StorageLevel.MEMORY_AND_DISK
    )
    _select(replay, "broker", BROKER_FIELDS).write.mode("overwrite").parquet(uri(BROKERS))
    if export_only:
        replay.unpersist()
        lap("replay")
        return AuditResult(out, [], {"outputs": [RECORDS, PARTITIONS, BROKERS]}, timings)
    side = replay.where(F.col("row_kind").isin("finding", "summary")).collect()
    lap("replay")

    replayed: list[Finding] = []
    shard_summaries: dict[str, list[dict[str, Any]]] = {}
    for r in side:
        if r["row_kind"] == "summary":
            doc = json.loads(r["details"])
            shard_summaries.setdefault(doc["log_dir"], []).append(doc)
            continue
        replayed.append(
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
                accumulated=bool(r["accumulated"]),
            )
        )
    raw = merge_shards(replayed)
    summaries = [_merge_summaries(docs) for docs in shard_summaries.values()]
    ends = spark.createDataFrame(
        [(d["log_dir"], d["last_offset"], d["last_timestamp_ms"]) for d in summaries],
        "log_dir STRING, last_offset BIGINT, last_ts BIGINT",
    )
    timeline, episodes = imbalance_dataframes(
        _select(replay, "imbalance_delta", IMBALANCE_DELTA_FIELDS), ends, settings
    )
    timeline.write.mode("overwrite").parquet(uri(IMBALANCE))
    raw.extend(_imbalance_findings(episodes.collect(), settings))
    replay.unpersist()
    lap("imbalance")
    stats = _copy_stats(records)
    voters = {int(v) for st in stats.values() for v in st["voters"] or []}
    lap("copy_stats")
    # The log checks and the epoch checks ran in the replay tasks (their findings are in `replayed`).
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

        # One window over the reference copy's partition timeline, read by the series and the incidents.
        timeline = spark.read.parquet(uri(PARTITIONS))
        if order:
            timeline = timeline.where(F.col("log_dir") == order[0])
        lagged = lag_timeline(timeline, copies).persist(StorageLevel.MEMORY_AND_DISK)
        data = collect_plot_data(
            lagged, spark.read.parquet(uri(IMBALANCE)), copy_docs, order[:1], copies, spark.read.parquet(uri(BROKERS))
        )
        write_report(out / REPORT, document, data)
        lagged.unpersist()
        lap("report")
    document["timings"] = timings
    return AuditResult(out, findings, document, timings)
