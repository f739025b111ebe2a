"""What every route shares: the request scope (node context, image, links), the call to the
active controller with its failure mapping, and the OpenAPI error responses."""

from __future__ import annotations

import json
import logging
from typing import Annotated, Any, TypeVar, cast

from fastapi import Depends, Path, Request
from fastapi.responses import JSONResponse

from api.context import NodeContext, NotAvailableError
from api.rest.errors import BROKER_NOT_AVAILABLE, KAFKA_ERROR, KAFKA_RETRIABLE_ERROR, ApiError, not_found
from api.rest.models import INT32_MAX, INT32_MIN, ErrorBody
from api.rest.views import Links
from quorum.controller.requests import AdminRequest, AdminResponse
from quorum.metadata.image import MetadataImage, PartitionRegistration, TopicImage

log = logging.getLogger(__name__)

T = TypeVar("T", bound=AdminResponse)


class ErrorResponse(JSONResponse):
    """An error body, rendered ASCII-only so that no string in it can fail to encode."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


def error_response(error: ApiError, headers: dict[str, str] | None = None) -> ErrorResponse:
    return ErrorResponse(error.body(), status_code=error.status, headers=headers)


# ---------------------------------------------------------------- the scope of one request


def node_context(request: Request) -> NodeContext:
    return cast(NodeContext, request.app.state.ctx)


class Scope:
    """One request under ``/v3/clusters/{cluster_id}``: the node, its image (read once), links."""

    def __init__(self, request: Request, ctx: NodeContext) -> None:
        self.ctx = ctx
        self._request = request
        self._links: Links | None = None
        self._image: MetadataImage | None = None

    @property
    def links(self) -> Links:
        """Built on first use: a write answered 204 names no URL, and the request's base URL
        costs a URL parse."""
        if self._links is None:
            self._links = Links(str(self._request.base_url), self.ctx.cluster_id)
        return self._links

    @property
    def image(self) -> MetadataImage:
        if self._image is None:
            self._image = self.ctx.image()
        return self._image

    async def fresh_image(self) -> MetadataImage:
        """The image again, once it holds the writes this node answered (this request's too)."""
        await self.ctx.settle()
        self._image = None
        return self.image

    def topic(self, name: str) -> TopicImage:
        topic = self.image.topic_by_name(name)
        if topic is None:
            raise unknown_topic(name)
        return topic

    def partition(self, topic: str, partition_id: int) -> tuple[TopicImage, PartitionRegistration]:
        image = self.topic(topic)
        reg = image.partition(partition_id)
        if reg is None:
            raise not_found(f"Partition {partition_id} of topic {topic} cannot be found.", 40402)
        return image, reg

    async def admin(self, request: AdminRequest, expect: type[T]) -> T:
        return await call_admin(self.ctx, request, expect)


def unknown_topic(name: str) -> ApiError:
    del name  # the REST Proxy's message does not name the topic
    return not_found("This server does not host this topic-partition.", 40403)


async def write_scope(
    request: Request,
    cluster_id: Annotated[str, Path(description="The Kafka cluster ID.")],
) -> Scope:
    """The scope of a write that reads nothing before it calls the controller: its image is
    not settled (reading it needs `Scope.fresh_image`)."""
    ctx = node_context(request)
    if cluster_id != ctx.cluster_id:
        raise not_found(f"Cluster {cluster_id} cannot be found.")
    return Scope(request, ctx)


async def cluster_scope(
    request: Request,
    cluster_id: Annotated[str, Path(description="The Kafka cluster ID.")],
) -> Scope:
    """The scope of any other request: its image holds every write answered on this node
    before the request (read-your-writes)."""
    scope = await write_scope(request, cluster_id)
    await scope.ctx.settle()
    return scope


ClusterScope = Annotated[Scope, Depends(cluster_scope)]
WriteScope = Annotated[Scope, Depends(write_scope)]
TopicName = Annotated[str, Path(description="The topic name.")]
PartitionId = Annotated[int, Path(description="The partition ID.", ge=INT32_MIN, le=INT32_MAX)]
BrokerId = Annotated[int, Path(description="The broker ID.", ge=INT32_MIN, le=INT32_MAX)]
ConfigName = Annotated[str, Path(description="The configuration parameter name.")]


# ---------------------------------------------------------------- the active controller


async def call_admin(ctx: NodeContext, request: AdminRequest, expect: type[T]) -> T:
    """Run a write on the active controller; failures to reach it become REST errors."""
    try:
        response = await ctx.admin(request)
    except NotAvailableError as exc:
        detail = str(exc)
        raise ApiError(
            503, BROKER_NOT_AVAILABLE, "No active controller is available" + (f": {detail}" if detail else ".")
        ) from exc
    except TimeoutError as exc:
        raise ApiError(500, KAFKA_RETRIABLE_ERROR, "The request timed out.") from exc
    except ApiError:
        raise
    except Exception as exc:
        log.exception("admin request %s failed", type(request).__name__)
        raise ApiError(500, KAFKA_ERROR, f"The controller request failed: {type(exc).__name__}.") from exc
    if not isinstance(response, expect):
        raise ApiError(
            500, KAFKA_ERROR, f"The controller answered {type(response).__name__} instead of {expect.__name__}."
        )
    return response


# ---------------------------------------------------------------- OpenAPI error responses

_DESCRIPTIONS: dict[int | str, str] = {
    400: "Bad Request: Kafka rejected the request (error_code 40002), or the body is not JSON (400).",
    401: "Unauthorized (40101).",
    403: "Forbidden (40301).",
    404: "Not Found: unknown cluster, broker, config or reassignment (404), topic (40403), partition (40402).",
    413: "Payload Too Large.",
    415: "Unsupported Media Type: the body is not sent as application/json (error_code 415).",
    422: "Unprocessable Entity: the request does not match the schema (error_code 422).",
    429: "Too Many Requests: the controller's mutation quota (42901).",
    "5XX": (
        "Server error: no active controller (503, error_code 50302); a retriable Kafka error such as a "
        "timeout (500, 50003); an unexpected failure (500, 50002)."
    ),
}

READ_ERRORS = (404, 422)
WRITE_ERRORS = (400, 401, 403, 404, 422, 429)
BODY_ERRORS = (*WRITE_ERRORS, 415)


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for the given error statuses, plus ``5XX``; all with the Error body."""
    out: dict[int | str, dict[str, Any]] = {
        code: {"model": ErrorBody, "description": _DESCRIPTIONS[code]} for code in codes
    }
    out["5XX"] = {"model": ErrorBody, "description": _DESCRIPTIONS["5XX"]}
    return out
