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
