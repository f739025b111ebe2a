"""The Spark job behind `pykraft audit` and `pykraft export`.

1. Export: one task per segment range of about 4 MiB (cut at batch boundaries) and per snapshot
   decodes its range once (`read_source_file`) and writes, with pyarrow (the rows never cross into
   the JVM), the handoff: the columns the replay and the agreement read, with each partition
   record's owning shard (`_replay_input/`, removed at the end). It runs the log checks over its
   rows (`LogChecker`; the driver stitches the ranges of a copy, `log_events_across`) and returns
   them with its range's figures (rows, offsets, epochs, timestamps, LeaderChange records) as one
   small row. Only when asked (`records`, and always for `pykraft export`) does it also write every
   row into `records.parquet`; the records' JSON is decoded only then.
2. Replay: one task per (copy, shard), with no shuffle. A copy is split into shards by topic id
   when there are fewer copies than cores (each shard replays every non-partition record and the
   partition records of its topics). Each task reads its copy's handoff files in log order, keeps
   its rows (`_shard_rows`), runs `quorum.audit.checks.CopyReplayer` (the shared `MetadataDelta`
   replay) and the epoch checks on the partition rows it emits, writes its part of the partition
   and broker timelines and its per-broker leader count changes itself, and returns the findings,
   summaries and the report's per-batch aggregates. The driver merges the count changes (a few
   rows per batch and broker) into `imbalance_timeline.parquet` and the `leader_imbalance`
   findings.
3. Agreement between copies (several copies only) as a self-join on offset restricted to
   committed offsets, over the handoff.
4. `findings.json` and `report.html` (`quorum.audit.report`), from the aggregates above.

Runs on `local[*]` by default and on any cluster given `--master`: the log directories
(read by the executors) and the output directory must then be on storage every node sees,
and the executors need this Python environment (PYSPARK_PYTHON is set to it).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import shutil
import sys
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
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
    LogRow,
    copy_label,
    epoch_findings,
    epoch_step,
    log_events_across,
    log_findings,
    majority,
    merge_findings,
    merge_shards,
)
from quorum.audit.logdirs import (
    FIELD_INDEX,
    ROW_FIELDS,
    LogCopy,
    SourceFile,
    read_source_file,
    resolve_copies,
    split_points,
)
from quorum.audit.source import DEFAULT_CHUNK_BYTES, SOURCE_NAME, arrow_schema, register, spark_schema, to_arrow

__all__ = ["AuditResult", "run_audit", "spark_session"]

RECORDS = "records.parquet"
PARTITIONS = "partitions_timeline.parquet"
BROKERS = "brokers_timeline.parquet"
IMBALANCE = "imbalance_timeline.parquet"
DELTAS = "_imbalance_deltas"  # the replay tasks' imbalance count changes, merged into IMBALANCE
HANDOFF = "_replay_input"  # the export tasks' replay input (Arrow IPC, one file per range), removed after the replay
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
_KIND_STRUCTS = {kind: pa.struct(list(schema)) for kind, schema in _KIND_SCHEMAS.items()}


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
        self._partitions = self.rows["partition"]
        # The epoch checks, as the rows are emitted (in offset order per partition): the previous
        # row of each (topic id, partition), and the events found.
        self._last: dict[tuple[str, int], tuple[Any, ...]] = {}
        self.epoch_events: list[tuple[str, str, int, int, int]] = []
        # The report's aggregates (`_PlotData`), from each row and its partition's previous row.
        self.plot = _PlotData()

    def partition(self, row: tuple[Any, ...]) -> None:
        self._partitions.append(row)
        self.pending += 1
        key = (row[6], row[8])
        prev = self._last.get(key)
        found = epoch_step(prev, row)
        if found:
            self.epoch_events.extend(found)
        self.plot.add(prev, row)
        self._last[key] = row

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
                # Arrow reads the row tuples as structs (no transposition in Python).
                write(pa.RecordBatch.from_struct_array(pa.array(rows, type=_KIND_STRUCTS[kind])))
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


@contextlib.contextmanager
def task_gc() -> Iterator[None]:
    """Python's cyclic collector set for one task, as the task streams (restored after it).

    At the start, everything the worker holds (pyspark, pyarrow, these modules, caches) is moved out
    of the collector's way (`gc.freeze`). During the task, full collections are ten times rarer:
    a task keeps a small state alive while rows pass through it (a pending Arrow buffer, the
    previous row of each partition), so rows age into the oldest generation and die there, and
    Python's default full collection every ten middle-generation ones rescans the task's whole
    state each time. Measured on the 1,000,000-record benchmark's tasks (in one process): 3.2 of
    22.6 CPU seconds in full collections with the defaults, 1.5 with the heap frozen, 0.2 with
    both. The tasks create no reference cycles per record; cycles left are collected at the next
    task's start, or by the remaining full collections.
    """
    gc.collect()
    gc.freeze()
    threshold = gc.get_threshold()
    gc.set_threshold(threshold[0], threshold[1], max(threshold[2], 100))
    try:
        yield
    finally:
        gc.set_threshold(*threshold)


Plan = tuple[str, int | None, str | None, int, int]  # a copy: log dir, node id, replay snapshot (name, end, epoch)


def replay_shard(
    plan: Plan,
    settings: AuditSettings,
    shard: int,
    parts: Iterable[tuple[bool, pa.RecordBatch, Sequence[bool]]],
    writers: dict[str, Callable[[pa.RecordBatch], None]] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Replay one shard of one copy (`plan`) through `CopyReplayer`; rows of REPLAY_FIELDS.

    `parts`: (snapshot?, rows of `_HANDOFF_SCHEMA`, foreign flags) in log order: the rows of the
    copy's replay snapshot, then its segment rows (see `copy_replay_batches`). The epoch checks run
    on the partition rows as they are emitted; `writers` as in `_ArrowSink`.
    """
    cpu = time.process_time()
    schema = arrow_schema(REPLAY_FIELDS)
    sink = _ArrowSink(writers)
    log_dir, node_id, name, end, epoch = plan
    replayer = CopyReplayer(log_dir, node_id, settings, sink, shard=shard, imbalance_deltas=True)
    snapshot_values: list[bytes] = []
    snapshot_ok = True
    snapshot_ts: int | None = None
    started = False

    def start_segments() -> None:
        nonlocal started
        started = True
        if name is None:
            return
        if snapshot_ok and (snapshot_values or snapshot_ts is not None):
            replayer.load_snapshot(name, snapshot_values, end, epoch, snapshot_ts)
        else:
            replayer.stopped = {"offset": end - 1, "reason": f"snapshot {name} is unreadable"}

    feed = replayer.feed
    for snapshot, batch, foreign in parts:
        cols = [batch.column(c).to_pylist() for c in _FEED_COLUMNS]
        if snapshot:
            _offset, _base, _last, _epoch, ts_col, control_col, valid_col, _kind, value_col = cols
            for ts, control, valid, value in zip(ts_col, control_col, valid_col, value_col, strict=True):
                if not valid:
                    snapshot_ok = False
                    continue
                if snapshot_ts is None:
                    snapshot_ts = ts
                if not control:
                    snapshot_values.append(value)
            continue
        if not started:
            start_segments()
        # Rows as CopyReplayer.feed takes them; `valid` is never null (the decoder sets it).
        for args in zip(*cols, foreign, strict=True):
            feed(*args)
        if sink.pending >= 20_000:
            yield from sink.drain(schema)
    if not started:
        start_segments()
    summary = replayer.finish()
    for f in epoch_findings(log_dir, node_id, sink.epoch_events):
        sink.finding(f)
    summary["task_cpu_s"] = time.process_time() - cpu  # for the timings; not part of the summary
    sink.summary(node_id, log_dir, summary)
    sink.plot_row(node_id, log_dir)
    yield from sink.drain(schema)


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


def _shard_rows(batch: pa.RecordBatch, shard: int, shards: int, snapshot: bool) -> tuple[pa.RecordBatch, list[bool]]:
    """One handoff batch (`_HANDOFF_SCHEMA`) as a shard's replay input, and each kept row's `foreign`
    flag: every row but the partition records other shards own, of which a segment batch keeps its
    first row (foreign: it closes the previous batch, so that each shard sees every batch)."""
    import pyarrow.compute as pc  # type: ignore[import-untyped,import-not-found,unused-ignore]

    if shards == 1:
        return batch, [False] * batch.num_rows
    other = pc.fill_null(pc.not_equal(batch.column("owner"), pa.scalar(shard, pa.int32())), False)
    keep = pc.invert(other)
    if not snapshot:
        first = pc.fill_null(pc.equal(batch.column("offset"), batch.column("batch_base_offset")), False)
        keep = pc.or_(keep, first)
    return batch.filter(keep), pc.filter(other, keep).to_pylist()


def copy_replay_batches(
    handoff_path: str, parts: Sequence[tuple[str, bool]], shard: int, shards: int
) -> Iterator[tuple[bool, pa.RecordBatch, list[bool]]]:
    """One (copy, shard)'s replay input in log order (see `replay_shard`), read from the export's
    handoff files: `parts` are (file name, snapshot?) of the copy's replay snapshot's ranges, then
    of its segment ranges, in order."""
    import pyarrow.parquet as pq  # type: ignore[import-untyped,import-not-found,unused-ignore]

    for name, snapshot in parts:
        table = pq.read_table(os.path.join(handoff_path, name), columns=[*_FEED_COLUMNS, "owner"])
        for batch in table.to_batches():
            yield (snapshot, *_shard_rows(batch, shard, shards, snapshot))


def replay_tasks_dataframe(
    spark: SparkSession,
    handoff_path: str,
    ranges: Sequence[ExportRange],
    copies: Sequence[LogCopy],
    settings: AuditSettings,
    shards: int = 1,
    outputs: dict[str, str] | None = None,
) -> DataFrame:
    """Every copy replayed by `CopyReplayer` in `shards` tasks per copy: rows of REPLAY_FIELDS.

    No shuffle: one task per (copy, shard), each reading its rows from the handoff files the export
    wrote for `ranges` (`export_records` with `handoff_path` and the same `shards`; the output
    directory is on storage every executor sees, as the audit requires). The epoch checks run on the
    partition rows as they are emitted (the log checks ran in the export tasks).

    With `outputs` (row kind -> an existing, empty directory; e.g. "partition", "broker",
    "imbalance_delta"), each task writes its rows of those kinds there as
    `part-<copy>-<shard>.parquet` (the kind's own fields; a retried task rewrites its own files)
    and the DataFrame carries every other kind of row.
    """
    plans: list[Plan] = []
    for copy in copies:
        snap = copy.replay_snapshot()
        if snap is None:
            plans.append((copy.log_dir, copy.node_id, None, 0, -1))
        else:
            plans.append((copy.log_dir, copy.node_id, snap.name, snap.end_offset, snap.epoch))
    # Per copy: its replay snapshot's ranges, then its segments' (ranges are in log order per copy).
    parts: list[list[tuple[str, bool]]] = [[] for _ in copies]
    for r in ranges:
        if r.source.kind == "segment" or r.source.name == plans[r.copy][2]:
            parts[r.copy].append((r.handoff_name, r.source.kind == "snapshot"))
    groups = max(1, len(copies) * shards)

    def replay_task(copy: int, shard: int) -> Iterator[pa.RecordBatch]:
        rows = copy_replay_batches(handoff_path, parts[copy], shard, shards)
        if not outputs:
            yield from replay_shard(plans[copy], settings, shard, rows)
            return
        import pyarrow.parquet as pq  # type: ignore[import-untyped,import-not-found,unused-ignore]

        name = f"part-{copy:05d}-{shard:05d}.parquet"
        files = {kind: (os.path.join(d, "." + name + ".tmp"), os.path.join(d, name)) for kind, d in outputs.items()}
        open_writers = {kind: pq.ParquetWriter(tmp, _KIND_SCHEMAS[kind]) for kind, (tmp, _) in files.items()}
        try:
            writers = {kind: w.write_batch for kind, w in open_writers.items()}
            yield from replay_shard(plans[copy], settings, shard, rows, writers)
        finally:
            for w in open_writers.values():
                w.close()
        for tmp, final in files.values():
            os.replace(tmp, final)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for group in batch.column("id").to_pylist():
                copy, shard = divmod(int(group), shards)
                with task_gc():
                    yield from replay_task(copy, shard)

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


# CopyReplayer.feed's columns, in its order.
_FEED_COLUMNS = (
    "offset",
    "batch_base_offset",
    "batch_last_offset",
    "leader_epoch",
    "batch_timestamp_ms",
    "is_control",
    "valid",
    "error_kind",
    "value",
)
# The handoff: each range's rows as the replay tasks and the agreement read them (Parquet, one file
# per range in HANDOFF), with `owner`: the shard that replays a valid partition record.
_HANDOFF_SCHEMA = pa.schema(
    [_ROW_SCHEMA.field(c) for c in ("log_dir", "source_kind", *_FEED_COLUMNS)] + [pa.field("owner", pa.int32())]
)
# What an export task needs of its rows without records.parquet: the handoff's columns and those
# its figures (`_chunk_stats`) and the owners are computed from.
_EXPORT_COLUMNS = sorted(
    set(_HANDOFF_SCHEMA.names[:-1]) | {"record_type", "topic_id", "leader", "voters"}, key=FIELD_INDEX.__getitem__
)
_EXPORT_INDEX = [FIELD_INDEX[c] for c in _EXPORT_COLUMNS]
_EXPORT_SCHEMA = pa.schema([_ROW_SCHEMA.field(c) for c in _EXPORT_COLUMNS])
_OWNED_TYPES = ("PARTITION_RECORD", "PARTITION_CHANGE_RECORD")
_ROW_FILE, _ROW_OFFSET, _ROW_EPOCH, _ROW_VALID, _ROW_KIND = (
    FIELD_INDEX[n] for n in ("source_file", "offset", "leader_epoch", "valid", "error_kind")
)


@dataclass(frozen=True)
class ExportRange:
    """One export task's input: a byte range of one file of copy `copy` (`n`: its index in log
    order over every copy's snapshots, then segments, each cut by `split_points`)."""

    n: int
    copy: int
    source: SourceFile
    start: int
    end: int | None

    @property
    def handoff_name(self) -> str:
        """Its file in HANDOFF (and in RECORDS)."""
        return f"part-{self.n:05d}.parquet"


def export_ranges(copies: Sequence[LogCopy], chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> list[ExportRange]:
    """Every copy's files cut into ranges (the data source's partitions), in log order per copy."""
    cut = [(i, f) + span for i, c in enumerate(copies) for f in c.files for span in split_points(f, chunk_bytes)]
    return [ExportRange(n, i, f, start, end) for n, (i, f, start, end) in enumerate(cut)]


def _handoff(rows: pa.RecordBatch, shards: int) -> pa.RecordBatch:
    """The handoff's columns of a batch of rows (ROW_FIELDS, or `_EXPORT_COLUMNS`) and each row's
    `owner`: the shard of a valid partition record's topic (`_owner_shards`), null on every other row
    (each shard replays it)."""
    import pyarrow.compute as pc  # type: ignore[import-untyped,import-not-found,unused-ignore]

    owned = pc.fill_null(
        pc.and_(pc.is_in(rows.column("record_type"), value_set=pa.array(_OWNED_TYPES)), rows.column("valid")), False
    )
    owner = pc.if_else(owned, _owner_shards(rows.column("topic_id"), shards), pa.scalar(None, pa.int32()))
    columns = [rows.column(c) for c in _HANDOFF_SCHEMA.names[:-1]]
    return pa.RecordBatch.from_arrays([*columns, owner], schema=_HANDOFF_SCHEMA)


def _export_arrow(chunk: Sequence[tuple[Any, ...]]) -> pa.RecordBatch:
    """The `_EXPORT_COLUMNS` of rows (ROW_FIELDS tuples) as one Arrow batch."""
    columns = list(zip(*chunk, strict=True))
    arrays = [pa.array(columns[i], type=f.type) for i, f in zip(_EXPORT_INDEX, _EXPORT_SCHEMA, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=_EXPORT_SCHEMA)


def _export_range(r: ExportRange, records_dir: str | None, handoff_dir: str, shards: int) -> dict[str, Any]:
    """Decode one range once (`read_source_file`): the handoff into `handoff_dir/part-<n>.parquet`,
    with `records_dir` every row (all of ROW_FIELDS) into `records_dir/part-<n>.parquet` (else the
    rows are decoded without their JSON, which nothing else reads), and return its figures
    (`_chunk_stats`) and log-check events (`LogChecker`, stitched to the neighbouring ranges by
    `log_events_across`) as a small dict. A retried task rewrites its own files (each written to
    a temporary name first)."""
    import pyarrow.parquet as pq  # type: ignore[import-untyped,import-not-found,unused-ignore]

    stats = _empty_stats()
    checker = LogChecker()
    segment = r.source.kind == "segment"
    if segment and r.start > 0:
        checker.resume(r.source.name, None, None, False)  # not the file's first row; see log_events_across
    head: tuple[Any, ...] | None = None
    row: tuple[Any, ...] | None = None
    outputs = [(handoff_dir, _HANDOFF_SCHEMA)] + ([(records_dir, _ROW_SCHEMA)] if records_dir is not None else [])
    files = [(os.path.join(d, "." + r.handoff_name + ".tmp"), os.path.join(d, r.handoff_name)) for d, _ in outputs]
    with contextlib.ExitStack() as stack:
        writers = [
            stack.enter_context(pq.ParquetWriter(tmp, schema))
            for (tmp, _), (_, schema) in zip(files, outputs, strict=True)
        ]

        def write(chunk: list[tuple[Any, ...]]) -> None:
            if records_dir is None:
                rows = _export_arrow(chunk)
            else:
                rows = to_arrow(chunk, _ROW_SCHEMA)
                writers[1].write_batch(rows)
            writers[0].write_batch(_handoff(rows, shards))
            _chunk_stats(rows, stats)

        chunk: list[tuple[Any, ...]] = []
        for row in read_source_file(r.source, r.start, r.end, record_json=records_dir is not None):
            chunk.append(row)
            if segment:
                checker.row(row[_ROW_FILE], row[_ROW_OFFSET], row[_ROW_EPOCH], row[_ROW_VALID], row[_ROW_KIND])
                if head is None:
                    head = row
            elif not row[_ROW_VALID]:
                checker.invalid(row[_ROW_KIND], row[_ROW_OFFSET])
            if len(chunk) >= 8192:
                write(chunk)
                chunk = []
        if chunk:
            write(chunk)
    for tmp, final in files:
        os.replace(tmp, final)
    stats["voters"] = sorted(stats["voters"])
    tail = row if segment else None
    return {**stats, "n": r.n, "log_events": checker.events, "head": _log_row(head), "tail": _log_row(tail)}


def _log_row(row: tuple[Any, ...] | None) -> list[Any] | None:
    """The LogChecker fields (`LogRow`) of a row (ROW_FIELDS), as JSON."""
    if row is None:
        return None
    return [row[_ROW_FILE], row[_ROW_OFFSET], row[_ROW_EPOCH], row[_ROW_VALID], row[_ROW_KIND]]


def export_records(
    spark: SparkSession,
    ranges: Sequence[ExportRange],
    handoff_path: Path,
    records_path: Path | None = None,
    *,
    shards: int = 1,
) -> dict[str, dict[str, Any]]:
    """Decode every range once into the handoff (`handoff_path`: a Parquet directory of
    `_HANDOFF_SCHEMA`, owners for `shards` shards per copy; the input of `replay_tasks_dataframe`
    and of the agreement) and, with `records_path`, every row into records.parquet (ROW_FIELDS).
    Returns each copy's figures (see `_merge_stats`) and log-check events ("log_events"), keyed by
    log dir.

    One task per range (`export_ranges`: the data source's partitions), each decoding its range
    (`_export_range`) and writing its rows with pyarrow, so that the rows never cross into the JVM;
    each task returns its range's figures as one small row.
    """
    import pyarrow.parquet as pq  # type: ignore[import-untyped,import-not-found,unused-ignore]

    for d in (handoff_path, records_path):
        if d is not None:
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(parents=True)
    handoff, target = str(handoff_path), str(records_path) if records_path is not None else None
    if not ranges:
        pq.write_table(_HANDOFF_SCHEMA.empty_table(), os.path.join(handoff, "part-00000.parquet"))
        if target is not None:
            pq.write_table(_ROW_SCHEMA.empty_table(), os.path.join(target, "part-00000.parquet"))
        return {}
    stat_schema = arrow_schema(_STAT_FIELDS)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for n in batch.column("id").to_pylist():
                with task_gc():
                    cpu = time.process_time()
                    doc = _export_range(ranges[n], target, handoff, shards)
                    doc["task_cpu_s"] = time.process_time() - cpu
                yield pa.RecordBatch.from_arrays(
                    [pa.array([ranges[n].source.log_dir]), pa.array([json.dumps(doc)])], schema=stat_schema
                )

    tasks = spark.range(0, len(ranges), 1, numPartitions=len(ranges))
    by_dir: dict[str, list[dict[str, Any]]] = {}
    for r in tasks.mapInArrow(run, spark_schema(_STAT_FIELDS)).collect():
        by_dir.setdefault(r["log_dir"], []).append(json.loads(r["details"]))
    return {d: _merge_range_docs(docs) for d, docs in by_dir.items()}


def _merge_range_docs(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """One copy's figures and log-check events from its ranges' `_export_range` dicts."""
    docs = sorted(docs, key=lambda d: d["n"])
    merged = _merge_stats(docs)
    merged["task_cpu_s"] = sum(d["task_cpu_s"] for d in docs)  # for the timings

    def as_row(x: list[Any] | None) -> LogRow | None:
        return None if x is None else (x[0], x[1], x[2], x[3], x[4])

    parts = (([(c, o) for c, o in d["log_events"]], as_row(d["head"]), as_row(d["tail"])) for d in docs)
    merged["log_events"] = log_events_across(parts)
    return merged


def _agreement(
    records: DataFrame | None, copies: Sequence[LogCopy], voters: set[int]
) -> tuple[list[Finding], dict[str, Any]]:
    """`replicas_disagree` findings under COMMITTED_RULE: a self-join on offset (one job); `records`
    has the copies' rows (log_dir, source_kind, valid, offset, leader_epoch, is_control, value: the
    export's handoff), None with a single copy (nothing to compare)."""
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
    records: bool = False,
    report: bool = True,
    shards: int | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> AuditResult:
    """Run the audit (or, with `export_only`, only write the Parquet tables) into `out_dir`.

    `records` (always with `export_only`): also write records.parquet, every record decoded
    (ROW_FIELDS, with its JSON); the audit itself reads none of it.
    `shards`: replay tasks per copy (default: enough to use every core, see `replay_shards`);
    `chunk_bytes`: the size of the ranges segments are read in (`split_points`).
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

    shards = shards or replay_shards(spark, len(copies))
    ranges = export_ranges(copies, chunk_bytes)
    handoff = (out / HANDOFF).resolve()
    records = records or export_only
    if not records:
        shutil.rmtree(out / RECORDS, ignore_errors=True)  # not this run's
    stats = export_records(spark, ranges, handoff, (out / RECORDS).resolve() if records else None, shards=shards)
    lap("read_and_export_records")
    # The replay tasks write the partition and broker timelines and the imbalance count changes
    # themselves; the job's own rows are the findings, summaries and report aggregates (small).
    outputs = {"partition": out / PARTITIONS, "broker": out / BROKERS, "imbalance_delta": out / DELTAS}
    for d in outputs.values():
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    replay = replay_tasks_dataframe(
        spark, str(handoff), ranges, copies, settings, shards, {k: str(d.resolve()) for k, d in outputs.items()}
    )
    side = replay.collect()
    lap("replay")
    if export_only:
        shutil.rmtree(out / DELTAS, ignore_errors=True)
        shutil.rmtree(handoff, ignore_errors=True)
        return AuditResult(out, [], {"outputs": [RECORDS, PARTITIONS, BROKERS]}, timings)

    replayed: list[Finding] = []
    replay_cpu = 0.0
    shard_summaries: dict[str, list[dict[str, Any]]] = {}
    shard_plots: dict[str, list[dict[str, Any]]] = {}
    for r in side:
        if r["row_kind"] == "plot":
            shard_plots.setdefault(r["log_dir"], []).append(json.loads(r["details"]))
            continue
        if r["row_kind"] == "summary":
            doc = json.loads(r["details"])
            replay_cpu += doc.pop("task_cpu_s")
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
    # CPU seconds the Python tasks used (load-independent, unlike the wall clock laps).
    timings["export_task_cpu_s"] = round(sum(st.pop("task_cpu_s") for st in stats.values()), 2)
    timings["replay_task_cpu_s"] = round(replay_cpu, 2)
    # The log checks ran in the export tasks, stitched across each copy's ranges.
    for c in copies:
        raw.extend(log_findings(c.log_dir, c.node_id, stats.get(c.log_dir, {}).get("log_events", [])))
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
    # The epoch checks ran in the replay tasks (their findings are in `replayed`), the log checks
    # in the export tasks (added above).
    held = spark.read.parquet(handoff.as_uri()) if len(copies) > 1 else None
    agreement_found, agreement = _agreement(held, copies, voters)
    raw.extend(agreement_found)
    shutil.rmtree(handoff, ignore_errors=True)
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
        "outputs": ([RECORDS] if records else [])
        + [PARTITIONS, BROKERS, IMBALANCE, FINDINGS]
        + ([REPORT] if report else []),
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
