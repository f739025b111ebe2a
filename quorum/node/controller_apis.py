"""`ControllerApis`: the non-quorum Kafka APIs a controller serves on its listener.

Writes (CreateTopics, DeleteTopics, CreatePartitions, IncrementalAlterConfigs,
ElectLeaders, BrokerRegistration, BrokerHeartbeat, AlterPartition,
AllocateProducerIds) go to the
QuorumController and are answered NOT_CONTROLLER on a standby. Reads
(DescribeCluster, DescribeConfigs) are answered from this node's committed
image on any controller.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable
from dataclasses import replace

from quorum.controller.config_entry import ConfigEntry
from quorum.controller.errors import ErrorCode
from quorum.controller.requests import ConfigResourceType, ControllerResponse, IncrementalAlterConfigsRequest
from quorum.controller.topic_configs import describe_all
from quorum.metadata.image import ConfigResource
from quorum.metadata.snapshot import MetadataStateMachine
from quorum.node.active_controller import NotControllerError, QuorumController
from quorum.node.raft_node import RaftNode
from quorum.raft.errors import NotLeaderError
from quorum.raft.types import Offset
from quorum.wire import admin_codec, codec
from quorum.wire.transport import CloseConnection

log = logging.getLogger(__name__)

_NOT_ACTIVE = "This is not the active controller"
# Answered by `_handle` from the image on any controller (or refused): no write rule.
_NOT_WRITES = (
    admin_codec.DescribeClusterRequest,
    admin_codec.DescribeConfigsRequest,
    admin_codec.UnregisterBrokerRequest,
)


class ControllerApis:
    def __init__(
        self,
        controller: QuorumController,
        state_machine: MetadataStateMachine,
        raft: RaftNode,
        *,
        cluster_id: str,
        broker_defaults: dict[str, str],
    ) -> None:
        self.controller = controller
        self.state_machine = state_machine
        self.raft = raft
        self.cluster_id = cluster_id
        self.broker_defaults = broker_defaults

    def handle(self, api_key: int, frame: bytes | bytearray) -> Awaitable[bytes | None]:
        """The answer to `frame`, for the listener (`transport.serve` awaits what this returns).

        A write is decided here and now (`QuorumController.start_write`) and answered with a
        future that its commit resolves: the write costs no task and no coroutine. Everything
        else (reads, errors, heartbeats) is a coroutine, `_handle`. Never raises: what the
        fast path cannot answer, the coroutine does (it raises inside the listener's task,
        which closes the connection, as any handler's exception does)."""
        try:
            decoded = admin_codec.decode_admin_request(frame)
        except codec.WireError:
            return self._handle(frame, None)
        request = decoded.request
        # The hot write's exact type first: no class of _NOT_WRITES is one of its bases.
        if type(request) is not IncrementalAlterConfigsRequest and isinstance(request, _NOT_WRITES):
            return self._handle(frame, decoded)
        try:
            started = self.controller.start_write(request)
        except NotControllerError:
            return self._handle(frame, decoded)  # a standby: the coroutine answers NOT_CONTROLLER
        except Exception as exc:  # noqa: BLE001 - as an exception of the handler's task
            failed: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
            failed.set_exception(exc)
            return failed
        if started is None:
            return self._handle(frame, decoded)
        response, committed = started
        answer: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
        if committed is None:
            self._answer(decoded, response, answer, None)
        else:
            committed.add_done_callback(functools.partial(self._answer, decoded, response, answer))
        return answer

    def _answer(
        self,
        decoded: admin_codec.DecodedAdmin,
        response: ControllerResponse,
        answer: asyncio.Future[bytes | None],
        committed: asyncio.Future[Offset] | None,
    ) -> None:
        """Resolve a write's `answer` once its records' commit (`committed`) resolved."""
        if answer.done():
            return  # cancelled: the connection closed meanwhile
        try:
            if committed is not None:
                if committed.cancelled():
                    answer.cancel()
                    return
                exc = committed.exception()
                if isinstance(exc, NotLeaderError):
                    code = int(ErrorCode.NOT_CONTROLLER)
                    answer.set_result(admin_codec.encode_admin_error(decoded, code, _NOT_ACTIVE))
                    return
                if exc is not None:
                    answer.set_exception(exc)
                    return
            answer.set_result(admin_codec.encode_admin_response(decoded, response))
        except Exception as exc:  # noqa: BLE001 - as an exception of the handler's task
            answer.set_exception(exc)

    async def _handle(self, frame: bytes | bytearray, decoded: admin_codec.DecodedAdmin | None) -> bytes | None:
        if decoded is None:
            try:
                decoded = admin_codec.decode_admin_request(frame)
            except codec.WireError as exc:
                answer = admin_codec.admin_error_response_for(exc)
                if answer is None:
                    raise CloseConnection from exc
                return answer
        request = decoded.request
        if isinstance(request, admin_codec.DescribeClusterRequest):
            return admin_codec.encode_admin_response(decoded, self._describe_cluster())
        if isinstance(request, admin_codec.DescribeConfigsRequest):
            return admin_codec.encode_admin_response(decoded, self._describe_configs(request))
        if isinstance(request, admin_codec.UnregisterBrokerRequest):
            code = int(ErrorCode.INVALID_REQUEST)
            return admin_codec.encode_admin_error(decoded, code, "UnregisterBroker is not supported by pykraft")
        try:
            response = await self.controller.handle(request)
        except NotControllerError:
            return admin_codec.encode_admin_error(decoded, int(ErrorCode.NOT_CONTROLLER), _NOT_ACTIVE)
        return admin_codec.encode_admin_response(decoded, response)

    def _describe_cluster(self) -> admin_codec.DescribeClusterResponse:
        image = self.state_machine.image
        core = self.raft.core
        brokers = []
        for b in sorted(image.cluster.brokers.values(), key=lambda b: b.id):
            endpoint = b.listeners[0] if b.listeners else None
            brokers.append(
                admin_codec.DescribeClusterBroker(
                    b.id, endpoint.host if endpoint else "", endpoint.port if endpoint else -1, b.rack, b.fenced
                )
            )
        return admin_codec.DescribeClusterResponse(
            cluster_id=self.cluster_id,
            controller_id=core.leader_id if core is not None else -1,
            brokers=tuple(brokers),
        )

    def _describe_configs(self, request: admin_codec.DescribeConfigsRequest) -> admin_codec.DescribeConfigsResponse:
        image = self.state_machine.image
        results = []
        for res in request.resources:
            if res.resource_type != ConfigResourceType.TOPIC or res.resource_name not in image.topics.by_name:
                code = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                results.append(admin_codec.DescribeConfigsResult(res.resource_type, res.resource_name, code))
                continue
            explicit = image.configs.get(ConfigResource.topic(res.resource_name), {})
            entries = describe_all(explicit, self.broker_defaults, names=res.config_names)
            results.append(
                admin_codec.DescribeConfigsResult(
                    res.resource_type,
                    res.resource_name,
                    0,
                    None,
                    tuple(_wire_entry(e, request.include_synonyms, request.include_documentation) for e in entries),
                )
            )
        return admin_codec.DescribeConfigsResponse(tuple(results))


def _wire_entry(entry: ConfigEntry, synonyms: bool, documentation: bool) -> ConfigEntry:
    """The entry as the request asked for it: synonyms and documentation only if wanted."""
    return replace(
        entry,
        synonyms=entry.synonyms if synonyms else (),
        documentation=entry.documentation if documentation else None,
    )
