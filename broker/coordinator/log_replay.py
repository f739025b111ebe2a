"""Loading a coordinator partition: every keyed record of its data batches, in log order.

Control batches (transaction markers) carry no coordinator state and are skipped, as are
records without a key. The log is read `LOAD_CHUNK_BYTES` at a time, yielding the event
loop between reads, so a large partition never stalls the broker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final

from broker.coordinator.partition_host import LoggedPartition
from broker.log.records import batch_records
from quorum.storage.batch_layout import ATTR_CONTROL, BATCH_HEADER_SIZE, HEADER, LOG_HEADER, LOG_OVERHEAD

__all__ = ["LOAD_CHUNK_BYTES", "replay_log"]

LOAD_CHUNK_BYTES: Final = 1 << 20  # what one read of a loading partition takes, before yielding the loop

# (key, value or None for a tombstone) -> whether the record was applied (False: unreadable, skipped)
RecordSink = Callable[[bytes | memoryview, bytes | memoryview | None], bool]


async def replay_log(plog: LoggedPartition, apply: RecordSink) -> int:
    """Call `apply` on every keyed record of `plog`'s data batches, from its log start to its
    log end offset as of the call; how many records were applied."""
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
            base, attrs, last_delta = fields[0], fields[5], fields[6]
            if not attrs & ATTR_CONTROL:
                for _off, _ts, rec in batch_records(data[pos : pos + size], payloads=True):
                    if rec.key is None:
                        continue
                    if apply(rec.key, rec.value):
                        count += 1
            offset = base + last_delta + 1
            pos += size
        if pos == 0:
            break
        await asyncio.sleep(0)
    return count
