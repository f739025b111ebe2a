"""`DiskQueue`: the blocking disk work of one log dir, run off the event loop, in order.

Each log dir gets one queue served by one thread: fsyncs of rolled segments, the
leader-epoch checkpoint files, `partition.metadata`, the per-dir offset checkpoints and
the unlinking of deleted segments and directories. The event loop only enqueues (taking
before it enqueues a snapshot of what to write); an enqueue is one `SimpleQueue.put`
(about a microsecond: no future, no lock), since a leadership move of 1,000 partitions
enqueues 1,000 leader-epoch checkpoints in one turn of the loop.

Ordering guarantee: jobs of one queue run one at a time in the order they were submitted,
so a later write of a file always lands after an earlier one, and a job sees every effect
of the jobs submitted before it (e.g. a recovery-point checkpoint enqueued after a flush
runs after that flush). Jobs of different log dirs are unordered.

`INLINE` runs each job at once, in the caller's thread: for logs opened outside a broker
(tools, tests, the dump command), where there is no loop to protect.

A job that fails is logged (with the dir) and does not stop the queue; a storage error
(OSError) also goes to `on_error` (the log manager takes the dir offline: Kafka's
LogDirFailureChannel). Its submitter chose what a failure means for its data (the
recovery point only moves when a flush succeeded). The thread is
a daemon: at a crash, what is still queued is lost exactly as the page cache of a killed
process would be; `close()` (a clean stop) runs everything queued first.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

Job = Callable[[], object]


class DiskQueue:
    def __init__(self, name: str, on_error: Callable[[str, OSError], None] | None = None) -> None:
        self.name = name
        self._on_error = on_error
        self._jobs: queue.SimpleQueue[tuple[str, Job] | None] = queue.SimpleQueue()
        self._closed = False
        # A job failed with a storage error (its dir is offline, or about to be: on_error
        # reports it on the loop, which may not have run it yet).
        self.failed = False
        self._thread = threading.Thread(target=self._serve, name=f"disk {name}", daemon=True)
        self._thread.start()

    def submit(self, what: str, job: Job) -> None:
        """Run `job` after every job submitted before it; `what` names it in the error line.
        After `close()`, the job runs at once in the caller's thread."""
        if self._closed:
            job()
            return
        self._jobs.put((what, job))

    def _serve(self) -> None:
        while True:
            item = self._jobs.get()
            if item is None:
                return
            what, job = item
            try:
                job()
            except OSError as exc:
                self.failed = True
                if self._on_error is None:
                    log.exception("log dir %s: background %s failed", self.name, what)
                else:
                    self._on_error(what, exc)
            except Exception:
                log.exception("log dir %s: background %s failed", self.name, what)

    def drain(self) -> None:
        """Block until every job submitted so far has run (failures are already logged)."""
        if self._closed:
            return
        done = threading.Event()
        self._jobs.put(("drain", done.set))
        done.wait()

    def close(self) -> None:
        if self._closed:
            return
        self.drain()
        self._closed = True
        self._jobs.put(None)
        self._thread.join()


class InlineQueue(DiskQueue):
    """Runs each job at once in the caller's thread (no loop to protect); a failure is
    raised to the caller, as a direct call would."""

    def __init__(self) -> None:
        self.name = "inline"
        self._closed = True
        self.failed = False  # a failure is raised to the caller instead

    def close(self) -> None:
        pass


INLINE = InlineQueue()
