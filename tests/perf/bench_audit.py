#!/usr/bin/env python
"""Spark audit benchmark: a large metadata log written by the real log writer, audited.

    python tests/perf/bench_audit.py [--records 1000000] [--segment-mib 8] [--master local[2]]
                                     [--copies 1] [--dir D] [--keep] [--stages] [--json-out FILE]

1. Generates a metadata log of `--records` records through `FileLog` + `encode_record`:
   a LeaderChange per controller epoch, 6 brokers registered and unfenced, 200 topics of
   50 partitions (RF 3), then PartitionChangeRecords (ISR shrinks and expansions, leader
   elections inside the ISR) and NoOps in batches of up to 100 records, rolling segments at
   `--segment-mib` MiB. `--copies N` hard-links the log into N node copies (voters 1..N).
2. Measures on `--master` (default local[2]):
   - the read alone: the `pykraft-metadata` data source into Spark's `noop` sink, and the
     physical plan's number of input partitions (one per segment file);
   - the end-to-end audit (`run_audit`: read into the replay's handoff, replay, checks, findings,
     report), with the session already started (its start-up is reported apart);
   - the same checks as one plain Python loop (`quorum.audit.baseline.audit_python`), and
     its decoding alone, so the figures show what Spark adds; the two audits' findings are
     compared. Besides the wall clock, the CPU seconds of the loop and of the audit's Python
     tasks (which the load of other processes does not change).
3. Prints a table and the machine's load (other work may share the cores): the Spark
   audit and the plain loop side by side (and their ratio), the number of stages and of
   single-task stages (`--stages`: every stage with its tasks and its share of the wall
   clock), and the targets: the audit of 1,000,000 records under 60 s, and no slower than
   the plain loop in the same run.

Not a pytest module (tests/perf/conftest.py keeps pytest away from it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from quorum.metadata.records import (  # noqa: E402
    BrokerEndpoint,
    BrokerRegistrationChangeRecord,
    FeatureLevelRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
    encode_record,
)
from quorum.raft.control_records import encode_leader_change  # noqa: E402
from quorum.raft.types import Batch, ControlType  # noqa: E402
from quorum.storage.file_log import FileLog  # noqa: E402

TARGET_AUDIT_S = 60.0
BROKERS = (1001, 1002, 1003, 1004, 1005, 1006)
TOPICS = 200
PARTITIONS = 50
BATCH = 100
EPOCH_EVERY = 250_000  # records per controller epoch


# ----------------------------------------------------------------------------- the log


def generate(directory: Path, records: int, segment_bytes: int, seed: int = 7) -> dict[str, Any]:
    """Write `records` records into `directory` (a __cluster_metadata-0 dir); returns facts about it."""
    rng = random.Random(seed)
    t0 = time.perf_counter()
    ts = 1_700_000_000_000
    epoch = 1
    voters = (1, 2, 3)
    flog = FileLog.open(directory, segment_bytes=segment_bytes)
    written = 0
    pending: list[Batch] = []

    def flush_pending() -> None:
        if pending:
            flog.append(pending)
            pending.clear()

    def add(values: list[bytes], control: ControlType | None = None) -> None:
        nonlocal written, ts
        ts += 5
        pending.append(Batch(flog.end_offset + sum(len(b.records) for b in pending), epoch, tuple(values), ts, control))
        written += len(values)
        if len(pending) >= 200:
            flush_pending()

    def leader_change() -> None:
        add([encode_leader_change(voters[(epoch - 1) % 3], voters, voters)], ControlType.LEADER_CHANGE)

    leader_change()
    add([encode_record(FeatureLevelRecord("metadata.version", 1))])
    broker_epochs = {}
    for i, b in enumerate(BROKERS):
        broker_epochs[b] = flog.end_offset + sum(len(x.records) for x in pending)
        add(
            [
                encode_record(
                    RegisterBrokerRecord(
                        broker_id=b,
                        incarnation_id=uuid.UUID(int=b),
                        broker_epoch=broker_epochs[b],
                        end_points=(BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9092 + i),),
                        rack=f"rack-{i % 3}",
                    )
                )
            ]
        )
    add([encode_record(BrokerRegistrationChangeRecord(b, broker_epochs[b], fenced=-1)) for b in BROKERS])
    # Topics: Kafka-style rotation over the brokers (racks alternate, so replicas span racks).
    state: list[tuple[uuid.UUID, int, tuple[int, ...], list[int], int]] = []
    n = len(BROKERS)
    for t in range(TOPICS):
        topic_id = uuid.UUID(int=(t + 1) << 64)
        values = [encode_record(TopicRecord(f"topic-{t:04d}", topic_id))]
        for p in range(PARTITIONS):
            first = (t + p) % n
            replicas = tuple(BROKERS[(first + k) % n] for k in range(3))
            values.append(
                encode_record(PartitionRecord(p, topic_id, replicas, replicas, leader=replicas[0], leader_epoch=0))
            )
            state.append((topic_id, p, replicas, list(replicas), replicas[0]))
        add(values)
    # Changes: shrink or expand ISRs, move leadership inside the ISR; NoOps now and then.
    next_epoch_at = EPOCH_EVERY
    while written < records:
        if written >= next_epoch_at:
            epoch += 1
            next_epoch_at += EPOCH_EVERY
            leader_change()
            continue
        size = min(BATCH, records - written)
        if rng.random() < 0.02:
            add([encode_record(NoOpRecord())])
            continue
        values = []
        for _ in range(size):
            i = rng.randrange(len(state))
            topic_id, p, replicas, isr, leader = state[i]
            roll = rng.random()
            if roll < 0.35 and len(isr) > 1:  # a follower leaves the ISR
                victim = rng.choice([b for b in isr if b != leader])
                isr = [b for b in isr if b != victim]
                change = PartitionChangeRecord(p, topic_id, isr=tuple(isr))
            elif roll < 0.7 and len(isr) < len(replicas):  # it comes back
                isr = isr + [rng.choice([b for b in replicas if b not in isr])]
                change = PartitionChangeRecord(p, topic_id, isr=tuple(isr))
            else:  # a leader election inside the ISR (the preferred replica when it can)
                leader = replicas[0] if replicas[0] in isr and leader != replicas[0] else rng.choice(isr)
                change = PartitionChangeRecord(p, topic_id, leader=leader)
            state[i] = (topic_id, p, replicas, isr, leader)
            values.append(encode_record(change))
        add(values)
    flush_pending()
    flog.flush()
    segments = flog.segment_count
    size = flog.size_bytes
    end = flog.end_offset
    flog.close()
    return {
        "records": end,
        "segments": segments,
        "bytes": size,
        "epochs": epoch,
        "generate_s": round(time.perf_counter() - t0, 2),
    }


def make_copies(log: Path, root: Path, copies: int) -> list[Path]:
    """`copies` node copies of the log (hard links), node ids 1..copies, each with meta.properties."""
    out = []
    for node in range(1, copies + 1):
        node_dir = root / f"node-{node}"
        pdir = node_dir / "__cluster_metadata-0"
        pdir.mkdir(parents=True)
        (node_dir / "meta.properties").write_text(f"version=1\ncluster.id=AAAAAAAAAAAAAAAAAAAAAA\nnode.id={node}\n")
        for f in sorted(log.iterdir()):
            os.link(f, pdir / f.name)
        out.append(node_dir)
    return out


# ----------------------------------------------------------------------------- measurements


def machine() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "cpu": cpu,
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--segment-mib", type=float, default=8.0)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--copies", type=int, default=1)
    parser.add_argument("--dir", help="work directory (default: a new temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--no-python", action="store_true", help="skip the plain Python loop")
    parser.add_argument("--json-out")
    parser.add_argument("--stages", action="store_true", help="list every stage with its tasks and time")
    args = parser.parse_args(argv)

    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bench-audit-"))
    work.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"machine_before": machine(), "master": args.master}
    try:
        log = work / "log" / "__cluster_metadata-0"
        if log.exists():
            shutil.rmtree(log.parent)
        print(f"generating {args.records:,} records in {log} ...", flush=True)
        facts = generate(log, args.records, int(args.segment_mib * 1024 * 1024))
        results["log"] = facts
        print(
            f"  {facts['records']:,} records, {facts['segments']} segments, {facts['bytes'] / 2**20:.1f} MiB, "
            f"{facts['epochs']} controller epochs, written in {facts['generate_s']} s"
        )
        copies_root = work / "copies"
        if copies_root.exists():
            shutil.rmtree(copies_root)
        paths = make_copies(log, copies_root, args.copies)
        total_records = facts["records"] * args.copies

        from quorum.audit.job import read_records, run_audit, spark_session
        from quorum.audit.logdirs import resolve_copies

        t = time.perf_counter()
        spark = spark_session(args.master, app_name="pykraft-audit-bench")
        results["session_start_s"] = round(time.perf_counter() - t, 2)
        try:
            copies = resolve_copies(paths)
            df = read_records(spark, copies)
            input_partitions = df.rdd.getNumPartitions()
            plan = df._jdf.queryExecution().executedPlan().toString()  # noqa: SLF001 - the physical plan's text
            results["input_partitions"] = input_partitions
            results["files"] = sum(len(c.files) for c in copies)
            print(f"physical plan: {input_partitions} input partitions for {results['files']} files")
            print("  " + "\n  ".join(line[:150] + ("..." if len(line) > 150 else "") for line in plan.splitlines()[:3]))

            t = time.perf_counter()
            df.write.format("noop").mode("overwrite").save()
            read_s = time.perf_counter() - t
            results["spark_read_s"] = round(read_s, 2)

            tracker = spark.sparkContext.statusTracker()
            jtracker = spark.sparkContext._jsc.sc().statusTracker()  # noqa: SLF001
            spark.sparkContext.setJobGroup("bench-audit", "the audit")
            t = time.perf_counter()
            audit = run_audit(spark, paths, work / "out")
            audit_s = time.perf_counter() - t
            # Tasks per stage of every job of the audit: a stage of 1 task runs on one core only.
            stages = []
            for job_id in sorted(tracker.getJobIdsForGroup("bench-audit")):
                job = tracker.getJobInfo(job_id)
                for stage_id in sorted(job.stageIds if job else []):
                    info = tracker.getStageInfo(stage_id)
                    jinfo = jtracker.getStageInfo(stage_id)  # the JVM's, which has the submission time
                    if info is not None and info.numTasks and jinfo.isDefined():
                        stages.append({"job": job_id, "stage": stage_id, "tasks": info.numTasks, "name": info.name,
                                       "submitted_ms": int(jinfo.get().submissionTime())})  # fmt: skip
            # A stage's share of the wall clock: until the next stage was submitted (the last: until the end).
            end_ms = int(time.time() * 1000)
            ordered = sorted(stages, key=lambda st: st["submitted_ms"])
            for st, nxt in zip(ordered, ordered[1:] + [None], strict=True):
                st["until_next_s"] = round(((nxt["submitted_ms"] if nxt else end_ms) - st["submitted_ms"]) / 1000, 2)
            results["stages"] = ordered
            results["spark_audit_s"] = round(audit_s, 2)
            results["spark_audit_timings"] = audit.timings
            results["spark_findings"] = {
                k: audit.document["summary"][k] for k in ("violations", "warnings", "info", "records")
            }
        finally:
            spark.stop()

        if not args.no_python:
            from quorum.audit.baseline import audit_python
            from quorum.audit.logdirs import read_source_file

            t = time.perf_counter()
            rows = 0
            for c in resolve_copies(paths):
                for f in c.files:
                    for _ in read_source_file(f, record_json=False):
                        rows += 1
            results["python_read_s"] = round(time.perf_counter() - t, 2)
            t, cpu = time.perf_counter(), time.process_time()
            baseline = audit_python(paths)
            results["python_audit_s"] = round(time.perf_counter() - t, 2)
            results["python_audit_cpu_s"] = round(time.process_time() - cpu, 2)
            results["same_findings"] = baseline.findings == audit.findings
        results["machine_after"] = machine()

        def rate(seconds: float | None) -> str:
            return f"{total_records / seconds:>12,.0f}" if seconds else f"{'-':>12}"

        print()
        print(f"{'what':<44}{'seconds':>10}{'records/s':>14}")
        print(f"{'Spark session start (not in the audit)':<44}{results['session_start_s']:>10.2f}{'':>14}")
        print(f"{'Spark read alone (data source -> noop)':<44}{results['spark_read_s']:>10.2f}{rate(read_s):>14}")
        print(f"{'Spark audit end to end':<44}{results['spark_audit_s']:>10.2f}{rate(audit_s):>14}")
        for name, seconds in audit.timings.items():
            print(f"{'  ' + name:<44}{seconds:>10.2f}")
        stages = results.get("stages", [])
        single = [st for st in stages if st["tasks"] == 1]
        print(f"{'stages run (tasks per stage)':<44}{len(stages):>10}  "
              f"{', '.join(str(st['tasks']) for st in stages)}")  # fmt: skip
        print(f"{'  stages of a single task':<44}{len(single):>10}")
        if args.stages:
            for st in stages:
                print(
                    f"    stage {st['stage']:>4} {st['tasks']:>4} tasks {st['until_next_s']:>7.2f} s  {st['name'][:60]}"
                )
        if not args.no_python:
            print(f"{'Python decode alone':<44}{results['python_read_s']:>10.2f}{rate(results['python_read_s']):>14}")
            loop_s = results["python_audit_s"]
            print(f"{'Python loop, same checks':<44}{loop_s:>10.2f}{rate(loop_s):>14}")
            print(f"same findings as Spark: {results['same_findings']}")
            print()
            print(f"{'side by side':<44}{'Spark':>10}{'loop':>10}{'ratio':>8}")
            print(f"{'  audit, seconds':<44}{audit_s:>10.2f}{loop_s:>10.2f}{audit_s / loop_s:>8.2f}")
            # CPU seconds do not depend on what else runs on the machine (the wall clock does). Spark's:
            # its Python tasks only (not the JVM nor the driver's imbalance merge and report).
            tasks_cpu = audit.timings.get("export_task_cpu_s", 0.0) + audit.timings.get("replay_task_cpu_s", 0.0)
            loop_cpu = results["python_audit_cpu_s"]
            results["spark_tasks_cpu_s"] = round(tasks_cpu, 2)
            print(f"{'  CPU seconds (Spark: its Python tasks)':<44}{tasks_cpu:>10.2f}{loop_cpu:>10.2f}"
                  f"{tasks_cpu / loop_cpu:>8.2f}")  # fmt: skip
            verdict_loop = "PASS" if audit_s <= loop_s else "MISS"
            print(f"target: the Spark audit no slower than the plain loop in the same run: {verdict_loop}")
            results["no_slower_than_loop"] = audit_s <= loop_s
        ok = audit_s < TARGET_AUDIT_S if args.records >= 1_000_000 else None
        verdict = "PASS" if ok else "MISS" if ok is False else "n/a (fewer records than the target's)"
        print(f"target: audit of 1,000,000 records under {TARGET_AUDIT_S:.0f} s: {verdict}")
        print(f"findings: {results['spark_findings']}")
        print(f"machine: {results['machine_before']['cpus']} CPUs ({results['machine_before']['cpu']}), load average")
        print(f"  before {results['machine_before']['loadavg']}, after {results['machine_after']['loadavg']}")
        if args.json_out:
            Path(args.json_out).write_text(json.dumps(results, indent=2) + "\n")
        return 0
    finally:
        if not args.keep and not args.dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
