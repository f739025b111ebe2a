"""`create_app(ctx)`: the FastAPI application every controller and broker serves.

Routes follow the Confluent REST Proxy v3 admin API under ``/v3/clusters`` (cluster,
brokers, topics, topic configs, partitions, replicas, read-only reassignments), plus
pykraft's extensions under the same tree (``quorum/status``, ``quorum/replication``,
``elect-leader`` and ``elect-leaders``). Reads come from ``ctx.image()``; writes build the
controller's typed request and ``await ctx.admin(...)``.

Every error is ``{"error_code": N, "message": "..."}``: schema errors 422/422, a body that
is not JSON 400/400, unknown paths 404/404 and wrong methods 405/405, Kafka errors as
`api.rest.errors` maps them, no reachable controller 503/50302.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from api.context import NodeContext
from api.rest import routes_cluster, routes_configs, routes_groups, routes_records, routes_topics
from api.rest.common import error_response
from api.rest.errors import KAFKA_ERROR, ApiError

log = logging.getLogger(__name__)

API_VERSION = "3.0.0"

_HTTP_REASONS = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    406: "Not Acceptable",
    413: "Payload Too Large",
    415: "Unsupported Media Type",
    422: "Unprocessable Entity",
    429: "Too Many Requests",
}

_MAX_REPORTED_ERRORS = 5
_HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE"})


def _loc(loc: Any) -> str:
    parts = [str(p) for p in loc] if isinstance(loc, list | tuple) else [str(loc)]
    return ".".join(parts)


def validation_message(errors: list[Any]) -> str:
    """The 422 message: ``Request validation failed: body.partitions_count: Input should be ...; ...``."""
    shown = []
    for error in errors[:_MAX_REPORTED_ERRORS]:
        if isinstance(error, dict):
            shown.append(f"{_loc(error.get('loc', ()))}: {error.get('msg', 'invalid')}")
        else:
            shown.append(str(error))
    more = len(errors) - len(shown)
    text = "; ".join(shown) + (f"; and {more} more" if more > 0 else "")
    return f"Request validation failed: {text}"


async def _api_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc)


async def _validation_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    if any(isinstance(e, dict) and e.get("type") == "json_invalid" for e in errors):
        return error_response(ApiError(400, 400, "Request body is not valid JSON."))
    if isinstance(exc.body, bytes | bytearray) and exc.body:
        # FastAPI parses a body as JSON only when the Content-Type says JSON.
        return error_response(ApiError(415, 415, "HTTP 415 Unsupported Media Type: send the body as application/json."))
    return error_response(ApiError(422, 422, validation_message(errors)))


_PATH_PARAM = re.compile(r"(\{[^/{}]+\})")


def _path_methods(app: FastAPI) -> list[tuple[re.Pattern[str], frozenset[str]]]:
    """Each documented path as a regex, with its methods (GET implies HEAD, as Starlette serves it)."""
    cached: list[tuple[re.Pattern[str], frozenset[str]]] | None = getattr(app.state, "path_methods", None)
    if cached is None:
        cached = []
        for template, item in app.openapi().get("paths", {}).items():
            methods = {m.upper() for m in item if m.upper() in _HTTP_METHODS}
            if "GET" in methods:
                methods.add("HEAD")
            parts = _PATH_PARAM.split(template)
            pattern = re.compile("".join("[^/]+" if i % 2 else re.escape(part) for i, part in enumerate(parts)) + "$")
            cached.append((pattern, frozenset(methods)))
        app.state.path_methods = cached
    return cached


def _allowed_methods(request: Request) -> str:
    """Every method served at the request's path (FastAPI has one route per method, so
    Starlette's own ``Allow`` would name only one)."""
    path = request.url.path
    methods: set[str] = set()
    for pattern, allowed in _path_methods(request.app):
        if pattern.match(path):
            methods |= allowed
    return ", ".join(sorted(methods))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    code = exc.status_code
    reason = _HTTP_REASONS.get(code, "Error")
    detail = exc.detail if isinstance(exc.detail, str) and exc.detail != reason else None
    message = f"HTTP {code} {reason}" + (f": {detail}" if detail else "")
    headers = dict(exc.headers) if exc.headers else {}
    if code == 405:
        headers["Allow"] = _allowed_methods(request)
    return error_response(ApiError(code, code, message), headers=headers or None)


async def _unexpected(_: Request, exc: Exception) -> Response:
    log.exception("unhandled error in the REST API", exc_info=exc)
    return error_response(ApiError(500, KAFKA_ERROR, f"Internal error: {type(exc).__name__}."))


def create_app(ctx: NodeContext) -> FastAPI:
    """The REST admin API of the node `ctx` describes."""
    app = FastAPI(
        title="pykraft REST Admin API",
        version=API_VERSION,
        description=(
            "Confluent REST Proxy v3 compatible admin API of a pykraft cluster (KRaft-style Kafka), "
            "with pykraft extensions for the metadata quorum and leader elections."
        ),
        docs_url="/docs",
        redoc_url=None,
        # No OpenTelemetry here: with it on, FastAPI asks the global tracer, meter and
        # logger providers on every request whether one is configured (5 of the 45 us a
        # configs:alter write spent in the app).
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.state.ctx = ctx
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
    # The routes go straight into the app's router (the same routes, paths and OpenAPI
    # document as include_router): FastAPI matches an included router's routes through a
    # per-request wrapper that cost a quarter of the framework's time per request.
    for module in (routes_cluster, routes_configs, routes_topics, routes_records, routes_groups):
        app.router.routes.extend(module.router.routes)
    _document_cluster_id(app, ctx.cluster_id)
    return app


def _document_cluster_id(app: FastAPI, cluster_id: str) -> None:
    """Give every ``cluster_id`` parameter this node's cluster id as its example."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = generate()
            for path_item in document.get("paths", {}).values():
                for operation in path_item.values():
                    for parameter in operation.get("parameters", []) if isinstance(operation, dict) else []:
                        if parameter.get("name") == "cluster_id" and parameter.get("in") == "path":
                            parameter["example"] = cluster_id
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
