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
from typing import Any, Final, cast

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
from quorum.wire.transport import CloseConnection, StreamedResponse, close_server, serve

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

    async def __call__(self, frame: bytes) -> bytes | bytearray | SplicedResponse | None:
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
            response = await self._dispatch(ctx)
        except MalformedRequest as exc:
            raise CloseConnection(f"malformed api {api_key} v{version} request: {exc}") from exc
        self.requests_served += 1
        return response

    async def _dispatch(self, ctx: RequestContext) -> bytes | bytearray | SplicedResponse | None:
        s = self.services
        c = self.config
        match ctx.api_key:
            case ApiKey.PRODUCE:
                return await handle_produce(ctx, s, c)
            case ApiKey.FETCH:
                return await handle_fetch(ctx, s, c, self.sessions)
            case ApiKey.METADATA:
                return await handle_metadata(ctx, s, c, self.creator)
            case ApiKey.LIST_OFFSETS:
                return await handle_list_offsets(ctx, s)
            case ApiKey.OFFSET_FOR_LEADER_EPOCH:
                return await handle_offset_for_leader_epoch(ctx, s)
            case ApiKey.DELETE_RECORDS:
                return await handle_delete_records(ctx, s)
            case ApiKey.DESCRIBE_LOG_DIRS:
                return await handle_describe_log_dirs(ctx, s)
            case ApiKey.DESCRIBE_CLUSTER:
                return await handle_describe_cluster(ctx, s, c)
            case ApiKey.INIT_PRODUCER_ID:
                return await self.txns.init_producer_id(ctx)
            case ApiKey.ADD_PARTITIONS_TO_TXN:
                return await self.txns.add_partitions_to_txn(ctx)
            case ApiKey.ADD_OFFSETS_TO_TXN:
                return await self.txns.add_offsets_to_txn(ctx)
            case ApiKey.END_TXN:
                return await self.txns.end_txn(ctx)
            case ApiKey.DESCRIBE_TRANSACTIONS:
                return await self.txns.describe_transactions(ctx)
            case ApiKey.LIST_TRANSACTIONS:
                return await self.txns.list_transactions(ctx)
            case ApiKey.ALTER_CONFIGS:
                return await handle_alter_configs(ctx, s, c)
            case ApiKey.WRITE_TXN_MARKERS:
                return await handle_write_txn_markers(ctx, s)
            case ApiKey.DESCRIBE_PRODUCERS:
                return await handle_describe_producers(ctx, s)
            case ApiKey.FIND_COORDINATOR:
                return await self.groups.find_coordinator(ctx)
            case ApiKey.JOIN_GROUP:
                return await self.groups.join_group(ctx)
            case ApiKey.SYNC_GROUP:
                return await self.groups.sync_group(ctx)
            case ApiKey.HEARTBEAT:
                return await self.groups.heartbeat(ctx)
            case ApiKey.LEAVE_GROUP:
                return await self.groups.leave_group(ctx)
            case ApiKey.OFFSET_COMMIT:
                return await self.groups.offset_commit(ctx)
            case ApiKey.OFFSET_FETCH:
                return await self.groups.offset_fetch(ctx)
            case ApiKey.TXN_OFFSET_COMMIT:
                return await self.groups.txn_offset_commit(ctx)
            case ApiKey.DESCRIBE_GROUPS:
                return await self.groups.describe_groups(ctx)
            case ApiKey.LIST_GROUPS:
                return await self.groups.list_groups(ctx)
            case ApiKey.DELETE_GROUPS:
                return await self.groups.delete_groups(ctx)
            case ApiKey.OFFSET_DELETE:
                return await self.groups.offset_delete(ctx)
            case ApiKey.CONSUMER_GROUP_HEARTBEAT:
                return await self.groups.consumer_group_heartbeat(ctx)
            case ApiKey.CONSUMER_GROUP_DESCRIBE:
                return await self.groups.consumer_group_describe(ctx)
            case key if key in FORWARDED:
                return await handle_forwarded(ctx, s, c)
        raise CloseConnection(f"api key {ctx.api_key} has no handler")  # pragma: no cover

    async def serve_frame(self, frame: bytes) -> bytes | StreamedResponse | None:
        """`__call__` typed as the transport's Handler: a bytearray response is written
        as it is (the stream writer takes any bytes-like object), saving a copy; a
        SplicedResponse sends itself (its records from the segment files)."""
        return cast(bytes | StreamedResponse | None, await self(frame))

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
