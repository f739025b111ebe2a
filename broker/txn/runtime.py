"""The transaction coordinator's IO: one `TxnCoordinator` per `__transaction_state` partition
this broker leads, loaded from the partition's log, written with acks=all, driven by timers.

- Leadership (as the group runtime, with the shared `broker.coordinator` pieces): after every
  metadata change, a partition this broker now leads (or leads in a new leader epoch) is
  loaded again from its log, its records replayed into a new `TxnCoordinator` whose
  coordinator epoch is the partition's leader epoch; meanwhile its transactional ids are
  answered COORDINATOR_LOAD_IN_PROGRESS. A partition it no longer leads is dropped at once:
  its waiting requests are answered NOT_COORDINATOR, and so is every later request.
- Writes: the coordinator's records go through the partition's `AppendQueue` (one append in
  flight, later records coalesced) as leader with acks=-1, waiting up to `commit_timeout_ms`.
  Each record's result goes back to the coordinator (`appended`), which only then releases
  the answer: nothing is answered before it is committed.
- Markers: the coordinator's `MarkerRequest`s go to the `MarkerChannel` (the marker
  sender), whose results come back through `markers_written` / `partitions_deleted`.
- Timers: one task per partition sleeps until the coordinator's next deadline and runs
  `tick` (transaction timeouts, id expiration, completion retries).

Times are epoch milliseconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final, Protocol

from broker.coordinator.append_queue import AppendQueue, EncodedRecords, encode_batch
from broker.coordinator.leadership import leadership_changes
from broker.coordinator.log_replay import replay_log
from broker.coordinator.partition_host import CoordinatorPartitionHost
from broker.group.records import RecordSchemaError
from broker.txn.coordinator import Outcome, ProducerIdSource, Reply, TxnConfig, TxnCoordinator
from broker.txn.messages import (
    AddOffsetsRequest,
    AddPartitionsRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    InitProducerIdResult,
    MarkerRequest,
    TopicPartition,
    TransactionDescription,
    TransactionListing,
)
from broker.txn.metadata import TxnState
from broker.txn.records import decode_key, decode_value, encode_key, encode_value, transaction_partition
from quorum.kafka_errors import ErrorCode

__all__ = ["TRANSACTION_STATE_TOPIC", "MarkerChannel", "TxnRuntime"]

log = logging.getLogger(__name__)

TRANSACTION_STATE_TOPIC: Final = "__transaction_state"
# Append results after which the record may still commit (it is in the leader's log, the
# replicas were not waited for long enough): the coordinator must not be told it failed.
MAY_COMMIT: Final = frozenset({ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND})


class MarkerChannel(Protocol):
    """Where the markers of prepared transactions go (`broker.txn.marker_sender.MarkerSender`)."""

    def send(self, request: MarkerRequest) -> None: ...


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class _Partition:
    partition: int
    epoch: int  # the partition's leader epoch = the coordinator epoch
    coordinator: TxnCoordinator
    appends: AppendQueue | None = None
    ready: bool = False
    closed: bool = False
    waiters: dict[int, asyncio.Future[Reply]] = field(default_factory=dict)  # by token
    written: dict[int, list[str]] = field(default_factory=dict)  # append entry -> its transactional ids
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


class TxnRuntime:
    def __init__(
        self,
        node_id: int,
        host: CoordinatorPartitionHost,
        config: TxnConfig,
        producer_ids: ProducerIdSource,
        *,
        commit_timeout_ms: int = 5_000,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.node_id = node_id
        self.host = host
        self.config = config
        self.producer_ids = producer_ids
        self.commit_timeout_ms = commit_timeout_ms
        self.clock = clock
        self.markers: MarkerChannel | None = None  # set by the wiring (None: markers are dropped)
        self.partitions: dict[int, _Partition] = {}
        self._tokens = itertools.count(1)
        self._entries = itertools.count(1)

    # ================================================================== leadership

    def on_metadata(self) -> None:
        """Load the partitions this broker leads now, drop those it does not."""
        unload, load = leadership_changes(
            self.host.partition_count(), self.host.led_epoch, {n: p.epoch for n, p in self.partitions.items()}
        )
        for n in unload:
            self._unload(self.partitions[n])
        for n, epoch in load:
            self._load(n, epoch)

    def _load(self, n: int, epoch: int) -> None:
        p = _Partition(n, epoch, TxnCoordinator(self.config, epoch, self.producer_ids))

        async def append(records: EncodedRecords) -> ErrorCode:
            return await self.host.append(n, encode_batch(records, self.clock()), self.commit_timeout_ms)

        p.appends = AppendQueue(f"{TRANSACTION_STATE_TOPIC}-{n}", append, lambda es, code: self._appended(p, es, code))
        self.partitions[n] = p
        p.tasks.append(asyncio.get_running_loop().create_task(self._load_and_run(p)))

    def _unload(self, p: _Partition) -> None:
        p.closed = True
        if p.appends is not None:
            p.appends.close()
        if self.partitions.get(p.partition) is p:
            del self.partitions[p.partition]
        for task in p.tasks:
            task.cancel()
        for fut in p.waiters.values():
            if not fut.done():
                fut.set_exception(_NotCoordinator())
        p.waiters.clear()
        log.info("broker %d: transaction coordinator of %s-%d unloaded", self.node_id, TRANSACTION_STATE_TOPIC,
                 p.partition)  # fmt: skip

    async def _load_and_run(self, p: _Partition) -> None:
        start = time.monotonic()
        plog = self.host.partition_log(p.partition)
        records = 0
        if plog is not None:

            def apply(raw_key: bytes | memoryview, raw_value: bytes | memoryview | None) -> bool:
                try:
                    key = decode_key(raw_key)
                    value = decode_value(raw_value)
                except RecordSchemaError as exc:
                    log.warning("skipping an unreadable record of %s-%d: %s", TRANSACTION_STATE_TOPIC,
                                p.partition, exc)  # fmt: skip
                    return False
                p.coordinator.replay(key, value)
                return True

            try:
                records = await replay_log(plog, apply)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("broker %d: loading %s-%d failed", self.node_id, TRANSACTION_STATE_TOPIC, p.partition)
                return
        p.ready = True
        log.info(
            "broker %d: transaction coordinator of %s-%d loaded in %.0f ms (coordinator epoch %d, %d records, "
            "%d transactional ids)", self.node_id, TRANSACTION_STATE_TOPIC, p.partition,
            (time.monotonic() - start) * 1000, p.epoch, records, len(p.coordinator.txns),
        )  # fmt: skip
        self._dispatch(p, p.coordinator.loaded(self.clock()))
        await self._run_timers(p)

    async def _run_timers(self, p: _Partition) -> None:
        while not p.closed:
            delay = max(0.0, (p.coordinator.next_deadline_ms() - self.clock()) / 1000)
            if delay > 0:
                p.wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(delay, 1.0)):
                        await p.wake.wait()
                continue
            self._dispatch(p, p.coordinator.tick(self.clock()))

    # ================================================================== writes, answers, markers

    def _dispatch(self, p: _Partition, out: Outcome) -> None:
        """Send `out`'s answers, append its records, hand its markers to the sender."""
        for token, reply in out.replies.items():
            fut = p.waiters.pop(token, None)
            if fut is not None and not fut.done():
                fut.set_result(reply)
        if out.writes and p.appends is not None and not p.closed:
            entry = next(self._entries)
            # One result per transactional id: its records (a completion and the next
            # transaction's first record, at most) are in this one append.
            p.written[entry] = list(dict.fromkeys(w.key.transactional_id for w in out.writes))
            encoded: EncodedRecords = [
                (encode_key(w.key), None if w.value is None else encode_value(w.value)) for w in out.writes
            ]
            p.appends.submit(entry, encoded)
        if out.markers and not p.closed:
            if self.markers is None:
                log.warning("broker %d: no marker sender: %d marker requests dropped", self.node_id, len(out.markers))
            else:
                for request in out.markers:
                    self.markers.send(request)
        p.wake.set()  # deadlines may have moved earlier

    def _appended(self, p: _Partition, entries: list[int], code: ErrorCode) -> None:
        """An append of `entries` finished with `code`: each record's result to the coordinator.
        An append that may still commit (`MAY_COMMIT`) is not a failure the coordinator can
        undo: the partition is loaded again from its log (its waiting requests are answered
        NOT_COORDINATOR and retried by the clients), so the state never lags the log."""
        if code != ErrorCode.NONE:
            log.warning("broker %d: a transaction state write to %s-%d failed: %s", self.node_id,
                        TRANSACTION_STATE_TOPIC, p.partition, code.name)  # fmt: skip
        if code in MAY_COMMIT and not p.closed:
            for entry in entries:
                p.written.pop(entry, None)
            self._unload(p)
            if self.host.led_epoch(p.partition) == p.epoch:
                self._load(p.partition, p.epoch)
            return
        now = self.clock()
        for entry in entries:
            for tid in p.written.pop(entry, []):
                if not p.closed:
                    self._dispatch(p, p.coordinator.appended(tid, code, now))
        if p.closed and p.appends is not None:
            for entry in p.appends.take_unwritten():
                p.written.pop(entry, None)

    def current(self, request: MarkerRequest) -> _Partition | None:
        """The loaded partition whose coordinator sent `request` (None: it moved or was reloaded)."""
        count = self.host.partition_count()
        if count <= 0:
            return None
        p = self.partitions.get(transaction_partition(request.transactional_id, count))
        if p is None or p.closed or p.epoch != request.coordinator_epoch:
            return None
        return p

    def is_current(self, request: MarkerRequest) -> bool:
        return self.current(request) is not None

    def markers_written(self, request: MarkerRequest, results: Mapping[TopicPartition, ErrorCode]) -> None:
        p = self.current(request)
        if p is not None:
            self._dispatch(p, p.coordinator.markers_written(request, results, self.clock()))

    def partitions_deleted(self, request: MarkerRequest, partitions: frozenset[TopicPartition]) -> None:
        p = self.current(request)
        if p is not None:
            self._dispatch(p, p.coordinator.partitions_deleted(request, partitions, self.clock()))

    # ================================================================== requests

    def _partition_for(self, transactional_id: str) -> tuple[_Partition | None, ErrorCode]:
        count = self.host.partition_count()
        if count <= 0:
            return None, ErrorCode.COORDINATOR_NOT_AVAILABLE
        p = self.partitions.get(transaction_partition(transactional_id, count))
        if p is None:
            return None, ErrorCode.NOT_COORDINATOR
        if not p.ready:
            return None, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return p, ErrorCode.NONE

    def is_coordinator(self, transactional_id: str) -> ErrorCode:
        return self._partition_for(transactional_id)[1]

    async def _waiting(self, p: _Partition, op: Callable[[int], Outcome]) -> Reply:
        token = next(self._tokens)
        fut: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        p.waiters[token] = fut
        self._dispatch(p, op(token))
        try:
            return await fut
        except _NotCoordinator:
            return ErrorCode.NOT_COORDINATOR
        finally:
            p.waiters.pop(token, None)

    async def init_producer_id(self, req: InitProducerIdRequest) -> InitProducerIdResult:
        p, error = self._partition_for(req.transactional_id)
        if p is None:
            return InitProducerIdResult(error)
        reply = await self._waiting(p, lambda token: p.coordinator.init_producer_id(req, token, self.clock()))
        return reply if isinstance(reply, InitProducerIdResult) else InitProducerIdResult(reply)

    async def add_partitions(self, req: AddPartitionsRequest) -> ErrorCode:
        p, error = self._partition_for(req.transactional_id)
        if p is None:
            return error
        return _code(await self._waiting(p, lambda token: p.coordinator.add_partitions(req, token, self.clock())))

    async def add_offsets(self, req: AddOffsetsRequest) -> ErrorCode:
        p, error = self._partition_for(req.transactional_id)
        if p is None:
            return error
        return _code(await self._waiting(p, lambda token: p.coordinator.add_offsets(req, token, self.clock())))

    async def end_txn(self, req: EndTxnRequest) -> ErrorCode:
        p, error = self._partition_for(req.transactional_id)
        if p is None:
            return error
        return _code(await self._waiting(p, lambda token: p.coordinator.end_txn(req, token, self.clock())))

    def verify(self, req: AddPartitionsRequest) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn VerifyOnly (KIP-890 part 1): reads committed state only."""
        p, error = self._partition_for(req.transactional_id)
        if p is None:
            return dict.fromkeys(req.partitions, error)
        return p.coordinator.verify_partitions(req)

    def describe(self, transactional_id: str) -> TransactionDescription:
        p, error = self._partition_for(transactional_id)
        if p is None:
            return TransactionDescription(error, transactional_id)
        return p.coordinator.describe(transactional_id)

    def list_transactions(
        self, producer_ids: frozenset[int], states: frozenset[str], duration_ms: int
    ) -> tuple[ErrorCode, list[TransactionListing], list[str]]:
        """Over every partition this broker coordinates: (COORDINATOR_LOAD_IN_PROGRESS if one
        is still loading, else NONE; the listings; the unknown state names)."""
        error = ErrorCode.NONE
        listings: list[TransactionListing] = []
        unknown: list[str] = []
        now = self.clock()
        for p in self.partitions.values():
            if not p.ready:
                error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
                continue
            listed, unknown = p.coordinator.list_transactions(producer_ids, states, duration_ms, now)
            listings.extend(listed)
        if not self.partitions:
            unknown = sorted(states - {s.kafka_name for s in TxnState})
        return error, listings, unknown

    async def close(self) -> None:
        for p in list(self.partitions.values()):
            self._unload(p)


def _code(reply: Reply) -> ErrorCode:
    return reply.error if isinstance(reply, InitProducerIdResult) else reply


class _NotCoordinator(Exception):
    """The partition was unloaded while a request waited."""
