"""`pykraft cluster up|down|status`: a local cluster as background processes.

Everything of one cluster lives under one directory D: `D/cluster-id`, one
folder per node (`D/controller-1/` with `server.properties`, `data/`,
`node.log`, `events.jsonl`), and `D/cluster.json`, which lists every node with
its pid, listeners and directories. Node configs start from the templates in
`deploy/local/` and get their ports and directories rewritten for D.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from quorum.node.config import format_properties, load_config, parse_properties
from quorum.node.meta_properties import format_storage, random_uuid, read_meta_properties

DEFAULT_CONTROLLER_PORT = 19090  # controller i listens on DEFAULT_CONTROLLER_PORT + i
DEFAULT_REST_PORT = 18080  # node i serves REST on DEFAULT_REST_PORT + i
DEFAULT_BROKER_PORT = 9092  # broker k's PLAINTEXT listener: 9092, 9093, ...
TEMPLATES = Path(__file__).resolve().parents[2] / "deploy" / "local"


class ClusterError(Exception):
    pass


@dataclass(frozen=True, slots=True)
class NodePlan:
    node_id: int
    role: str
    directory: Path
    properties: dict[str, str]

    @property
    def config_path(self) -> Path:
        return self.directory / "server.properties"

    @property
    def log_file(self) -> Path:
        return self.directory / "node.log"

    @property
    def events_file(self) -> Path:
        return self.directory / "events.jsonl"


def _template(role: str, index: int) -> dict[str, str]:
    path = TEMPLATES / f"{role}-{index}.properties"
    if not path.exists():
        candidates = sorted(TEMPLATES.glob(f"{role}-*.properties"))
        if not candidates:
            return {}
        path = candidates[0]
    props = parse_properties(path.read_text())
    if path.name != f"{role}-{index}.properties":
        props.pop("broker.rack", None)  # another node's rack
    return props


def plan_cluster(
    root: Path, controllers: int, base_port: int = DEFAULT_CONTROLLER_PORT, brokers: int = 0
) -> list[NodePlan]:
    """Controllers get ids 1..N, brokers the ids after them (N+1..N+B)."""
    if controllers < 1:
        raise ClusterError("a cluster needs at least one controller")
    voters = ",".join(f"{i}@127.0.0.1:{base_port + i}" for i in range(1, controllers + 1))
    shift = base_port - DEFAULT_CONTROLLER_PORT
    rest_base = DEFAULT_REST_PORT + shift
    plans = []
    for i in range(1, controllers + 1):
        directory = root / f"controller-{i}"
        props = _template("controller", i)
        props.update(
            {
                "process.roles": "controller",
                "node.id": str(i),
                "controller.quorum.voters": voters,
                "listeners": f"CONTROLLER://127.0.0.1:{base_port + i}",
                "controller.listener.names": "CONTROLLER",
                "log.dirs": str(directory / "data"),
                "metadata.log.dir": str(directory / "data"),
                "rest.listener": f"http://127.0.0.1:{rest_base + i}",
            }
        )
        if brokers:
            props["default.replication.factor"] = str(min(3, brokers))
        plans.append(NodePlan(i, "controller", directory, props))
    for k in range(1, brokers + 1):
        node_id = controllers + k
        directory = root / f"broker-{node_id}"
        props = _template("broker", node_id)
        props.update(
            {
                "process.roles": "broker",
                "node.id": str(node_id),
                "controller.quorum.voters": voters,
                "controller.listener.names": "CONTROLLER",
                "listeners": f"PLAINTEXT://127.0.0.1:{DEFAULT_BROKER_PORT + shift + k - 1}",
                "log.dirs": str(directory / "data"),
                "metadata.log.dir": str(directory / "data"),
                "rest.listener": f"http://127.0.0.1:{rest_base + node_id}",
                "broker.rack": props.get("broker.rack", f"rack-{k}"),
                "default.replication.factor": str(min(3, brokers)),
            }
        )
        plans.append(NodePlan(node_id, "broker", directory, props))
    return plans


def _alive(pid: int, config_path: str) -> bool:
    """Is `pid` still the node started with `config_path` (not a recycled pid)?"""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    return config_path in cmdline


def _load_cluster(root: Path) -> dict[str, object]:
    path = root / "cluster.json"
    if not path.exists():
        raise ClusterError(f"no cluster in {root} ({path} not found)")
    data = json.loads(path.read_text())
    assert isinstance(data, dict)
    return data


def _nodes(data: dict[str, object]) -> list[dict[str, object]]:
    nodes = data.get("nodes", [])
    assert isinstance(nodes, list)
    return nodes


def start_node(plan: NodePlan, cluster_id: str, extra_args: list[str] | None = None) -> subprocess.Popen[bytes]:
    plan.directory.mkdir(parents=True, exist_ok=True)
    plan.config_path.write_text(format_properties(plan.properties, header=f"pykraft {plan.role} {plan.node_id}"))
    config = load_config(plan.config_path)
    if read_meta_properties(config.metadata_log_dir or config.log_dirs[0]) is None:
        format_storage(config, cluster_id)
    cmd = [
        sys.executable,
        "-m",
        "api.cli",
        plan.role,
        "--config",
        str(plan.config_path),
        "--events-file",
        str(plan.events_file),
        *(extra_args or []),
    ]
    log = plan.log_file.open("ab")
    try:
        return subprocess.Popen(  # noqa: S603 - our own interpreter and module
            cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
    finally:
        log.close()


def wait_for_leader(addresses: list[tuple[str, int]], cluster_id: str, timeout_s: float) -> tuple[int, int]:
    """Poll DescribeQuorum until some controller answers as leader; (leader id, epoch)."""
    from quorum.node.quorum_cli import query_leader

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = query_leader(addresses, timeout_s=0.5)
        if found is not None and found.high_watermark >= 0:
            return found.leader_id, found.leader_epoch
        time.sleep(0.1)
    raise ClusterError(f"no leader elected within {timeout_s:.0f} s")


def wait_for_unfenced(brokers: list[NodePlan], timeout_s: float) -> None:
    """Wait until every broker's event log says the controller unfenced it."""
    deadline = time.monotonic() + timeout_s
    pending = {p.node_id: p for p in brokers}
    while pending and time.monotonic() < deadline:
        for node_id, plan in list(pending.items()):
            if plan.events_file.exists() and '"state": "unfenced"' in plan.events_file.read_text():
                del pending[node_id]
        time.sleep(0.1)
    if pending:
        raise ClusterError(f"brokers {sorted(pending)} were not unfenced within {timeout_s:.0f} s")


def cluster_up(args: argparse.Namespace) -> int:
    root = Path(args.dir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    if (root / "cluster.json").exists():
        running = [n for n in _nodes(_load_cluster(root)) if _alive(int(str(n["pid"])), str(n["config"]))]
        if running:
            raise ClusterError(f"a cluster is already running in {root} (pids {[n['pid'] for n in running]})")
    id_file = root / "cluster-id"
    if id_file.exists():
        cluster_id = id_file.read_text().strip()
    else:
        cluster_id = random_uuid()
        id_file.write_text(cluster_id + "\n")
    base_port = getattr(args, "base_port", None) or DEFAULT_CONTROLLER_PORT
    brokers = getattr(args, "brokers", 3)
    plans = plan_cluster(root, args.controllers, base_port, brokers)
    nodes = []
    for plan in plans:
        proc = start_node(plan, cluster_id)
        nodes.append(
            {
                "id": plan.node_id,
                "roles": [plan.role],
                "pid": proc.pid,
                "listeners": [plan.properties["listeners"]],
                "log_dirs": [plan.properties["log.dirs"]],
                "metadata_log_dir": plan.properties["metadata.log.dir"],
                "config": str(plan.config_path),
                "log_file": str(plan.log_file),
                "events_file": str(plan.events_file),
                "rest": plan.properties.get("rest.listener"),
            }
        )
    data = {"cluster_id": cluster_id, "nodes": nodes}
    (root / "cluster.json").write_text(json.dumps(data, indent=2) + "\n")
    addresses = [("127.0.0.1", base_port + p.node_id) for p in plans if p.role == "controller"]
    try:
        leader, epoch = wait_for_leader(addresses, cluster_id, timeout_s=30)
        wait_for_unfenced([p for p in plans if p.role == "broker"], timeout_s=60)
    except ClusterError:
        for n in nodes:
            print(f"  node {n['id']}: see {n['log_file']}", file=sys.stderr)
        raise
    print(f"pykraft cluster {cluster_id} is up in {root}")
    for n in nodes:
        listeners = ", ".join(str(x) for x in n["listeners"])  # type: ignore[attr-defined]
        print(f"  {n['roles'][0]} {n['id']}: {listeners}  rest {n['rest']}  pid {n['pid']}")  # type: ignore[index]
    print(f"  leader: node {leader} in epoch {epoch}")
    print(f"stop it with: pykraft cluster down --dir {args.dir}")
    return 0


def stop_nodes(nodes: list[dict[str, object]], timeout_s: float = 10.0) -> None:
    live = [n for n in nodes if _alive(int(str(n["pid"])), str(n["config"]))]
    for n in live:
        os.kill(int(str(n["pid"])), signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(_alive(int(str(n["pid"])), str(n["config"])) for n in live):
        time.sleep(0.05)
    for n in live:
        if _alive(int(str(n["pid"])), str(n["config"])):
            os.kill(int(str(n["pid"])), signal.SIGKILL)


def cluster_down(args: argparse.Namespace) -> int:
    root = Path(args.dir).resolve()
    data = _load_cluster(root)
    nodes = _nodes(data)
    stop_nodes(nodes)
    print(f"stopped {len(nodes)} nodes of cluster {data.get('cluster_id')} in {root}")
    return 0


def cluster_status(args: argparse.Namespace) -> int:
    from quorum.node.quorum_cli import query_leader

    root = Path(args.dir).resolve()
    data = _load_cluster(root)
    nodes = _nodes(data)
    addresses = []
    for n in nodes:
        n["alive"] = _alive(int(str(n["pid"])), str(n["config"]))
        for listener in n["listeners"]:  # type: ignore[attr-defined]
            if str(listener).startswith("CONTROLLER://"):
                host, port = str(listener).removeprefix("CONTROLLER://").rsplit(":", 1)
                addresses.append((host, int(port)))
    described = query_leader(addresses, timeout_s=1.0)
    quorum = None
    if described is not None:
        quorum = {"leader_id": described.leader_id, "epoch": described.leader_epoch, "hw": described.high_watermark}
    if args.json:
        print(json.dumps({"cluster_id": data.get("cluster_id"), "quorum": quorum, "nodes": nodes}, indent=2))
    else:
        print(f"cluster {data.get('cluster_id')} in {root}")
        for n in nodes:
            state = "up" if n["alive"] else "down"
            print(f"  {n['roles'][0]} {n['id']}: {state}  pid {n['pid']}  {', '.join(n['listeners'])}")  # type: ignore[index, arg-type]
        if quorum is None:
            print("  quorum: no leader reachable")
        else:
            print(f"  quorum: leader {quorum['leader_id']} epoch {quorum['epoch']} high watermark {quorum['hw']}")
    return 0 if all(n["alive"] for n in nodes) and quorum is not None else 1
