"""Topic configs: describe (from this node's image and broker config) and alter (on the controller)."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from api.rest import models as m
from api.rest import views
from api.rest.common import (
    BODY_ERRORS,
    READ_ERRORS,
    WRITE_ERRORS,
    ClusterScope,
    ConfigName,
    Scope,
    TopicName,
    WriteScope,
    error_responses,
)
from api.rest.errors import KAFKA_ERROR, ApiError, bad_request, kafka_error, not_found
from api.rest.lean_route import LeanRoute
from quorum.controller.requests import (
    AlterConfigOp,
    AlterConfigOpType,
    AlterConfigsResource,
    ConfigResourceType,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from quorum.controller.topic_configs import TOPIC_CONFIGS

router = APIRouter(prefix="/v3/clusters/{cluster_id}", route_class=LeanRoute)

_OPS = {
    None: AlterConfigOpType.SET,
    "SET": AlterConfigOpType.SET,
    "DELETE": AlterConfigOpType.DELETE,
    "APPEND": AlterConfigOpType.APPEND,
    "SUBTRACT": AlterConfigOpType.SUBTRACT,
}


def _config_view(scope: Scope) -> views.ConfigView:
    return views.ConfigView(scope.image, scope.ctx.node_id, scope.ctx.broker_defaults())


def _unknown_config(scope: Scope, topic: str, name: str) -> ApiError:
    """404 for a config name Kafka does not define (after the topic's own 404, as the REST Proxy)."""
    scope.topic(topic)
    return not_found(f"Config {name} cannot be found for TOPIC {topic} in cluster {scope.links.cluster_id}.")


async def _alter(scope: Scope, topic: str, ops: tuple[AlterConfigOp, ...], validate_only: bool = False) -> None:
    for op in ops:
        if op.name not in TOPIC_CONFIGS:
            await scope.fresh_image()  # the 404 names the topic if this node does not know it
            raise _unknown_config(scope, topic, op.name)
    answer = await scope.admin(
        IncrementalAlterConfigsRequest(
            resources=(AlterConfigsResource(ConfigResourceType.TOPIC, topic, ops),), validate_only=validate_only
        ),
        IncrementalAlterConfigsResponse,
    )
    for result in answer.resources:
        if result.resource_type == ConfigResourceType.TOPIC and result.resource_name == topic:
            if result.error_code:
                raise kafka_error(result.error_code, result.message)
            return
    raise ApiError(500, KAFKA_ERROR, f"The controller's answer has no result for topic {topic}.")


@router.get(
    "/topics/-/configs",
    response_model=m.TopicConfigDataList,
    summary="List Configs of All Topics",
    tags=["Configs (v3)"],
    responses=error_responses(*READ_ERRORS),
)
async def list_all_topic_configs(scope: ClusterScope) -> m.TopicConfigDataList:
    view = _config_view(scope)
    image = scope.image
    data = [
        entry
        for name in sorted(image.topics.by_name)
        for entry in view.all(scope.links, name, image.topic_config(name))
    ]
    return m.TopicConfigDataList(metadata=scope.links.list_meta(f"{scope.links.topics()}/-/configs"), data=data)


@router.get(
    "/topics/{topic_name}/configs",
    response_model=m.TopicConfigDataList,
    summary="List Topic Configs",
    tags=["Configs (v3)"],
    responses=error_responses(*READ_ERRORS),
)
async def list_topic_configs(scope: ClusterScope, topic_name: TopicName) -> m.TopicConfigDataList:
    scope.topic(topic_name)
    data = _config_view(scope).all(scope.links, topic_name, scope.image.topic_config(topic_name))
    return m.TopicConfigDataList(metadata=scope.links.list_meta(scope.links.configs(topic_name)), data=data)


@router.post(
    "/topics/{topic_name}/configs:alter",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    summary="Batch Alter Topic Configs",
    description=(
        "Set or delete (reset) several topic configs at once (IncrementalAlterConfigs); an omitted or null "
        "`operation` is SET. With `validate_only: true` nothing changes. 204 in both modes."
    ),
    tags=["Configs (v3)"],
    responses={204: {"description": "The configs were altered (or would be)."}, **error_responses(*BODY_ERRORS)},
)
async def alter_topic_configs(scope: WriteScope, topic_name: TopicName, body: m.AlterConfigBatchBody) -> Response:
    seen: set[str] = set()
    ops: list[AlterConfigOp] = []
    for entry in body.data:
        if entry.name in seen:
            raise bad_request(f"Error due to duplicate config keys: {entry.name}")
        seen.add(entry.name)
        op = _OPS[entry.operation]
        ops.append(AlterConfigOp(entry.name, op, None if op is AlterConfigOpType.DELETE else entry.value))
    await _alter(scope, topic_name, tuple(ops), body.validate_only)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get(
    "/topics/{topic_name}/configs/{name}",
    response_model=m.TopicConfigData,
    summary="Get Topic Config",
    tags=["Configs (v3)"],
    responses=error_responses(*READ_ERRORS),
)
async def get_topic_config(scope: ClusterScope, topic_name: TopicName, name: ConfigName) -> m.TopicConfigData:
    scope.topic(topic_name)
    if name not in TOPIC_CONFIGS:
        raise _unknown_config(scope, topic_name, name)
    return _config_view(scope).data(scope.links, topic_name, name, scope.image.topic_config(topic_name))


@router.put(
    "/topics/{topic_name}/configs/{name}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    summary="Update Topic Config",
    tags=["Configs (v3)"],
    responses={204: {"description": "The config was set."}, **error_responses(*BODY_ERRORS)},
)
async def update_topic_config(
    scope: WriteScope, topic_name: TopicName, name: ConfigName, body: m.UpdateConfigBody
) -> Response:
    await _alter(scope, topic_name, (AlterConfigOp(name, AlterConfigOpType.SET, body.value),))
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.delete(
    "/topics/{topic_name}/configs/{name}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    summary="Reset Topic Config",
    description="Remove the topic's own value, so that the broker's (or Kafka's default) applies again.",
    tags=["Configs (v3)"],
    responses={204: {"description": "The config was reset."}, **error_responses(*WRITE_ERRORS)},
)
async def reset_topic_config(scope: WriteScope, topic_name: TopicName, name: ConfigName) -> Response:
    await _alter(scope, topic_name, (AlterConfigOp(name, AlterConfigOpType.DELETE),))
    return Response(status_code=status.HTTP_204_NO_CONTENT)
