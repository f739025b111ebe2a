"""schemathesis against the LIVE /openapi.json of a real 3-controller + 3-broker cluster.

Every operation of the document is called on a broker's and on a controller's REST
listener with generated requests (derandomized, bounded); writes really reach the
active controller. No answer may be a 5xx, every answer must match the document, and every
operation must succeed (a 2xx) at least once.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from metadata_cluster import MetadataCluster, closed_after, start_cluster, wait_until

from tests.scale import examples
from tests.unit.api.rest_api_support import ROUTES

pytestmark = pytest.mark.integration

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is a test dependency")
from schemathesis.config import SchemathesisConfig  # noqa: E402
from schemathesis.specs.openapi.checks import positive_data_acceptance  # noqa: E402

MAX_EXAMPLES = examples(int(os.environ.get("PYKRAFT_LIVE_SCHEMATHESIS_EXAMPLES", "4")))


GROUP = "schemathesis-group"


class GroupMember:
    """A real consumer in GROUP, subscribed to "orders", polled in a thread for the module's
    life (so that the consumer-group routes have a group, a member, assignments and lags)."""

    def __init__(self, c: MetadataCluster) -> None:
        from confluent_kafka import Consumer

        bootstrap = ",".join(
            f"127.0.0.1:{c.nodes[b].plan.properties['listeners'].rsplit(':', 1)[1]}" for b in c.broker_ids
        )
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": GROUP,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )
        self.consumer.subscribe(["orders"])
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                m = self.consumer.poll(0.1)
                if m is not None and m.error() is None:
                    self.consumer.commit(message=m, asynchronous=False)

    def assigned(self) -> bool:
        with self._lock:
            return bool(self.consumer.assignment())

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.consumer.close()


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[MetadataCluster]:
    c = start_cluster(
        tmp_path_factory.mktemp("schemathesis-live"),
        properties={"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3"},
    )
    with closed_after(request, [c]):
        _ensure_orders(c, c.broker_ids[0])
        r = c.post(c.broker_ids[0], "/topics/orders/records", {"partition_id": 0, "value": {"type": "JSON", "data": 1}})
        assert r.status_code == 200, r.text
        member = GroupMember(c)
        try:
            wait_until(f"a member of {GROUP} with partitions", member.assigned, 60)
            yield c
        finally:
            member.close()


def _consumer_ids(c: MetadataCluster) -> list[str]:
    consumers = c.get_json(c.broker_ids[0], f"/consumer-groups/{GROUP}/consumers")["data"]
    return [m["consumer_id"] for m in consumers]


def _config(c: MetadataCluster) -> SchemathesisConfig:
    return SchemathesisConfig.from_dict(
        {
            "dictionaries": {
                "clusters": {"values": [c.cluster_id]},
                "topics": {"values": ["orders"]},
                "partitions": {"values": [0, 1, 2]},
                "brokers": {"values": c.broker_ids},
                "configs": {"values": ["retention.ms", "cleanup.policy", "min.insync.replicas"]},
                "groups": {"values": [GROUP]},
                "consumers": {"values": _consumer_ids(c)},
            },
            "parameters": {
                "path.cluster_id": {"dictionary": "clusters", "probability": 0.9},
                "path.topic_name": {"dictionary": "topics", "probability": 0.7},
                "path.partition_id": {"dictionary": "partitions", "probability": 0.8},
                "path.broker_id": {"dictionary": "brokers", "probability": 0.8},
                "path.name": {"dictionary": "configs", "probability": 0.8},
                "path.consumer_group_id": {"dictionary": "groups", "probability": 0.8},
                "path.consumer_id": {"dictionary": "consumers", "probability": 0.8},
            },
        }
    )


_SETTINGS = settings(
    max_examples=MAX_EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)


def _excluded(case: Any) -> list[Any]:
    # Schema-valid writes Kafka still refuses (bad names, existing topics) answer 400/40002.
    return [positive_data_acceptance] if case.method != "GET" else []


def _ensure_orders(c: MetadataCluster, node_id: int) -> None:
    """The topic the generated requests name (3 partitions, 3 replicas), led, as `node_id`
    sees it: created again when an earlier operation deleted it."""
    if c.get(node_id, "/topics/orders").status_code == 404:
        r = c.post(node_id, "/topics", {"topic_name": "orders", "partitions_count": 3, "replication_factor": 3})
        assert r.status_code == 201, r.text

    def led() -> bool:
        r = c.get(node_id, "/topics/orders/partitions")
        return r.status_code == 200 and all(p.get("leader") for p in r.json()["data"] if p["partition_id"] < 3)

    wait_until(f"orders led as node {node_id} sees it", led, 30)


# Requests Kafka accepts, for the writes whose generated bodies are rarely valid (a legal new
# topic name with a feasible replication factor; more partitions than the topic has; a
# known config's legal value): each is sent once before the generated cases, so that its 2xx
# answer is validated against the document too. (path parameters, body) for a node.
def _valid_write(c: MetadataCluster, node_id: int, key: tuple[str, str]) -> tuple[dict[str, Any], Any] | None:
    if key == ("POST", "/v3/clusters/{cluster_id}/topics"):
        return {}, {"topic_name": f"made-by-schemathesis-{node_id}", "partitions_count": 1, "replication_factor": 3}
    if key == ("PATCH", "/v3/clusters/{cluster_id}/topics/{topic_name}"):
        partitions = len(c.get_json(node_id, "/topics/orders/partitions")["data"])
        return {"topic_name": "orders"}, {"partitions_count": partitions + 1}
    if key == ("PUT", "/v3/clusters/{cluster_id}/topics/{topic_name}/configs/{name}"):
        return {"topic_name": "orders", "name": "retention.ms"}, {"value": "3600000"}
    return None


# Never a 2xx here: one partition's reassignment is 404 unless one is in progress, and
# pykraft never starts one.
NO_SUCCESS_POSSIBLE = {("GET", "/v3/clusters/{cluster_id}/topics/{topic_name}/partitions/{partition_id}/reassignment")}


def _fuzz(operation: Any, got: set[int]) -> None:
    """Generated cases of one operation; each answer's status code goes to `got`."""

    @given(case=operation.as_strategy())
    @_SETTINGS
    def call(case: Any) -> None:
        got.add(case.call_and_validate(excluded_checks=_excluded(case), timeout=30).status_code)

    call()


def _run_all_operations(c: MetadataCluster, node_id: int) -> dict[tuple[str, str], set[int]]:
    """Every operation of the node's live document, each with generated cases: the status
    codes each operation got."""
    node = c.nodes[node_id]
    schema = schemathesis.openapi.from_url(f"{node.rest_url}/openapi.json", config=_config(c))
    statuses: dict[tuple[str, str], set[int]] = {}
    for result in schema.get_all_operations():
        operation = result.ok()
        key = (operation.method.upper(), operation.path)
        got = statuses.setdefault(key, set())
        _ensure_orders(c, node_id)
        valid = _valid_write(c, node_id, key)
        if valid is not None:
            path_parameters, body = valid
            case = operation.Case(
                path_parameters={"cluster_id": c.cluster_id, **path_parameters},
                body=body,
                media_type="application/json",
            )
            got.add(case.call_and_validate(timeout=30).status_code)
        _fuzz(operation, got)
    return statuses


def check_every_operation_succeeded(statuses: dict[tuple[str, str], set[int]]) -> None:
    """Every route of the document was called, and each but NO_SUCCESS_POSSIBLE got a 2xx."""
    assert {(m.upper(), p) for m, p in ROUTES} == set(statuses)
    failed = {k: v for k, v in statuses.items() if not any(200 <= s < 300 for s in v)}
    assert set(failed) == NO_SUCCESS_POSSIBLE, failed


def test_live_broker_rest_conforms(live: MetadataCluster) -> None:
    check_every_operation_succeeded(_run_all_operations(live, live.broker_ids[0]))


def test_live_controller_rest_conforms(live: MetadataCluster) -> None:
    check_every_operation_succeeded(_run_all_operations(live, live.controller_ids[0]))
