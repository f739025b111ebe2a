"""A broker's background loops stop when cancelled, even when they were woken just before.

The race behind a broker that did not stop on SIGTERM: a metadata delta applied during the
shutdown woke the `IsrSender` (its event set), and `DataPlane.stop()` cancelled the sender
before it had resumed. Python 3.11's `asyncio.wait_for` returns the inner result when the
inner awaitable is already done as the cancellation arrives, so the cancellation was
swallowed, the loop went on, and `stop()` awaited it forever. Each test below wakes a loop
and cancels it in the same loop iteration: the wait's inner future is then done before the
loop task resumes, deterministically. Run under asyncio's loop and uvloop (the broker's)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from broker.isr import IsrSender
from broker.replica.fetcher import ReplicaFetcher
from broker.replica.manager import HostedPartition, ReplicaManager
from quorum.metadata.image import EMPTY, MetadataImage
from quorum.node.config import NodeConfig, config_from_properties
from quorum.node.controller_client import ControllerClient

STOP_WITHIN_S = 2.0


def _config(tmp: Path) -> NodeConfig:
    return config_from_properties(
        {
            "process.roles": "broker",
            "node.id": "3",
            "controller.quorum.voters": "1@127.0.0.1:1",
            "listeners": "PLAINTEXT://127.0.0.1:2",
            "controller.listener.names": "CONTROLLER",
            "log.dirs": str(tmp),
        }
    )


async def _stop_right_after_wake(
    task: Callable[[], asyncio.Task[None] | None], wake: Callable[[], None], stop: Callable[[], Awaitable[None]]
) -> None:
    """Let the loop park in its wait, wake it and cancel it in one go (before it resumes),
    then require `stop()` to return promptly and the loop task to be cancelled."""
    for _ in range(5):
        await asyncio.sleep(0)  # the loop task reaches its wait
    loop_task = task()
    assert loop_task is not None and not loop_task.done()
    wake()
    stopping = asyncio.ensure_future(stop())
    done, _ = await asyncio.wait({stopping}, timeout=STOP_WITHIN_S)
    if not done:  # the cancellation was swallowed: end the runaway loop, then fail
        loop_task.cancel()
        await asyncio.wait({stopping})
    assert done, f"stop() still waiting after {STOP_WITHIN_S} s: the loop swallowed its cancellation"
    assert loop_task.cancelled()


def test_isr_sender_stops_when_cancelled_right_after_a_wake(
    run: Callable[[Coroutine[Any, Any, None]], None], tmp_path: Path
) -> None:
    config = _config(tmp_path)
    manager = cast(ReplicaManager, SimpleNamespace(config=config, node_id=config.node_id, partitions={}))

    def image() -> MetadataImage:
        return EMPTY  # this broker is not registered: nothing to send

    async def scenario() -> None:
        sender = IsrSender(manager, cast(ControllerClient, None), image, lambda: -1)
        sender.start()
        await asyncio.sleep(sender.debounce_s * 3)  # past the first (start-up) pass
        await _stop_right_after_wake(lambda: sender._task, sender.wake, sender.stop)

    run(scenario())


@pytest.mark.pure_python  # SimpleNamespace fakes where compiled code checks the types (conftest.py)
def test_replica_fetcher_stops_when_cancelled_right_after_a_partition_is_added(
    run: Callable[[Coroutine[Any, Any, None]], None], tmp_path: Path
) -> None:
    config = _config(tmp_path)
    state = SimpleNamespace(leader_epoch=0, fetch_position=lambda log: (0, -1))
    log = SimpleNamespace(log_end_offset=0, log_start_offset=0)
    hosted = cast(
        HostedPartition,
        SimpleNamespace(topic="t", partition=0, tp=("t", 0), topic_id=uuid.UUID(int=1), state=state, log=log),
    )

    async def scenario() -> None:
        # No endpoint for the leader: once woken with a partition the fetcher only backs off.
        fetcher = ReplicaFetcher(cast(ReplicaManager, None), config, 2, lambda _broker: None)
        # Another partition waits out its fetch backoff: the idle fetcher's wait has a timeout.
        fetcher._delayed_until[("t", 1)] = time.monotonic() + 60
        fetcher.start()
        await _stop_right_after_wake(lambda: fetcher._task, lambda: fetcher.add(hosted), fetcher.stop)

    run(scenario())
