"""`QuorumController`: the active controller, on the Raft leader's process.

All decisions run on the node's one asyncio thread, one at a time: a write
looks at the *working* image (everything committed plus what this controller
appended and has not seen committed yet), produces records and an answer,
replays the records into the working image at once, appends them to the
metadata log, and gives the answer only when they are committed. If the node
loses leadership first, the write fails with NOT_CONTROLLER.

It activates when this node's first record of its epoch commits (by then the
committed image holds every earlier record), and owns the soft state Kafka's
controller keeps: broker heartbeat contact times (reset for every registered
broker on activation, KAFKA-18138), fencing after broker.session.timeout.ms
(one broker per decision, oldest first), NoOp records every
metadata.max.idle.interval.ms, and preferred-leader rebalancing every
leader.imbalance.check.interval.seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from quorum.controller import replication_control as rc
from quorum.controller.errors import ErrorCode
from quorum.controller.partition_change import brokers_over_threshold
from quorum.controller.producer_ids import allocate_producer_ids
from quorum.controller.requests import (
    AllocateProducerIdsRequest,
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    ControllerRequest,
    ControllerResponse,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    ElectLeadersRequest,
    IncrementalAlterConfigsRequest,
)
from quorum.controller.result import ControllerResult
from quorum.metadata.delta import MetadataDelta
from quorum.metadata.gc_policy import large_change
from quorum.metadata.image import MetadataImage
from quorum.metadata.records import (
    BrokerEndpoint,
    BrokerFeature,
    BrokerRegistrationChangeRecord,
    FeatureLevelRecord,
    MetadataRecord,
    NoOpRecord,
    RegisterBrokerRecord,
    encode_record,
)
from quorum.metadata.snapshot import MetadataStateMachine
from quorum.node.raft_node import RaftNode
from quorum.raft.errors import ErrorCode as RaftErrorCode
from quorum.raft.errors import NotLeaderError
from quorum.raft.roles import Role
from quorum.raft.types import Epoch, Offset

log = logging.getLogger(__name__)


METADATA_VERSION_FEATURE = "metadata.version"
METADATA_VERSION = 1  # pykraft's own metadata format version


# Fencing a broker writes its partition changes in batches of at most this many records,
# yielding the event loop between them (one batch is a few ms of work), so that heartbeats
# and other requests are served throughout; the fence record goes with the last batch.
FENCE_BATCH_RECORDS = 1000
# ...and stops adding topics to a batch after this long (seconds, wall clock).
FENCE_BATCH_BUDGET_S = 0.005


class NotControllerError(Exception):
    """This node is not the active controller (NOT_CONTROLLER)."""


@dataclass(slots=True, eq=False)
class _OpenBatch:
    """Records of concurrent writes gathered into one batch (one append, one fsync).

    Its records have offsets `first`, `first + 1`, ... already: they are replayed into
    `delta` (based on the working image when the batch opened) as they are added, and
    `image` equals `delta.apply()` after the last write (built so that each write's share
    costs O(its records), not O(the batch so far)). `done` resolves
    with the batch's last offset once it is committed.
    """

    first: Offset
    epoch: Epoch
    delta: MetadataDelta
    image: MetadataImage
    done: asyncio.Future[Offset]
    records: list[bytes] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None


class QuorumController:
    def __init__(
        self,
        node: RaftNode,
        state_machine: MetadataStateMachine,
        *,
        cluster_id: str,
        settings: rc.ReplicationSettings,
        session_timeout_ms: int,
        idle_interval_ms: int,
        auto_rebalance: bool,
        rebalance_interval_s: int,
        imbalance_percentage: int,
        append_linger_ms: int = 25,
    ) -> None:
        self.node = node
        # A voter change the core appends goes after our open batch, not into its offsets.
        node.before_voter_change = self._seal
        # The writes that gathered during an fsync of the log go into the next one (group commit).
        node.after_flush = self._seal
        self.state_machine = state_machine
        self.cluster_id = cluster_id
        self.settings = settings
        self.session_timeout_ms = session_timeout_ms
        self.idle_interval_ms = idle_interval_ms
        self.auto_rebalance = auto_rebalance
        self.rebalance_interval_s = rebalance_interval_s
        self.imbalance_percentage = imbalance_percentage
        self._active_epoch = -1
        self._image: MetadataImage | None = None  # working image while active
        self._contact: dict[int, float] = {}  # broker id -> last heartbeat, monotonic ms
        self._last_write_ms = 0.0
        self._tasks: list[asyncio.Task[None]] = []
        # controller.quorum.append.linger.ms: how long a write may wait in the open batch
        # for others to join it while the log is being fsynced.
        self.append_linger_ms = append_linger_ms
        self._open: _OpenBatch | None = None
        self._inflight = 0  # batches appended to the log and not committed (or failed) yet
        # Brokers being fenced -> topics other writes changed meanwhile (see `_fence`).
        self._fencing: dict[int, set[uuid.UUID]] = {}
        # The write rule of each request type (`handle`): (working image, request) -> records
        # and answer. Requests are final dataclasses: looked up by their exact type.
        self._rules: dict[type, Callable[[MetadataImage, Any], ControllerResult[Any]]] = {
            CreateTopicsRequest: lambda img, r: rc.create_topics(img, r, self.settings),
            DeleteTopicsRequest: rc.delete_topics,
            CreatePartitionsRequest: lambda img, r: rc.create_partitions(img, r, self.settings),
            IncrementalAlterConfigsRequest: lambda img, r: rc.incremental_alter_configs(img, r, self.settings),
            ElectLeadersRequest: rc.elect_leaders,
            AlterPartitionRequest: rc.alter_partition,
            BrokerRegistrationRequest: self._register,
            AllocateProducerIdsRequest: allocate_producer_ids,
        }

    # ---------------------------------------------------------------- state

    @property
    def active(self) -> bool:
        return self._image is not None

    @property
    def working_image(self) -> MetadataImage:
        if self._image is None:
            raise NotControllerError()
        return self._image

    @staticmethod
    def _now_ms() -> float:
        return time.monotonic() * 1000

    def on_first_commit(self, epoch: Epoch) -> None:
        """The node's first record of `epoch` committed: become the active controller."""
        core = self.node.core
        if core is None or not core.is_leader or core.epoch != epoch:
            return
        self._active_epoch = epoch
        self._image = self.state_machine.image
        now = self._now_ms()
        self._contact = {b: now for b in self._image.cluster.brokers}
        self._last_write_ms = now
        log.info("node %d is the active controller in epoch %d", self.node.node_id, epoch)
        if METADATA_VERSION_FEATURE not in self._image.features:
            self._append([FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=METADATA_VERSION)])
        self._tasks = [asyncio.create_task(self._periodic(epoch), name=f"controller-timers-{epoch}")]

    def on_role_change(self, role: Role, epoch: Epoch) -> None:
        if self._image is not None and (role is not Role.LEADER or epoch != self._active_epoch):
            log.info("node %d is no longer the active controller (%s, epoch %d)", self.node.node_id, role.value, epoch)
            self._deactivate()

    def _deactivate(self) -> None:
        self._image = None
        self._active_epoch = -1
        self._contact.clear()
        self._fencing.clear()
        self.state_machine.forget_expected()
        ob, self._open = self._open, None
        if ob is not None:
            if ob.timer is not None:
                ob.timer.cancel()
            core = self.node.core
            _fail(ob.done, NotLeaderError(core.leader_id if core else -1, core.epoch if core else 0))
        for task in self._tasks:
            task.cancel()
        self._tasks = []

    async def close(self) -> None:
        tasks = self._tasks
        self._deactivate()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # ---------------------------------------------------------------- writes

    @property
    def _max_batch_records(self) -> int:
        return self.node.raft_config.max_batch_records

    def _next_offset(self) -> Offset:
        """The offset the next record written gets."""
        ob = self._open
        if ob is not None:
            return ob.first + len(ob.records)
        core = self.node.core
        assert core is not None
        return core.log.end_offset

    def _append(
        self, records: Sequence[MetadataRecord], *, own_batch: bool = False, fence_moves: bool = False
    ) -> asyncio.Future[Offset]:
        """Add records to the open batch (their offsets follow everything written before)
        and replay them into the working image at once; the future resolves when they are
        committed (with the batch's last offset), or fails with NotLeaderError.

        Concurrent writes share the open batch: it is appended to the log (one batch,
        one fsync) at the end of the current event-loop turn when no fsync of the log is
        under way, else when that fsync ends (`RaftNode.after_flush`) or after
        append_linger_ms, whichever comes first, or as soon as it is full. It does not
        wait for earlier batches to commit: while followers fetch and fsync those, the
        leader already writes this one (batches in flight are pipelined). `own_batch` appends these
        records as a batch of their own, now. `fence_moves`: `_fence`'s own records.
        """
        image = self.working_image
        core = self.node.core
        assert core is not None
        if not records:
            raise ValueError("nothing to append")
        max_records = self._max_batch_records
        if self._fencing and not fence_moves:
            for record in records:
                topic_id = getattr(record, "topic_id", None)
                if topic_id is not None:
                    for touched in self._fencing.values():
                        touched.add(topic_id)
        if len(records) > max_records:
            # Larger than one batch: its own batches, atomic neither way (Raft commits a
            # prefix of them only if the leader fails meanwhile, as for any batches).
            step = max_records
            future: asyncio.Future[Offset] | None = None
            for i in range(0, len(records), step):
                future = self._append(records[i : i + step], own_batch=True, fence_moves=True)
            assert future is not None
            return future
        ob = self._open
        if ob is not None and (own_batch or len(ob.records) + len(records) > max_records):
            self._seal()
            ob = None
        if ob is None:
            loop = asyncio.get_running_loop()
            ob = self._open = _OpenBatch(
                core.log.end_offset, core.epoch, MetadataDelta(image), image, loop.create_future()
            )
            ob.done.add_done_callback(_retrieve)
            if not own_batch:
                delay = self.append_linger_ms / 1000 if self.node.flushing else 0.0
                ob.timer = loop.call_later(delay, self._seal_if, ob)
        offset = ob.first + len(ob.records)
        epoch = ob.epoch
        # The batch's delta (for the state machine once it commits) gets every record. The
        # image after this write costs O(len(records)) either way: a write of at least 1/8 of
        # the batch so far re-applies the batch's delta; a smaller one is also replayed into a
        # delta of its own over the batch's image, whose apply costs only what it changed.
        delta = ob.delta
        own = delta if len(records) * 8 >= len(ob.records) else MetadataDelta(ob.image)
        for record in records:
            delta.replay(record, offset, epoch)
            if own is not delta:
                own.replay(record, offset, epoch)
            offset += 1
        ob.records.extend([encode_record(r) for r in records])
        ob.image = self._image = own.apply()
        self._last_write_ms = self._now_ms()
        future = ob.done
        if own_batch or len(ob.records) >= max_records:
            self._seal()
        return future

    def _seal_if(self, ob: _OpenBatch) -> None:
        if self._open is ob:
            self._seal()

    def _seal(self) -> None:
        """Append the open batch to the log."""
        ob, self._open = self._open, None
        if ob is None:
            return
        if ob.timer is not None:
            ob.timer.cancel()
        core = self.node.core
        # Not while handing leadership over either (`RaftNode.resign`): the core takes no writes.
        if core is None or not core.accepts_writes or core.epoch != ob.epoch or self._image is None:
            _fail(ob.done, NotLeaderError(core.leader_id if core else -1, core.epoch if core else 0))
            return
        if core.log.end_offset != ob.first:
            # Only the active controller appends to the metadata log while it is active.
            log.error("metadata log end %d moved from %d under the controller", core.log.end_offset, ob.first)
            _fail(ob.done, NotLeaderError(core.leader_id, core.epoch))
            self._deactivate()
            return
        first, committed = self.node.propose_now(ob.records)
        self.state_machine.expect(first, ob.epoch, ob.delta, ob.image)
        self._inflight += 1
        committed.add_done_callback(lambda f: self._committed(f, ob))

    def _committed(self, committed: asyncio.Future[Offset], ob: _OpenBatch) -> None:
        self._inflight -= 1
        if not ob.done.done():
            if committed.cancelled():
                ob.done.cancel()
            elif (exc := committed.exception()) is not None:
                ob.done.set_exception(exc)
            else:
                ob.done.set_result(committed.result())
        if self._inflight == 0 and self._open is not None:
            self._seal()

    def start_write(
        self, request: ControllerRequest
    ) -> tuple[ControllerResponse, asyncio.Future[Offset] | None] | None:
        """Run a write's rule now: its answer, and the future of its records' commit (None when
        it wrote nothing; it fails with NotLeaderError if leadership is lost first). None when
        `request` is no write (a heartbeat: `handle`). Raises NotControllerError when this
        node is not active. The answer may be sent only once that future has resolved.

        The listener's write path (`ControllerApis.handle`) calls this from the read callback
        and answers from the future's callback: no task, no coroutine per write."""
        if not self.active:
            raise NotControllerError()
        rule = self._rules.get(type(request))
        if rule is None:
            return None
        result: ControllerResult[ControllerResponse] = rule(self.working_image, request)
        if not result.records:
            return result.response, None
        try:
            return result.response, self._append(result.records)
        except NotLeaderError as exc:
            raise NotControllerError() from exc

    async def handle(self, request: ControllerRequest) -> ControllerResponse:
        """Run one request; raises NotControllerError when this node is not active."""
        started = self.start_write(request)
        if started is not None:
            response, committed = started
            if committed is not None:
                try:
                    await committed
                except NotLeaderError as exc:
                    raise NotControllerError() from exc
            return response
        if isinstance(request, BrokerHeartbeatRequest):
            return await self._heartbeat(request)
        raise TypeError(f"unknown controller request {type(request).__name__}")

    # --------------------------------------------------------------- brokers

    def _session_alive(self, broker_id: int) -> bool:
        contact = self._contact.get(broker_id)
        return contact is not None and self._now_ms() - contact < self.session_timeout_ms

    def _register(
        self, image: MetadataImage, req: BrokerRegistrationRequest
    ) -> ControllerResult[BrokerRegistrationResponse]:
        if req.cluster_id != self.cluster_id:
            msg = f"Expected cluster ID {self.cluster_id}, but got cluster ID {req.cluster_id}"
            code = int(RaftErrorCode.INCONSISTENT_CLUSTER_ID)
            return ControllerResult([], BrokerRegistrationResponse(code, -1, msg))
        # The latest registration record in the image names the live incarnation. Another
        # incarnation is refused while that broker's session is alive, fenced or not (a broker
        # catching up heartbeats fenced). Sessions survive a failover: activation starts one
        # for every registered broker, so an impostor right after a failover is refused too.
        existing = image.cluster.brokers.get(req.broker_id)
        if existing is not None and existing.incarnation_id == req.incarnation_id:
            self._contact[req.broker_id] = self._now_ms()
            return ControllerResult([], BrokerRegistrationResponse(0, existing.epoch))
        if existing is not None and self._session_alive(req.broker_id):
            log.warning(
                "refusing registration of broker %d with incarnation %s: incarnation %s (epoch %d) is alive",
                req.broker_id,
                req.incarnation_id,
                existing.incarnation_id,
                existing.epoch,
            )
            msg = f"Another broker is registered with that broker id ({req.broker_id}) and its session is still alive."
            return ControllerResult(
                [], BrokerRegistrationResponse(int(ErrorCode.DUPLICATE_BROKER_REGISTRATION), -1, msg)
            )
        epoch = self._next_offset()  # the broker epoch is the offset of its registration record
        records: list[MetadataRecord] = []
        if existing is not None and not existing.fenced:
            records += rc.move_leadership_off(image, req.broker_id, self.settings)
            epoch += len(records)
        record = RegisterBrokerRecord(
            broker_id=req.broker_id,
            incarnation_id=req.incarnation_id,
            broker_epoch=epoch,
            end_points=tuple(BrokerEndpoint(e.name, e.host, e.port, e.security_protocol) for e in req.listeners),
            features=tuple(BrokerFeature(n, lo, hi) for n, (lo, hi) in sorted(req.features.items())),
            rack=req.rack,
            fenced=True,
        )
        records.append(record)
        self._contact[req.broker_id] = self._now_ms()
        log.info("broker %d registered with epoch %d (rack %s)", req.broker_id, epoch, req.rack)
        return ControllerResult(records, BrokerRegistrationResponse(0, epoch))

    async def _fence(self, broker_id: int) -> None:
        """Fence a broker: it leaves every ISR, the partitions it led get new leaders,
        then it is fenced (Kafka's handleBrokerFenced).

        The partition changes go in batches of at most FENCE_BATCH_RECORDS, built from
        the working image of the moment, topic by topic, with the event loop free in
        between; the last batch also holds the fence record, so that a fenced broker
        leads nothing at any batch end. Topics that other writes change meanwhile are
        looked at again for the last batch. Stops early if the broker re-registers or
        is fenced by someone else meanwhile. Returns once everything is committed.
        """
        image = self.working_image
        broker = image.cluster.brokers.get(broker_id)
        if broker is None or broker.fenced:
            return
        epoch = broker.epoch
        topic_ids = list(image.topics.by_id.keys())
        touched = self._fencing.setdefault(broker_id, set())
        futures: list[asyncio.Future[Offset]] = []
        try:
            with large_change():
                await self._fence_batches(broker_id, epoch, topic_ids, touched, futures)
        finally:
            if self._fencing.get(broker_id) is touched:
                del self._fencing[broker_id]
        for future in futures:
            await future

    async def _fence_batches(
        self,
        broker_id: int,
        epoch: int,
        topic_ids: list[uuid.UUID],
        touched: set[uuid.UUID],
        futures: list[asyncio.Future[Offset]],
    ) -> None:
        settings = self.settings
        i = 0
        while True:
            image = self.working_image
            now = image.cluster.brokers.get(broker_id)
            if now is None or now.fenced or now.epoch != epoch:
                return
            by_id = image.topics.by_id
            records: list[MetadataRecord] = []
            start = i
            deadline = time.perf_counter() + FENCE_BATCH_BUDGET_S
            while i < len(topic_ids) and len(records) < FENCE_BATCH_RECORDS and time.perf_counter() < deadline:
                topic = by_id.get(topic_ids[i])
                if topic is not None:
                    records += rc.leave_partitions(image, broker_id, settings, (topic,))
                i += 1
            if i >= len(topic_ids):
                # The last batch: the rest of this range again with the topics changed
                # by others meanwhile, and the fence record.
                again = dict.fromkeys([*topic_ids[start:i], *touched])
                topics = [t for t in map(by_id.get, again) if t is not None]
                records = rc.leave_partitions(image, broker_id, settings, topics)
                records.append(BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=epoch, fenced=1))
                own = len(records) <= self._max_batch_records
                futures.append(self._append(records, own_batch=own, fence_moves=True))
                break
            if records:
                futures.append(self._append(records, own_batch=True, fence_moves=True))
            await asyncio.sleep(0)

    async def _heartbeat(self, req: BrokerHeartbeatRequest) -> BrokerHeartbeatResponse:
        image = self.working_image
        b = image.cluster.brokers.get(req.broker_id)
        if b is None:
            return BrokerHeartbeatResponse(int(ErrorCode.BROKER_ID_NOT_REGISTERED))
        if b.epoch != req.broker_epoch:
            return BrokerHeartbeatResponse(int(ErrorCode.STALE_BROKER_EPOCH))
        self._contact[req.broker_id] = self._now_ms()
        caught_up = req.current_metadata_offset >= b.epoch
        records: list[MetadataRecord] = []
        should_shut_down = False
        if b.fenced:
            if req.want_shut_down:
                should_shut_down = True
            elif not req.want_fence and caught_up:
                records.append(BrokerRegistrationChangeRecord(broker_id=b.id, broker_epoch=b.epoch, fenced=-1))
                # Elect leaders for leaderless partitions once the broker counts as unfenced.
                delta = MetadataDelta(image)
                delta.replay(records[0])
                records += rc.elect_for_unfenced(delta.apply(), b.id, self.settings)
        elif req.want_fence:
            try:
                await self._fence(b.id)
            except NotLeaderError as exc:
                raise NotControllerError() from exc
            should_shut_down = req.want_shut_down
        elif req.want_shut_down:
            if not b.in_controlled_shutdown:
                records.append(
                    BrokerRegistrationChangeRecord(broker_id=b.id, broker_epoch=b.epoch, in_controlled_shutdown=1)
                )
                delta = MetadataDelta(image)
                delta.replay(records[0])
                records += rc.move_leadership_off(delta.apply(), b.id, self.settings)
        if records:
            try:
                await self._append(records)
            except NotLeaderError as exc:
                raise NotControllerError() from exc
        after = self.working_image.cluster.brokers.get(b.id)
        if after is not None and after.in_controlled_shutdown and req.want_shut_down:
            # Shut down once it leads nothing (the moves are committed: we waited above).
            should_shut_down = not any(p.leader == b.id for _, _, p in rc.iter_partitions(self.working_image))
        if should_shut_down:
            # Its session ends here: the broker's next incarnation may register at once.
            self._contact.pop(b.id, None)
        fenced = after.fenced if after is not None else True
        return BrokerHeartbeatResponse(0, caught_up, fenced, should_shut_down)

    # ---------------------------------------------------------------- timers

    async def _periodic(self, epoch: Epoch) -> None:
        """Fencing of silent brokers, NoOp records, preferred-leader rebalancing."""
        tick_s = min(0.1, self.session_timeout_ms / 4000)
        next_rebalance = self._now_ms() + self.rebalance_interval_s * 1000
        last_tick = self._now_ms()
        try:
            while True:
                await asyncio.sleep(tick_s)
                if self._image is None or self._active_epoch != epoch:
                    return
                now = self._now_ms()
                stalled_ms, last_tick = now - last_tick - tick_s * 1000, now
                if stalled_ms >= self.session_timeout_ms / 2:
                    # This process did not run (SIGSTOP, a long GC or swap): the brokers' silence
                    # is ours. Restart their sessions rather than fence them; if we were replaced
                    # meanwhile, the quorum tells us before any new session could expire.
                    log.warning("controller timers stalled for %.0f ms; restarting broker sessions", stalled_ms)
                    self._contact = {b: now for b in (*self._contact, *self._image.cluster.brokers)}
                    continue
                await self._fence_stale_brokers()
                now = self._now_ms()
                if self.auto_rebalance and now >= next_rebalance:
                    next_rebalance = now + self.rebalance_interval_s * 1000
                    await self._rebalance()
                if self.idle_interval_ms > 0 and now - self._last_write_ms >= self.idle_interval_ms and self.active:
                    self._append([NoOpRecord()])
        except (NotControllerError, NotLeaderError):
            return
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("controller timers failed")

    async def _fence_stale_brokers(self) -> None:
        while self.active:
            image = self.working_image
            now = self._now_ms()
            stale = [
                (self._contact.get(b.id, 0.0), b.id)
                for b in image.cluster.brokers.values()
                if not b.fenced and now - self._contact.get(b.id, 0.0) >= self.session_timeout_ms
            ]
            if not stale:
                return
            _, broker_id = min(stale)
            log.info("fencing broker %d: no heartbeat for %d ms", broker_id, self.session_timeout_ms)
            with contextlib.suppress(NotLeaderError):
                await self._fence(broker_id)

    async def _rebalance(self) -> None:
        image = self.working_image
        ratios = rc.leader_imbalance(image)
        if not brokers_over_threshold(ratios, self.imbalance_percentage):
            return
        records = rc.rebalance_preferred(image)
        if records:
            log.info("auto leader rebalance: %d preferred elections", len(records))
            await self._append(records)


def _retrieve(future: asyncio.Future[Offset]) -> None:
    """Mark a batch's failure as seen (a NoOp batch may have no one waiting for it)."""
    if not future.cancelled():
        future.exception()


def _fail(future: asyncio.Future[Offset], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)
