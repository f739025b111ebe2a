"""Creating many partition logs off the event loop.

A new log costs a directory, a segment file and two memory-mapped index files: 0.5 ms on a
quiet disk, 5 ms on a busy one. A metadata delta that brings thousands of partitions to a
broker (creating a 1,000-partition topic, a broker's first catch-up) would stall its loop
for seconds: heartbeats miss the session timeout (fencing), fetches and produces wait.
When a delta brings at least `OFF_LOOP_MIN` new logs, the replica manager plans them on the
loop (`LogManager.plan_new_log`) in partition order, this module runs their file work on a small thread pool
in chunks of `CHUNK`, and hands each chunk back to the loop as it is done
(`on_created`), where the manager hosts the partitions as the metadata image says *then*
(a later delta may have moved or deleted them meanwhile). Until then a partition is not
hosted: clients get NOT_LEADER_OR_FOLLOWER and retry, as for any partition not yet online.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Final

from broker.log import PartitionLog
from broker.log.manager import NewLog, create_new_log

log = logging.getLogger(__name__)

OFF_LOOP_MIN: Final = 64
"""New logs in one delta from which they are created off the loop (fewer cost < 0.3 s even
on a busy disk, and stay synchronous: hosted when the delta has been applied)."""
CHUNK: Final = 50
"""Logs per job: a chunk is hosted on the loop as soon as its files exist."""
THREADS: Final = 2
"""File creation waits on the disk: two at once go faster on a busy disk; more threads take the GIL from the loop."""

TopicPartition = tuple[str, int]
Created = list[tuple[NewLog, PartitionLog | OSError]]


def _create_all(plans: Sequence[NewLog]) -> list[PartitionLog | OSError]:
    return [create_new_log(p) for p in plans]


class LogCreator:
    def __init__(self, on_created: Callable[[Created], None]) -> None:
        self._on_created = on_created
        self._executor: ThreadPoolExecutor | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.pending: set[TopicPartition] = set()
        """Partitions whose log is being created (until `on_created` has hosted them): the
        manager leaves them to `on_created`."""

    def submit(self, plans: Sequence[NewLog]) -> None:
        """Create the logs of `plans` off the running loop; each chunk goes to `on_created`
        on the loop when its files exist, in order, one chunk per turn of the loop."""
        loop = asyncio.get_running_loop()
        if self._executor is None:
            self._executor = ThreadPoolExecutor(THREADS, thread_name_prefix="log-create")
        chunks = [list(plans[i : i + CHUNK]) for i in range(0, len(plans), CHUNK)]
        for chunk in chunks:
            self.pending.update((p.topic, p.partition) for p in chunk)
        jobs = [loop.run_in_executor(self._executor, _create_all, chunk) for chunk in chunks]
        task = loop.create_task(self._host(chunks, jobs), name="log-create")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _host(self, chunks: list[list[NewLog]], jobs: list[asyncio.Future[list[PartitionLog | OSError]]]) -> None:
        for chunk, job in zip(chunks, jobs, strict=True):
            try:
                results = await job
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("creating %d logs failed", len(chunk))
                results = []
            finally:
                for p in chunk:
                    self.pending.discard((p.topic, p.partition))
            if results:
                self._on_created(list(zip(chunk, results, strict=True)))
            await asyncio.sleep(0)  # chunks done at once are hosted over several turns of the loop

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
