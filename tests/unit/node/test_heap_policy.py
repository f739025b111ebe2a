"""quorum/node/heap_policy.py: with the thresholds fixed, memory freed by large buffers is
kept for the next ones (no page faults), where glibc's defaults give it back and fault it in
again; the environment's own MALLOC_* settings win."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

# Eight 4 MiB buffers made and freed 20 times: the minor page faults of those 20 rounds.
_PROGRAM = """
import resource, sys
from quorum.node.heap_policy import tune_allocator
print(tune_allocator())
def round_():
    buffers = [bytearray(4 << 20) for _ in range(8)]
    del buffers
round_()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    round_()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _run(tune: bool, env: dict[str, str] | None = None) -> tuple[bool, int]:
    program = _PROGRAM if tune else _PROGRAM.replace("print(tune_allocator())", "print(False)")
    out = subprocess.run(
        [sys.executable, "-c", program],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return out[0] == "True", int(out[1])


@pytest.mark.skipif(not sys.platform.startswith("linux") or os.confstr("CS_GNU_LIBC_VERSION") is None, reason="glibc")
def test_freed_large_buffers_are_reused_without_page_faults() -> None:
    tuned, tuned_faults = _run(True)
    _, default_faults = _run(False)
    assert tuned
    # 20 rounds x 32 MiB is 163,840 pages; the defaults fault nearly all of them in again.
    assert default_faults > 50_000
    assert tuned_faults < 1_000


def test_the_environment_wins() -> None:
    tuned, _ = _run(True, {"MALLOC_TRIM_THRESHOLD_": "131072"})
    assert not tuned
