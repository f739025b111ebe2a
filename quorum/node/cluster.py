"""`pykraft cluster up|down|status|start|stop|restart`: a local cluster as background processes.

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
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from quorum.node.bootstrap_voters import format_node, initial_voters
from quorum.node.config import ConfigError, config_from_properties, format_properties, load_config, parse_properties
from quorum.node.free_ports import free_ports_for
from quorum.node.meta_properties import StorageError, random_uuid, read_meta_properties

DEFAULT_CONTROLLER_PORT = 19090  # controller i listens on DEFAULT_CONTROLLER_PORT + i
DEFAULT_REST_PORT = 18080  # node i serves REST on DEFAULT_REST_PORT + i
DEFAULT_BROKER_PORT = 9092  # broker k's PLAINTEXT listener: 9092, 9093, ...
TEMPLATES = Path(__file__).resolve().parents[2] / "deploy" / "local"


class ClusterError(Exception):
    """A cluster command cannot do what was asked; `pykraft` prints it as one `error:` line."""


EXPECTED_ERRORS = (ClusterError,)


@dataclass(frozen=True, slots=True)
class NodePlan:
    node_id: int
    role: str
    directory: Path
    properties: dict[str, str]
    # KIP-853: the `storage format --initial-controllers` value a controller of a dynamic quorum
    # is formatted with (id@host:port:directory-id,...); None for brokers and static voters.
    initial_controllers: str | None = None

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


def _quorum_properties(voter_ids: range, base_port: int, directory_ids: Mapping[int, str] | None) -> dict[str, str]:
    """How every node finds the controllers (voter i listens on base_port + i): static
    `controller.quorum.voters` (kraft.version 0), or, given each voter's metadata directory.id,
    `controller.quorum.bootstrap.servers` (KIP-853, a dynamic quorum)."""
    if directory_ids is None:
        return {"controller.quorum.voters": ",".join(f"{i}@127.0.0.1:{base_port + i}" for i in voter_ids)}
    return {"controller.quorum.bootstrap.servers": ",".join(f"127.0.0.1:{base_port + i}" for i in voter_ids)}


def _initial_controllers(voter_ids: range, base_port: int, directory_ids: Mapping[int, str] | None) -> str | None:
    """`--initial-controllers` for the voters (None: a static quorum)."""
    if directory_ids is None:
        return None
    return ",".join(f"{i}@127.0.0.1:{base_port + i}:{directory_ids[i]}" for i in voter_ids)


def _without_quorum(props: dict[str, str]) -> dict[str, str]:
    """A template's properties without its way of finding the controllers (the plan sets one)."""
    props.pop("controller.quorum.voters", None)
    props.pop("controller.quorum.bootstrap.servers", None)
    return props


def plan_cluster(
    root: Path,
    controllers: int,
    base_port: int = DEFAULT_CONTROLLER_PORT,
    brokers: int = 0,
    *,
    directory_ids: Mapping[int, str] | None = None,
) -> list[NodePlan]:
    """Controllers get ids 1..N, brokers the ids after them (N+1..N+B). `directory_ids`
    (controller id -> metadata directory.id) makes the quorum dynamic (KIP-853): the
    controllers are formatted with --initial-controllers, every node finds them through
    controller.quorum.bootstrap.servers; without it, the voters are static."""
    if controllers < 1:
        raise ClusterError("a cluster needs at least one controller")
    voter_ids = range(1, controllers + 1)
    quorum = _quorum_properties(voter_ids, base_port, directory_ids)
    initial = _initial_controllers(voter_ids, base_port, directory_ids)
    shift = base_port - DEFAULT_CONTROLLER_PORT
    rest_base = DEFAULT_REST_PORT + shift
    plans = []
    for i in voter_ids:
        directory = root / f"controller-{i}"
        props = _without_quorum(_template("controller", i))
        props.update(
            {
                "process.roles": "controller",
                "node.id": str(i),
                **quorum,
                "listeners": f"CONTROLLER://127.0.0.1:{base_port + i}",
                "controller.listener.names": "CONTROLLER",
                "log.dirs": str(directory / "data"),
                "metadata.log.dir": str(directory / "data"),
                "rest.listener": f"http://127.0.0.1:{rest_base + i}",
            }
        )
        if brokers:
            props["default.replication.factor"] = str(min(3, brokers))
        plans.append(NodePlan(i, "controller", directory, props, initial))
    for k in range(1, brokers + 1):
        node_id = controllers + k
        directory = root / f"broker-{node_id}"
        props = _without_quorum(_template("broker", node_id))
        props.update(
            {
                "process.roles": "broker",
                "node.id": str(node_id),
                **quorum,
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


def plan_combined(
    root: Path, nodes: int, base_port: int = DEFAULT_CONTROLLER_PORT, *, directory_ids: Mapping[int, str] | None = None
) -> list[NodePlan]:
    """Combined mode (`process.roles=broker,controller`, Kafka's quick-start shape): nodes 1..N
    each a voter on CONTROLLER (base_port + i) and a broker on PLAINTEXT (9092 + i - 1,
    shifted like the ports of `plan_cluster`). Launched as `pykraft broker` (the combined node).
    `directory_ids`: a dynamic quorum, as in `plan_cluster`."""
    if nodes < 1:
        raise ClusterError("a combined cluster needs at least one node")
    voter_ids = range(1, nodes + 1)
    quorum = _quorum_properties(voter_ids, base_port, directory_ids)
    initial = _initial_controllers(voter_ids, base_port, directory_ids)
    shift = base_port - DEFAULT_CONTROLLER_PORT
    plans = []
    for i in voter_ids:
        directory = root / f"node-{i}"
        props = _without_quorum(_template("broker", 3 + i))
        props.update(
            {
                "process.roles": "broker,controller",
                "node.id": str(i),
                **quorum,
                "listeners": f"PLAINTEXT://127.0.0.1:{DEFAULT_BROKER_PORT + shift + i - 1},"
                f"CONTROLLER://127.0.0.1:{base_port + i}",
                "controller.listener.names": "CONTROLLER",
                "log.dirs": str(directory / "data"),
                "metadata.log.dir": str(directory / "data"),
                "rest.listener": f"http://127.0.0.1:{DEFAULT_REST_PORT + shift + i}",
                "broker.rack": f"rack-{i}",
                "default.replication.factor": str(min(3, nodes)),
                "min.insync.replicas": str(min(2, nodes)),
            }
        )
        plans.append(NodePlan(i, "broker", directory, props, initial))
    return plans


def plan_ports(plans: list[NodePlan]) -> list[int]:
    """Every port the planned nodes listen on: their `listeners` and `rest.listener`."""
    ports = []
    for plan in plans:
        config = config_from_properties(plan.properties)
        ports += [listener.port for listener in config.listeners]
        if config.rest_address is not None:
            ports.append(config.rest_address.port)
    return ports


def free_cluster_base(controllers: int, brokers: int = 0, *, combined: bool = False) -> int:
    """A base port for `plan_cluster(root, controllers, base, brokers)` (or, `combined`,
    `plan_combined(root, controllers, base)`) whose every port is free and below the
    ephemeral range (see quorum.node.free_ports)."""

    def layout(base: int) -> list[int]:
        root = Path("/nonexistent")  # plans only name their directories
        plans = plan_combined(root, controllers, base) if combined else plan_cluster(root, controllers, base, brokers)
        return plan_ports(plans)

    return free_ports_for(layout)


def _alive(pid: int, config_path: str) -> bool:
    """Is `pid` a running node started with `config_path` (not a recycled pid, not a zombie)?"""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    if stat.rsplit(")", 1)[-1].split()[:1] == ["Z"]:
        return False
    given = next((args[i + 1] for i, a in enumerate(args[:-1]) if a in (b"--config", b"-c")), None)
    if given is None:
        return False
    if given == config_path.encode():
        return True
    try:  # started by hand with a relative path
        return (Path(f"/proc/{pid}/cwd").resolve() / given.decode()).resolve() == Path(config_path).resolve()
    except OSError:
        return False


def node_pid(node: dict[str, object]) -> int | None:
    """The pid of the process running `node` (from cluster.json): its recorded pid, or, for a
    node started again by hand, whichever process runs with its config file; None if none does."""
    config = str(node["config"])
    recorded = int(str(node["pid"]))
    if _alive(recorded, config):
        return recorded
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _alive(int(entry.name), config):
            return int(entry.name)
    return None


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
        try:
            bootstrap = initial_voters(
                config, standalone=False, initial_controllers=plan.initial_controllers, no_initial_controllers=False
            )
            format_node(config, cluster_id, bootstrap)
        except StorageError as exc:
            raise ClusterError(f"{plan.role} {plan.node_id}: {exc}") from exc
    return launch(plan.role, plan.config_path, plan.events_file, plan.log_file, extra_args)


def launch(
    role: str, config_path: Path, events_file: Path, log_file: Path, extra_args: list[str] | None = None
) -> subprocess.Popen[bytes]:
    """Start `pykraft <role> --config <config_path>` in the background (its own session), output to `log_file`."""
    cmd = [
        sys.executable,
        "-m",
        "api.cli",
        role,
        "--config",
        str(config_path),
        "--events-file",
        str(events_file),
        *(extra_args or []),
    ]
    log = log_file.open("ab")
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


def events_ends(plans: list[NodePlan]) -> dict[int, int]:
    """Each node's event log size (bytes) now: where the events of a node started next begin
    (the log is appended to across starts)."""
    return {p.node_id: p.events_file.stat().st_size if p.events_file.exists() else 0 for p in plans}


def wait_for_unfenced(brokers: list[NodePlan], timeout_s: float, since: Mapping[int, int] | None = None) -> None:
    """Wait until every broker's event log says the controller unfenced it, in the events
    written after byte `since[node_id]` (`events_ends` taken before the start): an
    "unfenced" of an earlier start of the same directory does not count."""
    deadline = time.monotonic() + timeout_s
    pending = {p.node_id: p for p in brokers}
    while pending and time.monotonic() < deadline:
        for node_id, plan in list(pending.items()):
            if _unfenced_since(plan.events_file, (since or {}).get(node_id, 0)):
                del pending[node_id]
        time.sleep(0.1)
    if pending:
        raise ClusterError(f"brokers {sorted(pending)} were not unfenced within {timeout_s:.0f} s")


def _unfenced_since(events_file: Path, start: int) -> bool:
    if not events_file.exists():
        return False
    with events_file.open("rb") as f:
        if f.seek(0, 2) < start:
            start = 0  # the log was replaced: read all of it
        f.seek(start)
        return b'"state": "unfenced"' in f.read()


def cluster_up(args: argparse.Namespace) -> int:
    root = Path(args.dir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    previous = _load_cluster(root) if (root / "cluster.json").exists() else None
    if previous is not None:
        running = [pid for n in _nodes(previous) if (pid := node_pid(n)) is not None]
        if running:
            pids = ", ".join(str(p) for p in running)
            raise ClusterError(f"a cluster is already running in {root} (pids {pids}); stop it with `cluster down`")
    # A directory started before keeps its kind of quorum (one without the key is static: older
    # pykraft made only those); a new one is dynamic unless --static-voters.
    static = bool(getattr(args, "static_voters", False))
    if previous is not None:
        if previous.get("quorum") == "dynamic" and static:
            raise ClusterError(f"the cluster in {root} has a dynamic quorum; --static-voters cannot change it")
        static = previous.get("quorum") != "dynamic"
    id_file = root / "cluster-id"
    if id_file.exists():
        cluster_id = id_file.read_text().strip()
    else:
        cluster_id = random_uuid()
        id_file.write_text(cluster_id + "\n")
    base_port = getattr(args, "base_port", None) or DEFAULT_CONTROLLER_PORT
    brokers = getattr(args, "brokers", 3)
    combined = getattr(args, "combined", 0) or 0

    def plan(directory_ids: Mapping[int, str] | None) -> list[NodePlan]:
        if combined:
            return plan_combined(root, combined, base_port, directory_ids=directory_ids)
        return plan_cluster(root, args.controllers, base_port, brokers, directory_ids=directory_ids)

    plans = plan(None)
    directory_ids = None if static else _voter_directory_ids(plans)
    plans = plans if directory_ids is None else plan(directory_ids)
    nodes = []
    events_before = events_ends(plans)
    for p in plans:
        proc = start_node(p, cluster_id)
        node = {
            "id": p.node_id,
            "roles": p.properties["process.roles"].split(","),
            "pid": proc.pid,
            "listeners": [p.properties["listeners"]],
            "log_dirs": [p.properties["log.dirs"]],
            "metadata_log_dir": p.properties["metadata.log.dir"],
            "config": str(p.config_path),
            "log_file": str(p.log_file),
            "events_file": str(p.events_file),
            "rest": p.properties.get("rest.listener"),
        }
        if directory_ids is not None and p.node_id in directory_ids:
            node["directory_id"] = directory_ids[p.node_id]  # KIP-853: remove-controller's --controller-directory-id
        nodes.append(node)
    data: dict[str, object] = {"cluster_id": cluster_id, "quorum": "static" if static else "dynamic", "nodes": nodes}
    _save_cluster(root, data)
    addresses = [("127.0.0.1", base_port + p.node_id) for p in plans if "controller" in p.properties["process.roles"]]
    try:
        leader, epoch = wait_for_leader(addresses, cluster_id, timeout_s=30)
        wait_for_unfenced([p for p in plans if p.role == "broker"], timeout_s=60, since=events_before)
    except ClusterError:
        for n in nodes:
            print(f"  node {n['id']}: see {n['log_file']}", file=sys.stderr)
        raise
    print(f"pykraft cluster {cluster_id} is up in {root}")
    for n in nodes:
        listeners = ", ".join(str(x) for x in n["listeners"])  # type: ignore[attr-defined]
        roles = "+".join(n["roles"])  # type: ignore[arg-type]
        directory = f"  directory.id {n['directory_id']}" if "directory_id" in n else ""
        print(f"  {roles} {n['id']}: {listeners}  rest {n['rest']}  pid {n['pid']}{directory}")
    print(f"  leader: node {leader} in epoch {epoch}")
    if static:
        print("  quorum: static voters (controller.quorum.voters, kraft.version 0)")
    else:
        print("  quorum: dynamic (kraft.version 1): pykraft quorum add-controller / remove-controller change it")
    print(f"stop it with: pykraft cluster down --dir {args.dir}")
    return 0


def _voter_directory_ids(plans: list[NodePlan]) -> dict[int, str]:
    """Each voter's metadata directory.id: the one its meta.properties holds (formatted before),
    else a new one, as `storage format --initial-controllers` gets from its caller."""
    ids = {}
    for p in plans:
        if "controller" in p.properties["process.roles"].split(","):
            meta = read_meta_properties(p.properties["metadata.log.dir"])
            ids[p.node_id] = meta.directory_id if meta is not None and meta.directory_id else random_uuid()
    return ids


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def stop_nodes(nodes: list[dict[str, object]], timeout_s: float = 10.0) -> list[dict[str, object]]:
    """SIGTERM every running node of `nodes` at once, wait up to `timeout_s`, SIGKILL what is left.

    Returns the nodes that had to be killed.
    """
    live = [(n, pid) for n in nodes if (pid := node_pid(n)) is not None]
    for _n, pid in live:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(_alive(pid, str(n["config"])) for n, pid in live):
        time.sleep(0.05)
    killed = []
    for n, pid in live:
        if _alive(pid, str(n["config"])):
            _signal(pid, signal.SIGKILL)
            killed.append(n)
    return killed


def _controlled_shutdown_s(node: dict[str, object]) -> float:
    """How long a broker may take to stop on SIGTERM: its controlled shutdown is bounded by twice
    broker.session.timeout.ms (broker/node.py); a little more for the process to exit."""
    try:
        session_ms = load_config(str(node["config"]), warn_unknown=False).broker_session_timeout_ms
    except ConfigError:
        session_ms = 9000
    return 2 * session_ms / 1000 + 5.0


def _save_cluster(root: Path, data: dict[str, object]) -> None:
    tmp = root / "cluster.json.tmp"
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, root / "cluster.json")


def _select(data: dict[str, object], node_id: int) -> dict[str, object]:
    for n in _nodes(data):
        if int(str(n["id"])) == node_id:
            return n
    ids = ", ".join(str(n["id"]) for n in _nodes(data))
    raise ClusterError(f"no node {node_id} in this cluster (nodes: {ids})")


def _role(node: dict[str, object]) -> str:
    roles = node["roles"]
    assert isinstance(roles, list)
    return str(roles[0])


def stop_one(root: Path, data: dict[str, object], node: dict[str, object]) -> str:
    """Stop one node (a broker with its controlled shutdown); a line saying what happened."""
    pid = node_pid(node)
    label = f"{_role(node)} {node['id']}"
    if pid is None:
        return f"{label} is not running"
    node["pid"] = pid
    timeout = _controlled_shutdown_s(node) if _role(node) == "broker" else 10.0
    killed = stop_nodes([node], timeout_s=timeout)
    _save_cluster(root, data)
    if killed:
        return f"{label} (pid {pid}) did not stop within {timeout:.0f} s of SIGTERM and was killed"
    return f"stopped {label} (pid {pid})"


def start_one(root: Path, data: dict[str, object], node: dict[str, object]) -> str:
    """Start one stopped node again from its existing config and data; records its new pid."""
    label = f"{_role(node)} {node['id']}"
    pid = node_pid(node)
    if pid is not None:
        raise ClusterError(f"{label} is already running (pid {pid})")
    proc = launch(_role(node), Path(str(node["config"])), Path(str(node["events_file"])), Path(str(node["log_file"])))
    node["pid"] = proc.pid
    _save_cluster(root, data)
    time.sleep(0.5)
    if proc.poll() is not None:
        raise ClusterError(f"{label} exited at start with status {proc.returncode}; see {node['log_file']}")
    return f"started {label} (pid {proc.pid})"


def cluster_down(args: argparse.Namespace) -> int:
    """Stop the brokers first (each runs its controlled shutdown while the quorum is up), then the controllers."""
    root = Path(args.dir).resolve()
    data = _load_cluster(root)
    nodes = _nodes(data)
    brokers = [n for n in nodes if _role(n) == "broker"]
    controllers = [n for n in nodes if _role(n) != "broker"]
    stopped = killed = 0
    not_running = []
    for group, timeout in ((brokers, max((_controlled_shutdown_s(n) for n in brokers), default=0.0)),
                           (controllers, 10.0)):  # fmt: skip
        live = []
        for n in group:
            pid = node_pid(n)
            if pid is None:
                not_running.append(n)
            else:
                n["pid"] = pid
                live.append(n)
        dead = stop_nodes(live, timeout_s=timeout)
        for n in dead:
            print(f"  {_role(n)} {n['id']} (pid {n['pid']}) did not stop within {timeout:.0f} s and was killed")
        killed += len(dead)
        stopped += len(live) - len(dead)
    _save_cluster(root, data)
    line = f"stopped {stopped} node{'s' if stopped != 1 else ''} of cluster {data.get('cluster_id')} in {root}"
    extra = []
    if killed:
        extra.append(f"{killed} killed")
    if not_running:
        extra.append(f"{len(not_running)} not running: {', '.join(str(n['id']) for n in not_running)}")
    print(line + (f" ({'; '.join(extra)})" if extra else ""))
    return 0


def cluster_node(args: argparse.Namespace) -> int:
    """`cluster start|stop|restart --dir D --node N`."""
    root = Path(args.dir).resolve()
    data = _load_cluster(root)
    node = _select(data, args.node)
    action = args.cluster_command
    if action in ("stop", "restart"):
        print(stop_one(root, data, node))
    if action in ("start", "restart"):
        print(start_one(root, data, node))
    return 0


def cluster_status(args: argparse.Namespace) -> int:
    from quorum.node.quorum_cli import query_leader

    root = Path(args.dir).resolve()
    data = _load_cluster(root)
    nodes = _nodes(data)
    addresses = []
    for n in nodes:
        pid = node_pid(n)
        n["alive"] = pid is not None
        if pid is not None:
            n["pid"] = pid
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
