"""`pykraft cluster up` starts a dynamic quorum (KIP-853), as Kafka 3.9+'s quick starts format
one: its controller is formatted with --initial-controllers (kraft.version 1, the directory id
in meta.properties, cluster.json and `cluster up`'s output), so `quorum add-controller` and
`remove-controller` work on it. Real processes on loopback: `cluster up` and `cluster down`
through the console script, the quorum tools as `pykraft` runs them (api.cli.main), one
controller that joins (formatted --no-initial-controllers, `controller.quorum.bootstrap.servers`)
added right after it starts (the leader waits, within AddRaftVoter's TimeoutMs, for it to
catch up) and removed again."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from quorum_cluster import run_pykraft, wait_until

from api import cli
from quorum.node.cluster import free_cluster_base, launch, node_pid
from quorum.node.config import format_properties
from quorum.node.free_ports import free_port
from quorum.node.meta_properties import read_meta_properties

pytestmark = pytest.mark.integration

JOINER = 10  # the controller the test adds: not one of cluster up's ids (1 controller, broker 2)


def _cli(*args: str) -> str:
    """`pykraft ARGS` (the console script's code, in this process): its stdout; it must succeed."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(args))
    assert code == 0, (args, out.getvalue(), err.getvalue())
    return out.getvalue()


@pytest.fixture
def local(tmp_path: Path) -> Iterator[tuple[Path, list[subprocess.Popen[bytes]]]]:
    """The cluster's directory and the processes the test starts itself."""
    root = tmp_path / "local"
    procs: list[subprocess.Popen[bytes]] = []
    yield root, procs
    # Whatever `cluster down` did not stop, and the test's own processes: killed by pid.
    if (root / "cluster.json").exists():
        for n in json.loads((root / "cluster.json").read_text())["nodes"]:
            pid = node_pid(n)
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def _replication(bootstrap: str) -> dict[int, dict[str, object]]:
    rows = json.loads(_cli("quorum", "describe", "--replication", "--json", "--bootstrap-controller", bootstrap))
    return {int(r["NodeId"]): r for r in rows}


def test_cluster_up_formats_a_dynamic_quorum_that_grows_and_shrinks(
    local: tuple[Path, list[subprocess.Popen[bytes]]],
) -> None:
    root, procs = local
    base = free_cluster_base(1, 1)
    up = run_pykraft(
        "cluster", "up", "--dir", str(root), "--controllers", "1", "--brokers", "1", "--base-port", str(base)
    )
    assert up.returncode == 0, up.stdout + up.stderr
    data = json.loads((root / "cluster.json").read_text())
    assert data["quorum"] == "dynamic"
    controller = next(n for n in data["nodes"] if n["roles"] == ["controller"])
    meta = read_meta_properties(controller["metadata_log_dir"])
    assert meta is not None and meta.directory_id == controller["directory_id"]
    assert re.search(rf"controller 1: .*\bdirectory\.id {re.escape(meta.directory_id)}$", up.stdout, re.M), up.stdout
    config = Path(controller["config"]).read_text()
    assert "controller.quorum.bootstrap.servers" in config and "controller.quorum.voters" not in config

    bootstrap = f"127.0.0.1:{base + 1}"
    assert "FinalizedVersionLevel: 1" in _cli("features", "describe", "--bootstrap-controller", bootstrap)
    rows = _replication(bootstrap)
    assert rows[1]["Status"] == "Leader" and rows[1]["DirectoryId"] == meta.directory_id, rows
    broker = next(n for n in data["nodes"] if n["roles"] == ["broker"])
    broker_meta = read_meta_properties(broker["metadata_log_dir"])
    assert broker_meta is not None and rows[2]["Status"] == "Observer", rows
    assert rows[2]["DirectoryId"] == broker_meta.directory_id, rows  # as Kafka's brokers fetch

    # A controller that joins: formatted --no-initial-controllers, it finds the quorum through
    # controller.quorum.bootstrap.servers; added as soon as it runs, then removed.
    joiner = root / f"controller-{JOINER}"
    joiner.mkdir()
    props = {
        "process.roles": "controller",
        "node.id": str(JOINER),
        "controller.quorum.bootstrap.servers": bootstrap,
        "listeners": f"CONTROLLER://127.0.0.1:{free_port()}",
        "controller.listener.names": "CONTROLLER",
        "log.dirs": str(joiner / "data"),
    }
    config_path = joiner / "server.properties"
    config_path.write_text(format_properties(props, header="pykraft controller (joins)"))
    _cli(
        "storage",
        "format",
        "--config",
        str(config_path),
        "--cluster-id",
        data["cluster_id"],
        "--no-initial-controllers",
    )
    joiner_meta = read_meta_properties(joiner / "data")
    assert joiner_meta is not None and joiner_meta.directory_id is not None
    proc = launch("controller", config_path, joiner / "events.jsonl", joiner / "node.log")
    procs.append(proc)

    out = _cli("quorum", "add-controller", "--config", str(config_path), "--bootstrap-controller", bootstrap)
    assert f"Added controller {JOINER} with directory id {joiner_meta.directory_id}" in out, out
    rows = wait_until(
        f"{JOINER} a voter",
        lambda: (r := _replication(bootstrap)).get(JOINER, {}).get("Status") == "Follower" and r,
        30,
    )
    assert rows[JOINER]["DirectoryId"] == joiner_meta.directory_id, rows

    out = _cli(
        "quorum",
        "remove-controller",
        "--controller-id",
        str(JOINER),
        "--controller-directory-id",
        joiner_meta.directory_id,
        "--bootstrap-controller",
        bootstrap,
    )
    assert f"Removed KRaft controller {JOINER}" in out, out
    rows = wait_until(
        f"{JOINER} an observer again",
        lambda: (r := _replication(bootstrap)).get(JOINER, {}).get("Status") == "Observer" and r,
        30,
    )
    assert [i for i, r in rows.items() if r["Status"] in ("Leader", "Follower")] == [1], rows

    os.kill(proc.pid, signal.SIGTERM)
    proc.wait(30)
    down = run_pykraft("cluster", "down", "--dir", str(root), timeout=120)
    assert down.returncode == 0 and "stopped 2 nodes" in down.stdout, down.stdout + down.stderr


def test_cluster_up_combined_is_a_dynamic_quorum_too(local: tuple[Path, list[subprocess.Popen[bytes]]]) -> None:
    """Kafka's quick start: one node that is broker and controller, formatted as a dynamic quorum."""
    root, _ = local
    base = free_cluster_base(1, combined=True)
    up = run_pykraft("cluster", "up", "--dir", str(root), "--combined", "1", "--base-port", str(base))
    assert up.returncode == 0, up.stdout + up.stderr
    node = json.loads((root / "cluster.json").read_text())["nodes"][0]
    bootstrap = f"127.0.0.1:{base + 1}"
    assert "FinalizedVersionLevel: 1" in _cli("features", "describe", "--bootstrap-controller", bootstrap)
    rows = _replication(bootstrap)
    assert rows[1]["Status"] == "Leader" and rows[1]["DirectoryId"] == node["directory_id"], rows
    down = run_pykraft("cluster", "down", "--dir", str(root), timeout=120)
    assert down.returncode == 0 and "stopped 1 node" in down.stdout, down.stdout + down.stderr
