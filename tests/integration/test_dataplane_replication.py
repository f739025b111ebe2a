"""Replication rules on a real 3+3 cluster, each where a review found the broker wrong:

- a broker that led an epoch in which nothing was written, fenced twice (SIGSTOP) with a
  preferred election between: every replica stays in the ISR and no broker spins (the
  follower that led the empty epoch must drop it from its epoch cache, or it gets the same
  diverging answer forever);
- raising a topic's ``min.insync.replicas`` above the current ISR refuses the next acks=all
  produce at once with NOT_ENOUGH_REPLICAS;
- DeleteRecords into the middle of a batch, then a follower whose log dir was wiped catches
  up (its empty log restarts at the base offset of the batch holding the leader's log start).
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from dataplane_support import bootstrap, confluent_consume_all, create_topic, module_cluster, partition_state
from metadata_cluster import MetadataCluster, wait_until

pytestmark = pytest.mark.integration

LAG_S = 3.0  # replica.lag.time.max.ms of DATAPLANE_TIMINGS


cluster = module_cluster("replication")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def produce(brokers: str, topic: str, values: list[bytes], **conf: Any) -> list[tuple[Any, Any]]:
    """acks=all, no retries: the (error, message) of every delivery report."""
    from confluent_kafka import Producer

    reports: list[tuple[Any, Any]] = []
    p = Producer(
        {
            "bootstrap.servers": brokers,
            "acks": "all",
            "enable.idempotence": False,
            "message.send.max.retries": 0,
            "linger.ms": 20,
            **conf,
        }
    )
    for v in values:
        p.produce(topic, value=v, partition=0, on_delivery=lambda err, msg: reports.append((err, msg)))
    p.flush(60)
    assert len(reports) == len(values)
    return reports


def leader_of(cluster: MetadataCluster, topic: str, node: int) -> int:
    leader = partition_state(cluster, topic, node)[0]["leader"]
    return int(leader) if leader else -1


def test_a_leader_of_an_empty_epoch_fenced_twice_keeps_every_replica_in_sync(cluster: MetadataCluster) -> None:
    brokers = bootstrap(cluster)
    topic = "empty-epoch"
    first, second, third = cluster.broker_ids
    cluster.create_topic(first, topic, replicas_assignments={"0": [first, second, third]})
    wait_until("the topic everywhere", lambda: all(cluster.partitions(b, topic) for b in cluster.broker_ids), 30)
    reports = produce(brokers, topic, [b"%d" % i for i in range(100)])
    assert all(err is None for err, _ in reports), reports[:3]
    for round_ in range(2):
        # The preferred leader pauses: another replica leads a new epoch and writes nothing.
        os.kill(cluster.nodes[first].pid, signal.SIGSTOP)
        try:
            wait_until("another leader", lambda: leader_of(cluster, topic, second) not in (first, -1), 30)
        finally:
            os.kill(cluster.nodes[first].pid, signal.SIGCONT)
        wait_until(
            f"broker {first} back in the ISR (round {round_})",
            lambda: first in partition_state(cluster, topic, second)[0]["isr"],
            30,
        )
        r = cluster.post(second, f"/topics/{topic}/partitions/0/elect-leader", {"election_type": "PREFERRED"})
        assert r.status_code < 300, r.text
        wait_until("the preferred leader back", lambda: leader_of(cluster, topic, second) == first, 30)
    # The follower that led the empty epoch now fetches with it; the leader answers "your epoch
    # ends at your log end". It must truncate there (dropping the empty epoch) and go on: for
    # two lag periods every replica stays in the ISR, and the brokers are quiet.
    pids = {b: cluster.nodes[b].pid for b in cluster.broker_ids}
    before = {b: cpu_seconds(pid) for b, pid in pids.items()}
    t0 = time.monotonic()
    deadline = t0 + 2 * LAG_S + 1
    while time.monotonic() < deadline:
        isr = partition_state(cluster, topic, first)[0]["isr"]
        assert isr == sorted(cluster.broker_ids), f"ISR {isr} {time.monotonic() - t0:.1f} s after the election"
        time.sleep(0.5)
    elapsed = time.monotonic() - t0
    busy = {b: (cpu_seconds(pid) - before[b]) / elapsed for b, pid in pids.items()}
    print(f"broker CPU share over {elapsed:.1f} s: {busy}")
    # An idle broker here uses a few percent of a core; the livelock burnt about half a core.
    assert max(busy.values()) < 0.3, busy
    more = produce(brokers, topic, [b"%d" % i for i in range(100, 150)])
    assert all(err is None for err, _ in more), more[:3]
    msgs = confluent_consume_all(brokers, topic, [0], expected=150)
    assert [int(m.value()) for m in msgs] == list(range(150))


def test_raising_min_insync_replicas_refuses_the_next_acks_all_produce(cluster: MetadataCluster) -> None:
    from confluent_kafka import KafkaError

    brokers = bootstrap(cluster)
    topic = "raised-min-isr"
    create_topic(cluster, topic, partitions=1, rf=3)
    assert all(err is None for err, _ in produce(brokers, topic, [b"before"]))
    state = partition_state(cluster, topic)[0]
    leader = int(state["leader"])
    paused = next(b for b in state["replicas"] if b != leader)
    os.kill(cluster.nodes[paused].pid, signal.SIGSTOP)
    try:
        wait_until("the ISR down to two", lambda: paused not in partition_state(cluster, topic, leader)[0]["isr"], 30)

        def refused_at_once(what: str) -> None:
            t0 = time.monotonic()
            [(err, _)] = produce(brokers, topic, [what.encode()], **{"message.timeout.ms": 15_000})
            took = time.monotonic() - t0
            assert err is not None and err.code() == KafkaError.NOT_ENOUGH_REPLICAS, (what, err)
            assert took < 5, f"{what}: refused after {took:.1f} s"

        # The topic's own value.
        r = cluster.post(
            leader, f"/topics/{topic}/configs:alter", {"data": [{"name": "min.insync.replicas", "value": "3"}]}
        )
        assert r.status_code < 300, r.text
        wait_until("the config on the leader", lambda: _topic_min_isr(cluster, leader, topic) == "3", 10)
        refused_at_once("topic override")
        r = cluster.post(
            leader, f"/topics/{topic}/configs:alter", {"data": [{"name": "min.insync.replicas", "operation": "DELETE"}]}
        )
        assert r.status_code < 300, r.text
        wait_until("the override gone", lambda: _topic_min_isr(cluster, leader, topic) == "2", 10)
        assert all(err is None for err, _ in produce(brokers, topic, [b"min isr 2 again"]))
    finally:
        os.kill(cluster.nodes[paused].pid, signal.SIGCONT)
    wait_until("the ISR full again", lambda: len(partition_state(cluster, topic, leader)[0]["isr"]) == 3, 30)
    assert all(err is None for err, _ in produce(brokers, topic, [b"after"]))


def _topic_min_isr(cluster: MetadataCluster, node: int, topic: str) -> str:
    return str(cluster.get_json(node, f"/topics/{topic}/configs/min.insync.replicas")["value"])


def test_delete_records_inside_a_batch_then_a_wiped_follower_catches_up(cluster: MetadataCluster) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    brokers = bootstrap(cluster)
    topic = "delete-mid-batch"
    create_topic(cluster, topic, partitions=1, rf=3)
    # One batch of 10 records (offsets 0-9), then more batches.
    first = produce(brokers, topic, [b"%d" % i for i in range(10)], **{"linger.ms": 200})
    assert all(err is None for err, _ in first)
    assert all(err is None for err, _ in produce(brokers, topic, [b"%d" % i for i in range(10, 30)]))
    admin = AdminClient({"bootstrap.servers": brokers})
    [fut] = admin.delete_records([TopicPartition(topic, 0, 5)]).values()
    assert fut.result(30).low_watermark == 5
    state = partition_state(cluster, topic)[0]
    leader = int(state["leader"])
    victim = next(b for b in state["replicas"] if b != leader)
    cluster.terminate(victim)
    part_dir = Path(cluster.nodes[victim].plan.properties["log.dirs"].split(",")[0]) / f"{topic}-0"
    shutil.rmtree(part_dir)
    cluster.start(victim)
    wait_until(
        f"wiped broker {victim} back in the ISR",
        lambda: victim in partition_state(cluster, topic, leader)[0]["isr"],
        60,
    )
    msgs = confluent_consume_all(brokers, topic, [0], expected=25)
    assert [m.offset() for m in msgs] == list(range(5, 30))
    assert "restarts its log at offset 0" in cluster.node_log(victim)
