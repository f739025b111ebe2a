"""The transaction apis through the broker's real request handler (kio-encoded frames in, kio-
decoded answers out) over a real `TxnRuntime`, and the KIP-890 verification client against
that handler served on loopback by the project's transport."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Coroutine
from datetime import timedelta
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from broker.group.records import coordinator_partition
from broker.kafka.apis import is_flexible
from broker.kafka.context import make, nested
from broker.kafka.server import KafkaRequestHandler
from broker.kafka.services import ListenerConfig
from broker.txn.coordinator import TxnConfig
from broker.txn.runtime import TxnRuntime
from broker.txn.verification import TxnVerifier
from quorum.kafka_errors import ErrorCode
from quorum.wire.transport import close_server, serve
from tests.unit.broker_kafka.conftest import BROKERS, TOPICS
from tests.unit.broker_kafka.fake_services import FakeServices, make_image
from tests.unit.txn.runtime_host import Host

E = ErrorCode
INIT, ADD_PARTITIONS, ADD_OFFSETS, END_TXN, DESCRIBE, LIST = 22, 24, 25, 26, 65, 66


async def call(handler: KafkaRequestHandler, api_key: int, version: int, **fields: Any) -> Any:
    """One request written by kio, run through the handler, its answer read by kio."""
    req_cls = load_request_schema(api_key, version)
    flexible = is_flexible(api_key, version)
    header_cls = req_cls.__header_schema__
    buf = io.BytesIO()
    entity_writer(header_cls)(buf, make(header_cls, request_api_key=api_key, request_api_version=version,
                                        correlation_id=5, client_id="t"))  # fmt: skip
    entity_writer(req_cls)(buf, make(req_cls, **fields))
    raw = await handler(buf.getvalue())
    assert raw is not None
    resp_cls = load_response_schema(api_key, version)
    frame = bytes(raw)[4:]  # the broker's own answer: kio's reader is fine here
    _, pos = entity_reader(resp_cls.__header_schema__)(frame, 0)
    body, _ = entity_reader(resp_cls)(frame, pos)
    assert flexible == resp_cls.__flexible__
    return body


def code(value: Any) -> ErrorCode:
    return ErrorCode(int(value))


async def started() -> tuple[KafkaRequestHandler, TxnRuntime]:
    ids = iter(range(1000, 2000))
    runtime = TxnRuntime(1, Host(), TxnConfig(), lambda: (E.NONE, next(ids)))
    runtime.on_metadata()
    for _ in range(20):
        await asyncio.sleep(0)
    handler = KafkaRequestHandler(FakeServices(make_image(BROKERS, TOPICS), node_id=1), ListenerConfig(), txns=runtime)
    return handler, runtime


def add_partitions_v3(tid: str, pid: int, epoch: int, topic: str, *partitions: int) -> dict[str, Any]:
    topic_cls = nested(load_request_schema(ADD_PARTITIONS, 3), "AddPartitionsToTxnTopic")
    return {"v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": (topic_cls(name=topic, partitions=partitions),)}  # fmt: skip


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(coro)


def test_a_transaction_through_the_apis_and_kafkas_old_version_codes() -> None:
    async def go() -> None:
        handler, runtime = await started()
        init = await call(handler, INIT, 4, transactional_id="t1", transaction_timeout=timedelta(seconds=60))
        assert (code(init.error_code), init.producer_id, init.producer_epoch) == (E.NONE, 1000, 0)
        added = await call(handler, ADD_PARTITIONS, 3, **add_partitions_v3("t1", 1000, 0, "events", 0, 1))
        assert [code(p.partition_error_code) for t in added.results_by_topic_v3_and_below
                for p in t.results_by_partition] == [E.NONE, E.NONE]  # fmt: skip
        unknown = await call(handler, ADD_PARTITIONS, 3, **add_partitions_v3("t1", 1000, 0, "nope", 0))
        assert code(unknown.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code) == (
            E.UNKNOWN_TOPIC_OR_PARTITION
        )
        offsets = await call(handler, ADD_OFFSETS, 3, transactional_id="t1", producer_id=1000, producer_epoch=0,
                             group_id="g")  # fmt: skip
        assert code(offsets.error_code) == E.NONE
        # A wrong epoch: PRODUCER_FENCED from v2 on, INVALID_PRODUCER_EPOCH before (KIP-588).
        for version, want in ((1, E.INVALID_PRODUCER_EPOCH), (3, E.PRODUCER_FENCED)):
            end = await call(handler, END_TXN, version, transactional_id="t1", producer_id=1000, producer_epoch=5,
                             committed=True)  # fmt: skip
            assert code(end.error_code) == want
        end = await call(handler, END_TXN, 3, transactional_id="t1", producer_id=1000, producer_epoch=0,
                         committed=True)  # fmt: skip
        assert code(end.error_code) == E.NONE
        described = await call(handler, DESCRIBE, 0, transactional_ids=("t1", "none"))
        first, missing = described.transaction_states
        assert (code(first.error_code), first.transaction_state, first.producer_id) == (E.NONE, "PrepareCommit", 1000)
        assert sorted((t.topic, tuple(t.partitions)) for t in first.topics) == [
            ("__consumer_offsets", (coordinator_partition("g", 50),)), ("events", (0, 1)),
        ]  # fmt: skip
        assert code(missing.error_code) == E.TRANSACTIONAL_ID_NOT_FOUND
        listed = await call(handler, LIST, 1, state_filters=("PrepareCommit", "Bogus"), producer_id_filters=(),
                            duration_filter=-1)  # fmt: skip
        assert [(t.transactional_id, t.transaction_state) for t in listed.transaction_states] == [
            ("t1", "PrepareCommit")
        ]
        assert tuple(listed.unknown_state_filters) == ("Bogus",)
        # Without a transactional id InitProducerId stays the idempotent producers' path.
        idempotent = await call(handler, INIT, 4, transactional_id=None, transaction_timeout=timedelta(seconds=60))
        assert code(idempotent.error_code) == E.NONE
        await runtime.close()

    run(go())


def test_the_verification_client_asks_the_coordinator_over_the_wire_or_locally() -> None:
    async def go() -> None:
        handler, runtime = await started()
        init = await call(handler, INIT, 4, transactional_id="t2", transaction_timeout=timedelta(seconds=60))
        await call(handler, ADD_PARTITIONS, 3, **add_partitions_v3("t2", init.producer_id, 0, "events", 0))
        server = await serve("127.0.0.1", 0, handler.serve_frame)
        port = server.sockets[0].getsockname()[1]
        where = {"coordinator": 1}
        remote = TxnVerifier(9, lambda tid: where["coordinator"], lambda b: ("127.0.0.1", port))
        try:
            got = await remote.verify("t2", init.producer_id, 0, [("events", 0), ("events", 1)])
            assert got == {("events", 0): E.NONE, ("events", 1): E.TRANSACTION_ABORTABLE}
            assert await remote.verify("t2", init.producer_id, 3, [("events", 0)]) == {("events", 0): E.PRODUCER_FENCED}
            local = TxnVerifier(1, lambda tid: 1, lambda b: None, runtime.verify)  # no endpoint: never the network
            assert await local.verify("t2", init.producer_id, 0, [("events", 0)]) == {("events", 0): E.NONE}
            where["coordinator"] = 2  # the coordinator moved to a broker that does not answer
            unreachable = TxnVerifier(9, lambda tid: where["coordinator"], lambda b: ("127.0.0.1", 1))
            assert await unreachable.verify("t2", 1, 0, [("events", 0)]) == {("events", 0): E.COORDINATOR_NOT_AVAILABLE}
        finally:
            await remote.close()
            await close_server(server)
            await runtime.close()

    run(go())
