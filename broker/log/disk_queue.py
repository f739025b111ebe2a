"""`DiskQueue`: the blocking disk work of one log dir, run off the event loop, in order.

Each log dir gets one queue served by one thread: fsyncs of rolled segments, the
leader-epoch checkpoint files, the per-dir offset checkpoints and the unlinking of deleted
segments. The event loop only enqueues (and takes snapshots of what to write before it
enqueues them).

Ordering guarantee: jobs of one queue run one at a time in the order they were submitted,
so a later write of a file always lands after an earlier one, and a job sees every effect
of the jobs submitted before it (e.g. a recovery-point checkpoint enqueued after a flush
runs after that flush). Jobs of different log dirs are unordered.

`INLINE` runs each job at once, in the caller's thread: for logs opened outside a broker
(tools, tests, the dump command), where there is no loop to protect.

A job that fails is logged (with the dir) and does not stop the queue; its caller chose
what to do about it at submission (the recovery point only moves when a flush succeeded).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

log = logging.getLogger(__name__)


class DiskQueue:
    def __init__(self, name: str) -> None:
        self.name = name
        self._pool: ThreadPoolExecutor | None = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"disk-{name}")
        self._lock = threading.Lock()
        self._last: Future[None] | None = None

    def submit(self, what: str, job: Callable[[], None]) -> Future[None]:
        """Run `job` after every job submitted before it; `what` names it in the error line."""

        def run() -> None:
            try:
                job()
            except Exception:
                log.exception("log dir %s: background %s failed", self.name, what)
                raise

        with self._lock:
            if self._pool is None:
                run()  # closed: the caller still gets its work done, in its own thread
                done: Future[None] = Future()
                done.set_result(None)
                return done
            self._last = self._pool.submit(run)
            return self._last

    def drain(self) -> None:
        """Block until every job submitted so far has run (failures are already logged)."""
        with self._lock:
            last = self._last
        if last is not None:
            # One thread, FIFO: the last job done means every earlier one is done.
            last.exception()

    def close(self) -> None:
        self.drain()
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)


class InlineQueue(DiskQueue):
    """Runs each job at once in the caller's thread (no loop to protect); a failure is
    raised to the caller, as a direct call would."""

    def __init__(self) -> None:
        self.name = "inline"
        self._lock = threading.Lock()
        self._last = None
        self._pool = None

    def submit(self, what: str, job: Callable[[], None]) -> Future[None]:
        job()
        done: Future[None] = Future()
        done.set_result(None)
        return done

    def close(self) -> None:
        pass


INLINE = InlineQueue()
