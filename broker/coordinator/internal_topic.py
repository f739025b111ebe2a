"""Creating a coordinator's internal topic (`__consumer_offsets`, `__transaction_state`) on
first use, as Kafka's FindCoordinator does: the request goes to the active controller in the
background while the caller answers COORDINATOR_NOT_AVAILABLE (clients retry). The
replication factor is capped by the live brokers, with a log line (Kafka's rule for the
offsets topic); a failure is logged and retried at the next call."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from broker.kafka.services import BrokerServices, ListenerConfig
from quorum.controller.requests import CreatableTopic, CreateTopicsRequest
from quorum.kafka_errors import ErrorCode
from quorum.wire.admin_codec import decode_admin_response, encode_admin_request

__all__ = [
    "COORDINATOR_NOT_AVAILABLE",
    "CoordinatorAddress",
    "InternalTopic",
    "InternalTopicCreator",
    "compacted_topic_creator",
]

# FindCoordinator's answer for one key: (error, node id, host, port)
CoordinatorAddress = tuple[ErrorCode, int, str, int]
COORDINATOR_NOT_AVAILABLE: CoordinatorAddress = (ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class InternalTopic:
    name: str
    num_partitions: int
    replication_factor: int  # wanted; capped by the live brokers
    replication_factor_setting: str  # the broker setting that names it, for the log line
    configs: dict[str, str] = field(default_factory=dict)
    # The topic's min.insync.replicas (0: not set), capped by the replication factor.
    min_insync_replicas: int = 0
    client_id: str = "coordinator"  # of the CreateTopics request forwarded to the controller


class InternalTopicCreator:
    """One creation in flight per creator; `ensure` never waits."""

    def __init__(self, services: BrokerServices, topic: InternalTopic, forward_timeout_ms: int) -> None:
        self.services = services
        self.spec = topic
        self.forward_timeout_ms = forward_timeout_ms
        self._creating: asyncio.Task[None] | None = None

    def coordinator(self, key: str, partition_of: Callable[[str, int], int], listener_name: str) -> CoordinatorAddress:
        """FindCoordinator for `key`: the leader of the topic's partition `partition_of(key,
        partition count)` on `listener_name`; COORDINATOR_NOT_AVAILABLE while the topic does
        not exist (its creation is started) or the partition has no leader."""
        image = self.services.image()
        topic = image.topics.by_name.get(self.spec.name)
        if topic is None or not topic.partitions:
            self.ensure()
            return COORDINATOR_NOT_AVAILABLE
        reg = topic.partitions.get(partition_of(key, len(topic.partitions)))
        if reg is None or reg.leader < 0:
            return COORDINATOR_NOT_AVAILABLE
        broker = image.broker(reg.leader)
        endpoint = None if broker is None else broker.endpoint(listener_name)
        if endpoint is None:
            return COORDINATOR_NOT_AVAILABLE
        return (ErrorCode.NONE, reg.leader, endpoint.host, endpoint.port)

    def ensure(self) -> None:
        """Start creating the topic unless a creation is under way."""
        if self._creating is not None and not self._creating.done():
            return
        self._creating = asyncio.get_running_loop().create_task(self._create())

    async def _create(self) -> None:
        t = self.spec
        live = len(self.services.image().cluster.active_broker_ids())
        rf = t.replication_factor
        if live < rf:
            log.warning(
                "creating %s with replication factor %d: %s is %d but only %d brokers are alive",
                t.name, max(live, 1), t.replication_factor_setting, rf, live,
            )  # fmt: skip
            rf = max(live, 1)
        configs = dict(t.configs)
        if t.min_insync_replicas > 0:
            configs["min.insync.replicas"] = str(min(t.min_insync_replicas, rf))
        request = CreateTopicsRequest(
            topics=(
                CreatableTopic(name=t.name, num_partitions=t.num_partitions, replication_factor=rf, configs=configs),
            ),  # fmt: skip
            timeout_ms=self.forward_timeout_ms,
        )
        try:
            frame, api_key, api_version = encode_admin_request(request, correlation_id=0, client_id=t.client_id)
            answer = await self.services.forward_to_controller(frame, api_key, api_version, self.forward_timeout_ms)
            reply = decode_admin_response(api_key, api_version, answer, request)
        except Exception as exc:  # retried at the next call
            log.warning("creating %s failed: %s", t.name, exc)
            return
        for result in getattr(reply, "topics", ()):
            if result.error_code == ErrorCode.NONE:
                log.info("created %s (%d partitions, replication factor %d)", t.name, t.num_partitions, rf)
            elif result.error_code != ErrorCode.TOPIC_ALREADY_EXISTS:
                log.warning("creating %s failed: %s %s", t.name, ErrorCode(result.error_code).name,
                            result.message or "")  # fmt: skip


def compacted_topic_creator(
    services: BrokerServices,
    config: ListenerConfig,
    topic: str,
    num_partitions: int,
    replication: tuple[int, str],
    segment_bytes: int,
    configs: dict[str, str],
    *,
    client_id: str,
    min_insync_replicas: int = 0,
) -> InternalTopicCreator:
    """The creator of a coordinator's compacted internal topic (the group and the transaction
    coordinators' listeners): `replication` is the wanted factor and the setting naming it;
    `configs` are the topic's other configs besides cleanup.policy and segment.bytes."""
    factor, setting = replication
    spec = InternalTopic(
        topic, num_partitions, factor, setting,
        {"cleanup.policy": "compact", **configs, "segment.bytes": str(segment_bytes)},
        min_insync_replicas=min_insync_replicas, client_id=client_id,
    )  # fmt: skip
    return InternalTopicCreator(services, spec, config.forward_timeout_ms)
