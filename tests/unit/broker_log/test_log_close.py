"""A clean close of a `LogManager` (issue 19): it costs what is dirty (only logs with
something not yet on disk are fsynced), it runs on `num.recovery.threads.per.data.dir`
threads per log dir (none of its fsyncs on the caller's thread with `close_off_loop`),
and the next start is clean. Real files, real fsyncs: `os.fsync` is wrapped only to
record which files were synced, by which thread."""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from broker.log import LogManager
from broker.log.checkpoints import (
    CLEAN_SHUTDOWN_FILE,
    LEADER_EPOCH_FILE,
    PARTITION_METADATA_FILE,
    RECOVERY_POINT_FILE,
    read_offsets,
)
from broker.log.dir_failure import LogDirFailures

NOW = 1_700_000_000_000
LOGS = 24


def batch(n: int = 3) -> bytes:
    b = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, batch_size=1 << 16)
    for i in range(n):
        b.append(i, timestamp=NOW + i, key=None, value=b"v" * 50, headers=[])
    return bytes(b.build())


class Fsyncs:
    """Every fsync of this process while installed: (path synced, thread name)."""

    def __init__(self) -> None:
        self.calls: list[tuple[Path, str]] = []
        self._real = os.fsync

    def __call__(self, fd: int) -> None:
        self.calls.append((Path(os.readlink(f"/proc/self/fd/{fd}")), threading.current_thread().name))
        self._real(fd)

    def partitions(self, root: Path) -> set[str]:
        """The partition directories of `root` whose files (or themselves) were fsynced."""
        out = set()
        for path, _thread in self.calls:
            rel = path.relative_to(root) if path.is_relative_to(root) else None
            if rel is not None and rel.parts and rel.parts[0].startswith("t-"):
                out.add(rel.parts[0])
        return out


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> Iterator[Fsyncs]:
    spy = Fsyncs()
    monkeypatch.setattr(os, "fsync", spy)
    yield spy


def started(root: Path, **config: str) -> LogManager:
    logs = LogManager([root], config)
    logs.load()
    return logs


def test_a_clean_close_flushes_only_the_dirty_logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "d"
    logs = started(root)
    for p in range(LOGS):
        logs.get_or_create("t", p, uuid.uuid4(), {}).append_as_leader(batch(), 1, NOW)
    logs.close()
    # Clean start; then writes to 5 of the 24 logs.
    logs = started(root)
    assert all(plog.recovery is None or not plog.recovery.segments_recovered for plog in logs.all_logs())
    written = {f"t-{p}" for p in (1, 5, 6, 17, 23)}
    for name in written:
        plog = logs.get("t", int(name[2:]))
        assert plog is not None
        plog.append_as_leader(batch(), 2, NOW)
    ends = {tp: plog.log_end_offset for tp, plog in logs.logs.items()}
    spy = Fsyncs()
    monkeypatch.setattr(os, "fsync", spy)
    logs.close()
    monkeypatch.undo()
    assert spy.partitions(root) == written, "only the logs written since the start are fsynced"
    assert (root / CLEAN_SHUTDOWN_FILE).exists()
    assert read_offsets(root / RECOVERY_POINT_FILE) == ends
    # Closing again with nothing written: no partition file is fsynced at all.
    logs = started(root)
    assert {tp: plog.log_end_offset for tp, plog in logs.logs.items()} == ends
    spy = Fsyncs()
    monkeypatch.setattr(os, "fsync", spy)
    logs.close()
    monkeypatch.undo()
    assert spy.partitions(root) == set()
    assert (root / CLEAN_SHUTDOWN_FILE).exists()


def test_close_runs_on_num_recovery_threads_per_data_dir_threads_per_dir(tmp_path: Path, fsyncs: Fsyncs) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    logs = LogManager([a, b], {"num.recovery.threads.per.data.dir": "3"})
    logs.load()
    for p in range(LOGS):
        logs.get_or_create("t", p, uuid.uuid4(), {}).append_as_leader(batch(), 1, NOW)
    caller = threading.current_thread().name

    async def stop() -> None:
        await logs.close_off_loop()

    asyncio.run(stop())
    per_dir: dict[Path, set[str]] = {a: set(), b: set()}
    for path, thread in fsyncs.calls:
        for root in (a, b):
            if path.is_relative_to(root) and path != root and path.relative_to(root).parts[0].startswith("t-"):
                per_dir[root].add(thread)
    assert fsyncs.partitions(a) | fsyncs.partitions(b) == {f"t-{p}" for p in range(LOGS)}
    for root, threads in per_dir.items():
        closing = {t for t in threads if t.startswith("log-closing")}  # (the disk thread wrote partition.metadata)
        assert caller not in threads, f"{root}: fsynced on {threads}"
        assert 1 <= len(closing) <= 3, f"{root}: {threads}"
        assert (root / CLEAN_SHUTDOWN_FILE).exists()


def test_the_loop_runs_while_close_off_loop_flushes(tmp_path: Path) -> None:
    """The fsyncs of a clean stop run in threads: the loop takes turns meanwhile."""
    root = tmp_path / "d"
    logs = started(root, **{"num.recovery.threads.per.data.dir": "1"})
    for p in range(LOGS):
        logs.get_or_create("t", p, uuid.uuid4(), {}).append_as_leader(batch(), 1, NOW)
    turns = 0

    async def stop() -> None:
        nonlocal turns
        closing = asyncio.ensure_future(logs.close_off_loop())
        while not closing.done():
            turns += 1
            await asyncio.sleep(0)
        await closing

    asyncio.run(stop())
    assert turns > LOGS, f"the loop took {turns} turns while {LOGS} logs were fsynced"
    assert (root / CLEAN_SHUTDOWN_FILE).exists()
    again = started(root)
    assert len(again.logs) == LOGS
    assert all(plog.recovery is None or not plog.recovery.segments_recovered for plog in again.all_logs())
    again.close()


def test_a_storage_error_while_closing_takes_the_dir_offline_on_the_callers_thread(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    failures = LogDirFailures(4)
    heard: list[tuple[Path, str]] = []
    failures.add_listener(lambda d, _why: heard.append((d, threading.current_thread().name)))
    logs = LogManager([a, b], {}, failures)
    logs.load()
    for p in range(4):
        logs.get_or_create("t", p, uuid.uuid4(), {}).append_as_leader(batch(), 1, NOW)
    broken = logs.get("t", 0)
    assert broken is not None and broken.log_dir == a
    # Its directory is gone: the fsync of the directory fails (ENOENT, a real OSError).
    os.rename(broken.directory, tmp_path / "elsewhere")

    async def stop() -> None:
        await logs.close_off_loop()

    asyncio.run(stop())
    assert [d for d, _ in heard] == [a]
    assert heard[0][1] == threading.current_thread().name, "the listeners run on the loop's thread"
    assert "ENOENT" in failures.offline[a]
    assert not (a / CLEAN_SHUTDOWN_FILE).exists() and (b / CLEAN_SHUTDOWN_FILE).exists()


def test_close_writes_the_queued_partition_files_itself_instead_of_waiting_for_the_disk_thread(
    tmp_path: Path,
) -> None:
    """A broker that just created many partitions has their partition.metadata and leader-epoch
    checkpoint writes queued on the dir's one disk thread: the closing threads write them
    (in parallel), and the queued jobs then find nothing to do."""
    root = tmp_path / "d"
    logs = started(root)
    hold = threading.Event()
    logs.disk(root).submit("a slow disk", lambda: hold.wait(30))  # everything queued after it waits
    ids = {p: uuid.uuid4() for p in range(LOGS)}
    for p, topic_id in ids.items():
        plog = logs.get_or_create("t", p, topic_id, {})
        plog.assign_epoch_start_offset(3, 0)
        plog.append_as_leader(batch(), 3, NOW)
    logs.write_dirty_epochs()  # queued behind the slow job, as the periodic tick does
    closing = threading.Thread(target=logs.close)
    closing.start()
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if all(
                (root / f"t-{p}" / name).exists() for p in ids for name in (PARTITION_METADATA_FILE, LEADER_EPOCH_FILE)
            ):
                break
            time.sleep(0.05)
        written = {
            p
            for p in ids
            if (root / f"t-{p}" / PARTITION_METADATA_FILE).exists() and (root / f"t-{p}" / LEADER_EPOCH_FILE).exists()
        }
        assert written == set(ids), f"written while the disk thread was held: {sorted(written)}"
    finally:
        hold.set()
        closing.join(30)
    assert (root / CLEAN_SHUTDOWN_FILE).exists()
    again = started(root)
    for p, topic_id in ids.items():
        plog = again.get("t", p)
        assert plog is not None and plog.topic_id == topic_id and plog.epoch_entries() == [(3, 0)]
        assert plog.recovery is None or not plog.recovery.segments_recovered
    again.close()
