"""A synthetic write load for measuring the quorum (the role of Kafka's TestRaftServer).

While its node leads, the generator appends records of `record_size` bytes,
either at `rate` records/s or, with rate 0, as fast as commits allow (keeping at
most `max_inflight` uncommitted records). Commit latency is measured from the
call that proposed a record until the high watermark passes it. After the
warm-up it measures for `duration_s` and writes a JSON report.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from quorum.node.raft_node import RaftNode
from quorum.raft.types import Offset

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LoadSpec:
    record_size: int = 100  # bytes per record
    rate: int = 0  # records/s; 0 = saturation
    duration_s: float = 10.0  # measured window, after the warm-up
    warmup_s: float = 2.0
    max_inflight: int = 50_000  # uncommitted records at saturation
    chunk: int = 2_000  # records per proposal at saturation


@dataclass(frozen=True, slots=True)
class LoadReport:
    node_id: int
    epoch: int
    record_size: int
    offered_rate: int
    duration_s: float
    committed_records: int
    records_per_s: float
    p50_ms: float
    p99_ms: float
    max_ms: float


def percentile(samples: list[tuple[float, int]], q: float) -> float:
    """The q-quantile of weighted samples (latency ms, records), nearest rank."""
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    total = sum(n for _, n in ordered)
    rank = q * total
    seen = 0
    for value, n in ordered:
        seen += n
        if seen >= rank:
            return value
    return ordered[-1][0]


class SyntheticLoad:
    def __init__(self, node: RaftNode, spec: LoadSpec, report_path: Path | None) -> None:
        self.node = node
        self.spec = spec
        self.report_path = report_path
        self._payload = b"x" * spec.record_size
        self._inflight = 0
        self._room = asyncio.Event()
        self._samples: list[tuple[float, int]] = []
        self._measuring = False
        self._committed = 0
        self.report: LoadReport | None = None

    def _record(self, t0: float, count: int, fut: asyncio.Future[Offset]) -> None:
        self._inflight -= count
        self._room.set()
        if fut.cancelled() or fut.exception() is not None:
            return
        if self._measuring:
            self._samples.append(((time.perf_counter() - t0) * 1000, count))
            self._committed += count

    def _submit(self, count: int) -> None:
        t0 = time.perf_counter()
        fut = self.node.submit([self._payload] * count)
        self._inflight += count
        fut.add_done_callback(lambda f: self._record(t0, count, f))

    async def run(self) -> None:
        core = self.node.core
        assert core is not None
        while not core.is_leader or core.high_watermark <= 0:  # noqa: ASYNC110 - the core has no event to await
            await asyncio.sleep(0.01)
        epoch = core.epoch
        log.info("synthetic load: %d-byte records at %s", self.spec.record_size, self.spec.rate or "saturation")
        start = time.perf_counter()
        measure_from = start + self.spec.warmup_s
        end = measure_from + self.spec.duration_s
        sent = 0
        while core.is_leader and core.epoch == epoch:
            now = time.perf_counter()
            if now >= end:
                break
            if not self._measuring and now >= measure_from:
                self._measuring = True
            if self.spec.rate:
                due = int((now - start) * self.spec.rate) - sent
                if due > 0:
                    self._submit(due)
                    sent += due
                await asyncio.sleep(0.0005)
            else:
                if self._inflight + self.spec.chunk <= self.spec.max_inflight:
                    self._submit(self.spec.chunk)
                    await asyncio.sleep(0)
                else:
                    self._room.clear()
                    await self._room.wait()
        self._measuring = False
        measured = min(time.perf_counter(), end) - measure_from
        self.report = LoadReport(
            node_id=self.node.node_id,
            epoch=epoch,
            record_size=self.spec.record_size,
            offered_rate=self.spec.rate,
            duration_s=round(measured, 3),
            committed_records=self._committed,
            records_per_s=round(self._committed / measured, 1) if measured > 0 else 0.0,
            p50_ms=round(percentile(self._samples, 0.50), 3),
            p99_ms=round(percentile(self._samples, 0.99), 3),
            max_ms=round(max((s for s, _ in self._samples), default=float("nan")), 3),
        )
        log.info("synthetic load report: %s", self.report)
        if self.report_path is not None:
            tmp = self.report_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(asdict(self.report)))
            tmp.replace(self.report_path)
