"""Faults on a real 3+3 cluster with real clients; each test ends by reading back every
acknowledged record: exactly once, at its acknowledged offset, in order, per partition, and
no record anywhere twice.

The producer is confluent-kafka with `acks=all` and `enable.idempotence=true` (issue 21): a
record counts as acknowledged only when its delivery report says so, and then its offset is
known. Unacknowledged records (their delivery timed out) may or may not be in the log, once.

What holds without idempotence: at least once. When a leader loses its leadership (a kill,
a preferred election, an ISR change) while an acks=all write waits, it answers
NOT_LEADER_OR_FOLLOWER, as Kafka does, though the write may already be on the new leader;
librdkafka treats that error as "not written" and sends the batch again without counting a
retry (rdkafka_request.c: REFRESH errors other than _TRANSPORT do not increment it), so even
`message.send.max.retries=0` can write an acknowledged record twice (in the same partition).
With idempotence the new leader, which tracked the producer's sequences as a follower,
recognizes the batch and answers with its original offset instead of writing it again.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from dataplane_support import (
    bootstrap,
    confluent_consume_all,
    create_topic,
    log_dir,
    partition_state,
    records_in,
    start_dataplane_cluster,
)
from metadata_cluster import MetadataCluster, wait_until

pytestmark = pytest.mark.integration


class NumberedProducer:
    """Writes "<n>" records (n = 0, 1, 2, ...) round-robin over partitions in a thread and
    records which were acknowledged, at which (partition, offset). The delivery callbacks run
    on the producer's thread: read `acked` from another thread only through `acked_items()`
    and `acked_since()` (a copy under the lock), or after `stop()`."""

    def __init__(self, brokers: str, topic: str, partitions: int, *, rate_per_s: float = 400.0) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        self.partitions = partitions
        self.acked: dict[int, tuple[int, int]] = {}
        self.failed: dict[int, str] = {}
        self.errors_by_name: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._interval = 1.0 / rate_per_s
        self._producer = Producer(
            {
                "bootstrap.servers": brokers,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 2,
                "message.timeout.ms": 30_000,
                "request.timeout.ms": 5_000,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.sent = 0

    def _on_delivery(self, err: Any, msg: Any) -> None:
        n = int(msg.value())
        with self._lock:
            if err is None:
                self.acked[n] = (msg.partition(), msg.offset())
            else:
                self.failed[n] = err.name()
                self.errors_by_name[err.name()] = self.errors_by_name.get(err.name(), 0) + 1

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            try:
                self._producer.produce(
                    self.topic, value=str(n).encode(), partition=n % self.partitions, on_delivery=self._on_delivery
                )
                n += 1
                self.sent = n
            except BufferError:
                pass
            self._producer.poll(self._interval)
        self._producer.flush(30)

    def start(self) -> NumberedProducer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    def acked_items(self) -> list[tuple[int, tuple[int, int]]]:
        with self._lock:
            return list(self.acked.items())

    def acked_since(self, t0_count: int) -> int:
        with self._lock:
            return sum(1 for n in self.acked if n >= t0_count)


def check_read_back(brokers: str, producer: NumberedProducer) -> dict[int, list[int]]:
    """Every acknowledged record is in its partition exactly once, at its acked offset; the
    acknowledged records of one partition are in production order; no record is anywhere twice."""
    # Exactly what the partitions hold: failed records that never reached the log are not waited for.
    total_hint = records_in(brokers, producer.topic, range(producer.partitions))
    msgs = confluent_consume_all(brokers, producer.topic, range(producer.partitions), expected=total_hint, timeout=60)
    by_partition: dict[int, list[tuple[int, int]]] = {}
    for m in msgs:
        by_partition.setdefault(m.partition(), []).append((m.offset(), int(m.value())))
    seen: dict[int, tuple[int, int]] = {}
    copies: dict[int, list[tuple[int, int]]] = {}
    for p, items in by_partition.items():
        offsets = [o for o, _ in items]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets), f"partition {p} offsets disordered"
        for o, v in items:
            copies.setdefault(v, []).append((p, o))
            seen[v] = (p, o)
    twice = {v: places for v, places in copies.items() if len(places) > 1}
    assert not twice, f"{len(twice)} records written more than once, e.g. {dict(list(twice.items())[:5])}"
    for p, items in by_partition.items():
        acked_values = [v for o, v in items if producer.acked.get(v) == (p, o)]
        assert acked_values == sorted(acked_values), f"partition {p}: acknowledged records out of production order"
    lost = sorted(n for n in producer.acked if n not in seen)
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. {lost[:10]}"
    moved = {n: (producer.acked[n], seen[n]) for n in producer.acked if producer.acked[n] != seen[n]}
    assert not moved, f"acknowledged records at other offsets than acked: {list(moved.items())[:5]}"
    return {p: [v for _, v in items] for p, items in by_partition.items()}


def leaders(cluster: MetadataCluster, topic: str, observer: int) -> dict[int, int]:
    return {
        p: int(s["leader"]) if s["leader"] not in ("", None) else -1
        for p, s in partition_state(cluster, topic, observer).items()
    }


def leader_elections_in_metadata_log(
    cluster: MetadataCluster, topic: str, partition: int = 0
) -> list[tuple[int, bool]]:
    """(leader, unclean) of every leader the metadata log gives `topic`-`partition`, in log
    order, from its PartitionRecord on: -1 when it lost its leader; `unclean` when the record
    marks the election unclean (KIP-704: leader recovery state RECOVERING)."""
    from quorum.metadata.records import (
        NO_LEADER_CHANGE,
        PartitionChangeRecord,
        PartitionRecord,
        TopicRecord,
        decode_record_with_version,
        is_unclean_election,
    )
    from quorum.storage.record_batch import scan_batches

    node = cluster.nodes[cluster.active_controller()]
    topic_id = None
    out: list[tuple[int, bool]] = []
    for seg in sorted(node.partition_dir.glob("*.log")):
        for batch in scan_batches(seg.read_bytes()).batches:
            if batch.control_type is not None:
                continue
            for value in batch.records:
                record, _ = decode_record_with_version(value)
                if isinstance(record, TopicRecord) and record.name == topic:
                    topic_id = record.topic_id
                elif topic_id is None or getattr(record, "topic_id", None) != topic_id:
                    continue
                elif isinstance(record, PartitionRecord) and record.partition_id == partition:
                    out.append((record.leader, False))
                elif (
                    isinstance(record, PartitionChangeRecord)
                    and record.partition_id == partition
                    and record.leader != NO_LEADER_CHANGE
                ):
                    out.append((record.leader, is_unclean_election(record)))
    return out


def log_end_on_disk(cluster: MetadataCluster, broker: int, topic: str, partition: int = 0) -> int:
    """The log end offset a stopped broker's replica restarts with: the end of its last
    whole batch (recovery cuts a torn tail, as this scan stops at one)."""
    from quorum.storage.record_batch import scan_frames

    end = 0
    for seg in sorted((log_dir(cluster, broker) / f"{topic}-{partition}").glob("*.log")):
        frames = scan_frames(seg.read_bytes()).frames
        if frames:
            end = frames[-1].base_offset + frames[-1].last_offset_delta + 1
    return end


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[MetadataCluster]:
    c = start_dataplane_cluster(tmp_path)
    try:
        yield c
    except BaseException:
        print(c.diagnostics())
        raise
    finally:
        c.close()


def test_kill9_of_busiest_leader_loses_nothing_acked_and_it_comes_back(cluster: MetadataCluster) -> None:
    brokers = bootstrap(cluster)
    topic = "numbered"
    create_topic(cluster, topic, partitions=6, rf=3)
    observer = cluster.broker_ids[0]
    producer = NumberedProducer(brokers, topic, 6).start()
    wait_until("records flowing", lambda: len(producer.acked) > 500, 30)
    lead = leaders(cluster, topic, observer)
    counts = {b: sum(1 for leader in lead.values() if leader == b) for b in cluster.broker_ids}
    victim = max(counts, key=lambda b: counts[b])
    observer = next(b for b in cluster.broker_ids if b != victim)
    cluster.kill9(victim)
    killed_at = len(producer.acked)
    # The surviving ISR (2 >= min.insync.replicas) keeps acks=all writes going.
    wait_until("acks=all writes after the kill", lambda: len(producer.acked) > killed_at + 500, 40)
    cluster.start(victim)
    # It truncates, catches up and rejoins every ISR.
    wait_until(
        f"broker {victim} back in every ISR",
        lambda: all(victim in s["isr"] for s in partition_state(cluster, topic, observer).values()),
        60,
    )
    # Preferred election gives its leaderships back.
    r = cluster.post(observer, "/elect-leaders", {"election_type": "PREFERRED", "partitions": None})
    assert r.status_code == 200, r.text
    wait_until(
        "preferred leaders restored",
        lambda: all(int(s["leader"]) == s["replicas"][0] for s in partition_state(cluster, topic, observer).values()),
        30,
    )
    more = len(producer.acked)
    wait_until("writes after the election", lambda: len(producer.acked) > more + 300, 30)
    producer.stop()
    print(f"sent {producer.sent}, acked {len(producer.acked)}, failed {producer.errors_by_name}")
    check_read_back(brokers, producer)


def test_two_of_three_brokers_down_refuses_acks_all(cluster: MetadataCluster) -> None:
    from confluent_kafka import KafkaError, Producer

    brokers = bootstrap(cluster)
    topic = "min-isr"
    create_topic(cluster, topic, partitions=1, rf=3)
    producer = NumberedProducer(brokers, topic, 1).start()
    wait_until("records flowing", lambda: len(producer.acked) > 200, 30)
    producer.stop()
    lead = leaders(cluster, topic, cluster.broker_ids[0])[0]
    down = [b for b in cluster.broker_ids if b != lead]
    for b in down:
        cluster.kill9(b)
    wait_until(
        "the ISR to shrink to the leader",
        lambda: partition_state(cluster, topic, lead)[0]["isr"] == [lead],
        30,
    )
    # The operator's view (kafka-topics.sh --describe's filters), from the surviving leader.
    from metadata_cluster import run_pykraft

    def describe(flag: str) -> list[str]:
        out = run_pykraft("topics", "describe", "--topic", topic, flag, "--rest-url", cluster.nodes[lead].rest_url)
        assert out.returncode == 0, out.stderr
        return [line.strip() for line in out.stdout.splitlines() if line.strip()]

    under = describe("--under-replicated-partitions")
    assert len(under) == 1 and under[0].startswith(f"Topic: {topic}\tPartition: 0\tLeader: {lead}"), under
    assert under[0].endswith(f"Isr: {lead}"), under
    assert describe("--under-min-isr-partitions") == under
    assert describe("--unavailable-partitions") == []
    errors: list[str] = []
    p = Producer(
        {
            "bootstrap.servers": f"127.0.0.1:{cluster.nodes[lead].plan.properties['listeners'].rsplit(':', 1)[1]}",
            "acks": "all",
            "message.send.max.retries": 0,
            "message.timeout.ms": 5000,
        }
    )
    p.produce(
        topic, value=b"refused", partition=0, on_delivery=lambda err, msg: errors.append(err.name() if err else "OK")
    )
    p.flush(15)
    assert errors == [KafkaError(KafkaError.NOT_ENOUGH_REPLICAS).name()], errors
    for b in down:
        cluster.start(b)
    wait_until("full ISR again", lambda: len(partition_state(cluster, topic, lead)[0]["isr"]) == 3, 60)
    check_read_back(brokers, producer)


def test_sigstopped_follower_leaves_isr_and_returns(cluster: MetadataCluster) -> None:
    brokers = bootstrap(cluster)
    topic = "paused"
    create_topic(cluster, topic, partitions=1, rf=3)
    producer = NumberedProducer(brokers, topic, 1, rate_per_s=200).start()
    wait_until("records flowing", lambda: len(producer.acked) > 100, 30)
    lead = leaders(cluster, topic, cluster.broker_ids[0])[0]
    follower = next(b for b in cluster.broker_ids if b != lead)
    os.kill(cluster.nodes[follower].pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        # replica.lag.time.max.ms is 3 s here; the broker session (3 s) fences it too, both
        # take it out of the ISR; writes continue with the remaining two.
        wait_until(
            "the paused follower out of the ISR",
            lambda: follower not in partition_state(cluster, topic, lead)[0]["isr"],
            30,
        )
        print(f"left the ISR after {time.monotonic() - t0:.1f} s")
        n = len(producer.acked)
        wait_until("writes continue", lambda: len(producer.acked) > n + 200, 30)
    finally:
        os.kill(cluster.nodes[follower].pid, signal.SIGCONT)
    wait_until("the follower back in the ISR", lambda: follower in partition_state(cluster, topic, lead)[0]["isr"], 60)
    producer.stop()
    check_read_back(brokers, producer)


# How long after the follower is unfenced the partition must still be offline (unclean
# election off): brokers heartbeat every 0.5 s here (metadata_cluster.FAST_TIMINGS), so
# this is six heartbeats, each a chance to elect.
OFFLINE_WINDOW_S = 3.0


def no_leader(cluster: MetadataCluster, topic: str, observer: int) -> bool:
    return partition_state(cluster, topic, observer)[0]["leader"] in ("", "-1", None)


@pytest.mark.parametrize("unclean", [False, True])
def test_unclean_election(tmp_path: Path, unclean: bool) -> None:
    """rf=2, min.insync.replicas=1: the follower dies, acks=all writes go on with the leader
    alone, then the leader dies and the follower comes back, the only live replica.

    Off (Kafka's default): the partition stays offline the whole time the follower is back,
    and the metadata log never gives it a leader; the old leader's return brings every
    acknowledged record back. On: the follower is elected, the metadata log marks the
    election unclean, and exactly the acknowledged records it never had are lost: those
    at or above its log end when it died (every record acknowledged while it was in the
    ISR survives); the rest are at their acknowledged offsets."""
    c = start_dataplane_cluster(tmp_path, properties={"min.insync.replicas": "1"})
    try:
        brokers = bootstrap(c)
        topic = "unclean"
        create_topic(c, topic, partitions=1, rf=2, unclean_leader_election_enable=str(unclean).lower())
        producer = NumberedProducer(brokers, topic, 1).start()
        wait_until("records flowing", lambda: len(producer.acked) > 100, 30)
        state = partition_state(c, topic, c.broker_ids[0])[0]
        lead = int(state["leader"])
        other = next(b for b in state["replicas"] if b != lead)
        observer = next(b for b in c.broker_ids if b not in state["replicas"])
        # The follower goes first (ISR shrinks to the leader), then the leader: no ISR member left.
        acked_with_both = dict(producer.acked_items())  # acknowledged by the ISR {lead, other}
        c.kill9(other)
        wait_until("ISR = leader only", lambda: partition_state(c, topic, observer)[0]["isr"] == [lead], 30)
        shrunk = len(producer.acked)
        wait_until("acks=all writes on the leader alone", lambda: len(producer.acked) > shrunk + 100, 30)
        producer.stop()
        c.kill9(lead)
        wait_until("the leader fenced", lambda: no_leader(c, topic, observer), 30)
        other_end = log_end_on_disk(c, other, topic)
        c.start(other)
        if not unclean:
            # Offline at every look from the restart until the follower is unfenced and
            # OFFLINE_WINDOW_S more have passed (several heartbeats: each a chance to elect).
            unfenced_at: float | None = None
            leaders_seen: set[str] = set()
            deadline = time.monotonic() + 60
            while unfenced_at is None or time.monotonic() < unfenced_at + OFFLINE_WINDOW_S:
                assert time.monotonic() < deadline, f"broker {other} not unfenced after its restart"
                try:
                    leaders_seen.add(partition_state(c, topic, observer)[0]["leader"])
                    if unfenced_at is None and c.brokers(observer).get(other, {}).get("fenced") is False:
                        unfenced_at = time.monotonic()
                except httpx.HTTPError:
                    pass
                time.sleep(0.05)
            assert leaders_seen <= {"", "-1", "None"}, f"offline partition got a leader: {leaders_seen}"
            assert leader_elections_in_metadata_log(c, topic)[-1] == (-1, False)
            # The old leader's return: a clean election, every acknowledged record back.
            c.start(lead)
            wait_until("the old leader back", lambda: partition_state(c, topic, observer)[0]["leader"] == str(lead), 60)
            assert not any(unclean for _, unclean in leader_elections_in_metadata_log(c, topic))
            check_read_back(brokers, producer)
        else:
            wait_until(
                "unclean leader elected", lambda: partition_state(c, topic, observer)[0]["leader"] == str(other), 30
            )
            elections = wait_until(
                "the election in the metadata log", lambda: leader_elections_in_metadata_log(c, topic), 10
            )
            assert elections[-2:] == [(-1, False), (other, True)], elections
            assert not any(unclean for _, unclean in elections[:-1]), elections
            lost = sorted(n for n, (_, offset) in producer.acked.items() if offset >= other_end)
            assert lost, f"no record was acknowledged by the leader alone (follower's log end {other_end})"
            assert not any(n in lost for n in acked_with_both), "a record acknowledged with the full ISR is lost"
            msgs = confluent_consume_all(brokers, topic, [0], expected=other_end, timeout=30)
            held = {m.offset(): int(m.value()) for m in msgs}
            served = f"{min(held, default=None)}..{max(held, default=None)}"
            assert sorted(held) == list(range(other_end)), f"the new leader serves {served}, not 0..{other_end - 1}"
            kept = {n: offset for n, (_, offset) in producer.acked.items() if offset < other_end}
            assert {n: held.get(offset) for n, offset in kept.items()} == {n: n for n in kept}
            assert not set(lost) & set(held.values()), "a lost record is still served"
            print(f"unclean election lost {len(lost)} acknowledged records ({lost[0]}..{lost[-1]}), kept {len(kept)}")
    finally:
        c.close()
