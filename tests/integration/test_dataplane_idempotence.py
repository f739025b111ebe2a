"""Idempotent producers on a real 3+3 cluster (issue 21, items 1 and 2).

- Producer ids come from the active controller in blocks (AllocateProducerIds) and are never
  handed out twice, across a kill -9 of the active controller too.
- Producer batches that break the sequence rules get Kafka's error codes over the wire, and a
  repeated batch its original offset; the broker keeps serving.
- kafka-python's default producer (idempotent since 3.0) and confluent-kafka with
  `enable.idempotence=true` write a numbered sequence while the partition leader is killed
  with kill -9, comes back and gets its leadership back by a preferred election (a leader that
  loses its leadership answers waiting acks=all writes NOT_LEADER_OR_FOLLOWER, and the clients
  send those batches again), and while network faults drop Produce answers after the broker
  wrote the records (the clients send them again): every record is acknowledged and read back
  exactly once, at its acknowledged offset, in order, with no gap.

One cluster for the module; each test uses its own topic and leaves every broker running.
Clients reach the brokers through TCP proxies (each broker advertises its proxy's port), so
that a test can break a connection right after the broker answered.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dataplane_support import DATAPLANE_TIMINGS, bootstrap, broker_port, confluent_consume_all, create_topic
from metadata_cluster import MetadataCluster, wait_until
from tcp_proxy import Proxy, ProxyGroup

pytestmark = pytest.mark.integration

PRODUCE = 0  # api key


@pytest.fixture(scope="module")
def proxy_group() -> Iterator[ProxyGroup]:
    group = ProxyGroup()
    yield group
    group.close()


@pytest.fixture(scope="module")
def broker_proxies() -> dict[int, Proxy]:
    """broker id -> the proxy clients reach it through (filled by `cluster`)."""
    return {}


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, proxy_group: ProxyGroup, broker_proxies: dict[int, Proxy]
) -> Iterator[MetadataCluster]:
    c = MetadataCluster(Path(tmp_path_factory.mktemp("idempotence")), properties=dict(DATAPLANE_TIMINGS))
    for b in c.broker_ids:
        broker_proxies[b] = proxy_group.add(broker_port(c, b))
        c.nodes[b].plan.properties["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{broker_proxies[b].port}"
    try:
        c.start_all()
        assert not c.wait_started(timeout=60), c.diagnostics()
        c.wait_ready(timeout=60)
        yield c
    except BaseException:
        print(c.diagnostics())
        raise
    finally:
        c.close()

COORDINATOR_LOAD_IN_PROGRESS = 14


# --------------------------------------------------------------------------- producer ids


def init_producer_ids(port: int, count: int) -> list[tuple[int, int, int]]:
    """`count` InitProducerId (v4, no transactional id) requests pipelined over one connection:
    (error code, producer id, epoch) of each answer, in order."""
    from kafka.protocol.producer.transaction import InitProducerIdRequest, InitProducerIdResponse

    frames = []
    for i in range(count):
        req = InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000)
        req.with_header(correlation_id=i, client_id="idempotence-test")
        frames.append(bytes(req.encode(version=4, header=True, framed=True)))
    out = []
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"".join(frames))
        f = s.makefile("rb")
        for _ in range(count):
            size = struct.unpack(">i", f.read(4))[0]
            resp = InitProducerIdResponse.decode(f.read(size), version=4, header=True)
            out.append((resp.error_code, resp.producer_id, resp.producer_epoch))
    return out


def producer_ids(cluster: MetadataCluster, broker: int, count: int) -> list[int]:
    """`count` ids from `broker`, asking again for those answered COORDINATOR_LOAD_IN_PROGRESS
    (the broker waits for its next block from the controller)."""
    got: list[int] = []
    deadline = time.monotonic() + 60
    while len(got) < count and time.monotonic() < deadline:
        for code, pid, epoch in init_producer_ids(broker_port(cluster, broker), min(count - len(got), 500)):
            assert code in (0, COORDINATOR_LOAD_IN_PROGRESS), code
            if code == 0:
                assert epoch == 0 and pid >= 0
                got.append(pid)
    assert len(got) == count, f"broker {broker}: {len(got)} of {count} producer ids"
    return got


def producer_ids_records(cluster: MetadataCluster, controller: int) -> list[Any]:
    from quorum.metadata.records import ProducerIdsRecord, decode_record_with_version
    from quorum.storage.record_batch import scan_batches

    out = []
    for seg in sorted(cluster.nodes[controller].partition_dir.glob("*.log")):
        for batch in scan_batches(seg.read_bytes()).batches:
            if batch.control_type is None:
                for value in batch.records:
                    record, _ = decode_record_with_version(value)
                    if isinstance(record, ProducerIdsRecord):
                        out.append(record)
    return out


def test_producer_ids_never_repeat_across_an_active_controller_kill9(cluster: MetadataCluster) -> None:
    per_broker = 1500  # more than a block (1,000) before and after the failover
    ids = [pid for b in cluster.broker_ids for pid in producer_ids(cluster, b, per_broker)]
    active = cluster.active_controller()
    cluster.kill9(active)
    successor = cluster.active_controller(not_id=active)
    ids += [pid for b in cluster.broker_ids for pid in producer_ids(cluster, b, per_broker)]
    cluster.start(active)
    assert len(ids) == len(set(ids)) == 2 * per_broker * len(cluster.broker_ids), "a producer id was handed out twice"
    # Each block is a ProducerIdsRecord in the metadata log, its next id above the previous one.
    records = producer_ids_records(cluster, successor)
    nexts = [r.next_producer_id for r in records]
    assert nexts == sorted(set(nexts)) and all(b - a == 1000 for a, b in zip([0, *nexts], nexts, strict=False))
    assert {r.broker_id for r in records} == set(cluster.broker_ids)
    assert max(ids) < nexts[-1]
    cluster.wait_unfenced()


# --------------------------------------------------------------------------- the rules over the wire


def produce_raw(port: int, topic: str, pid: int, epoch: int, seq: int, n: int = 2) -> tuple[int, int]:
    """One Produce v9 (acks=all) of an idempotent batch of `n` records to partition 0:
    (error code, base offset) of the answer."""
    from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse
    from kafka.record.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(2, 0, False, pid, epoch, seq, batch_size=1 << 20)
    for i in range(n):
        b.append(i, timestamp=int(time.time() * 1000), key=None, value=b"%d" % (seq + i), headers=[])
    partition = ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=bytes(b.build()))
    req = ProduceRequest(
        transactional_id=None, acks=-1, timeout_ms=10000,
        topic_data=[ProduceRequest.TopicProduceData(name=topic, partition_data=[partition])],
    )  # fmt: skip
    req.with_header(correlation_id=1, client_id="idempotence-rules")
    with socket.create_connection(("127.0.0.1", port), timeout=15) as s:
        s.sendall(bytes(req.encode(version=9, header=True, framed=True)))
        f = s.makefile("rb")
        size = struct.unpack(">i", f.read(4))[0]
        resp = ProduceResponse.decode(f.read(size), version=9, header=True)
    answer = resp.responses[0].partition_responses[0]
    return int(answer.error_code), int(answer.base_offset)


def test_sequence_and_epoch_rules_answer_kafkas_error_codes(cluster: MetadataCluster) -> None:
    topic = "idem-rules"
    create_topic(cluster, topic, partitions=1, rf=3)
    leader = leader_of(cluster, topic, 0, cluster.broker_ids[0])
    port = broker_port(cluster, leader)
    [pid] = producer_ids(cluster, leader, 1)
    assert produce_raw(port, topic, pid, 0, 0) == (0, 0)
    assert produce_raw(port, topic, pid, 0, 2) == (0, 2)
    assert produce_raw(port, topic, pid, 0, 0) == (0, 0)  # a retry: its original offset, not written again
    assert produce_raw(port, topic, pid, 0, 5)[0] == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER: a gap
    assert produce_raw(port, topic, pid, 0, 3)[0] == 45  # overlapping, not an exact repeat
    assert produce_raw(port, topic, pid, 3, 7)[0] == 45  # a new epoch must start at 0
    assert produce_raw(port, topic, pid, 3, 0) == (0, 4)  # ...and may
    assert produce_raw(port, topic, pid, 2, 0)[0] == 47  # INVALID_PRODUCER_EPOCH: an older epoch
    assert produce_raw(port, topic, pid + 1, 0, 1234) == (0, 6)  # an unknown producer starts anywhere
    msgs = confluent_consume_all(bootstrap(cluster), topic, [0], expected=8, timeout=30)
    assert [int(m.value()) for m in msgs] == [0, 1, 2, 3, 0, 1, 1234, 1235]


# --------------------------------------------------------------------------- exactly once across a leader kill


class NumberedSender:
    """Sends "<n>" (n = 0, 1, ...) to partition n % partitions from a thread, through an
    idempotent producer of one client library; records each acknowledgement's offset."""

    def __init__(self, client: str, brokers: str, topic: str, partitions: int, rate_per_s: float = 300.0) -> None:
        self.client, self.topic, self.partitions = client, topic, partitions
        self.acked: dict[int, tuple[int, int]] = {}
        self.failed: dict[int, str] = {}
        self.sent = 0
        self._interval = 1.0 / rate_per_s
        self._stop = threading.Event()
        self._lock = threading.Lock()
        if client == "kafka-python":
            from kafka import KafkaProducer

            # The default producer: idempotent, acks=all, retries until delivery_timeout_ms.
            self._kp = KafkaProducer(bootstrap_servers=brokers, linger_ms=2, metadata_max_age_ms=1000)
        else:
            from confluent_kafka import Producer

            self._cp = Producer(
                {
                    "bootstrap.servers": brokers,
                    "enable.idempotence": True,
                    "linger.ms": 2,
                    "topic.metadata.refresh.interval.ms": 1000,
                }
            )
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _acked(self, n: int, partition: int, offset: int) -> None:
        with self._lock:
            assert n not in self.acked, f"record {n} acknowledged twice"
            self.acked[n] = (partition, offset)

    def _failed(self, n: int, why: str) -> None:
        with self._lock:
            self.failed[n] = why

    def _send(self, n: int) -> None:
        value, partition = str(n).encode(), n % self.partitions
        if self.client == "kafka-python":
            fut = self._kp.send(self.topic, value=value, partition=partition)
            fut.add_callback(lambda md, n=n: self._acked(n, md.partition, md.offset))
            fut.add_errback(lambda exc, n=n: self._failed(n, repr(exc)))
        else:

            def report(err: Any, msg: Any, n: int = n) -> None:
                if err is None:
                    self._acked(n, msg.partition(), msg.offset())
                else:
                    self._failed(n, err.name())

            self._cp.produce(self.topic, value=value, partition=partition, on_delivery=report)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._send(self.sent)
            self.sent += 1
            if self.client == "kafka-python":
                time.sleep(self._interval)
            else:
                self._cp.poll(self._interval)

    def start(self) -> NumberedSender:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        if self.client == "kafka-python":
            self._kp.flush(120)
            self._kp.close(10)
        else:
            assert self._cp.flush(120) == 0, "records still undelivered"


def leader_of(cluster: MetadataCluster, topic: str, partition: int, observer: int) -> int:
    for p in cluster.partitions(observer, topic):
        if int(p["partition_id"]) == partition:
            return int((p.get("leader") or {}).get("related", "-1").rsplit("/", 1)[-1])
    return -1


def in_sync_everywhere(cluster: MetadataCluster, topic: str, broker: int, observer: int) -> bool:
    for p in cluster.partitions(observer, topic):
        replicas = cluster.get_json(observer, f"/topics/{topic}/partitions/{p['partition_id']}/replicas")["data"]
        if not any(int(r["broker_id"]) == broker and r.get("is_in_sync") for r in replicas):
            return False
    return True


class AnswerDropper:
    """Network faults: every `interval_s`, the next Produce connection through each broker's
    proxy is closed as soon as the broker answered, the answer dropped (the records are written;
    the client does not know and sends them again)."""

    def __init__(self, group: ProxyGroup, proxies: dict[int, Proxy], interval_s: float = 0.5) -> None:
        self.group, self.proxies, self.interval_s = group, proxies, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.broken_before = sum(p.broken for p in proxies.values())

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            for proxy in self.proxies.values():
                self.group.break_response_to(proxy, PRODUCE)

    def __enter__(self) -> AnswerDropper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        for proxy in self.proxies.values():
            self.group.break_response_to(proxy, -1)  # disarm: no request has api key -1

    @property
    def broken(self) -> int:
        return sum(p.broken for p in self.proxies.values()) - self.broken_before


@pytest.mark.parametrize("client", ["kafka-python", "confluent-kafka"])
def test_idempotent_producer_writes_exactly_once_while_the_leader_is_killed(
    cluster: MetadataCluster, client: str, proxy_group: ProxyGroup, broker_proxies: dict[int, Proxy]
) -> None:
    brokers = bootstrap(cluster)
    topic = f"idem-{client}"
    partitions = 2
    create_topic(cluster, topic, partitions=partitions, rf=3)
    observer = cluster.broker_ids[0]
    sender = NumberedSender(client, brokers, topic, partitions).start()
    try:
        wait_until("records flowing", lambda: len(sender.acked) > 300, 30)
        # Produce answers lost after the write: the clients send those batches again.
        with AnswerDropper(proxy_group, broker_proxies) as faults:
            more = len(sender.acked)
            # Until answers were really dropped (the proxies break one connection per 0.5 s;
            # 300 acknowledgements alone can take less than that on a quiet machine).
            wait_until(
                "writes through dropped answers", lambda: len(sender.acked) > more + 300 and faults.broken >= 2, 60
            )
        print(f"{client}: {faults.broken} produce connections broken after the broker answered")
        assert faults.broken > 0
        victim = leader_of(cluster, topic, 0, observer)
        observer = next(b for b in cluster.broker_ids if b != victim)
        cluster.kill9(victim)
        killed_at = len(sender.acked)
        wait_until("acks=all writes after the kill", lambda: len(sender.acked) > killed_at + 300, 60)
        cluster.start(victim)
        back = f"broker {victim} back in every ISR"
        wait_until(back, lambda: in_sync_everywhere(cluster, topic, victim, observer), 60)
        # Its leaderships come back by a preferred election, while the producer writes.
        r = cluster.post(observer, "/elect-leaders", {"election_type": "PREFERRED", "partitions": None})
        assert r.status_code == 200, r.text
        wait_until("the victim leads partition 0 again", lambda: leader_of(cluster, topic, 0, observer) == victim, 30)
        more = len(sender.acked)
        wait_until("writes after the election", lambda: len(sender.acked) > more + 300, 30)
    finally:
        sender.stop()
    print(f"{client}: sent {sender.sent}, acked {len(sender.acked)}, failed {len(sender.failed)}")
    assert not sender.failed, f"records not acknowledged: {list(sender.failed.items())[:5]}"
    assert len(sender.acked) == sender.sent
    msgs = confluent_consume_all(brokers, topic, range(partitions), expected=sender.sent, timeout=60)
    by_partition: dict[int, list[tuple[int, int]]] = {}
    for m in msgs:
        by_partition.setdefault(m.partition(), []).append((m.offset(), int(m.value())))
    for p in range(partitions):
        got = by_partition.get(p, [])
        values = [v for _, v in got]
        # Exactly once, in production order, no gap: the partition holds its numbers and nothing else.
        assert values == list(range(p, sender.sent, partitions)), f"partition {p}: duplicates, gaps or disorder"
        # Each at the offset its acknowledgement named.
        assert all(sender.acked[v] == (p, o) for o, v in got), f"partition {p}: a record not at its acked offset"
