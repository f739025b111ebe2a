"""Log directory failures: Kafka's `LogDirFailureChannel` and `KafkaStorageException`.

Every storage error (any `OSError`: ENOSPC, EIO, EMFILE, EROFS, ...) raised while a
partition log appends, reads, flushes, rolls, truncates, deletes or checkpoints takes its
whole log dir offline, at once and for good (until the broker restarts):

- the operation fails with `KafkaStorageError` (code KAFKA_STORAGE_ERROR), so a write that
  failed is never acknowledged;
- every later operation on any log of that dir fails the same way without touching the
  disk: a storage error is never retried (a torn write followed by more writes would mix
  good data into a damaged tail; the next start's recovery cuts the tail at the first bad
  batch instead);
- the first failure of a dir is logged once, with the dir, the operation and the error, and
  the channel's listeners hear of it (the broker then stops serving those replicas and
  takes itself out of every ISR and leadership; see `broker/node.py`).

`storage_op` is the one guard the partition log's operations use (Kafka's
`maybeHandleIOException`); its two halves, `refuse_offline` and `storage_failure`, are
called in place by the log's per-batch operations (appends, `read_range`), whose decorated
call cost more than their work; `LogManager` reports the failures of its per-dir files
(checkpoints) through `LogDirFailures.fail` directly.
"""

from __future__ import annotations

import errno
import functools
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Concatenate, ParamSpec, Protocol, TypeVar

from broker.log.errors import LogError
from quorum.kafka_errors import ErrorCode

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

FailureListener = Callable[[Path, str], None]  # (the log dir that failed, why)


class KafkaStorageError(LogError):
    """A log's dir is offline: the operation did not happen (KAFKA_STORAGE_ERROR)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.KAFKA_STORAGE_ERROR, message)


def describe_os_error(exc: OSError) -> str:
    """`ENOSPC (No space left on device)`: the symbolic errno an operator greps for, and its text."""
    name = errno.errorcode.get(exc.errno, "") if exc.errno is not None else ""
    text = exc.strerror or str(exc)
    return f"{name} ({text})" if name else text


class LogDirFailures:
    """The broker's offline log dirs (Kafka's LogDirFailureChannel). A dir, once offline,
    stays offline for the life of the process."""

    def __init__(self, node_id: int = -1) -> None:
        self.node_id = node_id
        self.offline: dict[Path, str] = {}  # dir -> the first error, as logged
        self._listeners: list[FailureListener] = []

    def add_listener(self, listener: FailureListener) -> None:
        self._listeners.append(listener)

    def is_offline(self, log_dir: Path) -> bool:
        return log_dir in self.offline

    def fail(self, log_dir: Path, exc: OSError, operation: str) -> KafkaStorageError:
        """Take `log_dir` offline after `exc` in `operation`; returns the error to raise."""
        why = f"{operation} failed: {describe_os_error(exc)}"
        if log_dir not in self.offline:
            self.offline[log_dir] = why
            log.error(
                "broker %d: log dir %s is offline: %s. Every replica in it stops (KAFKA_STORAGE_ERROR); "
                "the broker leaves their leaderships and ISRs, and shuts down when no log dir is left online",
                self.node_id, log_dir, why,
            )  # fmt: skip
            for listener in list(self._listeners):
                try:
                    listener(log_dir, why)
                except Exception:
                    log.exception("log dir failure listener %r failed", listener)
        return KafkaStorageError(f"log dir {log_dir} is offline: {self.offline[log_dir]}")

    def refuse(self, log_dir: Path) -> KafkaStorageError | None:
        """The error an operation on `log_dir` gets without trying, or None while it is online."""
        why = self.offline.get(log_dir)
        return None if why is None else KafkaStorageError(f"log dir {log_dir} is offline: {why}")


class DirBoundLog(Protocol):
    """What `storage_op` needs of a log: its dir and the broker's channel (None: no channel,
    e.g. a log opened by the dump tool; the error is still turned into KafkaStorageError)."""

    @property
    def log_dir(self) -> Path: ...

    @property
    def dir_failures(self) -> LogDirFailures | None: ...


L = TypeVar("L", bound=DirBoundLog)


def refuse_offline(failures: LogDirFailures | None, log: DirBoundLog) -> None:
    """`storage_op`'s guard before the operation: KafkaStorageError, without touching the
    disk, when `log`'s dir is offline (`failures`: the log's `dir_failures`)."""
    if failures is not None and failures.offline:
        refused = failures.refuse(log.log_dir)
        if refused is not None:
            raise refused


def storage_failure(
    failures: LogDirFailures | None, log: DirBoundLog, exc: OSError, operation: str
) -> KafkaStorageError:
    """`storage_op`'s guard after an OSError in `operation` on `log`: the error to raise (the
    dir is taken offline, logged once, its listeners told)."""
    if failures is None:
        return KafkaStorageError(f"{operation} in {log.log_dir} failed: {describe_os_error(exc)}")
    return failures.fail(log.log_dir, exc, operation)


def storage_op(
    operation: str,
) -> Callable[[Callable[Concatenate[L, P], R]], Callable[Concatenate[L, P], R]]:
    """Guard a log method: refused at once when its dir is offline; an OSError takes the dir
    offline and becomes KafkaStorageError. Nested guarded calls report only the first."""

    def wrap(method: Callable[Concatenate[L, P], R]) -> Callable[Concatenate[L, P], R]:
        @functools.wraps(method)
        def guarded(self: L, /, *args: P.args, **kwargs: P.kwargs) -> R:
            failures = self.dir_failures
            refuse_offline(failures, self)
            try:
                return method(self, *args, **kwargs)
            except OSError as exc:
                raise storage_failure(failures, self, exc, operation) from exc

        return guarded

    return wrap
