"""LeanRoute changes the cost of a request, never its answer: every request gets, from the
app as built, the status, body and headers FastAPI's own handler gives, and the controller
sees the same requests. Checked differentially under hypothesis against a copy of the app
whose lean routes use FastAPI's handler (valid and invalid bodies, content types, path
parameters, cluster ids, unknown configs and topics, controller errors)."""

from __future__ import annotations

import copy
import json
from typing import Any

import httpx
from fastapi import FastAPI
from fastapi.routing import APIRoute, request_response
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from rest_api_support import (  # type: ignore[import-not-found,unused-ignore]  # a sibling module on pytest's path
    CLUSTER_ID,
    Client,
    FakeNode,
    failing_answer,
)
from starlette.responses import Response
from starlette.routing import Match

from api.rest import create_app
from api.rest.lean_route import LeanRoute
from quorum.controller.errors import ErrorCode
from tests.scale import examples


def _standard_twin(app: FastAPI) -> FastAPI:
    """`app` with each lean route replaced by a copy that FastAPI's own handler serves."""
    routes = []
    for route in app.router.routes:
        if isinstance(route, LeanRoute):
            twin = copy.copy(route)
            twin.app = request_response(APIRoute.get_route_handler(twin))
            routes.append(twin)
        else:
            routes.append(route)
    app.router.routes[:] = routes
    return app


def _apps() -> tuple[Client, Client, FastAPI, FastAPI]:
    lean_app, standard_app = create_app(FakeNode()), _standard_twin(create_app(FakeNode()))
    return Client(lean_app), Client(standard_app), lean_app, standard_app


LEAN, STANDARD, LEAN_APP, STANDARD_APP = _apps()


def test_the_write_routes_answering_204_are_lean() -> None:
    lean = sorted(
        (sorted(r.methods)[0], r.path) for r in LEAN_APP.router.routes if isinstance(r, LeanRoute) and r.lean
    )
    prefix = "/v3/clusters/{cluster_id}/topics/{topic_name}"
    assert lean == [
        ("DELETE", prefix),
        ("DELETE", prefix + "/configs/{name}"),
        ("POST", prefix + "/configs:alter"),
        ("PUT", prefix + "/configs/{name}"),
    ]
    twins = {(sorted(r.methods)[0], r.path): r.app for r in STANDARD_APP.router.routes if isinstance(r, LeanRoute)}
    for route in LEAN_APP.router.routes:
        if isinstance(route, LeanRoute) and route.lean:
            assert twins[(sorted(route.methods)[0], route.path)] is not route.app  # FastAPI's handler there


_json_scalars = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=12)
_json = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
_config_names = st.sampled_from(["retention.ms", "cleanup.policy", "segment.bytes", "no.such.config", ""])
_entry = st.fixed_dictionaries(
    {"name": _config_names},
    optional={
        "value": st.none() | st.text(max_size=8) | st.integers(0, 10**9) | st.sampled_from(["1000", "compact"]),
        "operation": st.sampled_from(["SET", "DELETE", "APPEND", "SUBTRACT", "set", "bogus"]) | st.none(),
    },
)
_alter_body = st.fixed_dictionaries(
    {"data": st.lists(_entry, max_size=3)}, optional={"validate_only": st.booleans() | st.text(max_size=3)}
)
_update_body = st.fixed_dictionaries({}, optional={"value": st.none() | st.text(max_size=8) | st.integers()})


@st.composite
def _requests(draw: st.DrawFn) -> dict[str, Any]:
    cluster = draw(st.sampled_from([CLUSTER_ID, CLUSTER_ID, "other-cluster"]))
    topic = draw(st.sampled_from(["orders", "events", "missing", "__consumer_offsets", "a%20b", "x" * 300]))
    config = draw(_config_names.filter(bool))
    kind = draw(st.sampled_from(["alter", "update", "reset", "delete"]))
    base = f"/v3/clusters/{cluster}/topics/{topic}"
    method, path, body_strategy = {
        "alter": ("POST", base + "/configs:alter", _alter_body | _json),
        "update": ("PUT", f"{base}/configs/{config}", _update_body | _json),
        "reset": ("DELETE", f"{base}/configs/{config}", st.none()),
        "delete": ("DELETE", base, st.none()),
    }[kind]
    body = draw(body_strategy)
    raw: bytes | None
    shape = draw(st.sampled_from(["json", "json", "json", "bytes", "empty", "none"]))
    if shape == "json":
        raw = json.dumps(body).encode()
    elif shape == "bytes":
        raw = draw(st.binary(max_size=20)) or b"{"
    elif shape == "empty":
        raw = b""
    else:
        raw = None
    content_type = draw(
        st.sampled_from(
            ["application/json", "application/json; charset=utf-8", "application/vnd.x+json", "text/plain", None]
        )
    )
    failure = draw(st.sampled_from([None, None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_CONFIG]))
    return {"method": method, "path": path, "raw": raw, "content_type": content_type, "failure": failure}


def _send(client: Client, node: FakeNode, req: dict[str, Any]) -> httpx.Response:
    client.app.state.ctx = node
    headers = {} if req["content_type"] is None else {"content-type": req["content_type"]}
    return client.request(req["method"], req["path"], content=req["raw"], headers=headers)


def _node(failure: ErrorCode | None) -> FakeNode:
    return FakeNode() if failure is None else FakeNode(answer=failing_answer(failure, "refused"))


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_requests())
def test_lean_answers_are_fastapis_answers(req: dict[str, Any]) -> None:
    lean_node, standard_node = _node(req["failure"]), _node(req["failure"])
    lean, standard = _send(LEAN, lean_node, req), _send(STANDARD, standard_node, req)
    assert lean.status_code == standard.status_code, (lean.text, standard.text)
    assert lean.content == standard.content
    for header in ("content-type", "content-length", "location"):
        assert lean.headers.get(header) == standard.headers.get(header)
    assert lean_node.requests == standard_node.requests
    event(f"{req['method']} {lean.status_code}" + (" reached the controller" if lean_node.requests else ""))


# Route matching: LeanRoute refuses a path by its shape before the regex, and must answer
# exactly what APIRoute.matches answers, for every route of the app and any path.
_ROUTES = [r for r in LEAN_APP.router.routes if isinstance(r, LeanRoute)]
_segment = st.sampled_from(["t1", "configs", "configs:alter", "records", "x:y", "%2F", "1", "-1", "1.5", "{name}"])
_odd_segment = st.sampled_from(["", "a/b", "/", "configs/x"]) | st.text(alphabet="ab/:{}.", max_size=5)


@st.composite
def _paths(draw: st.DrawFn) -> str:
    """A route's template with its parameters filled (sometimes with `/`), sometimes cut,
    extended or with a literal segment changed: paths that nearly match."""
    template = draw(st.sampled_from(_ROUTES)).path_format
    parts = template.split("/")
    filled = [draw(_segment) if p.startswith("{") else p for p in parts]
    mutation = draw(st.sampled_from(["none", "none", "none", "odd", "cut", "extend", "replace", "suffix"]))
    if mutation == "odd":
        filled[draw(st.integers(1, len(filled) - 1))] = draw(_odd_segment)
    elif mutation == "cut" and len(filled) > 1:
        filled = filled[: draw(st.integers(1, len(filled) - 1))]
    elif mutation == "extend":
        filled.append(draw(_segment))
    elif mutation == "replace":
        filled[draw(st.integers(1, len(filled) - 1))] = draw(_segment | _odd_segment)
    elif mutation == "suffix":
        filled[-1] += draw(_segment | _odd_segment)
    return "/".join(filled)


@settings(max_examples=examples(1000), deadline=None)
@given(
    path=_paths(),
    method=st.sampled_from(["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"]),
    root_path=st.sampled_from(["", "", "", "/v3"]),
)
def test_lean_route_matching_is_apiroutes(path: str, method: str, root_path: str) -> None:
    scope = {"type": "http", "method": method, "path": path, "root_path": root_path, "headers": []}
    full = [r for r in _ROUTES if APIRoute.matches(r, dict(scope))[0] is not Match.NONE]
    event(f"routes matched: {min(len(full), 2)}")
    for route in _ROUTES:
        assert route.matches(dict(scope)) == APIRoute.matches(route, dict(scope)), (route.path_format, path)


def test_lean_route_refuses_paths_of_another_shape_without_the_regex() -> None:
    route = next(r for r in _ROUTES if r.path_format.endswith("/configs:alter"))
    assert route.shape is not None and route.shape.tail == "/configs:alter" and route.shape.slashes == 6
    scope = {"type": "http", "method": "POST", "path": "/v3/clusters/c/topics/t/records", "root_path": ""}

    class Refuse:
        def match(self, _: str) -> None:
            raise AssertionError("the regex ran for a path of another shape")

    saved, route.path_regex = route.path_regex, Refuse()  # type: ignore[assignment]
    try:
        assert route.matches(scope)[0] is Match.NONE
    finally:
        route.path_regex = saved


def test_a_route_whose_parameter_may_hold_a_slash_is_matched_by_its_regex() -> None:
    async def endpoint(p: str) -> Response:
        return Response(p)

    route = LeanRoute("/files/{p:path}/raw", endpoint, methods=["GET"])
    assert route.shape is None
    scope = {"type": "http", "method": "GET", "path": "/files/a/b/c/raw", "root_path": ""}
    match, child = route.matches(scope)
    assert match is Match.FULL and child["path_params"] == {"p": "a/b/c"}
