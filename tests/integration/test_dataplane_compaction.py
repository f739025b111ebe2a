"""Log compaction on a real 3+3 cluster with real clients (confluent-kafka, kafka-python):
- a compacted topic written with repeated keys and tombstones keeps the latest value of
  each key at its original offset on every replica, and drops the tombstones once
  delete.retention.ms has passed;
- a consumer reading from offset 0 again and again while a producer writes and the
  cleaner swaps segments always sees offsets rising and, for every key, the latest value
  acknowledged below the end it read to;
- a keyless record sent to a compacted topic is refused with INVALID_RECORD.
Small segment.bytes / segment.ms and log.cleaner.backoff.ms keep it to seconds."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from dataplane_support import bootstrap, create_topic, module_cluster
from metadata_cluster import MetadataCluster, wait_until

from broker.log.records import batch_records
from quorum.storage.record_batch import scan_frames

pytestmark = pytest.mark.integration

COMPACTED = {
    "cleanup.policy": "compact",
    "segment.bytes": "4096",
    "segment.ms": "500",
    "min.cleanable.dirty.ratio": "0.01",
}

QUIET_S = 1.5  # a read from offset 0 is over when nothing arrives for this long (s)
Acked = list[tuple[int, bytes, bytes | None]]  # (offset, key, value) of acknowledged records


cluster = module_cluster("compaction", {"log.cleaner.backoff.ms": "200"})


@pytest.fixture(scope="module")
def brokers(cluster: MetadataCluster) -> str:
    return bootstrap(cluster)


def on_disk(cluster: MetadataCluster, broker: int, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record of partition 0 in a broker's segment files."""
    root = Path(cluster.nodes[broker].plan.properties["log.dirs"].split(",")[0])
    out = []
    for path in sorted((root / f"{topic}-0").glob("*.log")):
        data = path.read_bytes()
        for f in scan_frames(data).frames:
            for offset, _ts, r in batch_records(data[f.position : f.position + f.size], payloads=True):
                out.append((offset, r.key, r.value))
    return out


def read_from_zero(brokers: str, topic: str, timeout: float = 30.0) -> tuple[int, list[Any]]:
    """(end, messages): every message of partition 0 from offset 0 up to the high watermark
    the read began with, read by confluent-kafka (librdkafka)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": brokers,
            "group.id": "unused-no-commits",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.max.bytes": 4096,  # small fetches: one read spans many, and the cleaner's swaps
            "message.max.bytes": 4096,
            "max.partition.fetch.bytes": 4096,
        }
    )
    try:
        _low, end = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
        c.assign([TopicPartition(topic, 0, 0)])
        out: list[Any] = []
        deadline = time.monotonic() + timeout
        quiet_since = time.monotonic()
        while time.monotonic() < deadline:
            for m in c.consume(num_messages=100, timeout=0.2):
                quiet_since = time.monotonic()
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF and m.offset() >= end:
                        return end, out
                elif m.offset() < end:
                    out.append(m)
                else:
                    return end, out
            # The cleaner may have removed the last records below `end` (as in Kafka, the
            # consumer then waits below the high watermark): nothing more for a while is the end.
            if time.monotonic() - quiet_since > QUIET_S:
                return end, out
        raise AssertionError(f"read {len(out)} messages of {topic}-0 below {end} in {timeout} s")
    finally:
        c.close()


def produce(
    brokers: str, topic: str, records: list[tuple[bytes, bytes | None]]
) -> list[tuple[int, bytes, bytes | None]]:
    """acks=all, one at a time; returns (offset, key, value) as acknowledged."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": brokers, "acks": "all", "linger.ms": 0, "batch.size": 1000})  # < segment.bytes
    acked: Acked = []

    errors: list[Any] = []

    def delivered(err: Any, m: Any) -> None:
        if err is None:
            acked.append((m.offset(), m.key(), m.value()))
        else:
            errors.append(err)

    for key, value in records:
        p.produce(topic, key=key, value=value, partition=0, on_delivery=delivered)
        p.poll(0)
    assert p.flush(30) == 0
    assert len(acked) == len(records), errors[:3]
    return sorted(acked)


def test_latest_value_per_key_kept_and_tombstones_dropped_after_delete_retention(
    cluster: MetadataCluster, brokers: str
) -> None:
    topic = "compacted"
    create_topic(cluster, topic, partitions=1, rf=3, **COMPACTED, **{"delete.retention.ms": "3000"})
    writes = [(f"k{i % 20}".encode(), f"value-{i:05d}".encode() * 3) for i in range(400)]
    writes += [(f"k{i}".encode(), None) for i in range(5)]  # tombstones of k0..k4
    acked = produce(brokers, topic, writes)
    latest = {k: (o, v) for o, k, v in acked}
    n = len(acked)
    # Kept: the last record of every key, tombstones included, at its own offset.
    expected = sorted((o, k, v) for k, (o, v) in latest.items())
    live = [(o, k, v) for o, k, v in expected if v is not None]
    assert len(expected) == 20 and len(live) == 15

    def compacted_everywhere() -> bool:
        return all(on_disk(cluster, b, topic) == expected for b in cluster.broker_ids)

    wait_until("the latest record of each key, and nothing else, on every replica", compacted_everywhere, 30)
    end, got = read_from_zero(brokers, topic)
    assert end == n
    assert [(m.offset(), m.key(), m.value()) for m in got] == expected
    # After delete.retention.ms (3 s) the tombstones go too; the live records stay.
    wait_until(
        "tombstones removed on every replica",
        lambda: all(on_disk(cluster, b, topic) == live for b in cluster.broker_ids),
        30,
    )
    end, got = read_from_zero(brokers, topic)
    assert end == n and [(m.offset(), m.key(), m.value()) for m in got] == live


def test_reader_from_zero_sees_a_consistent_view_while_cleaning(cluster: MetadataCluster, brokers: str) -> None:
    topic = "compacted-busy"
    create_topic(cluster, topic, partitions=1, rf=3, **COMPACTED)
    acked: Acked = []
    stop = threading.Event()

    def writer() -> None:
        i = 0
        while not stop.is_set():
            batch = [(f"k{(i + j) % 30}".encode(), f"v{i + j:06d}".encode() * 4) for j in range(50)]
            acked.extend(produce(brokers, topic, batch))
            i += 50

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    try:
        wait_until("some records written", lambda: len(acked) > 300, 30)
        reads = shrunk = 0
        started = time.monotonic()
        # At least 3 s of reads (about 15 cleaner passes) and one that found records removed.
        while time.monotonic() - started < 3 or not shrunk:
            assert time.monotonic() - started < 30, (reads, shrunk)
            end, got = read_from_zero(brokers, topic)
            # Every record below `end` was acknowledged (or its acknowledgement is on its way).
            wait_until(
                "the acknowledgements up to the end read", lambda e=end: max(o for o, _k, _v in acked) >= e - 1, 30
            )  # type: ignore[misc]
            snapshot = sorted(acked)
            offsets = [m.offset() for m in got]
            assert offsets == sorted(set(offsets)), "offsets must rise"
            seen = {m.key(): (m.offset(), m.value()) for m in got}
            # Every key's latest acknowledged record below `end` is what the reader saw last.
            want = {k: (o, v) for o, k, v in snapshot if o < end}
            assert {k: seen.get(k) for k in want} == want
            reads += 1
            shrunk += len(got) < end
        assert reads >= 5, reads
    finally:
        stop.set()
        t.join(60)


def test_keyless_record_refused_on_a_compacted_topic(cluster: MetadataCluster, brokers: str) -> None:
    from kafka import KafkaProducer
    from kafka.errors import InvalidRecordError

    topic = "compacted-keyless"
    create_topic(cluster, topic, partitions=1, rf=3, **COMPACTED)
    for codec in (None, "gzip"):
        p = KafkaProducer(bootstrap_servers=brokers, acks="all", enable_idempotence=False, retries=0,
                          compression_type=codec)  # fmt: skip
        try:
            with pytest.raises(InvalidRecordError):
                p.send(topic, value=b"x" * 500, partition=0).get(timeout=30)
            assert p.send(topic, key=b"k", value=b"x" * 500, partition=0).get(timeout=30).offset >= 0
        finally:
            p.close()
