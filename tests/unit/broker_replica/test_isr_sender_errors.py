"""`IsrSender` (broker/isr.py) after an AlterPartition whose items failed: each failed item
reaches its partition's state, in work proportional to the partitions hosted plus the
items, not their product (10,000 partitions whose ISR changes fail at once made it
10,000 passes over 10,000 partitions on the event loop)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_replica_manager import Run, World

from broker.isr import IsrSender
from broker.replica.manager import ReplicaManager
from quorum.controller.requests import AlterPartitionRequest, AlterPartitionResponse, AlterPartitionResult
from quorum.kafka_errors import ErrorCode

N = 300


class FailingController:
    """Answers every AlterPartition item with an error (two kinds, by partition parity)."""

    def __init__(self) -> None:
        self.calls = 0

    async def call(self, request: AlterPartitionRequest, timeout_s: float) -> AlterPartitionResponse:
        self.calls += 1
        return AlterPartitionResponse(
            0,
            tuple(
                AlterPartitionResult(
                    i.topic_id,
                    i.partition,
                    ErrorCode.FENCED_LEADER_EPOCH if i.partition % 2 else ErrorCode.INVALID_UPDATE_VERSION,
                )
                for i in request.partitions
            ),
        )


async def eventually(condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    async with asyncio.timeout(timeout_s):
        while True:
            if condition():
                return
            await asyncio.sleep(0.01)


@pytest.mark.pure_python  # spies on methods of compiled instances (conftest.py)
def test_failed_alter_partition_items_are_handled_in_one_pass(
    tmp_path: Path, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        w = World(tmp_path, partitions=N)
        await eventually(lambda: len(w.manager.partitions) == N)  # many new logs: created off the loop
        hosted = list(w.manager.partitions.values())
        asked = iter([[(h, (1, 2)) for h in hosted]])
        monkeypatch.setattr(ReplicaManager, "isr_changes_wanted", lambda self, now: next(asked, []))
        failed: list[tuple[int, Any]] = []
        for h in hosted:
            real = h.state.on_isr_failed

            def record(error: Any = None, _p: int = h.partition, _real: Any = real) -> None:
                failed.append((_p, error))
                _real(error)

            monkeypatch.setattr(h.state, "on_isr_failed", record)
        passes = 0

        class CountingPartitions(dict[Any, Any]):
            def values(self) -> Any:
                nonlocal passes
                passes += 1
                return super().values()

        w.manager.partitions = CountingPartitions(w.manager.partitions)
        controller = FailingController()
        sender = IsrSender(w.manager, controller, lambda: w.image, lambda: 11, debounce_s=0)  # type: ignore[arg-type]
        passes = 0
        sender.start()
        try:
            await eventually(lambda: len(failed) == N)
        finally:
            await sender.stop()
        assert sorted(failed) == sorted(
            (h.partition, ErrorCode.FENCED_LEADER_EPOCH if h.partition % 2 else ErrorCode.INVALID_UPDATE_VERSION)
            for h in hosted
        )
        assert passes <= 5, f"{passes} passes over the {N} hosted partitions for {N} failed items"

    run(scenario())
