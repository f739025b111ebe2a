"""Log dir failures: the guard every partition-log operation goes through (sans-IO, with a
stand-in log), and the LogManager and PartitionLog on real files under a real storage
error (EFBIG from the kernel: RLIMIT_FSIZE caps how far this process may write a file)."""

from __future__ import annotations

import errno
import resource
import signal
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from broker.log import LogManager
from broker.log.checkpoints import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_FILE, read_offsets
from broker.log.dir_failure import KafkaStorageError, LogDirFailures, describe_os_error, storage_op
from quorum.kafka_errors import ErrorCode

NOW = 1_700_000_000_000


class StandIn:
    """A log with the two attributes the guard reads; `fail_with` makes its IO raise."""

    def __init__(self, log_dir: Path, failures: LogDirFailures | None) -> None:
        self.log_dir = log_dir
        self.dir_failures = failures
        self.fail_with: OSError | None = None
        self.calls = 0

    @storage_op("append")
    def append(self, n: int) -> int:
        self.calls += 1
        if self.fail_with is not None:
            raise self.fail_with
        return n

    @storage_op("roll")
    def roll(self) -> None:
        self.calls += 1
        if self.fail_with is not None:
            raise self.fail_with

    @storage_op("append")
    def append_and_roll(self) -> None:
        self.roll()


def test_a_storage_error_takes_the_dir_offline_once_and_is_never_retried() -> None:
    failures = LogDirFailures(4)
    heard: list[tuple[Path, str]] = []
    failures.add_listener(lambda d, why: heard.append((d, why)))
    a, b = StandIn(Path("/a"), failures), StandIn(Path("/b"), failures)
    sibling = StandIn(Path("/a"), failures)
    assert a.append(1) == 1
    a.fail_with = OSError(errno.ENOSPC, "No space left on device")
    with pytest.raises(KafkaStorageError) as err:
        a.append(2)
    assert err.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert heard == [(Path("/a"), "append failed: ENOSPC (No space left on device)")]
    # Every later operation on that dir is refused without touching the disk, even once the
    # disk would work again; the other dir goes on.
    a.fail_with = None
    calls = a.calls
    for op in (lambda: a.append(3), a.roll, sibling.roll):
        with pytest.raises(KafkaStorageError, match="log dir /a is offline: append failed: ENOSPC"):
            op()
    assert a.calls == calls and sibling.calls == 0
    assert b.append(4) == 4
    assert len(heard) == 1 and failures.offline == {Path("/a"): "append failed: ENOSPC (No space left on device)"}


@pytest.mark.parametrize(
    ("code", "name"),
    [(errno.EIO, "EIO"), (errno.EMFILE, "EMFILE"), (errno.EROFS, "EROFS"), (errno.EDQUOT, "EDQUOT")],
)
def test_every_os_error_is_a_storage_error(code: int, name: str) -> None:
    failures = LogDirFailures()
    log = StandIn(Path("/d"), failures)
    log.fail_with = OSError(code, "boom")
    with pytest.raises(KafkaStorageError):
        log.append(1)
    assert failures.offline[Path("/d")] == f"append failed: {name} (boom)"


def test_nested_operations_report_the_innermost_one_only() -> None:
    failures = LogDirFailures()
    heard: list[str] = []
    failures.add_listener(lambda _d, why: heard.append(why))
    log = StandIn(Path("/d"), failures)
    log.fail_with = OSError(errno.EMFILE, "Too many open files")
    with pytest.raises(KafkaStorageError):
        log.append_and_roll()
    assert heard == ["roll failed: EMFILE (Too many open files)"]


def test_without_a_channel_the_error_is_still_a_storage_error() -> None:
    log = StandIn(Path("/d"), None)
    log.fail_with = OSError(errno.EIO, "Input/output error")
    with pytest.raises(KafkaStorageError, match=r"append in /d failed: EIO \(Input/output error\)"):
        log.append(1)


def test_describe_os_error() -> None:
    assert describe_os_error(OSError(errno.ENOSPC, "No space left on device")) == "ENOSPC (No space left on device)"
    assert describe_os_error(OSError("no errno")) == "no errno"


# ---------------------------------------------------------------------- real files


@contextmanager
def file_size_limit(limit: int) -> Iterator[None]:
    """Writes past `limit` bytes of any file fail with EFBIG (SIGXFSZ ignored) while inside."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    old = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old)


def batch(n: int, size: int) -> bytes:
    b = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, batch_size=1 << 22)
    for i in range(n):
        b.append(i, timestamp=NOW + i, key=None, value=b"v" * size, headers=[])
    return bytes(b.build())


def test_log_manager_takes_a_failed_dir_offline_and_keeps_the_other(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    failures = LogDirFailures(4)
    heard: list[Path] = []
    failures.add_listener(lambda d, _why: heard.append(d))
    small = {"segment.index.bytes": "4096"}
    logs = LogManager([a, b], small, failures)
    logs.load()
    in_a = logs.get_or_create("t", 0, uuid.uuid4(), {})
    in_b = logs.get_or_create("t", 1, uuid.uuid4(), {})
    assert (in_a.log_dir, in_b.log_dir) == (a, b)
    in_a.append_as_leader(batch(5, 100), 1, NOW)
    in_b.append_as_leader(batch(5, 100), 1, NOW)
    logs.checkpoint({("t", 0): 5, ("t", 1): 5})
    logs.drain()  # checkpoints are written on each dir's disk thread
    end = in_a.log_end_offset
    with file_size_limit(64 * 1024):
        with pytest.raises(KafkaStorageError) as err:
            in_a.append_as_leader(batch(10, 10_000), 1, NOW)  # ~100 KB: past the limit
        assert err.value.code == ErrorCode.KAFKA_STORAGE_ERROR
        assert "EFBIG" in failures.offline[a]
    assert heard == [a]
    # Nothing of the failed write counts; the failed dir refuses reads and further writes.
    assert in_a.log_end_offset == end
    with pytest.raises(KafkaStorageError):
        in_a.read(0, 1 << 20, max_offset=end, min_one_batch=True)
    with pytest.raises(KafkaStorageError):
        in_a.append_as_leader(batch(1, 10), 1, NOW)
    # Periodic work skips the offline dir without raising; the other dir goes on.
    in_b.append_as_leader(batch(5, 100), 1, NOW)
    logs.flush_pass(NOW + 10**9)
    logs.roll_pass(NOW + 10**12)
    logs.retention_pass(NOW, lambda _t, _p: 0)
    before = (a / RECOVERY_POINT_FILE).read_bytes()
    logs.drain()  # the background flush of flush_pass
    logs.checkpoint({("t", 0): 99, ("t", 1): 10})
    logs.drain()
    assert (a / RECOVERY_POINT_FILE).read_bytes() == before
    assert read_offsets(b / RECOVERY_POINT_FILE)[("t", 1)] == in_b.recovery_point
    # New partitions go to the online dir only.
    assert logs.get_or_create("t", 2, uuid.uuid4(), {}).log_dir == b
    # A close marks only the online dir clean: the failed one is recovered at the next start.
    logs.close({("t", 1): 10})
    assert not (a / CLEAN_SHUTDOWN_FILE).exists() and (b / CLEAN_SHUTDOWN_FILE).exists()
    assert heard == [a]
    # The next start (space back) opens both, with every acknowledged batch of the failed log.
    again = LogManager([a, b], small)
    again.load()
    reopened = again.get("t", 0)
    assert reopened is not None and reopened.log_end_offset == end
    again.close()


def test_checkpoint_failure_takes_its_dir_offline(tmp_path: Path) -> None:
    a = tmp_path / "a"
    failures = LogDirFailures()
    logs = LogManager([a], {}, failures)
    logs.load()
    logs.get_or_create("t", 0, uuid.uuid4(), {}).append_as_leader(batch(5, 100), 1, NOW)
    (a / RECOVERY_POINT_FILE).mkdir()  # the rename over it fails (EISDIR): a real OSError
    logs.checkpoint({("t", 0): 5})
    logs.drain()  # written on the dir's disk thread
    assert "writing the offset checkpoints failed: EISDIR" in failures.offline[a]
    with pytest.raises(KafkaStorageError):
        logs.get_or_create("t", 1, uuid.uuid4(), {})


def test_partition_metadata_failure_takes_its_dir_offline(tmp_path: Path) -> None:
    a = tmp_path / "a"
    failures = LogDirFailures()
    logs = LogManager([a], {}, failures)
    logs.load()
    topic_id = uuid.uuid4()
    plog = logs.get_or_create("t", 0, topic_id, {})
    logs.drain()  # partition.metadata is written on the dir's disk thread
    (plog.directory / "partition.metadata").unlink()
    (plog.directory / "partition.metadata").mkdir()  # the rename over it fails
    plog.topic_id = None  # as a log found without partition.metadata (a crash before its write)
    logs.get_or_create("t", 0, topic_id, {})  # queues the write
    logs.drain()
    assert "writing partition.metadata of t-0 failed: EISDIR" in failures.offline[a]
    with pytest.raises(KafkaStorageError, match="is offline"):
        logs.get_or_create("t", 0, topic_id, {})
