"""What idempotence and transactions cost (issue 21): confluent-kafka producing 1 KiB values,
acks=all, to a 12-partition RF 3 topic (min.insync.replicas 2) on a 3+3 pykraft cluster, in
four modes measured side by side in one run, in alternating rounds so that the machine's
noise falls on every mode alike:

    plain        enable.idempotence=false
    idempotent   enable.idempotence=true
    txn-100      transactional.id set, a transaction committed every 100 messages
    txn-10000    the same, every 10,000 messages

Each round produces for --seconds per mode as fast as the client can; MB/s = values
acknowledged (or committed) / elapsed. The table gives each mode's median over the rounds
and its ratio to `plain` in the same rounds. Then end-to-end latency (produce() call ->
record read) at a fixed rate (--e2e-rate messages/s): `plain` read by a read_uncommitted
consumer, `txn-100` by a read_committed one (whose records appear only once their
transaction's COMMIT marker is below the LSO), p50/p99.

    PYTHONPATH=. .venv/bin/python tests/perf/bench_producers.py                 # ~5 min
    PYTHONPATH=. .venv/bin/python tests/perf/bench_producers.py --rounds 1 --seconds 5 --no-e2e

The same modes also run against librdkafka's built-in mock cluster (3 brokers, in this
process; `test.mock.num.brokers`), alternating with pykraft in every round (--no-mock skips
it; --mock-rtt MS adds `test.mock.broker.rtt` to every mock request). The mock does no disk
or replication work and answers acks=all at once, so a cost idempotence has on both is the
client's, and one it has on pykraft alone is the broker's.

Beside each figure, from librdkafka's statistics (`statistics.interval.ms`, summed over the
mode's windows): the mean batch (KiB), the mean request round trip (`brokers[].rtt`, ms:
send to answer, which for acks=all includes the followers' copy) and, by Little's law,
the batches in flight per partition = batches/s x round trip / partitions; and the client's
CPU per message acknowledged, its Python thread (`py µs`) and librdkafka's threads (`rdk µs`,
/proc/self/task: on the mock these include the mock brokers). librdkafka's
idempotent producer caps a partition's in-flight *messages* at 5 (`rktp_msgs_inflight` vs
RD_KAFKA_IDEMP_MAX_INFLIGHT in rdkafka_broker.c), so with batches of 5 or more messages a
partition has one Produce request in flight: that column stays <= 1 for the idempotent and
transactional modes, and each partition's rate is one batch per round trip.

Targets (issue 21): idempotence costs under 5 % of throughput; transactions of 10,000
records cost under 10 %. Not collected by pytest (tests/perf/conftest.py).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench_dataplane import (
    FAST_PRODUCER_C,
    MB,
    MSG_BYTES,
    PRODUCER_CONF,
    bundled_librdkafka,
    c_client_exe,
    mock_cluster,
    percentile,
    rd_logger,
    rdkafka_args,
    rest_create_topic,
    wait_for_leaders,
)
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

MODES = ("plain", "idempotent", "txn-100", "txn-10000")
TARGETS = {"idempotent": 0.95, "txn-10000": 0.90}
PARTITIONS = 12  # --partitions


STATS_INTERVAL_MS = 1000


@dataclass(frozen=True, slots=True)
class Sample:
    """One mode's figures in one round; the last three from librdkafka's statistics."""

    mb_s: float  # values acknowledged (or committed) per second, MB = 10**6 bytes
    batch_kib: float  # mean ProduceRequest batch (messages' bytes per partition batch), KiB
    rtt_ms: float  # mean request round trip over the brokers, ms
    in_flight: float  # mean batches in flight per partition (Little's law)
    python_us: float = float("nan")  # this process's Python thread, CPU µs per message acknowledged
    rdk_us: float = float("nan")  # librdkafka's threads (rdk:*), CPU µs per message acknowledged


def thread_cpu_s() -> tuple[float, float]:
    """CPU seconds so far of this process's threads: (the rest, librdkafka's `rdk:` threads).
    The producers of earlier samples are gone, so the difference over one sample is its own."""
    tick = os.sysconf("SC_CLK_TCK")
    mine = rdk = 0.0
    for task in Path("/proc/self/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # a thread that ended meanwhile
        cpu = (int(fields[11]) + int(fields[12])) / tick
        if name.startswith("rdk:"):
            rdk += cpu
        else:
            mine += cpu
    return mine, rdk


class StatsTotals:
    """Sums librdkafka's per-window statistics (each emission covers one interval)."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.batches = 0
        self.batch_bytes = 0.0
        self.rtt_sum_us = 0.0
        self.rtt_cnt = 0

    def __call__(self, raw: str) -> None:
        stats = json.loads(raw)
        for broker in stats.get("brokers", {}).values():
            rtt = broker.get("rtt", {})
            if broker.get("nodeid", -1) >= 0 and rtt.get("cnt", 0) > 0:
                self.rtt_sum_us += rtt["avg"] * rtt["cnt"]
                self.rtt_cnt += rtt["cnt"]
        topic = stats.get("topics", {}).get(self.topic)
        if topic is not None:
            cnt = topic.get("batchcnt", {}).get("cnt", 0)
            self.batches += cnt
            self.batch_bytes += topic.get("batchsize", {}).get("avg", 0) * cnt

    def sample(self, mb_s: float, seconds: float, partitions: int) -> Sample:
        rtt_s = self.rtt_sum_us / self.rtt_cnt / 1e6 if self.rtt_cnt else float("nan")
        batch = self.batch_bytes / self.batches if self.batches else float("nan")
        in_flight = self.batches / seconds * rtt_s / partitions if self.batches else float("nan")
        return Sample(mb_s, batch / 1024, rtt_s * 1000, in_flight)


def mode_settings(mode: str, n: int) -> tuple[dict[str, Any], int | None]:
    """librdkafka settings of a mode (beyond PRODUCER_CONF and acks=all) and its transaction
    size (None: no transactions)."""
    if mode == "plain":
        return {}, None
    if mode == "idempotent":
        return {"enable.idempotence": True}, None
    return {"enable.idempotence": True, "transactional.id": f"bench-{mode}-{n}"}, int(mode.split("-")[1])


def producer_for(
    mode: str, bootstrap: str, work: Path, n: int, stats: StatsTotals | None = None
) -> tuple[Any, int | None]:
    """The producer of a mode and its transaction size (None: no transactions); `stats`
    receives its statistics."""
    conf = {**PRODUCER_CONF, "bootstrap.servers": bootstrap, "acks": "all", "logger": rd_logger(work)}
    if stats is not None:
        conf |= {"statistics.interval.ms": STATS_INTERVAL_MS, "stats_cb": stats}
    settings, size = mode_settings(mode, n)
    p = Producer({**conf, **settings})
    if size is not None:
        p.init_transactions(60)
    return p, size


# --producer c: tests/perf/fast_producer.c, built in main().
FAST_PRODUCER: Path | None = None


def fast_throughput(exe: Path, mode: str, bootstrap: str, topic: str, seconds: float, work: Path, n: int) -> Sample:
    """`throughput` by fast_producer (librdkafka's producer in C: the same settings, the same
    transactions, no Python per message). `rdk µs` is its whole CPU per message acknowledged."""
    settings, size = mode_settings(mode, n)
    stats_path = work / f"stats-{mode}-{n}-{time.monotonic_ns()}.jsonl"
    conf: dict[str, Any] = {**PRODUCER_CONF, "acks": "all", **settings,
                            "statistics.interval.ms": STATS_INTERVAL_MS, "stats.file": stats_path}  # fmt: skip
    if size is not None:
        conf["txn.messages"] = size
    args = rdkafka_args(conf)
    cmd = [str(exe), bootstrap, topic, str(PARTITIONS), str(seconds), "0", "0", str(MSG_BYTES), *args]
    done = subprocess.run(cmd, input="go\n", capture_output=True, text=True, timeout=seconds + 300, check=False)  # noqa: S603
    lines = done.stdout.splitlines()
    if done.returncode != 0 or len(lines) < 2 or lines[0] != "ready":
        raise RuntimeError(f"fast_producer {mode} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    out = json.loads(lines[1])
    if out["errors"] or out["not_delivered"]:
        raise RuntimeError(f"fast_producer {mode}: {out}")
    stats = StatsTotals(topic)
    for raw in stats_path.read_text().splitlines():
        stats(raw)
    stats_path.unlink()
    acked, elapsed = int(out["acked"]), float(out["seconds"])
    sample = stats.sample(acked * MSG_BYTES / MB / elapsed, elapsed + 1.2, PARTITIONS)
    return replace(sample, rdk_us=float(out["cpu_s"]) / max(acked, 1) * 1e6)


def throughput(mode: str, bootstrap: str, topic: str, seconds: float, work: Path, n: int) -> Sample:
    """MB/s of values acknowledged (and, with transactions, committed) in `seconds`."""
    if FAST_PRODUCER is not None:
        return fast_throughput(FAST_PRODUCER, mode, bootstrap, topic, seconds, work, n)
    stats = StatsTotals(topic)
    producer, txn_size = producer_for(mode, bootstrap, work, n, stats)
    payload = os.urandom(MSG_BYTES)
    acked = [0]

    def done(err: Any, _msg: Any) -> None:
        if err is None:
            acked[0] += 1

    def send(i: int) -> None:
        while True:
            try:
                producer.produce(topic, payload, partition=i % PARTITIONS, on_delivery=done)
                return
            except BufferError:
                producer.poll(0.0005)

    cpu0 = thread_cpu_s()
    t0 = time.monotonic()
    end, sent = t0 + seconds, 0
    while time.monotonic() < end:
        if txn_size:
            producer.begin_transaction()
            for _ in range(txn_size):
                send(sent)
                sent += 1
            producer.commit_transaction(120)
        else:
            for _ in range(1000):
                send(sent)
                sent += 1
            producer.poll(0)
    assert producer.flush(120) == 0, f"{mode}: messages not delivered"
    elapsed = time.monotonic() - t0
    cpu1 = thread_cpu_s()
    producer.poll(STATS_INTERVAL_MS / 1000 + 0.2)  # the last statistics window
    sample = stats.sample(acked[0] * MSG_BYTES / MB / elapsed, time.monotonic() - t0, PARTITIONS)
    n = max(acked[0], 1)
    return replace(sample, python_us=(cpu1[0] - cpu0[0]) / n * 1e6, rdk_us=(cpu1[1] - cpu0[1]) / n * 1e6)


def mock_with_topic(work: Path, topic: str, partitions: int, rtt_ms: int) -> tuple[Producer, str]:
    """librdkafka's mock cluster (3 brokers) holding `topic` with `partitions` partitions, RF 3,
    and its bootstrap address. The mock has no CreateTopics and auto-creates 4 partitions, so
    the topic is made through librdkafka's C mock api (rd_kafka_mock_topic_create), reached with
    ctypes: the client's rd_kafka_t pointer is the first field after the Python object header
    of confluent-kafka's Handle; checked with rd_kafka_name before use."""
    import bench_dataplane

    plain = bench_dataplane.Producer
    if rtt_ms:
        bench_dataplane.Producer = lambda conf: plain({**conf, "test.mock.broker.rtt": rtt_ms})  # type: ignore[misc]
    try:
        host, bootstrap = mock_cluster(work)
    finally:
        bench_dataplane.Producer = plain  # type: ignore[misc]
    bundled = bundled_librdkafka()
    if bundled is None:
        raise RuntimeError("confluent-kafka carries no librdkafka")
    lib = ctypes.CDLL(str(bundled))
    lib.rd_kafka_name.restype = ctypes.c_char_p
    lib.rd_kafka_name.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_handle_mock_cluster.restype = ctypes.c_void_p
    lib.rd_kafka_handle_mock_cluster.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_mock_topic_create.restype = ctypes.c_int
    lib.rd_kafka_mock_topic_create.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
    rk = ctypes.c_void_p.from_address(id(host) + 2 * ctypes.sizeof(ctypes.c_void_p)).value
    name = lib.rd_kafka_name(rk) if rk else None
    if not name or b"#producer-" not in name:
        raise RuntimeError("could not find the mock host's rd_kafka_t")
    err = lib.rd_kafka_mock_topic_create(lib.rd_kafka_handle_mock_cluster(rk), topic.encode(), partitions, 3)
    md = AdminClient({"bootstrap.servers": bootstrap, "logger": rd_logger(work)}).list_topics(topic, timeout=10)
    got = len(md.topics[topic].partitions) if topic in md.topics else 0
    if err or got != partitions:
        raise RuntimeError(f"mock topic {topic}: error {err}, {got} partitions")
    return host, bootstrap


def end_to_end(mode: str, bootstrap: str, topic: str, rate: int, seconds: float, work: Path) -> tuple[float, float]:
    """p50/p99 ms from produce() to the record's arrival at a consumer (read_committed for
    transactions), at `rate` messages/s."""
    isolation = "read_committed" if mode.startswith("txn") else "read_uncommitted"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-e2e", "enable.auto.commit": False,
                         "isolation.level": isolation, "fetch.wait.max.ms": 100,
                         "logger": rd_logger(work)})  # fmt: skip
    ends = [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)]
    consumer.assign([TopicPartition(topic, p, ends[p]) for p in range(PARTITIONS)])
    latencies: list[float] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            # A short wait: consume() returns only at num_messages or its timeout, which would
            # otherwise add up to the timeout to every record's latency.
            for m in consumer.consume(num_messages=1000, timeout=0.005):
                if m.error() is None and m.value()[:8] == b"e2e-time":
                    latencies.append(time.time() - float(m.value()[8:30]))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    time.sleep(2)  # the consumer is positioned and fetching
    producer, txn_size = producer_for(mode, bootstrap, work, 0)
    t0, sent = time.monotonic(), 0
    while time.monotonic() < t0 + seconds:
        if txn_size:
            producer.begin_transaction()
        for _ in range(txn_size or 1):
            while sent > (time.monotonic() - t0) * rate:
                time.sleep(0.0005)
            value = b"e2e-time" + f"{time.time():22.6f}".encode() + b"x" * (MSG_BYTES - 30)
            producer.produce(topic, value, partition=sent % PARTITIONS)
            producer.poll(0)
            sent += 1
        if txn_size:
            producer.commit_transaction(60)
    producer.flush(60)
    deadline = time.monotonic() + 30
    while len(latencies) < sent and time.monotonic() < deadline:
        time.sleep(0.1)
    stop.set()
    reader.join(5)
    consumer.close()
    lat = sorted(latencies)
    assert len(lat) >= sent * 0.99, f"{mode}: the consumer read {len(lat)} of {sent}"
    return percentile(lat, 0.5) * 1000, percentile(lat, 0.99) * 1000


def print_table(system: str, modes: tuple[str, ...], figures: dict[str, list[Sample]], verdicts: bool) -> None:
    """Each mode's medians over the rounds; `of plain` compares with plain on the same system."""
    base = statistics.median(f.mb_s for f in figures["plain"])
    print(f"\n{system}")
    print(
        f"{'mode':<12} {'MB/s':>7} {'of plain':>9} {'batch KiB':>10} {'rtt ms':>7} {'in flight':>10} "
        f"{'py µs':>6} {'rdk µs':>6} {'target':>8}"
    )
    for mode in modes:
        med = statistics.median(f.mb_s for f in figures[mode])
        batch = statistics.median(f.batch_kib for f in figures[mode])
        rtt = statistics.median(f.rtt_ms for f in figures[mode])
        flight = statistics.median(f.in_flight for f in figures[mode])
        py_us = statistics.median(f.python_us for f in figures[mode])
        rdk_us = statistics.median(f.rdk_us for f in figures[mode])
        target = TARGETS.get(mode) if verdicts else None
        wanted = "" if target is None else f">= {target:.2f}"
        verdict = "" if target is None else ("met" if med / base >= target else "MISSED")
        cells = f"{med:>7.1f} {med / base:>9.2f} {batch:>10.0f} {rtt:>7.1f} {flight:>10.2f}"
        cells += f" {py_us:>6.1f} {rdk_us:>6.1f}"
        print(f"{mode:<12} {cells} {wanted:>8} {verdict}")


def main() -> int:
    global PARTITIONS, FAST_PRODUCER
    from metadata_cluster import start_cluster

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--e2e-rate", type=int, default=1000)
    ap.add_argument("--e2e-seconds", type=float, default=10.0)
    ap.add_argument("--disk-budget-gb", type=float, default=4.0)
    ap.add_argument("--partitions", type=int, default=PARTITIONS)
    ap.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES), help="plain is always measured")
    ap.add_argument("--no-mock", action="store_true", help="skip librdkafka's mock cluster")
    ap.add_argument("--mock-rtt", type=int, default=0, help="test.mock.broker.rtt (ms) for the mock's brokers")
    ap.add_argument("--no-e2e", action="store_true", help="skip the end-to-end latency")
    ap.add_argument("--producer", choices=["c", "python"], default="c",
                    help="the throughput client: tests/perf/fast_producer.c (librdkafka in C, default; python "
                         "when it cannot be built) or confluent-kafka's Python loop (~5 µs of Python per "
                         "message)")  # fmt: skip
    args = ap.parse_args()
    PARTITIONS = args.partitions
    modes = tuple(m for m in MODES if m == "plain" or m in args.modes)
    work = Path(tempfile.mkdtemp(prefix="bench-producers-"))
    if args.producer == "c":
        FAST_PRODUCER = c_client_exe(work, FAST_PRODUCER_C)
    client = "tests/perf/fast_producer.c" if FAST_PRODUCER else "confluent-kafka's Python loop"
    print(f"load average at start: {os.getloadavg()}; throughput client: {client}", flush=True)
    cluster = start_cluster(work / "cluster", brokers=3, properties={
        "min.insync.replicas": "2", "auto.create.topics.enable": "false", "log.retention.check.interval.ms": "1000",
        "transaction.state.log.num.partitions": "3", "offsets.topic.num.partitions": "3"})  # fmt: skip
    try:
        bootstrap = ",".join(
            f"127.0.0.1:{cluster.nodes[b].plan.properties['listeners'].rsplit(':', 1)[1]}" for b in cluster.broker_ids
        )
        topic = "bench-producers"
        rest_create_topic(cluster, topic, PARTITIONS, 3, args.disk_budget_gb * 1e9)
        wait_for_leaders(bootstrap, topic, PARTITIONS, work)
        systems = {"pykraft": bootstrap}
        if not args.no_mock:
            _mock_host, systems["mock"] = mock_with_topic(work, topic, PARTITIONS, args.mock_rtt)
        for address in systems.values():
            throughput("idempotent", address, topic, 3, work, -1)  # warm-up: segments, connections
        figures = {system: {m: list[Sample]() for m in modes} for system in systems}
        for r in range(args.rounds):
            order = modes if r % 2 == 0 else tuple(reversed(modes))
            for system, address in systems.items():
                for mode in order:
                    figures[system][mode].append(throughput(mode, address, topic, args.seconds, work, r))
                one = figures[system]
                print(f"round {r + 1} {system}: " + ", ".join(f"{m} {one[m][-1].mb_s:.1f}" for m in modes)
                      + f" MB/s; load average {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
        print(f"\n{PARTITIONS} partitions, RF 3, acks=all, {MSG_BYTES} B values; medians of {args.rounds} rounds of "
              f"{args.seconds:g} s; in flight = batches in flight per partition (Little's law)")  # fmt: skip
        print_table("pykraft, 3 brokers (min.insync.replicas 2)", modes, figures["pykraft"], verdicts=True)
        if "mock" in figures:
            rtt = f", test.mock.broker.rtt {args.mock_rtt} ms" if args.mock_rtt else ""
            print_table(f"librdkafka mock cluster, 3 brokers, in this process{rtt}", modes, figures["mock"], False)
        if not args.no_e2e:
            print(f"\nend-to-end latency at {args.e2e_rate} messages/s (pykraft):")
            for mode in ("plain", "txn-100") if "txn-100" in modes else ("plain",):
                p50, p99 = end_to_end(mode, bootstrap, topic, args.e2e_rate, args.e2e_seconds, work)
                print(f"  {mode:<10} p50 {p50:.1f} ms, p99 {p99:.1f} ms", flush=True)
        print(f"load average at end: {os.getloadavg()}")
    finally:
        cluster.close()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
