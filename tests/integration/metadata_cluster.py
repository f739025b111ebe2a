"""A real 3-controller + 3-broker pykraft cluster for the metadata-plane integration tests.

`MetadataCluster` plans the cluster with `quorum.node.cluster.plan_cluster` (controllers
1..3, brokers 4..6 with racks rack-1..rack-3), on a random free base port, with fast
timings written into every node's properties, and starts each node as its own process
with `quorum.node.cluster.start_node` (`python -m api.cli controller|broker`). It gives the
tests what they need to drive it: the REST API of every node (httpx), kill -9 / SIGTERM /
restart of a node, the nodes' event logs (`events.jsonl`) and logs (`node.log`).

Every process it starts is remembered by pid and killed (SIGKILL) in `close()`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
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

REPO = Path(__file__).resolve().parents[2]
METADATA_DIR = "__cluster_metadata-0"

FAST_TIMINGS = {
    "controller.quorum.election.timeout.ms": "300",
    "controller.quorum.fetch.timeout.ms": "600",
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "metadata.max.idle.interval.ms": "500",
    # Leadership moves only when a test asks for it (no background preferred elections).
    "auto.leader.rebalance.enable": "false",
}

# Snapshot often and roll segments often, so that the log prefix below a snapshot is deleted.
SNAPSHOT_TIMINGS = {
    "metadata.log.max.record.bytes.between.snapshots": "2000",
    "metadata.log.segment.bytes": "4096",
}


class ClusterTimeout(AssertionError):
    """Something the test waited for did not happen in time (the message says what)."""


class KnownBug(AssertionError):
    """A check that once demonstrated a product bug failed: the bug is back. `known_bug`
    raises it as an ordinary assertion failure (nothing marks these tests xfail), its type
    saying which checks guard a bug that was seen before."""


def known_bug(condition: object, message: str) -> None:
    if not condition:
        raise KnownBug(message)


def wait_until(what: str, predicate: Callable[[], Any], timeout: float, interval: float = 0.05) -> Any:
    """Poll `predicate` until it returns something truthy; return that, or fail saying `what`."""
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            value = predicate()
        except (httpx.HTTPError, OSError, KeyError, ValueError, AssertionError) as exc:  # not answering (yet)
            value, last_error = None, exc
        if value:
            return value
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_error!r})" if last_error is not None else ""
            raise ClusterTimeout(f"timed out after {timeout:.1f} s waiting for {what}{detail}")
        time.sleep(interval)


# --------------------------------------------------------------------------- ports


def free_base_port(controllers: int, brokers: int) -> int:
    """A base port for `plan_cluster(root, controllers, base, brokers)` with every port free."""
    return free_cluster_base(controllers, brokers)


# --------------------------------------------------------------------------- the console script


def pykraft_script() -> Path:
    """The real `pykraft` console script of this venv."""
    script = Path(sys.executable).with_name("pykraft")
    if not script.exists():
        script = REPO / ".venv" / "bin" / "pykraft"
    return script


def run_pykraft(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYKRAFT_REST_URL"}
    return subprocess.run(  # noqa: S603 - our own console script
        [str(pykraft_script()), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        check=False,
        env=env,
    )


# --------------------------------------------------------------------------- the cluster


class Node:
    def __init__(self, plan: NodePlan) -> None:
        self.plan = plan
        self.proc: subprocess.Popen[bytes] | None = None
        self.procs: list[subprocess.Popen[bytes]] = []  # every process started for this node

    @property
    def node_id(self) -> int:
        return self.plan.node_id

    @property
    def role(self) -> str:
        return self.plan.role

    @property
    def rest_url(self) -> str:
        return self.plan.properties["rest.listener"]

    @property
    def port(self) -> int:
        return int(self.plan.properties["listeners"].rsplit(":", 1)[1])

    @property
    def partition_dir(self) -> Path:
        return Path(self.plan.properties["metadata.log.dir"]) / METADATA_DIR

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid


class MetadataCluster:
    def __init__(
        self,
        root: Path,
        *,
        controllers: int = 3,
        brokers: int = 3,
        properties: dict[str, str] | None = None,
    ) -> None:
        self.root = root
        self.cluster_id = random_uuid()
        self.base_port = free_base_port(controllers, brokers)
        self.nodes: dict[int, Node] = {}
        for plan in plan_cluster(root, controllers, self.base_port, brokers):
            plan.properties.update(FAST_TIMINGS)
            plan.properties.update(properties or {})
            self.nodes[plan.node_id] = Node(plan)
        self.http = httpx.Client(timeout=15.0)

    # ------------------------------------------------------------ nodes

    @property
    def controller_ids(self) -> list[int]:
        return sorted(i for i, n in self.nodes.items() if n.role == "controller")

    @property
    def broker_ids(self) -> list[int]:
        return sorted(i for i, n in self.nodes.items() if n.role == "broker")

    @property
    def controller_addresses(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", self.nodes[i].port) for i in self.controller_ids]

    def running_ids(self) -> list[int]:
        return sorted(i for i, n in self.nodes.items() if n.running)

    def start(self, node_id: int) -> subprocess.Popen[bytes]:
        node = self.nodes[node_id]
        assert not node.running, f"node {node_id} is already running (pid {node.pid})"
        node.proc = start_node(node.plan, self.cluster_id)
        node.procs.append(node.proc)
        return node.proc

    restart = start  # same config, same data directory, events and log appended

    def start_all(self) -> None:
        for node_id in self.nodes:
            self.start(node_id)

    def kill9(self, node_id: int) -> None:
        node = self.nodes[node_id]
        assert node.proc is not None and node.running, f"node {node_id} is not running"
        os.kill(node.proc.pid, signal.SIGKILL)
        node.proc.wait(10)

    def sigterm(self, node_id: int) -> subprocess.Popen[bytes]:
        node = self.nodes[node_id]
        assert node.proc is not None and node.running, f"node {node_id} is not running"
        os.kill(node.proc.pid, signal.SIGTERM)
        return node.proc

    def terminate(self, node_id: int, timeout: float = 15.0) -> int:
        """SIGTERM one node and wait for it to exit; its exit code."""
        return self.sigterm(node_id).wait(timeout)

    def close(self) -> None:
        """Kill -9 (by pid) every process this cluster started that still runs; never raises."""
        for node in self.nodes.values():
            for proc in node.procs:
                if proc.poll() is None:
                    with contextlib.suppress(OSError):
                        os.kill(proc.pid, signal.SIGKILL)
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(10)
        with contextlib.suppress(Exception):
            self.http.close()

    # ------------------------------------------------------------ files

    def events(self, node_id: int) -> list[dict[str, Any]]:
        path = self.nodes[node_id].plan.events_file
        if not path.exists():
            return []
        out = []
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return out

    def lifecycle(self, node_id: int) -> list[str]:
        return [str(e.get("state")) for e in self.events(node_id) if e.get("event") == "lifecycle"]

    def node_log(self, node_id: int) -> str:
        path = self.nodes[node_id].plan.log_file
        return path.read_text(errors="replace") if path.exists() else ""

    def diagnostics(self, tail: int = 40) -> str:
        out = [f"cluster {self.cluster_id} in {self.root}, base port {self.base_port}"]
        for node_id, node in self.nodes.items():
            state = f"running pid {node.pid}" if node.running else "down"
            out.append(f"--- {node.role} {node_id} ({state}) rest {node.rest_url}: last {tail} log lines")
            out.extend(self.node_log(node_id).splitlines()[-tail:])
            out.append(f"--- {node.role} {node_id}: lifecycle {self.lifecycle(node_id)}")
        return "\n".join(out)

    # ------------------------------------------------------------ REST

    def url(self, node_id: int, path: str = "") -> str:
        return f"{self.nodes[node_id].rest_url}/v3/clusters/{self.cluster_id}{path}"

    def get(self, node_id: int, path: str, **kwargs: Any) -> httpx.Response:
        return self.http.get(self.url(node_id, path), **kwargs)

    def post(self, node_id: int, path: str, body: Any = None, **kwargs: Any) -> httpx.Response:
        return self.http.post(self.url(node_id, path), json=body, **kwargs)

    def patch(self, node_id: int, path: str, body: Any = None) -> httpx.Response:
        return self.http.patch(self.url(node_id, path), json=body)

    def put(self, node_id: int, path: str, body: Any = None) -> httpx.Response:
        return self.http.put(self.url(node_id, path), json=body)

    def delete(self, node_id: int, path: str) -> httpx.Response:
        return self.http.delete(self.url(node_id, path))

    def get_json(self, node_id: int, path: str) -> Any:
        r = self.get(node_id, path)
        assert r.status_code == 200, f"GET {path} on node {node_id}: {r.status_code} {r.text}"
        return r.json()

    def topics(self, node_id: int) -> dict[str, dict[str, Any]]:
        return {t["topic_name"]: t for t in self.get_json(node_id, "/topics")["data"]}

    def partitions(self, node_id: int, topic: str) -> list[dict[str, Any]]:
        return sorted(self.get_json(node_id, f"/topics/{topic}/partitions")["data"], key=lambda p: p["partition_id"])

    def all_partitions(self, node_id: int) -> dict[tuple[str, int], dict[str, Any]]:
        out = {}
        for name in self.topics(node_id):
            for p in self.partitions(node_id, name):
                out[(name, p["partition_id"])] = p
        return out

    def brokers(self, node_id: int) -> dict[int, dict[str, Any]]:
        return {b["broker_id"]: b for b in self.get_json(node_id, "/brokers")["data"]}

    def quorum_status(self, node_id: int | None = None) -> dict[str, Any] | None:
        """The quorum status as one running node's REST API reports it (None if it cannot tell)."""
        ids = [node_id] if node_id is not None else self.running_ids()
        for i in ids:
            with contextlib.suppress(httpx.HTTPError):
                r = self.get(i, "/quorum/status", timeout=3.0)
                if r.status_code == 200:
                    return dict(r.json())
        return None

    def active_controller(self, timeout: float = 20.0, not_id: int | None = None) -> int:
        """The quorum leader (the active controller) as the REST API reports it."""

        def found() -> int | None:
            s = self.quorum_status()
            if s is None or s["leader_id"] < 0 or s["leader_id"] == not_id or s["high_watermark"] <= 0:
                return None
            if not self.nodes[s["leader_id"]].running:
                return None
            return int(s["leader_id"])

        return int(wait_until(f"an active controller (not {not_id})", found, timeout))

    def create_topic(self, node_id: int, name: str, **fields: Any) -> dict[str, Any]:
        r = self.post(node_id, "/topics", {"topic_name": name, **fields})
        assert r.status_code == 201, f"create {name} on node {node_id}: {r.status_code} {r.text}"
        return dict(r.json())

    # ------------------------------------------------------------ waiting

    def rest_up(self, node_id: int) -> bool:
        try:
            return self.http.get(f"{self.nodes[node_id].rest_url}/v3/clusters", timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False

    def wait_started(self, timeout: float = 60.0, nodes: Iterable[int] | None = None) -> list[int]:
        """Wait until each node serves REST; the nodes that exited instead."""
        ids = list(nodes if nodes is not None else self.nodes)

        def settled() -> bool:
            return all(not self.nodes[i].running or self.rest_up(i) for i in ids)

        wait_until(f"nodes {ids} to serve REST", settled, timeout, interval=0.1)
        return [i for i in ids if not self.nodes[i].running]

    def wait_unfenced(
        self,
        broker_ids: Iterable[int] | None = None,
        timeout: float = 30.0,
        via: int | None = None,
        min_epoch: int = 0,
    ) -> None:
        """Every broker registered (with a broker epoch >= `min_epoch`), unfenced and not shutting
        down, as the active controller's image says."""
        ids = list(broker_ids if broker_ids is not None else self.broker_ids)

        def ok() -> bool:
            node = via if via is not None else self.active_controller(timeout=5.0)
            brokers = self.brokers(node)
            return all(
                i in brokers
                and not brokers[i]["fenced"]
                and not brokers[i]["in_controlled_shutdown"]
                and brokers[i]["epoch"] >= min_epoch
                for i in ids
            )

        wait_until(f"brokers {ids} unfenced (broker epoch >= {min_epoch})", ok, timeout, interval=0.1)

    def wait_ready(self, timeout: float = 60.0) -> None:
        """A leader, every broker unfenced, and every node's image showing every broker unfenced."""
        self.active_controller(timeout=timeout)
        self.wait_unfenced(timeout=timeout)

        def everywhere() -> bool:
            for i in self.running_ids():
                brokers = self.brokers(i)
                if not all(b in brokers and not brokers[b]["fenced"] for b in self.broker_ids):
                    return False
            return True

        wait_until("every node to see every broker unfenced", everywhere, timeout, interval=0.1)

    def wait_topic_everywhere(
        self, name: str, timeout: float = 10.0, nodes: Iterable[int] | None = None
    ) -> dict[int, dict[str, Any]]:
        ids = list(nodes if nodes is not None else self.running_ids())

        def seen() -> dict[int, dict[str, Any]] | None:
            out = {}
            for i in ids:
                r = self.get(i, f"/topics/{name}")
                if r.status_code != 200:
                    return None
                out[i] = r.json()
            return out

        return dict(wait_until(f"topic {name} on nodes {ids}", seen, timeout))


@contextlib.contextmanager
def closed_after(request: Any, clusters: list[MetadataCluster]) -> Iterator[None]:
    """Close `clusters` (the list as it is when the block ends) at the end of the block,
    printing each one's diagnostics first if a test failed meanwhile (`request`: a pytest
    fixture request)."""
    failed_before = request.session.testsfailed
    try:
        yield
    finally:
        for c in clusters:
            if request.session.testsfailed > failed_before:
                print(c.diagnostics())
            c.close()


def start_cluster(root: Path, attempts: int = 3, ready_timeout: float = 60.0, **kwargs: Any) -> MetadataCluster:
    """Plan, start and wait for a cluster to be ready; on a port race, try other ports."""
    for attempt in range(attempts):
        c = MetadataCluster(root / f"attempt-{attempt}", **kwargs)
        c.start_all()
        try:
            dead = c.wait_started(timeout=ready_timeout)
            if dead:
                logs = {i: c.node_log(i) for i in dead}
                if all("Address already in use" in text or "address already in use" in text for text in logs.values()):
                    c.close()
                    continue
                raise AssertionError(f"nodes {dead} exited at start:\n{c.diagnostics()}")
            c.wait_ready(timeout=ready_timeout)
        except BaseException:
            print(c.diagnostics())
            c.close()
            raise
        return c
    raise AssertionError(f"could not start a cluster on free ports in {attempts} attempts")
