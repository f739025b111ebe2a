"""The whole audit as one plain Python loop (no Spark): the same row decoding
(`quorum.audit.logdirs`) and the same check functions (`quorum.audit.checks`).

Used by the benchmark (what Spark adds over a loop) and by tests that compare the Spark
job's findings with it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quorum.audit.checks import (
    COMMITTED_RULE,
    AuditSettings,
    CopyReplayer,
    Finding,
    ListSink,
    LogChecker,
    agreement_findings,
    epoch_events,
    epoch_findings,
    log_findings,
    merge_findings,
)
from quorum.audit.logdirs import FIELD_INDEX, LogCopy, read_source_file, resolve_copies

__all__ = ["PythonAudit", "audit_python", "copy_order"]

_OFFSET = FIELD_INDEX["offset"]
_BASE = FIELD_INDEX["batch_base_offset"]
_LAST = FIELD_INDEX["batch_last_offset"]
_EPOCH = FIELD_INDEX["leader_epoch"]
_TS = FIELD_INDEX["batch_timestamp_ms"]
_CONTROL = FIELD_INDEX["is_control"]
_VALID = FIELD_INDEX["valid"]
_KIND = FIELD_INDEX["error_kind"]
_VALUE = FIELD_INDEX["value"]
_TYPE = FIELD_INDEX["record_type"]
_VOTERS = FIELD_INDEX["voters"]
_FILE = FIELD_INDEX["source_file"]


@dataclass
class PythonAudit:
    findings: list[dict[str, Any]]
    partitions: list[tuple[Any, ...]]
    brokers: list[tuple[Any, ...]]
    imbalances: list[tuple[Any, ...]]
    copies: list[dict[str, Any]]
    agreement: dict[str, Any]
    records: int
    raw_findings: list[Finding] = field(default_factory=list)

    @property
    def violations(self) -> list[dict[str, Any]]:
        return [f for f in self.findings if f["severity"] == "violation"]


def copy_order(summaries: Sequence[dict[str, Any]], voters: set[int]) -> list[str]:
    """Copies by preference as the reference for timelines and merged findings: voter copies
    first, then the longest log, then the lowest node id."""
    return [
        s["log_dir"]
        for s in sorted(
            summaries,
            key=lambda s: (s["node_id"] not in voters, -(s["last_offset"] or -1), s["node_id"] or 0, s["log_dir"]),
        )
    ]


def audit_python(paths: Sequence[str | Path] | Sequence[LogCopy], settings: AuditSettings | None = None) -> PythonAudit:
    """Audit the copies named by `paths` in this process, one record at a time."""
    settings = settings or AuditSettings()
    copies = [p for p in paths if isinstance(p, LogCopy)] or resolve_copies(paths)  # type: ignore[arg-type]
    sink = ListSink()
    raw: list[Finding] = []
    summaries: list[dict[str, Any]] = []
    voters: set[int] = set()
    compare = len(copies) > 1
    contents: dict[str, dict[int, tuple[int, bool, bytes]]] = {}
    node_ids: dict[str, int | None] = {}
    total = 0
    for copy in copies:
        node_ids[copy.log_dir] = copy.node_id
        snapshot = copy.replay_snapshot()
        replayer = CopyReplayer(copy.log_dir, copy.node_id, settings, sink)
        checker = LogChecker()
        held: dict[int, tuple[int, bool, bytes]] = {}
        last_offset = None
        for snap in copy.snapshots:
            rows = list(read_source_file(snap, record_json=False))
            total += len(rows)
            for r in rows:
                if not r[_VALID]:
                    checker.invalid(r[_KIND], r[_OFFSET])
            if snap is snapshot and all(r[_VALID] for r in rows):
                values = [r[_VALUE] for r in rows if not r[_CONTROL]]
                ts = rows[0][_TS] if rows else None
                replayer.load_snapshot(snap.name, values, snap.end_offset, snap.epoch, ts)
        if snapshot is not None and replayer.snapshot is None and replayer.stopped is None:
            replayer.stopped = {"offset": snapshot.end_offset - 1, "reason": f"snapshot {snapshot.name} is unreadable"}
        for seg in copy.segments:
            for r in read_source_file(seg, record_json=False):
                total += 1
                offset = r[_OFFSET]
                valid = r[_VALID]
                checker.row(r[_FILE], offset, r[_EPOCH], valid, r[_KIND])
                replayer.feed(offset, r[_BASE], r[_LAST], r[_EPOCH], r[_TS], r[_CONTROL], valid, r[_KIND], r[_VALUE])
                if valid:
                    last_offset = offset
                    if compare:
                        held[offset] = (r[_EPOCH], r[_CONTROL], r[_VALUE])
                    if r[_TYPE] == "LEADER_CHANGE" and r[_VOTERS]:
                        voters.update(r[_VOTERS])
        raw.extend(log_findings(copy.log_dir, copy.node_id, checker.events))
        summary = replayer.finish()
        summary["last_offset"] = last_offset
        summaries.append(summary)
        contents[copy.log_dir] = held
    agreement: dict[str, Any] = {"rule": "single copy", "committed_rule": COMMITTED_RULE}
    if compare:
        found, agreement = agreement_findings(contents, node_ids, voters)
        agreement["committed_rule"] = COMMITTED_RULE
        raw.extend(found)
    by_partition: dict[tuple[str, str, int], list[tuple[Any, ...]]] = defaultdict(list)
    for row in sink.partitions:
        by_partition[(row[1], row[6], row[8])].append(row)
    for (log_dir, _tid, _pid), rows in by_partition.items():
        rows.sort(key=lambda r: r[2])
        raw.extend(epoch_findings(log_dir, node_ids.get(log_dir), epoch_events(rows)))
    raw.extend(sink.findings)
    order = copy_order(summaries, voters)
    return PythonAudit(
        findings=merge_findings(raw, order),
        partitions=sink.partitions,
        brokers=sink.brokers,
        imbalances=sink.imbalances,
        copies=summaries,
        agreement=agreement,
        records=total,
        raw_findings=raw,
    )
