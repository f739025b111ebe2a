"""`LogManager`: every partition log of one broker, over its `log.dirs`.

At start it opens each `<topic>-<partition>` directory found (skipping the metadata log's
`__cluster_metadata-0`, `meta.properties` and other files), recovering from the log dir's
`recovery-point-offset-checkpoint` unless the last stop was clean (`.kafka_cleanshutdown`,
removed at start and written at a clean close, as Kafka does). Directories named
`*-delete` (a deletion interrupted by a crash) are removed.

New partitions go to the online log dir holding the fewest partitions. A storage error in
any log operation or checkpoint of a dir takes that dir offline (`broker.log.dir_failure`):
its logs refuse every operation, and checkpoints, flushes and the clean-shutdown marker
skip it from then on. A deleted partition's
directory is renamed `<topic>-<partition>.<uuid hex>-delete` at once (so a re-created
topic of the same name starts empty) and removed after `file.delete.delay.ms`.

Disk work off the event loop: each log dir has one `DiskQueue` (one thread, jobs in
submission order) for the fsyncs of rolled segments, the leader-epoch checkpoints, the
three per-dir checkpoint files and every unlink. What each checkpoint may claim:
- `recovery-point-offset-checkpoint`: only offsets whose flush has finished (a partition
  log's `recovery_point` moves when its background flush is done), so after a crash the
  segments below it are trusted and only those past it are re-walked;
- `replication-offset-checkpoint` (high watermarks) and `log-start-offset-checkpoint`:
  the values when the write was queued; a crash may lose the last one (as in Kafka, the
  high watermark comes back from the leader and the log start from the first segment).
Intervals (Kafka's): high watermarks every `replica.high.watermark.checkpoint.interval.ms`,
recovery points every `log.flush.offset.checkpoint.interval.ms`, log start offsets every
`log.flush.start.offset.checkpoint.interval.ms` (scheduled by the data plane).
A clean stop (`close()`, or `close_off_loop()` from the loop: its blocking steps in threads)
costs what is dirty, as Kafka's LogManager.shutdown: it fsyncs only the logs with something
not yet on disk and closes every log, each dir's logs on `num.recovery.threads.per.data.dir`
threads (`broker.log.closing`), while the disk threads finish what is queued; then it writes
the three checkpoints and last the clean-shutdown marker, so the next start recovers nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import heapq
import itertools
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from uuid import UUID

from broker.log.checkpoints import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_FILE,
    RECOVERY_POINT_FILE,
    REPLICATION_OFFSET_FILE,
    read_offsets,
    write_offsets,
)
from broker.log.cleaner_threads import LogCleanerThreads
from broker.log.closing import DEFAULT_RECOVERY_THREADS_PER_DATA_DIR, DirClosed, LogToClose, close_dir_logs
from broker.log.config import LONG_MAX, LogConfig
from broker.log.dir_failure import KafkaStorageError, LogDirFailures
from broker.log.disk_queue import INLINE, DiskQueue
from broker.log.partition_log import PartitionLog
from broker.log.producer_state import DEFAULT_PRODUCER_ID_EXPIRATION_MS
from quorum.controller.topic_configs import default_configs, topic_overrides
from quorum.storage.durable import atomic_write

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
_DELETE_SUFFIX = "-delete"
ROLL_SCAN_S = 60.0  # how often `roll_pass` re-derives every roll deadline (s)


@dataclass(frozen=True, slots=True)
class NewLog:
    """A log to create off the loop (`LogManager.plan_new_log`)."""

    topic: str
    partition: int
    topic_id: UUID
    root: Path  # its log dir
    config: LogConfig
    disk: DiskQueue


def create_new_log(new: NewLog) -> PartitionLog | OSError:
    """The file work of a new log, in any thread (it touches nothing but its own directory)."""
    try:
        return PartitionLog.open(new.root / f"{new.topic}-{new.partition}", new.config, topic_id=new.topic_id,
                                 disk=new.disk)  # fmt: skip
    except OSError as exc:
        return exc


class LogManager:
    def __init__(
        self,
        log_dirs: Sequence[Path],
        broker_defaults: Mapping[str, str],
        failures: LogDirFailures | None = None,
        *,
        background: bool = True,
    ) -> None:
        """`background`: disk work on one thread per log dir (a broker); else inline."""
        self.log_dirs = [Path(d) for d in log_dirs]
        self.failures = failures if failures is not None else LogDirFailures()
        # The loop the broker runs on (None outside one): a storage error on a disk thread
        # takes its dir offline on the loop, where the failure's listeners act.
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        self._disk: dict[Path, DiskQueue] = {
            d: DiskQueue(str(d), on_error=functools.partial(self._background_failure, d)) if background else INLINE
            for d in self.log_dirs
        }
        self.broker_defaults = dict(broker_defaults)
        # The broker's value of every topic config, parsed once (they come from its static config).
        self.config_defaults = default_configs(self.broker_defaults)
        self._default_config = LogConfig.from_values(self.config_defaults)  # a topic's without overrides
        # producer.id.expiration.ms: how long a partition remembers an idle producer (ms).
        self.producer_id_expiration_ms = int(
            self.broker_defaults.get("producer.id.expiration.ms", DEFAULT_PRODUCER_ID_EXPIRATION_MS)
        )
        # num.recovery.threads.per.data.dir: threads closing the logs of each dir at a clean stop.
        self.recovery_threads_per_dir = max(1, int(self.broker_defaults.get(
            "num.recovery.threads.per.data.dir", DEFAULT_RECOVERY_THREADS_PER_DATA_DIR)))  # fmt: skip
        self.logs: dict[TopicPartition, PartitionLog] = {}
        # Invariant: _by_topic[t] is exactly {p for (t', p) in logs if t' == t}; no empty sets.
        self._by_topic: dict[str, set[int]] = {}
        self._dir_of: dict[TopicPartition, Path] = {}
        # Invariant: _hosted[d] == number of partitions whose _dir_of is d.
        self._hosted: dict[Path, int] = dict.fromkeys(self.log_dirs, 0)
        self._reserved: dict[Path, int] = {}  # logs planned in each dir, not adopted yet
        self._hw: dict[TopicPartition, int] = {}
        self._pending_deletes: list[tuple[float, Path]] = []
        # (dir, checkpoint file) -> the offsets last queued for it (`_queue_write`).
        self._queued_checkpoints: dict[tuple[Path, str], dict[TopicPartition, int]] = {}
        # Logs whose leader-epoch checkpoint waits for write_dirty_epochs (on the loop only).
        self._epochs_dirty: set[PartitionLog] = set()
        # Time rolls (`roll_pass`): each written active segment's deadline (ms), and a heap of
        # (deadline, tie, log) whose entries count only while they match `_roll_deadlines`.
        self._roll_deadlines: dict[PartitionLog, int] = {}
        self._roll_heap: list[tuple[int, int, PartitionLog]] = []
        self._roll_tie = itertools.count()
        self._next_roll_scan = 0.0  # time.monotonic() of the next full scan (a safety net)
        # The logs whose flush.ms is set (finite): the only ones `flush_pass` can flush.
        self._timed_flush: set[PartitionLog] = set()
        # The log cleaner (compacted topics); its threads run once `start_cleaner` is called.
        self.cleaner = LogCleanerThreads(1, 128 * 1024 * 1024, self.disk, self._background_failure)

    def config_for(self, topic_config: Mapping[str, str]) -> LogConfig:
        """The LogConfig of a topic with `topic_config` overrides: this broker's (parsed once)
        with the topic's own values, so that a config change costs the topic's configs only."""
        return self._default_config.overridden(topic_overrides(topic_config))

    def _add(self, tp: TopicPartition, plog: PartitionLog, root: Path) -> None:
        plog.dir_failures = self.failures
        plog.producers.expiration_ms = self.producer_id_expiration_ms
        plog.producers.remove_expired(int(time.time() * 1000))  # it was loaded with the default
        plog.on_epochs_dirty = self._epochs_dirty.add
        plog.on_roll_deadline = self._schedule_roll
        self.logs[tp] = plog
        self._schedule_roll(plog)
        self._track_flush(plog)
        self._by_topic.setdefault(tp[0], set()).add(tp[1])
        self._dir_of[tp] = root
        self._hosted[root] += 1

    def _remove(self, tp: TopicPartition) -> PartitionLog | None:
        plog = self.logs.pop(tp, None)
        if plog is not None:
            self._roll_deadlines.pop(plog, None)  # its heap entries no longer count
            self._timed_flush.discard(plog)
        partitions = self._by_topic.get(tp[0])
        if partitions is not None:
            partitions.discard(tp[1])
            if not partitions:
                del self._by_topic[tp[0]]
        root = self._dir_of.pop(tp, None)
        if root is not None:
            self._hosted[root] -= 1
        return plog

    # ------------------------------------------------------------------ start

    def disk(self, root: Path) -> DiskQueue:
        return self._disk[root]

    def load(self) -> None:
        for root in self.log_dirs:
            started = time.monotonic()
            recovered_logs = recovered_segments = total_segments = 0
            root.mkdir(parents=True, exist_ok=True)
            clean_marker = root / CLEAN_SHUTDOWN_FILE
            clean = clean_marker.exists()
            recovery = self._read(root / RECOVERY_POINT_FILE)
            starts = self._read(root / LOG_START_OFFSET_FILE)
            self._hw.update(self._read(root / REPLICATION_OFFSET_FILE))
            self.cleaner.load_checkpoint(root)
            for child in sorted(root.iterdir()):
                if not child.is_dir():
                    continue
                if child.name.endswith(_DELETE_SUFFIX):
                    shutil.rmtree(child, ignore_errors=True)
                    continue
                tp = PartitionLog.parse_dir_name(child.name)
                if tp is None or tp[0].startswith("__cluster_metadata"):
                    continue
                config = self.config_for({})
                try:
                    plog = PartitionLog.open(
                        child,
                        config,
                        topic_id=None,
                        recovery_point=recovery.get(tp, 0),
                        log_start_offset=starts.get(tp, 0),
                        clean=clean,
                        disk=self._disk[root],
                    )
                except OSError as exc:
                    log.error("cannot open partition log %s: %s", child, exc)
                    continue
                report = plog.recovery
                if report is not None:
                    total_segments += report.segments
                if report is not None and report.segments_recovered:
                    recovered_logs += 1
                    recovered_segments += report.segments_recovered
                    log.info(
                        "%s: recovered %d segments from offset %d (of %d segments), cut %d bytes%s",
                        child.name, report.segments_recovered, recovery.get(tp, 0), report.segments, report.bytes_cut,
                        f" ({report.reason})" if report.reason else "",
                    )  # fmt: skip
                self._add(tp, plog, root)
            clean_marker.unlink(missing_ok=True)
            log.info(
                "log dir %s: loaded %d partitions, %d segments after %s shutdown in %.0f ms; "
                "recovered %d segments of %d partitions",
                root, sum(1 for r in self._dir_of.values() if r == root), total_segments,
                "a clean" if clean else "an unclean", (time.monotonic() - started) * 1000,
                recovered_segments, recovered_logs,
            )  # fmt: skip

    @staticmethod
    def _read(path: Path) -> dict[TopicPartition, int]:
        try:
            return read_offsets(path)
        except (ValueError, OSError) as exc:
            log.warning("ignoring unreadable checkpoint %s: %s", path, exc)
            return {}

    # ------------------------------------------------------------------ partitions

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self.logs.get((topic, partition))

    def get_or_create(
        self, topic: str, partition: int, topic_id: UUID, topic_config: Mapping[str, str]
    ) -> PartitionLog:
        tp = (topic, partition)
        config = self.config_for(topic_config)
        existing = self.logs.get(tp)
        if existing is not None:
            refused = self.failures.refuse(self._dir_of[tp])  # its logs refuse every operation
            if refused is not None:
                raise refused
            self._update_config(existing, config)
            stored = existing.topic_id  # what partition.metadata holds (kept in memory: no read here)
            if stored is None:
                existing.topic_id = topic_id
                existing.write_partition_metadata()
            elif stored != topic_id:
                # A log of an older topic of the same name: it is not this topic's data.
                log.info("%s-%d: replacing the log of topic id %s", topic, partition, stored)
                self.delete(topic, partition)
                return self.get_or_create(topic, partition, topic_id, topic_config)
            return existing
        new = self.plan_new_log(topic, partition, topic_id, config)
        return self.adopt_new_log(new, create_new_log(new))

    def plan_new_log(self, topic: str, partition: int, topic_id: UUID, config: LogConfig) -> NewLog:
        """On the loop: where and how to create a log this manager does not hold, so that
        `create_new_log` (its file work: directory, segment, indexes) can run in another
        thread; `adopt_new_log` then hosts it. The dir chosen is reserved until then."""
        online = self.online_dirs()
        if not online:
            raise KafkaStorageError(f"no log dir is online to create {topic}-{partition}")
        root = min(online, key=lambda d: self._hosted[d] + self._reserved.get(d, 0))
        self._reserved[root] = self._reserved.get(root, 0) + 1
        return NewLog(topic, partition, topic_id, root, config, self._disk[root])

    def adopt_new_log(self, new: NewLog, created: PartitionLog | OSError) -> PartitionLog:
        """On the loop: host the log `create_new_log` made for `new`, or take its dir offline
        (raising KafkaStorageError) when making it failed."""
        self._reserved[new.root] -= 1
        tp = (new.topic, new.partition)
        if isinstance(created, OSError):
            raise self.failures.fail(new.root, created, f"creating the log of {tp[0]}-{tp[1]}") from created
        refused = self.failures.refuse(new.root)
        if refused is not None or tp in self.logs:  # its dir failed meanwhile; or a second creation
            created.close()
            raise refused or KafkaStorageError(f"{tp[0]}-{tp[1]} was created twice")
        self._add(tp, created, new.root)
        return created

    def online_dirs(self) -> list[Path]:
        return [d for d in self.log_dirs if not self.failures.is_offline(d)]

    def update_config(self, topic: str, topic_config: Mapping[str, str]) -> None:
        """Apply a topic's changed configs to each of its partition logs here (one parse)."""
        partitions = self._by_topic.get(topic)
        if not partitions:
            return
        config = self.config_for(topic_config)
        for partition in partitions:
            self._update_config(self.logs[(topic, partition)], config)

    def _update_config(self, plog: PartitionLog, config: LogConfig) -> None:
        plog.update_config(config)
        self._schedule_roll(plog)  # segment.ms may have changed
        self._track_flush(plog)

    def _track_flush(self, plog: PartitionLog) -> None:
        if plog.config.flush_ms < LONG_MAX:
            self._timed_flush.add(plog)
        else:
            self._timed_flush.discard(plog)

    def _schedule_roll(self, plog: PartitionLog) -> None:
        """Record when `plog`'s active segment becomes due for a time roll (after a write to
        an empty segment, a truncation, a config change, adoption)."""
        deadline = plog.roll_deadline_ms()
        if deadline is None:
            self._roll_deadlines.pop(plog, None)
        elif self._roll_deadlines.get(plog) != deadline:
            self._roll_deadlines[plog] = deadline
            heapq.heappush(self._roll_heap, (deadline, next(self._roll_tie), plog))

    def delete(self, topic: str, partition: int) -> None:
        plog = self._remove((topic, partition))
        self._hw.pop((topic, partition), None)
        self.cleaner.forget((topic, partition))
        if plog is None:
            return
        plog.close()
        target = plog.directory.with_name(f"{plog.directory.name}.{uuid.uuid4().hex}{_DELETE_SUFFIX}")
        try:
            os.rename(plog.directory, target)
        except OSError:
            target = plog.directory
        self._pending_deletes.append((time.monotonic() + plog.config.file_delete_delay_ms / 1000, target))

    def purge_deleted(self, *, now: float | None = None, force: bool = False) -> int:
        """Remove the renamed directories that are due (on their log dir's disk queue)."""
        now = time.monotonic() if now is None else now
        keep, done = [], 0
        for due, path in self._pending_deletes:
            if force or due <= now:
                self._queue_of(path).submit(f"removal of {path}", functools.partial(shutil.rmtree, path, True))
                done += 1
            else:
                keep.append((due, path))
        self._pending_deletes = keep
        return done

    def _queue_of(self, path: Path) -> DiskQueue:
        return self._disk.get(path.parent, INLINE)

    def all_logs(self) -> Iterable[PartitionLog]:
        return list(self.logs.values())

    def high_watermark_checkpoint(self) -> dict[TopicPartition, int]:
        return dict(self._hw)

    # ------------------------------------------------------------------ periodic work

    def checkpoint(self, high_watermarks: Mapping[TopicPartition, int]) -> None:
        """Queue the three per-log-dir checkpoint files."""
        self.checkpoint_high_watermarks(high_watermarks)
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()

    def _by_dir(self) -> dict[Path, list[TopicPartition]]:
        """The partitions of each online dir (an offline dir's files are not written)."""
        out: dict[Path, list[TopicPartition]] = {root: [] for root in self.online_dirs()}
        for tp, root in self._dir_of.items():
            if root in out:
                out[root].append(tp)
        return out

    def _queue_write(self, root: Path, name: str, offsets: dict[TopicPartition, int]) -> None:
        """The snapshot `offsets` is taken by the caller (on the loop); the atomic write
        (two fsyncs) runs on the dir's queue, after every job queued before it. A snapshot
        equal to the one last queued for the same file is not written again: the file holds
        it once the queue gets there (a write that fails takes the dir offline, and an
        offline dir's files are never written), so an idle broker's checkpoint costs a
        comparison, not 10,000 formatted lines and two fsyncs every 5 s."""
        key = (root, name)
        if self._queued_checkpoints.get(key) == offsets:
            return
        self._queued_checkpoints[key] = offsets
        self._disk[root].submit("writing the offset checkpoints", lambda: write_offsets(root / name, offsets))

    def checkpoint_high_watermarks(self, high_watermarks: Mapping[TopicPartition, int]) -> None:
        for root, mine in self._by_dir().items():
            hws = {tp: high_watermarks[tp] for tp in mine if tp in high_watermarks}
            self._queue_write(root, REPLICATION_OFFSET_FILE, hws)

    def checkpoint_recovery_points(self) -> None:
        """Only flushed offsets: `recovery_point` moves when a flush has finished."""
        for root, mine in self._by_dir().items():
            self._queue_write(root, RECOVERY_POINT_FILE, {tp: self.logs[tp].recovery_point for tp in mine})

    def checkpoint_log_start_offsets(self) -> None:
        for root, mine in self._by_dir().items():
            self._queue_write(root, LOG_START_OFFSET_FILE, {tp: self.logs[tp].log_start_offset for tp in mine})

    def retention_pass(self, now_ms: int, high_watermark_of: Callable[[str, int], int]) -> int:
        deleted = 0
        for (topic, partition), plog in list(self.logs.items()):
            with contextlib.suppress(KafkaStorageError):  # its dir is offline now (logged once)
                deleted += plog.delete_retained_segments(now_ms, high_watermark_of(topic, partition))
        self.purge_deleted()
        return deleted

    def start_cleaner(self, threads: int, dedupe_buffer_bytes: int) -> None:
        """log.cleaner.enable: the cleaner threads (on the loop), keeping the loaded checkpoints."""
        checkpoints = self.cleaner.checkpoints
        self.cleaner = LogCleanerThreads(threads, dedupe_buffer_bytes, self.disk, self._background_failure)
        self.cleaner.checkpoints = checkpoints
        self.cleaner.start()

    def cleaning_pass(self, high_watermark_of: Callable[[str, int], int]) -> int:
        """Queue a cleaning of each compacted log of an online dir (`LogCleanerThreads`)."""
        logs = {tp: (plog, self._dir_of[tp]) for tp, plog in self.logs.items()
                if plog.config.compacted and not self.failures.is_offline(self._dir_of[tp])}  # fmt: skip
        return self.cleaner.cleaning_pass(logs, high_watermark_of)

    def roll_pass(self, now_ms: int) -> None:
        """segment.ms: roll active segments that are old enough, even without new appends.
        Runs every second and visits only the logs whose deadline has come (`_roll_heap`), so
        an idle broker's pass costs what is due, not what is hosted. Once a minute a full scan
        re-derives every deadline and drops the heap's stale entries: a safety net for a
        change no path reports (its roll is then at most a minute late)."""
        if time.monotonic() >= self._next_roll_scan:
            self._next_roll_scan = time.monotonic() + ROLL_SCAN_S
            for plog in self.logs.values():
                self._schedule_roll(plog)
            self._roll_heap = [e for e in self._roll_heap if self._roll_deadlines.get(e[2]) == e[0]]
            heapq.heapify(self._roll_heap)
        heap, visited = self._roll_heap, []
        while heap and heap[0][0] <= now_ms:
            deadline, _, plog = heapq.heappop(heap)
            if self._roll_deadlines.get(plog) != deadline:
                continue  # superseded, or the log is gone
            del self._roll_deadlines[plog]
            if plog.time_roll_due(now_ms):
                with contextlib.suppress(KafkaStorageError):  # its dir is offline now (logged once)
                    plog.maybe_roll(now_ms)
            visited.append(plog)
        for plog in visited:  # after the loop: a log that could not roll is due again next pass
            self._schedule_roll(plog)

    def write_dirty_epochs(self) -> None:
        """Queue the leader-epoch checkpoints that changed since the last call (each on its
        dir's queue; one already written by a flush is skipped)."""
        dirty, self._epochs_dirty = self._epochs_dirty, set()
        for plog in dirty:
            if not self.failures.is_offline(plog.log_dir):
                plog.write_epochs_in_background()

    def flush_pass(self, now_ms: int) -> None:
        """flush.ms (log.flush.interval.ms): fsync (in the background) logs whose oldest
        unflushed write is that old."""
        for plog in self._timed_flush:  # with flush.ms unset (Kafka's default) nothing is ever due
            if plog.unflushed_messages and now_ms - plog.last_flush_ms >= plog.config.flush_ms:
                with contextlib.suppress(KafkaStorageError):  # its dir is offline now (logged once)
                    plog.flush_in_background(plog.log_end_offset)

    def drain(self) -> None:
        """Queue the dirty leader-epoch checkpoints, then wait for every queued disk job
        (tests, close)."""
        self.write_dirty_epochs()
        for queue in self._disk.values():
            queue.drain()

    def _background_failure(self, root: Path, what: str, exc: OSError) -> None:
        """On a disk thread: a queued job of `root` failed; the dir goes offline (on the loop)."""
        if self._loop is None or self._loop.is_closed():
            self.failures.fail(root, exc, what)
        else:
            self._loop.call_soon_threadsafe(self.failures.fail, root, exc, what)

    # ------------------------------------------------------------------ clean stop
    # Steps on the caller's thread (the loop's, in a broker) alternate with blocking steps,
    # which `close_off_loop` runs in threads; `close` runs them all in the caller's thread.

    def close(self, high_watermarks: Mapping[TopicPartition, int] | None = None) -> None:
        """A clean close, blocking (tools, tests): see `close_off_loop`."""
        plan = self._plan_close()
        closed = self._close_logs(plan)
        marked = self._checkpoint_closed(closed, high_watermarks)
        self._after_marking(self._mark_clean(marked))

    async def close_off_loop(self, high_watermarks: Mapping[TopicPartition, int] | None = None) -> None:
        """A clean close: wait for the queued disk work, fsync the dirty logs and close every
        log (`num.recovery.threads.per.data.dir` threads per dir), write the checkpoints and
        then the clean-shutdown marker, in this order. The waits, fsyncs and writes run in
        threads: the loop keeps serving (heartbeats, REST) meanwhile. An offline dir, or one
        that fails now, gets no checkpoint and no marker (its logs are only closed): the next
        start recovers it."""
        plan = self._plan_close()
        closed = await asyncio.to_thread(self._close_logs, plan)
        marked = self._checkpoint_closed(closed, high_watermarks)
        self._after_marking(await asyncio.to_thread(self._mark_clean, marked))

    def _plan_close(self) -> dict[Path, list[LogToClose]]:
        """On the loop: stop the cleaner and decide which logs need a flush (those of an
        offline dir are only closed; the leader-epoch checkpoints not yet queued are written
        by the closing threads: `PartitionLog.dirty` counts them). Deciding before the queues
        drained only errs towards flushing: a background flush that finishes meanwhile makes
        a log clean, nothing makes one dirty (nothing appends any more)."""
        self.cleaner.stop()
        self._epochs_dirty.clear()
        plan: dict[Path, list[LogToClose]] = {root: [] for root in self.log_dirs}
        for tp, plog in self.logs.items():
            root = self._dir_of[tp]
            offline = self.failures.is_offline(root)
            plan[root].append(LogToClose(plog, flush=not offline and plog.dirty, offline=offline))
        return plan

    def _close_logs(self, plan: Mapping[Path, Sequence[LogToClose]]) -> list[DirClosed]:
        """Blocking: close each dir's logs (dirs at once) while the disk threads run what is
        queued, then wait for those. The two may overlap: closing a log writes its queued
        per-partition files itself (the queued jobs then skip them), and what else is queued
        (background flushes, unlinks, checkpoints) is independent of a close or, for the
        checkpoints, written again after it (`_checkpoint_closed`)."""
        started = time.monotonic()
        with ThreadPoolExecutor(max(1, len(plan)), thread_name_prefix="log-dir closing") as pool:
            closed = list(pool.map(lambda root: close_dir_logs(root, plan[root], self.recovery_threads_per_dir), plan))
        for queue in self._disk.values():
            queue.drain()
        for done in closed:
            log.info(
                "log dir %s: closed %d partition logs, %d of them flushed, in %.0f ms (%d threads)",
                done.root, done.closed, done.flushed, (time.monotonic() - started) * 1000,
                self.recovery_threads_per_dir,
            )  # fmt: skip
        return closed

    def _checkpoint_closed(
        self, closed: Sequence[DirClosed], high_watermarks: Mapping[TopicPartition, int] | None
    ) -> list[Path]:
        """On the loop: a dir whose closing failed goes offline; the others' checkpoints are
        queued (the recovery points now name every offset); returns the dirs to mark clean."""
        for done in closed:
            if done.error is not None:
                self.failures.fail(done.root, done.error, done.failed_on)
        self.checkpoint(high_watermarks if high_watermarks is not None else self._hw)
        self.purge_deleted(force=True)
        self.logs.clear()
        return self.online_dirs()

    def _mark_clean(self, roots: Sequence[Path]) -> list[tuple[Path, OSError]]:
        """Blocking: run what is queued (the checkpoints), stop the disk threads, then write
        the clean-shutdown marker of `roots`; the marker writes that failed."""
        for queue in self._disk.values():
            queue.close()
        failed = []
        for root in roots:
            if self.failures.is_offline(root) or self._disk[root].failed:  # a queued checkpoint failed just now
                continue
            try:
                atomic_write(root / CLEAN_SHUTDOWN_FILE, b"")
            except OSError as exc:
                failed.append((root, exc))
        return failed

    def _after_marking(self, failed: Sequence[tuple[Path, OSError]]) -> None:
        for root, exc in failed:
            self.failures.fail(root, exc, "writing the clean-shutdown marker")
