"""Data-plane benchmark: librdkafka's clients against a real pykraft cluster and, in the same
run, against librdkafka's built-in mock cluster (`test.mock.num.brokers=3`: in memory, no
replication, no disk), which is the ceiling the client itself sets on this machine. The
produce runs use tests/perf/fast_producer.c (librdkafka's producer in C, built here with gcc)
unless `--producer python` asks for confluent-kafka's Python loop, whose ~5 µs of Python per
message took about half of the two cores the brokers also need.

    PYTHONPATH=. .venv/bin/python tests/perf/bench_dataplane.py                  # the full matrix (~10 min)
    PYTHONPATH=. .venv/bin/python tests/perf/bench_dataplane.py --quick          # smoke run, < 60 s
    PYTHONPATH=. .venv/bin/python tests/perf/bench_dataplane.py --profile DIR    # + py-spy of the busiest broker
    ... --brokers 1 3 --partitions-per-broker 1 3 6 --seconds 10 --json-out r.json

What runs (1 KiB messages, random bytes, no compression, no keys, explicit round-robin over
the partitions, librdkafka's producer defaults otherwise: linger.ms 5, batch.size 1,000,000,
idempotence off):

* For each cluster shape (N brokers + 3 controllers, RF = min(3, N), min.insync.replicas =
  min(2, N), started with tests/integration/metadata_cluster.py's `start_cluster` on free
  ports, fsync as the broker does it) and each partitions-per-broker count: one topic per run,
  created over REST and deleted over REST after the run (`file.delete.delay.ms=0`); its
  `retention.bytes` / `segment.bytes` keep all its replicas within --disk-budget-gb (the
  brokers roll and delete segments during the run; lowered when the disk has less free).
  A producer warms up (2,000 messages), then produces as fast as it can for
  --seconds, then flushes: MB/s = acknowledged bytes / (start .. last delivery report), p50/p99
  of the delivery reports' latency (`Message.latency()`: produce() call -> acknowledgement; at
  saturation this is mostly time queued in the client, which is full by design). acks=1 and
  acks=all. After the acks=all run a consumer assigns every partition from its log start
  offset and reads to the high watermark taken at the start (MB/s of values).
* Rate-limited acks=all runs at a fraction (default 1/2) of the measured acks=all maximum on
  the same shape, for the latency target (the producer offers 1 ms credits of messages).
* Broker CPU: utime+stime of every broker process from /proc/<pid>/stat, the delta over the
  run (warm-up excluded), summed over the brokers, per MB acknowledged to the client (so
  replication, follower fetches, fsync and the listener are all in it). Also the cores used
  by the brokers, the controllers and this process (the client: Python + librdkafka threads;
  for the mock, the mock brokers run in here too) and by everything else on the machine.
* The mock cluster: the same producer and consumer code against its auto-created topic
  (4 partitions). The mock keeps only the last ~5 MB of each partition (its log start moves
  up), so its consumer repeats passes over what is kept until --consume-seconds have passed.
  After the pykraft runs, a new mock cluster is offered pykraft's rate-limited rates too, so
  that pykraft's p99 at half its maximum has the mock's p99 at the same offered rate beside it.
* With --profile DIR: py-spy (`record --nonblocking --rate 100`) on the broker that used the
  most CPU in the acks=1 run of the same shape, during the acks=all saturation run of the
  largest broker count; speedscope JSON (open in https://www.speedscope.app) or an SVG flame
  graph (--profile-format flamegraph), plus the top functions printed below the tables.

* kcat consume (issue 22: a client that can go faster than the Python consumer): after the
  consumer above, kcat reads every partition from its log start to the end into a pipe
  that is dropped; MB/s from its first to its last byte; broker CPU per MB served. The same
  against the mock.
* Fast consumer (tests/perf/fast_consumer.c, built here with gcc and Debian's
  librdkafka-dev): librdkafka's consumer reading every partition to its end in batches,
  printing nothing per message, so neither kcat's output nor a pipe reader sets the rate;
  the same against the mock. The consumption targets are judged on it (on kcat when it
  cannot be built). With --profile DIR, py-spy records the busiest broker during it
  (DIR/consume).

Targets (issue): acks=all RF 3 >= 100 MB/s and >= 1/3 of the mock cluster's acks=all rate in
the same run; <= 10 ms broker CPU per MB ingested; p99 produce latency < 20 ms at half the
maximum rate; consume >= 2x the produce rate; the fast consumer >= 0.8x the mock's with the
same client and >= 2x the produce rate, < 1 ms broker CPU per MB served. Judged on the largest broker count with RF 3,
on its partitions-per-broker count with the best acks=all rate.

Many partitions (sequential acks=all latency, idle brokers) and a consume-only run over GBs
already on disk: tests/perf/bench_dataplane_shapes.py.

The machine has 2 cores shared with other engineers: the load average at the start and end,
and every run's share of CPU used by other processes, are printed with the figures.
Not collected by pytest (tests/perf/conftest.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))
sys.path.insert(0, str(REPO))

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

MSG_BYTES = 1024
MB = 1e6  # MB/s are 10^6 bytes per second (of message values)
TICKS = os.sysconf("SC_CLK_TCK")
CPUS = os.cpu_count() or 1
WARMUP_MESSAGES = 2000

TARGET_ACKS_ALL_MB_S = 100.0
TARGET_MOCK_SHARE = 1 / 3
TARGET_CPU_MS_PER_MB = 5.0  # issue 22 (RF 3, acks=all, saturated); an earlier issue asked for 10
TARGET_P99_MS = 20.0
TARGET_CONSUME_RATIO = 2.0
TARGET_KCAT_MOCK_SHARE = 0.8  # consumption from the page cache vs the mock, same fast client
TARGET_CPU_MS_PER_MB_SERVED = 1.0

# librdkafka's own log lines (connection refused when the mock closes, etc.) go to a file.
RDKAFKA_LOG = logging.getLogger("bench.rdkafka")
RDKAFKA_LOG.propagate = False

# Producer settings: librdkafka's defaults, written out so that the table's reader knows them.
PRODUCER_CONF: dict[str, Any] = {
    "enable.idempotence": False,
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "compression.type": "none",
    "queue.buffering.max.messages": 100_000,
    "queue.buffering.max.kbytes": 1_048_576,
}


# ----------------------------------------------------------------------------- CPU accounting


def proc_ticks(pid: int | str) -> int:
    """utime + stime of a process (all its threads), in clock ticks; 0 if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])  # fields 14 and 15 of stat (1-based)


def proc_runq_s(pid: int) -> float:
    """Seconds the threads of a process have spent runnable but waiting for a CPU (the second
    field of /proc/PID/task/TID/schedstat, ns); threads that ended are not counted."""
    total = 0
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return 0.0
    for task in tasks:
        try:
            total += int((task / "schedstat").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return total / 1e9


def machine_ticks() -> tuple[int, int]:
    """(all, busy) jiffies summed over the CPUs, from /proc/stat (busy = all - idle - iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    total = sum(fields[:8])  # user nice system idle iowait irq softirq steal (guest is in user)
    return total, total - fields[3] - fields[4]


def loadavg() -> str:
    return " / ".join(Path("/proc/loadavg").read_text().split()[:3])


@dataclass
class CpuWindow:
    """CPU used over a window by groups of processes, and by everything else on the machine."""

    groups: dict[str, list[int]]
    t0: float = 0.0
    start: dict[str, int] = field(default_factory=dict)
    machine0: tuple[int, int] = (0, 0)
    per_pid0: dict[int, int] = field(default_factory=dict)
    runq0: dict[int, float] = field(default_factory=dict)
    active: float = 0.0  # seconds of the window spent moving data (set by the consume passes)

    def __enter__(self) -> CpuWindow:
        self.t0 = time.monotonic()
        self.machine0 = machine_ticks()
        self.per_pid0 = {pid: proc_ticks(pid) for pids in self.groups.values() for pid in pids}
        self.runq0 = {pid: proc_runq_s(pid) for pid in self.groups.get("brokers", [])}
        self.start = {"self": proc_ticks("self")}
        return self

    def __exit__(self, *exc: object) -> None:
        self.elapsed = time.monotonic() - self.t0
        machine1 = machine_ticks()
        self.per_pid = {pid: (proc_ticks(pid) - t0) / TICKS for pid, t0 in self.per_pid0.items()}
        # The brokers' threads waiting for a CPU, in cores (seconds of waiting per second).
        self.broker_runq = sum(proc_runq_s(pid) - w0 for pid, w0 in self.runq0.items()) / max(1e-9, self.elapsed)
        self.seconds = {name: sum(self.per_pid[p] for p in pids) for name, pids in self.groups.items()}
        self.seconds["client"] = (proc_ticks("self") - self.start["self"]) / TICKS
        busy = (machine1[1] - self.machine0[1]) / TICKS
        ours = sum(self.seconds.values())
        # Everything else: the machine's busy time that none of our processes account for
        # (other engineers' work, and kernel threads such as IO completion).
        self.others_share = max(0.0, busy - ours) / max(1e-9, self.elapsed * CPUS)

    def cores(self, name: str) -> float:
        return self.seconds.get(name, 0.0) / max(1e-9, self.elapsed)


# ----------------------------------------------------------------------------- clients


def rd_logger(work: Path) -> logging.Logger:
    if not RDKAFKA_LOG.handlers:
        handler = logging.FileHandler(work / "rdkafka.log")
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        RDKAFKA_LOG.addHandler(handler)
        RDKAFKA_LOG.setLevel(logging.INFO)
    return RDKAFKA_LOG


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))]


@dataclass
class Run:
    """One produce run (and the consume run after it, when there was one)."""

    system: str  # "pykraft" or "mock"
    brokers: int
    rf: int
    partitions: int
    acks: str
    offered_mb_s: float | None  # None: saturation
    seconds: float = 0.0  # produce start -> last delivery report
    mb_s: float = 0.0
    msgs: int = 0
    errors: int = 0
    error_names: dict[str, int] = field(default_factory=dict)
    p50_ms: float = float("nan")
    p99_ms: float = float("nan")
    max_ms: float = float("nan")
    broker_cpu_s: float = float("nan")
    broker_cpu_ms_per_mb: float = float("nan")
    broker_cores: float = float("nan")
    controller_cores: float = float("nan")
    client_cores: float = 0.0
    others_share: float = 0.0
    per_broker_cpu_s: dict[int, float] = field(default_factory=dict)
    consume_mb_s: float | None = None
    consume_passes: int = 0
    consume_complete: bool = True
    consume_broker_cpu_ms_per_mb: float = float("nan")
    consume_broker_cores: float = float("nan")
    consume_client_cores: float = float("nan")
    kcat_mb_s: float | None = None  # kcat -C to a pipe read and dropped: the broker's serving rate
    kcat_passes: int = 0
    kcat_broker_cpu_ms_per_mb: float = float("nan")
    kcat_broker_cores: float = float("nan")
    rdk_mb_s: float | None = None  # tests/perf/fast_consumer.c: librdkafka with no per-message output
    rdk_passes: int = 0
    rdk_broker_cpu_ms_per_mb: float = float("nan")
    rdk_broker_cores: float = float("nan")
    rdk_client_cores: float = float("nan")
    load1: float = 0.0
    idle_broker_cores: float = float("nan")  # with the topic created, before any message
    broker_runq: float = float("nan")  # the brokers' threads runnable and waiting for a CPU, in cores
    note: str = ""

    @property
    def label(self) -> str:
        if self.system == "mock":
            return f"librdkafka mock, 3 brokers, {self.partitions} partitions"
        ppb = self.partitions // self.brokers
        return f"pykraft {self.brokers}b RF{self.rf} {self.partitions}p ({ppb}/broker)"


def produce_run(
    run: Run,
    bootstrap: str,
    topic: str,
    seconds: float,
    groups: dict[str, list[int]],
    work: Path,
    rate_msgs_s: float | None = None,
    profile: tuple[int, Path, str] | None = None,
) -> Run:
    """Produce 1 KiB messages round-robin over the topic's partitions for `seconds`, as fast as
    possible or at `rate_msgs_s`, then flush; fill the produce figures of `run`. With
    `--producer c` (FAST_PRODUCER set) tests/perf/fast_producer.c does it."""
    if FAST_PRODUCER is not None:
        return fast_produce_run(run, FAST_PRODUCER, bootstrap, topic, seconds, groups, rate_msgs_s, profile)
    latencies: list[float] = []
    errors: Counter[str] = Counter()

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors[err.name()] += 1
        else:
            latencies.append(msg.latency())

    producer = Producer({"bootstrap.servers": bootstrap, "acks": run.acks, "logger": rd_logger(work), **PRODUCER_CONF})
    payload = os.urandom(MSG_BYTES)
    partitions = run.partitions

    def send(i: int) -> bool:
        try:
            producer.produce(topic, payload, partition=i % partitions, on_delivery=on_delivery)
        except BufferError:  # the client's queue is full (100,000 messages): wait for acks
            producer.poll(0.0005)
            return False
        return True

    # Warm-up: connections, metadata, the first batches; not measured.
    i = 0
    while i < WARMUP_MESSAGES:
        i += send(i)
    producer.flush(60)
    latencies.clear()
    errors.clear()

    spy = PySpy(*profile) if profile else None
    if spy:
        spy.start()
    run.load1 = os.getloadavg()[0]
    with CpuWindow(groups) as cpu:
        t0 = time.monotonic()
        end = t0 + seconds
        sent = 0
        if rate_msgs_s is None:
            while True:
                if send(sent):
                    sent += 1
                    if sent % 1000:
                        continue
                    producer.poll(0)
                if time.monotonic() >= end:  # every 1000 messages, and while the queue is full
                    break
        else:
            while True:
                now = time.monotonic()
                if now >= end:
                    break
                due = int((now - t0) * rate_msgs_s)  # 1 ms credits: bursts of rate/1000 messages
                while sent < due:
                    if not send(sent):
                        break
                    sent += 1
                producer.poll(0.001)
        remaining = producer.flush(120)
        t_last = time.monotonic()
    if spy:
        spy.stop()
    run.seconds = t_last - t0
    run.msgs = len(latencies)
    run.errors = sum(errors.values()) + remaining
    run.error_names = dict(errors) | ({"NOT_DELIVERED_IN_120S": remaining} if remaining else {})
    run.mb_s = run.msgs * MSG_BYTES / MB / run.seconds
    lat = sorted(latencies)
    run.p50_ms, run.p99_ms = percentile(lat, 0.5) * 1000, percentile(lat, 0.99) * 1000
    run.max_ms = (lat[-1] * 1000) if lat else float("nan")
    mb = run.msgs * MSG_BYTES / MB
    run.client_cores = cpu.cores("client")
    run.others_share = cpu.others_share
    _fill_broker_cpu(run, cpu, groups, mb)
    return run


def _fill_broker_cpu(run: Run, cpu: CpuWindow, groups: dict[str, list[int]], mb: float) -> None:
    """The brokers' and controllers' share of a produce run's CPU window (`mb` acknowledged)."""
    if "brokers" in groups:
        run.broker_cpu_s = cpu.seconds["brokers"]
        run.broker_cpu_ms_per_mb = run.broker_cpu_s * 1000 / mb if mb else float("nan")
        run.broker_cores = cpu.cores("brokers")
        run.broker_runq = cpu.broker_runq
        run.controller_cores = cpu.cores("controllers")
        run.per_broker_cpu_s = {pid: round(cpu.per_pid[pid], 2) for pid in groups["brokers"]}


# --producer c: tests/perf/fast_producer.c, built in main().
FAST_PRODUCER: Path | None = None


def fast_produce_run(
    run: Run,
    exe: Path,
    bootstrap: str,
    topic: str,
    seconds: float,
    groups: dict[str, list[int]],
    rate_msgs_s: float | None,
    profile: tuple[int, Path, str] | None,
) -> Run:
    """`produce_run` by fast_producer (librdkafka's producer in C, the same settings, the
    same warm-up, round-robin and 1 ms rate credits, no Python per message). Its CPU over
    the measured window is the client's, with this process's (where the mock runs)."""
    settings = rdkafka_args({"acks": run.acks, **PRODUCER_CONF})
    cmd = [str(exe), bootstrap, topic, str(run.partitions), str(seconds), str(rate_msgs_s or 0),
           str(WARMUP_MESSAGES), str(MSG_BYTES), *settings]  # fmt: skip
    child = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # noqa: S603
    assert child.stdin is not None and child.stdout is not None
    try:
        ready = child.stdout.readline().strip()
        if ready != "ready":
            raise RuntimeError(f"fast_producer did not warm up (exit {child.wait()})")
        spy = PySpy(*profile) if profile else None
        if spy:
            spy.start()
        run.load1 = os.getloadavg()[0]
        with CpuWindow(groups) as cpu:
            child.stdin.write("go\n")
            child.stdin.flush()
            line = child.stdout.readline()
        if spy:
            spy.stop()
        if child.wait(timeout=60) != 0 or not line:
            raise RuntimeError(f"fast_producer failed ({child.returncode})")
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    out = json.loads(line)
    run.seconds = float(out["seconds"])
    run.msgs = int(out["acked"])
    remaining = int(out["not_delivered"])
    run.errors = int(out["errors"]) + remaining
    run.error_names = dict(out["error_names"]) | ({"NOT_DELIVERED_IN_120S": remaining} if remaining else {})
    run.mb_s = run.msgs * MSG_BYTES / MB / run.seconds
    run.p50_ms, run.p99_ms, run.max_ms = (float(out[k]) if out[k] >= 0 else float("nan")
                                          for k in ("p50_ms", "p99_ms", "max_ms"))  # fmt: skip
    mb = run.msgs * MSG_BYTES / MB
    run.client_cores = (cpu.seconds["client"] + float(out["cpu_s"])) / max(1e-9, cpu.elapsed)
    run.others_share = max(0.0, cpu.others_share - float(out["cpu_s"]) / max(1e-9, cpu.elapsed * CPUS))
    _fill_broker_cpu(run, cpu, groups, mb)
    return run


def consume_run(
    run: Run, bootstrap: str, topic: str, min_seconds: float, groups: dict[str, list[int]], work: Path
) -> Run:
    """Assign every partition at its log start offset and read to the high watermark taken at
    the start; repeat such passes until `min_seconds` have passed (one pass at least)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-no-commits",  # required by the client; no subscribe, no commits
            "enable.auto.commit": False,
            "logger": rd_logger(work),
        }
    )
    try:
        marks = {}
        for p in range(run.partitions):
            marks[p] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
        size = 0  # value bytes in the rate (each pass's first batch left out)
        served = 0  # all value bytes read, for the broker's CPU per MB
        passes = 0
        complete = True
        active = 0.0  # seconds from each pass's first message to its last one
        with CpuWindow(groups) as cpu:
            t0 = time.monotonic()
            while passes == 0 or time.monotonic() - t0 < min_seconds:
                low_now = {p: marks[p][0] for p in marks}
                if run.system == "mock":  # the mock drops old data: start where it starts now
                    for p in marks:
                        tp = TopicPartition(topic, p)
                        low_now[p] = consumer.get_watermark_offsets(tp, timeout=10, cached=False)[0]
                pending = {p for p in marks if marks[p][1] > low_now[p]}
                consumer.assign([TopicPartition(topic, p, low_now[p]) for p in marks])
                last_progress = time.monotonic()
                first_at: float | None = None
                while pending:
                    batch = consumer.consume(num_messages=10000, timeout=0.2)
                    got = 0
                    for m in batch:
                        if m.error() is not None:
                            continue
                        got += len(m.value())
                        p = m.partition()
                        if p in pending and m.offset() + 1 >= marks[p][1]:
                            pending.discard(p)
                    served += got
                    if batch:
                        last_progress = time.monotonic()
                        if first_at is None:
                            first_at = last_progress  # the rate runs from here: this batch is not in it
                        else:
                            size += got
                    elif time.monotonic() - last_progress > 15:
                        complete = False
                        break
                if first_at is not None:
                    active += last_progress - first_at
                consumer.unassign()
                passes += 1
                if not complete:
                    break
        # Rate while data flows: without the client's start (metadata, offsets, first fetch)
        # and, on the mock, the long poll at the end of each pass (fetch.wait.max.ms).
        run.consume_mb_s = size / MB / active if active > 0 else 0.0
        run.consume_passes = passes
        run.consume_complete = complete
        run.consume_client_cores = cpu.cores("client")
        if "brokers" in groups and served:
            run.consume_broker_cpu_ms_per_mb = cpu.seconds["brokers"] * 1000 / (served / MB)
            run.consume_broker_cores = cpu.cores("brokers")
    finally:
        consumer.close()
    return run


def wait_for_leaders(bootstrap: str, topic: str, partitions: int, work: Path, timeout: float = 60) -> None:
    """Until a Metadata request (what the producer sends) shows a leader for every partition."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": rd_logger(work)})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(KafkaException):
            md = admin.list_topics(topic, timeout=5).topics.get(topic)
            if (
                md is not None
                and md.error is None
                and len(md.partitions) == partitions
                and all(p.leader >= 0 and p.error is None for p in md.partitions.values())
            ):
                return
        time.sleep(0.2)
    raise RuntimeError(f"topic {topic}: not every partition has a leader after {timeout} s")


# ----------------------------------------------------------------------------- py-spy


class PySpy:
    """py-spy record on one pid for the duration of a run."""

    def __init__(self, pid: int, directory: Path, fmt: str) -> None:
        self.pid = pid
        directory.mkdir(parents=True, exist_ok=True)
        suffix = {"speedscope": "speedscope.json", "flamegraph": "svg", "raw": "txt"}[fmt]
        self.out = directory / f"broker-pid{pid}.{suffix}"
        self.fmt = fmt
        self.proc: subprocess.Popen[bytes] | None = None

    @staticmethod
    def exe() -> str | None:
        return shutil.which("py-spy") or (
            str(Path(sys.executable).with_name("py-spy")) if Path(sys.executable).with_name("py-spy").exists() else None
        )

    def start(self) -> None:
        exe = self.exe()
        if exe is None:
            print("py-spy not found: no profile", flush=True)
            return
        cmd = [exe, "record", "--pid", str(self.pid), "--rate", "100", "--nonblocking",
               "--format", self.fmt, "-o", str(self.out)]  # fmt: skip
        self.log = self.out.with_suffix(".py-spy.log")
        self.proc = subprocess.Popen(cmd, stdout=self.log.open("wb"), stderr=subprocess.STDOUT)  # noqa: S603
        time.sleep(0.5)  # attached before the measured part starts

    def stop(self) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, signal.SIGINT)  # py-spy writes its output on SIGINT
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def _short(name: str, file: str, line: int | None = None) -> str:
    for marker in (str(REPO) + "/", "site-packages/"):
        if marker in file:
            file = file.split(marker, 1)[1]
            break
    else:
        if "/lib/python" in file:
            file = "stdlib/" + file.rsplit("/", 1)[-1]
    return f"{name} ({file}{':' + str(line) if line else ''})"


def summarize_speedscope(path: Path, top: int = 25) -> dict[str, Any]:
    """Self and inclusive shares of the samples per function (all threads) from py-spy's
    speedscope file."""
    data = json.loads(path.read_text())
    frames = [_short(f["name"], f.get("file", "?")) for f in data["shared"]["frames"]]
    self_c: Counter[str] = Counter()
    incl_c: Counter[str] = Counter()
    total = 0.0
    count = 0
    for prof in data["profiles"]:
        for stack, weight in zip(prof["samples"], prof["weights"], strict=True):
            if not stack:
                continue
            total += weight
            count += 1
            self_c[frames[stack[-1]]] += weight
            for name in {frames[i] for i in stack}:
                incl_c[name] += weight
    return {
        "file": str(path),
        "samples": count,
        "self_pct": [(n, round(100 * c / max(1, total), 1)) for n, c in self_c.most_common(top)],
        # Frames in (nearly) every sample are the entry stack (runpy, cli, the event loop): left out.
        "inclusive_pct": [(n, round(100 * c / max(1, total), 1)) for n, c in incl_c.most_common() if c < 0.9 * total][
            :top
        ],
    }


# ----------------------------------------------------------------------------- the two systems


def mock_cluster(work: Path) -> tuple[Producer, str]:
    """A client hosting librdkafka's mock cluster (3 brokers) and its bootstrap address."""
    lines: list[str] = []

    class Grab(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    grab_log = logging.getLogger("bench.mock-bootstrap")
    grab_log.propagate = False
    grab = Grab()
    grab_log.addHandler(grab)
    grab_log.setLevel(logging.DEBUG)
    host = Producer({"test.mock.num.brokers": 3, "debug": "mock", "logger": grab_log})
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        host.poll(0.1)
        for line in lines:
            if "bootstrap.servers=" in line:
                grab_log.removeHandler(grab)
                return host, line.split("bootstrap.servers=", 1)[1].split()[0]
    raise RuntimeError("the mock cluster did not report its bootstrap servers")


def kcat_consume_run(
    run: Run,
    bootstrap: str,
    topic: str,
    min_seconds: float,
    groups: dict[str, list[int]],
    profile: tuple[int, Path, str] | None = None,
) -> Run:
    """Consumption by kcat (librdkafka, C): every partition from its log start to the end
    (`-e`), only the values printed (`-f %s`) into a pipe this process reads in 1 MiB chunks
    and drops. MB/s = value bytes / (first byte .. last byte) per pass, so kcat's start
    (metadata, offsets) is left out; passes repeat until `min_seconds` have passed. Broker
    CPU counts the whole window. kcat's per-message output and the pipe reader cost more than
    the brokers do; `fast_consume_run` measures without them."""
    exe = shutil.which("kcat")
    if exe is None:
        return run

    def one_pass() -> tuple[int, float]:
        cmd = [exe, "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%s"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)  # noqa: S603
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        first: float | None = None
        got = 0
        while chunk := os.read(fd, 1 << 20):
            if first is None:
                first = time.monotonic()
            got += len(chunk)
        last = time.monotonic()
        proc.wait(timeout=60)
        return (got, last - first) if first is not None else (0, 0.0)

    mb_s, passes, cpu = _consume_passes(one_pass, min_seconds, groups, profile)
    run.kcat_mb_s, run.kcat_passes = mb_s, passes
    if "brokers" in groups and mb_s:
        run.kcat_broker_cpu_ms_per_mb = cpu.seconds["brokers"] * 1000 / (mb_s * cpu.active)
        run.kcat_broker_cores = cpu.cores("brokers")
    return run


FAST_CONSUMER_C = Path(__file__).resolve().parent / "fast_consumer.c"
FAST_PRODUCER_C = Path(__file__).resolve().parent / "fast_producer.c"


def bundled_librdkafka() -> Path | None:
    """The librdkafka that confluent-kafka's wheel carries (the Python client's own), if any."""
    import confluent_kafka

    libs = Path(confluent_kafka.__file__).resolve().parent.parent / "confluent_kafka.libs"
    found = sorted(libs.glob("librdkafka*.so*")) if libs.is_dir() else []
    return found[0] if found else None


def librdkafka_link_args() -> list[str]:
    """Link against `bundled_librdkafka`, else the system's (Debian's librdkafka-dev, older)."""
    lib = bundled_librdkafka()
    return [f"-L{lib.parent}", f"-l:{lib.name}", f"-Wl,-rpath,{lib.parent}"] if lib else ["-lrdkafka"]


def rdkafka_args(conf: dict[str, Any]) -> list[str]:
    """librdkafka settings as the C clients' `key=value` arguments (booleans lower-case)."""
    return [f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in conf.items()]


def c_client_exe(work: Path, source: Path) -> Path | None:
    """A C client of tests/perf (fast_consumer.c, fast_producer.c) built into `work` with gcc
    and librdkafka's headers (Debian's librdkafka-dev); None, with the reason printed, when it
    cannot be built."""
    exe = work / source.stem
    if exe.exists():
        return exe
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        print(f"{source.stem}: no C compiler; its rows are skipped", flush=True)
        return None
    cmd = [gcc, "-O2", "-o", str(exe), str(source), *librdkafka_link_args()]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)  # noqa: S603
    if done.returncode != 0:
        print(f"{source.stem}: build failed (apt-get install librdkafka-dev?): {done.stderr.strip()[-300:]}",
              flush=True)  # fmt: skip
        return None
    return exe


def fast_consumer_exe(work: Path) -> Path | None:
    return c_client_exe(work, FAST_CONSUMER_C)


def fast_consume_run(
    run: Run,
    exe: Path | None,
    bootstrap: str,
    topic: str,
    min_seconds: float,
    groups: dict[str, list[int]],
    profile: tuple[int, Path, str] | None = None,
) -> Run:
    """Consumption by `fast_consumer` (librdkafka's consumer in C, batches of 4,096, nothing
    printed per message): every partition from its log start to its end. MB/s = value bytes
    / (first message .. last partition's end) as the program clocks it; passes repeat until
    `min_seconds` have passed; broker CPU over the whole window; the consumer's own CPU from
    this process's children (`os.times`)."""
    if exe is None:
        return run

    def one_pass() -> tuple[int, float]:
        cmd = [str(exe), bootstrap, topic]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=330, check=False)  # noqa: S603
        if done.returncode != 0:
            raise RuntimeError(f"fast_consumer failed ({done.returncode}): {done.stderr.strip()[-500:]}")
        out = json.loads(done.stdout)
        if out["errors"]:
            raise RuntimeError(f"fast_consumer saw {out['errors']} errors: {done.stderr.strip()[-500:]}")
        return int(out["value_bytes"]), float(out["last_s"]) - float(out["first_s"])

    children0 = os.times()
    mb_s, passes, cpu = _consume_passes(one_pass, min_seconds, groups, profile)
    children1 = os.times()
    run.rdk_mb_s, run.rdk_passes = mb_s, passes
    run.rdk_client_cores = (
        children1.children_user + children1.children_system - children0.children_user - children0.children_system
    ) / max(1e-9, cpu.elapsed)
    if "brokers" in groups and mb_s:
        run.rdk_broker_cpu_ms_per_mb = cpu.seconds["brokers"] * 1000 / (mb_s * cpu.active)
        run.rdk_broker_cores = cpu.cores("brokers")
    return run


def _consume_passes(
    one_pass: Callable[[], tuple[int, float]],
    min_seconds: float,
    groups: dict[str, list[int]],
    profile: tuple[int, Path, str] | None,
) -> tuple[float, int, CpuWindow]:
    """Run `one_pass` (-> value bytes, seconds from first to last byte) until `min_seconds`
    have passed; MB/s over the passes, their count, and the CPU window (`active`: the summed
    seconds of the passes, for per-MB figures)."""
    size = 0
    active = 0.0
    passes = 0
    spy = PySpy(profile[0], profile[1], profile[2]) if profile else None
    if spy is not None:
        spy.start()
    try:
        with CpuWindow(groups) as cpu:
            t0 = time.monotonic()
            while passes == 0 or time.monotonic() - t0 < min_seconds:
                got, seconds = one_pass()
                if seconds > 0:
                    size += got
                    active += seconds
                passes += 1
    finally:
        if spy is not None:
            spy.stop()
    cpu.active = active
    return (size / MB / active if active > 0 else 0.0), passes, cpu


def run_mock(args: argparse.Namespace, work: Path) -> list[Run]:
    host, bootstrap = mock_cluster(work)
    runs: list[Run] = []
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap, "logger": rd_logger(work)})
        sat_all: Run | None = None
        for acks in ("1", "all"):
            topic = f"mock-acks-{acks}"
            parts = 0
            deadline = time.monotonic() + 20
            while not parts and time.monotonic() < deadline:  # Metadata auto-creates it (4 partitions)
                md = admin.list_topics(topic, timeout=5).topics.get(topic)
                parts = len(md.partitions) if md is not None and md.error is None else 0
            run = produce_run(Run("mock", 3, 1, parts, acks, None), bootstrap, topic, args.seconds, {}, work)
            if acks == "all":
                consume_run(run, bootstrap, topic, args.consume_seconds, {}, work)
                kcat_consume_run(run, bootstrap, topic, args.consume_seconds, {})
                fast_consume_run(run, fast_consumer_exe(work), bootstrap, topic, args.consume_seconds, {})
                sat_all = run
            print_row(run)
            runs.append(run)
        assert sat_all is not None
        for fraction in args.rate_fractions:
            rate = sat_all.msgs / sat_all.seconds * fraction
            run = Run("mock", 3, 1, sat_all.partitions, "all", rate * MSG_BYTES / MB)
            produce_run(run, bootstrap, "mock-acks-all", args.seconds, {}, work, rate_msgs_s=rate)
            print_row(run)
            runs.append(run)
    finally:
        del host
    return runs


def run_mock_at(args: argparse.Namespace, work: Path, offered_mb_s: list[float]) -> list[Run]:
    """acks=all on a new mock cluster at the rates pykraft was offered (its own fractions of
    its own maximum), so that each pykraft latency has the mock's at the same offered rate."""
    host, bootstrap = mock_cluster(work)
    runs: list[Run] = []
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap, "logger": rd_logger(work)})
        topic = "mock-at-pykraft-rates"
        parts = 0
        deadline = time.monotonic() + 20
        while not parts and time.monotonic() < deadline:
            md = admin.list_topics(topic, timeout=5).topics.get(topic)
            parts = len(md.partitions) if md is not None and md.error is None else 0
        for mb_s in offered_mb_s:
            run = Run("mock", 3, 1, parts, "all", mb_s, note="at pykraft's offered rate")
            produce_run(run, bootstrap, topic, args.seconds, {}, work, rate_msgs_s=mb_s * MB / MSG_BYTES)
            print_row(run)
            runs.append(run)
    finally:
        del host
    return runs


# ----------------------------------------------------------------------------- clusters


@contextlib.contextmanager
def pykraft_cluster(
    root: Path, brokers: int, properties: dict[str, str], *, keep: bool, nofile: int | None = None
) -> Iterator[Any]:
    """A `brokers`+3 cluster (tests/integration/metadata_cluster.py's start_cluster) with
    `properties`, killed at the end (its directory deleted unless `keep`). `nofile`: raise each
    broker's descriptor limit to that (capped by its hard limit). Brokers that exited during
    the runs are reported, and the nodes' log tails when the runs fail."""
    from metadata_cluster import start_cluster

    t0 = time.monotonic()
    cluster = start_cluster(root, brokers=brokers, properties=dict(properties))
    try:
        if nofile is not None:
            for b in cluster.broker_ids:
                pid = cluster.nodes[b].pid
                hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)[1]
                limit = nofile if hard == resource.RLIM_INFINITY else min(nofile, hard)  # a container caps it
                resource.prlimit(pid, resource.RLIMIT_NOFILE, (limit, hard))
        ready_s = time.monotonic() - t0
        print(f"  ({brokers}+3 cluster ready in {ready_s:.1f} s, base port {cluster.base_port})", flush=True)
        yield cluster
        dead = [b for b in cluster.broker_ids if not cluster.nodes[b].running]
        if dead:
            print(f"  !! brokers {dead} exited during the runs:\n{cluster.diagnostics(tail=20)}", flush=True)
    except BaseException:
        print(cluster.diagnostics(tail=30), flush=True)
        raise
    finally:
        cluster.close()
        if not keep:
            shutil.rmtree(root, ignore_errors=True)


def bootstrap_of(cluster: Any) -> str:
    """The brokers' PLAINTEXT listeners, as bootstrap.servers."""
    return ",".join(
        f"127.0.0.1:{cluster.nodes[b].plan.properties['listeners'].rsplit(':', 1)[1]}" for b in cluster.broker_ids
    )


def broker_groups(cluster: Any) -> dict[str, list[int]]:
    """The nodes' pids by role, as CpuWindow takes them."""
    return {"brokers": [cluster.nodes[b].pid for b in cluster.broker_ids],
            "controllers": [cluster.nodes[c].pid for c in cluster.controller_ids]}  # fmt: skip


def log_dirs(cluster: Any) -> list[Path]:
    """Each broker's log.dirs, in broker id order."""
    return [Path(cluster.nodes[b].plan.properties["log.dirs"]) for b in cluster.broker_ids]


def rest_create_topic(cluster: Any, name: str, partitions: int, rf: int, disk_budget: float) -> None:
    """Create the topic over REST (on the first broker, forwarded to the controller). Its
    replicas together keep at most ~`disk_budget` bytes: retention.bytes per partition is a
    share of it and segments roll at half that, so the brokers delete old segments during
    the run (log.retention.check.interval.ms is 1 s) and the disk never fills."""
    retention = max(2 << 20, int(disk_budget / (partitions * rf) / 2))
    configs = {"file.delete.delay.ms": 0, "retention.bytes": retention, "segment.bytes": max(1 << 20, retention // 2)}
    cluster.create_topic(
        cluster.broker_ids[0],
        name,
        partitions_count=partitions,
        replication_factor=rf,
        configs=[{"name": k, "value": str(v)} for k, v in configs.items()],
    )


def rest_delete_topic(cluster: Any, name: str, timeout: float = 120) -> None:
    """Delete the topic and wait until no broker has its partition directories any more."""
    r = cluster.delete(cluster.broker_ids[0], f"/topics/{name}")
    if r.status_code not in (204, 404):
        print(f"  (delete {name}: HTTP {r.status_code} {r.text[:200]})", flush=True)
        return
    dirs = log_dirs(cluster)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(any(d.glob(f"{name}-*")) for d in dirs):
            return
        time.sleep(0.25)
    print(f"  (topic {name}: partition directories still on disk after {timeout} s)", flush=True)


def idle_cores(groups: dict[str, list[int]], seconds: float) -> float:
    """Cores the brokers use with the topic created and nothing produced or consumed."""
    if seconds <= 0:
        return float("nan")
    with CpuWindow(groups) as cpu:
        time.sleep(seconds)
    return cpu.cores("brokers")


def check_disk(path: Path, need_bytes: float) -> None:
    free = shutil.disk_usage(path).free
    if free < need_bytes + 0.5e9:
        raise SystemExit(
            f"only {free / 1e9:.1f} GB free under {path}; a run keeps up to ~{need_bytes / 1e9:.1f} GB "
            "(use --disk-budget-gb, --dir)"
        )


def cluster_properties(brokers: int) -> dict[str, str]:
    """The brokers' settings of the produce runs: min.insync.replicas 2 (1 with one broker),
    topics created only by the benchmark, retention checked every second."""
    return {
        "min.insync.replicas": str(min(2, brokers)),
        "auto.create.topics.enable": "false",
        "log.retention.check.interval.ms": "1000",
    }


def run_pykraft(args: argparse.Namespace, work: Path, nb: int) -> list[Run]:
    rf = min(3, nb)
    properties = cluster_properties(nb)
    runs: list[Run] = []
    with pykraft_cluster(work / f"cluster-{nb}b", nb, properties, keep=args.keep) as cluster:
        bootstrap = bootstrap_of(cluster)
        node_of_pid = {cluster.nodes[b].pid: b for b in cluster.broker_ids}
        groups = broker_groups(cluster)
        # A fresh cluster's first run is slower (first segments, connections): warm it up.
        if args.cluster_warmup > 0:
            topic = "bench-cluster-warmup"
            rest_create_topic(cluster, topic, nb * args.verdict_ppb(), rf, args.disk_budget_gb * 1e9)
            wait_for_leaders(bootstrap, topic, nb * args.verdict_ppb(), work)
            warm = Run("pykraft", nb, rf, nb * args.verdict_ppb(), "all", None)
            produce_run(warm, bootstrap, topic, args.cluster_warmup, groups, work)
            print(
                f"  (cluster warm-up, not counted: {warm.mb_s:.1f} MB/s acks=all for {args.cluster_warmup:g} s)",
                flush=True,
            )
            rest_delete_topic(cluster, topic)
        best: Run | None = None
        shapes: list[tuple[int, int]] = [(ppb, rf) for ppb in args.partitions_per_broker]
        if args.rf1 and rf > 1:
            shapes.append((args.verdict_ppb(), 1))
        for ppb, shape_rf in shapes:
            parts = ppb * nb
            busiest_pid: int | None = None
            for acks in ("1", "all") if shape_rf == rf else ("1",):
                # RF 1 rows: how far more brokers go without replication.
                topic = f"bench-{nb}b-rf{shape_rf}-{parts}p-acks{acks}"
                check_disk(work, args.disk_budget_gb * 1e9)
                rest_create_topic(cluster, topic, parts, shape_rf, args.disk_budget_gb * 1e9)
                wait_for_leaders(bootstrap, topic, parts, work)
                run = Run("pykraft", nb, shape_rf, parts, acks, None)
                run.idle_broker_cores = idle_cores(groups, args.idle_seconds)
                profile = None
                if (
                    acks == "all"
                    and args.profile
                    and nb == max(args.brokers)
                    and ppb == args.verdict_ppb()
                    and busiest_pid is not None
                ):
                    profile = (busiest_pid, args.profile, args.profile_format)
                    run.note = f"py-spy on broker {node_of_pid[busiest_pid]} (pid {busiest_pid})"
                produce_run(run, bootstrap, topic, args.seconds, groups, work, profile=profile)
                if acks == "1":
                    busiest_pid = max(run.per_broker_cpu_s, key=lambda p: run.per_broker_cpu_s[p])
                else:
                    time.sleep(2.5)  # the retention pass after the last append (every 1 s) has run
                    consume_run(run, bootstrap, topic, args.consume_seconds, groups, work)
                    spy = None
                    if args.profile and nb == max(args.brokers) and ppb == args.verdict_ppb() and busiest_pid:
                        spy = (busiest_pid, args.profile / "consume", args.profile_format)
                    exe = fast_consumer_exe(work)
                    kcat_consume_run(run, bootstrap, topic, args.consume_seconds, groups, profile=None if exe else spy)
                    fast_consume_run(run, exe, bootstrap, topic, args.consume_seconds, groups, profile=spy)
                    if rf == shape_rf and (best is None or run.mb_s > best.mb_s):
                        best = run
                print_row(run)
                runs.append(run)
                rest_delete_topic(cluster, topic)
        # Rate-limited acks=all on the shape with the best acks=all rate.
        assert best is not None
        for fraction in args.rate_fractions:
            rate = best.msgs / best.seconds * fraction
            topic = f"bench-{nb}b-rf{rf}-{best.partitions}p-rate{int(fraction * 100)}"
            rest_create_topic(cluster, topic, best.partitions, rf, args.disk_budget_gb * 1e9)
            wait_for_leaders(bootstrap, topic, best.partitions, work)
            run = Run("pykraft", nb, rf, best.partitions, "all", rate * MSG_BYTES / MB)
            produce_run(run, bootstrap, topic, args.seconds, groups, work, rate_msgs_s=rate)
            print_row(run)
            runs.append(run)
            rest_delete_topic(cluster, topic)
    return runs


# ----------------------------------------------------------------------------- output


COLUMNS = [
    ("run", 40), ("acks", 4), ("offered", 9), ("MB/s", 7), ("p50 ms", 8), ("p99 ms", 8), ("max ms", 8),
    ("cons MB/s", 9), ("CPU ms/MB", 9), ("broker cores", 12), ("ctrl cores", 10), ("client cores", 12),
    ("others", 6), ("idle cores", 10), ("runq", 5), ("errors", 6),
]  # fmt: skip


def _f(x: float | None, digits: int = 1) -> str:
    if x is None or x != x:  # None or NaN
        return "-"
    return f"{x:,.{digits}f}"


def row_cells(r: Run) -> list[str]:
    offered = "max" if r.offered_mb_s is None else f"{r.offered_mb_s:.0f} MB/s"
    cons = _f(r.consume_mb_s)
    if r.consume_mb_s is not None and not r.consume_complete:
        cons += "!"
    return [
        r.label, r.acks, offered, _f(r.mb_s), _f(r.p50_ms), _f(r.p99_ms), _f(r.max_ms), cons,
        _f(r.broker_cpu_ms_per_mb, 2), _f(r.broker_cores, 2), _f(r.controller_cores, 2), _f(r.client_cores, 2),
        f"{r.others_share:.0%}", _f(r.idle_broker_cores, 2), _f(r.broker_runq, 2), str(r.errors),
    ]  # fmt: skip


def print_header() -> None:
    print("  ".join(name.rjust(w) if i else name.ljust(w) for i, (name, w) in enumerate(COLUMNS)), flush=True)
    print("  ".join("-" * w for _, w in COLUMNS), flush=True)


def print_row(r: Run) -> None:
    cells = row_cells(r)
    print("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, (_, w)) in enumerate(zip(cells, COLUMNS, strict=True))),
          flush=True)  # fmt: skip
    if r.error_names:
        print(f"    delivery errors: {r.error_names}", flush=True)
    if r.consume_mb_s is not None:
        parts = [f"consume: {r.consume_passes} pass(es)", f"client {_f(r.consume_client_cores, 2)} cores"]
        if r.system != "mock":
            parts.append(f"brokers {_f(r.consume_broker_cores, 2)} cores")
            parts.append(f"{_f(r.consume_broker_cpu_ms_per_mb, 2)} ms broker CPU per MB served")
        if not r.consume_complete:
            parts.append("INCOMPLETE (no progress for 15 s)")
        print("    " + ", ".join(parts), flush=True)
    if r.kcat_mb_s is not None:
        parts = [f"kcat consume: {_f(r.kcat_mb_s)} MB/s, {r.kcat_passes} pass(es)"]
        if r.system != "mock":
            parts.append(f"brokers {_f(r.kcat_broker_cores, 2)} cores")
            parts.append(f"{_f(r.kcat_broker_cpu_ms_per_mb, 2)} ms broker CPU per MB served")
        print("    " + ", ".join(parts), flush=True)
    if r.rdk_mb_s is not None:
        parts = [f"fast consumer (C): {_f(r.rdk_mb_s)} MB/s, {r.rdk_passes} pass(es)"]
        parts.append(f"client {_f(r.rdk_client_cores, 2)} cores")
        if r.system != "mock":
            parts.append(f"brokers {_f(r.rdk_broker_cores, 2)} cores")
            parts.append(f"{_f(r.rdk_broker_cpu_ms_per_mb, 2)} ms broker CPU per MB served")
        print("    " + ", ".join(parts), flush=True)
    if r.note:
        print(f"    {r.note}", flush=True)


def print_scaling(runs: list[Run], args: argparse.Namespace) -> None:
    """MB/s by partitions per broker (rows) and broker count (columns)."""
    sat = [r for r in runs if r.system == "pykraft" and r.offered_mb_s is None]
    if not sat:
        return
    print("\nScaling (saturation MB/s; broker cores in brackets): partitions per broker x brokers (RF = min(3, N))")
    head = ["ppb"] + [f"{nb}b acks=1" for nb in args.brokers] + [f"{nb}b acks=all" for nb in args.brokers]
    head += [f"{nb}b consume" for nb in args.brokers]
    print("  ".join(h.rjust(16) for h in head))
    for ppb in args.partitions_per_broker:
        cells = [str(ppb)]
        for what in ("1", "all", "consume"):
            for nb in args.brokers:
                acks = "all" if what == "consume" else what
                r = next(
                    (
                        x
                        for x in sat
                        if x.brokers == nb and x.partitions == ppb * nb and x.acks == acks and x.rf == min(3, nb)
                    ),
                    None,
                )
                if r is None:
                    cells.append("-")
                elif what == "consume":
                    cells.append(_f(r.consume_mb_s))
                else:
                    cells.append(f"{_f(r.mb_s)} ({_f(r.broker_cores, 2)})")
        print("  ".join(c.rjust(16) for c in cells))


def verdicts(runs: list[Run]) -> list[tuple[str, bool | None, str]]:
    mock_all = next((r for r in runs if r.system == "mock" and r.acks == "all" and r.offered_mb_s is None), None)
    rf3 = [r for r in runs if r.system == "pykraft" and r.rf == 3 and r.acks == "all" and r.offered_mb_s is None]
    if not rf3:
        return [("acks=all RF 3 figures", None, "no 3-broker shape was run")]
    nb = max(r.brokers for r in rf3)
    best = max((r for r in rf3 if r.brokers == nb), key=lambda r: r.mb_s)
    half = next(
        (r for r in runs if r.system == "pykraft" and r.brokers == nb and r.offered_mb_s is not None
         and r.partitions == best.partitions and abs(r.offered_mb_s - best.mb_s / 2) < 0.02 * best.mb_s),
        None,
    )  # fmt: skip
    shape = f"{nb}b RF3 {best.partitions}p"
    out: list[tuple[str, bool | None, str]] = [
        (
            f"acks=all RF 3 >= {TARGET_ACKS_ALL_MB_S:.0f} MB/s",
            best.mb_s >= TARGET_ACKS_ALL_MB_S,
            f"{best.mb_s:.1f} MB/s ({shape})",
        ),
    ]
    if mock_all is not None:
        out.append(
            (
                "acks=all >= 1/3 of the mock's rate",
                best.mb_s >= mock_all.mb_s * TARGET_MOCK_SHARE,
                f"{best.mb_s:.1f} vs {mock_all.mb_s:.1f} MB/s = {best.mb_s / mock_all.mb_s:.2f}x",
            )
        )
    acks1 = next(
        (r for r in runs if r.system == "pykraft" and r.brokers == nb and r.rf == 3 and r.acks == "1"
         and r.offered_mb_s is None and r.partitions == best.partitions),
        None,
    )  # fmt: skip
    if acks1 is not None:
        out.append(
            (
                "acks=1 >= acks=all",
                acks1.mb_s >= best.mb_s,
                f"{acks1.mb_s:.1f} vs {best.mb_s:.1f} MB/s ({shape})",
            )
        )
    out.append(
        (
            f"broker CPU <= {TARGET_CPU_MS_PER_MB:.0f} ms/MB ingested",
            best.broker_cpu_ms_per_mb <= TARGET_CPU_MS_PER_MB,
            f"{best.broker_cpu_ms_per_mb:.2f} ms/MB (acks=all, {shape})",
        )
    )
    if half is not None:
        mock_same = next(
            (r for r in runs if r.system == "mock" and r.note == "at pykraft's offered rate"
             and r.offered_mb_s == half.offered_mb_s),
            None,
        )  # fmt: skip
        beside = f" (the mock at that rate: p99 {mock_same.p99_ms:.1f} ms)" if mock_same is not None else ""
        out.append(
            (
                f"p99 < {TARGET_P99_MS:.0f} ms at half the max rate",
                half.p99_ms < TARGET_P99_MS and half.errors == 0,
                f"p99 {half.p99_ms:.1f} ms at {half.offered_mb_s:.0f} MB/s offered, {half.mb_s:.1f} MB/s delivered"
                + beside,
            )
        )
    else:
        out.append((f"p99 < {TARGET_P99_MS:.0f} ms at half the max rate", None, "no run at 0.5 of the max"))
    # The fast client: fast_consumer.c when it could be built, else kcat.
    fast = [
        (name, mb_s, ms_per_mb, mock_mb_s)
        for name, mb_s, ms_per_mb, mock_mb_s in (
            ("fast consumer", best.rdk_mb_s, best.rdk_broker_cpu_ms_per_mb, mock_all.rdk_mb_s if mock_all else None),
            ("kcat", best.kcat_mb_s, best.kcat_broker_cpu_ms_per_mb, mock_all.kcat_mb_s if mock_all else None),
        )
        if mb_s is not None
    ][:1]
    for name, mb_s, ms_per_mb, mock_mb_s in fast:
        if mock_mb_s:
            out.append(
                (
                    f"{name} consume >= {TARGET_KCAT_MOCK_SHARE:.1f}x the mock's",
                    mb_s >= TARGET_KCAT_MOCK_SHARE * mock_mb_s,
                    f"{mb_s:.1f} vs {mock_mb_s:.1f} MB/s = {mb_s / mock_mb_s:.2f}x",
                )
            )
        out.append(
            (
                f"{name} consume >= {TARGET_CONSUME_RATIO:.0f}x produce",
                mb_s >= TARGET_CONSUME_RATIO * best.mb_s,
                f"{mb_s:.1f} vs {best.mb_s:.1f} MB/s = {mb_s / best.mb_s:.2f}x" if best.mb_s else "-",
            )
        )
        out.append(
            (
                f"broker CPU < {TARGET_CPU_MS_PER_MB_SERVED:.0f} ms/MB served",
                ms_per_mb < TARGET_CPU_MS_PER_MB_SERVED,
                f"{ms_per_mb:.2f} ms/MB ({name}, {shape})",
            )
        )
    cons = best.consume_mb_s or 0.0
    out.append(
        (
            f"consume() >= {TARGET_CONSUME_RATIO:.0f}x produce (confluent-kafka's consume(): the client's limit)",
            best.consume_complete and cons >= TARGET_CONSUME_RATIO * best.mb_s,
            f"{cons:.1f} vs {best.mb_s:.1f} MB/s = {cons / best.mb_s:.2f}x" if best.mb_s else "-",
        )
    )
    return out


# ----------------------------------------------------------------------------- main


# ----------------------------------------------------------------------------- small batches (issue 22 item 4)

SMALL_MSG_BYTES = 100
# confluent-kafka sending each message as soon as it can: one small batch per partition per Produce.
SMALL_CONFLUENT_CONF: dict[str, Any] = PRODUCER_CONF | {"linger.ms": 0, "statistics.interval.ms": 500}


@dataclass
class SmallRun:
    """A saturating acks=all run of 100 B records with a client that sends small batches."""

    system: str  # "pykraft" or "mock"
    client: str  # "confluent linger.ms=0" or "kafka-python defaults"
    partitions: int
    seconds: float = 0.0
    msgs: int = 0
    errors: int = 0
    produce_requests: int | None = None  # Produce requests the client sent (librdkafka stats)
    batches: int | None = None  # batches appended to the leaders' logs (pykraft: counted on disk)
    broker_cpu_s: float = float("nan")
    leader_cpu_s: float = float("nan")  # the broker py-spy watched (or the busiest one)
    p50_ms: float = float("nan")
    p99_ms: float = float("nan")
    others_share: float = 0.0
    load1: float = 0.0

    @property
    def batches_per_core(self) -> float:
        """Batches ingested per second of broker CPU (all brokers: leader + followers)."""
        if not self.batches or self.broker_cpu_s != self.broker_cpu_s or self.broker_cpu_s <= 0:
            return float("nan")
        return self.batches / self.broker_cpu_s


def count_batches(log_dirs: list[Path], topic: str) -> int:
    """Record batches in the topic's logs: per partition, the replica holding the most
    (the leader's), summed; each batch header's length field walked, nothing decoded."""
    per_partition: dict[str, int] = {}
    for d in log_dirs:
        for pdir in d.glob(f"{topic}-*"):
            n = 0
            for seg in pdir.glob("*.log"):
                data = seg.read_bytes()
                pos = 0
                while pos + 12 <= len(data):
                    length = int.from_bytes(data[pos + 8 : pos + 12], "big", signed=True)
                    if length <= 0:
                        break
                    pos += 12 + length
                    n += 1
            per_partition[pdir.name] = max(per_partition.get(pdir.name, 0), n)
    return sum(per_partition.values())


def small_confluent_run(
    run: SmallRun,
    bootstrap: str,
    topic: str,
    seconds: float,
    groups: dict[str, list[int]],
    work: Path,
    leader_pid: int | None,
    profile: tuple[int, Path, str] | None,
    count: Callable[[], int] | None = None,
) -> SmallRun:
    """confluent-kafka, acks=all, linger.ms=0, 100 B values round-robin, as fast as it can."""
    latencies: list[float] = []
    errors: Counter[str] = Counter()
    stats: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors[err.name()] += 1
        else:
            latencies.append(msg.latency())

    conf = {"bootstrap.servers": bootstrap, "acks": "all", "logger": rd_logger(work), "stats_cb": stats.append,
            **SMALL_CONFLUENT_CONF}  # fmt: skip
    producer = Producer(conf)
    payload = os.urandom(SMALL_MSG_BYTES)

    def send(i: int) -> bool:
        try:
            producer.produce(topic, payload, partition=i % run.partitions, on_delivery=on_delivery)
        except BufferError:
            producer.poll(0.0005)
            return False
        return True

    i = 0
    while i < WARMUP_MESSAGES:
        i += send(i)
    producer.flush(60)
    latencies.clear()
    errors.clear()
    producer.poll(0.6)
    requests0 = _produce_requests(stats)
    batches0 = count() if count else 0
    spy = PySpy(*profile) if profile else None
    if spy:
        spy.start()
    run.load1 = os.getloadavg()[0]
    with CpuWindow(groups) as cpu:
        t0 = time.monotonic()
        end = t0 + seconds
        sent = 0
        while True:
            if send(sent):
                sent += 1
                if sent % 1000:
                    continue
                producer.poll(0)
            if time.monotonic() >= end:
                break
        remaining = producer.flush(120)
        t_last = time.monotonic()
    if spy:
        spy.stop()
    stats.clear()
    producer.poll(0.6)
    requests1 = _produce_requests(stats)
    run.produce_requests = requests1 - requests0 if requests1 is not None and requests0 is not None else None
    run.batches = count() - batches0 if count else None
    run.seconds = t_last - t0
    run.msgs = len(latencies)
    run.errors = sum(errors.values()) + remaining
    lat = sorted(latencies)
    run.p50_ms, run.p99_ms = percentile(lat, 0.5) * 1000, percentile(lat, 0.99) * 1000
    _fill_cpu(run, cpu, groups, leader_pid)
    return run


def _produce_requests(stats: list[str]) -> int | None:
    """Produce requests sent so far, from librdkafka's latest statistics."""
    if not stats:
        return None
    brokers = json.loads(stats[-1]).get("brokers", {})
    return sum(int(b.get("req", {}).get("Produce", 0)) for b in brokers.values())


def _fill_cpu(run: SmallRun, cpu: CpuWindow, groups: dict[str, list[int]], leader_pid: int | None) -> None:
    run.others_share = cpu.others_share
    if "brokers" in groups:
        run.broker_cpu_s = cpu.seconds["brokers"]
        pid = leader_pid if leader_pid is not None else max(groups["brokers"], key=lambda p: cpu.per_pid[p])
        run.leader_cpu_s = cpu.per_pid[pid]


def small_kafka_python_run(
    run: SmallRun,
    bootstrap: str,
    topic: str,
    seconds: float,
    groups: dict[str, list[int]],
    leader_pid: int | None,
    profile: tuple[int, Path, str] | None,
    count: Callable[[], int] | None = None,
) -> SmallRun:
    """kafka-python's KafkaProducer with its defaults (acks=all, idempotent, batch.size 16 KB,
    linger.ms 0), 100 B values round-robin, as fast as its sender takes them."""
    from kafka import KafkaProducer

    latencies: list[float] = []
    errors: Counter[str] = Counter()
    producer = KafkaProducer(bootstrap_servers=bootstrap.split(","))
    payload = os.urandom(SMALL_MSG_BYTES)

    def send(i: int) -> None:
        t = time.monotonic()
        fut = producer.send(topic, payload, partition=i % run.partitions)
        fut.add_callback(lambda _md: latencies.append(time.monotonic() - t))
        fut.add_errback(lambda exc: errors.update([type(exc).__name__]))

    for i in range(WARMUP_MESSAGES):
        send(i)
    producer.flush(60)
    latencies.clear()
    errors.clear()
    batches0 = count() if count else 0
    spy = PySpy(*profile) if profile else None
    if spy:
        spy.start()
    run.load1 = os.getloadavg()[0]
    with CpuWindow(groups) as cpu:
        t0 = time.monotonic()
        end = t0 + seconds
        sent = 0
        while time.monotonic() < end:
            for _ in range(100):
                send(sent)
                sent += 1
        producer.flush(120)
        t_last = time.monotonic()
    if spy:
        spy.stop()
    producer.close(10)
    run.batches = count() - batches0 if count else None
    run.seconds = t_last - t0
    run.msgs = len(latencies)
    run.errors = sum(errors.values()) + (sent - len(latencies) - sum(errors.values()))
    lat = sorted(latencies)
    run.p50_ms, run.p99_ms = percentile(lat, 0.5) * 1000, percentile(lat, 0.99) * 1000
    _fill_cpu(run, cpu, groups, leader_pid)
    return run


SMALL_COLUMNS = [
    ("run", 44), ("msgs/s", 8), ("Produce req/s", 13), ("batches/s", 9), ("broker cores", 12),
    ("batches/s per core", 18), ("broker us/batch", 15), ("p50 ms", 7), ("p99 ms", 7), ("others", 6),
    ("errors", 6),
]  # fmt: skip


def print_small_header() -> None:
    print("  ".join(name.ljust(w) for name, w in SMALL_COLUMNS))
    print("  ".join("-" * w for _, w in SMALL_COLUMNS))


def print_small_row(r: SmallRun) -> None:
    label = f"{r.system} {r.partitions}p, {r.client}"
    req_s = r.produce_requests / r.seconds if r.produce_requests is not None and r.seconds else None
    batches_s = r.batches / r.seconds if r.batches is not None and r.seconds else None
    cores = r.broker_cpu_s / r.seconds if r.seconds else float("nan")
    broker_us = r.broker_cpu_s * 1e6 / r.batches if r.batches else float("nan")
    cells = [label, _f(r.msgs / r.seconds if r.seconds else None, 0), _f(req_s, 0), _f(batches_s, 0), _f(cores, 2),
             _f(r.batches_per_core, 0), _f(broker_us, 0), _f(r.p50_ms), _f(r.p99_ms), f"{r.others_share:.0%}",
             str(r.errors)]  # fmt: skip
    print("  ".join(c.ljust(w) for c, (_, w) in zip(cells, SMALL_COLUMNS, strict=True)), flush=True)


def run_small_batches(args: argparse.Namespace, work: Path) -> list[SmallRun]:
    """The small-batch shapes: confluent-kafka linger.ms=0 and kafka-python's defaults, 100 B
    records, acks=all, on the mock and on a 3+3 pykraft cluster (RF 3, one partition per
    broker, so each broker leads one): client msgs/s, Produce requests/s (librdkafka's
    statistics), batches appended/s (pykraft: counted in the logs), broker CPU, batches per
    second of broker CPU (all brokers: the leader's append and the followers' fetches), the
    leader broker's CPU per batch."""
    runs: list[SmallRun] = []
    clients = ["confluent linger.ms=0", "kafka-python defaults"]
    if args.mock:
        host, mock_bootstrap = mock_cluster(work)
        try:
            # kafka-python 3.0 cannot use librdkafka's mock: it fails to decode the mock's
            # ApiVersions v4 answer, and with api_version pinned its metadata wait times out.
            print("  (mock: confluent only; kafka-python cannot talk to librdkafka's mock cluster)", flush=True)
            for client in clients[:1]:
                topic = f"mock-small-{len(runs)}"
                admin = AdminClient({"bootstrap.servers": mock_bootstrap, "logger": rd_logger(work)})
                parts = 0
                deadline = time.monotonic() + 20
                while not parts and time.monotonic() < deadline:
                    md = admin.list_topics(topic, timeout=5).topics.get(topic)
                    parts = len(md.partitions) if md is not None and md.error is None else 0
                run = SmallRun("mock", client, parts)
                if client.startswith("confluent"):
                    small_confluent_run(run, mock_bootstrap, topic, args.seconds, {}, work, None, None)
                else:
                    small_kafka_python_run(run, mock_bootstrap, topic, args.seconds, {}, None, None)
                print_small_row(run)
                runs.append(run)
        finally:
            del host
    properties = {"min.insync.replicas": "2", "auto.create.topics.enable": "false"}
    with pykraft_cluster(work / "cluster-small", 3, properties, keep=args.keep) as cluster:
        bootstrap = bootstrap_of(cluster)
        groups = broker_groups(cluster)
        dirs = log_dirs(cluster)
        for rep in range(args.small_repeats):
            for client in clients:
                topic = f"small-{rep}-{'confluent' if client.startswith('confluent') else 'kafkapython'}"
                parts = args.small_partitions
                rest_create_topic(cluster, topic, parts, 3, args.disk_budget_gb * 1e9)
                wait_for_leaders(bootstrap, topic, parts, work)
                admin = AdminClient({"bootstrap.servers": bootstrap, "logger": rd_logger(work)})
                md = admin.list_topics(topic, timeout=5).topics[topic]
                leader = md.partitions[0].leader
                leader_pid = cluster.nodes[leader].pid
                profile = None
                if args.profile and rep == 0:
                    profile = (leader_pid, args.profile / f"small-{topic.rsplit('-', 1)[1]}", args.profile_format)
                run = SmallRun("pykraft", client, parts)

                def count(topic: str = topic) -> int:
                    return count_batches(dirs, topic)

                if client.startswith("confluent"):
                    small_confluent_run(run, bootstrap, topic, args.seconds, groups, work, leader_pid, profile, count)
                else:
                    small_kafka_python_run(run, bootstrap, topic, args.seconds, groups, leader_pid, profile, count)
                print_small_row(run)
                runs.append(run)
                rest_delete_topic(cluster, topic)
    return runs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0, help="length of each produce run (default 10)")
    ap.add_argument("--cluster-warmup", type=float, default=3.0, help="s of unreported acks=all on a new cluster")
    ap.add_argument("--idle-seconds", type=float, default=2.0,
                    help="before each saturation run: brokers' CPU with the topic created and no traffic")  # fmt: skip
    ap.add_argument("--consume-seconds", type=float, default=2.0, help="minimum length of a consume run")
    ap.add_argument("--quick", action="store_true", help="smoke run (< 60 s): 3 brokers, 3 partitions/broker, 3 s runs")
    ap.add_argument("--brokers", type=int, nargs="+", default=[1, 3])
    ap.add_argument("--partitions-per-broker", type=int, nargs="+", default=[1, 3, 6])
    ap.add_argument("--rate-fractions", type=float, nargs="+", default=[0.25, 0.5],
                    help="rate-limited acks=all runs at these fractions of the max (0.5 is the target's)")  # fmt: skip
    ap.add_argument("--no-rf1", dest="rf1", action="store_false",
                    help="skip the RF 1 acks=1 run on multi-broker clusters (scaling without replication)")  # fmt: skip
    ap.add_argument("--no-mock", dest="mock", action="store_false", help="skip the librdkafka mock cluster")
    ap.add_argument("--producer", choices=["c", "python"], default="c",
                    help="the produce runs' client: tests/perf/fast_producer.c (librdkafka in C, default; "
                         "python when it cannot be built) or confluent-kafka's Python loop (~5 µs of Python "
                         "per message)")  # fmt: skip
    ap.add_argument("--profile", type=Path, default=None, help="py-spy the busiest broker during acks=all into DIR")
    ap.add_argument("--profile-format", choices=["speedscope", "flamegraph", "raw"], default="speedscope")
    ap.add_argument("--dir", type=Path, default=None, help="parent of the temp dir (default: $TMPDIR)")
    ap.add_argument("--disk-budget-gb", type=float, default=4.0,
                    help="GB all replicas of one topic keep (sets retention.bytes per partition)")  # fmt: skip
    ap.add_argument("--keep", action="store_true", help="keep the clusters' directories")
    ap.add_argument("--json-out", type=Path, default=None)
    ap.add_argument(
        "--small-batches",
        action="store_true",
        help="only the small-batch shapes (100 B records, confluent linger.ms=0, kafka-python defaults)",
    )
    ap.add_argument("--small-partitions", type=int, default=3, help="partitions of the small-batch topic (RF 3)")
    ap.add_argument("--small-repeats", type=int, default=1, help="pykraft small-batch runs per client")
    args = ap.parse_args()
    if args.quick:
        args.seconds, args.consume_seconds, args.cluster_warmup, args.idle_seconds = 3.0, 1.0, 1.5, 1.0
        args.brokers, args.partitions_per_broker, args.rate_fractions, args.rf1 = [3], [3], [0.5], False
    args.brokers = sorted(set(args.brokers))
    args.verdict_ppb = lambda: 3 if 3 in args.partitions_per_broker else args.partitions_per_broker[0]
    work = Path(tempfile.mkdtemp(prefix="pykraft-bench-dp-", dir=args.dir))
    # Leave others at least 2 GB: a smaller budget means smaller segments (more rolls).
    free_gb = shutil.disk_usage(work).free / 1e9
    if args.disk_budget_gb > free_gb - 2:
        wanted, args.disk_budget_gb = args.disk_budget_gb, round(free_gb - 2, 1)
        if args.disk_budget_gb < 0.5:
            raise SystemExit(f"only {free_gb:.1f} GB free under {work}: not enough for a run")
        print(f"(disk budget lowered from {wanted:g} to {args.disk_budget_gb:g} GB: {free_gb:.1f} GB free)")
    logging.basicConfig(level=logging.WARNING)
    t_begin = time.monotonic()

    import confluent_kafka

    global FAST_PRODUCER
    if args.producer == "c" and not args.small_batches:
        FAST_PRODUCER = c_client_exe(work, FAST_PRODUCER_C)
    print(f"pykraft data-plane benchmark, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"machine: {CPUS} CPUs, load average at start {loadavg()} (1/5/15 min; 2 cores shared with others)")
    print(f"code: {code_version()}; client: confluent-kafka {confluent_kafka.version()[0]}, "
          f"librdkafka {confluent_kafka.libversion()[0]}; work dir {work}")  # fmt: skip
    client = ("tests/perf/fast_producer.c (librdkafka in C)" if FAST_PRODUCER is not None
              else "confluent-kafka's Python produce loop")  # fmt: skip
    print(f"producer: {client}; 1 KiB values, round-robin partitions, {PRODUCER_CONF}; {args.seconds:g} s "
          f"per run after {WARMUP_MESSAGES} warm-up messages; disk budget per topic {args.disk_budget_gb:g} GB "
          "(retention.bytes, segment.bytes)")  # fmt: skip
    print("columns: MB/s = acknowledged bytes / (first produce .. last delivery report); p50/p99/max = delivery "
          "latency; cons = consumer MB/s reading it back; CPU ms/MB = broker CPU (summed) per MB acknowledged; "
          "cores = CPU seconds per second of the run; others = share of all CPUs used by other processes; "
          "idle cores = the brokers' CPU with the topic created, before any traffic; runq = the brokers' threads "
          "runnable and waiting for a CPU (schedstat), in cores")  # fmt: skip
    print()
    if args.small_batches:
        print(
            "small batches: 100 B values, acks=all, saturating; batches/s per core = batches appended / broker "
            "CPU s (3 brokers, RF 3: leaders' appends and followers' fetches); broker us/batch = its inverse"
        )
        print_small_header()
        small = run_small_batches(args, work)
        print(f"\nload average at end: {loadavg()}; wall time {time.monotonic() - t_begin:.0f} s")
        if args.json_out:
            rows = [asdict(r) | {"batches_per_core": r.batches_per_core} for r in small]
            args.json_out.write_text(json.dumps({"small_batches": rows}, indent=1))
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        return 0
    print_header()
    runs: list[Run] = []
    if args.mock:
        runs += run_mock(args, work)
    for nb in args.brokers:
        runs += run_pykraft(args, work, nb)
    if args.mock:
        top = max(args.brokers)
        offered = [r.offered_mb_s for r in runs if r.system == "pykraft" and r.brokers == top and r.offered_mb_s]
        if offered:
            print("\nThe mock at pykraft's offered rates (3 brokers):", flush=True)
            runs += run_mock_at(args, work, offered)

    print_scaling(runs, args)
    print("\nTargets (issue), judged on the largest broker count with RF 3 and its best partitions-per-broker count:")
    results = verdicts(runs)
    for name, ok, figure in results:
        verdict = "n/a " if ok is None else ("PASS" if ok else "MISS")
        print(f"  {verdict}  {name:<42} {figure}")
    met = sum(1 for _, ok, _ in results if ok)
    print(f"  {met}/{len(results)} targets met")
    profile_summary: dict[str, Any] | None = None
    if args.profile:
        for where, what in ((args.profile, "acks=all"), (args.profile / "consume", "the kcat consume")):
            files = sorted(where.glob("broker-pid*.speedscope.json"), key=lambda p: p.stat().st_mtime)
            if not files:
                print(f"\nprofile: see {where}")
                continue
            summary = summarize_speedscope(files[-1])
            profile_summary = (profile_summary or {}) | {what: summary}
            print(f"\nProfile of the busiest broker during {what} ({summary['samples']} samples, "
                  f"{summary['file']}):")  # fmt: skip
            titles = {"self_pct": "self", "inclusive_pct": "inclusive (frames in >= 90% of samples left out)"}
            for label, title in titles.items():
                print(f"  {title}:")
                for name, pct in summary[label][:18]:
                    print(f"    {pct:5.1f}%  {name}")
    print(f"\nload average at end: {loadavg()}; wall time {time.monotonic() - t_begin:.0f} s")
    if args.json_out:
        args.json_out.write_text(
            json.dumps(
                {
                    "runs": [asdict(r) | {"label": r.label} for r in runs],
                    "verdicts": [{"target": n, "ok": ok, "figure": f} for n, ok, f in results],
                    "profile": profile_summary,
                },
                indent=1,
            )
        )
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def code_version() -> str:
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no", "--", "broker", "quorum", "api"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return f"{REPO} (not a git checkout)"
    return f"commit {head}" + (" + uncommitted changes in broker/quorum/api" if dirty else "")


if __name__ == "__main__":
    sys.exit(main())
