from __future__ import annotations

from typing import Any

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from broker.kafka.server import KafkaRequestHandler
from broker.kafka.services import ListenerConfig
from tests.unit.broker_kafka.fake_services import FakeServices, make_image

BROKERS = {1: ("127.0.0.1", 19201, "rack-a"), 2: ("127.0.0.1", 19202, "rack-b"), 3: ("127.0.0.1", 19203, "rack-c")}
TOPICS = {
    "events": {0: (1, (1, 2, 3)), 1: (2, (2, 3, 1))},
    "logs": {0: (1, (1, 2, 3))},
    "remote": {0: (2, (2, 3))},  # no replica on broker 1
}


def batch(n: int = 3, value_size: int = 4, start_ts: int = 1_700_000_000_000) -> bytes:
    """One real magic-v2 batch built by kafka-python."""
    b = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 24,
    )
    for i in range(n):
        b.append(i, timestamp=start_ts + i, key=None, value=bytes([65 + i % 26]) * value_size, headers=[])
    return bytes(b.build())


async def call(handler: KafkaRequestHandler, request: Any, version: int, correlation_id: int = 7) -> Any:
    """Encode `request` with kafka-python, run it through the handler, decode the answer."""
    request.with_header(correlation_id=correlation_id, client_id="unit-test")
    frame = request.encode(version=version, header=True)
    raw = await handler(bytes(frame))
    assert raw is not None
    raw = bytes(raw)
    assert int.from_bytes(raw[:4], "big") == len(raw) - 4
    response_type = type(request).__name__.replace("Request", "Response")
    module = __import__(type(request).__module__, fromlist=[response_type])
    response = getattr(module, response_type).decode(raw[4:], version=version, header=True)
    assert response.header.correlation_id == correlation_id
    return response


@pytest.fixture
def services() -> FakeServices:
    return FakeServices(make_image(BROKERS, TOPICS), node_id=1)


@pytest.fixture
def config() -> ListenerConfig:
    return ListenerConfig(listener_name="PLAINTEXT", num_partitions=4, default_replication_factor=3)


@pytest.fixture
def handler(services: FakeServices, config: ListenerConfig) -> KafkaRequestHandler:
    return KafkaRequestHandler(services, config)
