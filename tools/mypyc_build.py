"""Compile the brokers' data-path modules with mypyc, in place (a spike: see the branch
mypyc-spike's report): each module gets a `<name>.cpython-311-x86_64-linux-gnu.so` next to
its `.py`, which Python imports in preference to the source; `clean` removes them again, and
the same sources run as plain Python (the fallback is simply not building).

    cd <checkout> && .venv/bin/python tools/mypyc_build.py [build|clean] [--set first|wide|quorum|all]

Needs mypy (with mypyc) in the venv, a C compiler and the Python headers. The build writes
the generated C and objects under build/ (kept for a quicker rebuild; `clean` removes it).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The modules where a cProfile of tests/perf/bench_replication_round.py (plain and --markers)
# and tests/perf/bench_produce_cpu.py spends its time (tottime by module, builtins charged to
# their callers): 97 % of the profiled round's time was in these and the C they call.
FIRST: tuple[str, ...] = (
    "quorum/wire/primitives.py",
    "quorum/storage/record_batch.py",
    "broker/log/partition_log.py",
    "broker/log/segment.py",
    "broker/log/validation.py",
    "broker/log/dir_failure.py",
    "broker/log/file_range.py",
    "broker/log/producer_state.py",
    "broker/log/records.py",
    "broker/log/control_records.py",
    "broker/log/index.py",
    "broker/replica/manager.py",
    "broker/replica/state.py",
    "broker/replica/fetcher.py",
    "broker/replica/purgatory.py",
    "broker/replica/fetch_wire.py",
    "broker/replica/fetch_session_client.py",
    "broker/replica/follower.py",
    "broker/kafka/produce.py",
    "broker/kafka/fetch.py",
    "broker/kafka/fetch_session.py",
    "broker/kafka/wire.py",
    "broker/kafka/server.py",
    "broker/kafka/spliced.py",
)
# The rest of what the first build's profile still ran as Python (its callers and helpers),
# but broker/kafka/context.py: mypyc 2.4.1 builds a module whose dataclass has a `memoryview`
# field (RequestContext.frame) that fails at import (KeyError: 'memoryview' while it rebuilds
# the class's __annotations__ for the dataclass decorator).
WIDE: tuple[str, ...] = FIRST + (
    "broker/log/epoch_cache.py",
    "broker/log/config.py",
    "broker/log/mapped_file.py",
    "broker/kafka/apis.py",
    "broker/serving.py",
    "broker/replica/requests.py",
    "quorum/raft/control_records.py",
)
# The controller quorum's write path (pykraft issue 24): where a py-spy of bench_ctl_writes.py's
# leader, a follower and the broker spent their Python time (the innermost project frame of
# each busy sample; quorum/wire/primitives.py, quorum/storage/record_batch.py,
# quorum/raft/control_records.py and broker/log/config.py are in WIDE already). Not
# quorum/raft/voter_set.py (1-2 % of the leader's samples): mypyc 2.4.1 builds it, but its
# generic slotted dataclass (OffsetHistory(Generic[T]), @dataclass(slots=True)) fails at
# import ("attribute '__dict__' of 'type' objects is not writable"); nor
# quorum/wire/fetch_direct.py (2-5 %): its dataclass FetchAnswer has a `memoryview` field,
# which fails at import as broker/kafka/context.py's did (KeyError: 'memoryview'; mypyc looks
# the unquoted builtin up in the module's globals; quoting it does not help); nor
# quorum/metadata/records.py (a follower's largest module, 18 %): its record dataclasses
# declare `API_KEY: ClassVar[int] = n` before their fields, and the dataclass decorator of a
# compiled class takes it for a field with a default (TypeError at import: "non-default
# argument 'broker_id' follows default argument").
QUORUM: tuple[str, ...] = (
    "quorum/raft/core.py",
    "quorum/raft/log.py",
    "quorum/raft/types.py",
    "quorum/raft/messages.py",
    "quorum/raft/ready.py",
    "quorum/node/raft_node.py",
    "quorum/node/active_controller.py",
    "quorum/node/controller_apis.py",
    "quorum/node/controller.py",
    "quorum/controller/topic_configs.py",
    "quorum/controller/replication_control.py",
    "quorum/metadata/delta.py",
    "quorum/metadata/image.py",
    "quorum/metadata/snapshot.py",
    "quorum/metadata/_codec.py",
    "quorum/metadata/gc_policy.py",
    "quorum/wire/transport.py",
    "quorum/wire/codec.py",
    "quorum/wire/admin_direct.py",
    "quorum/wire/admin_codec.py",
    "quorum/wire/limits.py",
    "quorum/wire/_reader.py",
    "quorum/storage/file_log.py",
    "quorum/storage/durable.py",
    "broker/dataplane.py",
    "broker/log/manager.py",
)
SETS = {"first": FIRST, "wide": WIDE, "quorum": QUORUM, "all": WIDE + QUORUM}


def build(modules: tuple[str, ...]) -> None:
    from mypyc.build import mypycify
    from setuptools import setup  # type: ignore[import-untyped]

    start = time.monotonic()
    # opt_level 3 is mypyc's default; the C of all modules goes into one shared library
    # (cross-module calls between compiled modules are then direct C calls).
    setup(
        name="pykraft-mypyc",
        ext_modules=mypycify(list(modules), opt_level="3"),
        script_args=["build_ext", "--inplace"],
        py_modules=[],
    )
    print(f"built {len(modules)} modules in {time.monotonic() - start:.0f} s", file=sys.stderr)


def clean() -> None:
    """Remove every built extension module and the build directory (the tree is pure Python again)."""
    built = set(ROOT.glob("*.cpython-*.so"))  # the shared library of all modules
    for room in ("broker", "quorum", "api"):
        built |= set((ROOT / room).rglob("*.cpython-*.so"))
    for path in built:
        path.unlink()
    shutil.rmtree(ROOT / "build", ignore_errors=True)
    print(f"removed {len(built)} extension modules and build/", file=sys.stderr)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("action", choices=["build", "clean"], nargs="?", default="build")
    ap.add_argument("--set", choices=sorted(SETS), default="first")
    args = ap.parse_args()
    if args.action == "clean":
        clean()
    else:
        import os

        os.chdir(ROOT)  # mypycify takes paths relative to the checkout's root
        build(SETS[args.set])
    return 0


if __name__ == "__main__":
    sys.exit(main())
