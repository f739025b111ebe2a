"""Transactions in the partition logs on a real 3+3 cluster (issue 21, item 3, the data plane).

The transaction coordinator is not wired yet, so the test plays its part: transactional
batches go in as raw Produce requests (a transactional id, a producer id from
InitProducerId), and the transactions end by raw WriteTxnMarkers requests to the partition
leader, as a coordinator sends them. Real confluent-kafka consumers then read the topic with
`isolation.level=read_committed` and `read_uncommitted`: the first sees exactly the committed
transactions and the plain records below the last stable offset, the second everything;
both still after the partition leader is killed with kill -9 (the new leader knows the open
transaction from the batches it copied) and after the killed broker recovered its log.
Also over the wire: the markers' and Produce's error codes, DescribeProducers, ListOffsets
with read_committed.

One cluster for the module; each test uses its own topic.
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

import pytest
from dataplane_support import bootstrap, broker_port, create_topic, log_dir, module_cluster
from metadata_cluster import MetadataCluster, wait_until

pytestmark = pytest.mark.integration

# The transactional producers here are hand-made (a producer id and epoch, no coordinator
# behind them), so the leaders must not ask a coordinator first (KIP-890 verification off,
# Kafka's transaction.partition.verification.enable=false); test_transactions.py and
# test_dataplane_txn_coordinator.py run with it on.
cluster = module_cluster("txn-log", {"transaction.partition.verification.enable": "false"})

INVALID_PRODUCER_EPOCH = 47
TRANSACTION_COORDINATOR_FENCED = 52
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
NOT_LEADER_OR_FOLLOWER = 6
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_RECORD = 87


def call(port: int, request: Any, version: int, response_cls: Any) -> Any:
    """One request (kafka-python's encoder), its decoded answer."""
    request.with_header(correlation_id=7, client_id="txn-log-test")
    with socket.create_connection(("127.0.0.1", port), timeout=40) as s:
        s.sendall(bytes(request.encode(version=version, header=True, framed=True)))
        f = s.makefile("rb")
        size = struct.unpack(">i", f.read(4))[0]
        return response_cls.decode(f.read(size), version=version, header=True)


def producer_id(port: int) -> int:
    from kafka.protocol.producer.transaction import InitProducerIdRequest, InitProducerIdResponse

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        resp = call(port, InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000), 4,
                    InitProducerIdResponse)  # fmt: skip
        if resp.error_code == 0:
            return int(resp.producer_id)
        time.sleep(0.2)
    raise AssertionError("no producer id")


def produce(
    port: int, topic: str, values: list[bytes], *, pid: int = -1, epoch: int = -1, seq: int = -1,
    transactional: bool = False, transactional_id: str | None = "txn-log-app", control: bool = False,
) -> tuple[int, int]:  # fmt: skip
    """One Produce v9 (acks=all) of one batch to partition 0: (error code, base offset)."""
    from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse
    from kafka.record.default_records import DefaultRecordBatchBuilder

    if control:
        from broker.log.control_records import EndTxnMarker, encode_marker_batch

        records = encode_marker_batch(pid, epoch, EndTxnMarker(True, 0), int(time.time() * 1000))
    else:
        b = DefaultRecordBatchBuilder(2, 0, transactional, pid, epoch, seq, batch_size=1 << 20)
        for i, v in enumerate(values):
            b.append(i, timestamp=int(time.time() * 1000), key=None, value=v, headers=[])
        records = bytes(b.build())
    partition = ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=records)
    req = ProduceRequest(
        transactional_id=transactional_id, acks=-1, timeout_ms=20000,
        topic_data=[ProduceRequest.TopicProduceData(name=topic, partition_data=[partition])],
    )  # fmt: skip
    answer = call(port, req, 9, ProduceResponse).responses[0].partition_responses[0]
    return int(answer.error_code), int(answer.base_offset)


def write_marker(
    port: int, topic: str, pid: int, epoch: int, committed: bool, *, coordinator_epoch: int = 0,
    partition: int = 0, version: int = 1,
) -> int:  # fmt: skip
    """One WriteTxnMarkers request, as a transaction coordinator sends it: the partition's error."""
    from kafka.protocol.producer.transaction import WriteTxnMarkersRequest, WriteTxnMarkersResponse

    marker = WriteTxnMarkersRequest.WritableTxnMarker(
        producer_id=pid, producer_epoch=epoch, transaction_result=committed, coordinator_epoch=coordinator_epoch,
        topics=[WriteTxnMarkersRequest.WritableTxnMarker.WritableTxnMarkerTopic(name=topic,
                                                                                partition_indexes=[partition])],
    )  # fmt: skip
    resp = call(port, WriteTxnMarkersRequest(markers=[marker]), version, WriteTxnMarkersResponse)
    [m] = resp.markers
    assert m.producer_id == pid
    return int(m.topics[0].partitions[0].error_code)


def describe_producers(port: int, topic: str) -> Any:
    from kafka.protocol.admin.transactions import DescribeProducersRequest, DescribeProducersResponse

    req = DescribeProducersRequest(topics=[DescribeProducersRequest.TopicRequest(name=topic, partition_indexes=[0])])
    return call(port, req, 0, DescribeProducersResponse).topics[0].partitions[0]


def leader(cluster: MetadataCluster, topic: str, not_id: int = -1) -> int:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap(cluster, [b for b in cluster.broker_ids if b != not_id])})
    found: list[int] = []

    def elected() -> bool:
        p = admin.list_topics(topic, timeout=10).topics[topic].partitions[0]
        found[:] = [p.leader]
        return p.leader >= 0 and p.leader != not_id

    wait_until(f"a leader of {topic}-0 other than {not_id}", elected, timeout=60)
    return found[0]


def values(brokers: str, topic: str, isolation: str, expected: int, settle: float = 2.0) -> list[bytes]:
    """The values a consumer of `isolation` reads from the start: until it has `expected` and
    nothing more came for `settle` seconds (or 30 s passed)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": brokers, "group.id": "unused", "enable.auto.commit": False,
                  "isolation.level": isolation})  # fmt: skip
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        out: list[bytes] = []
        deadline = time.monotonic() + 30
        quiet_until = None
        while time.monotonic() < deadline and (quiet_until is None or time.monotonic() < quiet_until):
            got = [m.value() for m in c.consume(num_messages=100, timeout=0.3) if m.error() is None]
            out += got
            if len(out) >= expected and (quiet_until is None or got):
                quiet_until = time.monotonic() + settle
        return out
    finally:
        c.close()


def aborted_entries(cluster: MetadataCluster, broker: int, topic: str) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((log_dir(cluster, broker) / f"{topic}-0").glob("*.txnindex")))


def test_read_committed_sees_committed_transactions_only_across_a_leader_kill9(cluster: MetadataCluster) -> None:
    topic = "txn-log"
    create_topic(cluster, topic, partitions=1, rf=3)
    first = leader(cluster, topic)
    port = broker_port(cluster, first)
    pid = producer_id(port)
    other = producer_id(port)
    brokers = bootstrap(cluster)

    assert produce(port, topic, [b"a0", b"a1"], pid=pid, epoch=0, seq=0, transactional=True) == (0, 0)
    assert produce(port, topic, [b"a2"], pid=pid, epoch=0, seq=2, transactional=True) == (0, 2)
    assert write_marker(port, topic, pid, 0, committed=True) == 0  # 3
    assert produce(port, topic, [b"b0", b"b1"], pid=pid, epoch=0, seq=3, transactional=True) == (0, 4)
    assert produce(port, topic, [b"p0"]) == (0, 6)  # a plain record inside the aborted transaction's span
    assert write_marker(port, topic, pid, 0, committed=False, version=0) == 0  # 7 (v0: not flexible)
    assert produce(port, topic, [b"c0"], pid=other, epoch=0, seq=0, transactional=True) == (0, 8)  # stays open
    assert produce(port, topic, [b"p1"]) == (0, 9)  # above the open transaction: not stable yet

    # The producer state answers Kafka's codes; nothing refused is written.
    assert write_marker(port, topic, other, 0, committed=True, coordinator_epoch=5) == 0  # 10: commits c0
    assert produce(port, topic, [b"c1"], pid=other, epoch=0, seq=1, transactional=True) == (0, 11)  # stays open
    assert write_marker(port, topic, other, 0, committed=True, coordinator_epoch=4) == TRANSACTION_COORDINATOR_FENCED
    assert produce(port, topic, [b"x"], pid=pid, epoch=0, seq=5, transactional=True) == (0, 12)
    assert write_marker(port, topic, pid, 1, committed=False, coordinator_epoch=3) == 0  # 13: an epoch bump aborts x
    assert write_marker(port, topic, pid, 0, committed=True, coordinator_epoch=3) == INVALID_PRODUCER_EPOCH
    follower = next(b for b in cluster.broker_ids if b != first)
    assert write_marker(broker_port(cluster, follower), topic, other, 0, True) == NOT_LEADER_OR_FOLLOWER
    assert write_marker(port, "no-such-topic", other, 0, True) == UNKNOWN_TOPIC_OR_PARTITION
    assert produce(port, topic, [b"y"], pid=pid, epoch=1, seq=0, transactional=True, transactional_id=None) == (
        TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        -1,
    )
    assert produce(port, topic, [], pid=pid, epoch=1, control=True)[0] == INVALID_RECORD

    # The log: a0 a1 a2 C(pid) b0 b1 p0 A(pid) c0 p1 C(other) c1 x A(pid, epoch 1); c1's transaction open.
    every = [b"a0", b"a1", b"a2", b"b0", b"b1", b"p0", b"c0", b"p1", b"c1", b"x"]
    assert values(brokers, topic, "read_uncommitted", len(every)) == every
    committed = [b"a0", b"a1", b"a2", b"p0", b"c0", b"p1"]
    assert values(brokers, topic, "read_committed", len(committed)) == committed  # c1 holds the LSO at 11
    state = describe_producers(port, topic)
    assert state.error_code == 0
    by_id = {p.producer_id: p for p in state.active_producers}
    assert by_id[other].current_txn_start_offset == 11 and by_id[other].coordinator_epoch == 5
    assert by_id[pid].producer_epoch == 1 and by_id[pid].current_txn_start_offset == -1
    assert by_id[pid].coordinator_epoch == 3
    assert describe_producers(broker_port(cluster, follower), topic).error_code == NOT_LEADER_OR_FOLLOWER

    # kill -9 of the leader: the new one knows `other`'s open transaction from what it copied.
    cluster.kill9(first)
    second = leader(cluster, topic, not_id=first)
    survivors = bootstrap(cluster, [b for b in cluster.broker_ids if b != first])
    assert values(survivors, topic, "read_committed", len(committed)) == committed
    assert describe_producers(broker_port(cluster, second), topic).error_code == 0
    wait_until("the commit marker on the new leader",
               lambda: write_marker(broker_port(cluster, second), topic, other, 0, True, coordinator_epoch=5) == 0,
               timeout=30)  # fmt: skip
    committed += [b"c1"]
    assert values(survivors, topic, "read_committed", len(committed)) == committed
    assert values(survivors, topic, "read_uncommitted", len(every)) == every

    # The killed broker recovers its log and catches up: the same aborted-transaction index.
    cluster.start(first)
    cluster.wait_unfenced()
    wait_until("the restarted broker's .txnindex", lambda: aborted_entries(cluster, first, topic)
               == aborted_entries(cluster, second, topic), timeout=60)  # fmt: skip
    assert len(aborted_entries(cluster, second, topic)) == 2 * 34  # b's abort and x's
    assert values(bootstrap(cluster), topic, "read_committed", len(committed)) == committed


def test_list_offsets_latest_is_the_lso_for_read_committed(cluster: MetadataCluster) -> None:
    from confluent_kafka import Consumer, TopicPartition

    topic = "txn-log-offsets"
    create_topic(cluster, topic, partitions=1, rf=3)
    port = broker_port(cluster, leader(cluster, topic))
    pid = producer_id(port)
    assert produce(port, topic, [b"p0", b"p1"]) == (0, 0)
    assert produce(port, topic, [b"t0"], pid=pid, epoch=0, seq=0, transactional=True) == (0, 2)
    assert produce(port, topic, [b"p2"]) == (0, 3)

    def latest(isolation: str) -> int:
        c = Consumer({"bootstrap.servers": bootstrap(cluster), "group.id": "x", "isolation.level": isolation})
        try:
            return int(c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)[1])
        finally:
            c.close()

    assert latest("read_uncommitted") == 4
    assert latest("read_committed") == 2
    assert write_marker(port, topic, pid, 0, committed=False) == 0
    assert latest("read_committed") == latest("read_uncommitted") == 5


def test_find_hanging_lists_a_transaction_no_coordinator_knows(cluster: MetadataCluster) -> None:
    """kafka-transactions.sh find-hanging: a transaction open in a partition whose producer id
    no coordinator lists (here a hand-made producer: verification is off in this module, as
    on a Kafka cluster where hanging transactions happen) is listed once it is older than
    --max-transaction-timeout; it goes from the list once a marker closes it."""
    from metadata_cluster import run_pykraft

    topic = "txn-log-hanging"
    create_topic(cluster, topic, partitions=1, rf=3)
    leader_id = leader(cluster, topic)
    port = broker_port(cluster, leader_id)
    pid = producer_id(port)
    assert produce(port, topic, [b"h0", b"h1"], pid=pid, epoch=0, seq=0, transactional=True) == (0, 0)

    def hanging(*scope: str, max_timeout_min: str = "0") -> list[list[str]]:
        done = run_pykraft("transactions", "--bootstrap-server", bootstrap(cluster), "find-hanging", *scope,
                           "--max-transaction-timeout", max_timeout_min)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return [[c.strip() for c in line.split("\t")] for line in done.stdout.splitlines()]

    header, *rows = hanging("--topic", topic)
    assert header == ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                      "LastTimestamp", "Duration(min)"]  # fmt: skip
    assert [r[:6] for r in rows] == [[topic, "0", str(pid), "0", "-1", "0"]] and rows[0][7] == "0", rows
    assert [topic, "0", str(pid)] in [r[:3] for r in hanging("--broker-id", str(leader_id))[1:]]
    assert hanging("--topic", topic, "--partition", "0", max_timeout_min="15")[1:] == []  # younger than 15 min
    assert write_marker(port, topic, pid, 0, committed=False) == 0
    assert hanging("--topic", topic)[1:] == []
