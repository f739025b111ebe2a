"""The `pykraft-metadata` data source, and the Spark job against the plain Python audit."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="the Spark audit needs pyspark, pyarrow and pandas")
pytest.importorskip("pyarrow")
from audit_synthetic import History, faulty_cluster, partition, register, tid, write_copy, write_snapshot

from quorum.audit.baseline import audit_python
from quorum.audit.checks import AuditSettings
from quorum.audit.job import run_audit
from quorum.audit.logdirs import ROW_FIELDS, read_source_file, resolve_copies
from quorum.audit.source import SOURCE_NAME
from quorum.metadata.records import NoOpRecord, PartitionChangeRecord, TopicRecord, encode_record
from quorum.raft.types import Batch
from quorum.storage.file_log import FileLog
from quorum.storage.record_batch import encode_batch


def _read(spark: Any, *paths: Path) -> Any:
    reader = spark.read.format(SOURCE_NAME)
    return reader.load(str(paths[0])) if len(paths) == 1 else reader.load([str(p) for p in paths])


def test_spark_runs_this_interpreter_in_local_mode(spark: Any) -> None:
    assert os.environ["PYSPARK_PYTHON"] == sys.executable
    assert os.environ["PYSPARK_DRIVER_PYTHON"] == sys.executable
    assert spark.sparkContext.master.startswith("local")
    assert spark.conf.get("spark.sql.shuffle.partitions") == "4"

    def where(batches: Any) -> Any:
        import pyarrow as pa

        for _ in batches:
            yield pa.RecordBatch.from_pydict({"exe": [sys.executable]})

    workers = {r["exe"] for r in spark.range(2, numPartitions=2).mapInArrow(where, "exe string").collect()}
    assert workers == {sys.executable}


def test_empty_log(spark: Any, tmp_path: Path) -> None:
    FileLog.open(tmp_path / "a" / "__cluster_metadata-0").close()  # one empty segment
    (tmp_path / "b" / "__cluster_metadata-0").mkdir(parents=True)  # no file at all
    df = _read(spark, tmp_path / "a", tmp_path / "b")
    assert df.columns == [name for name, _ in ROW_FIELDS]
    assert df.rdd.getNumPartitions() == 1
    assert df.count() == 0


def test_log_with_only_snapshots(spark: Any, tmp_path: Path) -> None:
    h = History()
    h.leader_change(1, 1)
    h.add(register(4, 1, "r"), TopicRecord("t", tid("t")), partition("t", 0, (4,)))
    h.add(NoOpRecord())
    pdir = tmp_path / "n" / "__cluster_metadata-0"
    pdir.mkdir(parents=True)
    first = write_snapshot(pdir, h.batches, 1)
    last = write_snapshot(pdir, h.batches, h.end)
    df = _read(spark, tmp_path / "n")
    assert df.rdd.getNumPartitions() == 2  # one per snapshot file
    rows = df.orderBy("source_file", "position", "offset").collect()
    assert {r["source_kind"] for r in rows} == {"snapshot"}
    assert {r["source_file"] for r in rows} == {first.name, last.name}
    latest = [r for r in rows if r["source_file"] == last.name]
    assert [r["record_type"] for r in latest] == [
        "SNAPSHOT_HEADER",
        "REGISTER_BROKER_RECORD",
        "TOPIC_RECORD",
        "PARTITION_RECORD",
        "SNAPSHOT_FOOTER",
    ]
    assert all(r["valid"] and r["snapshot_end_offset"] == h.end for r in latest)
    # The replay starts from the latest snapshot when there is no segment.
    (summary,) = audit_python([tmp_path / "n"]).copies
    assert summary["snapshot"] == last.name and summary["partitions"] == 1 and summary["stopped"] is None


def test_torn_tail_and_bad_crc_are_rows_not_errors(spark: Any, tmp_path: Path) -> None:
    h = History()
    for i in range(5):
        h.add(NoOpRecord(), PartitionChangeRecord(i, tid("t"), leader=1))
    pdir = write_copy(tmp_path / "n", 1, h.batches)
    segment = pdir / "00000000000000000000.log"
    data = bytearray(segment.read_bytes())
    data[70] ^= 0xFF  # inside the first batch's records: a CRC failure
    torn = encode_batch(Batch(h.end, 1, (encode_record(NoOpRecord()),), h.ts + 1))
    segment.write_bytes(bytes(data) + torn[: len(torn) - 3])
    rows = _read(spark, tmp_path / "n").orderBy("position", "offset").collect()
    assert [(r["offset"], r["valid"], r["error_kind"]) for r in rows] == [
        (0, False, "crc_mismatch"),
        *[(o, True, None) for o in range(2, 10)],
        (h.end, False, "torn_tail"),
    ]
    assert rows[0]["batch_last_offset"] == 1 and rows[0]["error"].startswith("CRC mismatch")
    assert rows[-1]["position"] == len(data)


def test_one_partition_per_file_and_the_same_rows_as_the_decoder(spark: Any, tmp_path: Path) -> None:
    cluster = faulty_cluster(tmp_path)
    copies = resolve_copies(list(cluster.dirs.values()))
    files = [f for c in copies for f in c.files]
    assert len(files) > 6  # node 1 rolls many 1 KiB segments; node 2 has a snapshot
    df = _read(spark, *cluster.dirs.values())
    assert df.rdd.getNumPartitions() == len(files)
    expected = sorted((r[1], r[2], r[6], r[9] if r[9] is not None else -1) for f in files for r in read_source_file(f))
    got = sorted(
        (r["log_dir"], r["source_file"], r["position"], r["offset"] if r["offset"] is not None else -1)
        for r in df.select("log_dir", "source_file", "position", "offset").collect()
    )
    assert got == expected


def test_segments_read_in_byte_ranges_give_the_same_rows(spark: Any, tmp_path: Path) -> None:
    """Ranges cut at batch boundaries (here every ~300 bytes) read exactly the rows of whole files,
    damaged batches (flipped byte, spliced batch, torn tail) included."""
    from quorum.audit.logdirs import split_points

    cluster = faulty_cluster(tmp_path)
    copies = resolve_copies(list(cluster.dirs.values()))
    files = [f for c in copies for f in c.files]
    ranges = sum(len(split_points(f, 300)) for f in files)
    assert ranges > len(files) + 5
    columns = [n for n, _ in ROW_FIELDS]
    paths = json.dumps([str(d) for d in cluster.dirs.values()])
    split = spark.read.format(SOURCE_NAME).option("paths", paths).option("chunkBytes", "300").load()
    whole = spark.read.format(SOURCE_NAME).option("paths", paths).option("chunkBytes", "0").load()
    assert split.rdd.getNumPartitions() == ranges and whole.rdd.getNumPartitions() == len(files)
    rows = sorted(tuple(r) for r in split.select(*columns).collect())
    assert rows == sorted(tuple(r) for r in whole.select(*columns).collect())
    errors = {r["error_kind"] for r in split.collect() if r["error_kind"]}
    assert {"crc_mismatch", "torn_tail"} <= errors, errors


def test_spark_audit_of_segments_read_in_small_ranges_equals_the_python_audit(spark: Any, tmp_path: Path) -> None:
    """Segments cut into ranges of ~300 bytes (many export tasks per file; the log checks stitched
    across ranges, the replay fed from every range's handoff file in order): the loop's findings
    and partition timeline."""
    cluster = faulty_cluster(tmp_path / "logs")
    paths = list(cluster.dirs.values())
    out = tmp_path / "out"
    result = run_audit(spark, paths, out, shards=2, report=False, chunk_bytes=300)
    expected = audit_python(paths)
    assert result.findings == expected.findings
    assert {f["check"] for f in result.findings} >= {"bad_crc", "torn_tail", "offsets_not_contiguous"}
    partitions = spark.read.parquet((out / "partitions_timeline.parquet").as_uri()).collect()
    assert sorted(tuple(r) for r in partitions) == sorted(
        tuple(list(x) if isinstance(x, list) else x for x in row) for row in expected.partitions
    )
    assert not (out / "_replay_input").exists()  # the handoff files are removed at the end
    assert not (out / "records.parquet").exists()  # only when asked
    assert "records.parquet" not in result.document["outputs"]


def test_records_parquet_when_asked_holds_every_row_of_the_decoder(spark: Any, tmp_path: Path) -> None:
    """`records=True` (the CLI's --records; export always): records.parquet has every row as
    read_source_file decodes it, JSON included, whatever the ranges; the findings are the same."""
    cluster = faulty_cluster(tmp_path / "logs")
    paths = list(cluster.dirs.values())
    out = tmp_path / "out"
    result = run_audit(spark, paths, out, report=False, chunk_bytes=300, records=True)
    assert result.findings == audit_python(paths).findings
    assert "records.parquet" in result.document["outputs"]
    columns = [n for n, _ in ROW_FIELDS]
    table = spark.read.parquet((out / "records.parquet").as_uri()).select(*columns).collect()
    got = [tuple(bytes(x) if isinstance(x, bytearray) else x for x in r) for r in table]
    files = [f for c in resolve_copies(paths) for f in c.files]
    expected = [r for f in files for r in read_source_file(f)]
    assert len(got) == len(expected) > 0
    assert sorted(got, key=repr) == sorted(expected, key=repr)


@pytest.mark.parametrize("shards", [1, 3])
def test_spark_audit_equals_the_python_audit(spark: Any, tmp_path: Path, shards: int) -> None:
    """The same findings and timelines, whether each copy is replayed in one task or split by topic."""
    cluster = faulty_cluster(tmp_path / "logs")
    settings = AuditSettings({"leader.imbalance.check.interval.seconds": "1"})
    paths = list(cluster.dirs.values())
    result = run_audit(spark, paths, tmp_path / "out", settings, shards=shards, report=shards == 1)
    expected = audit_python(paths, settings)
    assert result.exit_code == 1
    assert result.findings == expected.findings
    assert result.document["agreement"] == {k: v for k, v in expected.agreement.items() if k != "committed_rule"}
    partitions = spark.read.parquet((tmp_path / "out" / "partitions_timeline.parquet").as_uri()).collect()
    assert sorted(tuple(r) for r in partitions) == sorted(
        tuple(list(x) if isinstance(x, list) else x for x in row) for row in expected.partitions
    )
    brokers = spark.read.parquet((tmp_path / "out" / "brokers_timeline.parquet").as_uri()).collect()
    assert sorted(tuple(r) for r in brokers) == sorted(expected.brokers)
    imbalance = spark.read.parquet((tmp_path / "out" / "imbalance_timeline.parquet").as_uri()).collect()
    assert sorted(tuple(r) for r in imbalance) == sorted(expected.imbalances)
    saved = json.loads((tmp_path / "out" / "findings.json").read_text())
    assert saved["summary"]["violations"] == len(expected.violations) > 0
    for copy in saved["summary"]["copies"]:
        assert copy["replay"]["shards"] == shards
    if shards == 1:
        report = (tmp_path / "out" / "report.html").read_text()
        # leadership/ISR, broker lifecycle, leaderless, imbalance, controller epochs
        assert report.count("<img") == 5 and "violation(s)" in report
        assert "<h2>Broker lifecycle events (" in report and "<h2>Leadership incidents (" in report
        assert "<td>unclean election</td>" in report  # the faulty history's unclean elections
        assert "time (UTC, batch timestamps)" not in report  # an axis label, inside the images only
        registered = sum(1 for r in brokers if r["event"] == "registered" and r["log_dir"] == saved["reference_copy"])
        assert report.count("<td>registered</td>") == registered > 0
