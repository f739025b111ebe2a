"""One coordinator partition's appends: one in flight at a time, the rest coalesced.

Operations submit their records (already encoded key/value pairs) under the caller's entry
number. While an append is in flight, later submissions wait and then go together in the
next batch, in submission order, up to `max_bytes` of keys and values (an operation larger
than that goes alone), as Kafka's coordinator runtime batches its writes. When an append
finishes, `on_done(entries, code)` gets the entries it carried (in submission order) and
its result; then the next batch starts, unless the queue was closed (the partition was
unloaded): `take_unwritten` hands back what never went.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Final

from broker.log.records import BatchHeader, Record, encode_records
from quorum.kafka_errors import ErrorCode

__all__ = ["COALESCE_MAX_BYTES", "AppendQueue", "EncodedRecords", "encode_batch"]

log = logging.getLogger(__name__)

# The most bytes of keys and values one append of queued operations carries (well below the
# internal topics' max.message.bytes of 1 MiB); an operation larger than this goes alone.
COALESCE_MAX_BYTES: Final = 512 * 1024

EncodedRecords = list[tuple[bytes, bytes | None]]  # (key, value or None: a tombstone)


def encode_batch(records: EncodedRecords, now_ms: int) -> bytes:
    """One uncompressed batch of `records` (the leader sets its offsets and leader epoch)."""
    return encode_records(
        [Record(i, now_ms, k, v) for i, (k, v) in enumerate(records)],
        BatchHeader(partition_leader_epoch=-1, attributes=0),
    )


class AppendQueue:
    def __init__(
        self,
        name: str,
        append: Callable[[EncodedRecords], Awaitable[ErrorCode]],
        on_done: Callable[[list[int], ErrorCode], None],
        *,
        max_bytes: int = COALESCE_MAX_BYTES,
    ) -> None:
        self.name = name  # for logs: "topic-partition"
        self._append = append
        self._on_done = on_done
        self.max_bytes = max_bytes
        self.writing = False
        self.closed = False
        self._queued: deque[tuple[int, EncodedRecords]] = deque()

    def submit(self, entry: int, records: EncodedRecords) -> None:
        self._queued.append((entry, records))
        if not self.writing and not self.closed:
            self._write_next()

    def close(self) -> None:
        """No batch starts any more (the one in flight still reports to `on_done`)."""
        self.closed = True

    def take_unwritten(self) -> list[int]:
        """The entries submitted and never written (after `close`)."""
        entries = [entry for entry, _ in self._queued]
        self._queued.clear()
        return entries

    def _write_next(self) -> None:
        entries: list[int] = []
        records: EncodedRecords = []
        size = 0
        while self._queued:
            entry, encoded = self._queued[0]
            more = sum(len(k) + len(v or b"") for k, v in encoded)
            if entries and size + more > self.max_bytes:
                break
            self._queued.popleft()
            entries.append(entry)
            records.extend(encoded)
            size += more
        if not entries:
            return
        self.writing = True
        write = asyncio.ensure_future(self._append(records))

        def finished(w: asyncio.Future[ErrorCode]) -> None:
            code = ErrorCode.NOT_COORDINATOR if w.cancelled() or w.exception() is not None else w.result()
            if not w.cancelled() and w.exception() is not None:
                log.error("appending to %s failed: %s", self.name, w.exception())
            self.writing = False
            self._on_done(entries, code)
            if not self.closed:
                self._write_next()

        write.add_done_callback(finished)
