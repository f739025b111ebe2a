"""The audit of a real cluster's logs after a failure scenario (see audit_cluster.run_scenario):
no violations, and timelines that show what the scenario did."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="the Spark audit needs pyspark, pyarrow and pandas")
pytest.importorskip("pyarrow")

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]  # the first one also starts the scenario


def _rows(spark: Any, path: Path) -> list[dict[str, Any]]:
    return [r.asDict() for r in spark.read.parquet(path.as_uri()).collect()]


def test_audit_of_real_cluster_has_no_violations(scenario_audit: Any) -> None:
    doc = scenario_audit.document
    assert scenario_audit.exit_code == 0, json.dumps(scenario_audit.violations, indent=1)
    assert doc["summary"]["violations"] == 0
    copies = {c["node_id"]: c for c in doc["summary"]["copies"]}
    assert sorted(copies) == [1, 2, 3, 4]
    assert [n for n, c in copies.items() if c["voter"]] == [1, 2, 3]
    for c in copies.values():
        assert c["invalid_rows"] == 0
        assert c["replay"]["stopped"] is None
        assert c["replay"]["topics"] == 4
    agreement = doc["agreement"]
    assert agreement["rule"] == "majority" and agreement["voters"] == [1, 2, 3] and agreement["majority"] == 2
    assert agreement["committed_offsets"] > 50
    out = scenario_audit.out_dir
    for name in (
        "records.parquet",
        "partitions_timeline.parquet",
        "brokers_timeline.parquet",
        "findings.json",
        "report.html",
    ):
        assert (out / name).exists(), name
    saved = json.loads((out / "findings.json").read_text())
    assert saved["summary"]["violations"] == 0
    report = (out / "report.html").read_text()
    assert "No violations." in report
    assert report.count("<img") >= 3  # leadership/ISR, imbalance, controller epochs (+ leaderless if any)


def test_timelines_match_the_scenario(spark: Any, scenario: Any, scenario_audit: Any) -> None:
    out = scenario_audit.out_dir
    ref = scenario_audit.document["reference_copy"]
    brokers = sorted(
        (r for r in _rows(spark, out / "brokers_timeline.parquet") if r["log_dir"] == ref), key=lambda r: r["offset"]
    )
    partitions = sorted(
        (r for r in _rows(spark, out / "partitions_timeline.parquet") if r["log_dir"] == ref), key=lambda r: r["offset"]
    )
    events: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for r in brokers:
        events[r["broker_id"]].append((r["offset"], r["event"]))
    assert sorted(events) == scenario.broker_ids

    # The killed broker: unfenced, fenced after kill -9, registered again and unfenced.
    killed = [e for _, e in events[scenario.killed_broker]]
    first_unfence = killed.index("unfenced")
    fence = killed.index("fenced", first_unfence)
    assert "registered" in killed[fence:] and "unfenced" in killed[fence:], killed
    fence_offset = events[scenario.killed_broker][fence][0]

    # Its partitions' leaders moved to other brokers (in the batch that fenced it).
    for topic, pid in scenario.led_by_killed:
        moves = [
            r
            for r in partitions
            if r["topic_name"] == topic
            and r["partition_id"] == pid
            and r["prev_leader"] == scenario.killed_broker
            and r["leader"] != scenario.killed_broker
        ]
        assert moves and moves[0]["offset"] < fence_offset, (topic, pid, moves)
        assert moves[0]["leader_epoch"] >= 1 and moves[0]["leader_changed"]

    # The broker stopped with SIGTERM went through a controlled shutdown.
    assert "controlled_shutdown" in [e for _, e in events[scenario.shutdown_broker]]

    # Every topic with its partitions and replication factor.
    created = defaultdict(dict)
    for r in partitions:
        if r["change"] == "PARTITION_RECORD":
            created[r["topic_name"]][r["partition_id"]] = r["replicas"]
    for name, spec in scenario.topics.items():
        assert sorted(created[name]) == list(range(spec["partitions"])), name
        assert all(len(reps) == spec["rf"] for reps in created[name].values()), name

    # Controller epochs increased, and the failover put another controller in charge.
    changes = {c["node_id"]: c["leader_changes"] for c in scenario_audit.document["summary"]["copies"]}[1]
    epochs = [c["leader_epoch"] for c in changes]
    assert epochs == sorted(epochs) and len(set(epochs)) >= 2
    assert max(epochs) >= scenario.epoch_after_failover
    before = [c for c in changes if c["leader_epoch"] == scenario.epoch_before_failover]
    after = [c for c in changes if c["leader_epoch"] == scenario.epoch_after_failover]
    assert before and before[0]["leader"] == scenario.killed_controller
    assert after and after[0]["leader"] != scenario.killed_controller


def test_findings_reported_for_the_scenario_are_not_violations(scenario_audit: Any) -> None:
    checks = {(f["check"], f["severity"]) for f in scenario_audit.findings}
    allowed = {
        ("partition_leaderless", "warning"),
        ("isr_below_min_insync", "warning"),
        ("unclean_election", "info"),
        ("torn_tail", "info"),
    }
    assert checks <= allowed, checks
    for f in scenario_audit.findings:
        if f["check"] == "unclean_election":
            # Only where the topic allows it (the scenario's audit-c sets unclean.leader.election.enable=true).
            assert f["subject"].startswith("audit-c-") and f["details"]["allowed"] is True


def test_report_gives_each_leadership_change_its_cause(scenario: Any, scenario_audit: Any) -> None:
    """The incidents: the kill -9 of a leading broker shows as its fencing, the SIGTERM of another
    as its controlled shutdown; times on a wall-clock axis (the scenario ran today, not in 1970)."""
    report = (scenario_audit.out_dir / "report.html").read_text()
    assert "<h2>Leadership incidents (" in report
    assert f"<td>fencing (broker {scenario.killed_broker})</td>" in report, report[report.index("incidents (") :][:4000]
    assert f"<td>controlled shutdown (broker {scenario.shutdown_broker})</td>" in report
    assert "<h2>Broker lifecycle events (" in report and "<td>controlled shutdown</td>" in report
    assert re.search(r"<td>20\d\d-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}</td>", report)
