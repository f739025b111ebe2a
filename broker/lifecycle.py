"""`BrokerLifecycle`: registration and heartbeats with the active controller.

STARTING    register (BrokerRegistration) with a fresh incarnation id; the answer's
            broker epoch is the offset of the registration record.
RECOVERY    heartbeat every 10 ms, asking to stay fenced until this broker's
            metadata image has reached its own registration record.
RUNNING     unfenced; heartbeat every broker.heartbeat.interval.ms.
SHUTTING    on SIGTERM heartbeats ask to shut down (controlled shutdown): the
DOWN        controller moves every leadership away and then says shouldShutDown.
A STALE_BROKER_EPOCH or BROKER_ID_NOT_REGISTERED answer (e.g. after being
fenced across a controller failover) sends the broker back to STARTING.

A failed log dir (`report_log_dir_failure`) sends a heartbeat at once that asks to be
fenced (and every later one does): the controller moves every leadership of this broker
away and takes it out of every ISR before it answers, as for a silent broker, and
`fenced_for_log_dir_failure` is set once an answer says fenced. (Kafka's KIP-858 broker
reports the dir in the heartbeat's OfflineLogDirs and the controller moves only the
replicas assigned to that dir; pykraft's metadata does not record which dir holds a
replica, so the whole broker steps out, as a KRaft broker without JBOD support did.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable
from enum import Enum

from quorum.controller.errors import ErrorCode
from quorum.controller.requests import (
    BrokerEndpoint,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
)
from quorum.kafka_errors import default_message
from quorum.node.config import NodeConfig
from quorum.node.controller_client import ControllerClient, ControllerUnavailableError

log = logging.getLogger(__name__)

STARTUP_HEARTBEAT_S = 0.01  # while fenced and catching up, as Kafka's BrokerLifecycleManager


class BrokerState(Enum):
    STARTING = "STARTING"
    RECOVERY = "RECOVERY"
    RUNNING = "RUNNING"
    PENDING_CONTROLLED_SHUTDOWN = "PENDING_CONTROLLED_SHUTDOWN"
    SHUTTING_DOWN = "SHUTTING_DOWN"


class BrokerLifecycle:
    def __init__(
        self,
        config: NodeConfig,
        *,
        cluster_id: str,
        client: ControllerClient,
        metadata_offset: Callable[[], int],
        on_event: Callable[[str], None] | None = None,
    ) -> None:
        self.config = config
        self.cluster_id = cluster_id
        self.client = client
        self.metadata_offset = metadata_offset  # the last offset applied to the local image
        self.on_event = on_event
        self.incarnation_id = uuid.uuid4()
        self.state = BrokerState.STARTING
        self.broker_epoch = -1
        self.fenced = True
        self._want_shut_down = False
        self.offline_log_dirs: list[str] = []
        self.fenced_for_log_dir_failure = asyncio.Event()
        self._wake = asyncio.Event()  # cuts the wait before the next heartbeat short
        self.shutdown_granted = asyncio.Event()
        self.unfenced = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def _emit(self, event: str) -> None:
        log.info("broker %d: %s", self.config.node_id, event)
        if self.on_event is not None:
            self.on_event(event)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"broker-lifecycle-{self.config.node_id}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: S110 - stopping anyway
                pass

    async def controlled_shutdown(self, timeout_s: float) -> bool:
        """Ask the controller to move our leaderships away; True if it agreed in time."""
        if self.state is BrokerState.STARTING or self.broker_epoch < 0:
            return True
        self._want_shut_down = True
        self.state = BrokerState.PENDING_CONTROLLED_SHUTDOWN
        try:
            async with asyncio.timeout(timeout_s):
                await self.shutdown_granted.wait()
        except TimeoutError:
            log.warning("broker %d: controlled shutdown not granted within %.0f s", self.config.node_id, timeout_s)
            return False
        self.state = BrokerState.SHUTTING_DOWN
        self._emit("controlled shutdown granted")
        return True

    def report_log_dir_failure(self, log_dir: str) -> None:
        """A log dir went offline: be fenced now (the next heartbeat goes at once)."""
        if log_dir not in self.offline_log_dirs:
            self.offline_log_dirs.append(log_dir)
        self._wake.set()

    def _listeners(self) -> tuple[BrokerEndpoint, ...]:
        listeners = self.config.effective_advertised_listeners
        names = set(self.config.controller_listener_names)
        return tuple(BrokerEndpoint(x.name, x.host or "127.0.0.1", x.port) for x in listeners if x.name not in names)

    async def _register(self) -> None:
        while True:
            req = BrokerRegistrationRequest(
                broker_id=self.config.node_id,
                cluster_id=self.cluster_id,
                incarnation_id=self.incarnation_id,
                listeners=self._listeners(),
                rack=self.config.broker_rack,
                features={"metadata.version": (1, 1)},
                previous_broker_epoch=self.broker_epoch,
            )
            try:
                resp = await self.client.call(req, timeout_s=5.0)
            except ControllerUnavailableError as exc:
                log.info("broker %d: registration pending (%s)", self.config.node_id, exc)
                continue
            assert isinstance(resp, BrokerRegistrationResponse)
            if resp.error_code == 0:
                self.broker_epoch = resp.broker_epoch
                self.state = BrokerState.RECOVERY
                self._emit(f"registered with broker epoch {resp.broker_epoch}")
                return
            # BrokerRegistrationResponse carries no message on the wire: say what the code means.
            reason = resp.message or default_message(resp.error_code) or ""
            name = ErrorCode(resp.error_code).name if resp.error_code in ErrorCode._value2member_map_ else "UNKNOWN"
            log.warning(
                "broker %d: registration refused: %s (%d) %s", self.config.node_id, name, resp.error_code, reason
            )
            await asyncio.sleep(1.0)

    async def _run(self) -> None:
        interval_s = self.config.broker_heartbeat_interval_ms / 1000
        while True:
            if self.state is BrokerState.STARTING:
                await self._register()
            offset = self.metadata_offset()
            req = BrokerHeartbeatRequest(
                broker_id=self.config.node_id,
                broker_epoch=self.broker_epoch,
                current_metadata_offset=offset,
                want_fence=(offset < self.broker_epoch and not self._want_shut_down) or bool(self.offline_log_dirs),
                want_shut_down=self._want_shut_down,
            )
            self._wake.clear()
            try:
                resp = await self.client.call(req, timeout_s=max(1.0, interval_s))
            except ControllerUnavailableError:
                await asyncio.sleep(STARTUP_HEARTBEAT_S)
                continue
            assert isinstance(resp, BrokerHeartbeatResponse)
            self._on_heartbeat(resp)
            if self.offline_log_dirs and resp.error_code == 0 and resp.is_fenced:
                self.fenced_for_log_dir_failure.set()
            fast = (self.fenced or self._want_shut_down) and not self.fenced_for_log_dir_failure.is_set()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(STARTUP_HEARTBEAT_S if fast else interval_s):
                    await self._wake.wait()

    def _on_heartbeat(self, resp: BrokerHeartbeatResponse) -> None:
        if resp.error_code in (int(ErrorCode.STALE_BROKER_EPOCH), int(ErrorCode.BROKER_ID_NOT_REGISTERED)):
            self._emit(f"registration lost (error {resp.error_code}); registering again")
            self.state = BrokerState.STARTING
            self.fenced = True
            self.unfenced.clear()
            return
        if resp.error_code != 0:
            return
        if resp.is_fenced != self.fenced:
            self.fenced = resp.is_fenced
            if self.fenced:
                self.unfenced.clear()
                self._emit("fenced")
            else:
                self.unfenced.set()
                if self.state is BrokerState.RECOVERY:
                    self.state = BrokerState.RUNNING
                self._emit("unfenced")
        if resp.should_shut_down and self._want_shut_down:
            self.shutdown_granted.set()
