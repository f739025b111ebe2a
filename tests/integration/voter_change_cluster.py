"""The process clusters of the KIP-853 tests (test_quorum_dynamic_voters.py,
test_quorum_kraft_upgrade.py): nodes planned by `quorum.node.cluster.plan_cluster`, each
formatted with the real CLI and started as its own `pykraft` process; the quorum's view from
DescribeQuorum; a topic-creating admin client as the load.

A subclass chooses how the controllers find the quorum (`configure`); every process a
cluster started is killed (SIGKILL, by pid) by `close`.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from metadata_cluster import FAST_TIMINGS
from quorum_cluster import describe_one, run_pykraft, wait_until

from api import cli
from quorum.node.cluster import NodePlan, free_cluster_base, launch, plan_cluster
from quorum.node.config import format_properties
from quorum.node.meta_properties import random_uuid, read_meta_properties
from quorum.raft.describe import QuorumDescription


def pykraft_cli(*args: str) -> tuple[int, str, str]:
    """`pykraft ARGS` run in this process (api.cli.main, the console script's code):
    (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(args))
    return code, out.getvalue(), err.getvalue()


def pykraft_ok(*args: str) -> str:
    """`pykraft ARGS` in this process, which must succeed: its stdout."""
    code, out, err = pykraft_cli(*args)
    assert code == 0, (args, out, err)
    return out


class PlannedCluster:
    """Controllers 1..N and brokers after them, on free ports under `root`, with FAST_TIMINGS and
    `extra` in every node's properties; `configure` (a subclass's) edits the plans' properties
    before the config files are written."""

    def __init__(self, root: Path, controllers: int, brokers: int = 0, extra: dict[str, str] | None = None) -> None:
        self.root = root
        self.cluster_id = random_uuid()
        base = free_cluster_base(controllers, brokers)
        self.plans: dict[int, NodePlan] = {p.node_id: p for p in plan_cluster(root, controllers, base, brokers)}
        for plan in self.plans.values():
            plan.properties.update(FAST_TIMINGS)
            plan.properties.update(extra or {})
        self.configure()
        for plan in self.plans.values():
            plan.directory.mkdir(parents=True, exist_ok=True)
            plan.config_path.write_text(format_properties(plan.properties, header=f"pykraft {plan.role}"))
        self.procs: dict[int, subprocess.Popen[bytes]] = {}  # the running node of each id
        self.all_procs: list[subprocess.Popen[bytes]] = []  # every process started, for close()

    def configure(self) -> None:
        """How the nodes find the quorum: edit self.plans' properties."""

    @property
    def controller_ids(self) -> list[int]:
        return sorted(i for i, p in self.plans.items() if p.role == "controller")

    def port(self, node_id: int) -> int:
        return int(self.plans[node_id].properties["listeners"].rsplit(":", 1)[1])

    def bootstrap(self, *node_ids: int) -> str:
        return ",".join(f"127.0.0.1:{self.port(i)}" for i in node_ids)

    def config(self, node_id: int) -> str:
        return str(self.plans[node_id].config_path)

    def data_dir(self, node_id: int) -> Path:
        return Path(self.plans[node_id].properties["metadata.log.dir"])

    def directory_id(self, node_id: int) -> str:
        meta = read_meta_properties(self.data_dir(node_id))
        assert meta is not None and meta.directory_id is not None
        return meta.directory_id

    def format(self, node_id: int, *flags: str, subprocess: bool = False) -> str:
        """`storage format` of the node (its stdout); `subprocess`: by the console script itself
        (once per module: a process start costs seconds here), else in this process."""
        args = ("storage", "format", "--config", self.config(node_id), "--cluster-id", self.cluster_id, *flags)
        if subprocess:
            done = run_pykraft(*args)
            assert done.returncode == 0, done.stderr
            return done.stdout
        return pykraft_ok(*args)

    def start(self, node_id: int) -> None:
        plan = self.plans[node_id]
        proc = launch(plan.role, plan.config_path, plan.events_file, plan.log_file)
        self.procs[node_id] = proc
        self.all_procs.append(proc)

    def kill9(self, node_id: int) -> None:
        proc = self.procs.pop(node_id)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def close(self) -> None:
        for proc in self.all_procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)

    def describe(self, timeout: float = 1.0) -> QuorumDescription | None:
        """The leader's DescribeQuorum, asked of any running controller (followers relay it)."""
        for node_id in sorted(self.procs):
            if self.plans[node_id].role != "controller":
                continue
            answer = describe_one("127.0.0.1", self.port(node_id), timeout)
            if isinstance(answer, QuorumDescription) and answer.leader_id >= 0:
                return answer
        return None

    def voters(self) -> list[int]:
        d = self.describe()
        return [] if d is None else sorted(v.replica_id for v in d.voters)

    def wait_voters(self, expected: list[int], timeout: float = 30.0) -> QuorumDescription:
        def ok() -> QuorumDescription | None:
            d = self.describe()
            return d if d is not None and sorted(v.replica_id for v in d.voters) == expected else None

        found: QuorumDescription = wait_until(f"voters {expected}", ok, timeout)
        return found

    def diagnostics(self) -> str:
        return "\n".join(
            f"--- node {i} log tail\n{p.log_file.read_text()[-3000:]}"
            for i, p in sorted(self.plans.items())
            if p.log_file.exists()
        )


def close_clusters(clusters: Sequence[PlannedCluster], request: pytest.FixtureRequest) -> None:
    """A fixture's teardown: print the clusters' log tails when the test failed, then kill them."""
    rep = getattr(request.node, "rep_call", None)
    for c in clusters:
        if rep is None or rep.failed:
            print(c.diagnostics())
        c.close()


class TopicLoad:
    """An admin client (confluent-kafka) creating topics one after another through a broker;
    it records the names whose creation was acknowledged (and those that already existed
    after a retry: a resend of an acknowledged-or-not creation)."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka.admin import AdminClient

        self.admin: Any = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})
        self.acknowledged: list[str] = []
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        from confluent_kafka.admin import NewTopic

        n = 0
        while not self._stop.is_set():
            name = f"t-{n:05d}"
            n += 1
            future = self.admin.create_topics(
                [NewTopic(name, num_partitions=1, replication_factor=1)], request_timeout=15
            )[name]
            try:
                future.result(timeout=20)
                self.acknowledged.append(name)
            except Exception:  # noqa: BLE001 - a refused or timed-out creation is not acknowledged
                self.failed.append(name)
                time.sleep(0.1)

    def wait_for(self, count: int, timeout: float = 30.0) -> None:
        target = len(self.acknowledged) + count
        wait_until(f"{count} more topic creations", lambda: len(self.acknowledged) >= target, timeout)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def topics(self) -> set[str]:
        return set(self.admin.list_topics(timeout=10).topics)

    def close(self) -> None:
        """Drop the admin client now, not when the cluster is gone (it would log reconnects)."""
        self.admin = None
