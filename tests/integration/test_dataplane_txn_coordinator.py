"""Transactional producers on a real 3+3 cluster (issue 21, item 3: the coordinator half).

confluent-kafka's transactional producer finds its coordinator (FindCoordinator key type 1
creates `__transaction_state`), `init_transactions()`, commits and aborts transactions (the
coordinator sends the COMMIT/ABORT markers to the partition leaders); a second producer
with the same `transactional.id` fences the first; a transaction left open past its
`transaction.timeout.ms` is aborted by the coordinator; and after kill -9 of the
coordinator's broker the producer finds the new coordinator, which loaded the partition,
and its next transaction commits. A read_committed consumer reads exactly the committed
records.

One cluster for the module; each test uses its own topic and transactional id.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from dataplane_support import bootstrap, create_topic, module_cluster, partition_state
from metadata_cluster import MetadataCluster, run_pykraft, wait_until

from broker.txn.records import transaction_partition

pytestmark = pytest.mark.integration

TXN_PARTITIONS = 5
ABORT_CHECK_MS = 500

cluster = module_cluster(
    "txn-coordinator",
    {
        "transaction.state.log.num.partitions": str(TXN_PARTITIONS),
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": str(ABORT_CHECK_MS),
    },
)


def producer(brokers: str, tid: str, **extra: Any) -> Any:
    from confluent_kafka import Producer

    conf = {"bootstrap.servers": brokers, "transactional.id": tid, "transaction.timeout.ms": 60_000, **extra}
    conf["message.timeout.ms"] = conf["transaction.timeout.ms"]  # librdkafka: no longer than the transaction
    return Producer(conf)


def read_committed(brokers: str, topic: str, partitions: int, expected: int, timeout: float = 30.0) -> list[bytes]:
    """Every value a read_committed consumer reads from `topic` (it stops once `expected` came
    and nothing more arrives for 2 s, or at `timeout`)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": brokers, "group.id": f"reader-{uuid.uuid4()}", "isolation.level":
                  "read_committed", "enable.auto.commit": False, "auto.offset.reset": "earliest"})  # fmt: skip
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    quiet_since = time.monotonic()
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None or m.error():
                if len(values) >= expected and time.monotonic() - quiet_since > 2:
                    break
                continue
            values.append(m.value())
            quiet_since = time.monotonic()
    finally:
        c.close()
    return values


def coordinator_of(cluster: MetadataCluster, tid: str, not_via: int = -1) -> int:
    via = next(b for b in cluster.broker_ids if b != not_via and cluster.nodes[b].running)
    state = partition_state(cluster, "__transaction_state", via)
    return int(state[transaction_partition(tid, TXN_PARTITIONS)]["leader"])


def test_init_transactions_finds_its_coordinator_and_gets_a_producer_id(cluster: MetadataCluster) -> None:
    brokers = bootstrap(cluster)
    p = producer(brokers, "init-only")
    p.init_transactions(60)
    state = partition_state(cluster, "__transaction_state", cluster.broker_ids[0])
    assert len(state) == TXN_PARTITIONS
    assert all(len(s["replicas"]) == 3 for s in state.values())


def test_the_transactions_tool_lists_and_describes_like_kafka_transactions_sh(cluster: MetadataCluster) -> None:
    brokers = bootstrap(cluster)
    p = producer(brokers, "tool-listed")
    p.init_transactions(60)
    coordinator = coordinator_of(cluster, "tool-listed")
    listed = run_pykraft("transactions", "--bootstrap-server", brokers, "--list")
    assert listed.returncode == 0, listed.stderr
    lines = [line.split("\t") for line in listed.stdout.splitlines()]
    assert [c.strip() for c in lines[0]] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    rows = {r[0].strip(): [c.strip() for c in r] for r in lines[1:]}
    assert rows["tool-listed"][1] == str(coordinator) and rows["tool-listed"][3] == "Empty"
    described = run_pykraft("transactions", "--bootstrap-server", brokers, "--describe", "--transactional-id",
                            "tool-listed")  # fmt: skip
    assert described.returncode == 0, described.stderr
    header, row = ([c.strip() for c in line.split("\t")] for line in described.stdout.splitlines())
    assert header == ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                      "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                      "TopicPartitions"]  # fmt: skip
    assert row[:2] == [str(coordinator), "tool-listed"] and row[2] == rows["tool-listed"][2]
    assert row[3:] == ["0", "Empty", "60000", "None", "None", ""]
    missing = run_pykraft("transactions", "--bootstrap-server", brokers, "--describe", "--transactional-id", "nope")
    assert missing.returncode == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in missing.stderr


def tool_table(*args: str) -> list[list[str]]:
    """`pykraft transactions ARGS`' table: its rows (the header first), cells stripped."""
    done = run_pykraft("transactions", *args)
    assert done.returncode == 0, done.stderr
    return [[c.strip() for c in line.split("\t")] for line in done.stdout.splitlines()]


def test_describe_producers_and_find_hanging_show_an_open_transaction(cluster: MetadataCluster) -> None:
    """kafka-transactions.sh describe-producers over DescribeProducers, for a confluent-kafka
    transaction left open, then aborted; find-hanging does not list it (its coordinator
    holds the partition in the transaction)."""
    brokers = bootstrap(cluster)
    topic, tid = "txn-described-producers", "tool-producers"
    create_topic(cluster, topic, partitions=1, rf=3)
    p = producer(brokers, tid)
    p.init_transactions(60)
    before_ms = int(time.time() * 1000)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, value=f"open-{i}".encode(), partition=0)
    assert p.flush(30) == 0
    pid = tool_table("--bootstrap-server", brokers, "--describe", "--transactional-id", tid)[1][2]
    header, *rows = tool_table(
        "--bootstrap-server", brokers, "describe-producers", "--topic", topic, "--partition", "0"
    )
    assert header == ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                      "CurrentTransactionStartOffset"]  # fmt: skip
    assert len(rows) == 1 and rows[0][:4] == [pid, "0", "-1", "2"] and rows[0][5] == "0", rows
    assert before_ms <= int(rows[0][4]) <= int(time.time() * 1000)
    leader = int(partition_state(cluster, topic, cluster.broker_ids[0])[0]["leader"])
    on_leader = tool_table("--bootstrap-server", brokers, "describe-producers", "--topic", topic, "--partition", "0",
                           "--broker-id", str(leader))  # fmt: skip
    assert on_leader[1] == rows[0]
    follower = next(b for b in cluster.broker_ids if b != leader)
    refused = run_pykraft("transactions", "--bootstrap-server", brokers, "describe-producers", "--topic", topic,
                          "--partition", "0", "--broker-id", str(follower))  # fmt: skip
    assert refused.returncode == 1 and "NOT_LEADER_OR_FOLLOWER" in refused.stderr, refused
    hanging = tool_table(
        "--bootstrap-server", brokers, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0"
    )
    assert hanging == [["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                        "LastTimestamp", "Duration(min)"]]  # fmt: skip
    usage = run_pykraft("transactions", "--bootstrap-server", brokers, "find-hanging")
    assert usage.returncode == 2 and "--topic or --broker-id" in usage.stderr
    p.abort_transaction(60)

    def closed() -> bool:
        _, *now = tool_table("--bootstrap-server", brokers, "describe-producers", "--topic", topic, "--partition", "0")
        return len(now) == 1 and now[0][5] == "None" and int(now[0][2]) >= 0

    wait_until("the ABORT marker closed the transaction in the partition", closed, timeout=30)


def test_txn_offset_commit_outside_the_transaction_is_refused_and_writes_nothing(cluster: MetadataCluster) -> None:
    """KIP-890 for TxnOffsetCommit (transaction.partition.verification.enable, on by default):
    the group coordinator asks the transaction coordinator whether the group's
    `__consumer_offsets` partition is in the producer's transaction before it writes. A raw
    TxnOffsetCommit for a producer whose transaction never added the group (no
    AddOffsetsToTxn) is answered INVALID_TXN_STATE (v3; TRANSACTION_ABORTABLE at v4, as Kafka
    3.9) and nothing is written; confluent-kafka's `send_offsets_to_transaction` still commits."""
    from confluent_kafka import Consumer, TopicPartition
    from kafka_raw import call
    from kio.schema.txn_offset_commit.v3.request import TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic
    from test_consumer_groups import _coordinator_port

    from broker.group.records import coordinator_partition

    brokers = bootstrap(cluster)
    topic, tid, group = "txn-unverified-offsets", "unverified-offsets", "unverified-offsets-group"
    create_topic(cluster, topic, partitions=1, rf=3)
    p = producer(brokers, tid)
    p.init_transactions(60)
    p.begin_transaction()
    p.produce(topic, value=b"in-the-transaction", partition=0)
    assert p.flush(30) == 0
    row = tool_table("--bootstrap-server", brokers, "--describe", "--transactional-id", tid)[1]
    pid, epoch = int(row[2]), int(row[3])
    port = _coordinator_port(cluster, group)

    def txn_offset_commit(version: int) -> int:
        r = call(
            port, 28, version, transactional_id=tid, group_id=group, producer_id=pid, producer_epoch=epoch,
            generation_id=-1, member_id="", group_instance_id=None,
            topics=(TxnOffsetCommitRequestTopic(name=topic, partitions=(TxnOffsetCommitRequestPartition(
                partition_index=0, committed_offset=7, committed_leader_epoch=-1, committed_metadata=""),)),),
        )  # fmt: skip
        return int(r.topics[0].partitions[0].error_code)

    assert txn_offset_commit(3) == 48  # INVALID_TXN_STATE
    assert txn_offset_commit(4) == 120  # TRANSACTION_ABORTABLE
    offsets_partition = coordinator_partition(group, 50)
    _, *producers = tool_table("--bootstrap-server", brokers, "describe-producers", "--topic", "__consumer_offsets",
                               "--partition", str(offsets_partition))  # fmt: skip
    assert str(pid) not in [r[0] for r in producers], producers  # nothing of the producer's was written
    consumer = Consumer({"bootstrap.servers": brokers, "group.id": group, "enable.auto.commit": False})
    try:
        p.send_offsets_to_transaction([TopicPartition(topic, 0, 1)], consumer.consumer_group_metadata(), 30)
        p.commit_transaction(60)
        (committed,) = consumer.committed([TopicPartition(topic, 0)], timeout=30)
        assert committed.offset == 1, committed
    finally:
        consumer.close()


def test_commit_and_abort_and_read_committed_sees_only_the_committed(cluster: MetadataCluster) -> None:
    brokers = bootstrap(cluster)
    topic = "txn-commit-abort"
    create_topic(cluster, topic, partitions=3, rf=3)
    p = producer(brokers, "commit-abort")
    p.init_transactions(60)
    p.begin_transaction()
    for i in range(30):
        p.produce(topic, value=f"committed-{i}".encode(), partition=i % 3)
    p.commit_transaction(60)
    p.begin_transaction()
    for i in range(30):
        p.produce(topic, value=f"aborted-{i}".encode(), partition=i % 3)
    p.flush(30)
    p.abort_transaction(60)
    p.begin_transaction()  # the next transaction starts once the abort's markers are written
    for i in range(30, 40):
        p.produce(topic, value=f"committed-{i}".encode(), partition=i % 3)
    p.commit_transaction(60)
    values = read_committed(brokers, topic, 3, 40)
    assert sorted(values) == sorted(f"committed-{i}".encode() for i in range(40))


def test_kafka_python_commits_and_aborts_too(cluster: MetadataCluster) -> None:
    from kafka import KafkaProducer

    brokers = bootstrap(cluster)
    topic = "txn-kafka-python"
    create_topic(cluster, topic, partitions=2, rf=3)
    p = KafkaProducer(bootstrap_servers=brokers, transactional_id="kafka-python")  # AddPartitionsToTxn v3
    try:
        p.init_transactions()
        p.begin_transaction()
        for i in range(10):
            p.send(topic, value=f"kept-{i}".encode(), partition=i % 2)
        p.commit_transaction()
        p.begin_transaction()
        p.send(topic, value=b"dropped", partition=0)
        p.abort_transaction()
    finally:
        p.close(timeout=10)
    assert sorted(read_committed(brokers, topic, 2, 10)) == sorted(f"kept-{i}".encode() for i in range(10))


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(cluster: MetadataCluster) -> None:
    from confluent_kafka import KafkaException

    brokers = bootstrap(cluster)
    topic = "txn-fencing"
    create_topic(cluster, topic, partitions=1, rf=3)
    first = producer(brokers, "fenced")
    first.init_transactions(60)
    first.begin_transaction()
    first.produce(topic, value=b"zombie")
    first.flush(30)
    second = producer(brokers, "fenced")
    second.init_transactions(60)  # fences the first, aborts its open transaction
    with pytest.raises(KafkaException) as raised:
        first.produce(topic, value=b"zombie-2")
        first.commit_transaction(30)
    error = raised.value.args[0]
    assert error.fatal() or error.code() in (-144, 90, 47), error  # _FENCED / PRODUCER_FENCED / INVALID_PRODUCER_EPOCH
    second.begin_transaction()
    second.produce(topic, value=b"live")
    second.commit_transaction(60)
    assert read_committed(brokers, topic, 1, 1) == [b"live"]


def test_a_transaction_open_past_its_timeout_is_aborted_by_the_coordinator(cluster: MetadataCluster) -> None:
    from confluent_kafka import KafkaException

    brokers = bootstrap(cluster)
    topic = "txn-timeout"
    create_topic(cluster, topic, partitions=1, rf=3)
    p = producer(brokers, "timing-out", **{"transaction.timeout.ms": 2000})
    p.init_transactions(60)
    p.begin_transaction()
    p.produce(topic, value=b"never-committed")
    p.flush(30)
    time.sleep(2 + 3 * ABORT_CHECK_MS / 1000)  # the coordinator aborts it, with an epoch bump
    with pytest.raises(KafkaException):
        p.commit_transaction(30)
    assert read_committed(brokers, topic, 1, 0, timeout=5) == []
    # A new producer for the id starts cleanly after the abort.
    again = producer(brokers, "timing-out")
    again.init_transactions(60)
    again.begin_transaction()
    again.produce(topic, value=b"after")
    again.commit_transaction(60)
    assert read_committed(brokers, topic, 1, 1) == [b"after"]


def test_the_producer_finds_the_new_coordinator_after_kill_9(cluster: MetadataCluster) -> None:
    brokers = bootstrap(cluster)
    topic = "txn-failover"
    tid = "failing-over"
    create_topic(cluster, topic, partitions=3, rf=3)
    p = producer(brokers, tid)
    p.init_transactions(60)
    p.begin_transaction()
    for i in range(10):
        p.produce(topic, value=f"before-{i}".encode(), partition=i % 3)
    p.commit_transaction(60)
    victim = coordinator_of(cluster, tid)
    cluster.kill9(victim)
    try:
        wait_until("a new coordinator", lambda: coordinator_of(cluster, tid, not_via=victim) not in (victim, -1), 30)
        p.begin_transaction()
        for i in range(10):
            p.produce(topic, value=f"after-{i}".encode(), partition=i % 3)
        p.commit_transaction(60)
        expected = sorted([f"before-{i}".encode() for i in range(10)] + [f"after-{i}".encode() for i in range(10)])
        assert sorted(read_committed(brokers, topic, 3, 20)) == expected
    finally:
        cluster.start(victim)
        cluster.wait_unfenced([victim], timeout=60)
