"""The pykraft command line: in-process through main([...]) and through the installed console script."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from api import cli
from quorum.node.meta_properties import META_PROPERTIES, decode_uuid, read_meta_properties

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"
OTHER = "fMCL8kv1SWm87L_Md-I2hg"
REPO = Path(__file__).resolve().parents[3]


def write_config(tmp_path: Path, *, node_id: int = 1, extra: dict[str, str] | None = None) -> Path:
    lines = [
        "process.roles=controller",
        f"node.id={node_id}",
        f"controller.quorum.voters={node_id}@127.0.0.1:19091",
        "listeners=CONTROLLER://127.0.0.1:19091",
        f"log.dirs={tmp_path / 'logs'}",
        f"metadata.log.dir={tmp_path / 'meta'}",
        *(f"{k}={v}" for k, v in (extra or {}).items()),
    ]
    path = tmp_path / f"node-{node_id}.properties"
    path.write_text("\n".join(lines) + "\n")
    return path


# ----------------------------------------------------------------------------- main([...])


def test_random_uuid(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["storage", "random-uuid"]) == 0
    out = capsys.readouterr().out.strip()
    assert len(decode_uuid(out)) == 16


def test_storage_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path)
    assert cli.main(["storage", "format", "--config", str(config), "--cluster-id", CLUSTER]) == 0
    out = capsys.readouterr().out
    assert f"Formatting {tmp_path / 'logs'} with cluster.id {CLUSTER}" in out
    assert f"Formatting {tmp_path / 'meta'} with cluster.id {CLUSTER}" in out
    for d in ("logs", "meta"):
        meta = read_meta_properties(tmp_path / d)
        assert meta is not None and meta.cluster_id == CLUSTER and meta.node_id == 1


def test_storage_format_short_options(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    assert cli.main(["storage", "format", "-c", str(config), "-t", CLUSTER]) == 0
    assert (tmp_path / "logs" / META_PROPERTIES).exists()


def test_storage_format_twice(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path)
    assert cli.main(["storage", "format", "--config", str(config), "--cluster-id", CLUSTER]) == 0
    capsys.readouterr()
    assert cli.main(["storage", "format", "--config", str(config), "--cluster-id", CLUSTER]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: Log directory {tmp_path / 'logs'} is already formatted.")
    assert "--ignore-formatted" in err
    assert cli.main(["storage", "format", "--config", str(config), "--cluster-id", CLUSTER, "--ignore-formatted"]) == 0
    assert "All of the log directories are already formatted." in capsys.readouterr().out


def test_storage_format_bad_cluster_id(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path)
    assert cli.main(["storage", "format", "--config", str(config), "--cluster-id", "nope"]) == 1
    assert "error: Cluster ID string 'nope' does not appear to be a valid UUID" in capsys.readouterr().err


def test_storage_format_cluster_id_differs_from_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, extra={"cluster.id": OTHER})
    assert cli.main(["storage", "format", "--config", str(config), "--cluster-id", CLUSTER]) == 1
    assert f"error: --cluster-id {CLUSTER} differs from cluster.id={OTHER}" in capsys.readouterr().err
    assert not (tmp_path / "logs").exists()


def test_config_error_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.properties"
    bad.write_text("process.roles=controller\nnode.id=1\n")
    assert cli.main(["storage", "format", "--config", str(bad), "--cluster-id", CLUSTER]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "controller.quorum.voters is required" in err
    assert cli.main(["storage", "format", "--config", str(tmp_path / "missing"), "--cluster-id", CLUSTER]) == 1
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["storage"],
        ["storage", "format", "--cluster-id", CLUSTER],
        ["cluster", "up"],
        ["quorum", "describe", "--bootstrap-controller", "127.0.0.1:19091"],
        ["quorum", "describe", "--status", "--replication", "--bootstrap-controller", "127.0.0.1:19091"],
        ["quorum", "describe", "--status", "--bootstrap-controller", "nohostport"],
        ["cluster", "up", "--dir", "d", "--controllers", "-1"],
    ],
)
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(argv) == 2
    assert "usage: pykraft" in capsys.readouterr().err


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in ("storage", "controller", "cluster", "quorum"):
        assert command in out


def _fake_module(name: str, calls: list[tuple[str, Any]], **results: int | None) -> types.ModuleType:
    """A stand-in module whose functions record their argument and return the given exit code."""
    module = types.ModuleType(name)
    for function_name, result in results.items():

        def record(arg: Any, _name: str = function_name, _result: int | None = result) -> int | None:
            calls.append((_name, arg))
            return _result

        setattr(module, function_name, record)
    return module


def test_node_commands_call_lazily_imported_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, Any]] = []
    fake_cluster = _fake_module("quorum.node.cluster", calls, cluster_up=0, cluster_down=3, cluster_status=None)
    fake_controller = _fake_module("quorum.node.controller", calls, main=0)
    fake_quorum = _fake_module("quorum.node.quorum_cli", calls, describe=0)
    monkeypatch.setitem(sys.modules, "quorum.node.cluster", fake_cluster)
    monkeypatch.setitem(sys.modules, "quorum.node.controller", fake_controller)
    monkeypatch.setitem(sys.modules, "quorum.node.quorum_cli", fake_quorum)

    assert (
        cli.main(["cluster", "up", "--dir", "D", "--controllers", "3", "--brokers", "0", "--base-port", "20000"]) == 0
    )
    assert cli.main(["cluster", "down", "--dir", "D"]) == 3
    assert cli.main(["cluster", "status", "--dir", "D", "--json"]) == 0
    assert cli.main(["controller", "--config", "c.properties"]) == 0
    assert cli.main(["quorum", "describe", "--replication", "--bootstrap-controller", "127.0.0.1:19091", "--json"]) == 0

    kinds = [k for k, _ in calls]
    assert kinds == ["cluster_up", "cluster_down", "cluster_status", "main", "describe"]
    up = calls[0][1]
    assert (up.dir, up.controllers, up.brokers, up.base_port) == ("D", 3, 0, 20000)
    assert calls[2][1].json is True
    assert calls[3][1].config == "c.properties"
    describe = calls[4][1]
    assert describe.replication and not describe.status
    assert describe.bootstrap_controller == "127.0.0.1:19091"


def test_unimplemented_command_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Simulate a module that does not exist yet.
    monkeypatch.setitem(sys.modules, "quorum.node.quorum_cli", None)
    assert cli.main(["quorum", "describe", "--status", "--bootstrap-controller", "127.0.0.1:19091"]) == 1
    assert "error: this command is not available yet" in capsys.readouterr().err


# ----------------------------------------------------------------------------- the console script


def pykraft_script() -> Path:
    script = Path(sys.executable).parent / "pykraft"
    if not script.exists():
        pytest.skip("the pykraft console script is not installed in this environment (pip install -e .)")
    return script


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(pykraft_script()), *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def test_console_script_random_uuid(tmp_path: Path) -> None:
    done = run("storage", "random-uuid", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert len(decode_uuid(done.stdout.strip())) == 16


def test_console_script_format_and_mismatch(tmp_path: Path) -> None:
    cluster_id = run("storage", "random-uuid", cwd=tmp_path).stdout.strip()
    config = write_config(tmp_path, extra={"cluster.id": cluster_id})
    done = run("storage", "format", "--config", str(config), "--cluster-id", cluster_id, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    meta = read_meta_properties(tmp_path / "meta")
    assert meta is not None and meta.cluster_id == cluster_id

    done = run("storage", "format", "--config", str(config), "--cluster-id", CLUSTER, cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.startswith("error: ")
    assert "differs from cluster.id" in done.stderr


def test_console_script_formats_deploy_local_config(tmp_path: Path) -> None:
    # The shipped configs use paths relative to the working directory.
    config = REPO / "deploy" / "local" / "controller-1.properties"
    done = run("storage", "format", "--config", str(config), "--cluster-id", CLUSTER, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "data" / "local" / "controller-1" / "metadata" / META_PROPERTIES).exists()
    assert (tmp_path / "data" / "local" / "controller-1" / "logs" / META_PROPERTIES).exists()


def test_console_script_version_and_usage(tmp_path: Path) -> None:
    done = run("--version", cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("pykraft ")
    done = run("no-such-command", cwd=tmp_path)
    assert done.returncode == 2 and "usage: pykraft" in done.stderr
