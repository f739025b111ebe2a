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
