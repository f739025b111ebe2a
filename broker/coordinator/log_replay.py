"""Loading a coordinator partition: every keyed record of its data batches, in log order.

Control batches (transaction markers) carry no coordinator state and are skipped, as are
records without a key (`replay_log`). `visit_log` shows every record with its batch's
header fields instead (the group coordinator's transactional offsets and their markers).
The log is read `LOAD_CHUNK_BYTES` at a time, yielding the event loop between reads, so a
large partition never stalls the broker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from broker.coordinator.partition_host import LoggedPartition
from broker.log.records import batch_records
from quorum.storage.batch_layout import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    BATCH_HEADER_SIZE,
    HEADER,
    LOG_HEADER,
    LOG_OVERHEAD,
)

__all__ = ["LOAD_CHUNK_BYTES", "LoggedRecord", "replay_log", "visit_log"]

LOAD_CHUNK_BYTES: Final = 1 << 20  # what one read of a loading partition takes, before yielding the loop

# (key, value or None for a tombstone) -> whether the record was applied (False: unreadable, skipped)
RecordSink = Callable[[bytes | memoryview, bytes | memoryview | None], bool]


@dataclass(frozen=True, slots=True)
class LoggedRecord:
    """One record of the log, with what its batch's header says."""

    offset: int
    key: bytes | memoryview | None
    value: bytes | memoryview | None
    producer_id: int  # the batch's (-1: none)
    transactional: bool  # the batch's transactional bit (0x10)
    control: bool  # the batch's control bit (0x20): a transaction marker


async def replay_log(plog: LoggedPartition, apply: RecordSink) -> int:
    """Call `apply` on every keyed record of `plog`'s data batches, from its log start to its
    log end offset as of the call; how many records were applied."""
    return await visit_log(plog, lambda r: not r.control and r.key is not None and apply(r.key, r.value))


async def visit_log(plog: LoggedPartition, visit: Callable[[LoggedRecord], bool]) -> int:
    """Call `visit` on every record of `plog` (control batches' too), in log order, from its
    log start to its log end offset as of the call; how many it applied (returned True)."""
    offset = plog.log_start_offset
    end = plog.log_end_offset
    count = 0
    while offset < end:
        data = memoryview(plog.read(offset, LOAD_CHUNK_BYTES, max_offset=end, min_one_batch=True))
        if not data:
            break
        pos = 0
        while pos + LOG_OVERHEAD <= len(data):
            size = LOG_OVERHEAD + LOG_HEADER.unpack_from(data, pos)[1]
            if size < BATCH_HEADER_SIZE or pos + size > len(data):
                break
            fields = HEADER.unpack_from(data, pos)
            base, attrs, last_delta, producer_id = fields[0], fields[5], fields[6], fields[9]
            transactional, control = bool(attrs & ATTR_TRANSACTIONAL), bool(attrs & ATTR_CONTROL)
            for off, _ts, rec in batch_records(data[pos : pos + size], payloads=True):
                if visit(LoggedRecord(off, rec.key, rec.value, producer_id, transactional, control)):
                    count += 1
            offset = base + last_delta + 1
            pos += size
        if pos == 0:
            break
        await asyncio.sleep(0)
    return count
