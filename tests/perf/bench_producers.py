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

    PYTHONPATH=. .venv/bin/python tests/perf/bench_producers.py                 # ~4 min
    PYTHONPATH=. .venv/bin/python tests/perf/bench_producers.py --rounds 1 --seconds 5

Why 12 partitions: librdkafka's idempotent producer keeps one Produce request in flight per
partition (it caps a partition's in-flight *messages*, `rktp_msgs_inflight`, at 5, so any
batch of 5 or more messages blocks the next), while without idempotence it pipelines many
per connection. So on few partitions the idempotent rate is one batch per acks=all round trip
per partition, and the figure measures the broker's produce latency, not what idempotence
costs it. With 4 partitions per broker the client has enough requests in flight on either
side (--partitions 3 shows the latency-bound case).

Targets (issue 21): idempotence costs under 5 % of throughput; transactions of 10,000
records cost under 10 %. Not collected by pytest (tests/perf/conftest.py).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench_dataplane import MB, MSG_BYTES, PRODUCER_CONF, percentile, rd_logger, rest_create_topic, wait_for_leaders
from confluent_kafka import Consumer, Producer, TopicPartition

MODES = ("plain", "idempotent", "txn-100", "txn-10000")
TARGETS = {"idempotent": 0.95, "txn-10000": 0.90}
PARTITIONS = 12  # --partitions


def producer_for(mode: str, bootstrap: str, work: Path, n: int) -> tuple[Any, int | None]:
    """The producer of a mode and its transaction size (None: no transactions)."""
    conf = {**PRODUCER_CONF, "bootstrap.servers": bootstrap, "acks": "all", "logger": rd_logger(work)}
    if mode == "plain":
        return Producer(conf), None
    if mode == "idempotent":
        return Producer({**conf, "enable.idempotence": True}), None
    size = int(mode.split("-")[1])
    p = Producer({**conf, "enable.idempotence": True, "transactional.id": f"bench-{mode}-{n}"})
    p.init_transactions(60)
    return p, size


def throughput(mode: str, bootstrap: str, topic: str, seconds: float, work: Path, n: int) -> float:
    """MB/s of values acknowledged (and, with transactions, committed) in `seconds`."""
    producer, txn_size = producer_for(mode, bootstrap, work, n)
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
    return acked[0] * MSG_BYTES / MB / elapsed


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


def main() -> int:
    global PARTITIONS
    from metadata_cluster import start_cluster

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--e2e-rate", type=int, default=1000)
    ap.add_argument("--e2e-seconds", type=float, default=10.0)
    ap.add_argument("--disk-budget-gb", type=float, default=4.0)
    ap.add_argument("--partitions", type=int, default=PARTITIONS)
    ap.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES), help="plain is always measured")
    args = ap.parse_args()
    PARTITIONS = args.partitions
    modes = tuple(m for m in MODES if m == "plain" or m in args.modes)
    work = Path(tempfile.mkdtemp(prefix="bench-producers-"))
    print(f"load average at start: {os.getloadavg()}", flush=True)
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
        throughput("idempotent", bootstrap, topic, 3, work, -1)  # warm-up: segments, connections
        figures: dict[str, list[float]] = {m: [] for m in modes}
        for r in range(args.rounds):
            order = modes if r % 2 == 0 else tuple(reversed(modes))
            for mode in order:
                figures[mode].append(throughput(mode, bootstrap, topic, args.seconds, work, r))
            print(f"round {r + 1}: " + ", ".join(f"{m} {figures[m][-1]:.1f}" for m in modes) + " MB/s", flush=True)
        base = statistics.median(figures["plain"])
        print(f"\n{'mode':<12} {'MB/s (median)':>14} {'of plain':>9} {'target':>8}")
        for mode in modes:
            med = statistics.median(figures[mode])
            target = TARGETS.get(mode)
            verdict = "" if target is None else ("met" if med / base >= target else "MISSED")
            wanted = "" if target is None else f">= {target:.2f}"
            print(f"{mode:<12} {med:>14.1f} {med / base:>9.2f} {wanted:>8} {verdict}")
        print(f"\nend-to-end latency at {args.e2e_rate} messages/s:")
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
