"""AllocateProducerIds (KIP-730) on a real single-voter controller: blocks of 1,000 from 0,
recorded in the metadata log (ProducerIdsRecord) before the answer, never repeated (also
after a restart replays the log), refused for a stale broker epoch."""

from __future__ import annotations

from pathlib import Path

from quorum.controller.errors import ErrorCode
from quorum.controller.requests import AllocateProducerIdsRequest, AllocateProducerIdsResponse
from tests.unit.controller.controller_harness import run, start, stop


async def allocate(h: object, broker_id: int, epoch: int) -> AllocateProducerIdsResponse:
    resp = await h.controller.handle(AllocateProducerIdsRequest(broker_id, epoch))  # type: ignore[attr-defined]
    assert isinstance(resp, AllocateProducerIdsResponse)
    return resp


def test_blocks_are_consecutive_committed_and_never_repeat_after_a_restart(tmp_path: Path) -> None:
    async def scenario() -> None:
        h = await start(tmp_path)
        epochs = await h.unfenced_brokers(0, 1)
        got = [await allocate(h, b, epochs[b]) for b in (0, 1, 0)]
        assert [(r.error_code, r.producer_id_start, r.producer_id_len) for r in got] == [
            (0, 0, 1000), (0, 1000, 1000), (0, 2000, 1000),
        ]  # fmt: skip
        assert h.sm.image.next_producer_id == 3000  # committed before the answers
        await stop(h)
        h2 = await start(tmp_path)
        try:
            assert h2.sm.image.next_producer_id == 3000
            again = await allocate(h2, 1, h2.sm.image.cluster.brokers[1].epoch)
            assert (again.error_code, again.producer_id_start) == (0, 3000)
        finally:
            await stop(h2)

    run(scenario())


def test_a_stale_or_unknown_broker_epoch_gets_no_block(tmp_path: Path) -> None:
    async def scenario() -> None:
        h = await start(tmp_path)
        try:
            epochs = await h.unfenced_brokers(0)
            assert (await allocate(h, 0, epochs[0] - 1)).error_code == ErrorCode.STALE_BROKER_EPOCH
            assert (await allocate(h, 7, 1)).error_code == ErrorCode.STALE_BROKER_EPOCH
            assert h.sm.image.next_producer_id < 0  # nothing was recorded
        finally:
            await stop(h)

    run(scenario())
