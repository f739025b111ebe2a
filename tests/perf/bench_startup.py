"""Start-up and event-loop benchmark of a broker's log layer (issue 19, bugs 5, 6 and 9).

    PYTHONPATH=. .venv/bin/python tests/perf/bench_startup.py                 # both parts (~2-4 min)
    PYTHONPATH=. .venv/bin/python tests/perf/bench_startup.py --only load     # the log layer only
    PYTHONPATH=. .venv/bin/python tests/perf/bench_startup.py --only leaders  # the real broker only
    ... --partitions 100 --segments 20 --segment-mib 1 --tail-mib 256 --moves 1000 --json-out r.json

1. **Load** (in-process, the log layer: `LogManager.load()`, what a broker does before it
   serves). A log dir under --dir (default /tmp) gets --partitions x --segments segments
   of --segment-mib (default 100 x 20 x 1 MiB: 2 GiB in 2,000 segments), written through
   the real `PartitionLog` (`append_as_follower` of 64 KiB batches of 1 KB records), as a
   broker that runs for a while would: everything but the last --tail-mib (256 MiB, spread
   over the partitions) is written, the disk queue drained and the recovery points
   checkpointed, then the tail is written and the process "dies" (descriptors closed; no
   flush, no checkpoint, no clean-shutdown marker: what kill -9 leaves, the page cache
   included). Then, timed:
   - `unclean`: `load()` after that crash; beside it `scan`: the time to CRC-walk
     (`scan_frames`) the bytes of the segments that load re-walked, read from the page
     cache. Target: unclean - scan < 2 s.
   - `clean`: `close()` (a clean stop), then `load()` again. Target: < 2 s.
   - descriptors this process holds once the log dir is loaded and every segment was read
     (its indexes mapped): one per segment is the goal.
   - `stop`: one more batch appended to every partition (every log dirty), then `close()`
     (a clean stop: fsyncs, producer snapshots, checkpoints, the clean-shutdown marker).
   The data is in the page cache (just written), so the figures are CPU and syscalls, not
   disk reads. The directory is deleted at the end.
2. **Leaders** (real processes: 1 controller, 2 brokers, `tests/integration/metadata_cluster`
   on free ports, data under --dir, Kafka's broker session timeout 9 s and heartbeat 2 s):
   a topic of --moves partitions, RF 2, every leader on broker A. Descriptors of each
   broker (`/proc/PID/fd`). Then broker A gets SIGTERM: its controlled shutdown moves its
   --moves leaderships to broker B while a probe sends
   ApiVersions to B every 2 ms over one connection and times each answer: B's event-loop
   lag shows as the probe's latency. Prints the probe's p50/p99/max during the move, and
   how long the move took. Target: max < 50 ms. With --profile FILE, py-spy samples broker B
   from 1 s before the SIGTERM for 6 s (collapsed stacks, `--format raw`).

The nodes and the in-process part run the code of the repository holding this script (it
puts that repository first on sys.path and PYTHONPATH), so a copy of the script in an older
checkout measures that code.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))
sys.path.insert(0, str(REPO))
os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)

from kafka.record.default_records import DefaultRecordBatchBuilder  # noqa: E402

from broker.log import LogManager  # noqa: E402
from quorum.storage.record_batch import scan_frames  # noqa: E402

MIB = 1 << 20
BATCH_RECORDS = 64
RECORD_BYTES = 1000


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def template_batch() -> bytes:
    b = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, batch_size=1 << 22)
    now = int(time.time() * 1000)
    for i in range(BATCH_RECORDS):
        b.append(i, timestamp=now + i, key=None, value=os.urandom(RECORD_BYTES), headers=[])
    return bytes(b.build())


def chunk_at(template: bytes, base_offset: int, batches: int, epoch: int = 1) -> bytes:
    """`batches` copies of the template at consecutive offsets (base offset and partition
    leader epoch are outside the CRC: patching them keeps every batch valid)."""
    out = bytearray(template * batches)
    for i in range(batches):
        struct.pack_into(">q", out, i * len(template), base_offset + i * BATCH_RECORDS)
        struct.pack_into(">i", out, i * len(template) + 12, epoch)
    return bytes(out)


def recovery_checkpoint(logs: LogManager) -> None:
    """Drain the disk queues and write the recovery points (older code: its checkpoint)."""
    drain = getattr(logs, "drain", None)
    if drain is not None:
        drain()
        logs.checkpoint_recovery_points()
        drain()
    else:
        logs.checkpoint(logs.high_watermark_checkpoint())


def die(logs: LogManager) -> None:
    """What kill -9 leaves: descriptors closed, nothing flushed, checkpointed or marked."""
    for plog in logs.all_logs():
        for seg in plog.segments:
            os.close(seg.fd)
    drain = getattr(logs, "drain", None)
    if drain is not None:
        drain()  # the queued fsyncs may or may not have run at a real crash; let them finish


def run_load(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    root = work / "logs"
    defaults = {"log.segment.bytes": str(args.segment_mib * MIB)}
    template = template_batch()
    per_segment = (args.segment_mib * MIB) // len(template)  # whole batches in one segment
    tail_total = max(1, -(-(args.tail_mib * MIB) // (per_segment * len(template))))  # segments, rounded up
    total = args.partitions * args.segments
    print(f"load: writing {args.partitions} partitions x {args.segments} segments of {per_segment} batches "
          f"({per_segment * len(template) * total / 1e9:.2f} GB), the last {tail_total} segments "
          f"after the recovery-point checkpoint", flush=True)  # fmt: skip
    logs = LogManager([root], defaults)
    logs.load()
    plogs = [logs.get_or_create("bench", p, uuid.uuid4(), {}) for p in range(args.partitions)]
    t0 = time.monotonic()
    tails = [tail_total // args.partitions + (p < tail_total % args.partitions) for p in range(args.partitions)]
    for tail in (False, True):
        for plog, n in zip(plogs, tails, strict=True):
            for _ in range(n if tail else args.segments - n):
                plog.append_as_follower(chunk_at(template, plog.log_end_offset, per_segment))
        if not tail:
            recovery_checkpoint(logs)
            checkpointed = {id(p): p.recovery_point for p in plogs}  # what the file names
    written = time.monotonic() - t0
    tail_bytes = sum(s.size for p in plogs for s in p.segments if s.next_offset > checkpointed[id(p)])
    die(logs)
    print(f"load: written in {written:.1f} s; killed with {tail_bytes / MIB:.0f} MiB in the segments holding "
          "or past the checkpointed recovery points",
          flush=True)  # fmt: skip

    before = fds()
    t0 = time.monotonic()
    logs = LogManager([root], defaults)
    logs.load()
    unclean = time.monotonic() - t0
    recovered = [(p, p.recovery.segments_recovered if p.recovery else 0) for p in logs.all_logs()]
    rescanned = [seg.path for p, n in recovered for seg in p.segments[len(p.segments) - n :]] if recovered else []
    scanned_bytes = sum(path.stat().st_size for path in rescanned)
    t0 = time.monotonic()
    for path in rescanned:
        data = path.read_bytes()
        scan = scan_frames(data)
        assert scan.error is None
    scan_s = time.monotonic() - t0
    logs.close(logs.high_watermark_checkpoint())

    t0 = time.monotonic()
    logs = LogManager([root], defaults)
    logs.load()
    clean = time.monotonic() - t0
    segments = sum(len(p.segments) for p in logs.all_logs())
    for p in logs.all_logs():
        for seg in p.segments:
            seg.find(seg.base_offset)  # every index mapped, as after reads of every segment
    held = fds() - before
    for plog in logs.all_logs():  # every log dirty: one batch past its recovery point
        plog.append_as_follower(chunk_at(template, plog.log_end_offset, 1))
    t0 = time.monotonic()
    logs.close(logs.high_watermark_checkpoint())
    stop = time.monotonic() - t0
    shutil.rmtree(root, ignore_errors=True)
    return {
        "segments": segments,
        "bytes": per_segment * len(template) * total,
        "unclean_load_s": unclean,
        "segments_rescanned": len(rescanned),
        "bytes_rescanned": scanned_bytes,
        "crc_scan_s": scan_s,
        "unclean_minus_scan_s": unclean - scan_s,
        "clean_load_s": clean,
        "descriptors": held,
        "clean_stop_s": stop,
    }


# ---------------------------------------------------------------- part 2: a real broker


def api_versions_request(correlation_id: int) -> bytes:
    client = b"bench-probe"
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client)) + client
    return struct.pack(">i", len(body)) + body


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        got = sock.recv(n - len(buf))
        if not got:
            raise ConnectionError("closed")
        buf += got
    return bytes(buf)


class Probe(threading.Thread):
    """ApiVersions to one broker every `interval` s; (send time, latency s) of each."""

    def __init__(self, port: int, interval: float = 0.002) -> None:
        super().__init__(daemon=True)
        self.port, self.interval = port, interval
        self.samples: list[tuple[float, float]] = []
        self.stop_flag = threading.Event()

    def run(self) -> None:
        with socket.create_connection(("127.0.0.1", self.port), timeout=30) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            cid = 0
            while not self.stop_flag.is_set():
                cid += 1
                t0 = time.monotonic()
                sock.sendall(api_versions_request(cid))
                size = struct.unpack(">i", recv_exact(sock, 4))[0]
                recv_exact(sock, size)
                self.samples.append((t0, time.monotonic() - t0))
                time.sleep(self.interval)


def proc_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def run_leaders(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    import httpx
    from metadata_cluster import start_cluster, wait_until

    # Kafka's default broker session (9 s) and heartbeat (2 s), not the tests' fast ones.
    kafka_timings = {"broker.session.timeout.ms": "9000", "broker.heartbeat.interval.ms": "2000"}
    cluster = start_cluster(work / "cluster", controllers=1, brokers=2, ready_timeout=120, properties=kafka_timings)
    try:
        cluster.http.close()
        cluster.http = httpx.Client(timeout=120.0)  # older code answers a 1,000-partition create slowly
        a, b = cluster.broker_ids
        rest = cluster.controller_ids[0]  # polled for leaders: not the measured broker's loop
        n = args.moves
        print(f"leaders: creating {n} partitions, RF 2, all led by broker {a}", flush=True)
        idle_fds = {x: proc_fds(cluster.nodes[x].pid) for x in (a, b)}
        cluster.create_topic(
            b, "moves", partitions_count=n,
            replicas_assignments=[{"partition_id": p, "broker_ids": [a, b]} for p in range(n)],
        )  # fmt: skip

        def led_by(leader: int) -> bool:
            parts = cluster.partitions(rest, "moves")
            return len(parts) == n and all(p.get("leader_id") == leader for p in parts)

        wait_until(f"{n} leaders on broker {a}", lambda: led_by(a), 180, interval=0.5)

        def isr_full() -> bool:
            return all(sorted(p["isr"]) == sorted((a, b)) for p in cluster.partitions(rest, "moves"))

        wait_until("every ISR full", isr_full, 120, interval=0.5)
        time.sleep(3)  # followers caught up, checkpoints written
        loaded_fds = {x: proc_fds(cluster.nodes[x].pid) for x in (a, b)}
        probe = Probe(int(cluster.nodes[b].plan.properties["listeners"].rsplit(":", 1)[1]))
        probe.start()
        spy = None
        if args.profile:
            spy = subprocess.Popen(
                [str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(cluster.nodes[b].pid),
                 "--rate", "250", "--duration", "6", "--format", "raw", "-o", args.profile, "--nonblocking"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
        time.sleep(1.0)
        t_move = time.monotonic()
        os.kill(cluster.nodes[a].pid, signal.SIGTERM)
        wait_until(f"{n} leaders on broker {b}", lambda: led_by(b), 180, interval=0.2)
        moved = time.monotonic() - t_move
        time.sleep(1.0)
        probe.stop_flag.set()
        probe.join(10)
        if spy is not None:
            spy.wait(30)
        during = sorted(lat for t, lat in probe.samples if t >= t_move - 0.05)
        before = sorted(lat for t, lat in probe.samples if t < t_move)
        proc = cluster.nodes[a].proc
        if proc is not None:
            proc.wait(60)
        return {
            "partitions": n,
            "descriptors_idle": idle_fds,
            "descriptors_with_partitions": loaded_fds,
            "move_s": moved,
            "probe_before_p50_ms": 1000 * before[len(before) // 2] if before else None,
            "probe_during_p50_ms": 1000 * during[len(during) // 2] if during else None,
            "probe_during_p99_ms": 1000 * during[int(len(during) * 0.99)] if during else None,
            "probe_during_max_ms": 1000 * during[-1] if during else None,
            "probe_samples": len(during),
        }
    finally:
        cluster.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=("load", "leaders"))
    ap.add_argument("--dir", default="/tmp", help="parent of the temporary data directory")
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--segments", type=int, default=20, help="segments per partition")
    ap.add_argument("--segment-mib", type=int, default=1)
    ap.add_argument("--tail-mib", type=int, default=256, help="written after the last recovery-point checkpoint")
    ap.add_argument("--moves", type=int, default=1000, help="leaderships moved to one broker")
    ap.add_argument("--json-out")
    ap.add_argument("--profile", help="py-spy collapsed stacks of the receiving broker during the move")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-startup-", dir=args.dir))
    results: dict[str, Any] = {"code": str(REPO), "loadavg": os.getloadavg()}
    try:
        if args.only in (None, "load"):
            results["load"] = r = run_load(args, work)
            print(
                f"  clean start:   {r['clean_load_s']:.2f} s for {r['segments']} segments, "
                f"{r['bytes'] / 1e9:.2f} GB  [{'PASS' if r['clean_load_s'] < 2 else 'MISS'} < 2 s]"
            )
            print(
                f"  after kill -9: {r['unclean_load_s']:.2f} s, of which CRC scan of the "
                f"{r['segments_rescanned']} segments ({r['bytes_rescanned'] / MIB:.0f} MiB) re-walked: "
                f"{r['crc_scan_s']:.2f} s  [{'PASS' if r['unclean_minus_scan_s'] < 2 else 'MISS'} "
                f"{r['unclean_minus_scan_s']:.2f} s < 2 s]"
            )
            print(f"  descriptors held for {r['segments']} segments (every index mapped): {r['descriptors']}")
            print(f"  clean stop, every one of the {args.partitions} logs dirty: {r['clean_stop_s']:.2f} s")
        if args.only in (None, "leaders"):
            results["leaders"] = r = run_leaders(args, work)
            print(
                f"  descriptors: idle {r['descriptors_idle']}, with {r['partitions']} partitions "
                f"{r['descriptors_with_partitions']}"
            )
            print(
                f"  {r['partitions']} leaderships moved in {r['move_s']:.1f} s; probe of the receiving "
                f"broker: before p50 {r['probe_before_p50_ms']:.1f} ms; during p50 "
                f"{r['probe_during_p50_ms']:.1f} / p99 {r['probe_during_p99_ms']:.1f} / max "
                f"{r['probe_during_max_ms']:.1f} ms  [{'PASS' if r['probe_during_max_ms'] < 50 else 'MISS'} < 50 ms]"
            )
        results["loadavg_end"] = os.getloadavg()
        print(
            f"  load average: start {results['loadavg'][0]:.2f}, end {results['loadavg_end'][0]:.2f} (2 shared cores)"
        )
        if args.json_out:
            Path(args.json_out).write_text(json.dumps(results, indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
