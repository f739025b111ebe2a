"""The audit's checks without Spark: row decoding, copies on disk, the per-copy log checks, the
agreement rule, the replay (timelines, semantic findings) and the CLI's argument handling."""

from __future__ import annotations

import argparse
import random
import uuid
from pathlib import Path
from typing import Any

import pytest
from audit_synthetic import (
    History,
    faulty_cluster,
    partition,
    register,
    tid,
    write_copy,
    write_snapshot,
)

from quorum.audit.baseline import audit_python
from quorum.audit.checks import (
    AuditSettings,
    CopyReplayer,
    ListSink,
    LogChecker,
    agreement_findings,
    log_check_events,
    log_events_across,
)
from quorum.audit.cli import add_audit_commands
from quorum.audit.logdirs import ROW_FIELDS, AuditInputError, read_source_file, resolve_copies
from quorum.controller.partition_change import imbalance
from quorum.metadata.delta import replay_batches
from quorum.metadata.image import EMPTY
from quorum.metadata.records import (
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    ConfigResourceType,
    FeatureLevelRecord,
    FenceBrokerRecord,
    NoOpRecord,
    PartitionChangeRecord,
    ProducerIdsRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)

# --------------------------------------------------------------------------- rows and copies


def test_every_record_type_decodes_to_a_full_row(tmp_path: Path) -> None:
    h = History()
    h.leader_change(1, 1)
    h.add(FeatureLevelRecord("metadata.version", 1), register(4, 1, "r1"))
    h.add(
        BrokerRegistrationChangeRecord(4, 1, fenced=-1, in_controlled_shutdown=1),
        FenceBrokerRecord(4, 1),
        UnfenceBrokerRecord(4, 1),
        TopicRecord("t", tid("t")),
        partition("t", 0, (4,)),
        PartitionChangeRecord(0, tid("t"), isr=(4,), leader=4, leader_recovery_state=1),
        ConfigRecord(ConfigResourceType.TOPIC, "t", "retention.ms", "1"),
        ProducerIdsRecord(4, 1, 1000),
        RemoveTopicRecord(tid("t")),
        UnregisterBrokerRecord(4, 1),
        NoOpRecord(),
    )
    pdir = write_copy(tmp_path / "n", 1, h.batches)
    (copy,) = resolve_copies([tmp_path / "n"])
    rows = list(read_source_file(copy.segments[0]))
    names = [n for n, _ in ROW_FIELDS]
    assert all(len(r) == len(ROW_FIELDS) for r in rows)
    by_type = {r[names.index("record_type")]: dict(zip(names, r, strict=True)) for r in rows}
    assert by_type["LEADER_CHANGE"]["leader"] == 1 and by_type["LEADER_CHANGE"]["voters"] == [1, 2, 3]
    assert by_type["LEADER_CHANGE"]["is_control"] is True
    reg = by_type["REGISTER_BROKER_RECORD"]
    assert (reg["broker_id"], reg["broker_epoch"], reg["fenced"], reg["rack"]) == (4, 1, True, "r1")
    change = by_type["BROKER_REGISTRATION_CHANGE_RECORD"]
    assert change["fenced"] is False and change["in_controlled_shutdown"] is True
    pc = by_type["PARTITION_CHANGE_RECORD"]
    assert (pc["partition_id"], pc["leader"], pc["isr"], pc["replicas"], pc["leader_recovery_state"]) == (
        0, 4, [4], None, 1,
    )  # fmt: skip
    assert by_type["TOPIC_RECORD"]["topic_name"] == "t"
    assert by_type["CONFIG_RECORD"]["config_name"] == "retention.ms"
    assert by_type["FEATURE_LEVEL_RECORD"]["feature_level"] == 1
    assert all(r["valid"] and r["record_json"] is not None and r["value"] for r in by_type.values())
    assert [r[names.index("offset")] for r in rows] == list(range(len(rows)))
    assert copy.node_id == 1 and copy.log_dir == str(pdir.resolve())


def test_copies_are_found_from_node_dir_log_dir_or_partition_dir(tmp_path: Path) -> None:
    h = History()
    h.add(NoOpRecord())
    write_copy(tmp_path / "node" / "data", 7, h.batches)
    a = resolve_copies([tmp_path / "node"])
    b = resolve_copies([tmp_path / "node" / "data"])
    c = resolve_copies([tmp_path / "node" / "data" / "__cluster_metadata-0"])
    assert a == b == c and a[0].node_id == 7
    with pytest.raises(AuditInputError, match="given twice"):
        resolve_copies([tmp_path / "node", tmp_path / "node" / "data"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(AuditInputError, match="holds no metadata log"):
        resolve_copies([tmp_path / "empty"])
    with pytest.raises(AuditInputError, match="not a directory"):
        resolve_copies([tmp_path / "missing"])


def test_replay_starts_from_the_snapshot_the_log_needs(tmp_path: Path) -> None:
    h = History()
    h.leader_change(1, 1)
    h.add(register(4, 1, None))
    end = h.end
    h.add(NoOpRecord())
    pdir = write_copy(tmp_path / "n", 1, h.batches, start=end)
    write_snapshot(pdir, h.batches, end)
    (copy,) = resolve_copies([tmp_path / "n"])
    snap = copy.replay_snapshot()
    assert snap is not None and snap.end_offset == end
    result = audit_python([tmp_path / "n"])
    (summary,) = result.copies
    assert summary["snapshot"] == snap.name and summary["stopped"] is None and summary["brokers"] == 1
    assert [r[7] for r in result.brokers] == ["snapshot"]


def test_a_log_without_its_beginning_is_not_replayed(tmp_path: Path) -> None:
    h = History()
    h.add(register(4, 0, None))
    h.add(NoOpRecord())
    write_copy(tmp_path / "n", 1, h.batches, start=1)
    (summary,) = audit_python([tmp_path / "n"]).copies
    assert summary["stopped"]["offset"] == 1 and "no snapshot" in summary["stopped"]["reason"]


# --------------------------------------------------------------------------- log checks and agreement


_F, _G = "00000000000000000000.log", "00000000000000000010.log"
# A first segment with a gap, an epoch going back, a bad batch and a row after it.
_FIRST_SEGMENT_ROWS = [
    (_F, 0, 1, True, None),
    (_F, 1, 1, True, None),
    (_F, 3, 1, True, None),  # gap
    (_F, 4, 0, True, None),  # epoch goes back
    (_F, 5, None, False, "crc_mismatch"),
    (_F, 9, 1, True, None),  # after an invalid row: not judged
]


def test_log_checks_find_gaps_epoch_decreases_and_bad_batches() -> None:
    g = _G
    rows = [
        *_FIRST_SEGMENT_ROWS,
        (g, 11, 1, True, None),  # file base 10 but first offset 11 (and a gap)
        (g, 12, 1, False, "torn_tail"),
    ]
    assert sorted(log_check_events(rows), key=str) == sorted(
        [
            ("offsets_not_contiguous", 3),
            ("leader_epoch_decreasing", 4),
            ("bad_crc", 5),
            ("offsets_not_contiguous", 11),
            ("offsets_not_contiguous", 11),
            ("torn_tail", 12),
        ],
        key=str,
    )


def _ranges_of(rows: list[Any], cuts: list[int]) -> list[Any]:
    """`rows` read in ranges starting at `cuts`, as the export tasks check them: a range that starts
    inside a file resumes after an unchecked row of that file (`log_events_across` stitches)."""
    out = []
    for start, end in zip([0, *cuts], [*cuts, len(rows)], strict=True):
        part = rows[start:end]
        checker = LogChecker()
        if part and start > 0 and rows[start - 1][0] == part[0][0]:
            checker.resume(part[0][0], None, None, False)
        for row in part:
            checker.row(*row)
        out.append((checker.events, part[0] if part else None, part[-1] if part else None))
    return out


def test_log_checks_read_in_ranges_find_what_one_pass_finds() -> None:
    """Every way of cutting the rows into up to three ranges (empty ones included) gives the same
    distinct (check, offset) events as one checker over all of them, the boundaries' included."""
    g = _G
    rows = [
        *_FIRST_SEGMENT_ROWS,
        (g, 11, 1, True, None),  # file base 10 but first offset 11
        (g, 12, 0, True, None),  # epoch goes back across... within g
        (g, 14, 0, True, None),  # gap
        (g, 15, 1, False, "torn_tail"),
    ]
    whole = set(log_check_events(rows))
    n = len(rows)
    for a in range(n + 1):
        for b in range(a, n + 1):
            assert set(log_events_across(_ranges_of(rows, [a, b]))) == whole, (a, b)


def _content(n: int, tweak: dict[int, bytes] | None = None) -> dict[int, tuple[int, bool, bytes]]:
    out = {o: (1, False, b"r%d" % o) for o in range(n)}
    for o, v in (tweak or {}).items():
        out[o] = (1, False, v)
    return out


def test_agreement_compares_committed_offsets_only() -> None:
    ids = {"a": 1, "b": 2, "c": 3, "d": 4}
    # a and b hold 0..9; c holds 0..11 with a different record at 11 (uncommitted: only on c) and at 5.
    copies = {"a": _content(10), "b": _content(10), "c": _content(12, {5: b"x", 11: b"y"}), "d": _content(8)}
    found, info = agreement_findings(copies, ids, [1, 2, 3])
    assert info["rule"] == "majority" and info["majority"] == 2 and info["committed_end_offset"] == 10
    assert {(f.subject, tuple(f.offsets)) for f in found} == {
        ("node 1 vs node 3", (5,)),
        ("node 2 vs node 3", (5,)),
        ("node 3 vs node 4", (5,)),  # the observer holds the committed record too
    }
    # Observers are compared too.
    found, _ = agreement_findings({"a": _content(10), "b": _content(10), "d": _content(8, {7: b"z"})}, ids, [1, 2, 3])
    assert {(f.subject, tuple(f.offsets)) for f in found} == {("node 1 vs node 4", (7,)), ("node 2 vs node 4", (7,))}
    # One voter copy of three: the common prefix of the copies given is compared.
    found, info = agreement_findings({"a": _content(10, {9: b"q"}), "d": _content(12)}, ids, [1, 2, 3])
    assert info["rule"] == "common" and [f.offsets for f in found] == [[9]]


# --------------------------------------------------------------------------- the replay


def _random_history(seed: int) -> History:
    rng = random.Random(seed)
    h = History()
    h.leader_change(1, 1)
    brokers = [4, 5, 6, 7]
    epochs = {}
    for b in brokers:
        epochs[b] = h.end
        h.add(register(b, h.end, f"r{b % 2}"))
        h.add(BrokerRegistrationChangeRecord(b, epochs[b], fenced=-1))
    parts = []
    for t in range(5):
        name = f"t{t}"
        recs: list[Any] = [TopicRecord(name, tid(name))]
        for p in range(6):
            reps = tuple(rng.sample(brokers, 3))
            recs.append(partition(name, p, reps))
            parts.append((name, p, reps))
        h.add(*recs)
    for _ in range(300):
        name, p, reps = rng.choice(parts)
        isr = tuple(rng.sample(reps, rng.randint(1, 3)))
        h.add(PartitionChangeRecord(p, tid(name), isr=isr, leader=rng.choice([*isr, -1])), dt=rng.randint(1, 500))
    return h


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_incremental_imbalance_equals_kafkas_ratio(seed: int) -> None:
    h = _random_history(seed)
    sink = ListSink()
    replayer = CopyReplayer("d", 1, AuditSettings(), sink)
    for b in h.batches:
        for i, _ in enumerate(b.records):
            replayer.feed(
                b.base_offset + i, b.base_offset, b.last_offset, b.epoch, b.timestamp_ms, b.is_control, True, None,
                b.records[i],
            )  # fmt: skip
    summary = replayer.finish()
    assert summary["stopped"] is None and summary["partitions"] == 30
    image = replay_batches(EMPTY, h.batches)
    expected = imbalance((p.replicas, p.leader) for _, _, p in image.iter_partitions())
    assert replayer.imbalance_ratios() == pytest.approx(expected)
    # The partition timeline's last row per partition is the image's registration.
    last = {}
    for row in sink.partitions:
        last[(row[6], row[8])] = row
    for topic, pid, reg in image.iter_partitions():
        from quorum.metadata.records import kafka_uuid_string

        row = last[(kafka_uuid_string(topic.id), pid)]
        assert (row[9], row[12], row[15], row[16]) == (reg.leader, list(reg.isr), reg.leader_epoch, reg.partition_epoch)


def _replay(h: History, settings: AuditSettings | None = None) -> ListSink:
    sink = ListSink()
    replayer = CopyReplayer("d", 1, settings or AuditSettings(), sink)
    for b in h.batches:
        for i, value in enumerate(b.records):
            replayer.feed(
                b.base_offset + i, b.base_offset, b.last_offset, b.epoch, b.timestamp_ms, b.is_control, True, None,
                value,
            )  # fmt: skip
    replayer.finish()
    return sink


def _base(unclean_topic: str | None = None) -> History:
    h = History()
    h.leader_change(1, 1)
    for b in (4, 5, 6):
        h.add(register(b, b, None))
    h.add(*[BrokerRegistrationChangeRecord(b, b, fenced=-1) for b in (4, 5, 6)])
    recs: list[Any] = [TopicRecord("t", tid("t")), partition("t", 0, (4, 5, 6), (4, 5))]
    if unclean_topic is not None:
        recs.append(ConfigRecord(ConfigResourceType.TOPIC, "t", "unclean.leader.election.enable", unclean_topic))
    h.add(*recs)
    return h


@pytest.mark.parametrize(
    ("topic_value", "broker_default", "allowed"),
    [(None, None, False), (None, "true", True), ("false", "true", False), ("true", None, True)],
)
def test_unclean_election_is_judged_by_topic_config_then_broker_default(
    topic_value: str | None, broker_default: str | None, allowed: bool
) -> None:
    h = _base(topic_value)
    h.add(PartitionChangeRecord(0, tid("t"), isr=(6,), leader=6, leader_recovery_state=1))
    defaults = {} if broker_default is None else {"unclean.leader.election.enable": broker_default}
    sink = _replay(h, AuditSettings(defaults))
    (f,) = [f for f in sink.findings if f.check == "unclean_election"]
    assert f.severity == ("info" if allowed else "violation") and f.details["allowed"] is allowed


def test_leaderless_time_and_fenced_leader() -> None:
    h = _base()
    start = h.add(PartitionChangeRecord(0, tid("t"), leader=-1), dt=10)
    h.idle(1000)
    end = h.add(PartitionChangeRecord(0, tid("t"), leader=5), dt=234)
    fence = h.add(BrokerRegistrationChangeRecord(5, 5, fenced=1))
    sink = _replay(h)
    (gap,) = [f for f in sink.findings if f.check == "partition_leaderless"]
    assert gap.duration_ms == 1234 and gap.offsets == [start, end] and gap.severity == "warning"
    (fenced,) = [f for f in sink.findings if f.check == "fenced_leader"]
    assert fenced.subject == "t-0" and fenced.offsets == [fence]
    events = [(r[5], r[7]) for r in sink.brokers]
    assert (5, "fenced") in events and events.count((4, "registered")) == 1


def test_a_fence_that_moves_leadership_in_the_same_batch_is_fine() -> None:
    h = _base()
    h.add(PartitionChangeRecord(0, tid("t"), isr=(5,), leader=5), BrokerRegistrationChangeRecord(4, 4, fenced=1))
    sink = _replay(h)
    assert not [f for f in sink.findings if f.severity == "violation"]


def test_imbalance_longer_than_the_interval_is_a_violation() -> None:
    h = _base()
    h.add(PartitionChangeRecord(0, tid("t"), leader=5))
    h.idle(2000)
    h.add(PartitionChangeRecord(0, tid("t"), leader=4))
    short = _replay(h, AuditSettings({"leader.imbalance.check.interval.seconds": "5"}))
    assert not [f for f in short.findings if f.check == "leader_imbalance"]
    long = _replay(h, AuditSettings({"leader.imbalance.check.interval.seconds": "1"}))
    (f,) = [f for f in long.findings if f.check == "leader_imbalance"]
    assert f.subject == "broker 4" and f.severity == "violation" and f.duration_ms == 2010
    off = _replay(
        h, AuditSettings({"leader.imbalance.check.interval.seconds": "1", "auto.leader.rebalance.enable": "false"})
    )
    assert [f.severity for f in off.findings if f.check == "leader_imbalance"] == ["warning"]


def test_replica_placement_checks() -> None:
    h = History()
    h.leader_change(1, 1)
    for b, rack in ((4, "a"), (5, "a"), (6, "b")):
        h.add(register(b, b, rack))
        h.add(BrokerRegistrationChangeRecord(b, b, fenced=-1))
    h.add(
        TopicRecord("t", tid("t")),
        partition("t", 0, (4, 6, 5)),
        partition("t", 1, (4, 5)),  # one replica short, and both on rack a
        partition("t", 2, (6, 6, 4), (6, 4)),  # two replicas on one broker
    )
    checks = {(f.check, f.subject) for f in _replay(h).findings}
    assert checks == {("replication_factor", "t"), ("replicas_on_one_rack", "t"), ("duplicate_replicas", "t")}


def test_the_faulty_cluster_is_fully_reported(tmp_path: Path) -> None:
    cluster = faulty_cluster(tmp_path)
    settings = AuditSettings({"leader.imbalance.check.interval.seconds": "1"})
    result = audit_python(list(cluster.dirs.values()), settings)
    o = cluster.offsets
    by = {}
    for f in result.findings:
        by.setdefault((f["check"], f["severity"]), []).append(f)
    got = set(by)
    expected = {
        ("duplicate_replicas", "violation"),
        ("replication_factor", "violation"),
        ("replicas_on_one_rack", "violation"),
        ("unclean_election", "violation"),
        ("unclean_election", "info"),
        ("leader_not_in_isr", "violation"),
        ("isr_not_in_replicas", "violation"),
        ("fenced_leader", "violation"),
        ("leader_imbalance", "violation"),
        ("replay_error", "violation"),
        ("leader_epoch_decreasing", "violation"),
        ("bad_crc", "violation"),
        ("replicas_disagree", "violation"),
        ("offsets_not_contiguous", "violation"),
        ("partition_leaderless", "warning"),
        ("torn_tail", "info"),
    }
    assert got == expected, got ^ expected
    assert [f["offsets"] for f in by[("bad_crc", "violation")]] == [[o["leaderless_to"]]]
    assert {f["subject"] for f in by[("replicas_disagree", "violation")]} == {"node 1 vs node 3", "node 2 vs node 3"}
    assert all(f["offsets"] == [o["spliced"]] for f in by[("replicas_disagree", "violation")])
    assert by[("offsets_not_contiguous", "violation")][0]["offsets"] == [o["gap"]]
    assert {f["subject"] for f in by[("leader_epoch_decreasing", "violation")]} == {"node 1", "node 2", "node 3"}
    (unclean,) = by[("unclean_election", "violation")]
    assert unclean["subject"] == "t-unclean-0" and unclean["offsets"] == [o["unclean_forbidden"]]
    assert by[("unclean_election", "info")][0]["offsets"] == [o["unclean_allowed"]]
    (not_in_isr,) = by[("leader_not_in_isr", "violation")]
    assert not_in_isr["subject"] == "t-rf-0" and not_in_isr["offsets"][0] == o["not_in_isr"]
    assert by[("fenced_leader", "violation")][0]["offsets"] == [o["fenced"]]
    assert by[("replay_error", "violation")][0]["offsets"] == [o["replay_error"]]
    leaderless = [f for f in by[("partition_leaderless", "warning")] if f["offsets"][0] == o["leaderless_from"]]
    assert leaderless[0]["offsets"] == [o["leaderless_from"], o["leaderless_to"]]
    assert leaderless[0]["duration_ms"] == 5010
    assert {f["subject"] for f in by[("leader_imbalance", "violation")]} >= {"broker 5"}
    summaries = {s["node_id"]: s for s in result.copies}
    assert summaries[2]["snapshot"] is not None and summaries[2]["replay_start_offset"] == o["snapshot_end"]
    assert summaries[3]["stopped"]["offset"] == o["leaderless_to"]
    assert summaries[1]["stopped"]["offset"] == o["gap"]


# --------------------------------------------------------------------------- the CLI without Spark


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="pykraft")
    add_audit_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.handler(args))


def test_cli_rejects_bad_arguments_before_starting_spark(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "nolog").mkdir()
    assert _cli(["audit", "--log-dir", str(tmp_path / "nolog"), "--out", str(tmp_path / "o")]) == 2
    assert "holds no metadata log" in capsys.readouterr().err
    h = History()
    h.add(NoOpRecord())
    write_copy(tmp_path / "n", 1, h.batches)
    argv = ["audit", "--log-dir", str(tmp_path / "n"), "--out", str(tmp_path / "o")]
    assert _cli([*argv, "--broker-default", "no.such.config=1"]) == 2
    assert "unknown --broker-default" in capsys.readouterr().err
    assert _cli([*argv, "--broker-default", "leader.imbalance.per.broker.percentage=400"]) == 2
    assert not (tmp_path / "o").exists()
    with pytest.raises(SystemExit):
        _cli([*argv, "--broker-default", "novalue"])


def test_settings_defaults_are_kafkas() -> None:
    s = AuditSettings()
    assert (s.imbalance_percentage, s.imbalance_interval_ms, s.auto_rebalance, s.unclean_default) == (
        10, 300_000, True, False,
    )  # fmt: skip
    assert uuid.UUID(int=0) != tid("x")
