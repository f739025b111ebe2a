"""Transactional offset commits (TxnOffsetCommit, API 28) on a real 3+3 cluster, driven with raw
requests written by kio, as a transactional producer's `send_offsets_to_transaction` sends
them:

- TxnOffsetCommit's errors where Kafka gives them: NOT_COORDINATOR from a broker that is not
  the group's coordinator, UNKNOWN_TOPIC_OR_PARTITION, ILLEGAL_GENERATION and
  UNKNOWN_MEMBER_ID against a live group (v3 carries the member), OFFSET_METADATA_TOO_LARGE;
  OffsetFetch v7 with require_stable answers a group without open transactions as usual.
- The offsets of a transaction (two TxnOffsetCommits) are invisible to OffsetFetch
  (require_stable: UNSTABLE_OFFSET_COMMIT) until the COMMIT marker (WriteTxnMarkers to the
  `__consumer_offsets` partition) completes them through the group coordinator's hook; then
  the last one is the group's committed offset, on the coordinator and on the broker that
  loads the partition after the coordinator's broker is stopped.
- confluent-kafka's `send_offsets_to_transaction` in a transaction that aborts, then in one
  that commits: only the committed one's offset is the group's.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from dataplane_support import bootstrap, create_topic, module_cluster
from kafka_raw import call
from metadata_cluster import MetadataCluster, wait_until
from test_consumer_groups import _coordinator_port

pytestmark = pytest.mark.integration

# The raw TxnOffsetCommits here are a hand-made producer's (no transaction coordinator behind
# them), so the group coordinator must not verify them first (KIP-890 verification off, Kafka's
# transaction.partition.verification.enable=false); test_dataplane_txn_coordinator.py checks
# the verification with it on.
cluster = module_cluster(
    "txn-offsets",
    {
        "group.initial.rebalance.delay.ms": "0",
        "offsets.topic.num.partitions": "3",
        "transaction.partition.verification.enable": "false",
    },
)

TXN_OFFSET_COMMIT, OFFSET_FETCH, WRITE_TXN_MARKERS, API_VERSIONS, JOIN_GROUP, INIT_PRODUCER_ID = 28, 9, 27, 18, 11, 22
NONE, UNKNOWN_TOPIC, META_TOO_LARGE, NOT_COORDINATOR, ILLEGAL_GENERATION, UNKNOWN_MEMBER = 0, 3, 12, 16, 22, 25
INVALID_RECORD, UNSTABLE_OFFSET_COMMIT = 87, 88


def txn_commit(port: int, group: str, topic: str, offset: int, *, pid: int = 4000, epoch: int = 0, member: str = "",
               generation: int = -1, metadata: str = "", partition: int = 0) -> int:  # fmt: skip
    from kio.schema.txn_offset_commit.v3.request import TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic

    r = call(
        port, TXN_OFFSET_COMMIT, 3, transactional_id="tx-1", group_id=group, producer_id=pid, producer_epoch=epoch,
        generation_id=generation, member_id=member, group_instance_id=None,
        topics=(TxnOffsetCommitRequestTopic(name=topic, partitions=(TxnOffsetCommitRequestPartition(
            partition_index=partition, committed_offset=offset, committed_leader_epoch=-1,
            committed_metadata=metadata),)),),
    )  # fmt: skip
    return int(r.topics[0].partitions[0].error_code)


def fetch(port: int, group: str, topic: str, *, stable: bool) -> tuple[int, int]:
    """(committed offset, error) of partition 0 (OffsetFetch v7)."""
    from kio.schema.offset_fetch.v7.request import OffsetFetchRequestTopic

    r = call(port, OFFSET_FETCH, 7, group_id=group, require_stable=stable,
              topics=(OffsetFetchRequestTopic(name=topic, partition_indexes=(0,)),))  # fmt: skip
    assert int(r.error_code) == NONE, r
    p = r.topics[0].partitions[0]
    return int(p.committed_offset), int(p.error_code)


def test_txn_offset_commit_errors_where_kafka_gives_them(cluster: MetadataCluster) -> None:
    from kio.schema.join_group.v5.request import JoinGroupRequestProtocol

    group, topic = "txn-offsets-errors", "txn-offsets-in"
    create_topic(cluster, topic, partitions=1, rf=3)
    port = _coordinator_port(cluster, group)
    other = next(cluster.nodes[b].port for b in cluster.broker_ids if cluster.nodes[b].port != port)
    assert txn_commit(other, group, topic, 5) == NOT_COORDINATOR
    assert txn_commit(port, group, "no-such-topic", 5) == UNKNOWN_TOPIC
    assert txn_commit(port, group, topic, 5, partition=7) == UNKNOWN_TOPIC
    assert txn_commit(port, group, topic, 5, metadata="x" * 5000) == META_TOO_LARGE
    assert txn_commit(port, group, topic, 5, generation=3) == ILLEGAL_GENERATION  # an unknown group at a generation

    # A live group: the member and its generation are checked (v3+), as OffsetCommit checks them.
    def join(member: str) -> Any:
        return call(
            port, JOIN_GROUP, 5, group_id=group, session_timeout=timedelta(milliseconds=30_000),
            rebalance_timeout=timedelta(milliseconds=10_000), member_id=member, group_instance_id=None,
            protocol_type="consumer", protocols=(JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01"),),
        )  # fmt: skip

    joined = join(join("").member_id)
    assert int(joined.error_code) == NONE
    member, generation = joined.member_id, int(joined.generation_id)
    assert txn_commit(port, group, topic, 5, member=member, generation=generation + 1) == ILLEGAL_GENERATION
    assert txn_commit(port, group, topic, 5, member="nobody", generation=generation) == UNKNOWN_MEMBER
    # Nothing was written: OffsetFetch (require_stable too) shows no offset and no open transaction.
    assert fetch(port, group, topic, stable=False) == (-1, NONE)
    assert fetch(port, group, topic, stable=True) == (-1, NONE)


def test_confluent_kafka_send_offsets_to_transaction_commits_with_the_transaction(cluster: MetadataCluster) -> None:
    """A consume-transform-produce step with confluent-kafka: `send_offsets_to_transaction`
    (AddOffsetsToTxn, then TxnOffsetCommit to the group coordinator) in a transaction that
    aborts leaves no offset; in one that commits, the offset is the group's (read by a
    read_committed consumer, whose OffsetFetch requires stable offsets)."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    brokers = bootstrap(cluster)
    source, group = "txn-offsets-source", "txn-offsets-ctp"
    create_topic(cluster, source, partitions=1, rf=3)
    plain = Producer({"bootstrap.servers": brokers, "acks": "all"})
    for i in range(10):
        plain.produce(source, value=b"%d" % i)
    assert plain.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": brokers, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})  # fmt: skip
    p = Producer({"bootstrap.servers": brokers, "transactional.id": "txn-offsets-ctp-1",
                  "transaction.timeout.ms": 60_000, "message.timeout.ms": 60_000})  # fmt: skip
    try:
        consumer.assign([TopicPartition(source, 0, 0)])
        read = 0
        deadline = time.monotonic() + 30
        while read < 10 and time.monotonic() < deadline:
            m = consumer.poll(1)
            read += m is not None and m.error() is None
        assert read == 10
        p.init_transactions(60)
        p.begin_transaction()
        p.send_offsets_to_transaction([TopicPartition(source, 0, 5)], consumer.consumer_group_metadata(), 30)
        p.abort_transaction(30)
        (tp,) = consumer.committed([TopicPartition(source, 0)], timeout=30)
        assert tp.offset < 0, tp  # nothing committed
        p.begin_transaction()
        p.send_offsets_to_transaction([TopicPartition(source, 0, 10)], consumer.consumer_group_metadata(), 30)
        p.commit_transaction(30)
        (tp,) = consumer.committed([TopicPartition(source, 0)], timeout=30)
        assert tp.offset == 10, tp
    finally:
        consumer.close()


def test_a_transactions_offsets_show_only_after_its_commit_marker(cluster: MetadataCluster) -> None:
    group, topic = "txn-offsets-commit", "txn-offsets-visible"
    create_topic(cluster, topic, partitions=1, rf=3)
    port = _coordinator_port(cluster, group)
    ids = call(port, INIT_PRODUCER_ID, 4, transactional_id=None, transaction_timeout=timedelta(milliseconds=60_000))
    assert int(ids.error_code) == NONE
    pid, epoch = int(ids.producer_id), int(ids.producer_epoch)
    code = txn_commit(port, group, topic, 41, pid=pid, epoch=epoch)
    if code == INVALID_RECORD:
        pytest.xfail("the partition logs refuse transactional batches until the txn-log work is merged")
    assert code == NONE
    # A second commit of the same transaction (Kafka writes each with base sequence 0: the
    # log must take it, not answer it as a duplicate of the first).
    assert txn_commit(port, group, topic, 42, pid=pid, epoch=epoch) == NONE
    assert fetch(port, group, topic, stable=False) == (-1, NONE)  # pending: not shown
    assert fetch(port, group, topic, stable=True) == (-1, UNSTABLE_OFFSET_COMMIT)
    versions = call(port, API_VERSIONS, 3, client_software_name="test", client_software_version="1")
    if WRITE_TXN_MARKERS not in {int(k.api_key) for k in versions.api_keys}:
        pytest.xfail("WriteTxnMarkers is not served until the txn-log work is merged")
    from kio.schema.write_txn_markers.v1.request import WritableTxnMarker, WritableTxnMarkerTopic

    from broker.group.records import coordinator_partition

    partition = coordinator_partition(group, 3)
    r = call(port, WRITE_TXN_MARKERS, 1, markers=(WritableTxnMarker(
        producer_id=pid, producer_epoch=epoch, transaction_result=True, coordinator_epoch=0,
        topics=(WritableTxnMarkerTopic(name="__consumer_offsets", partition_indexes=(partition,)),)),))  # fmt: skip
    assert int(r.markers[0].topics[0].partitions[0].error_code) == NONE, r
    assert fetch(port, group, topic, stable=True) == (42, NONE)
    # The coordinator's broker stops (controlled shutdown): the broker that leads the
    # partition next loads it from the log (both transactional batches, then the marker).
    stopped = next(b for b in cluster.broker_ids if cluster.nodes[b].port == port)
    assert cluster.terminate(stopped) == 0
    others = [cluster.nodes[b].port for b in cluster.broker_ids if b != stopped]

    def loaded_elsewhere() -> tuple[int, int] | None:
        found = call(others[0], 10, 3, key=group, key_type=0)
        if int(found.error_code) != NONE or int(found.port) == port:
            return None
        return fetch(int(found.port), group, topic, stable=True)  # (raises while it loads)

    assert wait_until("the group's new coordinator", loaded_elsewhere, 60) == (42, NONE)
