"""Closing the partition logs of one log dir at a clean stop, several at a time.

Kafka's LogManager.shutdown closes the logs of each log dir on a pool of
`num.recovery.threads.per.data.dir` threads; so does `close_dir_logs`. Each log costs what
is not yet on disk: a dirty log (`PartitionLog.dirty`) is fsynced, a clean one is only
closed, and the partition.metadata and leader-epoch checkpoint writes still queued on the
dir's one disk thread are done here, in parallel (the queued jobs then find nothing to do:
a broker that just created 10,000 partitions has 20,000 such writes queued, two fsyncs
each, over a minute of serial work on a busy 2-core VM). Closing writes the producers'
snapshot at the log end (unfsynced, see `PartitionLog.close`) and trims the active
segment's indexes. Parallel fsyncs pay off even on one disk: the filesystem's journal
commits concurrent fsyncs together (measured on this
VM's ext4: 1,000 small files fsynced with their directories in 3.4 s by one thread, 0.43 s
by two).

Storage errors are not reported from these threads (a dir failure's listeners run on the
event loop): the first one of a dir is returned in `DirClosed`, and once a dir has failed
its remaining logs are closed without being written to (Kafka never retries a failed dir).
The caller takes the dir offline; its next start recovers it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from broker.log.partition_log import PartitionLog

# Kafka 4.0's default of num.recovery.threads.per.data.dir (KIP-1030; 1 before).
DEFAULT_RECOVERY_THREADS_PER_DATA_DIR = 2


@dataclass(frozen=True, slots=True)
class LogToClose:
    log: PartitionLog
    flush: bool  # dirty: fsync it before closing (decided on the loop, `PartitionLog.dirty`)
    offline: bool = False  # its dir is offline: only closed, nothing written


@dataclass(frozen=True, slots=True)
class DirClosed:
    """What closing the logs of one log dir did."""

    root: Path
    flushed: int  # dirty logs fsynced
    closed: int  # logs closed (all of them, flushed or not)
    error: OSError | None  # the first storage error: the dir goes offline (no checkpoint, no marker)
    failed_on: str  # what was being done then ("" without an error)


class _DirState:
    """The shared state of one dir's closing threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.flushed = 0
        self.error: OSError | None = None
        self.failed_on = ""

    def failed(self) -> bool:
        return self.error is not None

    def record(self, exc: OSError, what: str) -> None:
        with self.lock:
            if self.error is None:
                self.error, self.failed_on = exc, what


def _close_one(item: LogToClose, state: _DirState) -> None:
    plog = item.log
    if item.offline or state.failed():  # nothing more is written into an offline dir
        with contextlib.suppress(OSError):
            plog.close()
        return
    try:
        plog.write_due_files()
        if item.flush:
            plog.sync_to_disk()
            with state.lock:
                state.flushed += 1
        plog.close(snapshot=True)
    except OSError as exc:
        state.record(exc, f"closing the log of {plog.topic}-{plog.partition}")
        with contextlib.suppress(OSError):
            plog.close()


def close_dir_logs(root: Path, logs: Sequence[LogToClose], threads: int) -> DirClosed:
    """Flush the dirty logs of `root` and close all of them, `threads` at a time (blocking;
    in any thread but the loop's: no log is touched by anyone else meanwhile)."""
    state = _DirState()
    with ThreadPoolExecutor(max(1, threads), thread_name_prefix=f"log-closing {root}") as pool:
        for _ in pool.map(lambda item: _close_one(item, state), logs):
            pass
    return DirClosed(root, state.flushed, len(logs), state.error, state.failed_on)
