"""The group coordinator's IO: one `GroupShard` per `__consumer_offsets` partition this broker
leads, loaded from the partition's log, written with acks=all, driven by timers.

- Leadership: `on_metadata` looks at the hosted `__consumer_offsets` replicas after every
  metadata change. A partition this broker now leads (or leads in a new leader epoch) is
  loaded again from its log: until then its groups are answered
  COORDINATOR_LOAD_IN_PROGRESS. A partition it no longer leads is dropped at once: its
  waiting requests are answered NOT_COORDINATOR, and so is every later request.
- Writes: the records of the operations of one loop turn become one batch appended as leader
  with acks=-1 (Kafka's `offsets.commit.required.acks`), waiting up to
  `offsets.commit.timeout.ms`; several batches may wait at once. The answers of
  an operation are sent only after its own append and every earlier one of the partition
  completed, so an answer never shows state that a failover could lose; a failed append
  runs the operation's undo (the rules: `broker.group.write_order.WriteOrder`).
- Transactions: a TxnOffsetCommit's records are the producer's transactional batch (its id
  and epoch, the transactional bit, base sequence 0, as Kafka's coordinator writes them),
  appended alone. `on_txn_marker` is the hook (`broker.kafka.services.TxnMarkerListener`)
  the WriteTxnMarkers path calls once a COMMIT/ABORT marker on a partition has committed;
  loading replays the markers (control batches) of the log, so both paths give the same state.
- Timers: one task per partition sleeps until the shard's earliest deadline (session and
  rebalance timeouts) and runs `tick`; every `offsets.retention.check.interval.ms` it
  expires offsets.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol
from uuid import UUID

from broker.coordinator.append_queue import AppendQueue, EncodedRecords, Producer, encode_batch
from broker.coordinator.leadership import leadership_changes
from broker.coordinator.log_replay import LoggedRecord, visit_log
from broker.coordinator.partition_host import LoggedPartition
from broker.group.messages import (
    CommitRequest,
    CommittedOffset,
    ConsumerGroupDescription,
    ConsumerHeartbeatRequest,
    ConsumerHeartbeatResult,
    GroupDescription,
    GroupListing,
    HeartbeatRequest,
    JoinRequest,
    JoinResult,
    LeaveResult,
    LeavingMember,
    SyncRequest,
    SyncResult,
    TxnCommitRequest,
)
from broker.group.records import (
    RecordSchemaError,
    coordinator_partition,
    decode_key,
    decode_value,
    encode_records,
)
from broker.group.shard import CoordinatorConfig, GroupShard, Outcome, append_error
from broker.group.write_order import WriteOrder
from broker.log.control_records import MarkerError, decode_marker_record
from broker.log.producer_state import VerificationGuard
from broker.replica.txn_verification import coordinator_write_error
from quorum.kafka_errors import ErrorCode

__all__ = ["GroupCoordinator", "LoggedPartition", "OFFSETS_TOPIC", "PartitionHost"]

log = logging.getLogger(__name__)

OFFSETS_TOPIC: Final = "__consumer_offsets"

# mypyc loads a Final global directly, where `ErrorCode.NONE` is an attribute lookup on the
# enum class at each use (several per commit).
_NONE: Final = ErrorCode.NONE

# Batches of one `__consumer_offsets` partition waiting for their acks at a time (default of
# `GroupCoordinator(appends_in_flight=...)`). Above 1 a batch is written without waiting for
# the acks of the one before (Kafka's coordinator runtime does not wait); the answers still go
# in operation order, each once every earlier append committed (`WriteOrder`: the group
# simulation drives it with every append in flight at once). 1: what comes while a batch
# waits goes together in the next one. Each batch costs the leader an append and a fetch
# answer per follower, so on a coordinator short of CPU fewer, larger batches answer more
# commits, and sooner (64 clients x 1 partition: 1 in flight ~19,500 commits/s at 46 µs of
# CPU each, p50 3.1 ms; 4 in flight ~16,000/s at 56 µs, p50 3.8 ms; 8 clients 5,691 against
# 5,433/s; 1 client the same).
APPENDS_IN_FLIGHT: Final = 1


# (partition, transactional id, producer id, producer epoch) -> (guard, transaction coordinator's code)
TxnWriteVerify = Callable[[int, str, int, int], Awaitable[tuple[VerificationGuard | None, ErrorCode]]]


class PartitionHost(Protocol):
    """The broker around the coordinator: who leads which `__consumer_offsets` partition, its
    log, and appends with acks=all."""

    def offsets_partitions(self) -> int:
        """How many partitions `__consumer_offsets` has (0: it does not exist yet)."""
        ...

    def led_epoch(self, partition: int) -> int | None:
        """The leader epoch of `__consumer_offsets`-`partition` if this broker leads it, else None."""
        ...

    def partition_log(self, partition: int) -> LoggedPartition | None: ...

    async def append(
        self, partition: int, batch: bytes, timeout_ms: int, *, verification: VerificationGuard | None = None
    ) -> ErrorCode:
        """Append one batch as leader with acks=-1; the outcome once the HW covers it
        (`verification`: a transactional batch's KIP-890 guard, given only when verified)."""
        ...

    def topic(self, name: str) -> tuple[UUID, int] | None:
        """A topic's id and partition count, from the metadata image (None: no such topic)."""
        ...

    def topic_name(self, topic_id: UUID) -> str | None: ...

    def topic_names(self) -> Iterable[str]:
        """Every topic's name, from the metadata image (what subscription regexes match)."""
        ...


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class _Loaded:
    partition: int
    epoch: int
    shard: GroupShard
    ready: bool = False
    waiters: dict[int, asyncio.Future[Any]] = field(default_factory=dict)
    order: WriteOrder = field(default_factory=WriteOrder)
    results: dict[int, asyncio.Future[ErrorCode]] = field(default_factory=dict)  # by WriteOrder entry
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    # The deadline (ms) the timer task sleeps until, or None (no deadline: it sleeps 1 s).
    # Invariant: the task wakes at or before it, so an operation wakes it only when the
    # shard's earliest deadline is now earlier (`_wake_timers`), not on every write.
    sleeps_until: int | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    closed: bool = False
    # Appends: one batch per loop turn, up to `appends_in_flight` waiting for their acks; the
    # records of the operations that come while that many wait go together in the next batch
    # (by WriteOrder entry; set by the runtime).
    appends: AppendQueue | None = None
    # Transaction completions (producer id, committed) that came while loading: applied after
    # the replay (a marker appended after the replay's end is not read by it).
    completions: list[tuple[int, bool]] = field(default_factory=list)
    # KIP-890: each producer's guard from its latest verified TxnOffsetCommit, which its
    # transactional batches are appended with; dropped by the producer's marker.
    txn_guards: dict[int, VerificationGuard | None] = field(default_factory=dict)


class GroupCoordinator:
    def __init__(
        self,
        node_id: int,
        host: PartitionHost,
        config: CoordinatorConfig,
        *,
        commit_timeout_ms: int = 5_000,
        retention_check_interval_ms: int = 600_000,
        clock: Callable[[], int] = now_ms,
        appends_in_flight: int = APPENDS_IN_FLIGHT,
    ) -> None:
        self.node_id = node_id
        self.appends_in_flight = appends_in_flight
        self.host = host
        self.config = config
        self.commit_timeout_ms = commit_timeout_ms
        self.retention_check_interval_ms = retention_check_interval_ms
        self.clock = clock
        self.partitions: dict[int, _Loaded] = {}
        # KIP-890 for TxnOffsetCommit (set by the broker: `ReplicaManager.verify_coordinator_write`
        # for `__consumer_offsets`): (partition, transactional id, producer id, epoch) -> the
        # guard to append with and the transaction coordinator's code. None: not verified.
        self.txn_verify: TxnWriteVerify | None = None
        self._tokens = itertools.count(1)
        self._tasks: set[asyncio.Task[Any]] = set()

    # ================================================================== leadership

    def on_metadata(self) -> None:
        """Load the partitions this broker leads now, drop those it does not."""
        unload, load = leadership_changes(
            self.host.offsets_partitions(), self.host.led_epoch, {n: p.epoch for n, p in self.partitions.items()}
        )
        for n in unload:
            self._unload(self.partitions[n])
        for n, epoch in load:
            self._load(n, epoch)

    def _load(self, n: int, epoch: int) -> None:
        loaded = _Loaded(n, epoch, GroupShard(self.config))

        async def append(records: EncodedRecords) -> ErrorCode:
            return await self.host.append(n, encode_batch(records, self.clock()), self.commit_timeout_ms)

        async def append_transactional(records: EncodedRecords, producer: Producer) -> ErrorCode:
            batch = encode_batch(records, self.clock(), producer)
            if self.txn_verify is None:
                return await self.host.append(n, batch, self.commit_timeout_ms)
            # No guard kept (a marker dropped it): the log takes it only into an open transaction.
            guard = loaded.txn_guards.get(producer[0])
            return await self.host.append(n, batch, self.commit_timeout_ms, verification=guard)

        loaded.appends = AppendQueue(
            f"{OFFSETS_TOPIC}-{n}",
            append,
            lambda entries, code: self._appended(loaded, entries, code),
            max_in_flight=self.appends_in_flight,
            append_transactional=append_transactional,
        )
        self.partitions[n] = loaded
        loaded.tasks.append(asyncio.get_running_loop().create_task(self._load_and_run(loaded)))

    def _unload(self, loaded: _Loaded) -> None:
        loaded.closed = True
        if loaded.appends is not None:
            loaded.appends.close()
        if self.partitions.get(loaded.partition) is loaded:
            del self.partitions[loaded.partition]
        for task in loaded.tasks:
            task.cancel()
        for fut in loaded.waiters.values():
            if not fut.done():
                fut.set_exception(_NotCoordinator())
        loaded.waiters.clear()
        log.info("broker %d: group coordinator of %s-%d unloaded", self.node_id, OFFSETS_TOPIC, loaded.partition)

    async def _load_and_run(self, loaded: _Loaded) -> None:
        start = time.monotonic()
        plog = self.host.partition_log(loaded.partition)
        records = 0
        if plog is not None:
            try:
                records = await self._replay_log(loaded, plog)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("broker %d: loading %s-%d failed", self.node_id, OFFSETS_TOPIC, loaded.partition)
                return
        for producer_id, committed in loaded.completions:
            loaded.shard.complete_transaction(producer_id, committed)
        loaded.completions.clear()
        loaded.shard.loaded(self.clock())
        loaded.ready = True
        log.info(
            "broker %d: group coordinator of %s-%d loaded in %.0f ms (leader epoch %d, %d records, %d groups)",
            self.node_id, OFFSETS_TOPIC, loaded.partition, (time.monotonic() - start) * 1000, loaded.epoch, records,
            len(loaded.shard.groups),
        )  # fmt: skip
        await asyncio.gather(self._run_timers(loaded), self._run_expiry(loaded))

    async def _replay_log(self, loaded: _Loaded, plog: LoggedPartition) -> int:
        """Replay every record in log order: a transactional batch's offsets go to its
        producer's pending ones, a control batch's marker completes them."""

        def apply(r: LoggedRecord) -> bool:
            try:
                if r.control:
                    marker = decode_marker_record(bytes(r.key or b""), None if r.value is None else bytes(r.value))
                    loaded.shard.replay_marker(r.producer_id, marker.committed, offset=r.offset)
                    return False
                if r.key is None:
                    return False
                key = decode_key(r.key)
                value = decode_value(key, r.value)
            except (RecordSchemaError, MarkerError) as exc:
                log.warning("skipping an unreadable record of %s-%d: %s", OFFSETS_TOPIC, loaded.partition, exc)
                return False
            producer_id = r.producer_id if r.transactional else -1
            loaded.shard.replay(key, value, self.clock(), offset=r.offset, producer_id=producer_id)
            return True

        return await visit_log(plog, apply)

    async def _run_timers(self, loaded: _Loaded) -> None:
        while not loaded.closed:
            deadline = loaded.shard.next_deadline()
            delay = 1.0 if deadline is None else max(0.0, (deadline - self.clock()) / 1000)
            if delay > 0:
                loaded.sleeps_until = deadline
                loaded.wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(delay, 1.0)):
                        await loaded.wake.wait()
                continue
            self._dispatch(loaded, loaded.shard.tick(self.clock()))

    async def _run_expiry(self, loaded: _Loaded) -> None:
        while not loaded.closed:
            await asyncio.sleep(self.retention_check_interval_ms / 1000)
            out = loaded.shard.expire_offsets(self.clock())
            if out.records:
                log.info("broker %d: expired %d offsets/groups in %s-%d", self.node_id, len(out.records),
                         OFFSETS_TOPIC, loaded.partition)  # fmt: skip
                self._dispatch(loaded, out)

    # ================================================================== writes and answers

    def _dispatch(self, loaded: _Loaded, out: Outcome) -> asyncio.Future[ErrorCode]:
        """Append `out.records` (if any) and answer `out.replies` once they and everything
        before them committed (`WriteOrder`'s rules); the append's outcome. The operations of
        one loop turn are written together in one batch (as Kafka's coordinator runtime batches
        its writes), in order; up to `appends_in_flight` batches wait for their acks at a time."""
        loop = asyncio.get_running_loop()
        _wake_timers(loaded)
        entry = loaded.order.submit(out)
        result: asyncio.Future[ErrorCode] = loop.create_future()
        loaded.results[entry] = result
        if out.records and loaded.appends is not None:
            loaded.appends.submit(entry, encode_records(out.records), out.producer)
        self._release(loaded)
        return result

    def _appended(self, loaded: _Loaded, entries: list[int], code: ErrorCode) -> None:
        """An append of `entries` finished with `code`."""
        if code != _NONE:
            log.warning("broker %d: a group write to %s-%d failed: %s", self.node_id, OFFSETS_TOPIC,
                        loaded.partition, code.name)  # fmt: skip
        for entry in reversed(entries):  # the undos, latest first, so that they compose
            loaded.order.completed(entry, code, undo=not loaded.closed)
        if loaded.closed and loaded.appends is not None:  # unloaded: what waits is never written
            for entry in loaded.appends.take_unwritten():
                loaded.order.completed(entry, ErrorCode.NOT_COORDINATOR, undo=False)
        self._release(loaded)

    def _release(self, loaded: _Loaded) -> None:
        for released in loaded.order.drain():
            self._answer(loaded, released.replies)
            fut = loaded.results.pop(released.entry, None)
            if fut is not None and not fut.done():
                fut.set_result(released.code)

    def _answer(self, loaded: _Loaded, replies: dict[int, Any]) -> None:
        for token, reply in replies.items():
            fut = loaded.waiters.pop(token, None)
            if fut is not None and not fut.done():
                fut.set_result(reply)

    # ================================================================== requests

    def _shard_for(self, group_id: str) -> tuple[_Loaded | None, ErrorCode]:
        if not group_id:
            return None, ErrorCode.INVALID_GROUP_ID  # before any routing, as Kafka checks it
        count = self.host.offsets_partitions()
        if count <= 0:
            return None, ErrorCode.COORDINATOR_NOT_AVAILABLE
        loaded = self.partitions.get(_partition_of(group_id, count))
        if loaded is None:
            return None, ErrorCode.NOT_COORDINATOR
        if not loaded.ready:
            return None, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return loaded, ErrorCode.NONE

    def is_coordinator(self, group_id: str) -> ErrorCode:
        return self._shard_for(group_id)[1]

    async def _waiting(
        self, loaded: _Loaded, op: Callable[[int], Outcome], error_reply: Callable[[ErrorCode], Any]
    ) -> Any:
        token = next(self._tokens)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        loaded.waiters[token] = fut
        self._dispatch(loaded, op(token))
        try:
            return await fut
        except _NotCoordinator:
            return error_reply(ErrorCode.NOT_COORDINATOR)
        finally:
            loaded.waiters.pop(token, None)

    async def join(self, req: JoinRequest) -> JoinResult:
        loaded, error = self._shard_for(req.group_id)
        if loaded is None:
            return JoinResult(error, member_id=req.member_id)
        result: JoinResult = await self._waiting(
            loaded,
            lambda token: loaded.shard.join(req, token, self.clock()),
            lambda code: JoinResult(code, member_id=req.member_id),
        )
        return result

    async def sync(self, req: SyncRequest) -> SyncResult:
        loaded, error = self._shard_for(req.group_id)
        if loaded is None:
            return SyncResult(error)
        result: SyncResult = await self._waiting(
            loaded, lambda token: loaded.shard.sync(req, token, self.clock()), SyncResult
        )
        return result

    async def heartbeat(self, req: HeartbeatRequest) -> ErrorCode:
        loaded, error = self._shard_for(req.group_id)
        if loaded is None:
            return error
        code = loaded.shard.heartbeat(req, self.clock())
        return code

    async def leave(self, group_id: str, members: tuple[LeavingMember, ...]) -> LeaveResult:
        loaded, error = self._shard_for(group_id)
        if loaded is None:
            return LeaveResult(error)
        result: LeaveResult = await self._waiting(
            loaded, lambda token: loaded.shard.leave(group_id, members, token, self.clock()), LeaveResult
        )
        return result

    async def commit(self, req: CommitRequest) -> list[ErrorCode]:
        loaded, error = self._shard_for(req.group_id)
        if loaded is None:
            return [error] * len(req.partitions)
        out, errors = loaded.shard.commit(req, self.clock())
        code = await self._dispatch(loaded, out)  # `_committed` inline: one coroutine frame fewer per commit
        if code != _NONE:
            mapped = append_error(code)
            return [mapped if e == ErrorCode.NONE else e for e in errors]
        return errors

    async def txn_commit(self, req: TxnCommitRequest) -> list[ErrorCode]:
        """TxnOffsetCommit: answered once the producer's batch committed (or failed: then
        the append's error, e.g. INVALID_PRODUCER_EPOCH from the log's producer state)."""
        loaded, error = self._shard_for(req.group_id)
        if loaded is None:
            return [error] * len(req.partitions)
        if self.txn_verify is not None:
            # Kafka's order: the group's status, then the verification, then the member checks.
            partition = loaded.partition
            guard, code = await self.txn_verify(partition, req.transactional_id, req.producer_id, req.producer_epoch)
            if code != ErrorCode.NONE:
                return [append_error(coordinator_write_error(code))] * len(req.partitions)
            loaded, error = self._shard_for(req.group_id)
            if loaded is None or loaded.partition != partition:  # moved while the coordinator was asked
                return [error if loaded is None else ErrorCode.NOT_COORDINATOR] * len(req.partitions)
            loaded.txn_guards[req.producer_id] = guard
        out, errors = loaded.shard.txn_commit(req, self.clock())
        return await self._committed(loaded, out, errors)

    async def _committed(self, loaded: _Loaded, out: Outcome, errors: list[ErrorCode]) -> list[ErrorCode]:
        """The per-partition answers of an offset commit once its records are written: the
        accepted ones get the append's error (Kafka's mapping) if it failed."""
        code = await self._dispatch(loaded, out)
        if code != ErrorCode.NONE:
            mapped = append_error(code)
            return [mapped if e == ErrorCode.NONE else e for e in errors]
        return errors

    def on_txn_marker(self, partition: int, producer_id: int, committed: bool) -> None:
        """The transaction marker hook (`TxnMarkerListener`, Kafka's onTransactionCompleted): a
        COMMIT (`committed`) or ABORT marker of `producer_id` on `__consumer_offsets`-`partition`
        has committed. A partition this broker does not lead ignores it (its next leader
        replays the marker from the log); one that is loading applies it after the replay."""
        loaded = self.partitions.get(partition)
        if loaded is None or loaded.closed:
            return
        loaded.txn_guards.pop(producer_id, None)
        if not loaded.ready:
            loaded.completions.append((producer_id, committed))
            return
        loaded.shard.complete_transaction(producer_id, committed)

    async def fetch_offsets(
        self, group_id: str, partitions: Iterable[tuple[str, int]] | None, *, require_stable: bool = False
    ) -> tuple[ErrorCode, list[CommittedOffset]]:
        loaded, error = self._shard_for(group_id)
        if loaded is None:
            return error, []
        offsets = loaded.shard.fetch_offsets(group_id, partitions, require_stable=require_stable)
        if loaded.order.pending():  # answer after the writes before this read; not if one failed
            written = await self._dispatch(loaded, Outcome())
            if written != ErrorCode.NONE:
                return append_error(written), []
        return ErrorCode.NONE, offsets

    async def delete_offsets(
        self, group_id: str, partitions: list[tuple[str, int]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        loaded, error = self._shard_for(group_id)
        if loaded is None:
            return error, []
        top, errors, out = loaded.shard.delete_offsets(group_id, partitions)
        code = await self._dispatch(loaded, out)
        if code != ErrorCode.NONE:
            return append_error(code), errors
        return top, errors

    async def delete_groups(self, group_ids: list[str]) -> list[ErrorCode]:
        answers: list[Awaitable[ErrorCode]] = []
        for gid in group_ids:
            answers.append(self._delete_group(gid))
        return list(await asyncio.gather(*answers))

    async def _delete_group(self, group_id: str) -> ErrorCode:
        loaded, error = self._shard_for(group_id)
        if loaded is None:
            return error
        code, out = loaded.shard.delete_group(group_id, self.clock())
        if code != ErrorCode.NONE:
            return code
        written = await self._dispatch(loaded, out)
        return ErrorCode.NONE if written == ErrorCode.NONE else append_error(written)

    def list_groups(self, states: set[str] | None) -> tuple[ErrorCode, list[GroupListing]]:
        listings: list[GroupListing] = []
        error = ErrorCode.NONE
        for loaded in self.partitions.values():
            if not loaded.ready:
                error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
                continue
            listings.extend(loaded.shard.list_groups(states))
        return error, listings

    def describe(self, group_id: str) -> GroupDescription:
        loaded, error = self._shard_for(group_id)
        if loaded is None:
            return GroupDescription(group_id, error, "", "", "")
        return loaded.shard.describe(group_id)

    async def consumer_heartbeat(self, req: ConsumerHeartbeatRequest) -> ConsumerHeartbeatResult:
        loaded, error = self._shard_for(req.group_id)
        if loaded is None:
            return ConsumerHeartbeatResult(error)
        host = self.host  # topic_names() is called only for a group with a subscription regex
        result, out = loaded.shard.consumer_heartbeat(req, host.topic, self.clock(), lambda: host.topic_names())
        if out.records or loaded.order.pending():  # answer once it and the writes before it committed
            written = await self._dispatch(loaded, out)
            if written != ErrorCode.NONE:
                return ConsumerHeartbeatResult(append_error(written))
        _wake_timers(loaded)  # a session deadline moved
        return result

    def describe_consumer_group(self, group_id: str) -> ConsumerGroupDescription:
        loaded, error = self._shard_for(group_id)
        if loaded is None:
            return ConsumerGroupDescription(group_id, error)
        return loaded.shard.describe_consumer_group(group_id)

    def check_fetch_member(self, group_id: str, member_id: str | None, epoch: int) -> ErrorCode:
        loaded, error = self._shard_for(group_id)
        if loaded is None:
            return error
        return loaded.shard.check_fetch_member(group_id, member_id, epoch)

    async def close(self) -> None:
        for loaded in list(self.partitions.values()):
            self._unload(loaded)


def _wake_timers(loaded: _Loaded) -> None:
    """Wake the partition's timer task if the shard's earliest deadline is now before the
    one it sleeps until (an operation set an earlier one); a later or unchanged deadline
    waits for its wake-up, which recomputes it. (A commit sets no earlier one: waking the
    task for each loop turn's commits cost a task switch and a timer handle.)"""
    deadline = loaded.shard.next_deadline()
    if deadline is not None and (loaded.sleeps_until is None or deadline < loaded.sleeps_until):
        loaded.wake.set()


# Group ids up to this many characters have their partition cached (the Java string hash is
# ~8 us of Python per request); longer ones are computed each time, so that the cache holds at
# most _PARTITION_CACHE_SIZE x 256 characters whatever clients send.
_CACHED_GROUP_ID_CHARS: Final = 256
_PARTITION_CACHE_SIZE: Final = 4096
# group id -> (partition count, its partition): a plain dict, emptied when full (a lookup by
# a string, whose hash the string keeps, costs less than lru_cache's key of both arguments).
_partitions: Final[dict[str, tuple[int, int]]] = {}


def _partition_of(group_id: str, count: int) -> int:
    """`coordinator_partition`, cached for group ids of usual length."""
    if len(group_id) > _CACHED_GROUP_ID_CHARS:
        return coordinator_partition(group_id, count)
    cached = _partitions.get(group_id)
    if cached is not None and cached[0] == count:
        return cached[1]
    partition = coordinator_partition(group_id, count)
    if len(_partitions) >= _PARTITION_CACHE_SIZE:
        _partitions.clear()
    _partitions[group_id] = (count, partition)
    return partition


class _NotCoordinator(Exception):
    """The partition was unloaded while a request waited."""
