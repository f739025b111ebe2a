"""What a resent CreateTopics really did.

A controller request can be delivered more than once: `ControllerClient.call` resends when
an attempt's connection breaks or the leader moves, and the first attempt may have been
committed before its answer was lost. The resend is then answered TOPIC_ALREADY_EXISTS
for the topic the first attempt created. Kafka's CreateTopics carries no idempotency key,
so the caller resolves it from the committed image: a topic that exists exactly as the
request asked (partition count, replication factor or assignment, explicit configs) was
created by it. A topic that differs was not: that answer stays "already exists".

Known limit: another client creating the same topic with the same settings during the
resend window is indistinguishable, and is reported as created by this request.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from quorum.controller.errors import ErrorCode
from quorum.controller.requests import (
    NO_NUM_PARTITIONS,
    NO_REPLICATION_FACTOR,
    CreatableTopic,
    CreateTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
)
from quorum.metadata.image import MetadataImage

__all__ = ["exists_as_requested", "resolve_resent_create"]

log = logging.getLogger(__name__)


def exists_as_requested(image: MetadataImage, creatable: CreatableTopic) -> bool:
    """Does the image hold `creatable.name` exactly as `creatable` asks for it?"""
    topic = image.topic_by_name(creatable.name)
    if topic is None:
        return False
    if creatable.assignments is not None:
        actual = {p: tuple(reg.replicas) for p, reg in topic.partitions.items()}
        if actual != {p: tuple(r) for p, r in creatable.assignments.items()}:
            return False
    else:
        if creatable.num_partitions != NO_NUM_PARTITIONS and len(topic.partitions) != creatable.num_partitions:
            return False
        if (
            creatable.replication_factor != NO_REPLICATION_FACTOR
            and topic.replication_factor != creatable.replication_factor
        ):
            return False
    configs = image.topic_config(creatable.name)
    return all(configs.get(k) == v for k, v in creatable.configs.items())


def resolve_resent_create(
    image: MetadataImage, request: CreateTopicsRequest, response: CreateTopicsResponse
) -> CreateTopicsResponse:
    """`response` with each TOPIC_ALREADY_EXISTS that an earlier delivery of `request`
    explains (the topic exists as requested in the committed `image`) turned into success."""
    if request.validate_only:
        return response
    wanted = {t.name: t for t in request.topics}
    results: list[CreateTopicResult] = []
    for result in response.topics:
        creatable = wanted.get(result.name)
        if result.error_code == int(ErrorCode.TOPIC_ALREADY_EXISTS) and creatable is not None:
            topic = image.topic_by_name(result.name)
            if topic is not None and exists_as_requested(image, creatable):
                log.info("topic %s: a resent create found it as requested; the first delivery created it", result.name)
                result = replace(
                    result,
                    error_code=0,
                    message=None,
                    topic_id=topic.id,
                    num_partitions=len(topic.partitions),
                    replication_factor=topic.replication_factor,
                    configs=dict(image.topic_config(result.name)),
                )
        results.append(result)
    return CreateTopicsResponse(tuple(results))
