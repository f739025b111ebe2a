"""Timestamps along the commit path of a node, for diag_commit_latency.py.

Wraps (never changes the behaviour of) os.fsync, RaftCore.propose/handle and
RaftNode._persist/_dispatch/_step, and records wall-clock times (time.time(),
comparable across the node processes of one machine). Written as JSON to
$PYKRAFT_DIAG_OUT when the process exits normally (SIGTERM).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import sys
import time

from quorum.node import raft_node
from quorum.raft import core as raft_core
from quorum.raft.messages import (
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    VoteRequest,
    VoteResponse,
)
from quorum.raft.roles import FollowerState


def _out_path() -> str:
    """$PYKRAFT_DIAG_OUT, or with "auto" a file next to the node's --events-file."""
    out = os.environ["PYKRAFT_DIAG_OUT"]
    if out == "auto" and "--events-file" in sys.argv:
        events = sys.argv[sys.argv.index("--events-file") + 1]
        return os.path.join(os.path.dirname(events), f"diag-{os.getpid()}.json")
    return out


OUT = _out_path()
if os.environ.get("PYKRAFT_DIAG_DEBUG"):
    # Request failures are logged at DEBUG by the driver; let them through to node.log.
    logging.getLogger("quorum.node.raft_node").setLevel(logging.DEBUG)
now = time.time
rec: dict[str, list] = {
    "fsync": [],  # [t_end, ms]
    "propose": [],  # [t, first_offset, count]  (leader)
    "persist": [],  # [t_start, t_end, end_offset, n_batches, role]
    "send_fetch_req": [],  # [t, fetch_offset]  (follower)
    "send_fetch_resp": [],  # [t, destination, end_offset_of_last_batch]  (leader, with data)
    "recv_fetch_req": [],  # [t, source, fetch_offset]  (leader)
    "recv_fetch_resp": [],  # [t, end_offset_of_last_batch, hw]  (follower, with data)
    "hw": [],  # [t, hw]  (every node, when it moves)
    "step": [],  # [t_start, ms]
    "control": [],  # [t, "recv"|"send", kind, peer, detail...] for Vote / EndQuorumEpoch
    "gc": [],  # [t_start, ms, generation]  cyclic-GC collections
    "runq": [],  # [t, ns]  cumulative run-queue wait of the main thread (/proc/self/schedstat), per step
}

import gc  # noqa: E402

_gc_t0 = [0.0, 0.0]


def _gc_cb(phase: str, info: dict) -> None:
    if phase == "start":
        _gc_t0[0] = now()
        _gc_t0[1] = time.perf_counter()
    else:
        rec["gc"].append([_gc_t0[0], (time.perf_counter() - _gc_t0[1]) * 1000, info.get("generation")])


gc.callbacks.append(_gc_cb)


def _runq_ns() -> int:
    try:
        with open("/proc/self/schedstat") as f:
            return int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return 0


_fsync = os.fsync


def fsync(fd: int) -> None:
    t0 = time.perf_counter()
    try:
        _fsync(fd)
    finally:
        rec["fsync"].append([now(), (time.perf_counter() - t0) * 1000])


os.fsync = fsync

_propose = raft_core.RaftCore.propose


def propose(self, records, now_ms):
    first = _propose(self, records, now_ms)
    rec["propose"].append([now(), first, len(records)])
    return first


raft_core.RaftCore.propose = propose

_handle = raft_core.RaftCore.handle


def _follower(self):
    s = self.state
    return [s.leader_id, s.fetch_deadline, s.leader_resigned] if isinstance(s, FollowerState) else None


def handle(self, envelope, now_ms):
    m = envelope.message
    if isinstance(m, EndQuorumEpochRequest | VoteRequest | VoteResponse | EndQuorumEpochResponse) or (
        isinstance(m, FetchResponse) and isinstance(self.state, FollowerState) and self.state.leader_resigned
    ):
        before = [self.role.value, self.epoch, _follower(self)]
        result = _handle(self, envelope, now_ms)
        detail = {
            "msg": type(m).__name__,
            "from": envelope.source,
            "now_ms": now_ms,
            "before": before,
            "after": [self.role.value, self.epoch, _follower(self)],
        }
        if isinstance(m, VoteRequest | VoteResponse):
            detail["pre_vote"] = m.pre_vote
        if isinstance(m, VoteResponse):
            detail["granted"] = m.vote_granted
        if isinstance(m, EndQuorumEpochRequest):
            detail["successors"] = list(m.preferred_successors)
        if isinstance(m, FetchResponse):
            detail["error"] = int(m.error)
            detail["batches"] = len(m.batches)
        rec["control"].append([now(), "recv", detail])
        return result
    if isinstance(m, FetchRequest):
        rec["recv_fetch_req"].append([now(), m.replica_id, m.fetch_offset])
    elif isinstance(m, FetchResponse) and m.batches:
        b = m.batches[-1]
        rec["recv_fetch_resp"].append([now(), b.base_offset + len(b.records), m.high_watermark])
    return _handle(self, envelope, now_ms)


raft_core.RaftCore.handle = handle

_persist = raft_node.RaftNode._persist


def persist(self, ready):
    t0 = now()
    _persist(self, ready)
    if ready.entries:
        b = ready.entries[-1]
        rec["persist"].append([t0, now(), b.base_offset + len(b.records), len(ready.entries), self.core.role.value])


raft_node.RaftNode._persist = persist

_dispatch = raft_node.RaftNode._dispatch


def dispatch(self, messages):
    t = now()
    for env in messages:
        m = env.message
        if isinstance(m, VoteResponse | EndQuorumEpochRequest | EndQuorumEpochResponse):
            d = {"msg": type(m).__name__, "to": env.destination}
            if isinstance(m, VoteResponse):
                d["granted"] = m.vote_granted
                d["pre_vote"] = m.pre_vote
            rec["control"].append([t, "send", d])
        if isinstance(m, FetchRequest):
            rec["send_fetch_req"].append([t, m.fetch_offset])
        elif isinstance(m, FetchResponse) and m.batches:
            b = m.batches[-1]
            rec["send_fetch_resp"].append([t, env.destination, b.base_offset + len(b.records)])
    return _dispatch(self, messages)


raft_node.RaftNode._dispatch = dispatch

_step = raft_node.RaftNode._step


def step(self):
    t0 = time.perf_counter()
    w = now()
    hw0 = self.core.high_watermark if self.core is not None else None
    _step(self)
    rec["step"].append([w, (time.perf_counter() - t0) * 1000])
    rec["runq"].append([w, _runq_ns()])
    if self.core is not None and self.core.high_watermark != hw0:
        rec["hw"].append([now(), self.core.high_watermark])


raft_node.RaftNode._step = step


@atexit.register
def _dump() -> None:
    tmp = OUT + ".tmp"
    with open(tmp, "w") as f:
        json.dump(rec, f)
    os.replace(tmp, OUT)
