"""The controller's listener (`ControllerApis.handle` behind `RaftNode._handle_frame`): a write
is decided at once and answered by a future that its records' commit resolves (no task, no
coroutine per write); reads, errors and heartbeats are coroutines. Checked on a real
single-voter controller, in process and over its socket."""

from __future__ import annotations

import asyncio
from pathlib import Path

from controller_harness import CLUSTER, Harness, run, start, stop

from quorum.controller.errors import ErrorCode
from quorum.controller.requests import (
    AlterConfigOp,
    AlterConfigOpType,
    AlterConfigsResource,
    ConfigResourceType,
    CreatableTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from quorum.metadata.image import ConfigResource
from quorum.node.controller_apis import ControllerApis
from quorum.raft.errors import NotLeaderError
from quorum.wire import admin_codec
from quorum.wire.admin_codec import DescribeConfigsRequest, DescribeConfigsResource, DescribeConfigsResponse
from quorum.wire.transport import request as one_shot_request

BROKER = 2


def _alter(topic: str, value: str) -> IncrementalAlterConfigsRequest:
    op = AlterConfigOp("retention.ms", AlterConfigOpType.SET, value)
    return IncrementalAlterConfigsRequest((AlterConfigsResource(ConfigResourceType.TOPIC, topic, (op,)),))


async def _with_topic(tmp_path: Path) -> tuple[Harness, ControllerApis]:
    h = await start(tmp_path)
    apis = ControllerApis(h.controller, h.sm, h.node, cluster_id=CLUSTER, broker_defaults={})
    h.node.extra_api_handler = apis.handle
    await h.unfenced_brokers(BROKER)
    created = await h.controller.handle(CreateTopicsRequest((CreatableTopic("t", assignments={0: (BROKER,)}),)))
    assert isinstance(created, CreateTopicsResponse) and created.topics[0].error_code == 0, created
    return h, apis


def _answer(raw: bytes, key: int, version: int) -> object:
    return admin_codec.decode_admin_response(key, version, raw[4:])  # the handler's frame has its size


def test_a_write_is_answered_by_the_future_its_commit_resolves(tmp_path: Path) -> None:
    async def main() -> None:
        h, _ = await _with_topic(tmp_path)
        try:
            frame, key, version = admin_codec.encode_admin_request(_alter("t", "1234"), correlation_id=7, client_id="c")
            handling = h.node._handle_frame(frame[4:])
            assert isinstance(handling, asyncio.Future), type(handling)
            assert not handling.done()  # the answer waits for the commit
            # The rule ran at once: the working image has the value, the committed one not yet.
            resource = ConfigResource.topic("t")
            assert h.controller.working_image.configs[resource]["retention.ms"] == "1234"
            answer = _answer(await handling, key, version)
            assert isinstance(answer, IncrementalAlterConfigsResponse)
            assert [r.error_code for r in answer.resources] == [0]
            assert h.sm.image.configs[resource]["retention.ms"] == "1234"  # committed before the answer

            # A refused write (unknown topic) writes nothing and is answered at once.
            frame, key, version = admin_codec.encode_admin_request(_alter("nope", "1"), correlation_id=8, client_id="c")
            handling = h.node._handle_frame(frame[4:])
            assert isinstance(handling, asyncio.Future) and handling.done()
            refused = _answer(handling.result(), key, version)
            assert isinstance(refused, IncrementalAlterConfigsResponse)
            assert refused.resources[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

            # A read goes the coroutine way.
            read = DescribeConfigsRequest((DescribeConfigsResource(int(ConfigResourceType.TOPIC), "t", None),))
            frame, key, version = admin_codec.encode_admin_request(read, correlation_id=9, client_id="c")
            handling = h.node._handle_frame(frame[4:])
            assert asyncio.iscoroutine(handling) and not isinstance(handling, asyncio.Future)
            described = _answer(await handling, key, version)
            assert isinstance(described, DescribeConfigsResponse)
            entries = {e.name: e.value for e in described.results[0].entries}
            assert entries["retention.ms"] == "1234"

            # Over the socket, writes back to back on one connection each: every answer in order.
            port = h.node.config.listeners[0].port
            assert port > 0
            answers = await asyncio.gather(
                *(
                    one_shot_request(
                        "127.0.0.1",
                        port,
                        admin_codec.encode_admin_request(_alter("t", str(n)), correlation_id=n, client_id="c")[0],
                    )
                    for n in range(100, 120)
                )
            )
            iac_key, iac_version = admin_codec.encode_admin_request(_alter("t", "1"), correlation_id=1, client_id="c")[
                1:
            ]
            for raw in answers:
                decoded = admin_codec.decode_admin_response(iac_key, iac_version, raw)
                assert isinstance(decoded, IncrementalAlterConfigsResponse)
                assert decoded.resources[0].error_code == 0
            assert h.sm.image.configs[resource]["retention.ms"] in {str(n) for n in range(100, 120)}
        finally:
            await stop(h)

    run(main())


def test_a_write_whose_commit_fails_is_answered_not_controller(tmp_path: Path) -> None:
    async def main() -> None:
        h, apis = await _with_topic(tmp_path)
        try:
            frame, key, version = admin_codec.encode_admin_request(_alter("t", "1"), correlation_id=3, client_id="c")
            decoded = admin_codec.decode_admin_request(frame[4:])
            loop = asyncio.get_running_loop()
            response = IncrementalAlterConfigsResponse(())

            lost: asyncio.Future[int] = loop.create_future()
            lost.set_exception(NotLeaderError(-1, 0))
            answer: asyncio.Future[bytes | None] = loop.create_future()
            apis._answer(decoded, response, answer, lost)
            got = answer.result()
            assert got is not None
            refused = _answer(got, key, version)
            assert isinstance(refused, IncrementalAlterConfigsResponse)
            assert refused.resources[0].error_code == ErrorCode.NOT_CONTROLLER

            # Any other failure of the commit is the handler's failure (the listener closes the
            # connection, as for a coroutine that raised).
            broken: asyncio.Future[int] = loop.create_future()
            broken.set_exception(OSError("disk"))
            answer = loop.create_future()
            apis._answer(decoded, response, answer, broken)
            assert isinstance(answer.exception(), OSError)

            # An answer cancelled meanwhile (the connection closed) is left alone.
            done: asyncio.Future[int] = loop.create_future()
            done.set_result(5)
            answer = loop.create_future()
            answer.cancel()
            apis._answer(decoded, response, answer, done)
            assert answer.cancelled()

            # A standby (here: a controller whose image is gone, as when it resigns) answers
            # NOT_CONTROLLER, the coroutine way.
            h.controller._image = None
            handling = h.node._handle_frame(frame[4:])
            assert asyncio.iscoroutine(handling) and not isinstance(handling, asyncio.Future)
            standby = _answer(await handling, key, version)
            assert isinstance(standby, IncrementalAlterConfigsResponse)
            assert standby.resources[0].error_code == ErrorCode.NOT_CONTROLLER
        finally:
            await stop(h)

    run(main())
