"""Data-plane benchmark, the shapes that need their own cluster (issue 22): many partitions,
and a consumer-only run over a topic already on disk. Each shape runs librdkafka's mock
cluster (`test.mock.num.brokers=3`, in this process) beside pykraft with the same client.

    PYTHONPATH=. .venv/bin/python tests/perf/bench_dataplane_shapes.py                   # both (~15 min)
    ... --only partitions --partition-counts 100 3000 10000 --sequential-sends 1000 --idle-seconds 20
    PYTHONPATH=. .venv/bin/python tests/perf/bench_dataplane_shapes.py --only consume --consume-only-gb 5

* `--partition-counts C ...` (default 100 3000 10000): for each count a new 3+3 cluster
  (`start_cluster`, brokers' descriptor limit raised with prlimit, Kafka's broker session
  timeouts), one topic of C partitions, RF 3, `min.insync.replicas` 2, created with
  CreateTopics and then CreatePartitions (the controller takes at most 10,000 records per
  operation, as Kafka's does), waited for until every broker hosts every partition (its
  partition.metadata written) and every ISR is full. Then sequential acks=all produces: one
  100 B record at a time to a random partition (confluent-kafka, `linger.ms=0`, no
  idempotence), each waited for (delivery report) before the next: p50/p99/max of
  produce() -> delivery report over --sequential-sends sends (after 50 unmeasured). Then,
  the producer closed and --settle-seconds (60) later, each broker's idle CPU (utime+stime from
  /proc/<pid>/stat over --idle-seconds, in cores). The mock: the same sends on its
  auto-created topic (4 partitions: it answers CreateTopics without a controller, so
  larger topics cannot be made there). Targets: p50 at the largest count <= 2x the p50 at
  the smallest; every idle broker < 0.02 cores at every count.
* `--consume-only-gb N` (default 5): a 3+3 cluster, a topic of 9 partitions (RF 3), N GB of
  1 KiB values written by the fastest producer (confluent-kafka, acks=1, linger 5 ms,
  1 MB batches; not measured) and waited for until the high watermarks reach the end.
  Then pykraft's own acks=all saturation rate on another topic of the same shape (--seconds,
  for the 2x target), then kcat (`-C -e -f %s` into a pipe read and dropped: the fast
  client; MB/s from its first byte to its last) reads the whole topic: cold (the topic's
  segment files evicted from the page cache: `--cold fadvise` (default) syncs and drops
  only those files' pages with posix_fadvise(DONTNEED), leaving other engineers' caches
  alone; `--cold drop-caches` writes 3 to /proc/sys/vm/drop_caches, the whole machine's;
  either way residency is measured before the pass), then again from the page cache; the
  same two passes with tests/perf/fast_consumer.c (librdkafka's consumer in C printing
  nothing per message: kcat's output and the pipe reader set kcat's rate, not the brokers);
  then confluent-kafka's batch `consume()` from the page cache. The mock: acks=all produce
  for --seconds, then kcat, the fast consumer and `consume()` over what it keeps (~5 MB
  per partition: passes repeat for --mock-consume-seconds). Broker CPU per MB served = all
  brokers' utime+stime over the pass / MB of values read. Targets, on the fast consumer
  (kcat when it cannot be built): page cache >= 0.8x the mock's and >= 2x pykraft's acks=all
  produce rate; broker CPU < 1 ms per MB served.

The machine has 2 cores shared with other engineers: the load average is printed beside
every figure, with the share of both CPUs that other processes used. Not collected by
pytest (tests/perf/conftest.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_dataplane import (  # noqa: E402
    MB,
    MSG_BYTES,
    PRODUCER_CONF,
    REPO,
    CpuWindow,
    PySpy,
    Run,
    bootstrap_of,
    broker_groups,
    code_version,
    consume_run,
    fast_consume_run,
    fast_consumer_exe,
    kcat_consume_run,
    loadavg,
    log_dirs,
    mock_cluster,
    percentile,
    produce_run,
    pykraft_cluster,
    rd_logger,
    wait_for_leaders,
)
from confluent_kafka import KafkaException, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic  # noqa: E402

SEQ_MSG_BYTES = 100
SEQ_WARMUP = 50
MAX_PARTITIONS_PER_OPERATION = 5_000  # under the controller's 10,000 records per operation
NOFILE = 65_536  # brokers' descriptor limit (capped by their hard limit): segments and indexes
CONSUME_PARTITIONS = 9  # 3 per broker, the main benchmark's verdict shape

TARGET_P50_RATIO = 2.0  # p50 at the largest count / p50 at the smallest
TARGET_IDLE_CORES = 0.02  # per broker
TARGET_KCAT_MOCK_SHARE = 0.8
TARGET_CONSUME_RATIO = 2.0
TARGET_CPU_MS_PER_MB_SERVED = 1.0

CLUSTER_PROPERTIES = {
    "min.insync.replicas": "2",
    "auto.create.topics.enable": "false",
    "num.partitions": "1",
    # Kafka's defaults, as in test_dataplane_many_partitions.py: creating thousands of logs
    # on a busy 2-core machine must not fence a broker.
    "broker.session.timeout.ms": "9000",
    "broker.heartbeat.interval.ms": "2000",
}


def uptime() -> str:
    return f"load {loadavg()}"


# ----------------------------------------------------------------------------- clusters


def shapes_cluster(root: Path, keep: bool) -> contextlib.AbstractContextManager[Any]:
    """A 3+3 cluster with CLUSTER_PROPERTIES and raised descriptor limits; killed at the end."""
    return pykraft_cluster(root, 3, CLUSTER_PROPERTIES, keep=keep, nofile=NOFILE)


def create_big_topic(admin: AdminClient, topic: str, partitions: int, rf: int, configs: dict[str, str]) -> None:
    """CreateTopics with at most MAX_PARTITIONS_PER_OPERATION partitions, then CreatePartitions
    in steps of as many: each operation stays under the controller's record limit."""
    first = min(partitions, MAX_PARTITIONS_PER_OPERATION)
    new = NewTopic(topic, num_partitions=first, replication_factor=rf, config=configs)
    admin.create_topics([new], request_timeout=180, operation_timeout=180)[topic].result(240)
    total = first
    while total < partitions:
        total = min(partitions, total + MAX_PARTITIONS_PER_OPERATION)
        fut = admin.create_partitions([NewPartitions(topic, total)], request_timeout=180, operation_timeout=180)
        deadline = time.monotonic() + 240
        while True:  # the topic may not be on the answering broker's image yet
            try:
                fut[topic].result(240)
                break
            except KafkaException as exc:
                if time.monotonic() > deadline or "UNKNOWN_TOPIC" not in str(exc):
                    raise
                time.sleep(1)
                fut = admin.create_partitions([NewPartitions(topic, total)], request_timeout=180,
                                              operation_timeout=180)  # fmt: skip


def hosted(dirs: list[Path], topic: str) -> list[int]:
    """Per broker: the topic's partition directories holding their partition.metadata (a
    broker writes it through its disk queue after creating the log: until the queue has
    drained, the broker is not idle)."""
    return [sum(1 for d in root.glob(f"{topic}-*/partition.metadata") if not d.parent.name.endswith("-delete"))
            for root in dirs]  # fmt: skip


def full_isr(admin: AdminClient, topic: str, partitions: int) -> int:
    """Partitions of `topic` with a leader and 3 replicas in sync, as Metadata says."""
    md = admin.list_topics(topic, timeout=30).topics.get(topic)
    if md is None or md.error is not None:
        return 0
    return sum(1 for p in md.partitions.values() if p.leader >= 0 and len(p.isrs) == 3)


def wait_hosted(cluster: Any, admin: AdminClient, topic: str, partitions: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    dirs = log_dirs(cluster)
    counts: list[int] = []
    isr = 0
    while time.monotonic() < deadline:
        counts = hosted(dirs, topic)
        if all(c == partitions for c in counts):
            with contextlib.suppress(KafkaException):
                isr = full_isr(admin, topic, partitions)
            if isr == partitions:
                return
        time.sleep(2)
    raise RuntimeError(f"{topic}: hosted {counts}, {isr} full ISRs of {partitions} after {timeout:.0f} s")


# ----------------------------------------------------------------------------- many partitions


@dataclass
class PartitionsRun:
    system: str  # "pykraft" or "mock"
    partitions: int
    create_s: float = float("nan")  # CreateTopics + CreatePartitions answered
    hosted_s: float = float("nan")  # every broker hosts every partition, every ISR full
    sends: int = 0
    errors: int = 0
    p50_ms: float = float("nan")
    p99_ms: float = float("nan")
    max_ms: float = float("nan")
    idle_cores: dict[int, float] = field(default_factory=dict)  # broker id -> cores
    idle_others: float = float("nan")
    load_sends: str = ""
    load_idle: str = ""


def mock_topic(admin: AdminClient, topic: str) -> int:
    """Have the mock auto-create `topic` (a Metadata request); its partition count (4). The
    mock answers CreateTopics with no controller (the request times out), so its topics
    cannot be made larger."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=5).topics.get(topic)
        if md is not None and md.error is None and md.partitions:
            return len(md.partitions)
    raise RuntimeError(f"the mock did not create {topic}")


def sequential_sends(run: PartitionsRun, bootstrap: str, topic: str, sends: int, work: Path) -> None:
    """One 100 B acks=all record at a time to a random partition, each waited for; the
    latency is produce() -> its delivery report, measured here."""
    conf = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "enable.idempotence": False,
            "logger": rd_logger(work)}  # fmt: skip
    producer = Producer(conf)
    payload = os.urandom(SEQ_MSG_BYTES)
    rng = random.Random(22)
    done: list[float] = []
    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is None:
            done.append(time.perf_counter())
        else:
            errors.append(err.name())

    latencies: list[float] = []
    run.load_sends = loadavg()
    for i in range(SEQ_WARMUP + sends):
        n_done, n_err = len(done), len(errors)
        t = time.perf_counter()
        producer.produce(topic, payload, partition=rng.randrange(run.partitions), on_delivery=on_delivery)
        while len(done) == n_done and len(errors) == n_err:
            producer.poll(1.0)
        if i >= SEQ_WARMUP:
            if len(done) > n_done:
                latencies.append(done[-1] - t)
            else:
                run.errors += 1
    producer.flush(10)
    run.sends = len(latencies)
    lat = sorted(latencies)
    run.p50_ms, run.p99_ms = percentile(lat, 0.5) * 1000, percentile(lat, 0.99) * 1000
    run.max_ms = lat[-1] * 1000 if lat else float("nan")
    if errors:
        print(f"    delivery errors: {errors[:5]} ({len(errors)})", flush=True)


def print_partitions_row(r: PartitionsRun) -> None:
    idle = " ".join(f"{b}:{c:.3f}" for b, c in r.idle_cores.items()) or "-"
    print(f"  {r.system:<8} {r.partitions:>6}  create {r.create_s:6.1f} s  hosted {r.hosted_s:6.1f} s  "
          f"sends {r.sends} (errors {r.errors})  p50 {r.p50_ms:6.2f}  p99 {r.p99_ms:7.2f}  max {r.max_ms:7.2f} ms  "
          f"[{r.load_sends}]  idle cores per broker {idle} (others {r.idle_others:.0%}) [{r.load_idle}]",
          flush=True)  # fmt: skip


def run_partitions(args: argparse.Namespace, work: Path) -> list[PartitionsRun]:
    runs: list[PartitionsRun] = []
    if args.mock:
        host, mock_bootstrap = mock_cluster(work)
        try:
            # The mock's row: the client's floor, on its auto-created topic (4 partitions).
            admin = AdminClient({"bootstrap.servers": mock_bootstrap, "logger": rd_logger(work)})
            topic = "mock-sequential"
            count = mock_topic(admin, topic)
            run = PartitionsRun("mock", count)
            sequential_sends(run, mock_bootstrap, topic, args.sequential_sends, work)
            print_partitions_row(run)
            runs.append(run)
        finally:
            del host
    for count in args.partition_counts:
        with shapes_cluster(work / f"cluster-p{count}", args.keep) as cluster:
            bootstrap = bootstrap_of(cluster)
            admin = AdminClient({"bootstrap.servers": bootstrap, "logger": rd_logger(work)})
            run = PartitionsRun("pykraft", count)
            topic = f"many-{count}"
            t0 = time.monotonic()
            create_big_topic(admin, topic, count, 3, {})
            run.create_s = time.monotonic() - t0
            wait_hosted(cluster, admin, topic, count, args.host_timeout)
            run.hosted_s = time.monotonic() - t0
            first = cluster.nodes[cluster.broker_ids[0]].pid
            spy = PySpy(first, args.profile / f"p{count}", "raw") if args.profile else None
            if spy:
                spy.start()
            sequential_sends(run, bootstrap, topic, args.sequential_sends, work)
            if spy:
                spy.stop()
            time.sleep(args.settle_seconds)  # the last follower fetches and queued checkpoints
            groups = broker_groups(cluster)
            run.load_idle = loadavg()
            spy = PySpy(first, args.profile / f"p{count}-idle", "raw") if args.profile else None
            if spy:
                spy.start()
            with CpuWindow(groups) as cpu:
                time.sleep(args.idle_seconds)
            if spy:
                spy.stop()
            run.idle_cores = {b: cpu.per_pid[cluster.nodes[b].pid] / cpu.elapsed for b in cluster.broker_ids}
            run.idle_others = cpu.others_share
            print_partitions_row(run)
            runs.append(run)
    return runs


def partitions_verdicts(runs: list[PartitionsRun]) -> list[tuple[str, bool | None, str]]:
    ours = sorted((r for r in runs if r.system == "pykraft"), key=lambda r: r.partitions)
    if len(ours) < 2:
        return [("p50 at the largest count <= 2x the smallest's", None, "needs two counts")]
    lo, hi = ours[0], ours[-1]
    ratio = hi.p50_ms / lo.p50_ms if lo.p50_ms > 0 else float("nan")
    out: list[tuple[str, bool | None, str]] = [
        (f"sequential acks=all p50 at {hi.partitions} <= {TARGET_P50_RATIO:g}x at {lo.partitions}",
         ratio <= TARGET_P50_RATIO and hi.errors == 0,
         f"{hi.p50_ms:.2f} vs {lo.p50_ms:.2f} ms = {ratio:.2f}x"),
    ]  # fmt: skip
    for r in ours:
        worst = max(r.idle_cores.values(), default=float("nan"))
        out.append((f"idle brokers < {TARGET_IDLE_CORES} cores each at {r.partitions} partitions",
                    worst < TARGET_IDLE_CORES, f"busiest {worst:.3f} cores"))  # fmt: skip
    return out


# ----------------------------------------------------------------------------- consume only


@dataclass
class ConsumePass:
    what: str  # "pykraft kcat cold", ...
    mb_s: float = float("nan")
    mb: float = 0.0
    broker_cpu_ms_per_mb: float = float("nan")
    broker_cores: float = float("nan")
    resident_before: float = float("nan")  # share of the leaders' segment bytes in the page cache
    load: str = ""
    note: str = ""


def segment_files(dirs: list[Path], topic: str) -> list[Path]:
    return [f for root in dirs for f in root.glob(f"{topic}-*/*") if f.is_file()]


def resident_share(files: list[Path]) -> float:
    """Share of the files' bytes in the page cache (util-linux fincore), nan without it."""
    exe = shutil.which("fincore")
    logs = [str(f) for f in files if f.suffix == ".log"]
    if exe is None or not logs:
        return float("nan")
    out = subprocess.run([exe, "--bytes", "--noheadings", "--raw", "--output", "RES,SIZE", *logs],
                         capture_output=True, text=True, check=False).stdout  # fmt: skip
    res = size = 0
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2:
            res, size = res + int(parts[0]), size + int(parts[1])
    return res / size if size else float("nan")


def evict(files: list[Path], how: str) -> None:
    """Out of the page cache: the files' pages (fadvise) or the whole machine's (drop-caches)."""
    os.sync()  # dirty pages cannot be dropped
    if how == "drop-caches":
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return
    for f in files:
        with contextlib.suppress(OSError):
            fd = os.open(f, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def fill_topic(bootstrap: str, topic: str, partitions: int, total_bytes: float, work: Path) -> tuple[int, float]:
    """Write `total_bytes` of 1 KiB values round-robin, acks=1, as fast as the client goes;
    (messages, seconds)."""
    conf = {"bootstrap.servers": bootstrap, "acks": "1", "logger": rd_logger(work), **PRODUCER_CONF}
    producer = Producer(conf)
    payload = os.urandom(MSG_BYTES)
    n = int(total_bytes // MSG_BYTES)
    failed: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(err.name())

    t0 = time.monotonic()
    i = 0
    while i < n:
        try:
            producer.produce(topic, payload, partition=i % partitions, on_delivery=on_delivery)
            i += 1
            if i % 10_000 == 0:
                producer.poll(0)
        except BufferError:
            producer.poll(0.005)
    left = producer.flush(600)
    if failed or left:
        raise RuntimeError(f"fill: {len(failed)} failed ({failed[:3]}), {left} not delivered")
    return n, time.monotonic() - t0


def wait_hw(bootstrap: str, topic: str, partitions: int, messages: int, work: Path, timeout: float = 600) -> None:
    """Until the high watermarks add up to `messages` (the followers have it all)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-hw", "logger": rd_logger(work)})
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            hw = sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
                     for p in range(partitions))  # fmt: skip
            if hw >= messages:
                return
            time.sleep(1)
        raise RuntimeError(f"{topic}: high watermarks {hw} of {messages} after {timeout} s")
    finally:
        c.close()


def kcat_pass(what: str, bootstrap: str, topic: str, partitions: int, groups: dict[str, list[int]],
              files: list[Path], min_seconds: float = 0.0) -> ConsumePass:  # fmt: skip
    p = ConsumePass(what, resident_before=resident_share(files), load=loadavg())
    run = kcat_consume_run(Run("x", 3, 3, partitions, "all", None), bootstrap, topic, min_seconds, groups)
    p.mb_s = run.kcat_mb_s or 0.0
    p.broker_cpu_ms_per_mb = run.kcat_broker_cpu_ms_per_mb
    p.broker_cores = run.kcat_broker_cores
    p.note = f"{run.kcat_passes} pass(es)"
    return p


def fast_pass(
    what: str,
    exe: Path | None,
    bootstrap: str,
    topic: str,
    partitions: int,
    groups: dict[str, list[int]],
    files: list[Path],
    min_seconds: float = 0.0,
) -> ConsumePass | None:
    """A pass of tests/perf/fast_consumer.c (None when it could not be built)."""
    if exe is None:
        return None
    p = ConsumePass(what, resident_before=resident_share(files), load=loadavg())
    run = fast_consume_run(Run("x", 3, 3, partitions, "all", None), exe, bootstrap, topic, min_seconds, groups)
    p.mb_s = run.rdk_mb_s or 0.0
    p.broker_cpu_ms_per_mb = run.rdk_broker_cpu_ms_per_mb
    p.broker_cores = run.rdk_broker_cores
    p.note = f"{run.rdk_passes} pass(es), client {run.rdk_client_cores:.2f} cores"
    return p


def confluent_pass(what: str, bootstrap: str, topic: str, partitions: int, groups: dict[str, list[int]],
                   files: list[Path], work: Path, min_seconds: float = 0.0) -> ConsumePass:  # fmt: skip
    system = "mock" if what.startswith("mock") else "pykraft"
    p = ConsumePass(what, resident_before=resident_share(files), load=loadavg())
    run = consume_run(Run(system, 3, 3, partitions, "all", None), bootstrap, topic, min_seconds, groups, work)
    p.mb_s = run.consume_mb_s or 0.0
    p.broker_cpu_ms_per_mb = run.consume_broker_cpu_ms_per_mb
    p.broker_cores = run.consume_broker_cores
    p.note = f"{run.consume_passes} pass(es), client {run.consume_client_cores:.2f} cores" + (
        "" if run.consume_complete else ", INCOMPLETE"
    )
    return p


def print_pass(p: ConsumePass) -> None:
    res = "-" if p.resident_before != p.resident_before else f"{p.resident_before:.0%}"
    print(f"  {p.what:<34} {p.mb_s:8.1f} MB/s  broker {p.broker_cpu_ms_per_mb:5.2f} ms/MB served "
          f"({p.broker_cores:.2f} cores)  cached before {res:>4}  {p.note}  [load {p.load}]", flush=True)  # fmt: skip


@dataclass
class ConsumeResult:
    gb: float
    fill_mb_s: float = float("nan")
    produce: dict[str, Any] = field(default_factory=dict)  # pykraft acks=all saturation (Run fields)
    mock_produce: dict[str, Any] = field(default_factory=dict)
    passes: list[ConsumePass] = field(default_factory=list)


def run_consume_only(args: argparse.Namespace, work: Path) -> ConsumeResult:
    result = ConsumeResult(args.consume_only_gb)
    free_gb = shutil.disk_usage(work).free / 1e9
    need_gb = args.consume_only_gb * 3 * 1.05 + 1  # RF 3, indexes, the acks=all topic
    if need_gb > free_gb - 2:
        gb = max(0.5, round((free_gb - 3) / 3.2, 1))
        print(f"  ({free_gb:.0f} GB free under {work}: {args.consume_only_gb:g} GB lowered to {gb:g} GB)", flush=True)
        result.gb = args.consume_only_gb = gb
    if args.mock:
        host, mock_bootstrap = mock_cluster(work)
        try:
            topic = "mock-consume"
            admin = AdminClient({"bootstrap.servers": mock_bootstrap, "logger": rd_logger(work)})
            parts = mock_topic(admin, topic)
            run = produce_run(Run("mock", 3, 1, parts, "all", None), mock_bootstrap, topic, args.seconds, {}, work)
            result.mock_produce = asdict(run)
            print(f"  mock acks=all produce {run.mb_s:.1f} MB/s (others {run.others_share:.0%}) [load {loadavg()}]")
            for p in (kcat_pass("mock kcat (memory)", mock_bootstrap, topic, parts, {}, [], args.mock_consume_seconds),
                      fast_pass("mock fast consumer (memory)", fast_consumer_exe(work), mock_bootstrap, topic, parts,
                                {}, [], args.mock_consume_seconds),
                      confluent_pass("mock consume() (memory)", mock_bootstrap, topic, parts, {}, [], work,
                                     args.mock_consume_seconds)):  # fmt: skip
                if p is not None:
                    print_pass(p)
                    result.passes.append(p)
        finally:
            del host
    with shapes_cluster(work / "cluster-consume", args.keep) as cluster:
        bootstrap = bootstrap_of(cluster)
        groups = broker_groups(cluster)
        admin = AdminClient({"bootstrap.servers": bootstrap, "logger": rd_logger(work)})
        # pykraft's own acks=all rate, same shape, for the 2x target.
        ptopic = "acks-all"
        create_big_topic(admin, ptopic, CONSUME_PARTITIONS, 3, {"retention.bytes": str(100 << 20),
                                                                 "segment.bytes": str(50 << 20)})  # fmt: skip
        wait_for_leaders(bootstrap, ptopic, CONSUME_PARTITIONS, work)
        run = produce_run(Run("pykraft", 3, 3, CONSUME_PARTITIONS, "all", None), bootstrap, ptopic, args.seconds,
                          groups, work)  # fmt: skip
        result.produce = asdict(run)
        print(f"  pykraft acks=all produce {run.mb_s:.1f} MB/s, {run.broker_cpu_ms_per_mb:.2f} ms broker CPU/MB "
              f"(others {run.others_share:.0%}) [load {loadavg()}]", flush=True)  # fmt: skip
        admin.delete_topics([ptopic])[ptopic].result(60)

        topic = "consume-only"
        create_big_topic(admin, topic, CONSUME_PARTITIONS, 3, {"retention.ms": "-1", "retention.bytes": "-1"})
        wait_for_leaders(bootstrap, topic, CONSUME_PARTITIONS, work)
        msgs, secs = fill_topic(bootstrap, topic, CONSUME_PARTITIONS, args.consume_only_gb * 1e9, work)
        wait_hw(bootstrap, topic, CONSUME_PARTITIONS, msgs, work)
        result.fill_mb_s = msgs * MSG_BYTES / MB / secs
        print(f"  written (not measured): {msgs * MSG_BYTES / 1e9:.2f} GB in {secs:.0f} s ({result.fill_mb_s:.1f} "
              f"MB/s acks=1), high watermarks at the end [load {loadavg()}]", flush=True)  # fmt: skip
        files = segment_files(log_dirs(cluster), topic)
        leader_files = leaders_files(admin, cluster, topic)
        evict(files, args.cold)
        cold = kcat_pass(f"pykraft kcat cold ({args.cold})", bootstrap, topic, CONSUME_PARTITIONS, groups,
                         leader_files)  # fmt: skip
        print_pass(cold)
        warm = kcat_pass("pykraft kcat page cache", bootstrap, topic, CONSUME_PARTITIONS, groups, leader_files)
        print_pass(warm)
        result.passes += [cold, warm]
        exe = fast_consumer_exe(work)
        if exe is not None:
            evict(files, args.cold)
            for what in (f"pykraft fast consumer cold ({args.cold})", "pykraft fast consumer page cache"):
                fast = fast_pass(what, exe, bootstrap, topic, CONSUME_PARTITIONS, groups, leader_files)
                assert fast is not None
                print_pass(fast)
                result.passes.append(fast)
        py = confluent_pass("pykraft consume() page cache", bootstrap, topic, CONSUME_PARTITIONS, groups,
                            leader_files, work)  # fmt: skip
        print_pass(py)
        result.passes.append(py)
    return result


def leaders_files(admin: AdminClient, cluster: Any, topic: str) -> list[Path]:
    """The segment files of each partition's leader replica (what consumers are served from)."""
    md = admin.list_topics(topic, timeout=30).topics[topic]
    dirs = {b: Path(cluster.nodes[b].plan.properties["log.dirs"]) for b in cluster.broker_ids}
    return [f for p in md.partitions.values() for f in (dirs[p.leader] / f"{topic}-{p.id}").glob("*") if f.is_file()]


def consume_verdicts(res: ConsumeResult) -> list[tuple[str, bool | None, str]]:
    """Judged on the fast consumer (fast_consumer.c) when it ran, else on kcat."""
    by = {p.what.split(" (")[0]: p for p in res.passes}
    client = "fast consumer" if "pykraft fast consumer page cache" in by else "kcat"
    warm = by.get(f"pykraft {client} page cache")
    mock = by.get(f"mock {client}")
    out: list[tuple[str, bool | None, str]] = []
    if warm is None:
        return [(f"page-cache {client} figures", None, "no pykraft run")]
    if mock is not None and mock.mb_s:
        out.append((f"page-cache {client} >= {TARGET_KCAT_MOCK_SHARE}x the mock's {client}",
                    warm.mb_s >= TARGET_KCAT_MOCK_SHARE * mock.mb_s,
                    f"{warm.mb_s:.1f} vs {mock.mb_s:.1f} MB/s = {warm.mb_s / mock.mb_s:.2f}x"))  # fmt: skip
    prod = res.produce.get("mb_s", 0.0)
    if prod:
        out.append((f"page-cache {client} >= {TARGET_CONSUME_RATIO:g}x pykraft acks=all produce",
                    warm.mb_s >= TARGET_CONSUME_RATIO * prod, f"{warm.mb_s:.1f} vs {prod:.1f} MB/s = "
                    f"{warm.mb_s / prod:.2f}x"))  # fmt: skip
    for p in (warm, by.get(f"pykraft {client} cold")):
        if p is not None:
            out.append((f"broker CPU < {TARGET_CPU_MS_PER_MB_SERVED:g} ms/MB served ({p.what})",
                        p.broker_cpu_ms_per_mb < TARGET_CPU_MS_PER_MB_SERVED,
                        f"{p.broker_cpu_ms_per_mb:.2f} ms/MB"))  # fmt: skip
    return out


# ----------------------------------------------------------------------------- main


def print_verdicts(results: list[tuple[str, bool | None, str]]) -> None:
    for name, ok, figure in results:
        verdict = "n/a " if ok is None else ("PASS" if ok else "MISS")
        print(f"  {verdict}  {name:<62} {figure}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=["partitions", "consume"], default=None, help="run one shape (default both)")
    ap.add_argument("--partition-counts", type=int, nargs="+", default=[100, 3000, 10000])
    ap.add_argument("--sequential-sends", type=int, default=1000, help="measured sends per count (default 1000)")
    ap.add_argument("--idle-seconds", type=float, default=20.0, help="idle broker CPU window (default 20)")
    ap.add_argument("--settle-seconds", type=float, default=60.0, help="wait after the sends, before idle CPU")
    ap.add_argument("--host-timeout", type=float, default=600.0, help="s to wait for every log and full ISRs")
    ap.add_argument("--profile", type=Path, default=None,
                    help="py-spy the first broker: sends into DIR/p<count>, idle into DIR/p<count>-idle")  # fmt: skip
    ap.add_argument("--consume-only-gb", type=float, default=5.0, help="GB of values on disk to read (default 5)")
    ap.add_argument("--cold", choices=["fadvise", "drop-caches"], default="fadvise",
                    help="how the cold pass empties the page cache (default: the topic's files only)")  # fmt: skip
    ap.add_argument("--seconds", type=float, default=10.0, help="acks=all saturation runs (default 10)")
    ap.add_argument("--mock-consume-seconds", type=float, default=10.0, help="mock consume passes (default 10)")
    ap.add_argument("--no-mock", dest="mock", action="store_false", help="skip the librdkafka mock cluster")
    ap.add_argument("--dir", type=Path, default=None, help="parent of the temp dir (default: $TMPDIR)")
    ap.add_argument("--keep", action="store_true", help="keep the clusters' directories")
    ap.add_argument("--json-out", type=Path, default=None)
    args = ap.parse_args()
    args.partition_counts = sorted(set(args.partition_counts))
    work = Path(tempfile.mkdtemp(prefix="pykraft-bench-shapes-", dir=args.dir))
    t_begin = time.monotonic()
    import confluent_kafka

    print(f"pykraft data-plane shapes, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {code_version()}")
    print(f"machine: {os.cpu_count()} CPUs, {uptime()} (2 cores shared with others); confluent-kafka "
          f"{confluent_kafka.version()[0]}, librdkafka {confluent_kafka.libversion()[0]}; work dir {work}; "
          f"repo {REPO}", flush=True)  # fmt: skip
    out: dict[str, Any] = {}
    results: list[tuple[str, bool | None, str]] = []
    try:
        if args.only in (None, "partitions"):
            print(f"\nMany partitions: RF 3, sequential acks=all 100 B sends to random partitions "
                  f"({args.sequential_sends} measured), idle brokers over {args.idle_seconds:g} s",
                  flush=True)  # fmt: skip
            pruns = run_partitions(args, work)
            out["partitions"] = [asdict(r) for r in pruns]
            results += partitions_verdicts(pruns)
        if args.only in (None, "consume"):
            print(f"\nConsume only: {args.consume_only_gb:g} GB of 1 KiB values, {CONSUME_PARTITIONS} partitions RF 3",
                  flush=True)  # fmt: skip
            cres = run_consume_only(args, work)
            out["consume"] = asdict(cres)
            results += consume_verdicts(cres)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print("\nTargets (issue 22):")
    print_verdicts(results)
    print(f"\nend: {uptime()}; wall time {time.monotonic() - t_begin:.0f} s", flush=True)
    if args.json_out:
        out["verdicts"] = [{"target": n, "ok": ok, "figure": f} for n, ok, f in results]
        args.json_out.write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
