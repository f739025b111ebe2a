"""The compiled build's guards (tools/mypyc_build.py, tools/pure_python.py): a build whose
sources changed is stale, and the pure pass imports every module from its source."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tools import mypyc_build

ROOT = Path(__file__).resolve().parents[2]


def test_a_build_is_current_until_one_of_its_sources_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "mypyc_build.py").write_text("# the tool\n")
    (tmp_path / "broker").mkdir()
    source = tmp_path / "broker" / "hot.py"
    source.write_text("x = 1\n")
    monkeypatch.setattr(mypyc_build, "ROOT", tmp_path)
    monkeypatch.setattr(mypyc_build, "STAMP", tmp_path / "build" / "mypyc.stamp")
    assert mypyc_build.state() == "pure"
    (tmp_path / "broker" / f"hot{mypyc_build.SUFFIX}").write_bytes(b"\x7fELF")
    assert mypyc_build.state() == "stale"  # built, but no stamp says from what
    (tmp_path / "build").mkdir()
    modules = ("broker/hot.py",)
    stamp = {"set": "test", "modules": list(modules), "digest": mypyc_build.digest(modules)}
    mypyc_build.STAMP.write_text(json.dumps(stamp))
    assert mypyc_build.state() == "current"
    source.write_text("x = 2\n")
    assert mypyc_build.state() == "stale"
    source.write_text("x = 1\n")
    assert mypyc_build.state() == "current"
    (tmp_path / "tools" / "mypyc_build.py").write_text("# the tool, another module list\n")
    assert mypyc_build.state() == "stale"


def _origin(module: str, pure: bool) -> str:
    code = (
        "import sys\n"
        + ("from tools import pure_python; pure_python.install()\n" if pure else "")
        + f"import {module}; print(sys.modules[{module!r}].__file__)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return done.stdout.strip()


@pytest.mark.parametrize("module", ["broker.log.partition_log", "broker.replica.manager", "quorum.wire.primitives"])
def test_the_pure_pass_imports_the_source_where_a_build_put_an_extension_module(module: str) -> None:
    assert _origin(module, pure=True).endswith(".py")
    compiled = (
        mypyc_build.state() == "current"
        and f"{module.replace('.', '/')}.py" in json.loads(mypyc_build.STAMP.read_text())["modules"]
    )
    assert _origin(module, pure=False).endswith(mypyc_build.SUFFIX if compiled else ".py")
