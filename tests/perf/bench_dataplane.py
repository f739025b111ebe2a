"""Data-plane benchmark: confluent-kafka against a real pykraft cluster and, in the same run,
against librdkafka's built-in mock cluster (in memory, no replication: the ceiling the
client itself sets on this machine).

    PYTHONPATH=. .venv/bin/python tests/perf/bench_dataplane.py            # the full matrix
    PYTHONPATH=. .venv/bin/python tests/perf/bench_dataplane.py --quick    # < 1 minute smoke run

For each cluster shape (1 or 3 brokers, plus 3 controllers; RF = min(3, brokers),
min.insync.replicas = min(2, brokers)) and 1, 3, 6 partitions per broker, with 1 KiB
messages: produce MB/s at saturation with acks=1 and acks=all and the delivery latency
p50/p99; consume MB/s (assign from the beginning); broker CPU seconds per MB ingested
(utime+stime of every broker process, from /proc); then acks=all at half the measured
maximum rate for the latency target. Targets (issue): acks=all RF 3 >= 100 MB/s and >= 1/3
of the mock cluster's rate; <= 10 ms broker CPU per MB; p99 < 20 ms at half the max rate;
consume >= 2x produce. Not collected by pytest.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

MSG = 1024
TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class ProduceResult:
    mb_s: float
    msgs: int
    p50_ms: float
    p99_ms: float
    errors: int
    cpu_ms_per_mb: float


def cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15 of stat)
    return total / TICKS


def produce(
    bootstrap: str, topic: str, partitions: int, acks: str, seconds: float, pids: list[int], rate: float | None = None
) -> ProduceResult:
    latencies: list[float] = []
    errors = [0]

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors[0] += 1
        else:
            latencies.append(msg.latency())

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "queue.buffering.max.kbytes": 262144,
            "enable.idempotence": False,
        }
    )
    payload = os.urandom(MSG)
    cpu0 = cpu_seconds(pids)
    t0 = time.monotonic()
    sent = 0
    end = t0 + seconds
    interval = 1.0 / rate if rate else 0.0
    next_at = t0
    while True:
        now = time.monotonic()
        if now >= end:
            break
        if rate:
            if now < next_at:
                p.poll(min(next_at - now, 0.001))
                continue
            next_at += interval
        try:
            p.produce(topic, payload, partition=sent % partitions, on_delivery=on_delivery)
            sent += 1
        except BufferError:
            p.poll(0.001)
            continue
        if sent % 1000 == 0:
            p.poll(0)
    p.flush(60)
    elapsed = time.monotonic() - t0
    cpu = cpu_seconds(pids) - cpu0
    mb = len(latencies) * MSG / 1e6
    lat = sorted(latencies) or [0.0]
    return ProduceResult(
        mb_s=mb / elapsed,
        msgs=len(latencies),
        p50_ms=statistics.median(lat) * 1000,
        p99_ms=lat[int(len(lat) * 0.99) - 1 if len(lat) > 1 else 0] * 1000,
        errors=errors[0],
        cpu_ms_per_mb=(cpu * 1000 / mb) if mb and pids else float("nan"),
    )


def consume(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 120) -> float:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got = 0
    size = 0
    t0 = time.monotonic()
    while got < expected and time.monotonic() - t0 < timeout:
        for m in c.consume(num_messages=10000, timeout=0.5):
            if m.error() is None:
                got += 1
                size += len(m.value())
    elapsed = time.monotonic() - t0
    c.close()
    return size / 1e6 / elapsed


def mock_cluster() -> tuple[Producer, str]:
    """A client hosting librdkafka's mock cluster (3 brokers) and its bootstrap address."""
    lines: list[str] = []

    class Grab(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logger = logging.getLogger("mock-cluster")
    logger.addHandler(Grab())
    logger.setLevel(logging.DEBUG)
    host = Producer({"test.mock.num.brokers": 3, "debug": "mock", "logger": logger})
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        host.poll(0.1)
        for line in lines:
            if "bootstrap.servers=" in line:
                logger.handlers.clear()
                return host, line.split("bootstrap.servers=", 1)[1].split()[0]
    raise RuntimeError("the mock cluster did not report its bootstrap servers")


def create_topic(bootstrap: str, name: str, partitions: int, rf: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=rf)])[name].result(30)
    # Wait until every partition has a leader (metadata propagated to the brokers).
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(name, timeout=5).topics.get(name)
        if md is not None and len(md.partitions) == partitions and all(p.leader >= 0 for p in md.partitions.values()):
            return
        time.sleep(0.2)
    raise RuntimeError(f"topic {name} not ready")


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def row(label: str, r: ProduceResult, consume_mb_s: float | None = None) -> str:
    c = f"{consume_mb_s:8.1f}" if consume_mb_s is not None else "       -"
    return (
        f"{label:<34} {r.mb_s:8.1f} {r.p50_ms:8.1f} {r.p99_ms:8.1f} {c} {r.cpu_ms_per_mb:8.2f} "
        f"{r.msgs:>9} {r.errors:>6}"
    )


HEADER = (
    f"{'run':<34} {'MB/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'cons MB/s':>8} {'cpu ms/MB':>8} {'msgs':>9} {'errors':>6}"
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=8.0, help="length of each produce run")
    ap.add_argument("--quick", action="store_true", help="3 brokers, 3 partitions per broker, 3 s runs")
    ap.add_argument("--brokers", type=int, nargs="+", default=[1, 3])
    ap.add_argument("--partitions-per-broker", type=int, nargs="+", default=[1, 3, 6])
    args = ap.parse_args()
    if args.quick:
        args.seconds, args.brokers, args.partitions_per_broker = 3.0, [3], [3]
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("mock-cluster").propagate = False
    from metadata_cluster import start_cluster

    print(f"load average at start: {loadavg()}  (2 cores shared; figures are noisy)")
    print(HEADER)
    results: dict[tuple[int, int, str], ProduceResult] = {}
    consumed: dict[tuple[int, int], float] = {}
    for nb in args.brokers:
        rf, min_isr = min(3, nb), min(2, nb)
        root = Path(tempfile.mkdtemp(prefix=f"bench-dp-{nb}-"))
        cluster = start_cluster(
            root,
            brokers=nb,
            properties={"min.insync.replicas": str(min_isr), "auto.leader.rebalance.enable": "false"},
        )
        try:
            bootstrap = ",".join(
                f"127.0.0.1:{cluster.nodes[b].plan.properties['listeners'].rsplit(':', 1)[1]}"
                for b in cluster.broker_ids
            )
            pids = [cluster.nodes[b].pid for b in cluster.broker_ids]
            for ppb in args.partitions_per_broker:
                parts = ppb * nb
                for acks in ("1", "all"):
                    topic = f"bench-{nb}-{ppb}-{acks}"
                    create_topic(bootstrap, topic, parts, rf)
                    r = produce(bootstrap, topic, parts, acks, args.seconds, pids)
                    results[(nb, ppb, acks)] = r
                    cmb = consume(bootstrap, topic, parts, r.msgs) if acks == "all" else None
                    if cmb is not None:
                        consumed[(nb, ppb)] = cmb
                    print(row(f"pykraft {nb}b RF{rf} {parts}p acks={acks}", r, cmb), flush=True)
            # Latency at half the maximum acks=all rate (3 partitions per broker, or the first shape).
            ppb = 3 if 3 in args.partitions_per_broker else args.partitions_per_broker[0]
            best = results[(nb, ppb, "all")]
            rate = best.msgs / args.seconds / 2
            topic = f"bench-{nb}-half"
            create_topic(bootstrap, topic, ppb * nb, rf)
            half = produce(bootstrap, topic, ppb * nb, "all", args.seconds, pids, rate=rate)
            results[(nb, -1, "half")] = half
            print(row(f"pykraft {nb}b acks=all at {rate * MSG / 1e6:.0f} MB/s", half), flush=True)
        finally:
            cluster.close()
    # The mock cluster, same producer and consumer.
    host, mock_bootstrap = mock_cluster()
    mock: dict[str, ProduceResult] = {}
    for acks in ("1", "all"):
        topic = f"mock-{acks}"
        # The mock cluster has no CreateTopics: a Metadata request auto-creates the topic.
        admin = AdminClient({"bootstrap.servers": mock_bootstrap})
        parts = 0
        deadline = time.monotonic() + 20
        while not parts and time.monotonic() < deadline:
            md = admin.list_topics(topic, timeout=5).topics.get(topic)
            parts = len(md.partitions) if md is not None and md.error is None else 0
        # The mock keeps every record in this process's memory: short runs (the rate is the figure).
        r = produce(mock_bootstrap, topic, parts, acks, min(args.seconds, 2.0), [])
        mock[acks] = r
        cmb = consume(mock_bootstrap, topic, parts, r.msgs) if acks == "all" else None
        print(row(f"librdkafka mock 3b {parts}p acks={acks}", r, cmb), flush=True)
    del host
    print(f"load average at end: {loadavg()}")
    # Verdicts on the 3-broker shape with 3 partitions per broker (or what was run).
    nb = 3 if 3 in args.brokers else args.brokers[-1]
    ppb = 3 if 3 in args.partitions_per_broker else args.partitions_per_broker[0]
    r_all = results[(nb, ppb, "all")]
    half = results[(nb, -1, "half")]
    cons = consumed.get((nb, ppb), 0.0)
    checks = [
        ("acks=all RF3 >= 100 MB/s", r_all.mb_s >= 100, f"{r_all.mb_s:.1f} MB/s"),
        (
            "acks=all >= 1/3 of the mock",
            r_all.mb_s >= mock["all"].mb_s / 3,
            f"{r_all.mb_s:.1f} vs {mock['all'].mb_s:.1f}",
        ),
        ("broker CPU <= 10 ms/MB", r_all.cpu_ms_per_mb <= 10, f"{r_all.cpu_ms_per_mb:.2f} ms/MB"),
        ("p99 < 20 ms at half rate", half.p99_ms < 20, f"p99 {half.p99_ms:.1f} ms"),
        ("consume >= 2x produce", cons >= 2 * r_all.mb_s, f"{cons:.1f} vs {r_all.mb_s:.1f} MB/s"),
    ]
    print()
    for name, ok, figure in checks:
        print(f"{'PASS' if ok else 'MISS'}  {name:<32} {figure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
