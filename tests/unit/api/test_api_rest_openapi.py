"""The OpenAPI document: served, complete and accurate (schemathesis checks the answers against it in
test_api_rest_schemathesis.py)."""

from __future__ import annotations

from typing import Any, cast

import pytest
from rest_api_support import (  # type: ignore[import-not-found,unused-ignore]  # a sibling module on pytest's path
    CLUSTER_ID,
    ROUTES,
    FakeNode,
    client_for,
)


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    response = client_for(FakeNode()).get("/openapi.json")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    return cast(dict[str, Any], response.json())


def _operations(document: dict[str, Any]):
    for path, item in document["paths"].items():
        for method, operation in item.items():
            yield method, path, operation


def _resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if ref is None:
        return schema
    name = ref.rsplit("/", 1)[-1]
    return cast(dict[str, Any], document["components"]["schemas"][name])


def test_every_route_is_documented(document):
    assert document["openapi"].startswith("3.")
    assert document["info"]["title"] == "pykraft REST Admin API"
    assert {(m, p) for m, p, _ in _operations(document)} == ROUTES


def test_every_route_documents_its_errors_with_the_error_body(document):
    for method, path, operation in _operations(document):
        responses = operation["responses"]
        assert "5XX" in responses, (method, path)
        for status, response in responses.items():
            if status.startswith(("4", "5")):
                schema = response["content"]["application/json"]["schema"]
                assert schema == {"$ref": "#/components/schemas/ErrorBody"}, (method, path, status)
        if path != "/v3/clusters":
            assert {"404", "422"} <= set(responses), (method, path)
        if path.endswith("/records"):
            # Produce errors are per record inside a 200 stream; before it starts, only these.
            assert set(responses) == {"200", "404", "413", "415", "422", "5XX"}, (method, path)
        elif method != "get":
            assert {"400", "404", "422", "429"} <= set(responses), (method, path)
    assert "HTTPValidationError" not in document["components"]["schemas"]
    error = document["components"]["schemas"]["ErrorBody"]
    assert set(error["required"]) == {"error_code", "message"}


def test_success_responses(document):
    successes = {(m, p): sorted(s for s in op["responses"] if s.startswith("2")) for m, p, op in _operations(document)}
    assert successes[("post", "/v3/clusters/{cluster_id}/topics")] == ["200", "201"]
    topic = "/v3/clusters/{cluster_id}/topics/{topic_name}"
    for path in (topic, topic + "/configs/{name}"):
        assert successes[("delete", path)] == ["204"]
    assert successes[("post", "/v3/clusters/{cluster_id}/topics/{topic_name}/configs:alter")] == ["204"]
    for (method, _), statuses in successes.items():
        if method == "get":
            assert statuses == ["200"]
    create = document["paths"]["/v3/clusters/{cluster_id}/topics"]["post"]["responses"]
    assert "Location" in create["201"]["headers"]
    for status in ("200", "201"):
        assert create[status]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/TopicData"}
    for status in ("204",):
        delete = document["paths"]["/v3/clusters/{cluster_id}/topics/{topic_name}"]["delete"]["responses"]
        assert "content" not in delete[status]


def test_resource_schemas_have_their_kind(document):
    schemas = document["components"]["schemas"]
    kinds = {
        "ClusterData": "KafkaCluster",
        "BrokerData": "KafkaBroker",
        "TopicData": "KafkaTopic",
        "PartitionData": "KafkaPartition",
        "ReplicaData": "KafkaReplica",
        "TopicConfigData": "KafkaTopicConfig",
        "ReassignmentData": "KafkaReassignment",
        "TopicDataList": "KafkaTopicList",
        "QuorumStatusData": "KafkaQuorumStatus",
    }
    for name, kind in kinds.items():
        assert schemas[name]["properties"]["kind"]["const"] == kind
    assert set(schemas["ResourceMetadata"]["properties"]) == {"self", "resource_name"}
    assert set(schemas["CollectionMetadata"]["properties"]) == {"self", "next"}


def test_request_bodies_reject_unknown_fields(document):
    bodies = 0
    for method, path, operation in _operations(document):
        if "requestBody" not in operation:
            continue
        bodies += 1
        schema = operation["requestBody"]["content"]["application/json"]["schema"]
        if "anyOf" in schema:  # the optional elect-leader body
            schema = next(s for s in schema["anyOf"] if "$ref" in s)
        assert _resolve(document, schema)["additionalProperties"] is False, (method, path)
    assert bodies == 7


def test_cluster_id_parameters_show_this_cluster(document):
    for _, _, operation in _operations(document):
        for parameter in operation.get("parameters", []):
            if parameter["name"] == "cluster_id":
                assert parameter["in"] == "path" and parameter["example"] == CLUSTER_ID


def test_documented_parameters_match_the_paths(document):
    for method, path, operation in _operations(document):
        declared = {p["name"] for p in operation.get("parameters", []) if p["in"] == "path"}
        in_path = {segment[1:-1] for segment in path.replace(":", "/").split("/") if segment.startswith("{")}
        assert declared == in_path, (method, path)
