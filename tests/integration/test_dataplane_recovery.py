"""Recovery after kill -9 on a real cluster: a broker that rolled many segments flushes
them in the background and checkpoints its recovery point, so at restart it re-walks
(CRC) only the segments past that point; its replica is then byte-identical to the
leader's and every acknowledged record reads back."""

from __future__ import annotations

import re

import pytest
from dataplane_support import bootstrap, confluent_consume_all, create_topic, log_dir, module_cluster, partition_state
from metadata_cluster import MetadataCluster, wait_until

from broker.log.checkpoints import RECOVERY_POINT_FILE, read_offsets

pytestmark = pytest.mark.integration

TOPIC = "rolled"


cluster = module_cluster("recovery", {"log.flush.offset.checkpoint.interval.ms": "500"})


def segment_bases(cluster: MetadataCluster, broker: int) -> list[int]:
    return sorted(int(p.name[:20]) for p in (log_dir(cluster, broker) / f"{TOPIC}-0").glob("*.log"))


def produce(brokers: str, first: int, n: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": brokers, "acks": "all", "linger.ms": 5, "batch.num.messages": 20})
    for i in range(first, first + n):
        p.produce(TOPIC, value=f"{i:08d}".encode() * 25, partition=0)
    assert p.flush(30) == 0


def replicas_identical(cluster: MetadataCluster) -> bool:
    blobs = {
        b: b"".join(p.read_bytes() for p in sorted((log_dir(cluster, b) / f"{TOPIC}-0").glob("*.log")))
        for b in cluster.broker_ids
    }
    return len(set(blobs.values())) == 1 and len(next(iter(blobs.values()))) > 0


def test_kill9_after_many_rolls_rescans_only_what_lies_past_the_recovery_point(cluster: MetadataCluster) -> None:
    brokers = bootstrap(cluster)
    create_topic(cluster, TOPIC, partitions=1, rf=3, segment_bytes="16384")
    produce(brokers, 0, 3000)  # ~650 KB: about 40 segments of 16 KiB
    state = partition_state(cluster, TOPIC)[0]
    victim = next(b for b in state["replicas"] if b != int(state["leader"]))
    wait_until("replicas identical", lambda: replicas_identical(cluster), 30)

    # The victim flushed its rolled segments and checkpointed the recovery point at the
    # base of its active segment (the only one not flushed).
    def checkpointed() -> int | None:
        bases = segment_bases(cluster, victim)
        rp = read_offsets(log_dir(cluster, victim) / RECOVERY_POINT_FILE).get((TOPIC, 0), 0)
        return rp if len(bases) >= 20 and rp == bases[-1] else None

    rp = wait_until("the recovery point checkpointed at the active segment", checkpointed, 30)
    produce(brokers, 3000, 200)  # acknowledged by every ISR member, the victim too: past rp
    cluster.kill9(victim)
    bases = segment_bases(cluster, victim)
    past = [b for b in bases if b >= rp]
    assert past and len(past) < len(bases) // 4, (rp, bases)
    seen = len(cluster.node_log(victim))
    cluster.start(victim)

    line = re.compile(rf"{TOPIC}-0: recovered (\d+) segments from offset (\d+) \(of (\d+) segments\)")
    found = wait_until("the recovery line", lambda: line.search(cluster.node_log(victim)[seen:]), 60)
    recovered, from_offset, total = (int(g) for g in found.groups())
    # Kafka's rule: the segment holding the recovery point and every one after it.
    assert (recovered, from_offset, total) == (len(past), rp, len(bases)), cluster.node_log(victim)[seen:][-3000:]

    wait_until(f"broker {victim} back in the ISR", lambda: victim in partition_state(cluster, TOPIC)[0]["isr"], 60)
    wait_until("replicas identical again", lambda: replicas_identical(cluster), 30)
    msgs = confluent_consume_all(brokers, TOPIC, [0], expected=3200)
    assert [m.offset() for m in msgs] == list(range(3200))
    assert [m.value()[:8] for m in msgs] == [f"{i:08d}".encode() for i in range(3200)]
