"""Test support for the REST API tests: a real metadata image and a recording admin double.

The image is built the way every node builds it: metadata records, encoded to Kafka's
binary form and decoded back, replayed by `MetadataDelta`. The context's ``admin()`` is a
test double for the active controller (which has its own tests): it records the typed
requests it receives and answers with the typed response the test gave it (or, by
default, a success for every item the request names).
"""

from __future__ import annotations

import asyncio
import uuid
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx

from api.context import NotAvailableError
from api.rest import create_app
from quorum.controller.requests import (
    AdminRequest,
    AdminResponse,
    AlterConfigsResult,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsResult,
    CreateTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    ElectLeaderResult,
    ElectLeadersRequest,
    ElectLeadersResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from quorum.metadata.delta import MetadataDelta
from quorum.metadata.image import EMPTY, MetadataImage
from quorum.metadata.records import (
    BrokerEndpoint,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    ConfigResourceType,
    FeatureLevelRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
    decode_record,
    encode_record,
)
from quorum.raft.describe import QuorumDescription, ReplicaDescription

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
BASE_URL = "http://testserver"
V3 = f"/v3/clusters/{CLUSTER_ID}"
URL = BASE_URL + V3

# Every (method, path) the REST API serves, as its OpenAPI document names them.
ROUTES = {
    ("get", "/v3/clusters"),
    ("get", "/v3/clusters/{cluster_id}"),
    ("get", "/v3/clusters/{cluster_id}/brokers"),
    ("get", "/v3/clusters/{cluster_id}/brokers/{broker_id}"),
    ("get", "/v3/clusters/{cluster_id}/brokers/{broker_id}/partition-replicas"),
    ("get", "/v3/clusters/{cluster_id}/topics"),
    ("post", "/v3/clusters/{cluster_id}/topics"),
    ("get", "/v3/clusters/{cluster_id}/topics/{topic_name}"),
    ("patch", "/v3/clusters/{cluster_id}/topics/{topic_name}"),
    ("delete", "/v3/clusters/{cluster_id}/topics/{topic_name}"),
    ("get", "/v3/clusters/{cluster_id}/topics/-/configs"),
    ("get", "/v3/clusters/{cluster_id}/topics/{topic_name}/configs"),
    ("post", "/v3/clusters/{cluster_id}/topics/{topic_name}/configs:alter"),
    ("get", "/v3/clusters/{cluster_id}/topics/{topic_name}/configs/{name}"),
    ("put", "/v3/clusters/{cluster_id}/topics/{topic_name}/configs/{name}"),
    ("delete", "/v3/clusters/{cluster_id}/topics/{topic_name}/configs/{name}"),
    ("get", "/v3/clusters/{cluster_id}/topics/{topic_name}/partitions"),
    ("get", "/v3/clusters/{cluster_id}/topics/{topic_name}/partitions/{partition_id}"),
    ("get", "/v3/clusters/{cluster_id}/topics/{topic_name}/partitions/{partition_id}/replicas"),
    ("get", "/v3/clusters/{cluster_id}/topics/{topic_name}/partitions/{partition_id}/offset"),
    ("post", "/v3/clusters/{cluster_id}/topics/{topic_name}/records"),
    ("get", "/v3/clusters/{cluster_id}/topics/{topic_name}/partitions/{partition_id}/replicas/{broker_id}"),
    ("get", "/v3/clusters/{cluster_id}/topics/-/partitions/-/reassignment"),
    ("get", "/v3/clusters/{cluster_id}/topics/{topic_name}/partitions/-/reassignment"),
    ("get", "/v3/clusters/{cluster_id}/topics/{topic_name}/partitions/{partition_id}/reassignment"),
    ("post", "/v3/clusters/{cluster_id}/topics/{topic_name}/partitions/{partition_id}/elect-leader"),
    ("post", "/v3/clusters/{cluster_id}/elect-leaders"),
    ("get", "/v3/clusters/{cluster_id}/quorum/status"),
    ("get", "/v3/clusters/{cluster_id}/quorum/replication"),
    ("get", "/v3/clusters/{cluster_id}/consumer-groups"),
    ("get", "/v3/clusters/{cluster_id}/consumer-groups/{consumer_group_id}"),
    ("get", "/v3/clusters/{cluster_id}/consumer-groups/{consumer_group_id}/consumers"),
    ("get", "/v3/clusters/{cluster_id}/consumer-groups/{consumer_group_id}/consumers/{consumer_id}"),
    ("get", "/v3/clusters/{cluster_id}/consumer-groups/{consumer_group_id}/consumers/{consumer_id}/assignments"),
    (
        "get",
        "/v3/clusters/{cluster_id}/consumer-groups/{consumer_group_id}/consumers/{consumer_id}/assignments"
        "/{topic_name}/partitions/{partition_id}",
    ),
    ("get", "/v3/clusters/{cluster_id}/consumer-groups/{consumer_group_id}/lags"),
    (
        "get",
        "/v3/clusters/{cluster_id}/consumer-groups/{consumer_group_id}/lags/{topic_name}/partitions/{partition_id}",
    ),
    ("get", "/v3/clusters/{cluster_id}/consumer-groups/{consumer_group_id}/lag-summary"),
}
"""Every documented operation. The consumer-group ones ask live brokers (no image holds
groups): their JSON is tested against a real cluster (tests/integration/test_consumer_group_tools.py)."""
ORDERS_ID = uuid.UUID("8f1c6b52-5d0a-4c47-9a57-0c2a3e0a4f11")
EVENTS_ID = uuid.UUID("1d2e3f40-5a6b-4c7d-8e9f-a0b1c2d3e4f5")
OFFSETS_ID = uuid.UUID("00000000-0000-4000-8000-00000000000c")


def replay(records: Iterable[MetadataRecord], image: MetadataImage = EMPTY) -> MetadataImage:
    """Replay records (through their binary encoding) at consecutive offsets after `image`."""
    delta = MetadataDelta(image)
    offset = image.offset + 1
    for record in records:
        delta.replay(decode_record(encode_record(record)), offset, 1)
        offset += 1
    return delta.apply()


def broker_records(
    broker_id: int, epoch: int, *, rack: str | None = None, fenced: bool = False
) -> list[MetadataRecord]:
    out: list[MetadataRecord] = [
        RegisterBrokerRecord(
            broker_id=broker_id,
            incarnation_id=uuid.UUID(int=broker_id),
            broker_epoch=epoch,
            end_points=(
                BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9090 + broker_id, 0),
                BrokerEndpoint("INTERNAL", "10.0.0.1", 19090 + broker_id, 0),
            ),
            rack=rack,
            fenced=True,
        )
    ]
    if not fenced:
        out.append(BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=epoch, fenced=-1))
    return out


def cluster_image() -> MetadataImage:
    """Brokers 1, 2 (unfenced, racks a and b) and 3 (fenced); topics:

    - ``orders``: 3 partitions, RF 3; partition 1's leader moved to broker 3 and back to 2,
      partition 2 has lost broker 3 from its ISR; cleanup.policy=compact, retention.ms=1000;
    - ``events``: 1 partition, RF 2, leaderless (no ISR member), plus a reassignment adding 3;
    - ``__consumer_offsets``: 1 partition, RF 1 (internal).
    """
    records: list[MetadataRecord] = [FeatureLevelRecord("metadata.version", 21)]
    records += broker_records(1, 10, rack="a")
    records += broker_records(2, 11, rack="b")
    records += broker_records(3, 12, fenced=True)
    records += [
        TopicRecord("orders", ORDERS_ID),
        PartitionRecord(0, ORDERS_ID, (1, 2, 3), (1, 2, 3), leader=1, leader_epoch=0, partition_epoch=0),
        PartitionRecord(1, ORDERS_ID, (2, 3, 1), (2, 3, 1), leader=2, leader_epoch=0, partition_epoch=0),
        PartitionRecord(2, ORDERS_ID, (3, 1, 2), (3, 1, 2), leader=3, leader_epoch=0, partition_epoch=0),
        PartitionChangeRecord(1, ORDERS_ID, leader=3),
        PartitionChangeRecord(1, ORDERS_ID, leader=2),
        PartitionChangeRecord(2, ORDERS_ID, isr=(1, 2), leader=1),
        ConfigRecord(ConfigResourceType.TOPIC.value, "orders", "cleanup.policy", "compact"),
        ConfigRecord(ConfigResourceType.TOPIC.value, "orders", "retention.ms", "1000"),
        TopicRecord("events", EVENTS_ID),
        PartitionRecord(0, EVENTS_ID, (2, 1), (2, 1), leader=2, leader_epoch=0, partition_epoch=0),
        PartitionChangeRecord(0, EVENTS_ID, isr=(), leader=-1),
        PartitionChangeRecord(0, EVENTS_ID, replicas=(2, 1, 3), adding_replicas=(3,)),
        TopicRecord("__consumer_offsets", OFFSETS_ID),
        PartitionRecord(0, OFFSETS_ID, (1,), (1,), leader=1, leader_epoch=0, partition_epoch=0),
        ConfigRecord(ConfigResourceType.BROKER.value, "", "log.retention.bytes", "1073741824"),
    ]
    return replay(records)


def quorum() -> QuorumDescription:
    return QuorumDescription(
        leader_id=1001,
        leader_epoch=7,
        high_watermark=120,
        voters=(
            ReplicaDescription(1001, 125, 1_700_000_000_500, 1_700_000_000_500),
            ReplicaDescription(1002, 120, 1_700_000_000_400, 1_700_000_000_300),
            ReplicaDescription(1003, 100, 1_700_000_000_200, 1_700_000_000_000),
        ),
        observers=(ReplicaDescription(1, 125, 1_700_000_000_450, 1_700_000_000_450), ReplicaDescription(3, -1)),
    )


def default_answer(request: AdminRequest) -> AdminResponse:
    """What a controller that accepts everything would answer."""
    if isinstance(request, CreateTopicsRequest):
        return CreateTopicsResponse(
            tuple(
                CreateTopicResult(
                    t.name,
                    topic_id=uuid.UUID(int=7),
                    num_partitions=len(t.assignments) if t.assignments else max(t.num_partitions, 1),
                    replication_factor=(
                        len(next(iter(t.assignments.values()))) if t.assignments else max(t.replication_factor, 1)
                    ),
                    configs=dict(t.configs),
                )
                for t in request.topics
            )
        )
    if isinstance(request, DeleteTopicsRequest):
        return DeleteTopicsResponse(tuple(DeleteTopicResult(n, None) for n in request.names))
    if isinstance(request, CreatePartitionsRequest):
        return CreatePartitionsResponse(tuple(CreatePartitionsResult(t.name) for t in request.topics))
    if isinstance(request, IncrementalAlterConfigsRequest):
        return IncrementalAlterConfigsResponse(
            tuple(AlterConfigsResult(r.resource_type, r.resource_name) for r in request.resources)
        )
    assert isinstance(request, ElectLeadersRequest)
    return ElectLeadersResponse(0, tuple(ElectLeaderResult(t, p) for t, p in request.partitions or ()))


def failing_answer(code: int, message: str) -> Callable[[AdminRequest], AdminResponse]:
    """A controller that fails every item of every request with Kafka error `code`."""

    def answer(request: AdminRequest) -> AdminResponse:
        if isinstance(request, CreateTopicsRequest):
            return CreateTopicsResponse(tuple(CreateTopicResult(t.name, code, message) for t in request.topics))
        if isinstance(request, DeleteTopicsRequest):
            return DeleteTopicsResponse(tuple(DeleteTopicResult(n, None, code, message) for n in request.names))
        if isinstance(request, CreatePartitionsRequest):
            return CreatePartitionsResponse(
                tuple(CreatePartitionsResult(t.name, code, message) for t in request.topics)
            )
        if isinstance(request, IncrementalAlterConfigsRequest):
            return IncrementalAlterConfigsResponse(
                tuple(AlterConfigsResult(r.resource_type, r.resource_name, code, message) for r in request.resources)
            )
        assert isinstance(request, ElectLeadersRequest)
        return ElectLeadersResponse(
            0, tuple(ElectLeaderResult(t, p, code, message) for t, p in request.partitions or ())
        )

    return answer


@dataclass
class FakeNode:
    """A `NodeContext` over a real image; ``admin()`` records requests and answers as told.

    ``answer``: a fixed response, a function of the request, or an exception to raise.
    ``after_write``: records a successful write leaves to apply; as on a node that
    forwarded the write, the image holds them once a read settles (``settle()``).
    """

    state: MetadataImage = field(default_factory=cluster_image)
    node_id: int = 1
    cluster_id: str = CLUSTER_ID
    roles: frozenset[str] = frozenset({"broker"})
    defaults: dict[str, str] = field(default_factory=lambda: {"log.retention.hours": "72", "num.partitions": "1"})
    answer: AdminResponse | Callable[[AdminRequest], AdminResponse] | BaseException | None = None
    after_write: list[MetadataRecord] = field(default_factory=list)
    described: QuorumDescription | BaseException = field(default_factory=quorum)
    requests: list[AdminRequest] = field(default_factory=list)
    unsettled: list[MetadataRecord] = field(default_factory=list)
    settles: int = 0

    def image(self) -> MetadataImage:
        return self.state

    def broker_defaults(self) -> dict[str, str]:
        return dict(self.defaults)

    async def admin(self, request: AdminRequest) -> AdminResponse:
        self.requests.append(request)
        answer = self.answer
        if isinstance(answer, BaseException):
            raise answer
        if answer is None:
            response = default_answer(request)
        elif callable(answer):
            response = answer(request)
        else:
            response = answer
        if self.after_write:
            self.unsettled.extend(self.after_write)
            self.after_write = []
        return response

    async def settle(self) -> None:
        self.settles += 1
        if self.unsettled:
            self.state = replay(self.unsettled, self.state)
            self.unsettled = []

    async def describe_quorum(self) -> QuorumDescription:
        if isinstance(self.described, BaseException):
            raise self.described
        return self.described


def unavailable() -> NotAvailableError:
    return NotAvailableError("no quorum leader is known")


class Client:
    """A synchronous client for the ASGI app (httpx over ``ASGITransport``, on a private loop).

    With ``raise_app_exceptions`` (the default) an exception escaping the app fails the test
    instead of becoming a 500 answer.
    """

    def __init__(self, app: Any, *, raise_app_exceptions: bool = True) -> None:
        self.app = app
        self.raise_app_exceptions = raise_app_exceptions
        self._runner = asyncio.Runner()
        weakref.finalize(self, self._runner.close)

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app, raise_app_exceptions=self.raise_app_exceptions)
            async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
                return await client.request(method, path, **kwargs)

        return self._runner.run(go())

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", path, **kwargs)

    def put(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("PUT", path, **kwargs)

    def patch(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("PATCH", path, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("DELETE", path, **kwargs)


_APPS: dict[str, Any] = {}


def app_for(node: FakeNode) -> Any:
    """The app serving `node`. FastAPI builds each route's validators on an app's first request
    (~0.2 s for this API), so tests share one app per cluster id and swap the node it serves
    (the app reads ``app.state.ctx`` on every request)."""
    app = _APPS.get(node.cluster_id)
    if app is None:
        app = _APPS[node.cluster_id] = create_app(node)
    app.state.ctx = node
    return app


def client_for(node: FakeNode, **kwargs: Any) -> Client:
    return Client(app_for(node), **kwargs)
