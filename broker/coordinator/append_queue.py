"""One coordinator partition's appends: one batch per event-loop turn, up to `max_in_flight`.

Operations submit their records (already encoded key/value pairs) under the caller's entry
number. What is submitted during one turn of the event loop goes out together as one batch
at the end of that turn, in submission order, up to `max_bytes` of keys and values (an
operation larger than that goes alone), as Kafka's coordinator runtime batches its writes.
At most `max_in_flight` appends wait for their acks at a time: while that many are in
flight, later submissions wait and go together in the next batch once one finishes. With
`max_in_flight` 1 (the default: the transaction coordinator) each batch waits for the one
before it; the group coordinator pipelines several, so that a commit does not wait for a
whole acks=all round trip of the batch before its own (its answers still wait for every
earlier append: `broker.group.write_order.WriteOrder`). Batches start in submission order
(each append's leader write happens before the next one's), so the log holds them in that
order. When an append finishes, `on_done(entries, code)` gets the entries it carried (in
submission order) and its result; no batch starts once the queue was closed (the partition
was unloaded): `take_unwritten` hands back what never went.

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

from broker.log.records import BatchHeader, encode_keyed_records
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
    return encode_keyed_records(records, now_ms, header)


class AppendQueue:
    def __init__(
        self,
        name: str,
        append: Callable[[EncodedRecords], Awaitable[ErrorCode]],
        on_done: Callable[[list[int], ErrorCode], None],
        *,
        max_bytes: int = COALESCE_MAX_BYTES,
        max_in_flight: int = 1,
        append_transactional: Callable[[EncodedRecords, Producer], Awaitable[ErrorCode]] | None = None,
    ) -> None:
        self.name = name  # for logs: "topic-partition"
        self._append = append
        self._append_transactional = append_transactional
        self._on_done = on_done
        self.max_bytes = max_bytes
        self.max_in_flight = max(1, max_in_flight)
        self.in_flight = 0  # appends started and not finished
        self.closed = False
        self._flush_due = False  # a flush is scheduled at the end of this loop turn
        self._queued: deque[tuple[int, EncodedRecords, Producer | None]] = deque()

    def submit(self, entry: int, records: EncodedRecords, producer: Producer | None = None) -> None:
        """Queue `records` under `entry`; with a `producer`, as its transactional write."""
        self._queued.append((entry, records, producer))
        self._schedule_flush()

    def close(self) -> None:
        """No batch starts any more (the one in flight still reports to `on_done`)."""
        self.closed = True

    def take_unwritten(self) -> list[int]:
        """The entries submitted and never written (after `close`)."""
        entries = [entry for entry, _, _ in self._queued]
        self._queued.clear()
        return entries

    @property
    def writing(self) -> bool:
        """Whether an append is in flight."""
        return self.in_flight > 0

    def _schedule_flush(self) -> None:
        if self._flush_due or self.closed or self.in_flight >= self.max_in_flight or not self._queued:
            return
        self._flush_due = True
        asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        """The end of a loop turn: start batches of what is queued while appends may start."""
        self._flush_due = False
        while self._queued and not self.closed and self.in_flight < self.max_in_flight:
            self._write_next()

    def _write_next(self) -> None:
        entries: list[int] = []
        records: EncodedRecords = []
        size = 0
        producer = self._queued[0][2] if self._queued else None
        while self._queued:
            entry, encoded, its_producer = self._queued[0]
            more = 0  # bytes of its keys and values (a loop: a generator is an object per operation)
            for k, v in encoded:
                more += len(k) if v is None else len(k) + len(v)
            if entries and (size + more > self.max_bytes or producer is not None or its_producer is not None):
                break  # (a transactional write goes alone)
            self._queued.popleft()
            entries.append(entry)
            records.extend(encoded)
            size += more
        if not entries:
            return
        self.in_flight += 1
        if producer is not None:
            assert self._append_transactional is not None, f"{self.name}: no transactional writes here"
            write = asyncio.ensure_future(self._append_transactional(records, producer))
        else:
            write = asyncio.ensure_future(self._append(records))

        def finished(w: asyncio.Future[ErrorCode]) -> None:
            code = ErrorCode.NOT_COORDINATOR if w.cancelled() or w.exception() is not None else w.result()
            if not w.cancelled() and w.exception() is not None:
                log.error("appending to %s failed: %s", self.name, w.exception())
            self.in_flight -= 1
            self._on_done(entries, code)
            self._schedule_flush()

        write.add_done_callback(finished)
