"""tests/perf holds benchmarks run by hand (`python tests/perf/bench_quorum.py`), not tests.

They start real clusters for minutes, so pytest must never collect them, not even when
`tests/perf` or the script is named on the command line.
"""

collect_ignore_glob = ["bench_*.py", "diag_*.py", "diag_site/*.py"]
