"""One coordinator partition's appends: one in flight at a time, the rest coalesced.

Operations submit their records (already encoded key/value pairs) under the caller's entry
number. While an append is in flight, later submissions wait and then go together in the
next batch, in submission order, up to `max_bytes` of keys and values (an operation larger
than that goes alone), as Kafka's coordinator runtime batches its writes. When an append
finishes, `on_done(entries, code)` gets the entries it carried (in submission order) and
its result; then the next batch starts, unless the queue was closed (the partition was
unloaded): `take_unwritten` hands back what never went.

A transactional write (submitted with its producer's id and epoch: the group coordinator's
TxnOffsetCommit) goes alone, through `append_transactional`, as Kafka's coordinator runtime
writes each transactional batch on its own.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Final

from broker.log.records import BatchHeader, Record, encode_records
from quorum.kafka_errors import ErrorCode
from quorum.storage.batch_layout import ATTR_TRANSACTIONAL

__all__ = ["COALESCE_MAX_BYTES", "AppendQueue", "EncodedRecords", "Producer", "encode_batch"]

log = logging.getLogger(__name__)

# The most bytes of keys and values one append of queued operations carries (well below the
# internal topics' max.message.bytes of 1 MiB); an operation larger than this goes alone.
COALESCE_MAX_BYTES: Final = 512 * 1024

EncodedRecords = list[tuple[bytes, bytes | None]]  # (key, value or None: a tombstone)
Producer = tuple[int, int]  # a transactional write's producer id and epoch


def encode_batch(records: EncodedRecords, now_ms: int, producer: Producer | None = None) -> bytes:
    """One uncompressed batch of `records` (the leader sets its offsets and leader epoch);
    with a `producer`, its transactional batch: its id and epoch, the transactional bit and
    base sequence 0, as Kafka's coordinator runtime builds it."""
    header = (
        BatchHeader(partition_leader_epoch=-1, attributes=0)
        if producer is None
        else BatchHeader(-1, ATTR_TRANSACTIONAL, producer_id=producer[0], producer_epoch=producer[1], base_sequence=0)
    )
    return encode_records([Record(i, now_ms, k, v) for i, (k, v) in enumerate(records)], header)


class AppendQueue:
    def __init__(
        self,
        name: str,
        append: Callable[[EncodedRecords], Awaitable[ErrorCode]],
        on_done: Callable[[list[int], ErrorCode], None],
        *,
        max_bytes: int = COALESCE_MAX_BYTES,
        append_transactional: Callable[[EncodedRecords, Producer], Awaitable[ErrorCode]] | None = None,
    ) -> None:
        self.name = name  # for logs: "topic-partition"
        self._append = append
        self._append_transactional = append_transactional
        self._on_done = on_done
        self.max_bytes = max_bytes
        self.writing = False
        self.closed = False
        self._queued: deque[tuple[int, EncodedRecords, Producer | None]] = deque()

    def submit(self, entry: int, records: EncodedRecords, producer: Producer | None = None) -> None:
        """Queue `records` under `entry`; with a `producer`, as its transactional write."""
        self._queued.append((entry, records, producer))
        if not self.writing and not self.closed:
            self._write_next()

    def close(self) -> None:
        """No batch starts any more (the one in flight still reports to `on_done`)."""
        self.closed = True

    def take_unwritten(self) -> list[int]:
        """The entries submitted and never written (after `close`)."""
        entries = [entry for entry, _, _ in self._queued]
        self._queued.clear()
        return entries

    def _write_next(self) -> None:
        entries: list[int] = []
        records: EncodedRecords = []
        size = 0
        producer = self._queued[0][2] if self._queued else None
        while self._queued:
            entry, encoded, its_producer = self._queued[0]
            more = sum(len(k) + len(v or b"") for k, v in encoded)
            if entries and (size + more > self.max_bytes or producer is not None or its_producer is not None):
                break  # (a transactional write goes alone)
            self._queued.popleft()
            entries.append(entry)
            records.extend(encoded)
            size += more
        if not entries:
            return
        self.writing = True
        if producer is not None:
            assert self._append_transactional is not None, f"{self.name}: no transactional writes here"
            write = asyncio.ensure_future(self._append_transactional(records, producer))
        else:
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
