"""Consumer groups (REST Proxy v3): ``consumer-groups``, a group, its ``consumers`` and their
``assignments``, its ``lags`` and its ``lag-summary``.

Unlike the other reads, these are not in the node's metadata image: they are asked of the
brokers (the group's coordinator, and each partition's leader for its log end offset)
through the node's `api.group_admin.GroupAdmin`, the client the ``consumer-groups`` command
uses, run in a worker thread. The rows and lags follow `api.group_lag` (the REST Proxy's
rule: only partitions with a committed offset, a lag never below 0).

An unknown group (or consumer, or partition without a committed offset) answers 404 with
the REST Proxy's message; no live broker 503/50302; a Kafka error as `api.rest.errors`
maps it; a broker that does not answer in time 500/50003.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Annotated, Final, TypeVar

from fastapi import APIRouter, Path, Request

from api.group_admin import GroupAdmin, GroupAdminError, GroupDescription, Member
from api.group_lag import PartitionRow, offset_rows, partitions_to_look_up, rest_lag_rows
from api.rest import models as m
from api.rest.common import READ_ERRORS, ClusterScope, PartitionId, TopicName, error_responses, node_context
from api.rest.errors import BROKER_NOT_AVAILABLE, KAFKA_RETRIABLE_ERROR, ApiError, kafka_error, not_found
from api.rest.lean_route import LeanRoute
from api.rest.routes_records import bootstrap_servers
from api.rest.views import Links

router = APIRouter(prefix="/v3/clusters/{cluster_id}", route_class=LeanRoute)

GROUP_TIMEOUT_S: Final = 15.0  # per request to the brokers
TAG: Final = "Consumer Group (v3)"

GroupId = Annotated[str, Path(description="The consumer group ID.")]
ConsumerId = Annotated[str, Path(description="The consumer ID (the group member's id).")]
R = TypeVar("R")


# ---------------------------------------------------------------- asking the brokers


def group_admin(request: Request) -> GroupAdmin:
    """The app's group client, created on the first consumer-group request."""
    state = request.app.state
    admin: GroupAdmin | None = getattr(state, "group_admin", None)
    if admin is None:
        ctx = node_context(request)
        servers = bootstrap_servers(ctx)
        if not servers:
            raise ApiError(503, BROKER_NOT_AVAILABLE, "No broker is available to answer.")
        admin = GroupAdmin(servers, client_id=f"pykraft-rest-{ctx.node_id}", timeout_s=GROUP_TIMEOUT_S)
        state.group_admin = admin
    return admin


async def _ask(call: Callable[..., R], *args: object) -> R:
    try:
        return await asyncio.to_thread(call, *args)
    except GroupAdminError as exc:
        if exc.code > 0:
            raise kafka_error(exc.code, exc.message) from None
        raise ApiError(500, KAFKA_RETRIABLE_ERROR, f"The brokers did not answer: {exc.message}") from None


async def _group(request: Request, group_id: str, missing: str) -> GroupDescription:
    admin = group_admin(request)
    description = (await _ask(admin.describe, [group_id]))[group_id]
    if not description.exists:
        raise not_found(missing)
    return description


async def _lag_rows(request: Request, group_id: str) -> tuple[GroupDescription, list[PartitionRow]]:
    """The group and its partitions with a committed offset and a log end (404 when none)."""
    missing = f"Consumer Group {group_id} could not be found."
    description = await _group(request, group_id, missing)
    admin = group_admin(request)
    committed = await _ask(admin.committed, group_id)
    if not committed:
        raise not_found("Consumer group offsets could not be found.")
    log_end = await _ask(admin.log_offsets, partitions_to_look_up(description, committed), "latest")
    return description, rest_lag_rows(offset_rows(description, committed, log_end))


# ---------------------------------------------------------------- resources


def _rest_state(state: str) -> str:
    """Kafka's state name in the REST Proxy's form: PreparingRebalance -> PREPARING_REBALANCE."""
    return "".join(f"_{c}" if c.isupper() and i else c for i, c in enumerate(state)).upper()


def _group_data(links: Links, d: GroupDescription) -> m.ConsumerGroupData:
    return m.ConsumerGroupData(
        metadata=links.meta(links.consumer_group(d.group_id), links.crn_group(d.group_id)),
        cluster_id=links.cluster_id,
        consumer_group_id=d.group_id,
        is_simple=d.is_simple,
        partition_assignor=d.assignor,
        state=_rest_state(d.state),
        type=d.type.upper(),
        is_mixed_consumer_group=False,  # pykraft's groups use one protocol at a time
        coordinator=links.rel(links.broker(d.coordinator.id)),
        consumers=links.rel(links.consumers(d.group_id)),
        lag_summary=links.rel(f"{links.consumer_group(d.group_id)}/lag-summary"),
    )


def _consumer_data(links: Links, group_id: str, c: Member) -> m.ConsumerData:
    return m.ConsumerData(
        metadata=links.meta(
            links.consumer(group_id, c.member_id), f"{links.crn_group(group_id)}/consumer={c.member_id}"
        ),
        cluster_id=links.cluster_id,
        consumer_group_id=group_id,
        consumer_id=c.member_id,
        instance_id=c.instance_id,
        client_id=c.client_id,
        assignments=links.rel(links.assignments(group_id, c.member_id)),
    )


def _assignment_data(links: Links, group_id: str, c: Member, topic: str, partition: int) -> m.ConsumerAssignmentData:
    url = links.assignment(group_id, c.member_id, topic, partition)
    crn = f"{links.crn_group(group_id)}/consumer={c.member_id}/assignment={topic}/partition={partition}"
    return m.ConsumerAssignmentData(
        metadata=links.meta(url, crn),
        cluster_id=links.cluster_id,
        consumer_group_id=group_id,
        consumer_id=c.member_id,
        topic_name=topic,
        partition_id=partition,
        partition=links.rel(links.partition(topic, partition)),
        lag=links.rel(links.lag(group_id, topic, partition)),
    )


def _lag_data(links: Links, r: PartitionRow) -> m.ConsumerLagData:
    topic, partition = r.tp.topic, r.tp.partition
    return m.ConsumerLagData(
        metadata=links.meta(
            links.lag(r.group, topic, partition), f"{links.crn_group(r.group)}/lag={topic}/partition={partition}"
        ),
        cluster_id=links.cluster_id,
        consumer_group_id=r.group,
        topic_name=topic,
        partition_id=partition,
        current_offset=r.offset or 0,
        log_end_offset=r.log_end or 0,
        lag=r.rest_lag,
        consumer_id=r.member.member_id if r.member else "",
        instance_id=r.member.instance_id if r.member else None,
        client_id=r.member.client_id if r.member else "",
    )


def _member(d: GroupDescription, consumer_id: str) -> Member:
    for member in d.members:
        if member.member_id == consumer_id:
            return member
    raise not_found(f"Consumer {consumer_id} could not be found in consumer group {d.group_id}.")


# ---------------------------------------------------------------- routes


@router.get(
    "/consumer-groups",
    response_model=m.ConsumerGroupDataList,
    summary="List Consumer Groups",
    tags=[TAG],
    responses=error_responses(*READ_ERRORS),
)
async def list_consumer_groups(request: Request, scope: ClusterScope) -> m.ConsumerGroupDataList:
    admin = group_admin(request)
    listings = await _ask(admin.list_groups)
    descriptions = await _ask(admin.describe, [g.group_id for g in listings]) if listings else {}
    links = scope.links
    return m.ConsumerGroupDataList(
        metadata=links.list_meta(links.consumer_groups()),
        data=[_group_data(links, d) for _, d in sorted(descriptions.items()) if d.exists],
    )


@router.get(
    "/consumer-groups/{consumer_group_id}",
    response_model=m.ConsumerGroupData,
    summary="Get Consumer Group",
    tags=[TAG],
    responses=error_responses(*READ_ERRORS),
)
async def get_consumer_group(request: Request, scope: ClusterScope, consumer_group_id: GroupId) -> m.ConsumerGroupData:
    d = await _group(request, consumer_group_id, f"Consumer Group {consumer_group_id} could not be found.")
    return _group_data(scope.links, d)


@router.get(
    "/consumer-groups/{consumer_group_id}/consumers",
    response_model=m.ConsumerDataList,
    summary="List Consumers",
    tags=[TAG],
    responses=error_responses(*READ_ERRORS),
)
async def list_consumers(request: Request, scope: ClusterScope, consumer_group_id: GroupId) -> m.ConsumerDataList:
    d = await _group(request, consumer_group_id, f"Consumer Group {consumer_group_id} does not exist.")
    links = scope.links
    return m.ConsumerDataList(
        metadata=links.list_meta(links.consumers(consumer_group_id)),
        data=[_consumer_data(links, consumer_group_id, c) for c in sorted(d.members, key=lambda c: c.member_id)],
    )


@router.get(
    "/consumer-groups/{consumer_group_id}/consumers/{consumer_id}",
    response_model=m.ConsumerData,
    summary="Get Consumer",
    tags=[TAG],
    responses=error_responses(*READ_ERRORS),
)
async def get_consumer(
    request: Request, scope: ClusterScope, consumer_group_id: GroupId, consumer_id: ConsumerId
) -> m.ConsumerData:
    d = await _group(request, consumer_group_id, f"Consumer Group {consumer_group_id} does not exist.")
    return _consumer_data(scope.links, consumer_group_id, _member(d, consumer_id))


@router.get(
    "/consumer-groups/{consumer_group_id}/consumers/{consumer_id}/assignments",
    response_model=m.ConsumerAssignmentDataList,
    summary="List Consumer Assignments",
    tags=[TAG],
    responses=error_responses(*READ_ERRORS),
)
async def list_consumer_assignments(
    request: Request, scope: ClusterScope, consumer_group_id: GroupId, consumer_id: ConsumerId
) -> m.ConsumerAssignmentDataList:
    d = await _group(request, consumer_group_id, f"Consumer Group {consumer_group_id} does not exist.")
    member = _member(d, consumer_id)
    links = scope.links
    return m.ConsumerAssignmentDataList(
        metadata=links.list_meta(links.assignments(consumer_group_id, consumer_id)),
        data=[_assignment_data(links, consumer_group_id, member, tp.topic, tp.partition) for tp in member.assignment],
    )


@router.get(
    "/consumer-groups/{consumer_group_id}/consumers/{consumer_id}/assignments/{topic_name}/partitions/{partition_id}",
    response_model=m.ConsumerAssignmentData,
    summary="Get Consumer Assignment",
    tags=[TAG],
    responses=error_responses(*READ_ERRORS),
)
async def get_consumer_assignment(
    request: Request,
    scope: ClusterScope,
    consumer_group_id: GroupId,
    consumer_id: ConsumerId,
    topic_name: TopicName,
    partition_id: PartitionId,
) -> m.ConsumerAssignmentData:
    d = await _group(request, consumer_group_id, f"Consumer Group {consumer_group_id} does not exist.")
    member = _member(d, consumer_id)
    if not any(tp.topic == topic_name and tp.partition == partition_id for tp in member.assignment):
        raise not_found(f"Consumer {consumer_id} is not assigned partition {partition_id} of topic {topic_name}.")
    return _assignment_data(scope.links, consumer_group_id, member, topic_name, partition_id)


@router.get(
    "/consumer-groups/{consumer_group_id}/lags",
    response_model=m.ConsumerLagDataList,
    summary="List Consumer Lags",
    description="Every partition the group committed an offset for, the largest lag first.",
    tags=[TAG],
    responses=error_responses(*READ_ERRORS),
)
async def list_consumer_lags(
    request: Request, scope: ClusterScope, consumer_group_id: GroupId
) -> m.ConsumerLagDataList:
    _, rows = await _lag_rows(request, consumer_group_id)
    if not rows:
        raise not_found("Consumer lags not found.")
    links = scope.links
    lags = sorted((_lag_data(links, r) for r in rows), key=lambda x: (-x.lag, x.topic_name, x.partition_id))
    return m.ConsumerLagDataList(metadata=links.list_meta(links.lags(consumer_group_id)), data=lags)


@router.get(
    "/consumer-groups/{consumer_group_id}/lags/{topic_name}/partitions/{partition_id}",
    response_model=m.ConsumerLagData,
    summary="Get Consumer Lag",
    tags=[TAG],
    responses=error_responses(*READ_ERRORS),
)
async def get_consumer_lag(
    request: Request, scope: ClusterScope, consumer_group_id: GroupId, topic_name: TopicName, partition_id: PartitionId
) -> m.ConsumerLagData:
    _, rows = await _lag_rows(request, consumer_group_id)
    for r in rows:
        if r.tp.topic == topic_name and r.tp.partition == partition_id:
            return _lag_data(scope.links, r)
    raise not_found(f"Consumer lag of partition {partition_id} of topic {topic_name} could not be found.")


@router.get(
    "/consumer-groups/{consumer_group_id}/lag-summary",
    response_model=m.ConsumerGroupLagSummaryData,
    summary="Get Consumer Group Lag Summary",
    description="The largest lag of the group's partitions (the first of them, by topic and partition) and the total.",
    tags=[TAG],
    responses=error_responses(*READ_ERRORS),
)
async def get_consumer_group_lag_summary(
    request: Request, scope: ClusterScope, consumer_group_id: GroupId
) -> m.ConsumerGroupLagSummaryData:
    _, rows = await _lag_rows(request, consumer_group_id)
    if not rows:
        raise not_found("Consumer lags not found.")
    top = max(sorted(rows, key=lambda r: r.tp), key=lambda r: r.rest_lag)  # the first of the largest
    links = scope.links
    consumer_id = top.member.member_id if top.member else ""
    url = f"{links.consumer_group(consumer_group_id)}/lag-summary"
    return m.ConsumerGroupLagSummaryData(
        metadata=links.meta(url, f"{links.crn_group(consumer_group_id)}/lag-summary"),
        cluster_id=links.cluster_id,
        consumer_group_id=consumer_group_id,
        max_lag_consumer_id=consumer_id,
        max_lag_instance_id=top.member.instance_id if top.member else None,
        max_lag_client_id=top.member.client_id if top.member else "",
        max_lag_topic_name=top.tp.topic,
        max_lag_partition_id=top.tp.partition,
        max_lag=top.rest_lag,
        total_lag=sum(r.rest_lag for r in rows),
        max_lag_consumer=links.rel(links.consumer(consumer_group_id, consumer_id)),
        max_lag_partition=links.rel(links.partition(top.tp.topic, top.tp.partition)),
    )
