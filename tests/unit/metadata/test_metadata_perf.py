"""Size and speed of the metadata image at scale.

The 1,000,000-partition benchmark is opt-in (`-m slow`); it prints its figures
(`-s` to see them) and asserts only loose bounds. The memory check runs by
default on a smaller image.
"""

from __future__ import annotations

import gc
import time
import tracemalloc
import uuid

import pytest

from quorum.metadata.image import EMPTY, MetadataImage
from quorum.metadata.records import (
    BrokerEndpoint,
    FeatureLevelRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
    api_key,
    decode_record,
    encode_record,
)
from quorum.metadata.snapshot import image_from_records, image_records
from quorum.raft.types import OffsetAndEpoch
from quorum.storage.snapshots import decode_snapshot, encode_snapshot

BROKERS = 6


def cluster_records(partitions: int, per_topic: int = 1000) -> list[bytes]:
    """metadata.version, 6 brokers, and `partitions` partitions (RF 3) in topics of `per_topic`."""
    out = [encode_record(FeatureLevelRecord("metadata.version", 20))]
    for b in range(BROKERS):
        out.append(
            encode_record(
                RegisterBrokerRecord(
                    b, uuid.UUID(int=b + 1), 10 + b, (BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9092 + b),), fenced=False
                )
            )
        )
    topics = (partitions + per_topic - 1) // per_topic
    for t in range(topics):
        topic_id = uuid.UUID(int=0x10000 + t)
        out.append(encode_record(TopicRecord(f"topic-{t:06d}", topic_id)))
        for p in range(min(per_topic, partitions - t * per_topic)):
            replicas = tuple((t + p + i) % BROKERS for i in range(3))
            out.append(
                encode_record(
                    PartitionRecord(
                        p, topic_id, replicas, replicas, leader=replicas[0], leader_epoch=0, partition_epoch=0
                    )
                )
            )
    return out


def image_bytes_per_partition(records: list[bytes], partitions: int) -> float:
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        image = image_from_records(records, len(records) - 1, 1)
        gc.collect()
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert image.topics.partition_count() == partitions
    return used / partitions


def test_image_memory_per_partition() -> None:
    n = 20_000
    per_partition = image_bytes_per_partition(cluster_records(n), n)
    assert per_partition < 400, per_partition


@pytest.mark.slow
@pytest.mark.perf
def test_one_million_partitions() -> None:
    n = 1_000_000
    records = cluster_records(n)
    partition_records = [r for r in records if r[1] == api_key(PartitionRecord)]
    assert len(partition_records) == n

    gc.collect()
    t0 = time.perf_counter()
    for raw in partition_records:
        decode_record(raw)
    decode_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    image: MetadataImage = image_from_records(records, len(records) - 1, 1)
    replay_s = time.perf_counter() - t0
    assert image.topics.partition_count() == n

    t0 = time.perf_counter()
    snapshot_values = list(image_records(image))
    data = encode_snapshot(OffsetAndEpoch(1, len(records)), snapshot_values, last_contained_timestamp_ms=0)
    encode_s = time.perf_counter() - t0
    del snapshot_values

    t0 = time.perf_counter()
    loaded = image_from_records(decode_snapshot(data), image.offset, image.epoch)
    load_s = time.perf_counter() - t0
    assert loaded == image
    del loaded, data

    del image
    per_partition = image_bytes_per_partition(records, n)
    print(
        f"\n1M partitions: decode {decode_s:.2f}s, decode+replay+apply {replay_s:.2f}s, "
        f"snapshot encode {encode_s:.2f}s, snapshot load {load_s:.2f}s, {per_partition:.0f} B/partition"
    )
    assert replay_s < 30 and load_s < 45 and per_partition < 400
    assert EMPTY.is_empty()
