"""Timestamps along a transaction's end in a broker, for diag_txn_latency.py.

Wraps (never changes the behaviour of) the transaction coordinator's requests, records and
their commits, the marker sender's requests, the leaders' WriteTxnMarkers, transactional
Produce requests, and every segment write that takes over 0.5 ms (with the thread's time on
the CPU and waiting for one, from /proc/self/task/<tid>/schedstat; the rest is time asleep:
in the kernel, or waiting for the GIL). Wall-clock times (time.time(), comparable across the
processes of one machine), one JSON list per line in $PYKRAFT_TXN_DIAG_OUT/txn-<pid>.jsonl,
written as they happen (line-buffered).
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

from broker.log import segment as segment_mod
from broker.replica import manager as manager_mod
from broker.txn import marker_sender as marker_sender_mod
from broker.txn import runtime as runtime_mod
from broker.txn.metadata import TxnState

OUT = open(  # noqa: SIM115 - open for the process's life
    os.path.join(os.environ["PYKRAFT_TXN_DIAG_OUT"], f"txn-{os.getpid()}.jsonl"), "w", buffering=1
)
SLOW_WRITE_S = 0.0005


def ev(*fields: Any) -> None:
    OUT.write(json.dumps([time.time(), *fields]) + "\n")


R: Any = runtime_mod.TxnRuntime
_end_txn, _add_partitions, _dispatch, _appended = R.end_txn, R.add_partitions, R._dispatch, R._appended


async def end_txn(self: Any, req: Any) -> Any:
    ev("endtxn_in", self.node_id)
    code = await _end_txn(self, req)
    ev("endtxn_out", self.node_id, int(code))
    return code


async def add_partitions(self: Any, req: Any) -> Any:
    ev("addp_in", self.node_id, len(req.partitions))
    code = await _add_partitions(self, req)
    ev("addp_out", self.node_id, int(code))
    return code


def dispatch(self: Any, p: Any, out: Any) -> None:
    if out.writes:
        ev("write", self.node_id, [None if w.value is None else TxnState(w.value.transaction_status).name
                                   for w in out.writes])  # fmt: skip
    if out.markers:
        ev("markers", self.node_id, sum(len(m.partitions) for m in out.markers))
    _dispatch(self, p, out)


def appended(self: Any, p: Any, entries: Any, code: Any) -> None:
    ev("appended", self.node_id, int(code))
    _appended(self, p, entries, code)


R.end_txn, R.add_partitions, R._dispatch, R._appended = end_txn, add_partitions, dispatch, appended

M: Any = marker_sender_mod.MarkerSender
_exchange = M._exchange


async def exchange(self: Any, broker: int, markers: Any) -> Any:
    ev("mk_send", self.node_id, broker, sum(len(tps) for _, tps in markers))
    try:
        return await _exchange(self, broker, markers)
    finally:
        ev("mk_recv", self.node_id, broker)


M._exchange = exchange

RM: Any = manager_mod.ReplicaManager
_write_txn_markers, _produce = RM.write_txn_markers, RM.produce


_PROFILE: Any = None
_profiled = [0]
if os.environ.get("PYKRAFT_TXN_DIAG_PROFILE"):
    import cProfile

    _PROFILE = cProfile.Profile()


async def write_txn_markers(self: Any, markers: Any, timeout_ms: int) -> Any:
    """With $PYKRAFT_TXN_DIAG_PROFILE set, the main thread runs under cProfile from each
    WriteTxnMarkers' arrival to its answer (all it does then, not only the markers' work),
    dumped to prof-<pid>.out every 5 answers."""
    ev("wtm_in", self.node_id, sum(len(m.partitions) for m in markers))
    if _PROFILE is not None:
        _PROFILE.enable()
    try:
        return await _write_txn_markers(self, markers, timeout_ms)
    finally:
        if _PROFILE is not None:
            _PROFILE.disable()
            _profiled[0] += 1
            if _profiled[0] % 5 == 0:
                _PROFILE.dump_stats(os.path.join(os.environ["PYKRAFT_TXN_DIAG_OUT"], f"prof-{os.getpid()}.out"))
        ev("wtm_out", self.node_id)


async def produce(self: Any, params: Any) -> Any:
    if params.transactional_id is None:
        return await _produce(self, params)
    ev("prod_in", self.node_id)
    try:
        return await _produce(self, params)
    finally:
        ev("prod_out", self.node_id)


_fetch = RM.fetch


async def fetch(self: Any, params: Any) -> Any:
    """A follower's Fetch, at its answer: (arrived, follower, partitions with records, bytes)."""
    if params.replica_id < 0:
        return await _fetch(self, params)
    t0 = time.time()
    results = await _fetch(self, params)
    with_records = [len(r.records) for r in results if len(r.records)]
    ev("fetch", self.node_id, t0, params.replica_id, len(with_records), sum(with_records))
    return results


RM.write_txn_markers, RM.produce, RM.fetch = write_txn_markers, produce, fetch

S: Any = segment_mod.LogSegment
_segment_append = S.append


_schedstat_fds: dict[int, int] = {}  # native thread id -> its schedstat file, kept open


def _schedstat() -> tuple[int, int]:
    """(ns on the CPU, ns waiting for one) of the calling thread."""
    tid = threading.get_native_id()
    fd = _schedstat_fds.get(tid)
    if fd is None:
        fd = _schedstat_fds[tid] = os.open(f"/proc/self/task/{tid}/schedstat", os.O_RDONLY)
    on_cpu, waiting, _slices = os.pread(fd, 128, 0).split()
    return int(on_cpu), int(waiting)


def segment_append(self: Any, data: Any, frames: Any) -> None:
    s0 = _schedstat()  # before the clock starts: the read itself is not the write's time
    t0 = time.perf_counter()
    try:
        _segment_append(self, data, frames)
    finally:
        took = time.perf_counter() - t0
        if took > SLOW_WRITE_S:
            s1 = _schedstat()
            ev("slow_write", took, len(data), (s1[0] - s0[0]) / 1e9, (s1[1] - s0[1]) / 1e9)


S.append = segment_append


def _sampler(main_ident: int, interval_s: float) -> None:
    """With $PYKRAFT_TXN_DIAG_SAMPLE set: every `interval_s`, the main thread's stack (the
    project's frames, innermost last), as ["sample", [qualname, ...]] events. A thread of
    this process: it runs when the main thread lets go of the GIL (every switch interval
    while it computes, at once while it waits), so busy periods are sampled more coarsely."""
    import sys

    while True:
        time.sleep(interval_s)
        frame = sys._current_frames().get(main_ident)
        names: list[str] = []
        while frame is not None:
            code = frame.f_code
            if "/broker/" in code.co_filename or "/quorum/" in code.co_filename:
                names.append(code.co_qualname)
            frame = frame.f_back
        ev("sample", names[::-1][-8:])


if os.environ.get("PYKRAFT_TXN_DIAG_SAMPLE"):
    threading.Thread(target=_sampler, args=(threading.main_thread().ident, 0.001), daemon=True).start()
