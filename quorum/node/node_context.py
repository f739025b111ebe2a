"""`LocalNodeContext`: the node behind the REST API (api.context.NodeContext).

Reads come from this node's committed metadata image. Writes go to the
active controller (directly when it runs in this process, else over the Kafka
protocol) and return once it answers, that is once committed. Before a read,
`settle` waits until this node's image has applied everything the quorum had
committed when the last write answered here was answered, so a read right after
a write on the same node sees it; a write does not wait for that itself.
"""

from __future__ import annotations

import asyncio
import logging
import time

from api.context import NotAvailableError
from quorum.controller.create_outcome import resolve_resent_create
from quorum.controller.requests import (
    AdminRequest,
    AdminResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from quorum.metadata.delta import MetadataDelta
from quorum.metadata.image import MetadataImage
from quorum.metadata.snapshot import MetadataStateMachine
from quorum.node.active_controller import NotControllerError, QuorumController
from quorum.node.config import NodeConfig
from quorum.node.controller_client import ControllerClient, ControllerUnavailableError
from quorum.node.forward_batcher import AlterConfigsBatcher
from quorum.node.raft_node import RaftNode
from quorum.raft.describe import QuorumDescription
from quorum.wire import codec
from quorum.wire.transport import PeerUnavailable

log = logging.getLogger(__name__)

# Broker configs that topic config defaults and creation defaults come from.
_BROKER_DEFAULT_KEYS = (
    "log.retention.ms",
    "log.retention.bytes",
    "log.segment.bytes",
    "log.roll.ms",
    "log.cleanup.policy",
    "message.max.bytes",
    "compression.type",
    "producer.id.expiration.ms",  # not a topic config: the partition logs' producer expiry
)


def broker_defaults_of(config: NodeConfig) -> dict[str, str]:
    out = {
        "num.partitions": str(config.num_partitions),
        "default.replication.factor": str(config.default_replication_factor),
        "min.insync.replicas": str(config.min_insync_replicas),
        "unclean.leader.election.enable": str(config.unclean_leader_election_enable).lower(),
        "log.retention.ms": str(config.log_retention_ms),
        "log.retention.bytes": str(config.log_retention_bytes),
        "log.segment.bytes": str(config.log_segment_bytes),
    }
    for key in _BROKER_DEFAULT_KEYS:
        if key in config.extra:
            out[key] = config.extra[key]
    return out


class LocalNodeContext:
    def __init__(
        self,
        config: NodeConfig,
        *,
        cluster_id: str,
        raft: RaftNode,
        state_machine: MetadataStateMachine,
        client: ControllerClient,
        controller: QuorumController | None = None,
    ) -> None:
        self.config = config
        self._cluster_id = cluster_id
        self.raft = raft
        self.state_machine = state_machine
        self.client = client
        self.controller = controller
        self._updated = asyncio.Event()
        state_machine.add_listener(self._on_update)
        # The leader's high watermark, asked once for many writers (see `leader_high_watermark`):
        # the DescribeQuorum in flight, and the one every later caller waits for.
        self._hw_probe: asyncio.Future[int] | None = None
        self._next_hw_probe: asyncio.Future[int] | None = None
        self._hw_probe_task: asyncio.Task[None] | None = None
        # Writes the active controller answered over the network, and how many of them this
        # node's image is known to hold (`settle`).
        self._answered = 0
        self._settled = 0
        # Concurrent config writes forwarded to the active controller share requests.
        self._alter_configs = AlterConfigsBatcher(self._forward_alter_configs, max_in_flight=client.connections)

    def _on_update(self, delta: MetadataDelta | None, image: MetadataImage) -> None:
        self._updated.set()

    @property
    def node_id(self) -> int:
        return self.config.node_id

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    @property
    def roles(self) -> frozenset[str]:
        return frozenset(self.config.process_roles)

    def image(self) -> MetadataImage:
        return self.state_machine.image

    def broker_defaults(self) -> dict[str, str]:
        return broker_defaults_of(self.config)

    async def admin(self, request: AdminRequest) -> AdminResponse:
        response: object = None
        maybe_delivered = False  # an earlier attempt may have taken effect
        if self.controller is not None and self.controller.active:
            try:
                response = await self.controller.handle(request)
            except NotControllerError:
                response = None
                maybe_delivered = True  # its records may still commit under the next leader
        if response is None:
            try:
                if isinstance(request, IncrementalAlterConfigsRequest):
                    response, resent = await self._alter_configs.call(request)
                else:
                    response, resent = await self.client.call_tracked(request)
            except ControllerUnavailableError as exc:
                raise NotAvailableError(str(exc)) from exc
            maybe_delivered = maybe_delivered or resent
            # Committed, and applied here later: the next read on this node settles first.
            self._answered += 1
        if maybe_delivered and isinstance(request, CreateTopicsRequest) and isinstance(response, CreateTopicsResponse):
            await self.settle()
            response = resolve_resent_create(self.state_machine.image, request, response)
        return response  # type: ignore[return-value]

    async def settle(self) -> None:
        """Return once this node's image holds every write answered to this node before the
        call (read-your-writes; see api.context.NodeContext.settle).

        A write the active controller in this process answered is in the image already: the
        leader applies what it commits in the step that commits it. For a forwarded write,
        this waits until the image has applied the leader's high watermark as a
        DescribeQuorum sent after the call began reports it; concurrent readers share that
        round trip, and readers that find nothing unsettled make none.
        """
        answered = self._answered
        if answered == self._settled:
            return
        if await self.wait_for_committed():
            self._settled = max(self._settled, answered)

    async def _forward_alter_configs(
        self, request: IncrementalAlterConfigsRequest
    ) -> tuple[IncrementalAlterConfigsResponse, bool]:
        response, resent = await self.client.call_tracked(request)
        if not isinstance(response, IncrementalAlterConfigsResponse):
            raise NotAvailableError(f"the controller answered {type(response).__name__} to IncrementalAlterConfigs")
        return response, resent

    async def wait_for_committed(self, timeout_s: float = 10.0) -> bool:
        """Wait until this node applied everything the quorum leader had committed when
        this call began; whether it did (False after `timeout_s`, or at once when no leader
        answers)."""
        try:
            target = await self.leader_high_watermark()
        except NotAvailableError:
            return False
        deadline = time.monotonic() + timeout_s
        while self.state_machine.applied_offset < target:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._updated.clear()
            try:
                async with asyncio.timeout(remaining):
                    await self._updated.wait()
            except TimeoutError:
                return False
        return True

    async def leader_high_watermark(self) -> int:
        """The quorum leader's high watermark, as a DescribeQuorum sent after this call began
        answers it (read locally on the leader).

        Concurrent callers share the round trip: a caller that finds no DescribeQuorum in
        flight sends one; a caller that finds one in flight (sent before it came, so possibly
        answered from an older state) waits for the next, which every such caller shares
        and which is sent as soon as the one in flight ends. Under many concurrent writes
        this is about one round trip per round-trip time, not one per write.
        """
        core = self.raft.core
        if core is not None and core.is_leader:
            return core.high_watermark  # the leader applies what it commits in the step that commits it
        loop = asyncio.get_running_loop()
        if self._hw_probe is None:
            probe = self._hw_probe = loop.create_future()
            self._hw_probe_task = loop.create_task(self._probe_high_watermark(probe))
        else:
            if self._next_hw_probe is None:
                self._next_hw_probe = loop.create_future()
            probe = self._next_hw_probe
        return await asyncio.shield(probe)

    async def _probe_high_watermark(self, probe: asyncio.Future[int]) -> None:
        """Answer `probe`, then start the next probe if callers wait for one."""
        try:
            high_watermark = (await self.describe_quorum()).high_watermark
        except NotAvailableError as exc:
            probe.set_exception(exc)
        except asyncio.CancelledError:
            waiting = [f for f in (probe, self._next_hw_probe) if f is not None]
            self._hw_probe = self._next_hw_probe = self._hw_probe_task = None
            for future in waiting:
                future.set_exception(NotAvailableError("the node is stopping"))
            raise
        except Exception as exc:  # a bug must not leave the waiting writers hanging
            log.exception("DescribeQuorum for the leader's high watermark failed")
            probe.set_exception(NotAvailableError(repr(exc)))
        else:
            probe.set_result(high_watermark)
        following, self._next_hw_probe = self._next_hw_probe, None
        self._hw_probe = following
        self._hw_probe_task = (
            None if following is None else asyncio.get_running_loop().create_task(self._probe_high_watermark(following))
        )

    async def describe_quorum(self) -> QuorumDescription:
        core = self.raft.core
        if core is not None and core.is_leader:
            return self.raft.describe()
        leader = core.leader_id if core is not None else -1
        address = self.raft.voters.get(leader)
        if address is None:
            raise NotAvailableError("the metadata quorum has no leader")
        api_key = codec.api_key_of(codec.DescribeQuorumCall())
        version = codec.REQUEST_VERSIONS[api_key]
        correlation = self.client.next_correlation_id()
        frame = codec.encode_request(
            codec.DescribeQuorumCall(),
            correlation_id=correlation,
            client_id=f"pykraft-rest-{self.node_id}",
            cluster_id=self._cluster_id,
            source_id=self.node_id,
            destination_id=leader,
            api_version=version,
        )
        try:
            # Over the controller client's pooled connections: no new TCP connection per write.
            # Abandoned after one request timeout, or as soon as another leader is known (a
            # stopped leader must not hold every write on this node until a timeout).
            raw = await self.client.ask_leader(
                leader, frame, correlation, api_key, version, self.config.controller_quorum_request_timeout_ms / 1000
            )
            if raw is None:
                raise TimeoutError("no answer before the request timeout or a leader change")
            _, answer = codec.decode_response(api_key, version, raw)
        except (PeerUnavailable, codec.WireError, TimeoutError, OSError) as exc:
            raise NotAvailableError(f"quorum leader {leader} did not answer: {exc}") from exc
        if not isinstance(answer, QuorumDescription):
            raise NotAvailableError(f"quorum leader {leader} answered {answer}")
        return answer
