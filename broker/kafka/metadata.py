"""Metadata (3), versions 0-12, answered from the broker's metadata image.

- `topics` null (v1+) means every topic; an empty list means none (v0: empty means all).
- Brokers: every unfenced broker with an endpoint on this listener (the listener the
  client connected to), with its rack.
- `controller_id`: in KRaft, Kafka names a live broker (clients send admin requests there
  and brokers forward them), so this broker's own id.
- Per partition: leader (-1 and LEADER_NOT_AVAILABLE when none; LISTENER_NOT_FOUND when
  the leader has no endpoint on this listener), leader epoch (v7+), replicas, ISR, and
  the replicas on brokers that are not live as offline replicas (v5+).
- Topic ids (v10+); a request naming a topic only by id (v10+) that is unknown gets
  UNKNOWN_TOPIC_ID.
- Unknown topic names: when the request allows auto-creation (always below v4) and
  `auto.create.topics.enable` is set, a CreateTopics with `num.partitions` and
  `default.replication.factor` is sent to the active controller and the topic answered
  LEADER_NOT_AVAILABLE (the client retries), as Kafka does; otherwise
  UNKNOWN_TOPIC_OR_PARTITION. Invalid names get INVALID_TOPIC_EXCEPTION; internal topics
  (`__` prefix) are never auto-created here.
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from datetime import timedelta
from typing import Any, Final

from broker.kafka.context import RequestContext, decode_body, encode_body, kio_error, make, nested, response_type
from broker.kafka.services import BrokerServices, ListenerConfig
from quorum.controller.requests import CreatableTopic, CreateTopicsRequest
from quorum.kafka_errors import ErrorCode
from quorum.metadata.image import MetadataImage, TopicImage
from quorum.wire.admin_codec import encode_admin_request

__all__ = ["AutoTopicCreator", "handle_metadata", "valid_topic_name"]

log = logging.getLogger(__name__)

LISTENER_NOT_FOUND: Final = 72  # Kafka's code (kio knows it; the shared enum does not need it)
_LEGAL: Final = re.compile(r"[a-zA-Z0-9._-]+")
_MAX_NAME: Final = 249
_ZERO_UUID: Final = uuid.UUID(int=0)
INTERNAL_TOPICS: Final = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


def valid_topic_name(name: str) -> bool:
    """Kafka's Topic.validate: non-empty, not '.'/'..', <= 249 legal characters."""
    return name not in ("", ".", "..") and len(name) <= _MAX_NAME and _LEGAL.fullmatch(name) is not None


class AutoTopicCreator:
    """Sends CreateTopics for unknown topics named in Metadata requests, at most one in
    flight per name (Kafka's AutoTopicCreationManager dedup)."""

    def __init__(self, services: BrokerServices, config: ListenerConfig) -> None:
        self.services = services
        self.config = config
        self._inflight: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    def request(self, names: list[str]) -> None:
        fresh = [n for n in names if n not in self._inflight]
        if not fresh:
            return
        self._inflight.update(fresh)
        task = asyncio.get_running_loop().create_task(self._create(fresh))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _create(self, names: list[str]) -> None:
        request = CreateTopicsRequest(
            topics=tuple(
                CreatableTopic(
                    name=n,
                    num_partitions=self.config.num_partitions,
                    replication_factor=self.config.default_replication_factor,
                )
                for n in names
            ),
            timeout_ms=self.config.forward_timeout_ms,
        )
        try:
            frame, api_key, api_version = encode_admin_request(request, correlation_id=0, client_id="auto-create")
            await self.services.forward_to_controller(frame, api_key, api_version, self.config.forward_timeout_ms)
        except Exception as exc:  # reported and retried on the client's next Metadata
            log.warning("auto-creating topics %s failed: %s", names, exc)
        finally:
            self._inflight.difference_update(names)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks))


def _topic_entry(
    cls: type[Any], image: MetadataImage, topic: TopicImage, live: set[int], listener: str, version: int
) -> Any:
    pcls = nested(cls, "MetadataResponsePartition")
    parts = []
    for pid in sorted(topic.partitions):
        reg = topic.partitions[pid]
        error: int = ErrorCode.NONE
        if reg.leader < 0:
            error = ErrorCode.LEADER_NOT_AVAILABLE
        else:
            b = image.broker(reg.leader)
            if b is None or b.endpoint(listener) is None:
                error = LISTENER_NOT_FOUND if version >= 1 else ErrorCode.LEADER_NOT_AVAILABLE
        parts.append(
            make(
                pcls,
                error_code=kio_error(error),
                partition_index=pid,
                leader_id=reg.leader,
                leader_epoch=reg.leader_epoch,
                replica_nodes=reg.replicas,
                isr_nodes=reg.isr,
                offline_replicas=tuple(r for r in reg.replicas if r not in live),
            )
        )
    return make(
        nested(cls, "MetadataResponseTopic"),
        error_code=kio_error(ErrorCode.NONE),
        name=topic.name,
        topic_id=topic.id,
        is_internal=topic.name in INTERNAL_TOPICS,
        partitions=tuple(parts),
        topic_authorized_operations=-(2**31),
    )


def _error_topic(cls: type[Any], name: str | None, topic_id: uuid.UUID | None, error: int) -> Any:
    return make(
        nested(cls, "MetadataResponseTopic"),
        error_code=kio_error(error),
        name=name,
        topic_id=topic_id or _ZERO_UUID,
        is_internal=False,
        partitions=(),
        topic_authorized_operations=-(2**31),
    )


async def handle_metadata(
    ctx: RequestContext, services: BrokerServices, config: ListenerConfig, creator: AutoTopicCreator
) -> bytes:
    body = decode_body(ctx)
    version = ctx.version
    image = services.image()
    cls = response_type(ctx.api_key, version)
    listener = config.listener_name
    live = {b.id for b in image.cluster.brokers.values() if not b.fenced}
    bcls = nested(cls, "MetadataResponseBroker")
    brokers = []
    for b in sorted(image.cluster.brokers.values(), key=lambda b: b.id):
        ep = b.endpoint(listener)
        if b.fenced or ep is None:
            continue
        brokers.append(make(bcls, node_id=b.id, host=ep.host, port=ep.port, rack=b.rack))
    requested = body.topics
    all_topics = requested is None or (version == 0 and len(requested) == 0)
    allow_auto = bool(getattr(body, "allow_auto_topic_creation", True)) and config.auto_create_topics_enable
    topics: list[Any] = []
    if all_topics:
        for t in sorted(image.topics.by_name.values(), key=lambda t: t.name):
            topics.append(_topic_entry(cls, image, t, live, listener, version))
    else:
        to_create: list[str] = []
        for item in requested:
            name = getattr(item, "name", None)
            topic_id = getattr(item, "topic_id", None)
            if name is None:
                found = image.topic_by_id(topic_id) if topic_id is not None else None
                if found is None:
                    topics.append(_error_topic(cls, None, topic_id, ErrorCode.UNKNOWN_TOPIC_ID))
                else:
                    topics.append(_topic_entry(cls, image, found, live, listener, version))
                continue
            found = image.topic_by_name(name)
            if found is not None:
                topics.append(_topic_entry(cls, image, found, live, listener, version))
            elif not valid_topic_name(name):
                topics.append(_error_topic(cls, name, None, ErrorCode.INVALID_TOPIC_EXCEPTION))
            elif allow_auto and not name.startswith("__"):
                to_create.append(name)
                topics.append(_error_topic(cls, name, None, ErrorCode.LEADER_NOT_AVAILABLE))
            else:
                topics.append(_error_topic(cls, name, None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
        if to_create:
            creator.request(to_create)
    response = make(
        cls,
        throttle_time=timedelta(0),
        brokers=tuple(brokers),
        cluster_id=services.cluster_id,
        controller_id=services.node_id,
        topics=tuple(topics),
        cluster_authorized_operations=-(2**31),
    )
    return encode_body(ctx, response)
