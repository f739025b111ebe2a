"""The descriptor limit: the soft RLIMIT_NOFILE raised to the hard one (in a child process,
for real), and the budget rule that warns when hosted segments need more than the limit."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

from broker.fd_limit import CONNECTION_RESERVE, FDS_PER_SEGMENT, DescriptorBudget, descriptors_needed

REPO = Path(__file__).resolve().parents[3]


def test_the_soft_limit_is_raised_to_the_hard_limit() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    script = (
        "import json, resource\n"
        "from broker.fd_limit import raise_soft_limit\n"
        "r = raise_soft_limit()\n"
        "print(json.dumps([r.before, r.soft, r.hard, resource.getrlimit(resource.RLIMIT_NOFILE)[0]]))\n"
    )

    def low_soft_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))

    out = subprocess.run(  # noqa: S603 - our own interpreter
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        preexec_fn=low_soft_limit,  # noqa: PLW1509 - a setrlimit only, before exec
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    before, soft, reported_hard, now = json.loads(out.stdout)
    expected = hard if hard != resource.RLIM_INFINITY else int(Path("/proc/sys/fs/nr_open").read_text())
    assert (before, soft, reported_hard, now) == (256, expected, hard, expected)


def test_descriptors_needed() -> None:
    assert descriptors_needed(0) == CONNECTION_RESERVE
    assert descriptors_needed(10_000) == 10_000 * FDS_PER_SEGMENT + CONNECTION_RESERVE


def test_the_budget_warns_once_per_crossing() -> None:
    budget = DescriptorBudget(4, limit=20_000)
    fits = (20_000 - CONNECTION_RESERVE) // FDS_PER_SEGMENT
    assert budget.check(fits) is None
    warning = budget.check(fits + 1)
    assert warning is not None
    assert "broker 4: the open file descriptor limit (RLIMIT_NOFILE) 20000 is too low" in warning
    assert f"the {fits + 1} log segments hosted here: they need about 20001" in warning
    assert budget.check(fits + 500) is None  # said once
    assert budget.check(10) is None
    assert budget.check(fits + 2) is not None  # over again after being under
    assert DescriptorBudget(4, limit=resource.RLIM_INFINITY).check(10**9) is None
