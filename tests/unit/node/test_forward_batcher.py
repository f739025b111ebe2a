"""AlterConfigsBatcher: concurrent config writes share forwarded requests, and each caller
still gets exactly what an unbatched forward would have given it.

The forward stands in for the active controller: it answers each resource of a request on
its own (an error for some names), as the controller does, after a delay the test drives."""

from __future__ import annotations

import asyncio
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quorum.controller.requests import (
    AlterConfigOp,
    AlterConfigOpType,
    AlterConfigsResource,
    AlterConfigsResult,
    ConfigResourceType,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from quorum.node.forward_batcher import AlterConfigsBatcher
from tests.scale import examples

TOPIC = ConfigResourceType.TOPIC


def _request(*names: str, validate_only: bool = False, value: str = "1") -> IncrementalAlterConfigsRequest:
    return IncrementalAlterConfigsRequest(
        tuple(
            AlterConfigsResource(TOPIC, n, (AlterConfigOp("retention.ms", AlterConfigOpType.SET, value),))
            for n in names
        ),
        validate_only=validate_only,
    )


class Controller:
    """Answers each resource alone: names starting with "bad" get INVALID_CONFIG (40)."""

    def __init__(self, rng: random.Random | None = None, *, fail: bool = False) -> None:
        self.requests: list[IncrementalAlterConfigsRequest] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.rng = rng
        self.fail = fail

    async def forward(self, request: IncrementalAlterConfigsRequest) -> tuple[IncrementalAlterConfigsResponse, bool]:
        self.requests.append(request)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            for _ in range(self.rng.randint(0, 3) if self.rng else 1):
                await asyncio.sleep(0)
            if self.fail:
                raise ConnectionError("controller gone")
            return (
                IncrementalAlterConfigsResponse(
                    tuple(
                        AlterConfigsResult(
                            r.resource_type, r.resource_name, 40 if r.resource_name.startswith("bad") else 0
                        )
                        for r in request.resources
                    )
                ),
                False,
            )
        finally:
            self.in_flight -= 1


def _expected(request: IncrementalAlterConfigsRequest) -> IncrementalAlterConfigsResponse:
    return IncrementalAlterConfigsResponse(
        tuple(
            AlterConfigsResult(r.resource_type, r.resource_name, 40 if r.resource_name.startswith("bad") else 0)
            for r in request.resources
        )
    )


def test_a_lone_write_is_forwarded_at_once_and_unchanged() -> None:
    async def main() -> None:
        controller = Controller()
        batcher = AlterConfigsBatcher(controller.forward, max_in_flight=2)
        request = _request("a", "b")
        response, resent = await batcher.call(request)
        assert controller.requests == [request] and controller.requests[0] is request
        assert response == _expected(request) and resent is False

    asyncio.run(main())


def test_writes_that_arrive_while_the_slots_are_busy_share_one_request() -> None:
    async def main() -> None:
        controller = Controller()
        batcher = AlterConfigsBatcher(controller.forward, max_in_flight=1)
        requests = [_request(f"t{i}") for i in range(5)] + [_request("bad-1")]
        answers = await asyncio.gather(*(batcher.call(r) for r in requests))
        # All six arrived in one loop turn: one request carries them all, in arrival order.
        assert len(controller.requests) == 1
        assert [r.resource_name for r in controller.requests[0].resources] == ["t0", "t1", "t2", "t3", "t4", "bad-1"]
        for request, (response, _) in zip(requests, answers, strict=True):
            assert response == _expected(request)
        assert (batcher.requests_sent, batcher.writes_sent) == (1, 6)

    asyncio.run(main())


def test_a_failed_request_fails_each_of_its_writes_and_a_cancelled_caller_does_not_cancel_it() -> None:
    async def main() -> None:
        controller = Controller(fail=True)
        batcher = AlterConfigsBatcher(controller.forward, max_in_flight=1)
        calls = [asyncio.ensure_future(batcher.call(_request(n))) for n in ("a", "b", "c")]
        await asyncio.sleep(0)
        calls[1].cancel()
        done = await asyncio.gather(*calls, return_exceptions=True)
        assert isinstance(done[0], ConnectionError) and isinstance(done[2], ConnectionError)
        assert isinstance(done[1], asyncio.CancelledError)

        ok = Controller()
        batcher = AlterConfigsBatcher(ok.forward, max_in_flight=1)
        calls = [asyncio.ensure_future(batcher.call(_request(n))) for n in ("a", "b", "c")]
        await asyncio.sleep(0)
        await asyncio.sleep(0)  # the shared request is on its way
        calls[0].cancel()
        assert (await calls[1])[0] == _expected(_request("b"))
        assert (await calls[2])[0] == _expected(_request("c"))

    asyncio.run(main())


writes = st.lists(
    st.tuples(
        st.lists(st.sampled_from(["a", "b", "c", "d", "bad-e", "f"]), min_size=1, max_size=3),
        st.booleans(),  # validate_only
        st.integers(0, 2),  # loop turns before the write arrives
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=examples(300), deadline=None)
@given(
    writes=writes,
    max_in_flight=st.integers(1, 3),
    max_resources=st.integers(1, 5),
    seed=st.integers(0, 2**16),
)
def test_batched_forwards_answer_every_write_as_an_unbatched_forward_would(
    writes: list[tuple[list[str], bool, int]], max_in_flight: int, max_resources: int, seed: int
) -> None:
    async def main() -> None:
        controller = Controller(random.Random(seed))
        batcher = AlterConfigsBatcher(controller.forward, max_in_flight=max_in_flight, max_resources=max_resources)
        requests = [_request(*names, validate_only=vo, value=str(i)) for i, (names, vo, _) in enumerate(writes)]

        async def one(i: int) -> IncrementalAlterConfigsResponse:
            for _ in range(sum(w[2] for w in writes[: i + 1])):
                await asyncio.sleep(0)
            return (await batcher.call(requests[i]))[0]

        answers = await asyncio.gather(*(one(i) for i in range(len(writes))))
        for request, answer in zip(requests, answers, strict=True):
            assert answer == _expected(request)
        assert controller.max_in_flight <= max_in_flight
        sent_values: dict[str, list[int]] = {}
        carried = 0
        for sent in controller.requests:
            names = [r.resource_name for r in sent.resources]
            own = [r for r in requests if r is sent]
            if not own:  # a merged request
                assert len(names) == len(set(names)), names
                assert len(names) <= max_resources
            # One validate_only value per request: each resource's op value names its write.
            values = {int(r.ops[0].value or "0") for r in sent.resources}
            assert len({requests[v].validate_only for v in values}) == 1
            carried += len(values)
            for r in sent.resources:
                sent_values.setdefault(r.resource_name, []).append(int(r.ops[0].value or "0"))
        assert carried == len(writes)  # each write sent once
        for name, order in sent_values.items():
            assert order == sorted(order), f"writes to {name} were reordered: {order}"
        assert batcher.writes_sent == len(writes)

    asyncio.run(main())


@pytest.mark.parametrize("max_in_flight", [1, 4])
def test_writes_to_one_resource_never_share_a_request(max_in_flight: int) -> None:
    async def main() -> None:
        controller = Controller()
        batcher = AlterConfigsBatcher(controller.forward, max_in_flight=max_in_flight)
        await asyncio.gather(*(batcher.call(_request("same", value=str(i))) for i in range(6)))
        assert [r.resources[0].ops[0].value for r in controller.requests] == [str(i) for i in range(6)]
        assert all(len(r.resources) == 1 for r in controller.requests)

    asyncio.run(main())
