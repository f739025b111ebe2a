"""`LeanRoute`: FastAPI routes whose request handling skips FastAPI's generic dependency
solver when the route's shape allows it, with the same validation and the same answers.

Where a REST write's CPU went (tests/perf/README.md, "Issue 12 targets, second pass"): a
`POST .../configs:alter` cost 88 us in FastAPI's request handling, of which about 74 us
were the generic machinery around the endpoint (resolving the dependency graph, looking up
every parameter kind), against 14 us for the same app stack with a plain route. On the
active controller that work runs on the event loop that also runs Raft.

A route is handled lean when it has only:
- path parameters, validated by their own FastAPI `ModelField` (the validators FastAPI
  would run, with the same locations);
- at most one JSON body parameter (not embedded), decoded with `json.loads` and validated
  by its `ModelField`, as FastAPI does for a JSON content type;
- sub-dependencies that are async functions of the request and path parameters only
  (`cluster_scope`);
- an endpoint that is a coroutine function returning a `Response` (the 204 writes), so
  nothing about response models or serialization is involved.

Anything else, and any request that does not pass these checks cleanly (another content
type, an empty or malformed body, a validation error), goes to FastAPI's own handler for
the route, which reads the body Starlette cached and gives FastAPI's answer, errors included.
So lean handling changes the cost of requests that succeed validation, never an answer.

Matching a request's path against a route is cheap to refuse too. The router tries its
routes in order, and each try costs about 1 us (the route's regex and FastAPI's scope
lookups): a `POST .../records` was tried against 30 routes before its own. A route whose
parameters cannot hold a `/` matches only paths with as many `/` as its template and that end
with the literal text after its last parameter; `LeanRoute.matches` refuses other paths
before the regex (a necessary condition of the regex, so never a different answer).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, get_type_hints

from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from starlette.convertors import FloatConvertor, IntegerConvertor, StringConvertor, UUIDConvertor
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match
from starlette.types import Scope

Handler = Callable[[Request], Coroutine[Any, Any, Response]]

_UNSUPPORTED_KINDS = (
    "query_params",
    "header_params",
    "cookie_params",
)
_UNSUPPORTED_SPECIALS = (
    "websocket_param_name",
    "http_connection_param_name",
    "response_param_name",
    "background_tasks_param_name",
    "security_scopes_param_name",
)


class _Invalid(Exception):
    """This request needs FastAPI's own handling (its answer may be an error)."""


@dataclass(frozen=True, slots=True)
class _SubDependency:
    name: str  # the endpoint's parameter it fills
    call: Callable[..., Awaitable[Any]]
    request_param: str | None
    path_params: tuple[Any, ...]  # ModelFields


@dataclass(frozen=True, slots=True)
class _Plan:
    endpoint: Callable[..., Awaitable[Response]]
    path_params: tuple[Any, ...]  # ModelFields
    body_param: Any | None  # ModelField
    sub_dependencies: tuple[_SubDependency, ...]


def _plain(dependant: Dependant, *, request_allowed: bool) -> bool:
    if any(getattr(dependant, kind) for kind in _UNSUPPORTED_KINDS):
        return False
    if any(getattr(dependant, name) is not None for name in _UNSUPPORTED_SPECIALS):
        return False
    return request_allowed or dependant.request_param_name is None


def _path_values(fields: tuple[Any, ...], request: Request) -> dict[str, Any]:
    values: dict[str, Any] = {}
    params = request.path_params
    for field in fields:
        if field.alias not in params:
            raise _Invalid
        value, errors = field.validate(params[field.alias], values, loc=("path", field.alias))
        if errors:
            raise _Invalid
        values[field.name] = value
    return values


def _is_json(content_type: str | None) -> bool:
    """FastAPI's test: an `application/json` or `application/*+json` content type."""
    if not content_type:
        return False
    media = content_type.split(";", 1)[0].strip().lower()
    kind, _, subtype = media.partition("/")
    return kind == "application" and (subtype == "json" or subtype.endswith("+json"))


def _plan_of(route: APIRoute) -> _Plan | None:
    dependant = route.dependant
    endpoint = route.endpoint
    if not inspect.iscoroutinefunction(endpoint) or not _plain(dependant, request_allowed=False):
        return None
    try:
        returns = get_type_hints(endpoint).get("return")
    except Exception:  # noqa: BLE001 - an annotation that does not resolve: not lean
        return None
    if not (isinstance(returns, type) and issubclass(returns, Response)):
        return None
    if len(dependant.body_params) > 1 or getattr(route, "_embed_body_fields", False):
        return None
    subs = []
    for sub in dependant.dependencies:
        call = sub.call
        if (
            sub.name is None
            or call is None
            or not inspect.iscoroutinefunction(call)
            or sub.dependencies
            or sub.body_params
            or not _plain(sub, request_allowed=True)
        ):
            return None
        subs.append(_SubDependency(sub.name, call, sub.request_param_name, tuple(sub.path_params)))
    body = dependant.body_params[0] if dependant.body_params else None
    return _Plan(endpoint, tuple(dependant.path_params), body, tuple(subs))


async def _arguments(plan: _Plan, request: Request) -> dict[str, Any]:
    """The endpoint's arguments; _Invalid when FastAPI's handler must take the request."""
    arguments = _path_values(plan.path_params, request)
    if plan.body_param is not None:
        if not _is_json(request.headers.get("content-type")):
            raise _Invalid
        raw = await request.body()  # cached by Starlette: FastAPI's handler can read it again
        if not raw:
            raise _Invalid
        try:
            decoded = json.loads(raw)
        except ValueError:
            raise _Invalid from None
        field = plan.body_param
        value, errors = field.validate(decoded, {}, loc=("body",))
        if errors:
            raise _Invalid
        arguments[field.name] = value
    for sub in plan.sub_dependencies:
        kwargs = _path_values(sub.path_params, request)
        if sub.request_param is not None:
            kwargs[sub.request_param] = request
        arguments[sub.name] = await sub.call(**kwargs)
    return arguments


@dataclass(frozen=True, slots=True)
class PathShape:
    """What every path a route template matches has: `slashes` `/` characters (its
    parameters hold none), and `tail` as its end (the template's text after its last
    parameter, the whole template if it has none)."""

    slashes: int
    tail: str

    def admits(self, path: str) -> bool:
        return path.endswith(self.tail) and path.count("/") == self.slashes


# Starlette's convertors whose regex matches no `/` (`path` does; custom ones may).
_NO_SLASH_CONVERTORS = (StringConvertor, IntegerConvertor, FloatConvertor, UUIDConvertor)


def path_shape(route: APIRoute) -> PathShape | None:
    """The shape of the paths `route` matches; None when a parameter may hold `/`."""
    if not all(type(c) in _NO_SLASH_CONVERTORS for c in route.param_convertors.values()):
        return None
    template = route.path_format  # the path with every parameter written `{name}`
    return PathShape(template.count("/"), template.rsplit("}", 1)[-1])


def _effective_route_context(scope: Scope) -> object:
    """The included-router context FastAPI (0.165) matches a route through, if any."""
    fastapi_scope = scope.get("fastapi")
    return fastapi_scope.get("effective_route_context") if isinstance(fastapi_scope, dict) else None


class LeanRoute(APIRoute):
    """An APIRoute handled without FastAPI's dependency solver where its shape allows it
    (see the module docstring); every other route and request is FastAPI's as usual."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        super().__init__(path, endpoint, **kwargs)
        self.shape = path_shape(self)

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        # The precheck applies to a plain match of the request's own path: not to a match
        # FastAPI resolves through an included router's context (this project includes
        # none; such a scope goes to FastAPI unchanged), nor to a path under a root_path.
        shape = self.shape
        if (
            shape is not None
            and scope["type"] == "http"
            and not scope.get("root_path")
            and not shape.admits(scope["path"])
            and _effective_route_context(scope) is None
        ):
            return Match.NONE, {}
        return super().matches(scope)

    def get_route_handler(self) -> Handler:
        standard: Handler = super().get_route_handler()
        plan = _plan_of(self)
        if plan is None:
            return standard

        async def handle(request: Request) -> Response:
            try:
                arguments = await _arguments(plan, request)
            except _Invalid:
                return await standard(request)
            return await plan.endpoint(**arguments)

        return handle

    @property
    def lean(self) -> bool:
        """Is this route handled lean (for tests and diagnostics)?"""
        return _plan_of(self) is not None
