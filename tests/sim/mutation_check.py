"""Does the quorum simulation have teeth? Break one rule of the Raft core at a time and see.

For every mutant of `tests.sim.core_mutants` (or those named on the command line), run the
simulation's CI profile (tests/sim/test_histories.py, then tests/sim/test_safety.py) in a
fresh pytest process with the mutant patched in, stop at the first failure, and report
which property caught it and how long that took. Unit tests are not run; the two
hand-made mutation tests of test_safety.py and the coverage test are left out, so a
mutant counts as caught only if the simulation itself fails.

    PYTHONPATH=. python -m tests.sim.mutation_check [mutant ...]

Exit status 0 when every mutant was caught. `test_mutation_check.py` runs it in the slow suite.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.sim.core_mutants import ENV, MUTANTS

ROOT = Path(__file__).resolve().parents[2]
SIMULATION = ["tests/sim/test_histories.py", "tests/sim/test_safety.py"]
# The tests that would catch a mutant by construction rather than by simulating.
LEFT_OUT = "not catches and not every_history_kind"
TIMEOUT_S = 1800

_PROPERTY = re.compile(r"\[([a-z][a-z-]+)\] ")
_FAILED = re.compile(r"^FAILED (\S+)", re.MULTILINE)
_LIVENESS = re.compile(r"no progress|made no progress|did not catch up|no leader")


@dataclass(frozen=True)
class Result:
    mutant: str
    rule: str
    caught: bool
    prop: str  # the property that failed, "liveness", or an exception type
    test: str  # the test that failed first
    seconds: float


def classify(output: str) -> tuple[str, str]:
    failed = _FAILED.search(output)
    test = failed.group(1).split("::")[-1] if failed else ""
    errors = [line for line in output.splitlines() if line.lstrip().startswith(("E ", "| ", "+"))] or [output]
    text = "\n".join(errors)
    if (m := _PROPERTY.search(text)) is not None:
        return m.group(1), test
    if _LIVENESS.search(text):
        return "liveness", test
    kind = re.search(r"\b(\w+(?:Error|Exception|Violation))\b", text)
    return (kind.group(1) if kind else "failure"), test


def run_one(name: str, rule: str) -> Result:
    env = {**os.environ, ENV: name, "PYTHONPATH": str(ROOT)}
    env.pop("HYPOTHESIS_PROFILE", None)
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-k", LEFT_OUT, *SIMULATION]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    seconds = time.monotonic() - start
    output = proc.stdout + proc.stderr
    if proc.returncode == 0:
        return Result(name, rule, False, "", "", seconds)
    if proc.returncode != 1:  # not a test failure: a broken run
        raise RuntimeError(f"mutant {name}: pytest exited {proc.returncode}\n{output[-3000:]}")
    prop, test = classify(output)
    return Result(name, rule, True, prop, test, seconds)


def table(results: list[Result]) -> str:
    rows = [("mutant", "rule broken", "caught", "by property", "first failing test", "time")]
    for r in results:
        rows.append((r.mutant, r.rule, "yes" if r.caught else "NO", r.prop, r.test, f"{r.seconds:.0f}s"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [" | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def run_all(names: list[str] | None = None) -> list[Result]:
    chosen = [m for m in MUTANTS if not names or m.name in names]
    results = []
    for m in chosen:
        result = run_one(m.name, m.rule)
        print(f"{m.name}: {'caught by ' + result.prop if result.caught else 'NOT CAUGHT'} ({result.seconds:.0f}s)")
        results.append(result)
    return results


def main(argv: list[str]) -> int:
    results = run_all(argv or None)
    print()
    print(table(results))
    return 0 if all(r.caught for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
