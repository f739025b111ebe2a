"""The operator's tools on a real local cluster (`pykraft cluster up`, 1 controller + 2 brokers),
used as a new user would: one-node start/stop/restart, `cluster down` order, one-line errors,
Kafka's output shapes (quorum describe, topics describe/delete, log dump) and the unknown-key
warning at start. One cluster for the module; the tests run in file order."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from metadata_cluster import free_base_port, pykraft_script, run_pykraft

from quorum.node.cluster import DEFAULT_CONTROLLER_PORT, DEFAULT_REST_PORT, node_pid

pytestmark = pytest.mark.integration


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


class Local:
    def __init__(self, root: Path, base: int) -> None:
        self.root = root
        self.base = base

    def data(self) -> dict:
        return json.loads((self.root / "cluster.json").read_text())

    def node(self, node_id: int) -> dict:
        return next(n for n in self.data()["nodes"] if n["id"] == node_id)

    def rest(self, node_id: int) -> str:
        return f"http://127.0.0.1:{DEFAULT_REST_PORT + self.base - DEFAULT_CONTROLLER_PORT + node_id}"

    def run(self, *args: str, timeout: float = 90.0) -> subprocess.CompletedProcess[str]:
        return run_pykraft(*args, timeout=timeout)

    def status(self) -> dict[int, bool]:
        r = self.run("cluster", "status", "--dir", str(self.root), "--json")
        return {n["id"]: n["alive"] for n in json.loads(r.stdout)["nodes"]}

    def events(self, node_id: int) -> list[dict]:
        path = Path(self.node(node_id)["events_file"])
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def wait_unfenced_since(self, node_id: int, count: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if sum(1 for e in self.events(node_id) if e.get("state") == "unfenced") > count:
                return
            time.sleep(0.2)
        raise AssertionError(f"broker {node_id} not unfenced again within {timeout} s: {self.events(node_id)[-5:]}")


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Local]:
    root = tmp_path_factory.mktemp("tools") / "local"
    base = free_base_port(1, 2)
    c = Local(root, base)
    # Static voters: the quorum-state dump below is the kraft.version 0 form (data_version 0, currentVoters).
    r = c.run("cluster", "up", "--dir", str(root), "--controllers", "1", "--brokers", "2", "--base-port", str(base),
              "--static-voters")  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    try:
        yield c
    finally:
        # Whatever is still running (also a node started by hand): killed by pid.
        if (root / "cluster.json").exists():
            for n in json.loads((root / "cluster.json").read_text())["nodes"]:
                pid = node_pid(n)
                if pid is not None:
                    os.kill(pid, signal.SIGKILL)


def test_a_second_cluster_up_is_one_line_not_a_traceback(local: Local) -> None:
    r = local.run("cluster", "up", "--dir", str(local.root), "--controllers", "1", "--brokers", "2",
                  "--base-port", str(local.base), "--static-voters")  # fmt: skip
    assert r.returncode == 1
    assert r.stderr.startswith("error: a cluster is already running in ") and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    r = local.run("cluster", "stop", "--dir", str(local.root), "--node", "99")
    assert r.returncode == 1 and r.stderr.strip() == "error: no node 99 in this cluster (nodes: 1, 2, 3)", r.stderr


def test_quorum_describe_status_starts_with_the_cluster_id(local: Local) -> None:
    r = local.run("quorum", "describe", "--status", "--bootstrap-controller", f"127.0.0.1:{local.base + 1}")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"{'ClusterId:':<24}{local.data()['cluster_id']}", lines
    assert lines[1].startswith("LeaderId:") and lines[1].split()[1] == "1", lines
    r = local.run("quorum", "describe", "--status", "--bootstrap-controller", "nohostport")
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_topics_describe_lists_every_non_default_config(local: Local) -> None:
    url = local.rest(2)
    r = local.run("topics", "create", "--rest-url", url, "--topic", "cfg", "--partitions", "2",
                  "--replication-factor", "2", "--config", "retention.ms=60000")  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = local.run("topics", "describe", "--rest-url", url, "--topic", "cfg")
    assert r.returncode == 0, r.stderr
    head = r.stdout.splitlines()[0]
    configs = dict(kv.split("=", 1) for kv in head.split("Configs: ", 1)[1].split(","))
    # The topic override and min.insync.replicas=2 from the brokers' server.properties; nothing at its default.
    assert configs == {"min.insync.replicas": "2", "retention.ms": "60000"}, head


def test_deleting_a_missing_topic_says_what_kafka_topics_says(local: Local) -> None:
    url = local.rest(2)
    r = local.run("topics", "delete", "--rest-url", url, "--topic", "no-such-topic")
    assert r.returncode == 1
    assert r.stderr.strip() == "Error while executing topic command : Topic 'no-such-topic' does not exist as expected"
    r = local.run("topics", "delete", "--rest-url", url, "--topic", "no-such-topic", "--if-exists")
    assert r.returncode == 0 and r.stdout == "" and r.stderr == "", r
    r = local.run("topics", "describe", "--rest-url", url, "--topic", "no-such-topic")
    assert r.returncode == 1 and "Topic 'no-such-topic' does not exist as expected" in r.stderr


def test_rest_url_unreachable_says_how_to_point_elsewhere(local: Local) -> None:
    r = local.run("topics", "list", "--rest-url", "http://127.0.0.1:9")
    assert r.returncode == 1 and "--rest-url or PYKRAFT_REST_URL" in r.stderr and "Traceback" not in r.stderr


def test_log_dump_header_delete_horizon_and_quorum_state(local: Local) -> None:
    data = Path(local.node(1)["metadata_log_dir"]) / "__cluster_metadata-0"
    segment = sorted(data.glob("*.log"))[0]
    r = local.run("log", "dump", str(segment))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"Dumping {segment}" and lines[1] == "Log starting offset: 0"
    batch = next(line for line in lines if line.startswith("baseOffset: "))
    assert " isControl: true deleteHorizonMs: OptionalLong.empty position: 0 " in batch, batch
    r = local.run("log", "dump", str(data / "quorum-state"))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"Dumping {data / 'quorum-state'}"
    pattern = r"Quorum state: .*leaderId: 1 leaderEpoch: \d+ .*currentVoters: \[1\] data_version: 0"
    assert re.fullmatch(pattern, lines[1]), lines
    assert "invalid bytes" not in r.stdout


def test_stop_start_restart_one_broker_keeps_cluster_json_true(local: Local) -> None:
    root = str(local.root)
    before = local.node(3)["pid"]
    r = local.run("cluster", "stop", "--dir", root, "--node", "3")
    assert r.returncode == 0 and r.stdout.strip() == f"stopped broker 3 (pid {before})", r.stdout + r.stderr
    assert not _alive(before)
    # A controlled shutdown (SIGTERM), not a kill: the broker logged it and exited by itself.
    log = Path(local.node(3)["log_file"]).read_text()
    assert "broker 3: controlled shutdown" in log
    assert local.status() == {1: True, 2: True, 3: False}
    r = local.run("cluster", "stop", "--dir", root, "--node", "3")
    assert r.returncode == 0 and r.stdout.strip() == "broker 3 is not running"

    # Start it again with a misspelled key in its config: it warns as Kafka does, and runs.
    config = Path(local.node(3)["config"])
    config.write_text(config.read_text() + "broker.session.timout.ms=3000\n")
    unfenced = sum(1 for e in local.events(3) if e.get("state") == "unfenced")
    r = local.run("cluster", "start", "--dir", root, "--node", "3")
    assert r.returncode == 0, r.stdout + r.stderr
    pid = local.node(3)["pid"]
    assert pid != before and r.stdout.strip() == f"started broker 3 (pid {pid})"
    local.wait_unfenced_since(3, unfenced)
    assert local.status() == {1: True, 2: True, 3: True}
    assert (
        "The configuration 'broker.session.timout.ms' was supplied but isn't a known config. "
        "Did you mean 'broker.session.timeout.ms'?" in Path(local.node(3)["log_file"]).read_text()
    )
    r = local.run("cluster", "start", "--dir", root, "--node", "3")
    assert r.returncode == 1 and r.stderr.strip() == f"error: broker 3 is already running (pid {pid})"

    unfenced = sum(1 for e in local.events(3) if e.get("state") == "unfenced")
    r = local.run("cluster", "restart", "--dir", root, "--node", "3")
    assert r.returncode == 0, r.stdout + r.stderr
    new = local.node(3)["pid"]
    assert r.stdout.splitlines() == [f"stopped broker 3 (pid {pid})", f"started broker 3 (pid {new})"]
    local.wait_unfenced_since(3, unfenced)


def test_a_node_restarted_by_hand_is_seen_and_stopped_by_down(local: Local) -> None:
    """The last test: ends with `cluster down`."""
    node = local.node(2)
    os.kill(int(node["pid"]), signal.SIGTERM)
    deadline = time.monotonic() + 40
    while _alive(int(node["pid"])) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(int(node["pid"]))
    unfenced = sum(1 for e in local.events(2) if e.get("state") == "unfenced")
    with open(node["log_file"], "ab") as log:  # as a user would: the command, from another directory
        by_hand = subprocess.Popen(  # noqa: S603
            [str(pykraft_script()), "broker", "--config", os.path.relpath(node["config"], local.root.parent),
             "--events-file", node["events_file"]],
            cwd=local.root.parent, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        local.wait_unfenced_since(2, unfenced)
        assert local.status() == {1: True, 2: True, 3: True}
        r = local.run("cluster", "down", "--dir", str(local.root), timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        assert r.stdout.strip() == f"stopped 3 nodes of cluster {local.data()['cluster_id']} in {local.root}", r.stdout
        assert by_hand.wait(5) == 0  # it exited by itself (SIGTERM, controlled shutdown), not killed
    finally:
        if by_hand.poll() is None:
            by_hand.kill()
    for n in local.data()["nodes"]:
        assert node_pid(n) is None
    # Brokers first: both logged their controlled shutdown, and it completed (the controller was up).
    for b in (2, 3):
        last = [e.get("state") for e in local.events(b) if e.get("state")][-3:]
        assert "controlled shutdown granted" in last, (b, last)
    assert local.status() == {1: False, 2: False, 3: False}
