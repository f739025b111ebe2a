"""Retention and offsets by time on a real 3+3 cluster with real clients:
- a compact-only topic keeps its rolled segments past retention.ms while a delete topic
  beside it, written the same way, loses them; a delete topic whose one segment is never
  rolled by size or age loses it too, once all of it is past retention.ms (the log end
  offset survives as the new log start on every replica);
- ListOffsets by timestamp lands on the exact record inside a compressed batch of every
  codec (confluent-kafka's `offsets_for_times`, kafka-python's for one codec)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from dataplane_support import bootstrap, confluent_consume_all, create_topic, module_cluster
from metadata_cluster import MetadataCluster, wait_until

from quorum.storage.record_batch import scan_frames

pytestmark = pytest.mark.integration

RETENTION_CHECK_MS = 200
RETENTION_MS = 1500


cluster = module_cluster("retention", {"log.retention.check.interval.ms": str(RETENTION_CHECK_MS)})


@pytest.fixture(scope="module")
def brokers(cluster: MetadataCluster) -> str:
    return bootstrap(cluster)


def segment_files(cluster: MetadataCluster, broker: int, topic: str) -> list[Path]:
    root = Path(cluster.nodes[broker].plan.properties["log.dirs"].split(",")[0])
    return sorted((root / f"{topic}-0").glob("*.log"))


def watermarks(brokers: str, topic: str) -> tuple[int, int]:
    """(earliest, latest) offsets of partition 0, asked of its leader (ListOffsets)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": brokers, "group.id": "unused-no-commits", "enable.auto.commit": False})
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
        return int(low), int(high)
    finally:
        c.close()


def produce_keyed(brokers: str, topic: str, n: int) -> None:
    """`n` keyed records (a compacted topic refuses keyless ones), one request each, acks=all."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": brokers, "acks": "all", "linger.ms": 0})
    for i in range(n):
        p.produce(topic, key=f"k{i % 7}".encode(), value=f"{i:06d}".encode() * 20, partition=0)
        assert p.flush(30) == 0


def test_compact_topic_keeps_its_segments_past_retention_while_a_delete_topic_loses_them(
    cluster: MetadataCluster, brokers: str
) -> None:
    small = {"segment.bytes": "1024", "segment.ms": "1000", "retention.ms": str(RETENTION_MS)}
    # min.compaction.lag.ms: the log cleaner leaves its records alone (this test is about retention).
    compact = {"cleanup.policy": "compact", "min.compaction.lag.ms": "3600000"}
    create_topic(cluster, "kept-compact", partitions=1, rf=3, **{**compact, **small})
    create_topic(cluster, "gone-delete", partitions=1, rf=3, **{"cleanup.policy": "delete", **small})
    # Never rolled by size or age (segment.bytes and segment.ms are the defaults): only
    # retention can roll its one, active, segment.
    create_topic(cluster, "idle-delete", partitions=1, rf=3, **{"retention.ms": str(RETENTION_MS)})
    n = 40
    for topic in ("kept-compact", "gone-delete", "idle-delete"):
        produce_keyed(brokers, topic, n)
    written = time.monotonic()
    for topic in ("kept-compact", "gone-delete"):
        wait_until(
            f"{topic} rolled on every replica",
            lambda t=topic: all(len(segment_files(cluster, b, t)) >= 4 for b in cluster.broker_ids),  # type: ignore[misc]
            30,
        )

    # The delete topic: every segment goes once past retention.ms, the idle active one too
    # (rolled first): the log end offset is the new log start on every replica.
    def emptied(topic: str) -> bool:
        return all([p.name for p in segment_files(cluster, b, topic)] == [f"{n:020d}.log"] for b in cluster.broker_ids)

    for topic in ("gone-delete", "idle-delete"):
        wait_until(f"{topic}'s segments deleted on every replica", lambda t=topic: emptied(t), 30)  # type: ignore[misc]
        assert watermarks(brokers, topic) == (n, n)
    assert time.monotonic() - written >= RETENTION_MS / 1000

    # The compact topic beside it, as old and rolled as often, kept everything: give
    # retention several more passes to be sure, then read every record from offset 0.
    time.sleep(5 * RETENTION_CHECK_MS / 1000)
    for b in cluster.broker_ids:
        files = segment_files(cluster, b, "kept-compact")
        assert files[0].name == f"{0:020d}.log" and len(files) >= 4, (b, [p.name for p in files])
    assert watermarks(brokers, "kept-compact") == (0, n)
    got = confluent_consume_all(brokers, "kept-compact", [0], expected=n, timeout=30)
    assert [m.offset() for m in got] == list(range(n))
    # The emptied delete topics keep taking writes at their old end.
    for topic in ("gone-delete", "idle-delete"):
        produce_keyed(brokers, topic, 1)
        assert watermarks(brokers, topic) == (n, n + 1)


def batches_on_disk(cluster: MetadataCluster, topic: str, last_offset: int) -> list[tuple[int, int, int]]:
    """(base offset, last offset, codec) of every batch of partition 0 on a replica that has them all."""
    for b in cluster.broker_ids:
        data = b"".join(p.read_bytes() for p in segment_files(cluster, b, topic))
        frames = scan_frames(data).frames
        if frames and frames[-1].last_offset == last_offset:
            return [(f.base_offset, f.last_offset, f.compression) for f in frames]
    raise AssertionError(f"no replica of {topic}-0 holds offsets up to {last_offset}")


CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def produce_timed(brokers: str, topic: str, codec: str, n: int, t0: int) -> None:
    """`n` records with timestamps t0, t0 + 1, ... compressed with `codec`, in few batches.
    librdkafka sends lz4 uncompressed to a broker that lacks FindCoordinator (its LZ4
    feature needs it; pykraft serves no groups yet), so lz4 comes from kafka-python."""
    if codec == "lz4":
        from kafka import KafkaProducer

        kp = KafkaProducer(
            bootstrap_servers=brokers, acks="all", compression_type=codec, linger_ms=500,
            batch_size=1_000_000, enable_idempotence=False,
        )  # fmt: skip
        for i in range(n):
            kp.send(topic, value=f"record-{i:05d}".encode(), partition=0, timestamp_ms=t0 + i)
        kp.flush(30)
        kp.close()
        return
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": brokers,
            "acks": "all",
            "compression.codec": codec,
            "linger.ms": 500,
            "batch.num.messages": 10_000,
            "batch.size": 4_000_000,
        }
    )
    for i in range(n):
        p.produce(topic, value=f"record-{i:05d}".encode(), partition=0, timestamp=t0 + i)
    assert p.flush(30) == 0


@pytest.mark.parametrize("codec", list(CODECS))
def test_offsets_for_times_finds_the_record_inside_a_compressed_batch(
    cluster: MetadataCluster, brokers: str, codec: str
) -> None:
    from confluent_kafka import Consumer, TopicPartition

    topic = f"times-{codec}"
    create_topic(cluster, topic, partitions=1, rf=3)
    # Recent times: records older than retention.ms (7 days) would be deleted, every segment
    # of them, by the retention pass that runs every RETENTION_CHECK_MS here.
    t0 = int(time.time() * 1000) - 600_000
    n = 1000
    produce_timed(brokers, topic, codec, n, t0)
    wait_until(f"{topic} fully written", lambda: watermarks(brokers, topic)[1] == n, 30)
    # The premise: offset 500 sits inside a compressed batch, not at its start.
    holder = next(b for b in batches_on_disk(cluster, topic, n - 1) if b[0] <= 500 <= b[1])
    assert holder[0] < 500 and holder[2] == CODECS[codec], holder

    c = Consumer({"bootstrap.servers": brokers, "group.id": "unused-no-commits", "enable.auto.commit": False})
    try:
        for target, expected in ((t0 + 500, 500), (t0 + 1, 1), (t0 + n - 1, n - 1), (t0 + n, -1)):
            (found,) = c.offsets_for_times([TopicPartition(topic, 0, target)], timeout=10)
            assert found.error is None and found.offset == expected, (target, found)
    finally:
        c.close()

    if codec == "zstd":
        from kafka import KafkaConsumer
        from kafka import TopicPartition as KTP

        kc = KafkaConsumer(bootstrap_servers=brokers, enable_auto_commit=False)
        try:
            tp = KTP(topic, 0)
            hit = kc.offsets_for_times({tp: t0 + 777})[tp]
            assert hit is not None and (hit.offset, hit.timestamp) == (777, t0 + 777)
        finally:
            kc.close()
