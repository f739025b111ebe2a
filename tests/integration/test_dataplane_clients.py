"""Real Kafka clients against a real 3+3 pykraft cluster: kcat, kafka-python, confluent-kafka.

One cluster for the module (the tests use their own topics and do not disturb each other).
Brokers have racks rack-1..rack-3 and Kafka's RackAwareReplicaSelector, so a consumer with
a `client.rack` may be sent to a follower in its rack (KIP-392).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from dataplane_support import (
    bootstrap,
    confluent_consume_all,
    create_topic,
    kcat_metadata,
    module_cluster,
    partition_state,
    requires_kcat,
    run_kcat,
)
from metadata_cluster import MetadataCluster, wait_until

pytestmark = pytest.mark.integration

RACK_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


cluster = module_cluster("clients", {"replica.selector.class": RACK_SELECTOR})


@pytest.fixture(scope="module")
def brokers(cluster: MetadataCluster) -> str:
    return bootstrap(cluster)


# --------------------------------------------------------------------------- kcat


@requires_kcat
def test_kcat_metadata_matches_rest(cluster: MetadataCluster, brokers: str) -> None:
    create_topic(cluster, "kcat-meta", partitions=4, rf=3)
    meta = kcat_metadata(brokers)
    assert sorted(b["id"] for b in meta["brokers"]) == cluster.broker_ids
    ports = {b["id"]: int(b["name"].rsplit(":", 1)[1]) for b in meta["brokers"]}
    for b in cluster.broker_ids:
        assert ports[b] == int(cluster.nodes[b].plan.properties["listeners"].rsplit(":", 1)[1])
    topics = {t["topic"]: t for t in meta["topics"]}
    assert "kcat-meta" in topics
    rest = partition_state(cluster, "kcat-meta")
    for p in topics["kcat-meta"]["partitions"]:
        state = rest[p["partition"]]
        assert str(p["leader"]) == state["leader"]
        assert sorted(r["id"] for r in p["replicas"]) == sorted(state["replicas"])
        assert sorted(r["id"] for r in p["isrs"]) == state["isr"]


@requires_kcat
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_kcat_produce_and_consume(cluster: MetadataCluster, brokers: str, codec: str) -> None:
    topic = f"kcat-{codec}"
    create_topic(cluster, topic, partitions=1, rf=3)
    lines = [f"key-{i}:value-{i}" for i in range(200)]
    proc = run_kcat(
        "-b",
        brokers,
        "-P",
        "-t",
        topic,
        "-p",
        "0",
        "-K",
        ":",
        "-z",
        codec,
        "-X",
        "acks=all",
        input_data=("\n".join(lines) + "\n").encode(),
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    out = run_kcat("-b", brokers, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-f", "%k:%s:%o\\n")
    assert out.returncode == 0, out.stderr.decode(errors="replace")
    got = out.stdout.decode().splitlines()
    assert got == [f"key-{i}:value-{i}:{i}" for i in range(200)]


# --------------------------------------------------------------------------- kafka-python


@pytest.mark.parametrize("acks", [0, 1, "all"])
@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_kafka_python_round_trip(cluster: MetadataCluster, brokers: str, acks: int | str, codec: str | None) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = f"kp-{acks}-{codec or 'none'}"
    create_topic(cluster, topic, partitions=3, rf=3)
    producer = KafkaProducer(
        bootstrap_servers=brokers, acks=acks, compression_type=codec, linger_ms=5, enable_idempotence=False
    )
    sent = []
    base_ts = int(time.time() * 1000) - 60_000
    for i in range(300):
        key = f"k{i % 10}".encode() if i % 2 == 0 else None
        headers = [("n", str(i).encode()), ("h2", b"\x00\x01")]
        producer.send(topic, key=key, value=f"v{i}".encode(), headers=headers, timestamp_ms=base_ts + i)
        sent.append((key, f"v{i}".encode(), base_ts + i, str(i).encode()))
    producer.flush(timeout=30)
    producer.close(timeout=10)

    consumer = KafkaConsumer(bootstrap_servers=brokers, enable_auto_commit=False, consumer_timeout_ms=5000)
    tps = [TopicPartition(topic, p) for p in range(3)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    got = []
    deadline = time.monotonic() + 60
    while len(got) < len(sent) and time.monotonic() < deadline:
        for _tp, msgs in consumer.poll(timeout_ms=1000).items():
            got.extend(msgs)
    consumer.close()
    assert len(got) == len(sent)
    by_value = {m.value: m for m in got}
    for key, value, ts, n in sent:
        m = by_value[value]
        assert m.key == key and m.timestamp == ts
        assert dict(m.headers)["n"] == n and dict(m.headers)["h2"] == b"\x00\x01"
    # Keyed records of one key all went to one partition, in order, with contiguous offsets.
    for p in range(3):
        offsets = sorted(m.offset for m in got if m.partition == p)
        assert offsets == list(range(len(offsets)))


def test_kafka_python_offsets_by_time_earliest_latest(cluster: MetadataCluster, brokers: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = "kp-times"
    create_topic(cluster, topic, partitions=1, rf=3)
    producer = KafkaProducer(bootstrap_servers=brokers, acks="all", enable_idempotence=False)
    t0 = 1_700_000_000_000
    for i in range(50):
        producer.send(topic, value=f"v{i}".encode(), partition=0, timestamp_ms=t0 + i * 1000)
        producer.flush()  # one batch per record: offsets by time resolve to record offsets
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=brokers, enable_auto_commit=False)
    tp = TopicPartition(topic, 0)
    assert consumer.beginning_offsets([tp])[tp] == 0
    assert consumer.end_offsets([tp])[tp] == 50
    found = consumer.offsets_for_times({tp: t0 + 20_500})[tp]
    assert found is not None and found.offset == 21 and found.timestamp == t0 + 21_000
    assert consumer.offsets_for_times({tp: t0 + 10_000_000})[tp] is None
    consumer.assign([tp])
    consumer.seek(tp, found.offset)
    first = next(iter(consumer.poll(timeout_ms=5000).values()))[0]
    assert first.offset == 21 and first.value == b"v21"
    consumer.close()


# --------------------------------------------------------------------------- confluent-kafka


@pytest.mark.parametrize("acks", ["0", "1", "all"])
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_confluent_round_trip(cluster: MetadataCluster, brokers: str, acks: str, codec: str) -> None:
    from confluent_kafka import Producer

    topic = f"ck-{acks}-{codec}"
    create_topic(cluster, topic, partitions=3, rf=3)
    errors: list[str] = []
    delivered: list[tuple[int, int, bytes]] = []

    def on_delivery(err: object, msg: object) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            delivered.append((msg.partition(), msg.offset(), msg.value()))  # type: ignore[attr-defined]

    p = Producer(
        {
            "bootstrap.servers": brokers,
            "acks": acks,
            "compression.codec": codec,
            "linger.ms": 5,
            "enable.idempotence": False,
        }
    )
    ts = 1_700_000_000_123
    for i in range(500):
        p.produce(
            topic,
            key=None if i % 3 == 0 else f"key-{i % 7}".encode(),
            value=f"value-{i}".encode() * 3,
            headers=[("idx", str(i).encode())],
            timestamp=ts + i,
            on_delivery=on_delivery,
        )
    assert p.flush(30) == 0
    assert not errors, errors[:3]
    assert len(delivered) == 500
    if acks != "0":
        # Offsets reported by delivery reports are each partition's contiguous sequence.
        for part in range(3):
            offs = sorted(o for pp, o, _ in delivered if pp == part)
            assert offs == list(range(len(offs)))
    msgs = confluent_consume_all(brokers, topic, range(3), expected=500)
    assert sorted(m.value() for m in msgs) == sorted(f"value-{i}".encode() * 3 for i in range(500))
    for m in msgs:
        i = int(m.headers()[0][1])
        assert m.timestamp()[1] == ts + i
        assert m.key() == (None if i % 3 == 0 else f"key-{i % 7}".encode())


def test_confluent_consume_from_latest_and_by_time(cluster: MetadataCluster, brokers: str) -> None:
    from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition

    topic = "ck-latest"
    create_topic(cluster, topic, partitions=1, rf=3)
    p = Producer({"bootstrap.servers": brokers, "acks": "all", "linger.ms": 0})
    for i in range(10):
        p.produce(topic, value=f"old-{i}".encode(), partition=0, timestamp=1_600_000_000_000 + i)
        p.flush()
    c = Consumer({"bootstrap.servers": brokers, "group.id": "latest-probe", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, OFFSET_END)])
    # Positioned at the end (whenever the client resolves it), the consumer sees only records
    # produced afterwards: produce one new record at a time until the first arrives, then four
    # more; what arrives is exactly the run of new records from the first one it got, no old one.
    got: list[bytes] = []
    sent = 0

    def send_new() -> None:
        nonlocal sent
        p.produce(topic, value=f"new-{sent}".encode(), partition=0)
        p.flush()
        sent += 1

    def poll() -> None:
        got.extend(m.value() for m in c.consume(num_messages=10, timeout=0.5) if m.error() is None)

    deadline = time.monotonic() + 30
    while not got and time.monotonic() < deadline:
        send_new()
        poll()
    assert got and got[0].startswith(b"new-"), got
    first = int(got[0].split(b"-")[1])
    for _ in range(4):
        send_new()
    while len(got) < sent - first and time.monotonic() < deadline:
        poll()
    assert got == [f"new-{i}".encode() for i in range(first, sent)]
    found = c.offsets_for_times([TopicPartition(topic, 0, 1_600_000_000_004)], timeout=10)
    assert found[0].offset == 4
    lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    assert (lo, hi) == (0, 10 + sent)
    c.close()


def test_confluent_consumer_with_client_rack_reads_from_follower(cluster: MetadataCluster, brokers: str) -> None:
    """KIP-392: with RackAwareReplicaSelector the leader names the replica in the
    consumer's rack, and librdkafka fetches from that follower."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = "ck-rack"
    create_topic(cluster, topic, partitions=1, rf=3)
    state = partition_state(cluster, topic)[0]
    leader = int(state["leader"])
    follower = next(b for b in state["replicas"] if b != leader)
    follower_rack = cluster.nodes[follower].plan.properties["broker.rack"]
    p = Producer({"bootstrap.servers": brokers, "acks": "all"})
    for i in range(100):
        p.produce(topic, value=f"r{i}".encode(), partition=0)
    p.flush()
    stats: list[dict[str, object]] = []
    c = Consumer(
        {
            "bootstrap.servers": brokers,
            "group.id": "rack-probe",
            "enable.auto.commit": False,
            "client.rack": follower_rack,
            "statistics.interval.ms": 200,
            "stats_cb": lambda s: stats.append(json.loads(s)),
        }
    )
    c.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 100 and time.monotonic() < deadline:
        for m in c.consume(num_messages=100, timeout=0.5):
            if m.error() is None:
                got.append(m.value())
    # Let one more statistics round report where the partition is fetched from.
    time.sleep(0.6)
    c.consume(timeout=0.3)
    c.close()
    assert got == [f"r{i}".encode() for i in range(100)]
    fetched_from = {
        int(s["topics"][topic]["partitions"]["0"]["broker"])  # type: ignore[index]
        for s in stats
        if topic in s.get("topics", {})  # type: ignore[operator]
    }
    assert follower in fetched_from, f"fetched from {fetched_from}, leader {leader}, follower {follower}"


# --------------------------------------------------------------------------- admin through a broker


def test_admin_requests_through_a_broker(cluster: MetadataCluster, brokers: str) -> None:
    """AdminClient talks to brokers only: creates, configs, DeleteRecords, log dirs, deletes."""
    from confluent_kafka import Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    admin = AdminClient({"bootstrap.servers": brokers})
    futures = admin.create_topics(
        [NewTopic("admin-made", num_partitions=2, replication_factor=3, config={"retention.ms": "3600000"})]
    )
    futures["admin-made"].result(20)
    wait_until(
        "admin-made on every broker",
        lambda: all(len(cluster.partitions(b, "admin-made")) == 2 for b in cluster.broker_ids),
        20,
    )
    described = admin.describe_configs([ConfigResource("topic", "admin-made")])
    configs = next(iter(described.values())).result(20)
    assert configs["retention.ms"].value == "3600000"

    p = Producer({"bootstrap.servers": brokers, "acks": "all"})
    for i in range(100):
        p.produce("admin-made", value=b"%d" % i, partition=0)
    assert p.flush(20) == 0
    deleted = admin.delete_records([TopicPartition("admin-made", 0, 40)])
    low = next(iter(deleted.values())).result(20)
    assert low.low_watermark == 40
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": brokers, "group.id": "lowwm"})
    assert c.get_watermark_offsets(TopicPartition("admin-made", 0), timeout=10) == (40, 100)
    c.close()

    from kafka import KafkaAdminClient

    kadmin = KafkaAdminClient(bootstrap_servers=brokers)
    dirs = kadmin.describe_log_dirs()
    kadmin.close()
    sizes = {
        (r["broker"], p["partition_index"]): p["partition_size"]
        for r in dirs
        for d in r["log_dirs"]
        for t in d["topics"]
        if t["name"] == "admin-made"
        for p in t["partitions"]
    }
    assert sorted(sizes) == [(b, p) for b in cluster.broker_ids for p in (0, 1)], sizes
    assert all(sizes[(b, 0)] > 0 and sizes[(b, 1)] == 0 for b in cluster.broker_ids), sizes

    leader_dirs = {b: Path(cluster.nodes[b].plan.properties["log.dirs"]) / "admin-made-0" for b in cluster.broker_ids}
    assert all(d.exists() for d in leader_dirs.values())
    admin.delete_topics(["admin-made"])["admin-made"].result(20)
    # Kafka renames a deleted partition's directory `...-delete` at once (and removes it later).
    wait_until("partition dirs renamed", lambda: not any(d.exists() for d in leader_dirs.values()), 20)
