"""A real 3-controller + 3-broker pykraft cluster driven through a failure scenario, for the audit tests.

`run_scenario(root)` starts the six nodes with `quorum.node.cluster.plan_cluster` / `start_node`
on free loopback ports with fast timeouts, creates topics over REST (Confluent v3 paths), then:

1. kill -9 a broker that leads partitions, wait until the controller fences it, restart it,
   wait until it is unfenced again;
2. kill -9 the active controller, wait for a new leader in a higher epoch, create a topic
   through the new leader, restart the killed controller;
3. SIGTERM another broker (controlled shutdown) and wait for it to exit;
4. stop everything (brokers first, then controllers; SIGTERM, by pid).

It returns what happened (`Scenario`), so the tests can compare the audit's timelines with it.
Every process started is remembered and killed by pid in `ScenarioCluster.close()`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from quorum.node.cluster import (
    NodePlan,
    free_cluster_base,
    plan_cluster,
    start_node,
)
from quorum.node.meta_properties import random_uuid
from quorum.node.quorum_cli import query_leader

CONTROLLERS = 3
BROKERS = 3
FAST = {
    "controller.quorum.election.timeout.ms": "300",
    "controller.quorum.fetch.timeout.ms": "600",
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
}
METADATA_DIR = "__cluster_metadata-0"


class ScenarioTimeout(AssertionError):
    pass


def wait_until(what: str, predicate: Callable[[], Any], timeout: float, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise ScenarioTimeout(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


@dataclass
class Scenario:
    """What the scenario did (node ids, topics, the leaders before/after the broker kill)."""

    root: Path
    cluster_id: str
    controller_ids: list[int]
    broker_ids: list[int]
    killed_broker: int = -1
    killed_controller: int = -1
    shutdown_broker: int = -1
    epoch_before_failover: int = -1
    epoch_after_failover: int = -1
    topics: dict[str, dict[str, Any]] = field(default_factory=dict)
    led_by_killed: list[tuple[str, int]] = field(default_factory=list)

    def node_dir(self, node_id: int) -> Path:
        role = "controller" if node_id in self.controller_ids else "broker"
        return self.root / f"{role}-{node_id}"

    def log_dir(self, node_id: int) -> Path:
        """The node's metadata log dir (holds meta.properties and __cluster_metadata-0)."""
        return self.node_dir(node_id) / "data"

    def metadata_dir(self, node_id: int) -> Path:
        return self.log_dir(node_id) / METADATA_DIR


class ScenarioCluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.cluster_id = random_uuid()
        self.base_port = free_cluster_base(CONTROLLERS, BROKERS)
        self.plans: dict[int, NodePlan] = {}
        for plan in plan_cluster(root, CONTROLLERS, self.base_port, BROKERS):
            plan.properties.update(FAST)
            self.plans[plan.node_id] = plan
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.all_procs: list[subprocess.Popen[bytes]] = []
        self.http = httpx.Client(timeout=30.0)
        self._cluster: str | None = None

    # ------------------------------------------------------------ processes

    @property
    def controller_ids(self) -> list[int]:
        return [i for i, p in self.plans.items() if p.role == "controller"]

    @property
    def broker_ids(self) -> list[int]:
        return [i for i, p in self.plans.items() if p.role == "broker"]

    def start(self, node_id: int) -> None:
        proc = start_node(self.plans[node_id], self.cluster_id)
        self.procs[node_id] = proc
        self.all_procs.append(proc)

    def running(self, node_id: int) -> bool:
        proc = self.procs.get(node_id)
        return proc is not None and proc.poll() is None

    def kill9(self, node_id: int) -> None:
        proc = self.procs[node_id]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def terminate(self, node_id: int, timeout: float = 20.0) -> int:
        proc = self.procs[node_id]
        os.kill(proc.pid, signal.SIGTERM)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            return proc.wait(10)

    def close(self) -> None:
        for proc in self.all_procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)
        self.http.close()

    def node_log(self, node_id: int) -> str:
        path = self.plans[node_id].log_file
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    # ------------------------------------------------------------ quorum and REST

    def controller_addresses(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", self.base_port + i) for i in self.controller_ids]

    def leader(self) -> tuple[int, int] | None:
        found = query_leader(self.controller_addresses(), timeout_s=0.5)
        if found is None or found.high_watermark < 0:
            return None
        return found.leader_id, found.leader_epoch

    def rest(self, node_id: int) -> str:
        return self.plans[node_id].properties["rest.listener"].rstrip("/")

    def _get(self, node_id: int, path: str) -> Any:
        if self._cluster is None:
            data = self.http.get(f"{self.rest(node_id)}/v3/clusters").json()
            self._cluster = str(data["data"][0]["cluster_id"])
        r = self.http.get(f"{self.rest(node_id)}/v3/clusters/{self._cluster}{path}")
        r.raise_for_status()
        return r.json()

    def brokers(self, via: int) -> dict[int, dict[str, Any]]:
        try:
            return {b["broker_id"]: b for b in self._get(via, "/brokers")["data"]}
        except (httpx.HTTPError, ValueError, KeyError):
            return {}

    def create_topic(
        self, via: int, name: str, partitions: int, rf: int, configs: dict[str, str] | None = None
    ) -> None:
        if self._cluster is None:
            self._get(via, "")
        body = {
            "topic_name": name,
            "partitions_count": partitions,
            "replication_factor": rf,
            "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
        }
        r = self.http.post(f"{self.rest(via)}/v3/clusters/{self._cluster}/topics", json=body)
        assert r.status_code == 201, r.text

    def partitions(self, via: int, topic: str) -> dict[int, dict[str, Any]]:
        return {p["partition_id"]: p for p in self._get(via, f"/topics/{topic}/partitions")["data"]}

    def leaders(self, via: int, topics: list[str]) -> dict[tuple[str, int], int]:
        out = {}
        for t in topics:
            for pid, p in self.partitions(via, t).items():
                out[(t, pid)] = p.get("leader_id") if p.get("leader_id") is not None else -1
        return out


def run_scenario(root: Path) -> Scenario:
    """Run the whole scenario (about 30-40 s); every node is stopped when it returns."""
    c = ScenarioCluster(root)
    try:
        return _run(c)
    except BaseException:
        for node_id in c.plans:
            print(f"===== node {node_id} log tail\n{c.node_log(node_id)}")
        raise
    finally:
        c.close()


def _run(c: ScenarioCluster) -> Scenario:
    s = Scenario(c.root, c.cluster_id, c.controller_ids, c.broker_ids)
    for node_id in c.plans:
        c.start(node_id)
    wait_until("a controller leader", c.leader, 30)
    observer = c.broker_ids[0]  # never killed: its REST view and its log copy are audited

    def all_unfenced() -> bool:
        brokers = c.brokers(observer)
        return len(brokers) == BROKERS and not any(b["fenced"] for b in brokers.values())

    wait_until("every broker unfenced", all_unfenced, 60)

    s.topics = {
        "audit-a": {"partitions": 6, "rf": 3, "configs": {}},
        "audit-b": {"partitions": 3, "rf": 2, "configs": {"unclean.leader.election.enable": "false"}},
        "audit-c": {"partitions": 2, "rf": 3, "configs": {"unclean.leader.election.enable": "true"}},
    }
    for name, spec in s.topics.items():
        c.create_topic(observer, name, spec["partitions"], spec["rf"], spec["configs"])
    names = list(s.topics)
    leaders = wait_until(
        "leaders for every partition",
        lambda: (lambda ls: ls if ls and all(v >= 0 for v in ls.values()) else None)(c.leaders(observer, names)),
        20,
    )

    # 1. kill -9 a broker that leads partitions (not the observer), wait for fencing, restart it.
    candidates = [b for b in c.broker_ids if b != observer]
    s.killed_broker = max(candidates, key=lambda b: sum(1 for v in leaders.values() if v == b))
    s.led_by_killed = sorted(k for k, v in leaders.items() if v == s.killed_broker)
    assert s.led_by_killed, f"broker {s.killed_broker} leads nothing: {leaders}"
    c.kill9(s.killed_broker)
    wait_until(
        f"broker {s.killed_broker} fenced",
        lambda: c.brokers(observer).get(s.killed_broker, {}).get("fenced") is True,
        30,
    )
    moved = c.leaders(observer, names)
    assert all(moved[k] != s.killed_broker for k in s.led_by_killed), moved
    c.start(s.killed_broker)
    wait_until(
        f"broker {s.killed_broker} unfenced again",
        lambda: c.brokers(observer).get(s.killed_broker, {}).get("fenced") is False,
        60,
    )

    # 2. kill -9 the active controller: leadership moves to another controller in a higher epoch.
    leader_id, s.epoch_before_failover = wait_until("a controller leader", c.leader, 30)
    s.killed_controller = leader_id
    c.kill9(leader_id)
    s.epoch_after_failover = wait_until(
        "a new controller leader",
        lambda: (lambda le: le[1] if le and le[0] != leader_id and le[1] > s.epoch_before_failover else None)(
            c.leader()
        ),
        30,
    )
    s.topics["audit-d"] = {"partitions": 2, "rf": 3, "configs": {}}
    wait_until("topic audit-d created", lambda: _try(lambda: c.create_topic(observer, "audit-d", 2, 3)), 30, 0.5)
    c.start(leader_id)
    wait_until(f"controller {leader_id} back in the quorum", lambda: _caught_up(c, leader_id), 30)

    # 3. SIGTERM another broker: controlled shutdown moves its leaderships away before it exits.
    s.shutdown_broker = next(b for b in c.broker_ids if b not in (observer, s.killed_broker))
    code = c.terminate(s.shutdown_broker)
    assert code == 0, f"broker {s.shutdown_broker} exited with {code}:\n{c.node_log(s.shutdown_broker)}"

    # 4. Let the observer fetch the tail, then stop everything (brokers first).
    time.sleep(1.0)
    for node_id in [b for b in c.broker_ids if c.running(b)] + [i for i in c.controller_ids if c.running(i)]:
        c.terminate(node_id)
    return s


def _try(action: Callable[[], None]) -> bool:
    try:
        action()
    except (AssertionError, httpx.HTTPError):
        return False
    return True


def _caught_up(c: ScenarioCluster, node_id: int) -> bool:
    found = query_leader(c.controller_addresses(), timeout_s=0.5)
    if found is None:
        return False
    leader = next((v for v in found.voters if v.replica_id == found.leader_id), None)
    me = next((v for v in found.voters if v.replica_id == node_id), None)
    return leader is not None and me is not None and me.log_end_offset >= found.high_watermark > 0
