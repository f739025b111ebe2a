"""Cluster, brokers and the KRaft quorum (a pykraft extension)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from api.context import NotAvailableError
from api.rest import models as m
from api.rest import views
from api.rest.common import (
    READ_ERRORS,
    BrokerId,
    ClusterScope,
    Scope,
    error_responses,
    log,
    node_context,
)
from api.rest.errors import BROKER_NOT_AVAILABLE, KAFKA_ERROR, KAFKA_RETRIABLE_ERROR, ApiError, not_found
from api.rest.lean_route import LeanRoute
from quorum.raft.describe import QuorumDescription

router = APIRouter(prefix="/v3/clusters", route_class=LeanRoute)


@router.get(
    "",
    response_model=m.ClusterDataList,
    summary="List Clusters",
    tags=["Cluster (v3)"],
    responses=error_responses(),
)
async def list_clusters(request: Request) -> m.ClusterDataList:
    ctx = node_context(request)
    links = views.Links(str(request.base_url), ctx.cluster_id)
    return m.ClusterDataList(metadata=links.list_meta(links.clusters()), data=[views.cluster_data(links)])


@router.get(
    "/{cluster_id}",
    response_model=m.ClusterData,
    summary="Get Cluster",
    tags=["Cluster (v3)"],
    responses=error_responses(*READ_ERRORS),
)
async def get_cluster(scope: ClusterScope) -> m.ClusterData:
    return views.cluster_data(scope.links)


# ---------------------------------------------------------------- brokers


@router.get(
    "/{cluster_id}/brokers",
    response_model=m.BrokerDataList,
    summary="List Brokers",
    tags=["Broker (v3)"],
    responses=error_responses(*READ_ERRORS),
)
async def list_brokers(scope: ClusterScope) -> m.BrokerDataList:
    brokers = scope.image.cluster.brokers
    return m.BrokerDataList(
        metadata=scope.links.list_meta(scope.links.brokers()),
        data=[views.broker_data(scope.links, brokers[b]) for b in sorted(brokers)],
    )


def _broker(scope: Scope, broker_id: int) -> None:
    if scope.image.broker(broker_id) is None:
        raise not_found(f"Broker {broker_id} cannot be found.")


@router.get(
    "/{cluster_id}/brokers/{broker_id}",
    response_model=m.BrokerData,
    summary="Get Broker",
    tags=["Broker (v3)"],
    responses=error_responses(*READ_ERRORS),
)
async def get_broker(scope: ClusterScope, broker_id: BrokerId) -> m.BrokerData:
    broker = scope.image.broker(broker_id)
    if broker is None:
        raise not_found(f"Broker {broker_id} cannot be found.")
    return views.broker_data(scope.links, broker)


@router.get(
    "/{cluster_id}/brokers/{broker_id}/partition-replicas",
    response_model=m.ReplicaDataList,
    summary="List Replicas by Broker",
    tags=["Replica (v3)"],
    responses=error_responses(*READ_ERRORS),
)
async def list_broker_replicas(scope: ClusterScope, broker_id: BrokerId) -> m.ReplicaDataList:
    _broker(scope, broker_id)
    data = [
        views.replica_data(scope.links, topic.name, pid, reg, broker_id)
        for topic, pid, reg in sorted(scope.image.iter_partitions(), key=lambda e: (e[0].name, e[1]))
        if broker_id in reg.replicas
    ]
    return m.ReplicaDataList(
        metadata=scope.links.list_meta(f"{scope.links.broker(broker_id)}/partition-replicas"), data=data
    )


# ---------------------------------------------------------------- the quorum (pykraft)


async def _describe(scope: Scope) -> QuorumDescription:
    try:
        return await scope.ctx.describe_quorum()
    except NotAvailableError as exc:
        detail = str(exc)
        raise ApiError(
            503,
            BROKER_NOT_AVAILABLE,
            "The metadata quorum has no reachable leader" + (f": {detail}" if detail else "."),
        ) from exc
    except TimeoutError as exc:
        raise ApiError(500, KAFKA_RETRIABLE_ERROR, "The request timed out.") from exc
    except Exception as exc:
        log.exception("describe_quorum failed")
        raise ApiError(500, KAFKA_ERROR, f"DescribeQuorum failed: {type(exc).__name__}.") from exc


@router.get(
    "/{cluster_id}/quorum/status",
    response_model=m.QuorumStatusData,
    summary="Describe the metadata quorum (kafka-metadata-quorum describe --status)",
    tags=["Quorum (pykraft)"],
    responses=error_responses(*READ_ERRORS),
)
async def quorum_status(scope: ClusterScope) -> m.QuorumStatusData:
    return views.quorum_status(scope.links, await _describe(scope))


@router.get(
    "/{cluster_id}/quorum/replication",
    response_model=m.QuorumReplicaDataList,
    summary="Quorum replication state (kafka-metadata-quorum describe --replication)",
    tags=["Quorum (pykraft)"],
    responses=error_responses(*READ_ERRORS),
)
async def quorum_replication(scope: ClusterScope) -> m.QuorumReplicaDataList:
    return views.quorum_replication(scope.links, await _describe(scope))
