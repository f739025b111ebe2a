"""Project-wide pytest setup: Hypothesis profiles.

- ``ci`` (the default): derandomized, so every run tries the same examples; no deadline
  (CI machines are slow and noisy); a fixed number of examples.
- ``long``: many more examples, randomized, for hunting bugs locally or in soak runs.

Select one with ``--hypothesis-profile=long`` (Hypothesis' pytest plugin) or the
``HYPOTHESIS_PROFILE`` environment variable. A test that needs a different size uses
``@settings(max_examples=examples(n))`` (`tests.scale`): n under ci, ten times n under long.

Under ``long`` a property test runs up to 50 times as many examples as under ci, so the
per-test time limit (pytest-timeout, pyproject's ``timeout``) grows by as much for tests
that set none of their own: the limit is there to catch a hang, not a long soak.

Compiled checkouts (tools/mypyc_build.py): the suite refuses to start when the built modules
are stale (they would shadow the newer sources, in this process and in every node it
starts). Tests marked ``pure_python`` (mutants planted by replacing a module's function,
spies on an instance's method: neither reaches compiled code) are taken out of a compiled
run and run after it in a second pytest process with PYKRAFT_PURE=1, which imports every
module from its source (`tools/pure_python.py`); a failure there fails the run.
"""

from __future__ import annotations

import os
import subprocess
import sys

if os.environ.get("PYKRAFT_PURE") == "1":
    from tools import pure_python

    pure_python.install()  # before anything below imports a pykraft module

import pytest
from hypothesis import HealthCheck, settings

from tests.scale import CI_MAX_EXAMPLES, LONG_MAX_EXAMPLES, long_profile
from tools import mypyc_build

PURE_PASS = os.environ.get("PYKRAFT_PURE") == "1"

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    max_examples=CI_MAX_EXAMPLES,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "long",
    derandomize=False,
    deadline=None,
    max_examples=LONG_MAX_EXAMPLES,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_configure(config: pytest.Config) -> None:
    build = mypyc_build.state()
    if build == "stale":
        pytest.exit(
            "the compiled modules are older than their sources: run `.venv/bin/python tools/mypyc_build.py build` "
            "(or `... clean` for pure Python)",
            returncode=4,
        )
    config.stash[_COMPILED] = build == "current" and not PURE_PASS


_COMPILED = pytest.StashKey[bool]()
_PURE_IDS = pytest.StashKey[list[str]]()


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected what they deselect
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.stash[_COMPILED]:
        pure = [item for item in items if item.get_closest_marker("pure_python")]
        if pure:
            items[:] = [item for item in items if not item.get_closest_marker("pure_python")]
            config.hook.pytest_deselected(items=pure)
            config.stash[_PURE_IDS] = [item.nodeid for item in pure]
    if not long_profile():
        return
    limit = float(config.getini("timeout") or 0) * (LONG_MAX_EXAMPLES // CI_MAX_EXAMPLES)
    if limit <= 0:
        return
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(limit))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """In a compiled run, run the `pure_python` tests it set aside, from their sources."""
    ids = session.config.stash.get(_PURE_IDS, [])
    if not ids or session.config.option.collectonly or session.shouldstop:
        return
    args = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-m", session.config.option.markexpr or ""]
    profile = session.config.getoption("hypothesis_profile", None)
    if profile:
        args.append(f"--hypothesis-profile={profile}")
    print(f"\n==> {len(ids)} pure_python tests: a second pass from the sources (PYKRAFT_PURE=1)", flush=True)
    rc = subprocess.call([*args, *ids], env={**os.environ, "PYKRAFT_PURE": "1"}, cwd=session.config.rootpath)  # noqa: S603 - our own pytest
    if rc != 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
