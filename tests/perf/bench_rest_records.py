"""Benchmark: REST records (streamed) against the Kafka protocol, side by side in one run.

Starts a 3-controller + 3-broker cluster on loopback, creates a topic (RF 3, min ISR 2),
and produces the same 1 KiB records, with acks=all both ways:
  * ``rest-stream``: one client, one chunked POST .../records, reports read while sending
    (tests/integration/rest_stream.py), through a broker's REST listener;
  * ``rest-single``: one record per POST, sequential, on one keep-alive connection (latency);
  * ``kafka``: confluent-kafka straight to the brokers (the same path the REST node's own
    producer takes), as the ceiling.

    python tests/perf/bench_rest_records.py [--records 100000] [--value-bytes 1024] [--rounds 3]

Prints records/s and MB/s per round and the median; the issue's target is >= 20,000
records/s in streamed mode from one client with 1 KiB values.
"""

from __future__ import annotations

import argparse
import base64
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from dataplane_support import bootstrap, create_topic, start_dataplane_cluster  # noqa: E402
from rest_stream import encode_records, stream_records  # noqa: E402


def rest_stream(url: str, records: list[dict[str, object]]) -> float:
    chunks = list(encode_records(records))  # encoded before the clock starts: the client's cost is not the server's
    status, reports, seconds = stream_records(url, chunks, timeout=600)
    bad = [r for r in reports if r.get("error_code") != 200]
    if status != 200 or len(reports) != len(records) or bad:
        raise SystemExit(f"rest-stream failed: status {status}, {len(reports)} reports, first error {bad[:1]}")
    return seconds


def rest_single(url: str, records: list[dict[str, object]]) -> tuple[float, list[float]]:
    latencies: list[float] = []
    with httpx.Client(timeout=60) as http:
        started = time.perf_counter()
        for record in records:
            t0 = time.perf_counter()
            r = http.post(url, json=record)
            latencies.append(time.perf_counter() - t0)
            if r.status_code != 200 or '"error_code":200' not in r.text:
                raise SystemExit(f"rest-single failed: {r.status_code} {r.text[:200]}")
        return time.perf_counter() - started, latencies


def kafka(brokers: str, topic: str, count: int, value: bytes) -> float:
    producer = Producer(
        {"bootstrap.servers": brokers, "acks": "all", "enable.idempotence": False, "partitioner": "murmur2_random"}
    )
    failures: list[object] = []

    def done(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(err)

    started = time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(topic, value=value, key=b"k%d" % i, on_delivery=done)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    producer.flush(600)
    seconds = time.perf_counter() - started
    if failures:
        raise SystemExit(f"kafka failed: {failures[:1]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--value-bytes", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--single", type=int, default=2000, help="records sent one per request")
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="bench-rest-records-"))
    cluster = start_dataplane_cluster(root)
    try:
        create_topic(cluster, "bench", 3, 3)
        broker = cluster.broker_ids[0]
        url = f"{cluster.nodes[broker].rest_url}/v3/clusters/{cluster.cluster_id}/topics/bench/records"
        value = os.urandom(args.value_bytes)
        data = base64.b64encode(value).decode()
        records: list[dict[str, object]] = [
            {"key": {"type": "STRING", "data": f"k{i}"}, "value": {"type": "BINARY", "data": data}}
            for i in range(args.records)
        ]
        rest_stream(url, records[:2000])  # warm-up: the node's producer connects
        kafka(bootstrap(cluster), "bench", 2000, value)
        results: dict[str, list[float]] = {"rest-stream": [], "kafka": []}
        mb = args.records * args.value_bytes / 1e6
        print(f"{args.records} records of {args.value_bytes} B, acks=all, RF 3, min ISR 2, 3 partitions")
        for round_ in range(1, args.rounds + 1):
            for name in ("rest-stream", "kafka"):
                if name == "rest-stream":
                    seconds = rest_stream(url, records)
                else:
                    seconds = kafka(bootstrap(cluster), "bench", args.records, value)
                rate = args.records / seconds
                results[name].append(rate)
                print(f"round {round_} {name:12s} {seconds:6.2f} s  {rate:9.0f} records/s  {mb / seconds:7.1f} MB/s")
        single_s, latencies = rest_single(url, records[: args.single])
        latencies.sort()
        p50, p99 = latencies[len(latencies) // 2] * 1000, latencies[int(len(latencies) * 0.99)] * 1000
        print(
            f"rest-single  {args.single} sequential requests: {args.single / single_s:.0f} requests/s, "
            f"p50 {p50:.1f} ms, p99 {p99:.1f} ms"
        )
        stream_med, kafka_med = statistics.median(results["rest-stream"]), statistics.median(results["kafka"])
        verdict = "PASS" if stream_med >= 20_000 else "MISS"
        print(
            f"median: rest-stream {stream_med:.0f} records/s ({stream_med / kafka_med:.0%} of kafka {kafka_med:.0f}); "
            f"target >= 20,000 records/s: {verdict}"
        )
    finally:
        cluster.close()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
