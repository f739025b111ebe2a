"""Compile pykraft's hot modules with mypyc, in place, or remove them again.

Each listed module gets a `<name>.cpython-<tag>.so` next to its `.py`, which Python imports
in preference to the source; one shared library (quorum/native__mypyc) holds their C (calls
between compiled modules are direct C calls). The same sources run as plain Python where
nothing is built: `clean` is the way back, and `deploy/env.sh` falls back to it when a
build fails. A stamp (`build/mypyc.stamp`) records a digest of what was compiled (the
modules' sources, this file, Python's and mypyc's versions): `status` says whether the
built modules are current, and the test suite refuses stale ones, which would shadow newer
sources.

    .venv/bin/python tools/mypyc_build.py [build|clean|status] [--set first|wide|groups|quorum|all] [--jobs N]

Needs mypy (with mypyc, pinned in requirements.lock), a C compiler and the Python headers.
The generated C and the objects stay under build/ for inspection; each build compiles every
module again (mypyc regenerates the whole group), which the stamp makes rare.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import sysconfig
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
STAMP = ROOT / "build" / "mypyc.stamp"
ROOMS = ("broker", "quorum", "api")
SUFFIX = sysconfig.get_config_var("EXT_SUFFIX") or ".so"

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
# The rest of what the first build's profile still ran as Python (its callers and helpers).
WIDE: tuple[str, ...] = FIRST + (
    "broker/log/epoch_cache.py",
    "broker/log/config.py",
    "broker/log/mapped_file.py",
    "broker/kafka/apis.py",
    "broker/serving.py",
    "broker/replica/requests.py",
    "quorum/raft/control_records.py",
)
GROUP = "quorum.native"
# The group coordinator's OffsetCommit path (pykraft issue 20) and the transaction
# coordinator's: where a cProfile of tests/perf/bench_offset_commit_cpu.py and a py-spy of the
# coordinator broker under `tests/perf/bench_groups.py --only commits` spent their time (by
# module, self time), with the message and record classes those modules build per request.
# broker/kafka/context.py builds now (its memoryview field: see the module).
GROUPS: tuple[str, ...] = (
    "broker/group/shard.py",
    "broker/group/runtime.py",
    "broker/group/records.py",
    "broker/group/messages.py",
    "broker/group/write_order.py",
    "broker/group/timers.py",
    "broker/group/classic.py",
    "broker/group/replica_host.py",  # a subclass of partition_host's (an interpreted class cannot be)
    "broker/coordinator/append_queue.py",
    "broker/coordinator/partition_host.py",
    "broker/kafka/offset_commit_wire.py",
    "broker/kafka/group_apis.py",
    "broker/kafka/context.py",
    "broker/kafka/txn_apis.py",
    "broker/txn/coordinator.py",
    "broker/txn/runtime.py",
    "broker/txn/metadata.py",
    "broker/txn/records.py",
    "broker/txn/messages.py",
    "broker/txn/txn_wire.py",
)
# The controller quorum's write path (pykraft issue 24): where a py-spy of bench_ctl_writes.py's
# leader, a follower and the broker spent their Python time (the innermost project frame of
# each busy sample; quorum/wire/primitives.py, quorum/storage/record_batch.py,
# quorum/raft/control_records.py and broker/log/config.py are in WIDE already), and the
# transport every node's requests go through. Three of them needed changes to build with
# mypyc 2.4.1: quorum/raft/voter_set.py's generic slotted dataclass (OffsetHistory) failed at
# import, and is a Python class in both builds; quorum/wire/fetch_direct.py's `memoryview`
# field needs the builtin as a module global (as broker/kafka/context.py's); and
# quorum/metadata/records.py's apiKeys are a table (API_KEYS), because mypyc took a ClassVar
# of a compiled dataclass for a field with a default.
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
    "quorum/raft/voter_set.py",
    "quorum/wire/fetch_direct.py",
    "quorum/metadata/records.py",
    "quorum/controller/requests.py",
)
SETS: dict[str, tuple[str, ...]] = {
    "first": FIRST,
    "wide": WIDE,
    "groups": WIDE + GROUPS,
    "quorum": QUORUM,
    "all": WIDE + GROUPS + QUORUM,
}
DEFAULT_SET = "all"


def digest(modules: tuple[str, ...]) -> str:
    """What a build of `modules` depends on: their sources, this file, the interpreter and mypyc."""
    from mypy.version import __version__ as mypy_version

    h = hashlib.sha256()
    h.update(f"{sys.version}\n{mypy_version}\n".encode())
    for path in (*modules, "tools/mypyc_build.py"):
        h.update(path.encode() + b"\0" + (ROOT / path).read_bytes())
    return h.hexdigest()


def built_modules() -> list[Path]:
    """Every extension module a build left in the tree, the shared library included (builds
    before it was named quorum/native__mypyc put it at the checkout's root)."""
    built = set(ROOT.glob(f"*{SUFFIX}"))
    for room in ROOMS:
        built |= set((ROOT / room).rglob(f"*{SUFFIX}"))
    return sorted(built)


def state() -> str:
    """'pure' (nothing built), 'current' (built from the sources as they are) or 'stale'."""
    if not built_modules():
        return "pure"
    try:
        stamp: dict[str, Any] = json.loads(STAMP.read_text())
        modules = tuple(stamp["modules"])
        if all((ROOT / m).is_file() for m in modules) and digest(modules) == stamp["digest"]:
            return "current"
    except (OSError, ValueError, KeyError):
        pass
    return "stale"


def _parallel_compile(jobs: int) -> None:
    """Compile an extension's C files `jobs` at a time (distutils compiles them one by one;
    with mypyc's multi_file output that is one file per module)."""
    from setuptools._distutils import ccompiler  # type: ignore[import-untyped]

    def compile_(
        self: Any,
        sources: list[str],
        output_dir: str | None = None,
        macros: Any = None,
        include_dirs: Any = None,
        debug: bool = False,
        extra_preargs: Any = None,
        extra_postargs: Any = None,
        depends: Any = None,
    ) -> list[str]:
        macros, objects, extra_postargs, pp_opts, build = self._setup_compile(
            output_dir, macros, include_dirs, sources, depends, extra_postargs
        )
        cc_args = self._get_cc_args(pp_opts, debug, extra_preargs)

        def one(obj: str) -> None:
            src, ext = build[obj]
            self._compile(obj, src, ext, cc_args, extra_postargs, pp_opts)

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            list(pool.map(one, list(build)))
        return list(objects)

    ccompiler.CCompiler.compile = compile_


def build(set_name: str, jobs: int) -> None:
    from mypyc.build import mypycify
    from setuptools import setup  # type: ignore[import-untyped]

    modules = SETS[set_name]
    start = time.monotonic()
    os.chdir(ROOT)  # mypycify takes paths relative to the checkout's root
    for path in built_modules():  # a module dropped from the set must not stay compiled
        path.unlink()
    STAMP.unlink(missing_ok=True)
    # The digest of the sources as they are when compilation starts: a source edited during
    # the build then leaves the build stale, as it is (mypyc read the earlier text).
    compiled_digest = digest(modules)
    _parallel_compile(jobs)
    # opt_level 3 is mypyc's default; multi_file: one C file per module, compiled in parallel
    # (one shared library still, so cross-module calls stay direct). The shared library is
    # quorum/native__mypyc.so (group_name): inside a package, so that it imports wherever
    # the packages do (the `pykraft` console script does not put the checkout on sys.path).
    extensions = mypycify(list(modules), opt_level="3", multi_file=True, group_name=GROUP)
    for extension in extensions:  # the group's headers go to build/quorum/, the modules' C to build/
        extension.include_dirs.append(str(Path("build", *GROUP.split(".")[:-1])))
    setup(
        name="pykraft-mypyc",
        ext_modules=extensions,
        script_args=["build_ext", "--inplace"],
        py_modules=[],
    )
    STAMP.parent.mkdir(exist_ok=True)
    STAMP.write_text(json.dumps({"set": set_name, "modules": list(modules), "digest": compiled_digest}))
    print(f"built {len(modules)} modules ({set_name}) in {time.monotonic() - start:.0f} s", file=sys.stderr)


def clean() -> None:
    """Remove every built extension module and the build directory (the tree is pure Python again)."""
    built = built_modules()
    for path in built:
        path.unlink()
    shutil.rmtree(ROOT / "build", ignore_errors=True)
    print(f"removed {len(built)} extension modules and build/", file=sys.stderr)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("action", choices=["build", "clean", "status"], nargs="?", default="build")
    ap.add_argument("--set", choices=sorted(SETS), default=DEFAULT_SET)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="C files compiled at once")
    args = ap.parse_args()
    if args.action == "clean":
        clean()
    elif args.action == "status":
        now = state()
        print(now)
        return {"current": 0, "pure": 1}.get(now, 2)
    else:
        build(args.set, max(1, args.jobs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
