"""Helpers for the data-plane integration tests: a 3+3 cluster whose brokers serve Kafka
clients, the bootstrap string, and small wrappers around the real clients (kafka-python,
confluent-kafka, kcat) used by several test modules."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from metadata_cluster import MetadataCluster, start_cluster, wait_until

# Fast data-plane timings: followers long-poll briefly, the ISR shrinks after 3 s, and
# high watermarks are checkpointed often so that restarts are quick to test.
DATAPLANE_TIMINGS = {
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "200",
    "replica.high.watermark.checkpoint.interval.ms": "500",
    "min.insync.replicas": "2",
    "auto.create.topics.enable": "true",
    "num.partitions": "3",
}


def start_dataplane_cluster(root: Path, properties: dict[str, str] | None = None, **kwargs: Any) -> MetadataCluster:
    props = dict(DATAPLANE_TIMINGS)
    props.update(properties or {})
    return start_cluster(root, properties=props, **kwargs)


def module_cluster(name: str, properties: dict[str, str] | None = None) -> Any:
    """A module-scoped pytest fixture: one data-plane cluster shared by a module's tests (its
    diagnostics printed when the module fails), stopped at the end of the module."""

    @pytest.fixture(scope="module")
    def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MetadataCluster]:
        c = start_dataplane_cluster(Path(tmp_path_factory.mktemp(name)), properties)
        try:
            yield c
        except BaseException:
            print(c.diagnostics())
            raise
        finally:
            c.close()

    return cluster


def log_dir(cluster: MetadataCluster, broker: int) -> Path:
    """A broker's first log dir."""
    return Path(cluster.nodes[broker].plan.properties["log.dirs"].split(",")[0])


def broker_port(cluster: MetadataCluster, node_id: int) -> int:
    listeners = cluster.nodes[node_id].plan.properties["listeners"]
    return int(listeners.rsplit(":", 1)[1])


def bootstrap(cluster: MetadataCluster, ids: Iterable[int] | None = None) -> str:
    ids = cluster.broker_ids if ids is None else list(ids)
    return ",".join(f"127.0.0.1:{broker_port(cluster, i)}" for i in ids)


def create_topic(cluster: MetadataCluster, name: str, partitions: int = 3, rf: int = 3, **configs: str) -> None:
    body: dict[str, Any] = {"topic_name": name, "partitions_count": partitions, "replication_factor": rf}
    if configs:
        body["configs"] = [{"name": k.replace("_", "."), "value": v} for k, v in configs.items()]
    node = cluster.broker_ids[0]
    cluster.create_topic(
        node,
        name,
        partitions_count=partitions,
        replication_factor=rf,
        **({"configs": body["configs"]} if configs else {}),
    )

    # Every partition has a leader and a full ISR on every broker's image.
    def ready() -> bool:
        for b in cluster.broker_ids:
            parts = cluster.partitions(b, name)
            if len(parts) != partitions:
                return False
        return True

    wait_until(f"topic {name} on every broker", ready, 30)


def partition_state(cluster: MetadataCluster, topic: str, node: int | None = None) -> dict[int, dict[str, Any]]:
    """partition id -> {"leader": id, "isr": [...], "replicas": [...]} from a node's REST API
    (by default the first broker that serves it: a broker restarted a moment ago is unfenced
    before its REST listener opens, as Kafka's listeners open only once the broker is unfenced)."""
    if node is None:
        serving = [b for b in cluster.broker_ids if cluster.nodes[b].running and cluster.rest_up(b)]
        node = serving[0] if serving else cluster.broker_ids[0]
    out: dict[int, dict[str, Any]] = {}
    for p in cluster.partitions(node, topic):
        pid = int(p["partition_id"])
        replicas = cluster.get_json(node, f"/topics/{topic}/partitions/{pid}/replicas")["data"]
        out[pid] = {
            "leader": (p.get("leader") or {}).get("related", "").rsplit("/", 1)[-1],
            "isr": sorted(int(r["broker_id"]) for r in replicas if r.get("is_in_sync")),
            "replicas": [int(r["broker_id"]) for r in replicas],
        }
    return out


def kcat() -> str | None:
    return shutil.which("kcat") or shutil.which("kafkacat")


requires_kcat = pytest.mark.skipif(
    kcat() is None and os.environ.get("CI") != "true",
    reason="kcat is not installed (./deploy/test.sh installs it; under CI=true a missing kcat fails the test)",
)
"""Skip a kcat test on a workstation without kcat; under CI (``CI=true``) run it, so that a
missing tool fails instead of hiding the test."""


def run_kcat(*args: str, input_data: bytes | None = None, timeout: float = 60.0) -> subprocess.CompletedProcess[bytes]:
    exe = kcat()
    assert exe is not None, "kcat is not installed (./deploy/test.sh installs it as root: apt-get install kcat)"
    return subprocess.run([exe, *args], input=input_data, capture_output=True, timeout=timeout, check=False)


def kcat_metadata(brokers: str) -> dict[str, Any]:
    proc = run_kcat("-b", brokers, "-L", "-J", "-m", "10")
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


def records_in(brokers: str, topic: str, partitions: Iterable[int]) -> int:
    """How many records the partitions hold up to their high watermarks (nothing deleted)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": brokers, "group.id": "unused-no-commits", "enable.auto.commit": False})
    try:
        total = 0
        for p in partitions:
            low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            total += high - low
        return total
    finally:
        c.close()


def confluent_consume_all(
    brokers: str, topic: str, partitions: Iterable[int], *, expected: int, timeout: float = 60.0, **conf: Any
) -> list[Any]:
    """Read `expected` messages from the beginning of `partitions` (assign, no group)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": brokers,
            "group.id": "unused-no-commits",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **conf,
        }
    )
    try:
        c.assign([TopicPartition(topic, p, 0) for p in partitions])
        out: list[Any] = []
        deadline = time.monotonic() + timeout
        while len(out) < expected and time.monotonic() < deadline:
            for m in c.consume(num_messages=1000, timeout=0.5):
                if m.error() is None:
                    out.append(m)
        return out
    finally:
        c.close()
