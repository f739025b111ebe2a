"""The once-a-second roll pass (`LogManager.roll_pass`, segment.ms without appends): it rolls
exactly the logs whose non-empty active segment is older than their `segment.ms`, and runs
the full roll check (`PartitionLog.maybe_roll`) on those only, so that an idle broker's pass
over 10,000 logs costs a time comparison per log."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from broker.log import LogManager
from broker.log.partition_log import PartitionLog


def batch(n: int) -> bytes:
    b = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, batch_size=1 << 20)
    now = int(time.time() * 1000)
    for i in range(n):
        b.append(i, timestamp=now + i, key=None, value=b"v" * 10, headers=[])
    return bytes(b.build())


def test_the_roll_pass_rolls_only_the_logs_past_segment_ms_and_checks_no_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = LogManager([tmp_path], {"segment.index.bytes": "4096"})
    logs.load()
    hour = {"segment.ms": str(3_600_000)}
    minute = {"segment.ms": str(60_000)}
    old_written = logs.get_or_create("t", 0, uuid.uuid4(), minute)  # written, due after a minute
    old_empty = logs.get_or_create("t", 1, uuid.uuid4(), minute)  # nothing written: never rolls by time
    young = logs.get_or_create("t", 2, uuid.uuid4(), hour)  # written, not due for an hour
    for plog in (old_written, young):
        plog.append_as_leader(batch(3), 0, int(time.time() * 1000))
    checked: list[PartitionLog] = []
    real = PartitionLog.maybe_roll

    def counting(self: PartitionLog, *args: object, **kwargs: object) -> bool:
        checked.append(self)
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(PartitionLog, "maybe_roll", counting)
    later = int(time.time() * 1000) + 120_000  # two minutes on
    logs.roll_pass(later)
    assert checked == [old_written], "the pass ran the full roll check on a log that was not due"
    assert len(old_written.segments) == 2 and old_written.active.size == 0
    assert len(old_empty.segments) == 1 and len(young.segments) == 1
    checked.clear()
    logs.roll_pass(later)  # the new active segment is empty: nothing is due any more
    assert checked == []
    logs.drain()
    logs.close()


@pytest.mark.pure_python  # spies on PartitionLog.time_roll_due, which compiled LogManager calls directly (conftest.py)
def test_the_roll_pass_visits_only_the_logs_that_are_due(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Idle logs cost nothing per pass: deadlines are kept, not re-checked every second. A
    config change and a truncation move a deadline; the pass follows."""
    logs = LogManager([tmp_path], {"segment.index.bytes": "4096"})
    logs.load()
    hour = {"segment.ms": str(3_600_000)}
    idle = [logs.get_or_create("idle", p, uuid.uuid4(), hour) for p in range(40)]
    for plog in idle[:20]:  # written: due in an hour; the other 20 are empty
        plog.append_as_leader(batch(1), 0, int(time.time() * 1000))
    changed = logs.get_or_create("changed", 0, uuid.uuid4(), hour)
    changed.append_as_leader(batch(1), 0, int(time.time() * 1000))
    visited: list[PartitionLog] = []
    real = PartitionLog.time_roll_due

    def counting(self: PartitionLog, now_ms: int) -> bool:
        visited.append(self)
        return real(self, now_ms)

    monkeypatch.setattr(PartitionLog, "time_roll_due", counting)
    now = int(time.time() * 1000)
    logs.roll_pass(now)  # the first pass also runs the minute's full scan: deadlines only
    logs.roll_pass(now + 1000)
    assert visited == [], "an idle pass looked at logs that were not due"
    logs.update_config("changed", {"segment.ms": "60000"})  # now due a minute after its creation
    logs.roll_pass(now + 120_000)
    assert visited == [changed] and len(changed.segments) == 2
    visited.clear()
    # A truncation back into the first segment makes it active again: due at once.
    changed.append_as_leader(batch(1), 0, int(time.time() * 1000))
    changed.truncate_to(1)
    assert len(changed.segments) == 1 and changed.active.size > 0
    logs.roll_pass(now + 120_000)
    assert visited == [changed] and len(changed.segments) == 2
    visited.clear()
    logs.roll_pass(now + 3_700_000)  # an hour on: the 20 written idle logs, and no other
    assert sorted(id(p) for p in visited) == sorted(id(p) for p in idle[:20])
    assert all(len(p.segments) == 2 for p in idle[:20]) and all(len(p.segments) == 1 for p in idle[20:])
    logs.drain()
    logs.close()


def test_the_flush_pass_flushes_logs_whose_flush_ms_is_set_and_follows_config_changes(tmp_path: Path) -> None:
    logs = LogManager([tmp_path], {"segment.index.bytes": "4096"})
    logs.load()
    plog = logs.get_or_create("f", 0, uuid.uuid4(), {})
    plog.append_as_leader(batch(3), 0, int(time.time() * 1000))
    later = int(time.time() * 1000) + 10_000
    logs.flush_pass(later)  # flush.ms unset (Kafka's default): never flushed by time
    logs.drain()
    assert plog.unflushed_messages == 3
    logs.update_config("f", {"flush.ms": "1000"})
    logs.flush_pass(later)
    logs.drain()
    assert plog.unflushed_messages == 0 and plog.recovery_point == plog.log_end_offset
    logs.update_config("f", {})  # unset again
    plog.append_as_leader(batch(2), 0, int(time.time() * 1000))
    logs.flush_pass(later + 60_000)
    logs.drain()
    assert plog.unflushed_messages == 2
    logs.close()
