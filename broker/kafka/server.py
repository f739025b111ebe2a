"""The Kafka client listener of a broker: framing over `quorum.wire.transport.serve`,
request headers, version checks, dispatch to the per-api handlers.

Bad input, Kafka's way:
- a frame too short for a request header, an unknown api key, or an unsupported version
  of any api but ApiVersions: the connection is closed (Kafka closes it; the client
  reconnects and renegotiates);
- ApiVersions at a version above ours: UNSUPPORTED_VERSION with our ranges (KIP-511);
- a body that does not decode (truncated, lying lengths, a null non-nullable array):
  closed; bytes after a body that decodes are ignored, as Kafka ignores them
  (`quorum.wire._reader.read_request_body`);
- bad record batches: per-partition error codes (INVALID_RECORD, CORRUPT_MESSAGE, ...);
- a bug in a handler or a service: logged, connection closed; other connections go on.
Frames above `socket.request.max.bytes` are refused by the transport.

Responses follow request order on each connection: the transport answers one request
at a time per connection, and the pipelined transport (`pipeline_depth`) writes answers
in request order too.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

from broker.group.runtime import GroupCoordinator
from broker.kafka.admin import handle_forwarded
from broker.kafka.alter_configs import handle_alter_configs
from broker.kafka.api_versions import handle_api_versions
from broker.kafka.apis import FORWARDED, SUPPORTED, ApiKey, is_flexible
from broker.kafka.cluster import handle_describe_cluster
from broker.kafka.context import RequestContext
from broker.kafka.describe_producers import handle_describe_producers
from broker.kafka.fetch import handle_fetch
from broker.kafka.fetch_session import FetchSessionCache
from broker.kafka.group_apis import GroupApis
from broker.kafka.log_apis import handle_delete_records, handle_describe_log_dirs
from broker.kafka.metadata import AutoTopicCreator, handle_metadata
from broker.kafka.offsets import handle_list_offsets, handle_offset_for_leader_epoch
from broker.kafka.produce import handle_produce
from broker.kafka.services import BrokerServices, ListenerConfig
from broker.kafka.spliced import SplicedResponse
from broker.kafka.txn_apis import TxnApis
from broker.kafka.wire import MalformedRequest, parse_request_header, peek_api
from broker.kafka.write_txn_markers import handle_write_txn_markers
from broker.txn.runtime import TxnRuntime
from quorum.wire.limits import ConnectionLimits
from quorum.wire.transport import CloseConnection, Handler, close_server, serve

__all__ = [
    "PIPELINE_DEPTH",
    "KafkaListener",
    "KafkaListeners",
    "KafkaRequestHandler",
    "listener_config_from",
    "start_kafka_listener",
    "stop_kafka_listener",
]

log = logging.getLogger(__name__)

_Handler = Callable[[RequestContext], Awaitable[bytes | bytearray | SplicedResponse | None]]

# ---------------------------------------------------------------------------------------
# THE place where the per-connection pipeline depth is chosen (requests read ahead and
# handled concurrently on one connection; answers still written in request order), as
# librdkafka keeps up to 5 produce requests in flight per broker: acks=all requests then
# wait for replication together. Appends still happen in request order: a produce
# handler appends before its first suspension, and handlers start in request order.
PIPELINE_DEPTH: Final = 16
# ---------------------------------------------------------------------------------------


class KafkaRequestHandler:
    """Turns one request frame (without its length prefix) into its response frame."""

    def __init__(
        self,
        services: BrokerServices,
        config: ListenerConfig,
        groups: GroupCoordinator | None = None,
        txns: TxnRuntime | None = None,
    ) -> None:
        self.services = services
        self.config = config
        self.groups = GroupApis(services, config, groups)
        self.txns = TxnApis(services, config, txns)
        self.groups.transaction_coordinator = self.txns.coordinator
        self.sessions = FetchSessionCache(
            config.max_incremental_fetch_session_cache_slots, config.min_incremental_fetch_session_eviction_ms
        )
        self.creator = AutoTopicCreator(services, config)
        self.requests_served = 0
        self._by_key = self._handlers()

    async def __call__(self, frame: bytes | bytearray) -> bytes | bytearray | SplicedResponse | None:
        view = memoryview(frame)
        try:
            api_key, version, _ = peek_api(view)
        except MalformedRequest as exc:
            raise CloseConnection(str(exc)) from exc
        supported = SUPPORTED.get(api_key)
        if supported is None:
            raise CloseConnection(f"unknown api key {api_key}")
        try:
            if api_key == ApiKey.API_VERSIONS:
                # KIP-511: parse the header as the client's version says (v3+: flexible),
                # whatever version it is, to answer even versions above ours.
                header = parse_request_header(view, version >= 3)
                self.requests_served += 1
                return handle_api_versions(view, header)
            low, high = supported
            if not low <= version <= high:
                raise CloseConnection(f"api {api_key} v{version} is not in {low}..{high}")
            flexible = is_flexible(api_key, version)
            header = parse_request_header(view, flexible)
            ctx = RequestContext(header, view, flexible)
            response = await self._route(ctx)
        except MalformedRequest as exc:
            raise CloseConnection(f"malformed api {api_key} v{version} request: {exc}") from exc
        self.requests_served += 1
        return response

    def _handlers(self) -> dict[int, _Handler]:
        """Each api key's handler: one dict lookup per request (a `match` over the keys
        compared an enum member per case, ~2 us for the keys near its end: OffsetCommit).
        Each reads the handler's attributes at call time (tests replace `sessions`)."""
        return {
            ApiKey.PRODUCE: lambda ctx: handle_produce(ctx, self.services, self.config),
            ApiKey.FETCH: lambda ctx: handle_fetch(ctx, self.services, self.config, self.sessions),
            ApiKey.METADATA: lambda ctx: handle_metadata(ctx, self.services, self.config, self.creator),
            ApiKey.LIST_OFFSETS: lambda ctx: handle_list_offsets(ctx, self.services),
            ApiKey.OFFSET_FOR_LEADER_EPOCH: lambda ctx: handle_offset_for_leader_epoch(ctx, self.services),
            ApiKey.DELETE_RECORDS: lambda ctx: handle_delete_records(ctx, self.services),
            ApiKey.DESCRIBE_LOG_DIRS: lambda ctx: handle_describe_log_dirs(ctx, self.services),
            ApiKey.DESCRIBE_CLUSTER: lambda ctx: handle_describe_cluster(ctx, self.services, self.config),
            ApiKey.INIT_PRODUCER_ID: lambda ctx: self.txns.init_producer_id(ctx),
            ApiKey.ADD_PARTITIONS_TO_TXN: lambda ctx: self.txns.add_partitions_to_txn(ctx),
            ApiKey.ADD_OFFSETS_TO_TXN: lambda ctx: self.txns.add_offsets_to_txn(ctx),
            ApiKey.END_TXN: lambda ctx: self.txns.end_txn(ctx),
            ApiKey.DESCRIBE_TRANSACTIONS: lambda ctx: self.txns.describe_transactions(ctx),
            ApiKey.LIST_TRANSACTIONS: lambda ctx: self.txns.list_transactions(ctx),
            ApiKey.ALTER_CONFIGS: lambda ctx: handle_alter_configs(ctx, self.services, self.config),
            ApiKey.WRITE_TXN_MARKERS: lambda ctx: handle_write_txn_markers(ctx, self.services),
            ApiKey.DESCRIBE_PRODUCERS: lambda ctx: handle_describe_producers(ctx, self.services),
            ApiKey.FIND_COORDINATOR: lambda ctx: self.groups.find_coordinator(ctx),
            ApiKey.JOIN_GROUP: lambda ctx: self.groups.join_group(ctx),
            ApiKey.SYNC_GROUP: lambda ctx: self.groups.sync_group(ctx),
            ApiKey.HEARTBEAT: lambda ctx: self.groups.heartbeat(ctx),
            ApiKey.LEAVE_GROUP: lambda ctx: self.groups.leave_group(ctx),
            ApiKey.OFFSET_COMMIT: lambda ctx: self.groups.offset_commit(ctx),
            ApiKey.OFFSET_FETCH: lambda ctx: self.groups.offset_fetch(ctx),
            ApiKey.TXN_OFFSET_COMMIT: lambda ctx: self.groups.txn_offset_commit(ctx),
            ApiKey.DESCRIBE_GROUPS: lambda ctx: self.groups.describe_groups(ctx),
            ApiKey.LIST_GROUPS: lambda ctx: self.groups.list_groups(ctx),
            ApiKey.DELETE_GROUPS: lambda ctx: self.groups.delete_groups(ctx),
            ApiKey.OFFSET_DELETE: lambda ctx: self.groups.offset_delete(ctx),
            ApiKey.CONSUMER_GROUP_HEARTBEAT: lambda ctx: self.groups.consumer_group_heartbeat(ctx),
            ApiKey.CONSUMER_GROUP_DESCRIBE: lambda ctx: self.groups.consumer_group_describe(ctx),
        }

    def _route(self, ctx: RequestContext) -> Awaitable[bytes | bytearray | SplicedResponse | None]:
        """The awaitable answering `ctx` (not a coroutine of its own: one frame fewer per request)."""
        handler = self._by_key.get(ctx.api_key)
        if handler is not None:
            return handler(ctx)
        if ctx.api_key in FORWARDED:
            return handle_forwarded(ctx, self.services, self.config)
        raise CloseConnection(f"api key {ctx.api_key} has no handler")  # pragma: no cover

    @property
    def serve_frame(self) -> Handler:
        """`__call__` as the transport's Handler: a bytearray response is written as it is
        (the stream writer takes any bytes-like object), saving a copy; a SplicedResponse
        sends itself (its records from the segment files)."""
        return self.__call__

    async def close(self) -> None:
        await self.creator.close()


def _serve_kwargs(config: ListenerConfig) -> dict[str, Any]:
    limits = config.limits if config.limits is not None else ConnectionLimits(config.socket_request_max_bytes)
    return {"limits": limits, "pipeline_depth": PIPELINE_DEPTH}


class KafkaListener:
    """One listening socket speaking the Kafka protocol to clients."""

    def __init__(
        self,
        services: BrokerServices,
        config: ListenerConfig,
        groups: GroupCoordinator | None = None,
        txns: TxnRuntime | None = None,
    ) -> None:
        self.handler = KafkaRequestHandler(services, config, groups, txns)
        self.config = config
        self._server: asyncio.Server | None = None
        self.started_ms = -1

    async def start(self, host: str | None, port: int) -> int:
        """Listen; the bound port (useful with port 0)."""
        self._server = await serve(host, port, self.handler.serve_frame, **_serve_kwargs(self.config))
        self.started_ms = int(time.time() * 1000)
        sock = self._server.sockets[0]
        bound: int = sock.getsockname()[1]
        log.info("kafka listener %s on %s:%d", self.config.listener_name, host or "*", bound)
        return bound

    async def stop(self) -> None:
        if self._server is not None:
            await close_server(self._server)
            self._server = None
        await self.handler.close()


# --------------------------------------------------------------------------- node wiring


def listener_config_from(node_config: Any, listener_name: str) -> ListenerConfig:
    """The listener settings from a `quorum.node.config.NodeConfig` (Kafka's names;
    attributes the config does not have yet keep Kafka's defaults)."""
    defaults = ListenerConfig()

    def get(name: str, default: Any) -> Any:
        return getattr(node_config, name, default)

    return ListenerConfig(
        listener_name=listener_name,
        auto_create_topics_enable=bool(get("auto_create_topics_enable", defaults.auto_create_topics_enable)),
        num_partitions=int(get("num_partitions", defaults.num_partitions)),
        default_replication_factor=int(get("default_replication_factor", defaults.default_replication_factor)),
        replica_selector_class=get("replica_selector_class", None),
        fetch_max_bytes=int(get("fetch_max_bytes", defaults.fetch_max_bytes)),
        max_incremental_fetch_session_cache_slots=int(
            get("max_incremental_fetch_session_cache_slots", defaults.max_incremental_fetch_session_cache_slots)
        ),
        socket_request_max_bytes=int(get("socket_request_max_bytes", defaults.socket_request_max_bytes)),
        offsets_topic_num_partitions=int(get("offsets_topic_num_partitions", defaults.offsets_topic_num_partitions)),
        offsets_topic_replication_factor=int(
            get("offsets_topic_replication_factor", defaults.offsets_topic_replication_factor)
        ),
        offsets_topic_segment_bytes=int(get("offsets_topic_segment_bytes", defaults.offsets_topic_segment_bytes)),
        **{
            name: int(get(name, getattr(defaults, name)))
            for name in (
                "transaction_state_log_num_partitions",
                "transaction_state_log_replication_factor",
                "transaction_state_log_min_isr",
                "transaction_state_log_segment_bytes",
            )
        },
        limits=ConnectionLimits.from_config(node_config),
    )


class KafkaListeners:
    """Every client listener of one broker (one per non-controller `listeners` entry);
    they share the fetch-session cache's rules but each has its own cache."""

    def __init__(self, listeners: list[KafkaListener]) -> None:
        self.listeners = listeners
        self.ports: dict[str, int] = {}

    async def stop(self) -> None:
        for listener in self.listeners:
            await listener.stop()


async def start_kafka_listener(
    node_config: Any, services: BrokerServices, groups: GroupCoordinator | None = None, txns: TxnRuntime | None = None
) -> KafkaListeners:
    """Start a KafkaListener on each broker listener of `node_config` (the entries of
    `listeners` not named in `controller.listener.names`)."""
    controller_names = set(getattr(node_config, "controller_listener_names", ()))
    group = KafkaListeners([])
    try:
        for entry in node_config.listeners:
            if entry.name in controller_names:
                continue
            listener = KafkaListener(services, listener_config_from(node_config, entry.name), groups, txns)
            group.ports[entry.name] = await listener.start(entry.host or None, entry.port)
            group.listeners.append(listener)
    except BaseException:
        await group.stop()
        raise
    return group


async def stop_kafka_listener(group: KafkaListeners) -> None:
    await group.stop()
