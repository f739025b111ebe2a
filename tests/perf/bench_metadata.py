#!/usr/bin/env python
"""Metadata-plane benchmark: the active controller, the image, snapshots, fencing, writes.

    python tests/perf/bench_metadata.py [--quick] [--json-out FILE] [--only 1,3] [--profile DIR]

Measures, prints as a table (and as JSON with --json-out), and marks PASS/MISS:

1. Creating 10,000 topics x 10 partitions (RF 3) through the active controller:
   an in-process real single-voter RaftNode (real log files, fsync) running the real
   QuorumController, 3 registered unfenced brokers heartbeating, CreateTopics
   requests of 100 topics, 8 in flight, each answered after commit. Records/s, topics/s.
2. Memory per partition of a MetadataImage (tracemalloc around `image_from_records`)
   with 1,000,000 partitions (10 per topic; also 1000 per topic for comparison).
3. Loading a 1,000,000-partition snapshot (built by replaying real records, written
   with the real encode_snapshot/SnapshotStore into a node's metadata dir):
   (a) standby controller: a real RaftNode + MetadataStateMachine over that dir,
       timing `start()` (it loads the snapshot) until the image is there;
   (b) fresh broker: that node (now single-voter leader) serves the snapshot to a
       second real RaftNode in the same process (an observer with an empty dir):
       Fetch -> FetchSnapshot chunks over loopback TCP -> install -> image; timed
       from the observer's start() until its image has every partition.
4. Fencing: an in-process controller (loaded from a snapshot of 300,000 partitions
   on 3 brokers, 100,000 led by the victim), the other brokers keep heartbeating,
   the victim stops. Timed from the fencing decision (the controller's "fencing
   broker" log line, emitted when `_fence_stale_brokers` picks it) until the
   committed image shows the victim fenced and leading nothing.
5. Committed metadata writes/s from 64 concurrent clients (IncrementalAlterConfigs
   SET retention.ms, one topic per client, each waiting for its answer) on a REAL
   3-controller + 3-broker cluster (plan_cluster/start_node): (a) Kafka protocol to
   the active controller's listener (admin_codec over PeerClient, one connection per
   client); (b) REST (a minimal HTTP/1.1 keep-alive client, one connection per client,
   about as cheap in CPU as the Kafka one) POST .../configs:alter on a broker's REST
   listener and on the active controller's; the same from httpx clients as diagnostics.
   The three client paths run in 3 interleaved rounds (5 s each after a 2 s warm-up), so
   that the shared machine's load changes hit them alike; ratios are taken within a round.

Every in-process figure comes with its wall time, the process CPU time
(time.process_time) and the load average; the cluster figures with the CPU time
of every node process and of the client over the measured window. --profile DIR
attaches py-spy (sampling, `--nonblocking`) to the measured process(es) and
writes raw stacks plus a summary; profiled runs are slower, so use their timings
only for proportions.

This is not a pytest module (tests/perf/conftest.py keeps pytest away). Every node
process it starts is stopped by pid before it exits.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import datetime as dt
import functools
import gc
import json
import logging
import os
import random
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import httpx  # noqa: E402
import uvloop  # noqa: E402
from bench_common import machine_info, proc_cpu_s  # noqa: E402

from quorum.controller import replication_control as rc  # noqa: E402
from quorum.controller.requests import (  # noqa: E402
    AlterConfigOp,
    AlterConfigOpType,
    AlterConfigsResource,
    BrokerEndpoint,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    ConfigResourceType,
    CreatableTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from quorum.metadata.delta import MetadataDelta  # noqa: E402
from quorum.metadata.gc_policy import tune_collector  # noqa: E402
from quorum.metadata.image import EMPTY, MetadataImage  # noqa: E402
from quorum.metadata.records import (  # noqa: E402
    BrokerEndpoint as RecordEndpoint,
)
from quorum.metadata.records import (  # noqa: E402
    FeatureLevelRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
    encode_record,
)
from quorum.metadata.snapshot import MetadataStateMachine, image_from_records, image_records  # noqa: E402
from quorum.node.active_controller import QuorumController  # noqa: E402
from quorum.node.cluster import (  # noqa: E402
    NodePlan,
    free_cluster_base,
    plan_cluster,
    start_node,
)
from quorum.node.config import NodeConfig, config_from_properties  # noqa: E402
from quorum.node.free_ports import free_port  # noqa: E402
from quorum.node.meta_properties import random_uuid  # noqa: E402
from quorum.node.raft_node import METADATA_PARTITION_DIR, RaftNode  # noqa: E402
from quorum.raft.types import ElectionState, OffsetAndEpoch  # noqa: E402
from quorum.storage.quorum_state import QUORUM_STATE_FILE, QuorumStateStore  # noqa: E402
from quorum.storage.record_batch import decode_batches  # noqa: E402
from quorum.storage.snapshots import SnapshotStore, decode_snapshot, encode_snapshot  # noqa: E402
from quorum.wire import admin_codec  # noqa: E402
from quorum.wire.transport import PeerClient  # noqa: E402

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qk"
METADATA_VERSION_LEVEL = 1  # quorum.node.active_controller.METADATA_VERSION

# ----------------------------------------------------------------------------- targets

TARGET_CREATE_S = None  # no target given for 1.: reported for scale
TARGET_BYTES_PER_PARTITION = 400.0  # the bound tests/unit/metadata/test_metadata_perf.py asserts
TARGET_SNAPSHOT_LOAD_S = 10.0  # 3.(a) and 3.(b)
TARGET_FENCE_S = 2.0  # 4.
TARGET_FENCE_LOOP_BLOCK_S = 0.05  # 4.: the event loop is never blocked longer meanwhile
ISSUE_SINGLE_CLIENT_S = 2.8  # issue 12: 10,000 x 10 topics from one client, before
TARGET_CREATE_64_CLIENTS_S = ISSUE_SINGLE_CLIENT_S / 3  # 1b.: at least 3x faster from 64 clients
TARGET_CREATE_RATE_RATIO = 0.8  # 1c.: the one-by-one create rate at 30,000 topics vs none
TARGET_REST_VS_KAFKA = 0.8  # 5.: REST writes/s at least this share of the Kafka protocol's
TARGET_WRITES_PER_S = 3000.0  # 5., on at least one path

FOR_SCALE = [
    "etcd 3.4, 3 members, on this machine: ~3,000 small puts/s from 64 concurrent clients",
    "Kafka's KRaft controller (JVM) creates topics at tens of thousands of partitions/s",
]

log = logging.getLogger("bench_metadata")


# ----------------------------------------------------------------------------- measuring


class _GcClock:
    """Time spent in cyclic-GC collections of this process (gc.callbacks), by generation."""

    def __init__(self) -> None:
        self.total_s = 0.0
        self.full = 0  # generation-2 collections
        self._t0 = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.total_s += time.perf_counter() - self._t0
            if info.get("generation") == 2:
                self.full += 1


GC_CLOCK = _GcClock()


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _rusage_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


@dataclass(slots=True)
class Span:
    """Wall time, this process's CPU time, and the load average around one measurement."""

    wall_s: float = 0.0
    cpu_s: float = 0.0  # time.process_time: every thread of this process
    rusage_cpu_s: float = 0.0  # getrusage(RUSAGE_SELF) user + system
    runq_wait_s: float | None = None  # runnable but waiting for a CPU (other work on the machine)
    machine_busy: float | None = None  # share of all CPUs busy (anything) meanwhile
    gc_s: float = 0.0  # in cyclic-GC collections
    gc_full: int = 0
    load_before: list[float] = field(default_factory=list)
    load_after: list[float] = field(default_factory=list)
    _t0: float = 0.0
    _c0: float = 0.0
    _r0: float = 0.0
    _q0: float | None = None
    _m0: tuple[int, int] | None = None
    _g0: tuple[float, int] = (0.0, 0)

    def start(self) -> Span:
        self._g0 = (GC_CLOCK.total_s, GC_CLOCK.full)
        self.load_before = loadavg()
        self._m0 = machine_cpu()
        self._q0 = sched_wait_s()
        self._t0 = time.perf_counter()
        self._c0 = time.process_time()
        self._r0 = _rusage_cpu()
        return self

    def stop(self) -> Span:
        self.wall_s = time.perf_counter() - self._t0
        self.cpu_s = time.process_time() - self._c0
        self.rusage_cpu_s = _rusage_cpu() - self._r0
        q1 = sched_wait_s()
        self.runq_wait_s = q1 - self._q0 if q1 is not None and self._q0 is not None else None
        self.machine_busy = busy_share(self._m0, machine_cpu())
        self.gc_s = GC_CLOCK.total_s - self._g0[0]
        self.gc_full = GC_CLOCK.full - self._g0[1]
        self.load_after = loadavg()
        return self

    def as_dict(self) -> dict[str, Any]:
        return {
            "wall_s": round(self.wall_s, 3),
            "cpu_s": round(self.cpu_s, 3),
            "rusage_cpu_s": round(self.rusage_cpu_s, 3),
            "cpu_share_of_wall": round(self.cpu_s / self.wall_s, 2) if self.wall_s > 0 else None,
            "runq_wait_s": round(self.runq_wait_s, 3) if self.runq_wait_s is not None else None,
            "machine_busy": self.machine_busy,
            "gc_s": round(self.gc_s, 3),
            "gc_full_collections": self.gc_full,
            "loadavg_before": self.load_before,
            "loadavg_after": self.load_after,
        }


@contextlib.contextmanager
def span() -> Iterator[Span]:
    s = Span().start()
    try:
        yield s
    finally:
        s.stop()


def percentile(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    i = min(len(sorted_values) - 1, max(0, int(round(q * (len(sorted_values) - 1)))))
    return sorted_values[i]


def sched_wait_s(pid: int | str = "self") -> float | None:
    """Time the process's threads spent runnable but waiting for a CPU (run-queue wait),
    summed over its live threads, from /proc/<pid>/task/*/schedstat (seconds)."""
    total = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, ValueError, IndexError):
                total += int((task / "schedstat").read_text().split()[1])
    except OSError:
        return None
    return total / 1e9


def machine_cpu() -> tuple[int, int] | None:
    """(total, idle+iowait) jiffies of all CPUs, from /proc/stat."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return None
    return sum(fields), fields[3] + (fields[4] if len(fields) > 4 else 0)


def busy_share(a: tuple[int, int] | None, b: tuple[int, int] | None) -> float | None:
    if a is None or b is None or b[0] <= a[0]:
        return None
    return round(1 - (b[1] - a[1]) / (b[0] - a[0]), 2)


def fsync_probe(work: Path, count: int = 300, size: int = 4096) -> dict[str, Any]:
    """Append `size` bytes + fsync, `count` times, in the work dir (context for commit latency)."""
    path = work / "fsync-probe.bin"
    data = os.urandom(size)
    samples = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for _ in range(count):
            t0 = time.perf_counter()
            os.write(fd, data)
            os.fsync(fd)
            samples.append((time.perf_counter() - t0) * 1000)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    samples.sort()
    return {
        "count": count,
        "p50_ms": round(percentile(samples, 0.5) or 0, 3),
        "p99_ms": round(percentile(samples, 0.99) or 0, 3),
    }


class LoopStallProbe:
    """The longest time the running event loop could not run a 10 ms timer callback
    (what a heartbeat arriving meanwhile would wait)."""

    def __init__(self, interval_s: float = 0.01) -> None:
        self.interval_s = interval_s
        self.max_stall_s = 0.0
        self._t0 = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            self._t0 = time.perf_counter()
            await asyncio.sleep(self.interval_s)
            self.max_stall_s = max(self.max_stall_s, time.perf_counter() - self._t0 - self.interval_s)

    def start(self) -> LoopStallProbe:
        self.max_stall_s = 0.0
        self._task = asyncio.create_task(self._run())
        return self

    def stop(self) -> float:
        if self._task is not None:
            self._task.cancel()
            # The sleep in progress counts too: a stall that ends just before stop() has not
            # woken the probe yet.
            self.max_stall_s = max(self.max_stall_s, time.perf_counter() - self._t0 - self.interval_s)
        return round(self.max_stall_s, 3)


# ----------------------------------------------------------------------------- profiling (py-spy)


class PySpy:
    """py-spy sampling one process (raw collapsed stacks), started/stopped by pid."""

    def __init__(self, pid: int, out: Path, rate: int = 100) -> None:
        self.pid = pid
        self.out = out
        self.rate = rate
        self.proc: subprocess.Popen[bytes] | None = None

    @staticmethod
    def available() -> bool:
        return shutil.which("py-spy") is not None

    @staticmethod
    def version() -> str:
        try:
            return subprocess.run(["py-spy", "--version"], capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return "not installed"

    def __enter__(self) -> PySpy:
        self.out.parent.mkdir(parents=True, exist_ok=True)
        cmd = [
            "py-spy", "record", "-p", str(self.pid), "--rate", str(self.rate),
            "--format", "raw", "-o", str(self.out), "--nonblocking",
        ]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # noqa: S603
        time.sleep(0.6)  # let it attach before the measured part starts
        return self

    def __exit__(self, *exc: object) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, signal.SIGINT)  # py-spy writes its output on SIGINT
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


class FsyncCounter:
    """`perf stat` of the fsync/fdatasync tracepoints of some processes (None where perf is unusable)."""

    EVENTS = "syscalls:sys_enter_fsync,syscalls:sys_enter_fdatasync"

    def __init__(self, pids: dict[str, int], out_dir: Path) -> None:
        self.pids = pids
        self.out_dir = out_dir
        self.procs: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
        self.counts: dict[str, int | None] = {}

    def start(self) -> None:
        if shutil.which("perf") is None:
            return
        self.out_dir.mkdir(parents=True, exist_ok=True)
        for label, pid in self.pids.items():
            out = self.out_dir / f"perf-fsync-{label}-{pid}.csv"
            cmd = ["perf", "stat", "-x", ",", "-e", self.EVENTS, "-p", str(pid), "-o", str(out)]
            self.procs[label] = (
                subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),  # noqa: S603
                out,
            )

    def stop(self) -> dict[str, int | None]:
        for label, (proc, out) in self.procs.items():
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
            total: int | None = None
            with contextlib.suppress(OSError):
                for line in out.read_text().splitlines():
                    first = line.split(",", 1)[0].strip()
                    if first.isdigit():
                        total = (total or 0) + int(first)
            self.counts[label] = total
        return self.counts


def _frame_name(frame: str) -> str:
    """'func (path/to/file.py:123)' -> 'func (file.py)'; paths shortened to the repo."""
    name, _, where = frame.partition(" (")
    where = where.rstrip(")")
    path = where.rsplit(":", 1)[0]
    if str(REPO) in path:
        path = path.split(str(REPO) + "/", 1)[1]
    elif "site-packages/" in path:
        path = path.split("site-packages/", 1)[1]
    elif "/lib/python" in path:
        path = "stdlib/" + path.rsplit("/", 1)[-1]
    return f"{name} ({path})"


def summarize_profile(path: Path, top: int = 18) -> dict[str, Any]:
    """Self and inclusive sample shares per function from py-spy's raw output."""
    self_counts: collections.Counter[str] = collections.Counter()
    incl_counts: collections.Counter[str] = collections.Counter()
    total = 0
    if not path.exists():
        return {"file": str(path), "samples": 0}
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_frame_name(f) for f in stack.split(";") if f]
        if not frames:
            continue
        total += count
        self_counts[frames[-1]] += count
        for name in set(frames):
            incl_counts[name] += count

    def rows(counter: collections.Counter[str]) -> list[list[Any]]:
        return [[name, round(100 * c / max(1, total), 1)] for name, c in counter.most_common(top)]

    return {"file": str(path), "samples": total, "self_pct": rows(self_counts), "inclusive_pct": rows(incl_counts)}


def print_profile(title: str, summary: dict[str, Any]) -> None:
    print(f"\n  profile: {title} ({summary.get('samples', 0)} samples, {summary.get('file')})")
    for label in ("self_pct", "inclusive_pct"):
        print(f"    {label.replace('_pct', '')}:")
        for name, pct in summary.get(label, [])[:14]:
            print(f"      {pct:5.1f}%  {name}")


@contextlib.contextmanager
def maybe_profile(profile_dir: Path | None, name: str, pid: int | None = None) -> Iterator[dict[str, Any]]:
    """py-spy on `pid` (default: this process) while the block runs, when profiling."""
    result: dict[str, Any] = {}
    if profile_dir is None or not PySpy.available():
        yield result
        return
    out = profile_dir / f"{name}.pyspy.txt"
    with PySpy(pid or os.getpid(), out):
        yield result
    result.update(summarize_profile(out))
    print_profile(name, result)


# ----------------------------------------------------------------------------- metadata records


def build_records(
    partitions: int, per_topic: int, brokers: list[int], *, rf: int = 3, seed: int = 1, prefix: str = "topic"
) -> list[bytes]:
    """metadata.version, `brokers` registered unfenced, and `partitions` partitions (RF `rf`)
    in topics of `per_topic`. Leaders (= first replica) go round-robin over the brokers, so
    each broker leads the same number of partitions; a partition's replicas are consecutive
    brokers (mod the broker count). Topic ids are random, names `prefix-NNNNNN`."""
    rng = random.Random(seed)  # noqa: S311 - not security
    out = [encode_record(FeatureLevelRecord("metadata.version", METADATA_VERSION_LEVEL))]
    nb = len(brokers)
    for i, b in enumerate(brokers):
        out.append(
            encode_record(
                RegisterBrokerRecord(
                    broker_id=b,
                    incarnation_id=uuid.UUID(int=rng.getrandbits(128), version=4),
                    broker_epoch=len(out),  # the offset of its registration record
                    end_points=(RecordEndpoint("PLAINTEXT", "127.0.0.1", 9092 + i),),
                    rack=None,
                    fenced=False,
                )
            )
        )
    replica_sets = [tuple(brokers[(k + i) % nb] for i in range(rf)) for k in range(nb)]
    g = 0
    topics = (partitions + per_topic - 1) // per_topic
    for t in range(topics):
        topic_id = uuid.UUID(int=rng.getrandbits(128), version=4)
        out.append(encode_record(TopicRecord(f"{prefix}-{t:06d}", topic_id)))
        for p in range(min(per_topic, partitions - t * per_topic)):
            replicas = replica_sets[g % nb]
            g += 1
            out.append(
                encode_record(
                    PartitionRecord(
                        p, topic_id, replicas, replicas, leader=replicas[0], leader_epoch=0, partition_epoch=0
                    )
                )
            )
    return out


@dataclass(slots=True)
class SnapshotFile:
    sid: OffsetAndEpoch
    path: Path
    size: int
    records: int
    build: dict[str, Any]


def write_snapshot_dir(data_dir: Path, records: list[bytes], *, epoch: int = 1, voters: list[int]) -> SnapshotFile:
    """Replay `records` into an image (the real MetadataDelta replay), write its snapshot
    with the real image_records/encode_snapshot/SnapshotStore into `data_dir`'s metadata
    partition dir, and a quorum-state of epoch `epoch` (as a restarted node has)."""
    part = data_dir / METADATA_PARTITION_DIR
    part.mkdir(parents=True, exist_ok=True)
    timings: dict[str, Any] = {}
    with span() as s:
        image = image_from_records(records, len(records) - 1, epoch)
    timings["replay"] = s.as_dict()
    sid = OffsetAndEpoch(epoch=epoch, offset=len(records))
    with span() as s:
        values = list(image_records(image))
        data = encode_snapshot(sid, values, last_contained_timestamp_ms=int(time.time() * 1000))
        del values
        path = SnapshotStore(part).create(sid, data)
    timings["encode_and_write"] = s.as_dict()
    QuorumStateStore(part / QUORUM_STATE_FILE, voters=voters).write(ElectionState(epoch=epoch))
    size = len(data)
    del data, image
    gc.collect()
    return SnapshotFile(sid, path, size, len(records), timings)


# ----------------------------------------------------------------------------- in-process nodes


def node_config(
    node_id: int, data_dir: Path, voters: dict[int, int], *, role: str = "controller", **extra: str
) -> NodeConfig:
    props = {
        "process.roles": role,
        "node.id": str(node_id),
        "controller.quorum.voters": ",".join(f"{i}@127.0.0.1:{p}" for i, p in sorted(voters.items())),
        "controller.listener.names": "CONTROLLER",
        "log.dirs": str(data_dir),
        "controller.quorum.election.timeout.ms": "100",
    }
    if role == "controller":
        props["listeners"] = f"CONTROLLER://127.0.0.1:{voters[node_id]}"
    else:
        props["listeners"] = f"PLAINTEXT://127.0.0.1:{free_port()}"
    props.update(extra)
    return config_from_properties(props)


class Harness:
    """A real single-voter RaftNode (real log, fsync, loopback listener) + QuorumController."""

    def __init__(
        self,
        data_dir: Path,
        *,
        session_timeout_ms: int = 9000,
        idle_interval_ms: int = 500,
        controller_cls: type[QuorumController] = QuorumController,
        state_machine: MetadataStateMachine | None = None,
    ) -> None:
        self.port = free_port()
        self.config = node_config(1, data_dir, {1: self.port})
        self.sm = state_machine or MetadataStateMachine()
        holder: list[QuorumController] = []
        self.node = RaftNode(
            self.config,
            cluster_id=CLUSTER_ID,
            state_machine=self.sm,
            on_first_commit=lambda epoch: holder[0].on_first_commit(epoch),
            on_role_change=lambda role, epoch: holder[0].on_role_change(role, epoch),
        )
        self.controller = controller_cls(
            self.node,
            self.sm,
            cluster_id=CLUSTER_ID,
            settings=rc.ReplicationSettings(num_partitions=1, default_replication_factor=3),
            session_timeout_ms=session_timeout_ms,
            idle_interval_ms=idle_interval_ms,
            auto_rebalance=False,
            rebalance_interval_s=300,
            imbalance_percentage=10,
        )
        holder.append(self.controller)

    async def start(self, timeout_s: float = 60.0) -> float:
        tune_collector()  # as a node process does at its start
        t0 = time.perf_counter()
        await self.node.start()
        deadline = time.monotonic() + timeout_s
        while not self.controller.active:
            if time.monotonic() > deadline:
                raise RuntimeError("the single voter never became the active controller")
            await asyncio.sleep(0.005)
        return time.perf_counter() - t0

    async def stop(self) -> None:
        await self.controller.close()
        await self.node.stop(graceful=False)


class FakeBroker:
    """A broker's registration and heartbeats, straight into QuorumController.handle."""

    def __init__(self, h: Harness, broker_id: int, epoch: int | None = None) -> None:
        self.h = h
        self.broker_id = broker_id
        self.epoch = epoch
        self.heartbeating = True
        self.heartbeats = 0
        self.errors: list[str] = []
        self.was_fenced_after_start = False

    async def register(self) -> None:
        req = BrokerRegistrationRequest(
            broker_id=self.broker_id,
            cluster_id=CLUSTER_ID,
            incarnation_id=uuid.uuid4(),
            listeners=(BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9092 + self.broker_id),),
        )
        resp = await self.h.controller.handle(req)
        assert isinstance(resp, BrokerRegistrationResponse) and resp.error_code == 0, resp
        self.epoch = resp.broker_epoch

    async def heartbeat(self) -> BrokerHeartbeatResponse:
        assert self.epoch is not None
        req = BrokerHeartbeatRequest(self.broker_id, self.epoch, self.h.sm.image.offset, False, False)
        resp = await self.h.controller.handle(req)
        assert isinstance(resp, BrokerHeartbeatResponse)
        self.heartbeats += 1
        if resp.error_code:
            self.errors.append(f"heartbeat error {resp.error_code}")
        return resp

    async def run(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            if not self.heartbeating:
                continue
            try:
                resp = await self.heartbeat()
            except Exception as exc:  # noqa: BLE001 - reported, the benchmark goes on
                self.errors.append(repr(exc))
                continue
            if resp.is_fenced:
                self.was_fenced_after_start = True


async def unfenced_brokers(h: Harness, ids: list[int]) -> list[FakeBroker]:
    brokers = [FakeBroker(h, i) for i in ids]
    for b in brokers:
        await b.register()
    for b in brokers:
        resp = await b.heartbeat()
        assert resp.error_code == 0 and not resp.is_fenced, resp
    return brokers


# ----------------------------------------------------------------------------- 1. create topics


async def _create_topics(
    work: Path, n_topics: int, partitions: int, rf: int, per_request: int, inflight: int, profile: Path | None
) -> dict[str, Any]:
    h = Harness(work / "create-topics")
    await h.start()
    brokers = await unfenced_brokers(h, [1, 2, 3])
    hb_tasks = [asyncio.create_task(b.run(2.0)) for b in brokers]  # Kafka's broker.heartbeat.interval.ms
    try:
        names = [f"bench-{i:06d}" for i in range(n_topics)]
        requests = [
            CreateTopicsRequest(tuple(CreatableTopic(n, partitions, rf) for n in names[i : i + per_request]))
            for i in range(0, n_topics, per_request)
        ]
        it = iter(requests)
        latencies: list[float] = []
        errors: list[str] = []

        async def worker() -> None:
            for req in it:
                t0 = time.perf_counter()
                resp = await h.controller.handle(req)
                latencies.append(time.perf_counter() - t0)
                assert isinstance(resp, CreateTopicsResponse)
                errors.extend(f"{r.name}: {r.error_code} {r.message}" for r in resp.topics if r.error_code)

        core = h.node.core
        assert core is not None
        offset0 = core.log.end_offset
        gc.collect()
        with maybe_profile(profile, "1-create-topics") as prof, span() as s:
            await asyncio.gather(*(worker() for _ in range(inflight)))
        offset1 = core.log.end_offset
        image = h.sm.image
        created = [n for n in names if n in image.topics.by_name]
        parts = sum(len(image.topics.by_name[n].partitions) for n in created)
        records = n_topics * (1 + partitions)
        latencies.sort()

        # Side figure: the cost of one 100-topic CreateTopics decision (pure, nothing
        # appended) on the 10,000-topic working image, for names with and without '.'/'_'.
        working = h.controller.working_image
        side = {}
        for label, fmt in (("plain_names", "extra-{:05d}"), ("dotted_names", "extra.t{:05d}")):
            req = CreateTopicsRequest(tuple(CreatableTopic(fmt.format(i), partitions, rf) for i in range(per_request)))
            c0 = time.process_time()
            t0 = time.perf_counter()
            rc.create_topics(working, req, h.controller.settings)
            side[label] = {
                "wall_ms": round((time.perf_counter() - t0) * 1000, 1),
                "cpu_ms": round((time.process_time() - c0) * 1000, 1),
            }
        return {
            "topics": n_topics,
            "partitions_per_topic": partitions,
            "replication_factor": rf,
            "topics_per_request": per_request,
            "requests_in_flight": inflight,
            "brokers": 3,
            "span": s.as_dict(),
            "records": records,
            "log_records_appended": offset1 - offset0,
            "records_per_s": round(records / s.wall_s),
            "topics_per_s": round(n_topics / s.wall_s),
            "partitions_per_s": round(n_topics * partitions / s.wall_s),
            "request_latency_ms": {
                "p50": round(1000 * (percentile(latencies, 0.5) or 0), 1),
                "p99": round(1000 * (percentile(latencies, 0.99) or 0), 1),
                "max": round(1000 * latencies[-1], 1) if latencies else None,
            },
            "errors": errors[:5],
            "error_count": len(errors),
            "committed_topics": len(created),
            "committed_partitions": parts,
            "brokers_fenced_meanwhile": sum(b.was_fenced_after_start for b in brokers),
            "one_request_decision_on_full_image": side,
            "profile": prof,
        }
    finally:
        for t in hb_tasks:
            t.cancel()
        await h.stop()


def bench_create_topics(work: Path, quick: bool, profile: Path | None) -> dict[str, Any]:
    n = 1000 if quick else 10_000
    runs: dict[str, Any] = {}
    # 1: 8 in flight (the historical figure); 1b: one client, then 64 clients, same requests.
    for key, inflight in (("8_in_flight", 8), ("1_client", 1), ("64_clients", 64)):
        print(
            f"\n[1] create {n:,} topics x 10 partitions (RF 3), 100 per request, {inflight} in flight ...", flush=True
        )
        r = uvloop.run(_create_topics(work / f"create-{key}", n, 10, 3, 100, inflight, profile))
        print(
            f"    {r['span']['wall_s']:.2f} s wall, {r['span']['cpu_s']:.2f} s CPU ({r['span']['gc_s']:.2f} s in GC): "
            f"{r['topics_per_s']:,} topics/s, "
            f"{r['records_per_s']:,} records/s; committed {r['committed_topics']:,} topics / "
            f"{r['committed_partitions']:,} partitions; errors {r['error_count']}",
            flush=True,
        )
        runs[key] = r
    result = dict(runs["8_in_flight"])
    result["single_client"] = runs["1_client"]
    result["clients_64"] = runs["64_clients"]
    result["speedup_64_clients_vs_1"] = round(
        runs["1_client"]["span"]["wall_s"] / runs["64_clients"]["span"]["wall_s"], 2
    )
    return result


async def _create_rate(work: Path, sizes: list[int], window_s: float) -> dict[str, Any]:
    """Topics created one at a time (one client, each waiting for its answer), 3 partitions
    RF 3, for `window_s` with the image holding each of `sizes` topics first."""
    h = Harness(work / "create-rate")
    await h.start()
    brokers = await unfenced_brokers(h, [1, 2, 3])
    hb_tasks = [asyncio.create_task(b.run(2.0)) for b in brokers]
    try:
        out: list[dict[str, Any]] = []
        have = 0
        serial = 0
        for size in sizes:
            # Fill up to `size` topics in bulk (64 clients, 100 topics/request).
            names = iter(f"fill-{i:06d}" for i in range(have, size))

            async def filler(names: Iterator[str]) -> None:
                while batch := [n for _, n in zip(range(100), names, strict=False)]:
                    await h.controller.handle(CreateTopicsRequest(tuple(CreatableTopic(n, 3, 3) for n in batch)))

            await asyncio.gather(*(filler(names) for _ in range(64)))
            have = len(h.controller.working_image.topics.by_name)
            gc.collect()
            latencies: list[float] = []
            errors = 0
            with span() as s:
                end = time.perf_counter() + window_s
                while time.perf_counter() < end:
                    serial += 1
                    t0 = time.perf_counter()
                    resp = await h.controller.handle(
                        CreateTopicsRequest((CreatableTopic(f"one.by_one-{serial:06d}", 3, 3),))
                    )
                    latencies.append(time.perf_counter() - t0)
                    assert isinstance(resp, CreateTopicsResponse)
                    errors += sum(1 for r in resp.topics if r.error_code)
            have = len(h.controller.working_image.topics.by_name)
            latencies.sort()
            out.append(
                {
                    "topics_before": size,
                    "created": len(latencies),
                    "creates_per_s": round(len(latencies) / s.wall_s, 1),
                    # CPU per create: steadier than the rate on a busy machine (fsync, other work)
                    "cpu_ms_per_create": round(1000 * s.cpu_s / max(1, len(latencies)), 3),
                    "latency_ms": {
                        "p50": round(1000 * (percentile(latencies, 0.5) or 0), 2),
                        "p99": round(1000 * (percentile(latencies, 0.99) or 0), 2),
                    },
                    "errors": errors,
                    "span": s.as_dict(),
                }
            )
        return {
            "window_s": window_s,
            "by_size": out,
            "ratio": round(out[-1]["creates_per_s"] / out[0]["creates_per_s"], 2),
        }
    finally:
        for t in hb_tasks:
            t.cancel()
        await h.stop()


def bench_create_rate(work: Path, quick: bool) -> dict[str, Any]:
    sizes = [0, 3_000] if quick else [0, 30_000]
    print(f"\n[1c] topics created one by one (one client) with {sizes[0]:,} then {sizes[1]:,} topics ...", flush=True)
    r = uvloop.run(_create_rate(work, sizes, 1.5 if quick else 3.0))
    for row in r["by_size"]:
        print(
            f"    at {row['topics_before']:,} topics: {row['creates_per_s']:,}/s, "
            f"p50 {row['latency_ms']['p50']} ms, p99 {row['latency_ms']['p99']} ms"
        )
    return r


# ----------------------------------------------------------------------------- 2. image memory


def bench_image_memory(partitions: int, per_topic: int) -> dict[str, Any]:
    print(f"\n[2] image memory: {partitions:,} partitions, {per_topic} per topic ...", flush=True)
    records = build_records(partitions, per_topic, [1, 2, 3, 4, 5, 6])
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        with span() as s:
            image = image_from_records(records, len(records) - 1, 1)
        gc.collect()
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    count = image.topics.partition_count()
    assert count == partitions, count
    del image, records
    gc.collect()
    per = used / partitions
    print(f"    {per:.0f} B/partition ({used / 2**20:.0f} MiB traced); build under tracemalloc {s.wall_s:.1f} s")
    return {
        "partitions": partitions,
        "partitions_per_topic": per_topic,
        "topics": (partitions + per_topic - 1) // per_topic,
        "brokers": 6,
        "traced_bytes": used,
        "bytes_per_partition": round(per, 1),
        "span_under_tracemalloc": s.as_dict(),
    }


# ----------------------------------------------------------------------------- 3. snapshot load


class TimedStateMachine(MetadataStateMachine):
    """MetadataStateMachine that notes when load_snapshot starts and ends (no behaviour change)."""

    def __init__(self) -> None:
        super().__init__()
        self.load_started: float | None = None
        self.load_ended: float | None = None
        self.load_cpu: tuple[float, float] | None = None

    def load_snapshot(self, end_offset: int, records: Any, epoch: int = -1) -> None:
        self.load_started = time.perf_counter()
        c0 = time.process_time()
        super().load_snapshot(end_offset, records, epoch)
        self.load_ended = time.perf_counter()
        self.load_cpu = (c0, time.process_time())


async def _snapshot_load(work: Path, snap: SnapshotFile, partitions: int, profile: Path | None) -> dict[str, Any]:
    data_dir = snap.path.parents[1]
    port = free_port()
    out: dict[str, Any] = {}

    # (a) the standby / restarted controller: start() reads, decodes and replays the snapshot.
    sm = TimedStateMachine()
    node = RaftNode(node_config(1, data_dir, {1: port}), cluster_id=CLUSTER_ID, state_machine=sm)
    gc.collect()
    with maybe_profile(profile, "3a-standby-load") as prof_a, span() as s:
        await node.start()
    loaded = sm.image.topics.partition_count()
    assert loaded == partitions, loaded
    assert sm.load_started is not None and sm.load_ended is not None and sm.load_cpu is not None
    out["standby"] = {
        "span": s.as_dict(),
        "read_and_decode_s": round(sm.load_started - (s._t0), 3),
        "image_from_records_and_listeners_s": round(sm.load_ended - sm.load_started, 3),
        "image_from_records_and_listeners_cpu_s": round(sm.load_cpu[1] - sm.load_cpu[0], 3),
        "profile": prof_a,
    }
    print(
        f"    (a) standby start() -> image of {loaded:,} partitions: {s.wall_s:.2f} s wall, {s.cpu_s:.2f} s CPU "
        f"({s.gc_s:.2f} s in GC)"
    )

    # It elects itself (single voter) and serves the snapshot to a fresh observer.
    deadline = time.monotonic() + 30
    while not (node.core is not None and node.core.is_leader and node.core.high_watermark > snap.sid.offset):
        if time.monotonic() > deadline:
            raise RuntimeError("the snapshot's node did not become leader")
        await asyncio.sleep(0.01)

    # (b) a fresh broker: empty metadata dir, observer of voter 1.
    obs_dir = work / "snapshot-observer"
    sm_b = TimedStateMachine()
    observer = RaftNode(
        node_config(2, obs_dir, {1: port}, role="broker"), cluster_id=CLUSTER_ID, state_machine=sm_b, serve_raft=False
    )
    chunks: list[tuple[float, int]] = []
    first_chunk: list[float] = []
    finished: list[float] = []
    gc.collect()
    probe = LoopStallProbe().start()
    with maybe_profile(profile, "3b-fresh-broker") as prof_b, span() as s:
        await observer.start()
        store = observer._snapshots  # instrumentation only: note chunk arrival times
        assert store is not None
        orig_begin, orig_write, orig_finish = store.begin_receive, store.write_chunk, store.finish_receive

        def begin(sid: OffsetAndEpoch, size: int) -> None:
            first_chunk.append(time.perf_counter())
            orig_begin(sid, size)

        def write(sid: OffsetAndEpoch, position: int, data: bytes) -> None:
            chunks.append((time.perf_counter(), len(data)))
            orig_write(sid, position, data)

        def finish(sid: OffsetAndEpoch) -> Path:
            p = orig_finish(sid)
            finished.append(time.perf_counter())
            return p

        store.begin_receive = begin  # type: ignore[method-assign]
        store.write_chunk = write  # type: ignore[method-assign]
        store.finish_receive = finish  # type: ignore[method-assign]
        deadline = time.monotonic() + 300
        while sm_b.load_ended is None:
            if time.monotonic() > deadline:
                raise RuntimeError("the observer did not install the snapshot within 300 s")
            await asyncio.sleep(0.002)
    max_stall = probe.stop()
    assert sm_b.image.topics.partition_count() == partitions
    assert sm_b.load_started is not None and sm_b.load_ended is not None and sm_b.load_cpu is not None
    t0 = s._t0
    out["fresh_broker"] = {
        "span": s.as_dict(),
        "snapshot_bytes": snap.size,
        "chunks": len(chunks),
        "first_chunk_at_s": round(first_chunk[0] - t0, 3) if first_chunk else None,
        "transfer_done_at_s": round(finished[0] - t0, 3) if finished else None,
        "transfer_s": round(finished[0] - first_chunk[0], 3) if finished and first_chunk else None,
        "transfer_MiB_per_s": round(snap.size / 2**20 / (finished[0] - first_chunk[0]), 1)
        if finished and first_chunk
        else None,
        "read_and_decode_s": round(sm_b.load_started - finished[0], 3) if finished else None,
        "image_from_records_and_listeners_s": round(sm_b.load_ended - sm_b.load_started, 3),
        "image_from_records_and_listeners_cpu_s": round(sm_b.load_cpu[1] - sm_b.load_cpu[0], 3),
        "max_event_loop_stall_s": max_stall,
        "profile": prof_b,
    }
    fb = out["fresh_broker"]
    print(
        f"    (b) fresh broker: image of {partitions:,} partitions {s.wall_s:.2f} s after start() "
        f"({s.cpu_s:.2f} s CPU, {s.gc_s:.2f} s in GC; transfer {fb['transfer_s']} s in {len(chunks)} chunks, "
        f"decode {fb['read_and_decode_s']} s, image {fb['image_from_records_and_listeners_s']} s; "
        f"event loop stalled up to {max_stall:.2f} s)"
    )
    await observer.stop(graceful=False)
    await node.stop(graceful=False)
    return out


def bench_snapshot_load(work: Path, partitions: int, profile: Path | None) -> dict[str, Any]:
    print(f"\n[3] snapshot of {partitions:,} partitions (10 per topic, 3 brokers): build, write, load ...", flush=True)
    with span() as s:
        records = build_records(partitions, 10, [1, 2, 3])
    print(f"    encoded {len(records):,} records in {s.wall_s:.1f} s", flush=True)
    snap = write_snapshot_dir(work / "snapshot-standby", records, voters=[1])
    del records
    gc.collect()
    print(
        f"    snapshot {snap.sid}: {snap.size / 2**20:.1f} MiB; replay {snap.build['replay']['wall_s']:.1f} s, "
        f"encode+write {snap.build['encode_and_write']['wall_s']:.1f} s",
        flush=True,
    )
    # Pure-function breakdown of a load (decode, replay, and the listeners' diff), for the diagnosis.
    data = snap.path.read_bytes()
    with span() as s_dec:
        values = decode_snapshot(data)
    del data
    gc.collect()
    with span() as s_img:
        image = image_from_records(values, snap.sid.offset - 1, snap.sid.epoch)
    del values
    gc.collect()
    with span() as s_diff:
        MetadataDelta.diff(EMPTY, image)
    del image
    gc.collect()
    result = uvloop.run(_snapshot_load(work, snap, partitions, profile))
    result["partitions"] = partitions
    result["snapshot_records"] = snap.records
    result["snapshot_bytes"] = snap.size
    result["build"] = snap.build
    result["pure_breakdown"] = {
        "decode_snapshot": s_dec.as_dict(),
        "image_from_records": s_img.as_dict(),
        "delta_diff_for_listeners": s_diff.as_dict(),
    }
    return result


# ----------------------------------------------------------------------------- 4. fencing


class _FenceLogWatch(logging.Handler):
    """Notes the moment the controller decides to fence (its "fencing broker" log line)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.decided: dict[int, tuple[float, float, float, int]] = {}
        self.pause_gc = False

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args
        if str(record.msg).startswith("fencing broker") and isinstance(args, tuple) and args:
            broker = int(str(args[0]))
            if broker not in self.decided and self.pause_gc:
                gc.disable()
            self.decided.setdefault(broker, (time.perf_counter(), time.process_time(), GC_CLOCK.total_s, GC_CLOCK.full))


class TimedController(QuorumController):
    """QuorumController noting each append of the fencing (records, start, end)."""

    appends: list[tuple[int, float, float]]  # (records, start, end)

    def _append(self, records: Any, **kw: Any) -> asyncio.Future[int]:
        t0 = time.perf_counter()
        fut = super()._append(records, **kw)
        if kw.get("fence_moves"):
            self.appends = [*getattr(self, "appends", []), (len(records), t0, time.perf_counter())]
        return fut


async def _fencing(work: Path, partitions: int, profile: Path | None, what_if: str | None = None) -> dict[str, Any]:
    brokers_ids = [1, 2, 3]
    victim = 1
    records = build_records(partitions, 10, brokers_ids, prefix="fence")
    write_snapshot_dir(work, records, voters=[1])
    del records
    gc.collect()
    watch = _FenceLogWatch()
    active_log = logging.getLogger("quorum.node.active_controller")
    active_log.addHandler(watch)
    active_log.setLevel(logging.INFO)
    session_ms = 9000  # Kafka's broker.session.timeout.ms
    sm = MetadataStateMachine()
    done: dict[str, tuple[float, float, float, int]] = {}

    def on_update(delta: MetadataDelta | None, image: MetadataImage) -> None:
        b = image.cluster.brokers.get(victim)
        if "committed" not in done and b is not None and b.fenced:
            done["committed"] = (time.perf_counter(), time.process_time(), GC_CLOCK.total_s, GC_CLOCK.full)
            if watch.pause_gc:
                gc.enable()

    sm.add_listener(on_update)
    h = Harness(work, session_timeout_ms=session_ms, controller_cls=TimedController, state_machine=sm)
    start_s = await h.start()
    if what_if == "gc-freeze":  # experiment, not the product's behaviour: loaded image excluded from GC
        gc.collect()
        gc.freeze()
    watch.pause_gc = what_if == "gc-pause"  # experiment: GC off from the decision until committed
    try:
        image = h.sm.image
        led = sum(1 for _, _, p in image.iter_partitions() if p.leader == victim)
        in_isr = sum(1 for _, _, p in image.iter_partitions() if victim in p.isr)
        total = image.topics.partition_count()
        brokers = [FakeBroker(h, b, image.cluster.brokers[b].epoch) for b in brokers_ids]
        for b in brokers:
            resp = await b.heartbeat()
            assert resp.error_code == 0 and not resp.is_fenced, resp
        hb_tasks = [asyncio.create_task(b.run(2.0)) for b in brokers]  # Kafka's broker.heartbeat.interval.ms
        await asyncio.sleep(1.0)
        brokers[0].heartbeating = False
        hb_before = sum(b.heartbeats for b in brokers[1:])
        stopped = time.perf_counter()
        probe = LoopStallProbe().start()
        print(f"    victim {victim} stopped heartbeating; fencing after the {session_ms} ms session timeout ...")
        prof_ctx = maybe_profile(profile, "4-fencing")
        prof = prof_ctx.__enter__() if profile is not None else {}
        try:
            deadline = time.monotonic() + session_ms / 1000 + 120
            while "committed" not in done:
                if time.monotonic() > deadline:
                    raise RuntimeError("the victim was not fenced in time")
                await asyncio.sleep(0.01)
        finally:
            if profile is not None:
                prof_ctx.__exit__(None, None, None)
        max_stall = probe.stop()
        for t in hb_tasks:
            t.cancel()
        decided_t, decided_cpu, decided_gc, decided_full = watch.decided[victim]
        committed_t, committed_cpu, committed_gc, committed_full = done["committed"]
        final = h.sm.image
        still_led = sum(1 for _, _, p in final.iter_partitions() if p.leader == victim)
        still_isr = sum(1 for _, _, p in final.iter_partitions() if victim in p.isr)
        ctrl = h.controller
        assert isinstance(ctrl, TimedController)
        appends = getattr(ctrl, "appends", [])
        fence_appends = [a for a in appends if a[1] >= decided_t]
        others_fenced = [b.broker_id for b in brokers[1:] if final.cluster.brokers[b.broker_id].fenced]
        return {
            "partitions": total,
            "brokers": len(brokers_ids),
            "victim": victim,
            "victim_led_before": led,
            "victim_in_isr_before": in_isr,
            "session_timeout_ms": session_ms,
            "controller_start_s": round(start_s, 3),
            "decision_after_last_heartbeat_s": round(decided_t - stopped, 3),
            "fence_s": round(committed_t - decided_t, 3),
            "fence_cpu_s": round(committed_cpu - decided_cpu, 3),
            "fence_gc_s": round(committed_gc - decided_gc, 3),
            "fence_gc_full_collections": committed_full - decided_full,
            "loadavg": loadavg(),
            "fence_batches": len(fence_appends),
            "fence_records": sum(a[0] for a in fence_appends),
            "longest_batch_build_ms": round(max((a[2] - a[1] for a in fence_appends), default=0) * 1000, 1),
            "batches_replayed_by_the_state_machine": h.sm.replayed_batches,
            "heartbeats_answered_since_victim_stopped": sum(b.heartbeats for b in brokers[1:]) - hb_before,
            "max_event_loop_stall_s": max_stall,
            "victim_led_after": still_led,
            "victim_in_isr_after": still_isr,
            "other_brokers_fenced": others_fenced,
            "heartbeat_errors": [e for b in brokers for e in b.errors][:5],
            "profile": prof,
        }
    finally:
        active_log.removeHandler(watch)
        await h.stop()


WHAT_IFS = {
    "gc-freeze": "gc.freeze() once the controller has loaded its image",
    "gc-pause": "cyclic GC disabled from the fencing decision until it is committed",
}


def bench_fencing(work: Path, partitions: int, profile: Path | None, what_if: str | None = None) -> dict[str, Any]:
    label = f" [WHAT-IF: {WHAT_IFS[what_if]}]" if what_if else ""
    print(
        f"\n[4] fencing a broker leading {partitions // 3:,} of {partitions:,} partitions (3 brokers, RF 3){label} ..."
    )
    r = uvloop.run(_fencing(work / f"fencing-{what_if or 'as-is'}", partitions, profile, what_if))
    r["what_if"] = WHAT_IFS[what_if] if what_if else None
    gc.unfreeze()
    gc.enable()
    print(
        f"    decision -> committed: {r['fence_s']:.2f} s wall, {r['fence_cpu_s']:.2f} s CPU "
        f"({r['fence_gc_s']:.2f} s in GC, {r['fence_gc_full_collections']} full; event loop stalled up to "
        f"{r['max_event_loop_stall_s']:.2f} s); victim leads "
        f"{r['victim_led_after']} (was {r['victim_led_before']:,}); other brokers fenced: {r['other_brokers_fenced']}"
    )
    return r


# ----------------------------------------------------------------------------- 5. real cluster writes


CLUSTER_PROPS = {
    # Kafka's quorum timing (a loaded 2-core machine makes faster timeouts flap) ...
    "controller.quorum.election.timeout.ms": "1000",
    "controller.quorum.fetch.timeout.ms": "2000",
    # ... faster broker liveness so that the brokers are unfenced quickly.
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": "9000",
    "auto.leader.rebalance.enable": "false",
}


class BenchCluster:
    def __init__(self, root: Path, controllers: int = 3, brokers: int = 3) -> None:
        self.root = root
        self.cluster_id = random_uuid()
        self.base = free_cluster_base(controllers, brokers)
        self.plans: dict[int, NodePlan] = {}
        for plan in plan_cluster(root, controllers, self.base, brokers):
            plan.properties.update(CLUSTER_PROPS)
            self.plans[plan.node_id] = plan
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.http = httpx.Client(timeout=15.0)

    def rest(self, node_id: int) -> str:
        return self.plans[node_id].properties["rest.listener"]

    def url(self, node_id: int, path: str = "") -> str:
        return f"{self.rest(node_id)}/v3/clusters/{self.cluster_id}{path}"

    def port(self, node_id: int) -> int:
        return int(self.plans[node_id].properties["listeners"].rsplit(":", 1)[1])

    @property
    def controllers(self) -> list[int]:
        return sorted(i for i, p in self.plans.items() if p.role == "controller")

    @property
    def brokers(self) -> list[int]:
        return sorted(i for i, p in self.plans.items() if p.role == "broker")

    def start(self) -> None:
        for node_id, plan in self.plans.items():
            self.procs[node_id] = start_node(plan, self.cluster_id)

    def stop(self) -> None:
        """SIGTERM every node we started (by pid), SIGKILL what is still running after 15 s."""
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        with contextlib.suppress(Exception):
            self.http.close()

    def check_alive(self) -> None:
        for node_id, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"node {node_id} exited ({proc.returncode}); see {self.plans[node_id].log_file}")

    def wait(self, what: str, pred: Callable[[], Any], timeout_s: float) -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                value = pred()
            except (httpx.HTTPError, KeyError, ValueError):
                value = None
            if value:
                return value
            time.sleep(0.1)
        raise RuntimeError(f"timed out waiting for {what} (see {self.root})")

    def quorum(self) -> dict[str, Any] | None:
        for i in self.controllers:
            with contextlib.suppress(httpx.HTTPError):
                r = self.http.get(self.url(i, "/quorum/status"), timeout=3.0)
                if r.status_code == 200:
                    return dict(r.json())
        return None

    def leader(self) -> tuple[int, int]:
        def found() -> tuple[int, int] | None:
            q = self.quorum()
            if q is None or q["leader_id"] < 0 or q["high_watermark"] <= 0:
                return None
            return int(q["leader_id"]), int(q["leader_epoch"])

        return self.wait("an active controller", found, 60)  # type: ignore[no-any-return]

    def wait_ready(self) -> None:
        self.wait(
            "every node's REST",
            lambda: all(self.http.get(f"{self.rest(i)}/v3/clusters", timeout=2).status_code == 200 for i in self.plans),
            90,
        )
        leader, _ = self.leader()

        def unfenced() -> bool:
            for node in self.plans:
                data = self.http.get(self.url(node, "/brokers")).json()["data"]
                ok = {b["broker_id"] for b in data if not b["fenced"]}
                if not set(self.brokers) <= ok:
                    return False
            return True

        self.wait("every broker unfenced everywhere", unfenced, 90)

    def create_topics(self, names: list[str]) -> None:
        leader, _ = self.leader()
        for name in names:
            r = self.http.post(
                self.url(leader, "/topics"), json={"topic_name": name, "partitions_count": 1, "replication_factor": 3}
            )
            if r.status_code not in (201, 409):
                raise RuntimeError(f"create {name}: {r.status_code} {r.text}")

        def visible(node: int) -> bool:
            return all(self.http.get(self.url(node, f"/topics/{n}")).status_code == 200 for n in names[-3:])

        for node in self.plans:
            self.wait(f"the topics on node {node}", functools.partial(visible, node), 30)


@dataclass(slots=True)
class WriteLog:
    done: list[tuple[float, float]] = field(default_factory=list)  # (start, end) of successful writes
    errors: collections.Counter[str] = field(default_factory=collections.Counter)


async def _kafka_client(
    host: str, port: int, topic: str, index: int, stop_at: float, log_: WriteLog, counter: Iterator[int]
) -> None:
    peer = PeerClient(host, port, connect_timeout_s=5.0, request_timeout_s=30.0)
    correlation = 0
    try:
        while time.perf_counter() < stop_at:
            correlation += 1
            value = str(3_600_000 + next(counter))
            req = IncrementalAlterConfigsRequest(
                (
                    AlterConfigsResource(
                        ConfigResourceType.TOPIC, topic, (AlterConfigOp("retention.ms", AlterConfigOpType.SET, value),)
                    ),
                )
            )
            t0 = time.perf_counter()
            try:
                frame, key, version = admin_codec.encode_admin_request(
                    req, correlation_id=correlation, client_id=f"bench-{index}"
                )
                raw = await peer.send(frame, correlation, key, version)
                resp = admin_codec.decode_admin_response(key, version, raw, req)
            except Exception as exc:  # noqa: BLE001 - counted
                log_.errors[type(exc).__name__] += 1
                await asyncio.sleep(0.05)
                continue
            assert isinstance(resp, IncrementalAlterConfigsResponse)
            code = resp.resources[0].error_code if resp.resources else -1
            if code:
                log_.errors[f"error_code {code}"] += 1
                await asyncio.sleep(0.05)
                continue
            log_.done.append((t0, time.perf_counter()))
    finally:
        await peer.close()


async def _kafka_shared_client(
    peer: PeerClient, topic: str, index: int, stop_at: float, log_: WriteLog, counter: Iterator[int]
) -> None:
    """Like _kafka_client, but every client pipelines over one shared connection (what a
    broker's ControllerClient does when it forwards the REST writes it receives)."""
    while time.perf_counter() < stop_at:
        correlation = next(counter) & 0x7FFFFFFF
        value = str(3_600_000 + correlation)
        req = IncrementalAlterConfigsRequest(
            (
                AlterConfigsResource(
                    ConfigResourceType.TOPIC, topic, (AlterConfigOp("retention.ms", AlterConfigOpType.SET, value),)
                ),
            )
        )
        t0 = time.perf_counter()
        try:
            frame, key, version = admin_codec.encode_admin_request(
                req, correlation_id=correlation, client_id=f"bench-shared-{index}"
            )
            raw = await peer.send(frame, correlation, key, version)
            resp = admin_codec.decode_admin_response(key, version, raw, req)
        except Exception as exc:  # noqa: BLE001 - counted
            log_.errors[type(exc).__name__] += 1
            await asyncio.sleep(0.05)
            continue
        assert isinstance(resp, IncrementalAlterConfigsResponse)
        code = resp.resources[0].error_code if resp.resources else -1
        if code:
            log_.errors[f"error_code {code}"] += 1
            await asyncio.sleep(0.05)
            continue
        log_.done.append((t0, time.perf_counter()))


async def _rest_client(
    base: str, topic: str, stop_at: float, log_: WriteLog, counter: Iterator[int], style: str
) -> None:
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    async with httpx.AsyncClient(base_url=base, timeout=30.0, limits=limits) as client:
        while time.perf_counter() < stop_at:
            value = str(3_600_000 + next(counter))
            t0 = time.perf_counter()
            try:
                if style == "alter":
                    r = await client.post(
                        f"/topics/{topic}/configs:alter", json={"data": [{"name": "retention.ms", "value": value}]}
                    )
                else:
                    r = await client.put(f"/topics/{topic}/configs/retention.ms", json={"value": value})
            except httpx.HTTPError as exc:
                log_.errors[type(exc).__name__] += 1
                await asyncio.sleep(0.05)
                continue
            if r.status_code != 204:
                log_.errors[f"HTTP {r.status_code}"] += 1
                await asyncio.sleep(0.05)
                continue
            log_.done.append((t0, time.perf_counter()))


async def _rest_raw_client(
    base: str, topic: str, stop_at: float, log_: WriteLog, counter: Iterator[int], style: str
) -> None:
    """The same REST write as `_rest_client`, from a minimal HTTP/1.1 keep-alive client (one
    connection, the request bytes built by hand, the answer's head parsed for its status and
    Content-Length). The clients share the 2 cores with the cluster: httpx costs ~0.6 ms of CPU
    per request here, about 10x the Kafka-protocol client, and that CPU is taken from the nodes.
    This client costs about what the Kafka one does, so the two paths compare the servers."""
    url = httpx.URL(base)
    host, port, prefix = url.host, url.port or 80, url.raw_path.decode().rstrip("/")
    reader, writer = await asyncio.open_connection(host, port)
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if style == "alter":
        method, path = "POST", f"{prefix}/topics/{topic}/configs:alter"
    else:
        method, path = "PUT", f"{prefix}/topics/{topic}/configs/retention.ms"
    head = f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
    try:
        while time.perf_counter() < stop_at:
            value = str(3_600_000 + next(counter))
            if style == "alter":
                body = ('{"data":[{"name":"retention.ms","value":"' + value + '"}]}').encode()
            else:
                body = ('{"value":"' + value + '"}').encode()
            t0 = time.perf_counter()
            try:
                writer.write(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
                answer = await reader.readuntil(b"\r\n\r\n")
                status = int(answer[9:12])
                length = 0
                for line in answer.split(b"\r\n")[1:]:
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                if length:
                    await reader.readexactly(length)
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
                log_.errors[type(exc).__name__] += 1
                await asyncio.sleep(0.05)
                writer.close()
                reader, writer = await asyncio.open_connection(host, port)
                continue
            if status != 204:
                log_.errors[f"HTTP {status}"] += 1
                await asyncio.sleep(0.05)
                continue
            log_.done.append((t0, time.perf_counter()))
    finally:
        writer.close()


async def _drive(make: Callable[[int, float, WriteLog, Iterator[int]], Any], clients: int, total_s: float) -> WriteLog:
    log_ = WriteLog()
    counter = iter(range(10**12))
    stop_at = time.perf_counter() + total_s
    await asyncio.gather(*(make(i, stop_at, log_, counter) for i in range(clients)))
    return log_


def _window_stats(log_: WriteLog, w0: float, w1: float) -> dict[str, Any]:
    inside = [(s, e) for s, e in log_.done if w0 <= e <= w1]
    lat = sorted((e - s) * 1000 for s, e in inside if s >= w0)
    return {
        "writes": len(inside),
        "writes_per_s": round(len(inside) / (w1 - w0), 1),
        "latency_ms": {
            "p50": round(percentile(lat, 0.5) or 0, 2),
            "p99": round(percentile(lat, 0.99) or 0, 2),
            "max": round(lat[-1], 2) if lat else None,
        },
        "errors": dict(log_.errors),
    }


def _run_path(
    cluster: BenchCluster,
    name: str,
    make: Callable[[int, float, WriteLog, Iterator[int]], Any],
    clients: int,
    warmup_s: float,
    window_s: float,
    profile: Path | None,
    profile_pids: dict[str, int],
) -> dict[str, Any]:
    """Run the clients for warmup + window (+ a short tail); count what completed in the window."""
    leader_before = cluster.leader()
    result: dict[str, Any] = {"path": name, "clients": clients, "warmup_s": warmup_s, "window_s": window_s}
    marks: dict[str, Any] = {}

    async def main() -> WriteLog:
        task = asyncio.create_task(_drive(make, clients, warmup_s + window_s + 0.5))
        await asyncio.sleep(warmup_s)
        marks["w0"] = time.perf_counter()
        marks["wall0"] = time.time()
        marks["c0"] = time.process_time()
        marks["load0"] = loadavg()
        marks["nodes0"] = {n: proc_cpu_s(p.pid) for n, p in cluster.procs.items()}
        marks["wait0"] = {n: sched_wait_s(p.pid) for n, p in cluster.procs.items()}
        marks["self_wait0"] = sched_wait_s()
        marks["m0"] = machine_cpu()
        await asyncio.to_thread(marks["fsyncs"].start)
        await asyncio.sleep(window_s)
        await asyncio.to_thread(marks["fsyncs"].stop)
        marks["w1"] = time.perf_counter()
        marks["wall1"] = time.time()
        marks["c1"] = time.process_time()
        marks["load1"] = loadavg()
        marks["nodes1"] = {n: proc_cpu_s(p.pid) for n, p in cluster.procs.items()}
        marks["wait1"] = {n: sched_wait_s(p.pid) for n, p in cluster.procs.items()}
        marks["self_wait1"] = sched_wait_s()
        marks["m1"] = machine_cpu()
        return await task

    fsyncs = FsyncCounter({str(n): p.pid for n, p in cluster.procs.items()}, (profile or cluster.root) / f"perf-{name}")
    marks["fsyncs"] = fsyncs
    spies: list[tuple[str, PySpy]] = []
    if profile is not None and PySpy.available():
        spies = [(label, PySpy(pid, profile / f"5-{name}-{label}.pyspy.txt")) for label, pid in profile_pids.items()]
    for _, spy in spies:
        spy.__enter__()
    try:
        log_ = uvloop.run(main())
    finally:
        for _, spy in spies:
            spy.__exit__(None, None, None)
    stats = _window_stats(log_, marks["w0"], marks["w1"])
    window = marks["w1"] - marks["w0"]
    result.update(stats)
    result["client_cpu_s"] = round(marks["c1"] - marks["c0"], 2)
    result["client_cpu_share"] = round((marks["c1"] - marks["c0"]) / window, 2)
    result["node_cpu_share"] = {
        str(n): round((marks["nodes1"][n] - marks["nodes0"][n]) / window, 2)
        for n in cluster.procs
        if marks["nodes0"].get(n) is not None and marks["nodes1"].get(n) is not None
    }
    result["node_runq_wait_share"] = {
        str(n): round((marks["wait1"][n] - marks["wait0"][n]) / window, 2)
        for n in cluster.procs
        if marks["wait0"].get(n) is not None and marks["wait1"].get(n) is not None
    }
    if marks["self_wait0"] is not None and marks["self_wait1"] is not None:
        result["client_runq_wait_share"] = round((marks["self_wait1"] - marks["self_wait0"]) / window, 2)
    result["machine_busy"] = busy_share(marks["m0"], marks["m1"])
    writes = max(1, stats["writes"])
    result["cpu_us_per_write"] = {
        str(n): round(1e6 * (marks["nodes1"][n] - marks["nodes0"][n]) / writes)
        for n in cluster.procs
        if marks["nodes0"].get(n) is not None and marks["nodes1"].get(n) is not None
    }
    result["cpu_us_per_write"]["client"] = round(1e6 * (marks["c1"] - marks["c0"]) / writes)
    result["window_wall_clock"] = [marks["wall0"], marks["wall1"]]
    counts = fsyncs.counts
    result["fsyncs_per_s"] = {n: (round(c / window, 1) if c is not None else None) for n, c in counts.items()}
    leader_fsyncs = counts.get(str(leader_before[0]))
    if leader_fsyncs:
        result["writes_per_leader_fsync"] = round(stats["writes"] / leader_fsyncs, 2)
    result["loadavg_before"] = marks["load0"]
    result["loadavg_after"] = marks["load1"]
    leader_after = cluster.leader()
    result["leader"] = {"before": list(leader_before), "after": list(leader_after)}
    if spies:
        result["profiles"] = {}
        for label, spy in spies:
            summary = summarize_profile(spy.out)
            result["profiles"][label] = summary
            print_profile(f"5-{name} {label}", summary)
    print(
        f"    {name}: {stats['writes_per_s']:,.0f} writes/s, p50 {stats['latency_ms']['p50']} ms, "
        f"p99 {stats['latency_ms']['p99']} ms, errors {stats['errors']}; client CPU {result['client_cpu_share']:.0%}, "
        f"nodes CPU {result['node_cpu_share']}, run-queue wait {result['node_runq_wait_share']}, "
        f"machine busy {result['machine_busy']}; fsyncs/s {result['fsyncs_per_s']}",
        flush=True,
    )
    return result


# The three client paths run in ROUNDS interleaved rounds (kafka, rest-on-broker,
# rest-on-active-controller, kafka, ...), each a warm-up plus a WINDOW_S window, so that a
# change in the shared machine's load hits every path alike; each path reports its median
# round, and each REST/Kafka ratio is the median of the ratios within a round.
ROUNDS = 3
WINDOW_S = 5.0


def bench_cluster_writes(work: Path, quick: bool, profile: Path | None, clients: int = 64) -> dict[str, Any]:
    warmup, window = (2.0, 5.0) if quick else (2.0, WINDOW_S)
    rounds = 1 if quick else ROUNDS
    print(
        f"\n[5] committed writes from {clients} clients on a real 3+3 cluster "
        f"({rounds} interleaved rounds of {warmup} s warm-up + {window} s per path) ..."
    )
    cluster = BenchCluster(work / "cluster")
    out: dict[str, Any] = {"clients": clients, "properties": CLUSTER_PROPS, "paths": []}
    try:
        cluster.start()
        cluster.wait_ready()
        topics = [f"cfg-{i:03d}" for i in range(clients)]
        cluster.create_topics(topics)
        leader, epoch = cluster.leader()
        broker = cluster.brokers[0]
        out["active_controller"] = leader
        out["rest_broker"] = broker
        print(f"    cluster {cluster.cluster_id}: active controller {leader} (epoch {epoch}), REST broker {broker}")

        def kafka(i: int, stop_at: float, log_: WriteLog, counter: Iterator[int]) -> Any:
            return _kafka_client("127.0.0.1", cluster.port(leader), topics[i], i, stop_at, log_, counter)

        def rest_on(node: int, client: Any = _rest_raw_client) -> Callable[[int, float, WriteLog, Iterator[int]], Any]:
            def make(i: int, stop_at: float, log_: WriteLog, counter: Iterator[int]) -> Any:
                return client(cluster.url(node), topics[i], stop_at, log_, counter, "alter")

            return make

        shared: dict[str, Any] = {}

        def kafka_one_connection(i: int, stop_at: float, log_: WriteLog, counter: Iterator[int]) -> Any:
            async def run() -> None:
                if "peer" not in shared:
                    shared["peer"] = PeerClient("127.0.0.1", cluster.port(leader), request_timeout_s=60.0)
                    shared["left"] = clients
                peer = shared["peer"]
                try:
                    await _kafka_shared_client(peer, topics[i], i, stop_at, log_, counter)
                finally:
                    shared["left"] -= 1
                    if shared["left"] == 0:
                        await shared.pop("peer").close()

            return run()

        paths = [
            ("kafka-protocol-to-active-controller", kafka, {"controller": cluster.procs[leader].pid}),
            (
                "rest-on-broker",
                rest_on(broker),
                {"broker": cluster.procs[broker].pid, "controller": cluster.procs[leader].pid},
            ),
            ("rest-on-active-controller", rest_on(leader), {"controller": cluster.procs[leader].pid}),
        ]
        by_round: list[dict[str, dict[str, Any]]] = []
        for r in range(rounds):
            print(f"    round {r + 1} of {rounds}", flush=True)
            by_round.append(
                {
                    name: _run_path(cluster, name, make, clients, warmup, window, profile if r == 0 else None, pids)
                    for name, make, pids in paths
                }
            )
        for name, _, _ in paths:
            results = sorted((rr[name] for rr in by_round), key=lambda p: p["writes_per_s"])
            median = dict(results[len(results) // 2])
            median["rounds_writes_per_s"] = [rr[name]["writes_per_s"] for rr in by_round]
            out["paths"].append(median)
        kafka_name = paths[0][0]
        out["ratios_by_round"] = {
            name: [round(rr[name]["writes_per_s"] / max(1.0, rr[kafka_name]["writes_per_s"]), 3) for rr in by_round]
            for name, _, _ in paths[1:]
        }
        runs = [
            # Diagnostic, not a client path: the 64 clients share one pipelined connection.
            ("diag-kafka-64-clients-one-connection", kafka_one_connection, {}),
            # Diagnostics: the REST paths from httpx clients (their own CPU shares the 2 cores).
            ("diag-httpx-rest-on-broker", rest_on(broker, _rest_client), {}),
            ("diag-httpx-rest-on-active-controller", rest_on(leader, _rest_client), {}),
        ]
        for name, make, pids in runs:
            out["paths"].append(_run_path(cluster, name, make, clients, warmup, window, profile, pids))
        # Sanity: the last value each topic got is what the controller's image now says.
        sample = cluster.http.get(cluster.url(leader, f"/topics/{topics[0]}/configs/retention.ms")).json()
        out["sample_config_after"] = {"topic": topics[0], "retention.ms": sample.get("value")}
    finally:
        cluster.stop()
    # Group commit as the leader's log shows it: data batches (one per leader append, hence at
    # most one per leader fsync) stamped inside each window.
    if "active_controller" in out:
        part = Path(cluster.plans[out["active_controller"]].properties["metadata.log.dir"]) / METADATA_PARTITION_DIR
        batches: list[Any] = []
        for seg in sorted(part.glob("*.log")):
            decoded, _ = decode_batches(seg.read_bytes())
            batches.extend(b for b in decoded if b.control_type is None)
        for p in out["paths"]:
            lo, hi = (int(x * 1000) for x in p["window_wall_clock"])
            inside = [b for b in batches if lo <= b.timestamp_ms <= hi]
            recs = sum(len(b.records) for b in inside)
            p["leader_log"] = {
                "data_batches": len(inside),
                "batches_per_s": round(len(inside) / ((hi - lo) / 1000), 1),
                "records_per_batch": round(recs / max(1, len(inside)), 1),
            }
            print(f"    {p['path']}: leader appended {p['leader_log']}")
    return out


# ----------------------------------------------------------------------------- machine, table


def code_version() -> str:
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--", "quorum", "api", "broker"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"commit {head}" + (" + uncommitted product changes" if dirty else "")


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("PASS" if ok else "MISS")


def _times(sp: dict[str, Any]) -> list[str]:
    """wall, CPU, GC, run-queue wait columns of an in-process span."""
    wait = sp.get("runq_wait_s")
    return [
        f"{sp['wall_s']:.2f}",
        f"{sp['cpu_s']:.2f}",
        f"{sp.get('gc_s', 0):.2f}",
        "?" if wait is None else f"{wait:.2f}",
        f"{sp['loadavg_before'][0]}",
    ]


def table_rows(results: dict[str, Any], quick: bool) -> list[list[str]]:
    rows: list[list[str]] = []
    scaled = " (quick: scaled)" if quick else ""
    r1 = results.get("create_topics")
    if r1:
        rows.append(
            [
                f"1. create {r1['topics']:,} topics x {r1['partitions_per_topic']} partitions (RF 3), "
                f"{r1['topics_per_request']}/request, {r1['requests_in_flight']} in flight",
                f"{r1['topics_per_s']:,} topics/s, {r1['records_per_s']:,} records/s",
                *_times(r1["span"]),
                "none (for scale)",
                "n/a",
            ]
        )
    if r1 and "clients_64" in r1:
        one, many = r1["single_client"], r1["clients_64"]
        target = TARGET_CREATE_64_CLIENTS_S
        rows.append(
            [
                f"1b. the same from 1 client vs 64 clients ({one['topics_per_request']}/request)",
                f"{one['span']['wall_s']:.2f} s vs {many['span']['wall_s']:.2f} s "
                f"(x{r1['speedup_64_clients_vs_1']}); issue's single-client figure {ISSUE_SINGLE_CLIENT_S} s",
                *_times(many["span"]),
                f"64 clients < {target:.2f} s",
                verdict(many["span"]["wall_s"] < target) + scaled,
            ]
        )
    r1c = results.get("create_rate")
    if r1c:
        a, b = r1c["by_size"][0], r1c["by_size"][-1]
        rows.append(
            [
                f"1c. topics created one by one at {a['topics_before']:,} vs {b['topics_before']:,} topics",
                f"{a['creates_per_s']}/s vs {b['creates_per_s']}/s (ratio {r1c['ratio']}); "
                f"p50 {a['latency_ms']['p50']} vs {b['latency_ms']['p50']} ms; "
                f"CPU {a['cpu_ms_per_create']} vs {b['cpu_ms_per_create']} ms/create",
                *_times(b["span"]),
                f"ratio >= {TARGET_CREATE_RATE_RATIO}",
                verdict(r1c["ratio"] >= TARGET_CREATE_RATE_RATIO) + scaled,
            ]
        )
    for r2 in results.get("image_memory", []):
        rows.append(
            [
                f"2. image memory, {r2['partitions']:,} partitions ({r2['partitions_per_topic']}/topic)",
                f"{r2['bytes_per_partition']:.0f} B/partition",
                *_times(r2["span_under_tracemalloc"]),
                f"< {TARGET_BYTES_PER_PARTITION:.0f} B",
                verdict(r2["bytes_per_partition"] < TARGET_BYTES_PER_PARTITION) + scaled,
            ]
        )
    r3 = results.get("snapshot_load")
    if r3:
        a, b = r3["standby"], r3["fresh_broker"]
        rows.append(
            [
                f"3a. standby controller: RaftNode.start() loads a {r3['partitions']:,}-partition snapshot "
                f"({r3['snapshot_bytes'] / 2**20:.0f} MiB)",
                f"{a['span']['wall_s']:.2f} s to image",
                *_times(a["span"]),
                f"< {TARGET_SNAPSHOT_LOAD_S:.0f} s",
                verdict(a["span"]["wall_s"] < TARGET_SNAPSHOT_LOAD_S) + scaled,
            ]
        )
        rows.append(
            [
                f"3b. fresh broker (observer) fetches + installs it ({b['chunks']} FetchSnapshot chunks)",
                f"{b['span']['wall_s']:.2f} s to image (transfer {b['transfer_s']} s, "
                f"decode {b['read_and_decode_s']} s, image {b['image_from_records_and_listeners_s']} s; "
                f"loop blocked {b.get('max_event_loop_stall_s')} s)",
                *_times(b["span"]),
                f"< {TARGET_SNAPSHOT_LOAD_S:.0f} s",
                verdict(b["span"]["wall_s"] < TARGET_SNAPSHOT_LOAD_S) + scaled,
            ]
        )
    for key, r4 in results.items():
        if not key.startswith("fencing"):
            continue
        what_if = r4.get("what_if")
        rows.append(
            [
                f"4. fence a broker leading {r4['victim_led_before']:,} of {r4['partitions']:,} partitions"
                + (f" [WHAT-IF: {what_if}]" if what_if else ""),
                f"{r4['fence_s']:.2f} s decision -> committed, victim leads {r4['victim_led_after']} "
                f"(loop blocked {r4.get('max_event_loop_stall_s')} s)",
                f"{r4['fence_s']:.2f}",
                f"{r4['fence_cpu_s']:.2f}",
                f"{r4.get('fence_gc_s', 0):.2f}",
                "-",
                f"{r4['loadavg'][0]}",
                "experiment"
                if what_if
                else f"< {TARGET_FENCE_S:.0f} s, loop blocked < {TARGET_FENCE_LOOP_BLOCK_S * 1000:.0f} ms",
                "-"
                if what_if
                else verdict(
                    r4["fence_s"] < TARGET_FENCE_S
                    and r4["victim_led_after"] == 0
                    and r4["max_event_loop_stall_s"] < TARGET_FENCE_LOOP_BLOCK_S
                    and not r4["heartbeat_errors"]
                )
                + scaled,
            ]
        )
    r5 = results.get("cluster_writes")
    if r5:
        best = max((p["writes_per_s"] for p in r5["paths"] if not p["path"].startswith("diag-")), default=0)
        leader = str(r5.get("active_controller"))
        for p in r5["paths"]:
            diag = p["path"].startswith("diag-")
            cpu = p["node_cpu_share"].get(leader, 0)
            wait = p.get("node_runq_wait_share", {}).get(leader)
            rows.append(
                [
                    f"5. {p['clients']} clients, IncrementalAlterConfigs, {p['path']}",
                    f"{p['writes_per_s']:,.0f} writes/s, p50 {p['latency_ms']['p50']} ms, "
                    f"p99 {p['latency_ms']['p99']} ms"
                    + (
                        f", {p['writes_per_leader_fsync']} writes/leader fsync"
                        if p.get("writes_per_leader_fsync")
                        else ""
                    ),
                    f"{p['window_s']:.0f}",
                    f"leader {cpu:.2f} cores, client {p['client_cpu_share']:.2f} cores",
                    "-",
                    f"leader {wait:.2f} s/s" if wait is not None else "?",
                    f"{p['loadavg_before'][0]}",
                    "diagnostic" if diag else f">= {TARGET_WRITES_PER_S:,.0f}/s on one path",
                    "-" if diag else verdict(p["writes_per_s"] >= TARGET_WRITES_PER_S),
                ]
            )
        by_path = {p["path"]: p["writes_per_s"] for p in r5["paths"]}
        kafka = by_path.get("kafka-protocol-to-active-controller", 0)
        for rest_path in ("rest-on-broker", "rest-on-active-controller"):
            if rest_path in by_path and kafka:
                per_round = r5.get("ratios_by_round", {}).get(rest_path) or [by_path[rest_path] / kafka]
                ratio = sorted(per_round)[len(per_round) // 2]
                rows.append(
                    [
                        f"5. {rest_path} vs kafka-protocol-to-active-controller (same rounds)",
                        f"{by_path[rest_path]:,.0f} vs {kafka:,.0f} writes/s (median ratio {ratio:.2f}; "
                        f"per round {', '.join(f'{x:.2f}' for x in per_round)})",
                        "",
                        "",
                        "",
                        "",
                        "",
                        f"ratio >= {TARGET_REST_VS_KAFKA}",
                        verdict(ratio >= TARGET_REST_VS_KAFKA),
                    ]
                )
        rows.append(
            [
                "5. best client path",
                f"{best:,.0f} writes/s",
                "",
                "",
                "",
                "",
                "",
                f">= {TARGET_WRITES_PER_S:,.0f}/s",
                verdict(best >= TARGET_WRITES_PER_S),
            ]
        )
    return rows


HEADER = ["figure", "result", "wall s", "CPU s", "GC s", "CPU wait s", "load 1m", "target", "verdict"]


def print_table(rows: list[list[str]]) -> None:
    widths = [max(len(str(r[i])) for r in [HEADER, *rows]) for i in range(len(HEADER))]
    line = "  ".join(h.ljust(w) for h, w in zip(HEADER, widths, strict=True))
    print("\n" + line)
    print("-" * len(line))
    for r in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)))


def markdown_table(rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    out += ["| " + " | ".join(str(c).replace("|", "/") for c in r) + " |" for r in rows]
    return "\n".join(out)


# ----------------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller sizes and shorter windows (a smoke run)")
    ap.add_argument("--json-out", help="write every figure as JSON to this file")
    ap.add_argument("--only", default="1,2,3,4,5", help="comma-separated sections to run (default: all)")
    ap.add_argument("--profile", metavar="DIR", help="attach py-spy to the measured processes; raw stacks go to DIR")
    ap.add_argument(
        "--what-if",
        choices=sorted(WHAT_IFS),
        action="append",
        default=[],
        help="also run section 4 under an experiment that is not the product's behaviour (reported "
        "separately, no verdict): " + "; ".join(f"{k}: {v}" for k, v in WHAT_IFS.items()),
    )
    ap.add_argument("--dir", help="work directory (default: a new temp dir, deleted afterwards)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    only = {int(x) for x in args.only.split(",") if x.strip()}
    profile = Path(args.profile).resolve() if args.profile else None
    if profile is not None and not PySpy.available():
        print("--profile needs py-spy (pip install py-spy)", file=sys.stderr)
        return 2
    work = Path(args.dir).resolve() if args.dir else Path(tempfile.mkdtemp(prefix="bench-metadata-"))
    work.mkdir(parents=True, exist_ok=True)
    started = dt.datetime.now(dt.UTC)
    results: dict[str, Any] = {
        "date": started.isoformat(timespec="seconds"),
        "code": code_version(),
        "machine": {**machine_info(work), "py_spy": PySpy.version()},
        "quick": args.quick,
        "profiled": profile is not None,
        "loadavg_at_start": loadavg(),
        "for_scale": FOR_SCALE,
    }
    print(f"pykraft metadata benchmark, {results['date']}, {results['code']}")
    m = results["machine"]
    print(f"machine: {m['cpu_count']} x {m['cpu_model']}, {m['memory']}")
    results["fsync_probe_4k"] = fsync_probe(work)
    print(f"load average at start: {results['loadavg_at_start']}; work dir {work}")
    print(f"4 KiB write+fsync in the work dir: {results['fsync_probe_4k']}")
    try:
        if 1 in only:
            results["create_topics"] = bench_create_topics(work, args.quick, profile)
            results["create_rate"] = bench_create_rate(work, args.quick)
        if 2 in only:
            n = 200_000 if args.quick else 1_000_000
            results["image_memory"] = [bench_image_memory(n, 10), bench_image_memory(n, 1000)]
        if 3 in only:
            results["snapshot_load"] = bench_snapshot_load(work, 200_000 if args.quick else 1_000_000, profile)
        if 4 in only:
            results["fencing"] = bench_fencing(work, 30_000 if args.quick else 300_000, profile)
            for what_if in args.what_if:
                results[f"fencing_what_if_{what_if}"] = bench_fencing(
                    work, 30_000 if args.quick else 300_000, profile, what_if
                )
        if 5 in only:
            results["cluster_writes"] = bench_cluster_writes(work, args.quick, profile)
    finally:
        results["loadavg_at_end"] = loadavg()
        results["duration_s"] = round((dt.datetime.now(dt.UTC) - started).total_seconds(), 1)
        rows = table_rows(results, args.quick)
        results["table_markdown"] = markdown_table(rows)
        print_table(rows)
        print(f"\nload average at end: {results['loadavg_at_end']}; total {results['duration_s']} s")
        for line in FOR_SCALE:
            print(f"for scale: {line}")
        if args.json_out:
            Path(args.json_out).write_text(json.dumps(results, indent=2, default=str) + "\n")
            print(f"JSON: {args.json_out}")
        if not args.keep and not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
