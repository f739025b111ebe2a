"""Timestamps along an acks=all produce in a broker, for diag_produce_latency.py.

Wraps (never changes the behaviour of) the leader's append, its record of a follower's
fetch, the high watermark's moves, the produce handler's return and the listener's write,
and the follower's receipt, append and next Fetch. Wall-clock times (time.time(), comparable
across the processes of one machine), written as JSON lines to
$PYKRAFT_PRODUCE_DIAG_OUT/produce-<pid>.json when the process exits normally (SIGTERM).
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import time
from typing import Any

from broker.kafka import produce as produce_mod
from broker.replica import fetcher as fetcher_mod
from broker.replica import manager as manager_mod
from broker.replica import state as state_mod
from quorum.wire import transport as transport_mod

OUT = os.path.join(os.environ["PYKRAFT_PRODUCE_DIAG_OUT"], f"produce-{os.getpid()}.json")
now = time.time
events: list[list[Any]] = []


def _dump() -> None:
    with open(OUT, "w") as f:
        json.dump(events, f)


atexit.register(_dump)

RM = manager_mod.ReplicaManager
_append_to = RM._append_to


@functools.wraps(_append_to)
def append_to(self: Any, topic: str, partition: int, acks: int, now_ms: int, *rest: Any) -> Any:
    t0 = now()
    out = _append_to(self, topic, partition, acks, now_ms, *rest)
    result = out[0]
    if result.error == 0:
        events.append(["append", t0, now(), topic, partition, result.base_offset])
    return out


RM._append_to = append_to

_on_follower_fetch = state_mod.PartitionState.on_follower_fetch


@functools.wraps(_on_follower_fetch)
def on_follower_fetch(self: Any, **kw: Any) -> Any:
    events.append(["leader_sees_fetch", now(), kw["replica_id"], kw["fetch_offset"]])
    return _on_follower_fetch(self, **kw)


state_mod.PartitionState.on_follower_fetch = on_follower_fetch  # type: ignore[method-assign]

_increment = state_mod.PartitionState._maybe_increment_high_watermark


@functools.wraps(_increment)
def maybe_increment_high_watermark(self: Any, now_ms: int, log: Any) -> Any:
    before = self.high_watermark
    out = _increment(self, now_ms, log)
    if self.high_watermark != before:
        events.append(["hw", now(), self.high_watermark])
    return out


state_mod.PartitionState._maybe_increment_high_watermark = maybe_increment_high_watermark  # type: ignore[method-assign]

_apply = RM.apply_fetch_answer


@functools.wraps(_apply)
def apply_fetch_answer(self: Any, hosted: Any, fetch_offset: int, answer: Any, records: Any) -> Any:
    t0 = now()
    plan = _apply(self, hosted, fetch_offset, answer, records)
    if records:
        events.append(["f_append", t0, now(), hosted.topic, hosted.partition, fetch_offset, hosted.log.log_end_offset])
    return plan


RM.apply_fetch_answer = apply_fetch_answer

_encode_fetch = fetcher_mod.encode_fetch_request


@functools.wraps(_encode_fetch)
def encode_fetch_request(**kw: Any) -> Any:
    events.append(["f_send", now(), [p.fetch_offset for p in kw["partitions"]]])
    return _encode_fetch(**kw)


fetcher_mod.encode_fetch_request = encode_fetch_request

_handle_produce = produce_mod.handle_produce


@functools.wraps(_handle_produce)
async def handle_produce(ctx: Any, services: Any, config: Any) -> Any:
    out = await _handle_produce(ctx, services, config)
    events.append(["produce_done", now(), ctx.header.correlation_id])
    return out


produce_mod.handle_produce = handle_produce

_writes = [name for name in ("_write_responses", "_write_response") if hasattr(transport_mod, name)]
for _name in _writes:
    _orig = getattr(transport_mod, _name)

    def _make(orig: Any) -> Any:
        @functools.wraps(orig)
        async def write(writer: Any, response: Any) -> None:
            t0 = now()
            await orig(writer, response)
            events.append(["written", t0, now()])

        return write

    setattr(transport_mod, _name, _make(_orig))
