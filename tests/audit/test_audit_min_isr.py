"""The `isr_below_min_insync` finding: a partition whose ISR is smaller than its
min.insync.replicas (topic config, else the broker default), with how long; the same from the
plain loop and from Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from audit_synthetic import History, partition, register, tid, write_copy

from quorum.audit.baseline import audit_python
from quorum.audit.checks import AuditSettings
from quorum.metadata.records import (
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    ConfigResourceType,
    FeatureLevelRecord,
    PartitionChangeRecord,
    RemoveTopicRecord,
    TopicRecord,
)


def history() -> tuple[History, dict[str, int]]:
    h = History()
    o: dict[str, int] = {}
    h.leader_change(1, 1)
    h.add(FeatureLevelRecord("metadata.version", 1))
    for b in (4, 5, 6):
        h.add(register(b, h.end, f"r{b}"))
    h.add(*(BrokerRegistrationChangeRecord(b, 2 + i, fenced=-1) for i, b in enumerate((4, 5, 6))))
    h.add(
        TopicRecord("t-min", tid("t-min")),
        ConfigRecord(ConfigResourceType.TOPIC, "t-min", "min.insync.replicas", "2"),
        partition("t-min", 0, (4, 5, 6)),
        TopicRecord("t-plain", tid("t-plain")),
        partition("t-plain", 0, (4, 5, 6)),
        TopicRecord("t-gone", tid("t-gone")),
        ConfigRecord(ConfigResourceType.TOPIC, "t-gone", "min.insync.replicas", "3"),
        partition("t-gone", 0, (4, 5, 6)),
    )
    o["shrink"] = h.add(
        PartitionChangeRecord(0, tid("t-min"), isr=(4, 5)), PartitionChangeRecord(0, tid("t-plain"), isr=(4, 5))
    )
    o["below"] = h.add(PartitionChangeRecord(0, tid("t-min"), isr=(4,)), dt=100)
    h.add(PartitionChangeRecord(0, tid("t-gone"), isr=(4, 5)), dt=100)
    h.idle(3000)
    o["back"] = h.add(PartitionChangeRecord(0, tid("t-min"), isr=(4, 6)), dt=400)
    o["removed"] = h.add(RemoveTopicRecord(tid("t-gone")), dt=500)
    o["plain_below"] = h.add(PartitionChangeRecord(0, tid("t-plain"), isr=(4,)), dt=100)
    h.idle(1000)
    return h, o


def _mine(findings: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {f["subject"]: f for f in findings if f["check"] == "isr_below_min_insync"}


def test_isr_below_min_insync_by_topic_config_with_duration(tmp_path: Path) -> None:
    h, o = history()
    write_copy(tmp_path / "n1", 1, h.batches)
    found = _mine(audit_python([tmp_path / "n1"]).findings)
    assert sorted(found) == ["t-gone-0", "t-min-0"]  # t-plain: broker default min.insync.replicas=1
    f = found["t-min-0"]
    assert f["severity"] == "warning" and f["duration_ms"] == 100 + 3000 + 400
    assert f["offsets"] == [o["below"], o["back"]]
    assert "ISR of 1 below min.insync.replicas=2 for 3500 ms" in f["message"]
    g = found["t-gone-0"]
    assert g["duration_ms"] == 3000 + 400 + 500 and "until its topic was deleted" in g["message"]
    assert g["details"]["min_insync_replicas"] == 3 and g["details"]["smallest_isr"] == 2


def test_broker_default_min_insync_applies_to_topics_without_the_config(tmp_path: Path) -> None:
    h, o = history()
    write_copy(tmp_path / "n1", 1, h.batches)
    settings = AuditSettings({"min.insync.replicas": "3"})
    found = _mine(audit_python([tmp_path / "n1"], settings).findings)
    plain = found["t-plain-0"]  # below 3 from the first shrink to the end of the log
    assert plain["offsets"][0] == o["shrink"] + 1 and plain["details"]["ongoing"] is True
    assert "until the end of the log" in plain["message"]
    assert found["t-min-0"]["details"]["min_insync_replicas"] == 2  # the topic's own config wins
    with pytest.raises(ValueError, match="min.insync.replicas"):
        AuditSettings({"min.insync.replicas": "0"}).validate()


def test_spark_reports_the_same(spark: Any, tmp_path: Path) -> None:
    from quorum.audit.job import run_audit

    h, _ = history()
    write_copy(tmp_path / "n1", 1, h.batches)
    expected = audit_python([tmp_path / "n1"]).findings
    result = run_audit(spark, [tmp_path / "n1"], tmp_path / "out", report=False)
    assert _mine(result.findings) == _mine(expected) and len(_mine(expected)) == 2
