"""Transactions end to end on a real 3+3 cluster, with confluent-kafka (issue 21, item 3):

- Exactly-once copy: a consume-transform-produce loop (tests/integration/txn_copier.py, its
  own process) copies a topic of numbered records in transactions that also commit the
  group's offsets (`send_offsets_to_transaction`), every 7th aborted on purpose, while, in
  turn, the leader of an output
  partition, the group coordinator and the transaction coordinator are killed with kill -9.
  A `read_committed` consumer of the output sees every input record exactly once. A
  `read_uncommitted` consumer sees, besides those, exactly the records of the transactions
  that the partitions list as aborted (read with a raw read_committed Fetch and the client's
  rule for its `aborted_transactions`), and no committed record is among them.
  The copier is restarted (same transactional.id) whenever it exits, as a supervisor would:
  it exits on its own when a transaction hangs in librdkafka after the group coordinator's
  broker left and rejoined the metadata (librdkafka issue #5511; see txn_copier.py), and
  the restarted producer fences and aborts what the old one left open.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from dataplane_support import bootstrap, broker_port, create_topic, module_cluster, partition_state
from kafka_raw import call
from metadata_cluster import MetadataCluster, wait_until

from broker.group.records import coordinator_partition
from broker.log.records import batch_records
from broker.txn.records import transaction_partition
from quorum.storage.batch_layout import (
    ATTR_CONTROL,
    ATTRIBUTES_AT,
    BATCH_LENGTH_AT,
    LAST_OFFSET_DELTA_AT,
    LOG_OVERHEAD,
    PRODUCER_ID_AT,
)

pytestmark = pytest.mark.integration

INTERNAL_PARTITIONS = 3
COPIER = str(Path(__file__).with_name("txn_copier.py"))

cluster = module_cluster(
    "txn",
    {
        "group.initial.rebalance.delay.ms": "0",
        "offsets.topic.num.partitions": str(INTERNAL_PARTITIONS),
        "transaction.state.log.num.partitions": str(INTERNAL_PARTITIONS),
    },
)


class Copier:
    """The copier process and the events it printed; restarted (same transactional id) if it
    exits, as an application's supervisor would."""

    def __init__(self, brokers: str, group: str, src: str, dst: str, txn_id: str, log_path: Path) -> None:
        self.log_path = log_path  # the processes' stderr: librdkafka's log lines, tracebacks
        self.argv = [sys.executable, COPIER, "--bootstrap", brokers, "--group", group, "--input", src, "--output", dst,
                     "--txn-id", txn_id, "--batch", "40", "--pause-ms", "20", "--abort-every", "7"]  # fmt: skip
        self.events: list[dict[str, Any]] = []
        self.exits: list[int] = []
        self._lock = threading.Lock()
        self._stopping = False
        self._proc = self._spawn()

    def _spawn(self) -> subprocess.Popen[bytes]:
        with open(self.log_path, "ab") as err:
            proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=err,
                                    env={**os.environ, "PYTHONUNBUFFERED": "1"})  # fmt: skip
        threading.Thread(target=self._read, args=(proc,), daemon=True).start()
        return proc

    def _read(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            with self._lock:
                self.events.append(json.loads(line))
        rc = proc.wait()
        with self._lock:
            self.exits.append(rc)
            if not self._stopping:
                self._proc = self._spawn()

    def committed(self) -> int:
        with self._lock:
            return sum(e["records"] for e in self.events if e["event"] == "committed")

    def describe(self) -> str:
        with self._lock:
            events = list(self.events)
        tail = self.log_path.read_text(errors="replace").splitlines()[-40:] if self.log_path.exists() else []
        return f"copier exits {self.exits}, last events {events[-10:]}\nits log's tail:\n" + "\n".join(tail)

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            proc = self._proc
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def feed(brokers: str, topic: str, count: int, per_second: int, acked: set[int]) -> None:
    """Numbered records "n:<i>" (key i) to partition i % 3, paced, idempotent, acks=all."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": brokers, "enable.idempotence": True, "linger.ms": 5})

    def done(err: Any, msg: Any) -> None:
        if err is None:
            acked.add(int(msg.key()))

    start = time.monotonic()
    for i in range(count):
        p.produce(topic, key=str(i).encode(), value=f"n:{i}".encode(), partition=i % 3, on_delivery=done)
        p.poll(0)
        ahead = start + i / per_second - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
    assert p.flush(60) == 0, "the feeder could not deliver everything"


def read_to_end(brokers: str, topic: str, partitions: int, isolation: str) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of every record a consumer with `isolation` reads, from the
    start to where the partitions end (the LSO for read_committed)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": brokers, "group.id": "unused", "enable.auto.commit": False,
                  "isolation.level": isolation})  # fmt: skip
    try:
        tps = [TopicPartition(topic, p, 0) for p in range(partitions)]
        c.assign(tps)
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
        out: list[tuple[int, int, bytes]] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for m in c.consume(num_messages=1000, timeout=0.5):
                if m.error() is None:
                    out.append((m.partition(), m.offset(), m.value()))
            positions = {tp.partition: tp.offset for tp in c.position(tps)}
            if all(positions[p] >= ends[p] for p in ends):
                return out
        raise AssertionError(f"{isolation} consumer stuck at {c.position(tps)}, ends {ends}")
    finally:
        c.close()


def aborted_offsets(port: int, topic: str, partition: int) -> tuple[set[int], int]:
    """The offsets of data records in aborted transactions of one partition, by a raw
    read_committed Fetch from offset 0 and the client's rule: a batch of a producer whose
    listed aborted transaction started at or before it, up to that producer's next control
    batch (its ABORT marker), is aborted. Also the number of aborted transactions listed."""
    offset, aborted, listed = 0, set(), 0
    open_aborts: dict[int, list[int]] = {}  # producer id -> first offsets of listed aborted txns
    active: set[int] = set()
    while True:
        from kio.schema.fetch.v12.request import FetchPartition, FetchTopic

        part_req = FetchPartition(partition=partition, current_leader_epoch=-1, fetch_offset=offset,
                                  last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=8 << 20)
        r = call(port, 1, 12, replica_id=-1, max_wait=timedelta(0), min_bytes=0, max_bytes=8 << 20, isolation_level=1,
                 session_id=0, session_epoch=-1, rack_id="", topics=[FetchTopic(topic=topic, partitions=[part_req])],
                 forgotten_topics_data=[])  # fmt: skip
        (part,) = r.responses[0].partitions
        assert int(part.error_code) == 0, part
        for t in part.aborted_transactions or ():
            if int(t.first_offset) >= offset and int(t.first_offset) not in open_aborts.get(int(t.producer_id), []):
                open_aborts.setdefault(int(t.producer_id), []).append(int(t.first_offset))
                listed += 1
        data = memoryview(bytes(part.records or b""))
        pos = 0
        while pos + LOG_OVERHEAD <= len(data):
            size = LOG_OVERHEAD + int.from_bytes(data[pos + BATCH_LENGTH_AT : pos + BATCH_LENGTH_AT + 4], "big")
            if pos + size > len(data):
                break
            batch = data[pos : pos + size]
            base = int.from_bytes(batch[:8], "big", signed=True)
            last = base + int.from_bytes(batch[LAST_OFFSET_DELTA_AT : LAST_OFFSET_DELTA_AT + 4], "big")
            pid = int.from_bytes(batch[PRODUCER_ID_AT : PRODUCER_ID_AT + 8], "big", signed=True)
            control = bool(int.from_bytes(batch[ATTRIBUTES_AT : ATTRIBUTES_AT + 2], "big") & ATTR_CONTROL)
            starts = open_aborts.get(pid, [])
            if starts and starts[0] <= base:
                starts.pop(0)
                active.add(pid)
            if control:
                active.discard(pid)
            elif pid in active:
                aborted.update(o for o, _, _ in batch_records(bytes(batch)))
            offset = last + 1
            pos += size
        if offset >= int(part.last_stable_offset):
            return aborted, listed


def leader_of(cluster: MetadataCluster, topic: str, partition: int) -> int:
    return int(partition_state(cluster, topic)[partition]["leader"])


def kill_and_restart(cluster: MetadataCluster, victim: int) -> None:
    cluster.kill9(victim)
    cluster.restart(victim)
    cluster.wait_unfenced([victim], timeout=60)
    assert not cluster.wait_started(60, [victim]), f"broker {victim} exited after its restart"


def test_consume_transform_produce_is_exactly_once_across_leader_and_coordinator_kills(
    cluster: MetadataCluster, tmp_path: Path
) -> None:
    src, dst, group, txn_id, count = "eos-in", "eos-out", "eos-copier", "eos-copier-txn", 3000
    create_topic(cluster, src, partitions=3)
    create_topic(cluster, dst, partitions=3)
    brokers = bootstrap(cluster)
    acked: set[int] = set()
    feeder = threading.Thread(target=feed, args=(brokers, src, count, 100, acked), daemon=True)
    feeder.start()
    copier = Copier(brokers, group, src, dst, txn_id, Path(os.environ.get("TXN_COPIER_LOG", tmp_path / "copier.log")))
    try:
        wait_until("the copier's first transactions", lambda: copier.committed() >= 100, 90)
        # In turn: an output partition's leader, the group coordinator, the transaction
        # coordinator; each while the copier is in the middle of its work.
        victims = [
            ("output partition leader", lambda: leader_of(cluster, dst, 0)),
            ("group coordinator", lambda: leader_of(cluster, "__consumer_offsets",
                                                    coordinator_partition(group, INTERNAL_PARTITIONS))),
            ("transaction coordinator", lambda: leader_of(cluster, "__transaction_state",
                                                          transaction_partition(txn_id, INTERNAL_PARTITIONS))),
        ]  # fmt: skip
        for what, find in victims:
            victim = find()
            before = copier.committed()
            print(f"killing broker {victim}, the {what}, at {before} records copied")
            kill_and_restart(cluster, victim)
            wait_until(f"the copier moving on after the {what} was killed", lambda b=before: copier.committed() >= b + 100, 120)  # type: ignore[misc]  # noqa: E501
        feeder.join(120)
        assert not feeder.is_alive()
        assert acked == set(range(count)), f"{count - len(acked)} input records not acknowledged"
        wait_until("every input record copied", lambda: copier.committed() >= count, 180)
    except BaseException:
        print(copier.describe())
        raise
    finally:
        copier.stop()

    committed = read_to_end(brokers, dst, 3, "read_committed")
    copies = Counter(v for _, _, v in committed)
    assert set(copies) == {f"copy:n:{i}".encode() for i in range(count)}, "a record is missing or foreign"
    twice = {v: n for v, n in copies.items() if n > 1}
    assert not twice, f"read_committed sees {len(twice)} records more than once, e.g. {list(twice.items())[:5]}"

    uncommitted = read_to_end(brokers, dst, 3, "read_uncommitted")
    committed_at = {(p, o) for p, o, _ in committed}
    extra = {(p, o) for p, o, _ in uncommitted} - committed_at
    listed_total, aborted_all = 0, set()
    for p in range(3):
        aborted, listed = aborted_offsets(broker_port(cluster, leader_of(cluster, dst, p)), dst, p)
        listed_total += listed
        aborted_all |= {(p, o) for o in aborted}
    assert not (aborted_all & committed_at), "a record of an aborted transaction was read as committed"
    assert extra == aborted_all, (
        f"read_uncommitted sees {len(extra)} records beyond read_committed; the partitions list "
        f"{len(aborted_all)} records in {listed_total} aborted transactions"
    )
    aborts = sum(1 for e in copier.events if e["event"] == "aborted")
    on_purpose = sum(1 for e in copier.events if e["event"] == "aborted" and e["error"] == "on purpose")
    assert on_purpose > 0 and listed_total >= on_purpose and aborted_all, (
        f"aborted on purpose {on_purpose}, listed {listed_total}, aborted records {len(aborted_all)}, "
        f"read_uncommitted extra {len(extra)}"
    )
    stalls = sum(1 for e in copier.events if e["event"] == "stalled")
    print(f"{count} records copied exactly once; {aborts} transactions aborted by the copier, {listed_total} "
          f"aborted transactions listed, {len(aborted_all)} aborted records; copier exits {copier.exits}, "
          f"{stalls} of them for librdkafka's stall")  # fmt: skip
