"""The Spark job behind `pykraft audit` and `pykraft export`.

1. Export: one task per segment range of about 4 MiB (cut at batch boundaries) and per snapshot
   decodes its range once (`read_source_file`) and writes its rows into `records.parquet` with
   pyarrow (the rows never cross into the JVM), returning its range's figures (rows, offsets,
   epochs, timestamps, LeaderChange records) as one small row.
2. Replay: one task per (copy, shard), with no shuffle. A copy is split into shards by topic id
   when there are fewer copies than cores (each shard replays every non-partition record and the
   partition records of its topics). Each task reads its rows straight from records.parquet
   (pyarrow, filtered and sorted into log order), runs `quorum.audit.checks.CopyReplayer` (the
   shared `MetadataDelta` replay) and the epoch checks on the partition rows it emits, writes its
   part of the partition and broker timelines and its per-broker leader count changes itself,
   and returns the findings, summaries and the report's per-batch aggregates; shard 0 of a copy
   also runs the copy's log checks (`LogChecker`, as the plain loop does). The driver merges the
   count changes (a few rows per batch and broker) into `imbalance_timeline.parquet` and the
   `leader_imbalance` findings.
3. Agreement between copies (several copies only) as a self-join on offset restricted to
   committed offsets.
4. `findings.json` and `report.html` (`quorum.audit.report`), from the aggregates above.

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
from pyspark.sql import DataFrame, SparkSession
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
from quorum.audit.logdirs import ROW_FIELDS, LogCopy, read_source_file, resolve_copies, split_points
from quorum.audit.source import DEFAULT_CHUNK_BYTES, SOURCE_NAME, arrow_schema, register, spark_schema, to_arrow

__all__ = ["AuditResult", "run_audit", "spark_session"]

RECORDS = "records.parquet"
PARTITIONS = "partitions_timeline.parquet"
BROKERS = "brokers_timeline.parquet"
IMBALANCE = "imbalance_timeline.parquet"
DELTAS = "_imbalance_deltas"  # the replay tasks' imbalance count changes, merged into IMBALANCE
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
_ROW_SCHEMA = arrow_schema(ROW_FIELDS)
_KIND_FIELDS = {
    "partition": PARTITION_FIELDS,
    "broker": BROKER_FIELDS,
    "imbalance_delta": IMBALANCE_DELTA_FIELDS,
    "finding": FINDING_FIELDS,
    "summary": _SUMMARY_FIELDS,
    "plot": _SUMMARY_FIELDS,  # the report's per-batch aggregates of one (copy, shard), as JSON
}
_KIND_SCHEMAS = {kind: arrow_schema(fields) for kind, fields in _KIND_FIELDS.items()}
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


def _plot_levels(row: tuple[Any, ...] | None) -> tuple[int, int | None, int, int]:
    """A partition timeline row's contribution to the report's counts: (live, ISR size,
    under-replicated, leaderless); a removed topic's partitions count 0 (a removed topic's rows end its partitions)."""
    if row is None:
        return (0, 0, 0, 0)
    if row[5] == "REMOVE_TOPIC":
        return (0, 0, 0, 0)
    isr_size, replicas, leader = row[13], row[14], row[9]
    urp = 1 if isr_size is None or replicas is None or isr_size < len(replicas) else 0
    return (1, isr_size, urp, 0 if leader is not None and leader >= 0 else 1)


class _PlotData:
    """The report's series and leadership incidents, aggregated per batch timestamp while the
    replay emits the partition timeline (each row with its partition's previous row), so that the
    report needs no window over the timeline. Aggregates of the shards of a copy merge by sum,
    min, max and union (`merge_plot_data`).

    `series[ts]`: [d_live, d_isr, d_urp, d_leaderless, leadership changes]; `groups[ts]`: the
    leadership changes (PartitionChangeRecords that moved a leader) of the batch: [first offset,
    last offset, partitions, from leaders, to leaders, unclean, reassigned, preferred, leaderless].
    """

    __slots__ = ("groups", "series")

    def __init__(self) -> None:
        self.series: dict[int, list[int]] = {}
        self.groups: dict[int, list[Any]] = {}

    def add(self, prev: tuple[Any, ...] | None, row: tuple[Any, ...]) -> None:
        ts = row[3]
        if ts is None:
            return
        live, isr, urp, leaderless = _plot_levels(row)
        b_live, b_isr, b_urp, b_leaderless = _plot_levels(prev)
        changed = 1 if row[5] == "PARTITION_CHANGE_RECORD" and row[11] else 0
        acc = self.series.get(ts)
        if acc is None:
            acc = self.series[ts] = [0, 0, 0, 0, 0]
        acc[0] += live - b_live
        if isr is not None:
            acc[1] += isr - (b_isr or 0)
        acc[2] += urp - b_urp
        acc[3] += leaderless - b_leaderless
        acc[4] += changed
        if not changed:
            return
        offset, leader, prev_leader, replicas = row[2], row[9], row[10], row[14]
        p_replicas = prev[14] if prev is not None else None
        g = self.groups.get(ts)
        if g is None:
            g = self.groups[ts] = [offset, offset, 0, set(), set(), 0, 0, 0, 0]
        g[0] = min(g[0], offset)
        g[1] = max(g[1], offset)
        g[2] += 1
        if prev_leader is not None:
            g[3].add(prev_leader)
        if leader is not None:
            g[4].add(leader)
        g[5] += 1 if row[19] else 0
        g[6] += 1 if p_replicas is not None and replicas is not None and list(p_replicas) != list(replicas) else 0
        g[7] += 1 if leader is not None and leader >= 0 and replicas and leader == replicas[0] else 0
        g[8] += 1 if leader is not None and leader < 0 else 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "series": [[ts, *acc] for ts, acc in self.series.items()],
            "groups": [[ts, *g[:3], sorted(g[3]), sorted(g[4]), *g[5:]] for ts, g in self.groups.items()],
        }


def merge_plot_data(docs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One copy's report aggregates from its shards' `_PlotData.as_dict()`: the series per batch
    timestamp (summed) and the leadership change groups per batch timestamp (merged)."""
    series: dict[int, list[int]] = {}
    groups: dict[int, list[Any]] = {}
    for doc in docs:
        for ts, *values in doc["series"]:
            acc = series.setdefault(ts, [0, 0, 0, 0, 0])
            for i, v in enumerate(values):
                acc[i] += v
        for ts, first, last, n, from_l, to_l, *counts in doc["groups"]:
            g = groups.get(ts)
            if g is None:
                groups[ts] = [first, last, n, set(from_l), set(to_l), *counts]
                continue
            g[0], g[1], g[2] = min(g[0], first), max(g[1], last), g[2] + n
            g[3].update(from_l)
            g[4].update(to_l)
            for i, v in enumerate(counts):
                g[5 + i] += v
    return {
        "series": sorted([ts, *acc] for ts, acc in series.items()),
        "groups": [
            {
                "batch_timestamp_ms": ts,
                "first_offset": g[0],
                "last_offset": g[1],
                "partitions": g[2],
                "from_leaders": sorted(g[3]),
                "to_leaders": sorted(g[4]),
                "unclean": g[5],
                "reassigned": g[6],
                "preferred": g[7],
                "leaderless": g[8],
            }
            for ts, g in sorted(groups.items())
        ],
    }


class _ArrowSink:
    """Collects the replay's rows per kind; `drain` turns them into union-schema Arrow batches.

    With `writers` (kind -> a function taking an Arrow batch of that kind's own fields), the rows
    of those kinds (the partition timeline is most of the output) go to them instead: the task
    writes them to Parquet itself, so that they never cross into the JVM as wide union rows.
    """

    def __init__(self, writers: dict[str, Callable[[pa.RecordBatch], None]] | None = None) -> None:
        self.rows: dict[str, list[tuple[Any, ...]]] = {kind: [] for kind in _KIND_FIELDS}
        self.pending = 0
        self.writers = writers or {}
        # The epoch checks, as the rows are emitted (in offset order per partition): the previous
        # row of each (topic id, partition), and the events found.
        self._last: dict[tuple[str, int], tuple[Any, ...]] = {}
        self.epoch_events: list[tuple[str, str, int, int, int]] = []
        # The report's aggregates (`_PlotData`), from each row and its partition's previous row.
        self.plot = _PlotData()

    def partition(self, row: tuple[Any, ...]) -> None:
        self.rows["partition"].append(row)
        self.pending += 1
        key = (row[6], row[8])
        prev = self._last.get(key)
        found = epoch_step(prev, row)
        if found:
            self.epoch_events.extend(found)
        self.plot.add(prev, row)
        self._last[key] = row

    def reset_epochs(self) -> None:
        self._last.clear()
        self.epoch_events.clear()
        self.plot = _PlotData()

    def plot_row(self, node_id: int | None, log_dir: str) -> None:
        self.rows["plot"].append((node_id, log_dir, json.dumps(self.plot.as_dict())))
        self.pending += 1

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
            write = self.writers.get(kind)
            if write is not None:
                own_schema = _KIND_SCHEMAS[kind]
                columns = zip(zip(*rows, strict=True), own_schema, strict=True)
                arrays = [pa.array(col, type=f.type) for col, f in columns]
                write(pa.RecordBatch.from_arrays(arrays, schema=own_schema))
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
        batches: Iterator[pa.RecordBatch], writers: dict[str, Callable[[pa.RecordBatch], None]] | None = None
    ) -> Iterator[pa.RecordBatch]:
        sink = _ArrowSink(writers)
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
            sink.plot_row(node_id, log_dir)

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
    outputs: dict[str, str] | None = None,
) -> DataFrame:
    """Every copy replayed by `CopyReplayer` in `shards` tasks per copy: rows of REPLAY_FIELDS.

    No shuffle: one task per (copy, shard), each reading its rows from records.parquet itself (the
    output directory is on storage every executor sees, as the audit requires). Shard 0 of each
    copy also runs the copy's log checks; the epoch checks run on the partition rows as they are
    emitted.

    With `outputs` (row kind -> an existing, empty directory; e.g. "partition", "broker",
    "imbalance_delta"), each task writes its rows of those kinds there as
    `part-<copy>-<shard>.parquet` (the kind's own fields; a retried task rewrites its own files)
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
                if not outputs:
                    yield from replay(iter(table.to_batches(max_chunksize=8192)))
                    continue
                import pyarrow.parquet as pq  # type: ignore[import-untyped,import-not-found,unused-ignore]

                name = f"part-{copy:05d}-{shard:05d}.parquet"
                files = {
                    kind: (os.path.join(d, "." + name + ".tmp"), os.path.join(d, name)) for kind, d in outputs.items()
                }
                open_writers = {kind: pq.ParquetWriter(tmp, _KIND_SCHEMAS[kind]) for kind, (tmp, _) in files.items()}
                try:
                    writers = {kind: w.write_batch for kind, w in open_writers.items()}
                    yield from replay(iter(table.to_batches(max_chunksize=8192)), writers)
                finally:
                    for w in open_writers.values():
                        w.close()
                for tmp, final in files.values():
                    os.replace(tmp, final)

    tasks = spark.range(0, groups, 1, numPartitions=groups)
    return tasks.mapInArrow(run, spark_schema(REPLAY_FIELDS))


def imbalance_from_deltas(
    deltas: pa.Table, ends: dict[str, tuple[int | None, int | None]], settings: AuditSettings
) -> tuple[list[tuple[Any, ...]], list[dict[str, Any]]]:
    """The leader imbalance timeline (IMBALANCE_FIELDS rows) and its episodes, from the shards'
    count changes (IMBALANCE_DELTA_FIELDS; `ends`: log dir -> (last offset, last timestamp)).

    Per copy and broker, in offset order: the changes of one batch summed over the shards, running
    sums of the preferred / not-led / fixable counts and the last known liveness give Kafka's ratio
    after every batch that changed it; an episode is a run of batches where the broker is live,
    above the threshold and (with the auto rebalance) has a fixable partition; episodes longer
    than the check interval are returned with their start, end and duration (an episode still
    open at the end of the copy lasts until its last batch timestamp). The deltas are a few rows
    per batch and broker (not per record), so this merge runs on the driver.
    """
    names = [name for name, _ in IMBALANCE_DELTA_FIELDS]
    columns = [deltas.column(n).to_pylist() for n in names]
    per_batch: dict[tuple[str, int, int], list[Any]] = {}
    for node_id, log_dir, offset, ts, broker, d_pref, d_not_led, d_fixable, live in zip(*columns, strict=True):
        key = (log_dir, broker, offset)
        acc = per_batch.get(key)
        if acc is None:
            per_batch[key] = [node_id, ts, d_pref, d_not_led, d_fixable, live]
            continue
        acc[2] += d_pref
        acc[3] += d_not_led
        acc[4] += d_fixable
        if live is not None:
            acc[5] = live if acc[5] is None else (acc[5] or live)
    threshold = settings.imbalance_percentage / 100
    timeline: list[tuple[Any, ...]] = []
    episodes: list[dict[str, Any]] = []
    current: tuple[str, int] | None = None
    pref = not_led = fixable = 0
    live = False
    last: tuple[float, bool] | None = None
    was_over = False
    open_at: tuple[int, int] | None = None  # (offset, timestamp) the current episode started at
    node: int | None = None

    def close(end_offset: int | None, end_ts: int | None) -> None:
        assert current is not None and open_at is not None
        ongoing = end_offset is None
        if ongoing:
            end_offset, end_ts = ends.get(current[0], (None, None))
        if end_ts is None or end_offset is None:
            return
        duration = end_ts - open_at[1]
        if duration > settings.imbalance_interval_ms:
            episodes.append({"node_id": node, "log_dir": current[0], "broker_id": current[1],
                             "start_offset": open_at[0], "end_offset": end_offset, "duration_ms": duration,
                             "ongoing": ongoing})  # fmt: skip

    for (log_dir, broker, offset), (node_id, ts, d_pref, d_not_led, d_fixable, live_now) in sorted(
        per_batch.items(), key=lambda kv: kv[0]
    ):
        if (log_dir, broker) != current:
            if current is not None and open_at is not None:
                close(None, None)
            current, node = (log_dir, broker), node_id
            pref = not_led = fixable = 0
            live, last, was_over, open_at = False, None, False, None
        pref += d_pref
        not_led += d_not_led
        fixable += d_fixable
        if live_now is not None:
            live = bool(live_now)
        ratio = not_led / pref if pref > 0 else 0.0
        if last is None or last != (ratio, live):
            timeline.append((node_id, log_dir, offset, ts, broker, pref, not_led, ratio, live))
            last = (ratio, live)
        over = live and ratio > threshold and (fixable > 0 or not settings.auto_rebalance)
        if over != was_over:
            if over:
                open_at = (offset, ts)
            else:
                close(offset, ts)
                open_at = None
            was_over = over
    if current is not None and open_at is not None:
        close(None, None)
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


_STAT_FIELDS = (("log_dir", "STRING"), ("details", "STRING"))


def _chunk_stats(rows: pa.RecordBatch, stats: dict[str, Any]) -> None:
    """Fold one batch of rows (ROW_FIELDS) into a copy's figures (see `_merge_stats`); nulls count
    as Spark's aggregates count them (ignored)."""
    import pyarrow.compute as pc  # type: ignore[import-untyped,import-not-found,unused-ignore]

    stats["rows"] += rows.num_rows
    stats["invalid_rows"] += pc.sum(pc.invert(rows.column("valid"))).as_py() or 0
    seg = rows.filter(pc.fill_null(pc.equal(rows.column("source_kind"), "segment"), False))
    if not seg.num_rows:
        return

    def fold(name: str, value: Any, pick: Callable[[Any, Any], Any]) -> None:
        if value is not None:
            stats[name] = value if stats[name] is None else pick(stats[name], value)

    offsets, stamps = pc.min_max(seg.column("offset")), pc.min_max(seg.column("batch_timestamp_ms"))
    fold("first_offset", offsets["min"].as_py(), min)
    fold("last_epoch", pc.max(seg.column("leader_epoch")).as_py(), max)
    fold("t0", stamps["min"].as_py(), min)
    fold("t1", stamps["max"].as_py(), max)
    valid = seg.filter(pc.fill_null(seg.column("valid"), False))
    if not valid.num_rows:
        return
    fold("last_offset", pc.max(valid.column("offset")).as_py(), max)
    changes = valid.filter(pc.fill_null(pc.equal(valid.column("record_type"), "LEADER_CHANGE"), False))
    columns = [changes.column(c).to_pylist() for c in ("offset", "leader_epoch", "leader", "voters")]
    for offset, epoch, leader, voters in zip(*columns, strict=True):
        stats["voters"].update(voters or ())
        stats["leader_changes"].append({"offset": offset, "leader_epoch": epoch, "leader": leader})


def _empty_stats() -> dict[str, Any]:
    return {"rows": 0, "invalid_rows": 0, "first_offset": None, "last_offset": None, "last_epoch": None,
            "t0": None, "t1": None, "voters": set(), "leader_changes": []}  # fmt: skip


def _merge_stats(docs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A copy's figures from its chunks': rows, invalid rows, first and last (valid) segment offset,
    last epoch, first and last batch timestamp, the voters and the LeaderChange records."""
    out = _empty_stats()
    for d in docs:
        out["rows"] += d["rows"]
        out["invalid_rows"] += d["invalid_rows"]
        for name, pick in (("first_offset", min), ("last_offset", max), ("last_epoch", max), ("t0", min), ("t1", max)):
            if d[name] is not None:
                out[name] = d[name] if out[name] is None else pick(out[name], d[name])
        out["voters"].update(d["voters"])
        out["leader_changes"].extend(d["leader_changes"])
    out["voters"] = sorted(out["voters"])
    out["leader_changes"].sort(key=lambda lc: lc["offset"])
    return out


def export_records(
    spark: SparkSession, copies: Sequence[LogCopy], records_path: Path, chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> dict[str, dict[str, Any]]:
    """Decode every copy into `records_path` (a Parquet directory of ROW_FIELDS) and return each
    copy's figures (see `_merge_stats`), keyed by log dir.

    One task per file range (the data source's partitions: `split_points`), each decoding its range
    once with `read_source_file` and writing its rows with pyarrow as `part-<n>.parquet` (a retried
    task rewrites its own file), so that the rows never cross into the JVM; the task returns its
    range's figures as one small row.
    """
    import pyarrow.parquet as pq  # type: ignore[import-untyped,import-not-found,unused-ignore]

    shutil.rmtree(records_path, ignore_errors=True)
    records_path.mkdir(parents=True)
    ranges = [(f, start, end) for c in copies for f in c.files for start, end in split_points(f, chunk_bytes)]
    target = str(records_path)
    if not ranges:
        pq.write_table(_ROW_SCHEMA.empty_table(), os.path.join(target, "part-00000.parquet"))
        return {}
    stat_schema = arrow_schema(_STAT_FIELDS)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for n in batch.column("id").to_pylist():
                source, start, end = ranges[n]
                stats = _empty_stats()
                final = os.path.join(target, f"part-{n:05d}.parquet")
                tmp = os.path.join(target, f".part-{n:05d}.parquet.tmp")
                with pq.ParquetWriter(tmp, _ROW_SCHEMA) as writer:
                    chunk: list[tuple[Any, ...]] = []
                    for row in read_source_file(source, start, end):
                        chunk.append(row)
                        if len(chunk) >= 8192:
                            rows = to_arrow(chunk, _ROW_SCHEMA)
                            writer.write_batch(rows)
                            _chunk_stats(rows, stats)
                            chunk = []
                    if chunk:
                        rows = to_arrow(chunk, _ROW_SCHEMA)
                        writer.write_batch(rows)
                        _chunk_stats(rows, stats)
                os.replace(tmp, final)
                stats["voters"] = sorted(stats["voters"])
                yield pa.RecordBatch.from_arrays(
                    [pa.array([source.log_dir]), pa.array([json.dumps(stats)])], schema=stat_schema
                )

    tasks = spark.range(0, len(ranges), 1, numPartitions=len(ranges))
    by_dir: dict[str, list[dict[str, Any]]] = {}
    for r in tasks.mapInArrow(run, spark_schema(_STAT_FIELDS)).collect():
        by_dir.setdefault(r["log_dir"], []).append(json.loads(r["details"]))
    return {d: _merge_stats(docs) for d, docs in by_dir.items()}


def _agreement(
    records: DataFrame | None, copies: Sequence[LogCopy], voters: set[int]
) -> tuple[list[Finding], dict[str, Any]]:
    """`replicas_disagree` findings under COMMITTED_RULE: a self-join on offset (one job); `records`
    is records.parquet (None with a single copy: nothing to compare)."""
    node_ids = {c.log_dir: c.node_id for c in copies}
    if len(copies) < 2 or records is None:
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

    stats = export_records(spark, copies, (out / RECORDS).resolve())
    lap("read_and_export_records")
    shards = shards or replay_shards(spark, len(copies))
    records_path = str((out / RECORDS).resolve())
    # The replay tasks write the partition and broker timelines and the imbalance count changes
    # themselves; the job's own rows are the findings, summaries and report aggregates (small).
    outputs = {"partition": out / PARTITIONS, "broker": out / BROKERS, "imbalance_delta": out / DELTAS}
    for d in outputs.values():
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    replay = replay_tasks_dataframe(
        spark, records_path, copies, settings, shards, {k: str(d.resolve()) for k, d in outputs.items()}
    )
    side = replay.collect()
    lap("replay")
    if export_only:
        shutil.rmtree(out / DELTAS, ignore_errors=True)
        return AuditResult(out, [], {"outputs": [RECORDS, PARTITIONS, BROKERS]}, timings)

    replayed: list[Finding] = []
    shard_summaries: dict[str, list[dict[str, Any]]] = {}
    shard_plots: dict[str, list[dict[str, Any]]] = {}
    for r in side:
        if r["row_kind"] == "plot":
            shard_plots.setdefault(r["log_dir"], []).append(json.loads(r["details"]))
            continue
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
    ends = {d["log_dir"]: (d["last_offset"], d["last_timestamp_ms"]) for d in summaries}
    import pyarrow.dataset as ds  # type: ignore[import-untyped,import-not-found,unused-ignore]
    import pyarrow.parquet as pq  # type: ignore[import-untyped,import-not-found,unused-ignore]

    deltas = ds.dataset(str(out / DELTAS), format="parquet", schema=_KIND_SCHEMAS["imbalance_delta"]).to_table()
    timeline_rows, episodes = imbalance_from_deltas(deltas, ends, settings)
    shutil.rmtree(out / IMBALANCE, ignore_errors=True)
    (out / IMBALANCE).mkdir(parents=True)
    imbalance_schema = arrow_schema(IMBALANCE_FIELDS)
    imbalance_table = pa.Table.from_pylist(
        [dict(zip(imbalance_schema.names, r, strict=True)) for r in timeline_rows], schema=imbalance_schema
    )
    pq.write_table(imbalance_table, str(out / IMBALANCE / "part-00000.parquet"))
    shutil.rmtree(out / DELTAS, ignore_errors=True)
    raw.extend(_imbalance_findings(episodes, settings))
    lap("imbalance")
    # The copies' figures came with the export (one small row per task).
    voters = {int(v) for st in stats.values() for v in st["voters"] or []}
    lap("copy_stats")
    # The log checks and the epoch checks ran in the replay tasks (their findings are in `replayed`).
    records = spark.read.parquet(uri(RECORDS)) if len(copies) > 1 else None
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

        # The series and the incidents come from the replay tasks' per-batch aggregates.
        plot = merge_plot_data(shard_plots.get(order[0], [])) if order else None
        reference = order[0] if order else None
        brokers = ds.dataset(str(out / BROKERS), format="parquet", schema=_KIND_SCHEMAS["broker"]).to_table(
            filter=ds.field("log_dir") == reference
        )
        data = collect_plot_data(
            plot,
            [r for r in imbalance_table.to_pylist() if r["log_dir"] == reference],
            copy_docs,
            order[:1],
            brokers.to_pylist(),
        )
        write_report(out / REPORT, document, data)
        lap("report")
    document["timings"] = timings
    return AuditResult(out, findings, document, timings)
