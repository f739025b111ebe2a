"""Partition logs on disk, on a real cluster: Kafka's layout, and a damaged replica that is
cut at restart and refilled from the leader until every replica holds the same bytes."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from dataplane_support import bootstrap, confluent_consume_all, create_topic, log_dir, module_cluster, partition_state
from metadata_cluster import MetadataCluster, wait_until

pytestmark = pytest.mark.integration


cluster = module_cluster("storage")


def segments(cluster: MetadataCluster, broker: int, topic: str, partition: int) -> list[Path]:
    return sorted((log_dir(cluster, broker) / f"{topic}-{partition}").glob("*.log"))


def produce(brokers: str, topic: str, n: int, *, size: int = 200, batch: int = 20) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": brokers, "acks": "all", "linger.ms": 5, "batch.num.messages": batch})
    for i in range(n):
        p.produce(topic, value=(f"{i:08d}".encode() * (size // 8)), partition=0)
    assert p.flush(30) == 0


def replicas_identical(cluster: MetadataCluster, topic: str) -> bool:
    blobs = {b: b"".join(s.read_bytes() for s in segments(cluster, b, topic, 0)) for b in cluster.broker_ids}
    return len(set(blobs.values())) == 1 and len(next(iter(blobs.values()))) > 0


def test_kafka_layout_on_disk(cluster: MetadataCluster) -> None:
    brokers = bootstrap(cluster)
    create_topic(cluster, "layout", partitions=1, rf=3)
    produce(brokers, "layout", 100)
    wait_until("replicas identical", lambda: replicas_identical(cluster, "layout"), 30)
    for b in cluster.broker_ids:
        d = log_dir(cluster, b) / "layout-0"
        # The leader-epoch checkpoint is written on the log dir's disk thread, shortly after
        # (the wait bounds "written at all": 10 s timed out twice on a 2-core machine at a
        # load average of 16).
        wait_until("the leader-epoch checkpoint", (d / "leader-epoch-checkpoint").exists, 60)
        names = sorted(p.name for p in d.iterdir())
        assert "00000000000000000000.log" in names
        assert "00000000000000000000.index" in names
        assert "00000000000000000000.timeindex" in names
        assert "leader-epoch-checkpoint" in names
        assert "partition.metadata" in names
        meta = (d / "partition.metadata").read_text()
        assert meta.startswith("version: 0\ntopic_id: ")

    # The per-log-dir checkpoints are written on the checkpoint interval (500 ms here).
    def checkpoints_written() -> bool:
        root = log_dir(cluster, cluster.broker_ids[0])
        return all(
            (root / name).exists()
            for name in (
                "replication-offset-checkpoint",
                "recovery-point-offset-checkpoint",
                "log-start-offset-checkpoint",
            )
        )

    wait_until("checkpoint files", checkpoints_written, 20)

    def hw_checkpointed() -> bool:
        root = log_dir(cluster, cluster.broker_ids[0])
        lines = (root / "replication-offset-checkpoint").read_text().splitlines()
        return lines[0] == "0" and "layout 0 100" in lines[2:]

    wait_until("the high watermark checkpointed", hw_checkpointed, 20)


@pytest.mark.parametrize("damage", ["torn-tail", "flipped-byte"])
def test_damaged_follower_segment_is_cut_and_refetched(cluster: MetadataCluster, damage: str) -> None:
    """The restarted replica logs exactly what it cut and why: the torn last batch (its
    bytes cut from its start; the framing rule cannot tell a torn batch from a corrupt
    one whose length runs past the end, hence the words), or the batch whose CRC no longer
    matches (named by its byte position); then it refetches and matches the leader."""
    from quorum.storage.record_batch import scan_frames

    brokers = bootstrap(cluster)
    topic = f"damaged-{damage}"
    create_topic(cluster, topic, partitions=1, rf=3)
    produce(brokers, topic, 400)
    wait_until("replicas identical", lambda: replicas_identical(cluster, topic), 30)
    state = partition_state(cluster, topic)[0]
    leader = int(state["leader"])
    victim = next(b for b in state["replicas"] if b != leader)
    # An unclean stop: the recovery point is behind the damage, so recovery scans it.
    cluster.kill9(victim)
    seg = segments(cluster, victim, topic, 0)[-1]
    base = int(seg.stem)
    size = seg.stat().st_size
    last = scan_frames(seg.read_bytes()).frames[-1]
    assert last.position + last.size == size and last.size > 100
    with open(seg, "r+b") as f:
        if damage == "torn-tail":
            f.truncate(size - 37)  # the last batch loses its end
            cut, why = size - 37 - last.position, "torn or corrupt batch"
        else:
            f.seek(size - 100)  # inside the last batch's records: its CRC no longer matches
            b = f.read(1)
            f.seek(size - 100)
            f.write(bytes([b[0] ^ 0xFF]))
            # The position named is the bad batch's in the segment file.
            cut, why = size - last.position, f"CRC mismatch (batch at byte {last.position})"
        f.flush()
        os.fsync(f.fileno())
    logged_before = len(cluster.node_log(victim))
    cluster.start(victim)
    wait_until(f"broker {victim} back in the ISR", lambda: victim in partition_state(cluster, topic)[0]["isr"], 60)
    wait_until("replicas identical again", lambda: replicas_identical(cluster, topic), 30)
    msgs = confluent_consume_all(brokers, topic, [0], expected=400)
    assert [m.offset() for m in msgs] == list(range(400))
    restart_log = cluster.node_log(victim)[logged_before:]
    reason = re.escape(why)
    cut_line = rf"{topic}-0: cut {cut} bytes at the end of segment {base}: {reason}\n"
    recovered_line = (
        rf"{topic}-0: recovered 1 segments from offset \d+ \(of 1 segments\), cut {cut} bytes \({reason}\)\n"
    )
    assert re.search(cut_line, restart_log), restart_log[-3000:]
    assert re.search(recovered_line, restart_log), restart_log[-3000:]
