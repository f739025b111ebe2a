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
from collections.abc import Callable, Sequence
from typing import TypeVar

from quorum.controller import replication_control as rc
from quorum.controller.errors import ErrorCode
from quorum.controller.partition_change import brokers_over_threshold
from quorum.controller.requests import (
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
from quorum.raft.types import Epoch

log = logging.getLogger(__name__)

T = TypeVar("T")

METADATA_VERSION_FEATURE = "metadata.version"
METADATA_VERSION = 1  # pykraft's own metadata format version


class NotControllerError(Exception):
    """This node is not the active controller (NOT_CONTROLLER)."""


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
    ) -> None:
        self.node = node
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

    def _append(self, records: Sequence[MetadataRecord]) -> asyncio.Future[int]:
        """Append records now (their offsets are the log's next ones) and replay them
        into the working image; the future resolves when they are committed."""
        image = self.working_image
        core = self.node.core
        assert core is not None
        first, future = self.node.propose_now([encode_record(r) for r in records])
        delta = MetadataDelta(image)
        for i, record in enumerate(records):
            delta.replay(record, first + i, core.epoch)
        self._image = delta.apply()
        self._last_write_ms = self._now_ms()
        return future

    async def _write(self, op: Callable[[MetadataImage], ControllerResult[T]]) -> T:
        result = op(self.working_image)
        if result.records:
            try:
                await self._append(result.records)
            except NotLeaderError as exc:
                raise NotControllerError() from exc
        return result.response

    async def handle(self, request: ControllerRequest) -> ControllerResponse:
        """Run one request; raises NotControllerError when this node is not active."""
        if not self.active:
            raise NotControllerError()
        s = self.settings
        match request:
            case CreateTopicsRequest():
                return await self._write(lambda img: rc.create_topics(img, request, s))
            case DeleteTopicsRequest():
                return await self._write(lambda img: rc.delete_topics(img, request))
            case CreatePartitionsRequest():
                return await self._write(lambda img: rc.create_partitions(img, request, s))
            case IncrementalAlterConfigsRequest():
                return await self._write(lambda img: rc.incremental_alter_configs(img, request, s))
            case ElectLeadersRequest():
                return await self._write(lambda img: rc.elect_leaders(img, request))
            case AlterPartitionRequest():
                return await self._write(lambda img: rc.alter_partition(img, request))
            case BrokerRegistrationRequest():
                return await self._write(lambda img: self._register(img, request))
            case BrokerHeartbeatRequest():
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
        core = self.node.core
        assert core is not None
        epoch = core.log.end_offset  # the broker epoch is the offset of its registration record
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

    def _fence_records(self, image: MetadataImage, broker_id: int) -> list[MetadataRecord]:
        b = image.cluster.brokers[broker_id]
        records = rc.move_leadership_off(image, broker_id, self.settings)
        records.append(BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=b.epoch, fenced=1))
        return records

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
            records = self._fence_records(image, b.id)
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
            future = self._append(self._fence_records(image, broker_id))
            with contextlib.suppress(NotLeaderError):
                await future

    async def _rebalance(self) -> None:
        image = self.working_image
        ratios = rc.leader_imbalance(image)
        if not brokers_over_threshold(ratios, self.imbalance_percentage):
            return
        records = rc.rebalance_preferred(image)
        if records:
            log.info("auto leader rebalance: %d preferred elections", len(records))
            await self._append(records)
