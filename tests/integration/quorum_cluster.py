"""A real 3-controller pykraft cluster for the integration tests.

`QuorumCluster` starts each controller as its own process (`python -m api.cli controller`)
through `quorum.node.cluster.plan_cluster` / `start_node`, on free loopback ports, with fast
quorum timeouts and a synthetic write load, and gives the tests what they need to drive it:
kill -9 / SIGTERM / restart a node, DescribeQuorum (to the leader, or to one node), each
node's event log (`events.jsonl`) and, once a node is stopped, its metadata log on disk.

Every process the cluster starts is remembered and killed (SIGKILL) by pid in `close()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quorum.node.cluster import NodePlan, free_cluster_base, plan_cluster, start_node
from quorum.node.quorum_cli import DESCRIBE_QUORUM_VERSION
from quorum.raft.describe import QuorumDescription
from quorum.raft.types import Batch
from quorum.storage.file_log import FileLog
from quorum.storage.record_batch import peek_batch_header
from quorum.wire import codec
from quorum.wire.transport import PeerUnavailable, request

REPO = Path(__file__).resolve().parents[2]
METADATA_DIR = "__cluster_metadata-0"

FAST_TIMEOUTS = {
    "controller.quorum.election.timeout.ms": "300",
    "controller.quorum.fetch.timeout.ms": "600",
}
# Every node gets these flags; only the leader generates (a new leader starts after a failover).
SYNTHETIC_LOAD = [
    "--synthetic-load-size",
    "100",
    "--synthetic-load-rate",
    "500",
    "--synthetic-load-duration",
    "3600",
    "--synthetic-load-warmup",
    "0",
]


class ClusterTimeout(AssertionError):
    """A condition the test waited for did not happen in time (the message says what)."""


def pykraft_script() -> Path:
    """The real `pykraft` console script of this venv."""
    script = Path(sys.executable).with_name("pykraft")
    if not script.exists():
        script = REPO / ".venv" / "bin" / "pykraft"
    return script


def run_pykraft(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - our own console script
        [str(pykraft_script()), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        check=False,
    )


# --------------------------------------------------------------------------- ports


def free_base_port(count: int = 3) -> int:
    """A base port for `plan_cluster(root, count, base)` (controllers only) with every port free."""
    return free_cluster_base(count)


# --------------------------------------------------------------------------- waiting


def wait_until(what: str, predicate: Callable[[], Any], timeout: float, interval: float = 0.05) -> Any:
    """Poll `predicate` until it returns something truthy; return that, or fail saying `what`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise ClusterTimeout(f"timed out after {timeout:.1f} s waiting for {what}")
        time.sleep(interval)


# --------------------------------------------------------------------------- wire helpers


def exchange(host: str, port: int, frame: bytes, timeout: float = 3.0) -> bytes:
    """Send one request frame on a fresh connection; the response frame body (no prefix)."""

    async def run() -> bytes:
        return await request(host, port, frame, connect_timeout_s=timeout, request_timeout_s=timeout)

    return asyncio.run(run())


def describe_one(host: str, port: int, timeout: float = 2.0) -> QuorumDescription | codec.ErrorResult | None:
    """DescribeQuorum to one node: its answer (a description, or the error a non-leader gives), None if unreachable."""
    frame = codec.encode_request(
        codec.DescribeQuorumCall(),
        correlation_id=4242,
        client_id="pykraft-integration",
        cluster_id=None,
        source_id=-1,
        destination_id=-1,
        api_version=DESCRIBE_QUORUM_VERSION,
    )
    try:
        raw = exchange(host, port, frame, timeout)
        correlation, answer = codec.decode_response(
            codec.api_key_of(codec.DescribeQuorumCall()), DESCRIBE_QUORUM_VERSION, raw
        )
    except (PeerUnavailable, codec.WireError, TimeoutError, OSError):
        return None
    assert correlation == 4242
    assert isinstance(answer, QuorumDescription | codec.ErrorResult), answer
    return answer


# --------------------------------------------------------------------------- the log on disk


@dataclass(frozen=True, slots=True)
class StoredBatch:
    batch: Batch
    raw: bytes  # the batch exactly as stored in its segment file

    @property
    def base_offset(self) -> int:
        return self.batch.base_offset

    @property
    def end_offset(self) -> int:
        return self.batch.end_offset


def read_metadata_log(partition_dir: Path) -> list[StoredBatch]:
    """Every batch of a (stopped) node's metadata log, with its raw bytes, via FileLog.open."""
    out: list[StoredBatch] = []
    cache: dict[Path, bytes] = {}
    with FileLog.open(partition_dir) as flog:
        assert flog.recovery is None, f"{partition_dir}: the log needed recovery: {flog.recovery}"
        for batch in flog.batches:
            where = flog.batch_position(batch.base_offset)
            assert where is not None, f"{partition_dir}: no position for batch {batch.base_offset}"
            path, pos = where
            data = cache.get(path)
            if data is None:
                data = cache[path] = path.read_bytes()
            head = peek_batch_header(data, pos)
            assert head is not None, f"{path}: no batch header at byte {pos}"
            base, size, epoch, _ = head
            assert (base, epoch) == (batch.base_offset, batch.epoch)
            out.append(StoredBatch(batch, data[pos : pos + size]))
    return out


def assert_logs_agree_below(logs: dict[int, list[StoredBatch]], offset: int) -> int:
    """Every batch below `offset` is on every node, contiguous from 0 and byte-identical.

    Also checks Raft's log matching on the rest: where two nodes hold a batch at the
    same base offset and epoch, the batches are identical. Returns the number of batches
    compared below `offset`.
    """
    assert offset >= 0
    reference_id = min(logs)
    below: dict[int, list[StoredBatch]] = {}
    for node_id, batches in logs.items():
        prefix = [b for b in batches if b.base_offset < offset]
        expected = 0
        for b in prefix:
            assert b.base_offset == expected, (
                f"node {node_id}: gap in its log at {expected} (next batch {b.base_offset})"
            )
            expected = b.end_offset
        assert expected >= offset, (
            f"node {node_id}: its log ends at {expected} but every record below {offset} is committed "
            f"(log end {batches[-1].end_offset if batches else 0})"
        )
        assert expected == offset, f"node {node_id}: a batch spans the committed offset {offset} (ends at {expected})"
        below[node_id] = prefix
    ref = below[reference_id]
    for node_id, prefix in below.items():
        assert len(prefix) == len(ref), f"nodes {reference_id} and {node_id}: {len(ref)} vs {len(prefix)} batches"
        for a, b in zip(ref, prefix, strict=True):
            assert a.batch == b.batch, f"nodes {reference_id}/{node_id} differ at offset {a.base_offset}"
            assert a.raw == b.raw, f"nodes {reference_id}/{node_id}: batch {a.base_offset} not byte-identical"
    # Log matching beyond the committed prefix.
    index = {nid: {(b.base_offset, b.batch.epoch): b for b in batches} for nid, batches in logs.items()}
    ids = sorted(index)
    for i, x in enumerate(ids):
        for y in ids[i + 1 :]:
            for key in index[x].keys() & index[y].keys():
                assert index[x][key].raw == index[y][key].raw, f"nodes {x}/{y}: same (offset, epoch) {key} differs"
    return len(ref)


# --------------------------------------------------------------------------- the cluster


class Node:
    def __init__(self, plan: NodePlan) -> None:
        self.plan = plan
        self.proc: subprocess.Popen[bytes] | None = None
        self.procs: list[subprocess.Popen[bytes]] = []  # every process started for this node

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    @property
    def node_id(self) -> int:
        return self.plan.node_id

    @property
    def port(self) -> int:
        return int(self.plan.properties["listeners"].rsplit(":", 1)[1])

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    @property
    def partition_dir(self) -> Path:
        return Path(self.plan.properties["metadata.log.dir"]) / METADATA_DIR

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class QuorumCluster:
    def __init__(
        self,
        root: Path,
        *,
        controllers: int = 3,
        properties: dict[str, str] | None = None,
        extra_args: Iterable[str] = SYNTHETIC_LOAD,
        cluster_id: str | None = None,
    ) -> None:
        from quorum.node.meta_properties import random_uuid

        self.root = root
        self.cluster_id = cluster_id or random_uuid()
        self.base_port = free_base_port(controllers)
        self.extra_args = list(extra_args)
        self.nodes: dict[int, Node] = {}
        for plan in plan_cluster(root, controllers, self.base_port):
            plan.properties.update(FAST_TIMEOUTS)
            plan.properties.update(properties or {})
            self.nodes[plan.node_id] = Node(plan)

    # ------------------------------------------------------------ processes

    @property
    def addresses(self) -> list[tuple[str, int]]:
        return [n.address for n in self.nodes.values()]

    def bootstrap(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self.addresses)

    def start(self, node_id: int) -> subprocess.Popen[bytes]:
        node = self.nodes[node_id]
        assert not node.running, f"node {node_id} is already running (pid {node.proc.pid if node.proc else None})"
        node.proc = start_node(node.plan, self.cluster_id, self.extra_args)
        node.procs.append(node.proc)
        return node.proc

    def start_all(self) -> None:
        for node_id in self.nodes:
            self.start(node_id)

    restart = start  # same config, same events file (appended), same data directory

    def kill9(self, node_id: int) -> None:
        node = self.nodes[node_id]
        assert node.proc is not None and node.running, f"node {node_id} is not running"
        os.kill(node.proc.pid, signal.SIGKILL)
        node.proc.wait(10)

    def terminate(self, node_id: int, timeout: float = 10.0) -> int:
        """SIGTERM one node and wait for it to exit; its exit code."""
        node = self.nodes[node_id]
        assert node.proc is not None and node.running, f"node {node_id} is not running"
        os.kill(node.proc.pid, signal.SIGTERM)
        return node.proc.wait(timeout)

    def terminate_all(self, timeout: float = 15.0) -> dict[int, int]:
        """SIGTERM every running node at once; their exit codes."""
        live = [n for n in self.nodes.values() if n.running]
        for n in live:
            assert n.proc is not None
            os.kill(n.proc.pid, signal.SIGTERM)
        codes = {}
        for n in live:
            assert n.proc is not None
            codes[n.node_id] = n.proc.wait(timeout)
        return codes

    def pause(self, node_id: int) -> None:
        """SIGSTOP: the node keeps its sockets but answers nothing (a hung process)."""
        proc = self.nodes[node_id].proc
        assert proc is not None and proc.poll() is None
        os.kill(proc.pid, signal.SIGSTOP)

    def resume(self, node_id: int) -> None:
        proc = self.nodes[node_id].proc
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)

    def wait_started(self, timeout: float = 30.0) -> list[int]:
        """Wait until every running node says it is serving ("started" event); the nodes that exited instead."""

        def settled() -> bool:
            return all(
                not n.running or any(e.get("event") == "started" for e in self.events(i)) for i, n in self.nodes.items()
            )

        wait_until("every node to start serving", settled, timeout)
        return [i for i, n in self.nodes.items() if not n.running]

    def wait_exit(self, node_id: int, timeout: float) -> int:
        proc = self.nodes[node_id].proc
        assert proc is not None
        return proc.wait(timeout)

    def close(self) -> None:
        """Kill -9 (by pid) whatever is still running; never raises."""
        for node in self.nodes.values():
            for proc in node.procs:
                if proc.poll() is None:
                    with contextlib.suppress(OSError):
                        os.kill(proc.pid, signal.SIGKILL)  # also ends a SIGSTOPped process
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(10)

    # ------------------------------------------------------------ quorum

    def describe(self, timeout: float = 1.0, nodes: Iterable[int] | None = None) -> QuorumDescription | None:
        """The leader's DescribeQuorum (asked of each running node in turn), or None."""
        ids = [i for i in (nodes if nodes is not None else self.nodes) if self.nodes[i].running]
        for node_id in ids:
            answer = describe_one(*self.nodes[node_id].address, timeout=timeout)
            if isinstance(answer, QuorumDescription):
                return answer
        return None

    def describe_node(self, node_id: int, timeout: float = 2.0) -> QuorumDescription | codec.ErrorResult | None:
        return describe_one(*self.nodes[node_id].address, timeout=timeout)

    def wait_for_leader(
        self,
        timeout: float = 20.0,
        *,
        not_leader: int | None = None,
        min_epoch: int = 0,
        min_hw: int = 1,
    ) -> QuorumDescription:
        """A leader (other than `not_leader`, in an epoch >= `min_epoch`) that knows its high watermark."""

        def found() -> QuorumDescription | None:
            d = self.describe(timeout=0.5)
            if d is None or d.leader_id == not_leader or d.leader_epoch < min_epoch or d.high_watermark < min_hw:
                return None
            return d

        return wait_until(
            f"a leader (not {not_leader}, epoch >= {min_epoch}, hw >= {min_hw})", found, timeout, interval=0.02
        )

    def wait_for_hw(self, at_least: int, timeout: float = 20.0) -> QuorumDescription:
        def found() -> QuorumDescription | None:
            d = self.describe(timeout=0.5)
            return d if d is not None and d.high_watermark >= at_least else None

        return wait_until(f"high watermark >= {at_least}", found, timeout)

    def wait_all_have(self, offset: int, timeout: float = 20.0, nodes: Iterable[int] | None = None) -> None:
        """Until the leader reports every voter (of `nodes`) with a log end offset >= `offset`."""
        wanted = set(nodes if nodes is not None else self.nodes)

        def found() -> bool:
            d = self.describe(timeout=0.5)
            if d is None:
                return False
            ends = {v.replica_id: v.log_end_offset for v in d.voters}
            return all(ends.get(i, -1) >= offset for i in wanted)

        wait_until(f"voters {sorted(wanted)} to hold every record below {offset}", found, timeout)

    def settle_committed(self, timeout: float = 20.0) -> int:
        """An offset below which every record is committed and on every voter (for log comparison)."""
        d = self.wait_for_leader(timeout)
        self.wait_all_have(d.high_watermark, timeout)
        return d.high_watermark

    # ------------------------------------------------------------ files

    def events(self, node_id: int) -> list[dict[str, Any]]:
        path = self.nodes[node_id].plan.events_file
        if not path.exists():
            return []
        out = []
        for line in path.read_text(encoding="utf-8").splitlines():
            with contextlib.suppress(json.JSONDecodeError):  # a line torn by kill -9
                out.append(json.loads(line))
        return out

    def role_events(self, node_id: int) -> list[dict[str, Any]]:
        return [e for e in self.events(node_id) if e.get("event") == "role"]

    def first_commit(self, node_id: int, epoch: int) -> dict[str, Any] | None:
        return next(
            (e for e in self.events(node_id) if e.get("event") == "first_commit" and e.get("epoch") == epoch), None
        )

    def wait_first_commit(self, node_id: int, epoch: int, timeout: float = 20.0) -> dict[str, Any]:
        return wait_until(
            f"node {node_id}'s first_commit event in epoch {epoch}", lambda: self.first_commit(node_id, epoch), timeout
        )

    def quorum_state_path(self, node_id: int) -> Path:
        return self.nodes[node_id].partition_dir / "quorum-state"

    def quorum_state(self, node_id: int) -> dict[str, Any]:
        """The node's durable election state (Kafka's quorum-state JSON: leaderEpoch, leaderId, votedId)."""
        return json.loads(self.quorum_state_path(node_id).read_text())

    def follower_that_did_not_stand(self, leader: int) -> int:
        """A follower whose quorum-state does not record a vote for itself in the current epoch.

        Restarting a voter that stood (and lost) in the current epoch hits a product bug (it never
        rejoins; see test_quorum_restarted_voter_that_stood_in_the_current_epoch_rejoins), so the
        tests that restart a follower for other reasons pick one that did not stand.
        """
        for node_id in sorted(set(self.nodes) - {leader}, reverse=True):
            state = self.quorum_state(node_id)
            if state.get("votedId") != node_id:
                return node_id
        raise AssertionError(f"every follower voted for itself: {[self.quorum_state(i) for i in self.nodes]}")

    def node_log(self, node_id: int) -> str:
        path = self.nodes[node_id].plan.log_file
        return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""

    def read_log(self, node_id: int) -> list[StoredBatch]:
        node = self.nodes[node_id]
        assert not node.running, f"stop node {node_id} before reading its log"
        return read_metadata_log(node.partition_dir)

    def read_all_logs(self) -> dict[int, list[StoredBatch]]:
        return {node_id: self.read_log(node_id) for node_id in self.nodes}

    def diagnostics(self, tail: int = 4000) -> str:
        """Each node's log tail and events, for failure messages."""
        parts = []
        for node_id, node in self.nodes.items():
            state = "running" if node.running else f"exited {node.proc.returncode if node.proc else None}"
            parts.append(
                f"--- node {node_id} ({state}, pids {node.pids}) node.log tail:\n{self.node_log(node_id)[-tail:]}"
            )
            parts.append(f"--- node {node_id} events:\n" + "\n".join(json.dumps(e) for e in self.events(node_id)[-30:]))
        return "\n".join(parts)
