"""Topics, partitions, replicas, reassignments (read-only) and leader elections."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Annotated, TypeVar

from fastapi import APIRouter, Body, Response, status

from api.rest import models as m
from api.rest import views
from api.rest.common import (
    BODY_ERRORS,
    READ_ERRORS,
    WRITE_ERRORS,
    BrokerId,
    ClusterScope,
    PartitionId,
    Scope,
    TopicName,
    error_responses,
    unknown_topic,
)
from api.rest.errors import KAFKA_ERROR, ApiError, bad_request, kafka_error, kafka_error_name
from api.rest.lean_route import LeanRoute
from quorum.controller.requests import (
    CreatableTopic,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    ElectionType,
    ElectLeaderResult,
    ElectLeadersRequest,
    ElectLeadersResponse,
    PartitionsIncrease,
)
from quorum.metadata.records import kafka_uuid_string

router = APIRouter(prefix="/v3/clusters/{cluster_id}", route_class=LeanRoute)

R = TypeVar("R")

ELECTION_NOT_NEEDED = 84


def _only(results: Iterable[R], match: Callable[[R], bool], what: str) -> R:
    """The controller's result for the one item a request named."""
    for result in results:
        if match(result):
            return result
    raise ApiError(500, KAFKA_ERROR, f"The controller's answer has no result for {what}.")


# ---------------------------------------------------------------- topics


@router.get(
    "/topics",
    response_model=m.TopicDataList,
    summary="List Topics",
    tags=["Topic (v3)"],
    responses=error_responses(*READ_ERRORS),
)
async def list_topics(scope: ClusterScope) -> m.TopicDataList:
    topics = scope.image.topics.by_name
    return m.TopicDataList(
        metadata=scope.links.list_meta(scope.links.topics()),
        data=[views.topic_from_image(scope.links, topics[name]) for name in sorted(topics)],
    )


def _assignments(body: m.CreateTopicBody) -> dict[int, tuple[int, ...]] | None:
    raw = body.replicas_assignments
    if not raw:
        return None
    pairs = (
        [(int(key), ids) for key, ids in raw.items()]
        if isinstance(raw, dict)
        else [(entry.partition_id, entry.broker_ids) for entry in raw]
    )
    out: dict[int, tuple[int, ...]] = {}
    for partition, ids in pairs:
        if partition in out:
            raise bad_request(f"Found multiple manual partition assignments for partition {partition}.")
        out[partition] = tuple(ids)
    return out


def _create_configs(body: m.CreateTopicBody) -> dict[str, str]:
    configs: dict[str, str] = {}
    nulls: list[str] = []
    for entry in body.configs:
        if entry.name in configs or entry.name in nulls:
            raise bad_request(f"Duplicate topic config name: {entry.name}")
        if entry.value is None:
            nulls.append(entry.name)
        else:
            configs[entry.name] = entry.value
    if nulls:
        raise bad_request("Null value not supported for topic configs: " + ",".join(nulls))
    return configs


@router.post(
    "/topics",
    response_model=m.TopicData,
    status_code=status.HTTP_201_CREATED,
    summary="Create Topic",
    description=(
        "Create a topic (201, with a Location header), or with `validate_only: true` check that it "
        "could be created (200). `replicas_assignments` is a map of partition id (a string) to broker ids, "
        "or a list of `{partition_id, broker_ids}`; when given, `partitions_count` and "
        "`replication_factor` are ignored, as in the REST Proxy."
    ),
    tags=["Topic (v3)"],
    responses={
        200: {"model": m.TopicData, "description": "validate_only: the topic could be created."},
        201: {
            "description": "The topic was created.",
            "headers": {"Location": {"description": "The new topic's URL.", "schema": {"type": "string"}}},
        },
        **error_responses(*BODY_ERRORS),
    },
)
async def create_topic(scope: ClusterScope, body: m.CreateTopicBody, response: Response) -> m.TopicData:
    name = body.topic_name
    configs = _create_configs(body)
    assignments = _assignments(body)
    creatable = CreatableTopic(
        name=name,
        num_partitions=-1 if assignments is not None or body.partitions_count is None else body.partitions_count,
        replication_factor=(
            -1 if assignments is not None or body.replication_factor is None else body.replication_factor
        ),
        assignments=assignments,
        configs=configs,
    )
    answer = await scope.admin(
        CreateTopicsRequest(topics=(creatable,), validate_only=body.validate_only), CreateTopicsResponse
    )
    result = _only(answer.topics, lambda r: r.name == name, f"topic {name}")
    if result.error_code:
        raise kafka_error(result.error_code, result.message)
    created = None if body.validate_only else (await scope.fresh_image()).topic_by_name(name)
    if created is not None:
        data = views.topic_from_image(scope.links, created)
    else:
        if assignments is not None:
            default_count = len(assignments)
            default_rf = len(next(iter(assignments.values()), ()))
        else:
            default_count = max(body.partitions_count or 0, 0)
            default_rf = max(body.replication_factor or 0, 0)
        data = views.topic_data(
            scope.links,
            name,
            result.num_partitions if result.num_partitions >= 0 else default_count,
            result.replication_factor if result.replication_factor >= 0 else default_rf,
            kafka_uuid_string(result.topic_id) if result.topic_id is not None else None,
        )
    if body.validate_only:
        response.status_code = status.HTTP_200_OK
    else:
        response.headers["Location"] = data.metadata.self_
    return data


@router.get(
    "/topics/{topic_name}",
    response_model=m.TopicData,
    summary="Get Topic",
    tags=["Topic (v3)"],
    responses=error_responses(*READ_ERRORS),
)
async def get_topic(scope: ClusterScope, topic_name: TopicName) -> m.TopicData:
    return views.topic_from_image(scope.links, scope.topic(topic_name))


@router.patch(
    "/topics/{topic_name}",
    response_model=m.TopicData,
    summary="Update Partition Count",
    description="Increase the number of partitions of a topic (CreatePartitions).",
    tags=["Topic (v3)"],
    responses=error_responses(*BODY_ERRORS),
)
async def update_partition_count(
    scope: ClusterScope, topic_name: TopicName, body: m.UpdatePartitionCountBody
) -> m.TopicData:
    answer = await scope.admin(
        CreatePartitionsRequest(topics=(PartitionsIncrease(name=topic_name, count=body.partitions_count),)),
        CreatePartitionsResponse,
    )
    result = _only(answer.topics, lambda r: r.name == topic_name, f"topic {topic_name}")
    if result.error_code:
        raise kafka_error(result.error_code, result.message)
    topic = (await scope.fresh_image()).topic_by_name(topic_name)
    if topic is None:
        raise unknown_topic(topic_name)
    return views.topic_from_image(scope.links, topic)


@router.delete(
    "/topics/{topic_name}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    summary="Delete Topic",
    tags=["Topic (v3)"],
    responses={204: {"description": "The topic was deleted."}, **error_responses(*WRITE_ERRORS)},
)
async def delete_topic(scope: ClusterScope, topic_name: TopicName) -> Response:
    answer = await scope.admin(DeleteTopicsRequest(names=(topic_name,)), DeleteTopicsResponse)
    result = _only(answer.topics, lambda r: r.name == topic_name, f"topic {topic_name}")
    if result.error_code:
        raise kafka_error(result.error_code, result.message)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


# ---------------------------------------------------------------- reassignments (read-only)
# Declared before the {partition_id} routes: "-" means "every partition".


@router.get(
    "/topics/-/partitions/-/reassignment",
    response_model=m.ReassignmentDataList,
    summary="List All Replica Reassignments",
    tags=["Partition (v3)"],
    responses=error_responses(*READ_ERRORS),
)
async def list_all_reassignments(scope: ClusterScope) -> m.ReassignmentDataList:
    data = [
        views.reassignment_data(scope.links, topic.name, pid, reg)
        for topic, pid, reg in sorted(scope.image.iter_partitions(), key=lambda e: (e[0].name, e[1]))
        if views.has_reassignment(reg)
    ]
    return m.ReassignmentDataList(metadata=scope.links.list_meta(scope.links.all_reassignments()), data=data)


@router.get(
    "/topics/{topic_name}/partitions/-/reassignment",
    response_model=m.ReassignmentDataList,
    summary="List Replica Reassignments of a Topic",
    tags=["Partition (v3)"],
    responses=error_responses(*READ_ERRORS),
)
async def list_topic_reassignments(scope: ClusterScope, topic_name: TopicName) -> m.ReassignmentDataList:
    topic = scope.topic(topic_name)
    data = [
        views.reassignment_data(scope.links, topic.name, pid, topic.partitions[pid])
        for pid in sorted(topic.partitions)
        if views.has_reassignment(topic.partitions[pid])
    ]
    return m.ReassignmentDataList(
        metadata=scope.links.list_meta(scope.links.topic_reassignments(topic_name)), data=data
    )


@router.get(
    "/topics/{topic_name}/partitions/{partition_id}/reassignment",
    response_model=m.ReassignmentData,
    summary="Get Replica Reassignment",
    tags=["Partition (v3)"],
    responses=error_responses(*READ_ERRORS),
)
async def get_reassignment(scope: ClusterScope, topic_name: TopicName, partition_id: PartitionId) -> m.ReassignmentData:
    _, reg = scope.partition(topic_name, partition_id)
    if not views.has_reassignment(reg):
        raise ApiError(404, 404, f"No reassignment is in progress for partition {partition_id} of topic {topic_name}.")
    return views.reassignment_data(scope.links, topic_name, partition_id, reg)


# ---------------------------------------------------------------- partitions and replicas


@router.get(
    "/topics/{topic_name}/partitions",
    response_model=m.PartitionDataList,
    summary="List Partitions",
    tags=["Partition (v3)"],
    responses=error_responses(*READ_ERRORS),
)
async def list_partitions(scope: ClusterScope, topic_name: TopicName) -> m.PartitionDataList:
    topic = scope.topic(topic_name)
    return m.PartitionDataList(
        metadata=scope.links.list_meta(scope.links.partitions(topic_name)),
        data=[
            views.partition_data(scope.links, topic_name, pid, topic.partitions[pid])
            for pid in sorted(topic.partitions)
        ],
    )


@router.get(
    "/topics/{topic_name}/partitions/{partition_id}",
    response_model=m.PartitionData,
    summary="Get Partition",
    tags=["Partition (v3)"],
    responses=error_responses(*READ_ERRORS),
)
async def get_partition(scope: ClusterScope, topic_name: TopicName, partition_id: PartitionId) -> m.PartitionData:
    _, reg = scope.partition(topic_name, partition_id)
    return views.partition_data(scope.links, topic_name, partition_id, reg)


@router.get(
    "/topics/{topic_name}/partitions/{partition_id}/replicas",
    response_model=m.ReplicaDataList,
    summary="List Replicas",
    tags=["Replica (v3)"],
    responses=error_responses(*READ_ERRORS),
)
async def list_replicas(scope: ClusterScope, topic_name: TopicName, partition_id: PartitionId) -> m.ReplicaDataList:
    _, reg = scope.partition(topic_name, partition_id)
    return m.ReplicaDataList(
        metadata=scope.links.list_meta(scope.links.replicas(topic_name, partition_id)),
        data=[views.replica_data(scope.links, topic_name, partition_id, reg, b) for b in reg.replicas],
    )


@router.get(
    "/topics/{topic_name}/partitions/{partition_id}/replicas/{broker_id}",
    response_model=m.ReplicaData,
    summary="Get Replica",
    tags=["Replica (v3)"],
    responses=error_responses(*READ_ERRORS),
)
async def get_replica(
    scope: ClusterScope, topic_name: TopicName, partition_id: PartitionId, broker_id: BrokerId
) -> m.ReplicaData:
    _, reg = scope.partition(topic_name, partition_id)
    if broker_id not in reg.replicas:
        raise ApiError(
            404, 404, f"Replica {broker_id} of partition {partition_id} of topic {topic_name} cannot be found."
        )
    return views.replica_data(scope.links, topic_name, partition_id, reg, broker_id)


# ---------------------------------------------------------------- leader elections (pykraft)

_ELECTION_TYPES = {"PREFERRED": ElectionType.PREFERRED, "UNCLEAN": ElectionType.UNCLEAN}


def _election_data(scope: Scope, election_type: str, result: ElectLeaderResult) -> m.LeaderElectionData:
    code = result.error_code
    if code in (0, ELECTION_NOT_NEEDED):
        rest_code, message = 200, result.message
    else:
        failure = kafka_error(code, result.message)
        rest_code, message = failure.code, failure.message
    topic = scope.image.topic_by_name(result.topic)
    reg = topic.partition(result.partition) if topic is not None else None
    links = scope.links
    return m.LeaderElectionData.model_validate(
        {
            "metadata": links.meta(
                links.partition(result.topic, result.partition), links.crn_partition(result.topic, result.partition)
            ),
            "cluster_id": links.cluster_id,
            "topic_name": result.topic,
            "partition_id": result.partition,
            "election_type": election_type,
            "error_code": rest_code,
            "message": message,
            "kafka_error_code": code,
            "kafka_error_name": kafka_error_name(code),
            "leader_id": reg.leader if reg is not None and reg.leader >= 0 else None,
            "partition": links.rel(links.partition(result.topic, result.partition)),
        }
    )


async def _elect(
    scope: Scope, election_type: str, partitions: tuple[tuple[str, int], ...] | None
) -> list[ElectLeaderResult]:
    answer = await scope.admin(
        ElectLeadersRequest(election_type=_ELECTION_TYPES[election_type], partitions=partitions),
        ElectLeadersResponse,
    )
    if answer.error_code:
        raise kafka_error(answer.error_code, None)
    await scope.fresh_image()
    return list(answer.results)


@router.post(
    "/topics/{topic_name}/partitions/{partition_id}/elect-leader",
    response_model=m.LeaderElectionData,
    summary="Elect the leader of one partition (pykraft)",
    description=(
        "Run a preferred (default) or unclean leader election for the partition. 200 when the partition "
        "has the leader the election wants, newly elected or already leading (Kafka's ELECTION_NOT_NEEDED); "
        "otherwise the Kafka error mapped to HTTP (UNKNOWN_TOPIC_OR_PARTITION 404/40403, "
        "PREFERRED_LEADER_NOT_AVAILABLE and ELIGIBLE_LEADERS_NOT_AVAILABLE 500/50003, ...)."
    ),
    tags=["Leader election (pykraft)"],
    responses=error_responses(*BODY_ERRORS),
)
async def elect_partition_leader(
    scope: ClusterScope,
    topic_name: TopicName,
    partition_id: PartitionId,
    body: Annotated[m.ElectLeaderBody | None, Body()] = None,
) -> m.LeaderElectionData:
    election_type = body.election_type if body is not None else "PREFERRED"
    results = await _elect(scope, election_type, ((topic_name, partition_id),))
    result = _only(
        results,
        lambda r: r.topic == topic_name and r.partition == partition_id,
        f"partition {partition_id} of topic {topic_name}",
    )
    if result.error_code not in (0, ELECTION_NOT_NEEDED):
        raise kafka_error(result.error_code, result.message)
    return _election_data(scope, election_type, result)


@router.post(
    "/elect-leaders",
    response_model=m.LeaderElectionDataList,
    summary="Elect partition leaders (pykraft)",
    description=(
        "Run preferred or unclean leader elections for the listed partitions, or for every partition when "
        "`partitions` is omitted or null (ElectLeaders). The answer lists each partition's outcome; a "
        "partition's failure does not fail the request (see each item's error_code)."
    ),
    tags=["Leader election (pykraft)"],
    responses=error_responses(*BODY_ERRORS),
)
async def elect_leaders(scope: ClusterScope, body: m.ElectLeadersBody) -> m.LeaderElectionDataList:
    partitions = None if body.partitions is None else tuple((p.topic_name, p.partition_id) for p in body.partitions)
    results = await _elect(scope, body.election_type, partitions)
    data = [_election_data(scope, body.election_type, r) for r in sorted(results, key=lambda r: (r.topic, r.partition))]
    return m.LeaderElectionDataList(metadata=scope.links.list_meta(f"{scope.links.cluster}/elect-leaders"), data=data)
