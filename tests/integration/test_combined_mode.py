"""Combined mode (`process.roles=broker,controller`): one-node and three-node clusters of
real processes, with topics created over REST and real clients producing and consuming;
kill -9 of a combined node during acks=all writes loses nothing acknowledged; a saturating producer
does not cost the quorum its leader."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from metadata_cluster import wait_until
from test_dataplane_faults import NumberedProducer, check_read_back

from quorum.node.cluster import (
    free_cluster_base,
    plan_combined,
    start_node,
)
from quorum.node.meta_properties import random_uuid

pytestmark = pytest.mark.integration

FAST = {
    "controller.quorum.election.timeout.ms": "500",
    "controller.quorum.fetch.timeout.ms": "1000",
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.wait.max.ms": "200",
    "auto.leader.rebalance.enable": "false",
}


class Combined:
    def __init__(self, root: Path, nodes: int) -> None:
        base = free_cluster_base(nodes, combined=True)
        self.plans = {p.node_id: p for p in plan_combined(root, nodes, base)}
        for p in self.plans.values():
            p.properties.update(FAST)
        self.cluster_id = random_uuid()
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.http = httpx.Client(timeout=10)

    def start(self, node_id: int) -> None:
        self.procs[node_id] = start_node(self.plans[node_id], self.cluster_id)

    def start_all(self) -> None:
        for i in self.plans:
            self.start(i)

    def kill9(self, node_id: int) -> None:
        proc = self.procs[node_id]
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        self.http.close()

    def bootstrap(self, ids: list[int] | None = None) -> str:
        ids = list(self.plans) if ids is None else ids
        return ",".join(self.plans[i].properties["listeners"].split(",")[0].split("//")[1] for i in ids)

    def rest(self, node_id: int) -> str:
        return self.plans[node_id].properties["rest.listener"]

    def unfenced(self, ids: list[int]) -> bool:
        return all(
            self.plans[i].events_file.exists() and '"state": "unfenced"' in self.plans[i].events_file.read_text()
            for i in ids
        )

    def roles(self, node_id: int) -> list[str]:
        lines = (
            self.plans[node_id].events_file.read_text().splitlines() if self.plans[node_id].events_file.exists() else []
        )
        return [json.loads(line).get("role", "") for line in lines if '"role"' in line]

    def elections(self) -> int:
        """How many times any node became leader (from the event logs)."""
        return sum(r.count("Leader") for r in (self.roles(i) for i in self.plans))

    def rest_cluster(self, node_id: int) -> str:
        """The cluster's REST root on a node (REST names the cluster by its own id)."""
        cluster = self.http.get(f"{self.rest(node_id)}/v3/clusters").json()["data"][0]["cluster_id"]
        return f"{self.rest(node_id)}/v3/clusters/{cluster}"

    def topic_url(self, node_id: int, name: str) -> str:
        return f"{self.rest_cluster(node_id)}/topics/{name}"

    def create_topic(self, name: str, partitions: int, rf: int) -> None:
        """Create it and wait until every live node's image gives each partition a leader and
        a full ISR (rf members): then any node a client asks names the leader."""
        r = self.http.post(
            f"{self.rest_cluster(1)}/topics",
            json={"topic_name": name, "partitions_count": partitions, "replication_factor": rf},
        )
        assert r.status_code in (200, 201), r.text
        live = [i for i, proc in self.procs.items() if proc.poll() is None]
        wait_until(
            f"topic {name}: leaders and full ISRs on nodes {live}",
            lambda: all(self.led_in_sync(i, name, partitions, rf) for i in live),
            30,
        )

    def partition_state(self, node_id: int, name: str) -> dict[int, tuple[int, list[int]]]:
        """partition -> (leader or -1, ISR) in a node's image (REST)."""
        out = {}
        for p in self.http.get(f"{self.topic_url(node_id, name)}/partitions").json()["data"]:
            pid = int(p["partition_id"])
            related = (p.get("leader") or {}).get("related", "")
            replicas = self.http.get(f"{self.topic_url(node_id, name)}/partitions/{pid}/replicas").json()["data"]
            isr = sorted(int(r["broker_id"]) for r in replicas if r.get("is_in_sync"))
            out[pid] = (int(related.rsplit("/", 1)[-1]) if related else -1, isr)
        return out

    def led_in_sync(self, node_id: int, name: str, partitions: int, isr_size: int) -> bool:
        state = self.partition_state(node_id, name)
        return len(state) == partitions and all(leader >= 0 and len(isr) == isr_size for leader, isr in state.values())


def produce(bootstrap: str, topic: str, n: int, *, partitions: int, start: int = 0) -> dict[int, tuple[int, int]]:
    from confluent_kafka import Producer

    acked: dict[int, tuple[int, int]] = {}

    def on_delivery(err: object, msg: object) -> None:
        if err is None:
            acked[int(msg.value())] = (msg.partition(), msg.offset())  # type: ignore[attr-defined]

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.send.max.retries": 0, "linger.ms": 2})
    for i in range(start, start + n):
        p.produce(topic, value=str(i).encode(), partition=i % partitions, on_delivery=on_delivery)
        if i % 100 == 0:
            p.poll(0)
    p.flush(30)
    return acked


def read_all(bootstrap: str, topic: str, partitions: int, expected: int) -> dict[int, tuple[int, int]]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    c.assign(tps)
    c.seek_to_beginning(*tps)
    seen: dict[int, tuple[int, int]] = {}
    deadline = time.monotonic() + 60
    while len(seen) < expected and time.monotonic() < deadline:
        for tp, msgs in c.poll(timeout_ms=500).items():
            for m in msgs:
                v = int(m.value)
                assert v not in seen, f"record {v} read twice"
                seen[v] = (tp.partition, m.offset)
    c.close()
    return seen


@pytest.fixture
def combined(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Combined]:
    c = Combined(tmp_path, request.param)
    c.start_all()
    try:
        wait_until("every combined node unfenced", lambda: c.unfenced(list(c.plans)), 60)
        yield c
    finally:
        c.close()


@pytest.mark.parametrize("combined", [1], indirect=True)
def test_single_combined_node_is_a_whole_cluster(combined: Combined) -> None:
    combined.create_topic("solo", 2, 1)
    acked = produce(combined.bootstrap(), "solo", 500, partitions=2)
    assert len(acked) == 500
    seen = read_all(combined.bootstrap(), "solo", 2, 500)
    assert seen == acked


@pytest.mark.parametrize("combined", [3], indirect=True)
def test_three_combined_nodes_kill9_during_writes_loses_nothing_acked(combined: Combined) -> None:
    """kill -9 of the node leading partition 0 (a voter too) while acks=all writes to it are
    in flight: the survivors (2 of 3 voters, 2 >= min.insync.replicas ISR members) keep
    acknowledging; the node comes back into every ISR and leads partition 0 again (its
    unreplicated tail cut); every acknowledged record is read back at its acknowledged
    offset (`check_read_back`)."""
    combined.create_topic("trio", 3, 3)
    producer = NumberedProducer(combined.bootstrap(), "trio", 3).start()
    try:
        wait_until("records flowing", lambda: len(producer.acked) > 300, 30)
        victim = combined.partition_state(1, "trio")[0][0]
        in_flight = wait_until(
            "writes in flight", lambda: producer.sent - len(producer.acked) - len(producer.failed), 10, interval=0.001
        )
        combined.kill9(victim)
        acked_at_kill = len(producer.acked)
        survivors = [i for i in combined.plans if i != victim]
        wait_until("acks=all writes after the kill", lambda: len(producer.acked) > acked_at_kill + 300, 40)
        combined.start(victim)
        wait_until(
            f"node {victim} back in every ISR",
            lambda: all(victim in isr for _, isr in combined.partition_state(survivors[0], "trio").values()),
            60,
        )
        # It leads again (a preferred election): what it serves now is its own log.
        r = combined.http.post(
            f"{combined.rest_cluster(survivors[0])}/elect-leaders",
            json={"election_type": "PREFERRED", "partitions": None},
        )
        assert r.status_code == 200, r.text
        wait_until(
            f"node {victim} leading partition 0 again",
            lambda: combined.partition_state(survivors[0], "trio")[0][0] == victim,
            30,
        )
        acked_at_return = len(producer.acked)
        wait_until("acks=all writes after its return", lambda: len(producer.acked) > acked_at_return + 300, 30)
    finally:
        producer.stop()
    print(f"{in_flight} in flight at the kill; sent {producer.sent}, acked {len(producer.acked)}")
    print(f"failed: {producer.errors_by_name}")
    check_read_back(combined.bootstrap(), producer)


@pytest.mark.parametrize("combined", [3], indirect=True)
def test_saturating_producer_does_not_cost_the_quorum_its_leader(combined: Combined) -> None:
    combined.create_topic("busy", 3, 3)
    before = combined.elections()
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": combined.bootstrap(), "acks": "all", "linger.ms": 5})
    payload = b"x" * 1024
    end = time.monotonic() + 15
    sent = 0
    while time.monotonic() < end:
        try:
            p.produce("busy", payload, partition=sent % 3)
            sent += 1
        except BufferError:
            p.poll(0.01)
        if sent % 1000 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    assert sent > 10_000
    assert combined.elections() == before, "the quorum elected a new leader during the load"
