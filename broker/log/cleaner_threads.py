"""`LogCleanerThreads`: Kafka's log cleaner threads (`log.cleaner.threads`, `log.cleaner.enable`).

Every `log.cleaner.backoff.ms` the broker calls `cleaning_pass` on the loop: it takes a
`broker.log.cleaner.plan` of each compacted log that is online and not being cleaned
already, and queues it. The threads run `clean` (all of the reading and writing), then
hand the result back to the loop, where `swap` puts the cleaned segments in place and the
log dir's `cleaner-offset-checkpoint` (the first dirty offset of each log) is queued on its
disk queue. Produce and fetch never wait for a cleaning: they only share the loop with the
swap, a few renames.

Invariants: a log is in at most one plan at a time (`_busy`); the checkpoints and the
delete horizons are only read and written on the loop.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from broker.log.checkpoints import read_offsets, write_offsets
from broker.log.cleaner import CLEANER_CHECKPOINT_FILE, CleanPlan, CleanResult, clean, now_ms, plan, swap
from broker.log.disk_queue import DiskQueue
from broker.log.partition_log import PartitionLog

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
# Bytes per offset-map entry Kafka counts (a 16-byte key hash and an 8-byte offset), and the
# share of the buffer it fills (log.cleaner.io.buffer.load.factor).
_MAP_ENTRY_BYTES = 24
_LOAD_FACTOR = 0.9


class LogCleanerThreads:
    def __init__(
        self,
        threads: int,
        dedupe_buffer_bytes: int,
        disk_of: Callable[[Path], DiskQueue],
        on_storage_error: Callable[[Path, str, OSError], None],
    ) -> None:
        self.threads = max(threads, 1)
        self.max_map_keys = max(int(dedupe_buffer_bytes / self.threads * _LOAD_FACTOR) // _MAP_ENTRY_BYTES, 1)
        self._disk_of = disk_of
        self._on_storage_error = on_storage_error
        self.checkpoints: dict[Path, dict[TopicPartition, int]] = {}
        self._horizons: dict[TopicPartition, int] = {}  # earliest delete horizon kept (ms)
        # PartitionLog.truncations when the checkpoint of a log was last set: a truncation
        # since then may have rewritten offsets below it, so the whole log counts as dirty.
        self._truncations: dict[TopicPartition, int] = {}
        self._busy: set[TopicPartition] = set()
        self._queue: queue.SimpleQueue[tuple[TopicPartition, Path, CleanPlan] | None] = queue.SimpleQueue()
        self._workers: list[threading.Thread] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self.cleanings = 0  # swaps done (tests, logs)

    def load_checkpoint(self, root: Path) -> None:
        try:
            self.checkpoints[root] = read_offsets(root / CLEANER_CHECKPOINT_FILE)
        except (ValueError, OSError) as exc:
            log.warning("ignoring unreadable %s: %s", root / CLEANER_CHECKPOINT_FILE, exc)
            self.checkpoints[root] = {}

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        for i in range(self.threads):
            t = threading.Thread(target=self._run, name=f"kafka-log-cleaner-thread-{i}", daemon=True)
            t.start()
            self._workers.append(t)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop taking plans; a cleaning under way may still finish its files (its swap is
        dropped; the next start finishes or discards it)."""
        self._loop = None
        for _ in self._workers:
            self._queue.put(None)
        for t in self._workers:
            t.join(timeout_s)
        self._workers.clear()

    def forget(self, tp: TopicPartition) -> None:
        """A deleted partition: its checkpoint entry goes (the dir's file is written again)."""
        for root, offsets in self.checkpoints.items():
            if offsets.pop(tp, None) is not None:
                self._write_checkpoint(root)
        self._horizons.pop(tp, None)
        self._truncations.pop(tp, None)

    def _write_checkpoint(self, root: Path) -> None:
        snapshot = dict(self.checkpoints.get(root, {}))
        self._disk_of(root).submit(
            "writing the cleaner-offset-checkpoint", lambda: write_offsets(root / CLEANER_CHECKPOINT_FILE, snapshot)
        )

    # ------------------------------------------------------------------ on the loop

    def cleaning_pass(
        self, logs: Mapping[TopicPartition, tuple[PartitionLog, Path]], high_watermark_of: Callable[[str, int], int]
    ) -> int:
        """Queue a plan for each compacted log not being cleaned; returns how many."""
        now = now_ms()
        queued = 0
        for tp, (plog, root) in logs.items():
            if tp in self._busy or not plog.config.compacted or plog.closed:
                continue
            first_dirty = self.checkpoints.setdefault(root, {}).get(tp, 0)
            if self._truncations.get(tp, plog.truncations) != plog.truncations:
                first_dirty = 0
            p = plan(plog, first_dirty, high_watermark_of(*tp), now, self._horizons.get(tp, -1))
            if not p.segments:
                continue
            self._busy.add(tp)
            if self._workers:
                self._queue.put((tp, root, p))
            else:  # no threads (tests): inline
                self._finish(tp, root, self._clean(root, p))
            queued += 1
        return queued

    def _finish(self, tp: TopicPartition, root: Path, result: CleanResult | None) -> None:
        self._busy.discard(tp)
        if result is None or not swap(result):
            return
        self.cleanings += 1
        self.checkpoints.setdefault(root, {})[tp] = result.end_of_dirty
        self._horizons[tp] = result.next_delete_horizon_ms
        self._truncations[tp] = result.plan.truncations
        self._write_checkpoint(root)
        log.info(
            "%s-%d: cleaned %d segments, %d bytes to %d, first dirty offset now %d",
            tp[0], tp[1], sum(len(g.sources) for g in result.groups), result.bytes_before, result.bytes_after,
            result.end_of_dirty,
        )  # fmt: skip

    # ------------------------------------------------------------------ on a cleaner thread

    def _clean(self, root: Path, p: CleanPlan) -> CleanResult | None:
        try:
            return clean(p, max_map_keys=self.max_map_keys)
        except OSError as exc:
            self._on_storage_error(root, f"cleaning {p.log.directory.name}", exc)
        except Exception:
            log.exception("cleaning %s failed", p.log.directory.name)
        return None

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            tp, root, p = item
            result = self._clean(root, p)
            loop = self._loop
            if loop is None:
                return  # stopping: the .swap files are finished (or discarded) at the next open
            try:
                loop.call_soon_threadsafe(self._finish, tp, root, result)
            except RuntimeError:
                return  # the loop is closed
