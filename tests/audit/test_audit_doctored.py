"""Doctored copies of the real scenario's logs: each fault is reported by its finding, and only by it.

"Only" means: the violations are exactly the expected check, and no check appears that the
audit of the untouched logs did not report (warnings about leaderless partitions at the
end of the scenario stay, possibly with other offsets).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="the Spark audit needs pyspark, pyarrow and pandas")
pytest.importorskip("pyarrow")
from audit_doctor import AUDITED, append_to_all, batches, copy_logs, final_image, truncate_to_common_end
from audit_synthetic import flip_byte, rewrite_segment, segment_holding

from quorum.audit.cli import add_audit_commands
from quorum.audit.job import run_audit
from quorum.metadata.records import (
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    ConfigResourceType,
    NoOpRecord,
    PartitionChangeRecord,
    encode_record,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]  # the first one also starts the scenario
METADATA_DIR = "__cluster_metadata-0"


def _assert_only(findings: list[dict[str, Any]], clean: Any, check: str) -> list[dict[str, Any]]:
    violations = [f for f in findings if f["severity"] == "violation"]
    assert {f["check"] for f in violations} == {check}, json.dumps(violations, indent=1)
    extra = {f["check"] for f in findings} - {f["check"] for f in clean.findings} - {check}
    assert not extra, extra
    return violations


def _first_noop_committed(copy: Path, below: int) -> int:
    for b in batches(copy):
        if b.control_type is None and b.end_offset <= below and b.records == (encode_record(NoOpRecord()),):
            return b.base_offset
    raise AssertionError("no NoOp batch found")


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="pykraft")
    add_audit_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.handler(args))


def test_flipped_byte_is_a_bad_crc_and_only_that(
    spark: Any, scenario: Any, scenario_audit: Any, tmp_path: Path
) -> None:
    copies = copy_logs(scenario, tmp_path / "logs", AUDITED)
    committed = scenario_audit.document["agreement"]["committed_end_offset"]
    target = _first_noop_committed(copies[2], committed)
    flip_byte(segment_holding(copies[2] / METADATA_DIR, target), target, delta=63)
    out = tmp_path / "out"
    # Through the CLI handler (in this process, on the tests' session): exit code 1 on a violation.
    code = _cli(["audit", *sum((["--log-dir", str(c)] for c in copies.values()), []), "--out", str(out), "--no-report"])
    assert code == 1
    saved = json.loads((out / "findings.json").read_text())
    (bad,) = _assert_only(saved["findings"], scenario_audit, "bad_crc")
    assert bad["subject"] == "node 2" and bad["offsets"] == [target]
    node2 = next(c for c in saved["summary"]["copies"] if c["node_id"] == 2)
    assert node2["invalid_rows"] == 1
    assert node2["replay"]["stopped"]["offset"] == target  # the state after the bad batch is unknown


def test_spliced_batch_is_a_replica_disagreement_and_only_that(
    spark: Any, scenario: Any, scenario_audit: Any, tmp_path: Path
) -> None:
    copies = copy_logs(scenario, tmp_path / "logs", AUDITED)
    committed = scenario_audit.document["agreement"]["committed_end_offset"]
    target = _first_noop_committed(copies[2], committed)
    other = encode_record(ConfigRecord(ConfigResourceType.BROKER, "", "log.retention.ms", "1"))
    rewrite_segment(segment_holding(copies[2] / METADATA_DIR, target), target, (other,))
    result = run_audit(spark, list(copies.values()), tmp_path / "out", report=False)
    found = _assert_only(result.findings, scenario_audit, "replicas_disagree")
    assert {f["subject"] for f in found} == {"node 1 vs node 2", "node 2 vs node 3", "node 2 vs node 4"}
    assert all(f["offsets"] == [target] for f in found)


def test_leader_outside_isr_is_reported_and_only_that(
    spark: Any, scenario: Any, scenario_audit: Any, tmp_path: Path
) -> None:
    copies = copy_logs(scenario, tmp_path / "logs", AUDITED)
    truncate_to_common_end(copies)
    image, _ = final_image(copies[1])
    topic, pid, reg, outsider = _partition_with_outsider(image, lambda name: True)
    records = _unfence(image, outsider) + [PartitionChangeRecord(pid, topic.id, leader=outsider)]
    offset = append_to_all(copies, records) + len(records) - 1
    result = run_audit(spark, list(copies.values()), tmp_path / "out", report=False)
    (found,) = _assert_only(result.findings, scenario_audit, "leader_not_in_isr")
    assert found["subject"] == f"{topic.name}-{pid}" and found["offsets"] == [offset]
    assert sorted(found["nodes"]) == list(AUDITED)


def test_unclean_election_where_forbidden_is_reported_and_only_that(
    spark: Any, scenario: Any, scenario_audit: Any, tmp_path: Path
) -> None:
    copies = copy_logs(scenario, tmp_path / "logs", AUDITED)
    truncate_to_common_end(copies)
    image, _ = final_image(copies[1])
    forbids = lambda name: image.topic_config(name).get("unclean.leader.election.enable", "false") == "false"  # noqa: E731
    topic, pid, reg, outsider = _partition_with_outsider(image, forbids)
    records = _unfence(image, outsider) + [
        PartitionChangeRecord(pid, topic.id, isr=(outsider,), leader=outsider, leader_recovery_state=1)
    ]
    offset = append_to_all(copies, records) + len(records) - 1
    result = run_audit(spark, list(copies.values()), tmp_path / "out", report=False)
    (found,) = _assert_only(result.findings, scenario_audit, "unclean_election")
    assert found["subject"] == f"{topic.name}-{pid}" and found["offsets"] == [offset]
    assert found["details"]["allowed"] is False and found["details"]["previous_isr"] == list(reg.isr)


def _partition_with_outsider(image: Any, topic_ok: Any) -> tuple[Any, int, Any, int]:
    """A partition (of a topic `topic_ok` accepts) with a registered replica outside its ISR."""
    for topic in sorted(image.topics.by_id.values(), key=lambda t: t.name):
        if not topic_ok(topic.name):
            continue
        for pid, reg in sorted(topic.partitions.items()):
            for b in reg.replicas:
                if b not in reg.isr and image.broker(b) is not None:
                    return topic, pid, reg, b
    raise AssertionError("no partition with a replica outside its ISR")


def _unfence(image: Any, broker_id: int) -> list[Any]:
    """Unfence the broker first if it is fenced (so that it leading is not a fenced-leader finding)."""
    b = image.broker(broker_id)
    return [BrokerRegistrationChangeRecord(broker_id, b.epoch, fenced=-1)] if b.fenced else []


def test_export_writes_only_the_parquet_tables(spark: Any, scenario: Any, tmp_path: Path) -> None:
    out = tmp_path / "export"
    argv = ["export", "--log-dir", str(scenario.log_dir(1)), "--log-dir", str(scenario.node_dir(2)), "--out", str(out)]
    assert _cli(argv) == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == ["brokers_timeline.parquet", "partitions_timeline.parquet", "records.parquet"]
    records = spark.read.parquet((out / "records.parquet").as_uri())
    assert sorted(r[0] for r in records.select("node_id").distinct().collect()) == [1, 2]
