"""`pykraft audit --master spark://...` on a real Spark standalone cluster (a master and a worker
started from the pyspark installation on loopback) gives the same findings as `local[*]`.

Bounded: every wait has a deadline; the master and worker (and the executors the worker
forks, in the same process group) are stopped by pid at the end, SIGTERM then SIGKILL.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from quorum.node.free_ports import free_ports

pyspark = pytest.importorskip("pyspark", reason="the Spark audit needs pyspark, pyarrow and pandas")
pytest.importorskip("pyarrow")
from audit_synthetic import faulty_cluster  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
SPARK_HOME = Path(pyspark.__file__).parent





def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["SPARK_HOME"] = str(SPARK_HOME)
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.pop("SPARK_MASTER_HOST", None)
    return env


def _wait_for(what: str, log: Path, text: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and text in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.25)
    tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
    raise AssertionError(f"{what}: {text!r} not seen within {timeout} s (exit {proc.poll()}):\n{tail}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group we started (the JVM and any executor it forked), then SIGKILL."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    try:  # executors left in the group after the worker exited
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A Spark standalone master and one worker (2 cores, 1 GiB) on loopback: (master URL, worker dir)."""
    root = tmp_path_factory.mktemp("spark-standalone")
    master_port, master_ui, worker_port, worker_ui = free_ports(4)
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    env = _env()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with (root / "master.log").open("wb") as out:
            master = subprocess.Popen(  # noqa: S603 - pyspark's own launcher
                [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                 "--port", str(master_port), "--webui-port", str(master_ui)],
                env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        procs.append(master)
        _wait_for("master", root / "master.log", "I have been elected leader", master, 90)
        url = f"spark://127.0.0.1:{master_port}"
        work = root / "work"
        with (root / "worker.log").open("wb") as out:
            worker = subprocess.Popen(  # noqa: S603 - pyspark's own launcher
                [spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                 "--port", str(worker_port), "--webui-port", str(worker_ui), "--cores", "2", "--memory", "1g",
                 "--work-dir", str(work)],
                env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        procs.append(worker)
        _wait_for("worker", root / "worker.log", "Successfully registered with master", worker, 90)
        yield url, work
    finally:
        for p in reversed(procs):
            _stop(p)


def _audit(logs: list[Path], out: Path, master: str, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "api.cli", "audit", "--out", str(out), "--master", master, "--no-report", *extra]
    for d in logs:
        cmd += ["--log-dir", str(d)]
    return subprocess.run(  # noqa: S603 - our own CLI
        cmd, env=_env(), cwd=REPO, capture_output=True, text=True, timeout=300, check=False
    )


def _comparable(path: Path) -> list[dict[str, object]]:
    return json.loads(path.read_text())["findings"]


def test_audit_on_a_standalone_cluster_matches_local(standalone: tuple[str, Path], tmp_path: Path) -> None:
    url, work = standalone
    cluster = faulty_cluster(tmp_path / "logs")
    logs = [cluster.dirs[n] for n in sorted(cluster.dirs)]
    local = _audit(logs, tmp_path / "local", "local[*]")
    assert local.returncode == 1, local.stdout + local.stderr  # the faulty logs have violations
    remote = _audit(
        logs, tmp_path / "standalone", url, "--conf", "spark.executor.memory=512m", "--conf", "spark.cores.max=2"
    )
    assert remote.returncode == 1, remote.stdout + remote.stderr
    expected = _comparable(tmp_path / "local" / "findings.json")
    assert expected and any(f["severity"] == "violation" for f in expected)
    assert _comparable(tmp_path / "standalone" / "findings.json") == expected
    assert remote.stdout.splitlines()[0] == local.stdout.splitlines()[0]
    # The work ran on the worker: it launched an executor for the application.
    apps = [p for p in work.iterdir() if p.name.startswith("app-")]
    assert apps, list(work.iterdir())
    assert any((d / "stderr").exists() for app in apps for d in app.iterdir())
