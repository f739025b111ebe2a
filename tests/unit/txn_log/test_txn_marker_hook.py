"""The group coordinator's hook for transaction markers (`TxnMarkerListener`, broker/serving.py):
told once per committed marker on a `__consumer_offsets` partition, never for other topics or
failed partitions; a hook that raises turns that partition's answer into UNKNOWN_SERVER_ERROR."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, cast

import pytest

from broker.kafka.services import TxnMarker, TxnMarkerResult
from broker.serving import LocalBrokerServices
from quorum.kafka_errors import ErrorCode


class Appended:
    """Stands in for the ReplicaManager's marker append (its own tests are in test_txn_log and
    the integration test): answers the errors it is given."""

    def __init__(self, errors: list[tuple[ErrorCode, ...]]) -> None:
        self.errors = errors

    async def write_txn_markers(self, markers: Sequence[TxnMarker], timeout_ms: int) -> list[TxnMarkerResult]:
        return [TxnMarkerResult(m.producer_id, e) for m, e in zip(markers, self.errors, strict=True)]


class Groups:
    def __init__(self, fail_on: int = -1) -> None:
        self.calls: list[tuple[int, int, bool]] = []
        self.fail_on = fail_on

    def on_txn_marker(self, partition: int, producer_id: int, committed: bool) -> None:
        if partition == self.fail_on:
            raise RuntimeError("boom")
        self.calls.append((partition, producer_id, committed))


def services(errors: list[tuple[ErrorCode, ...]]) -> LocalBrokerServices:
    return LocalBrokerServices(1, "c", cast(Any, None), cast(Any, Appended(errors)), cast(Any, None), cast(Any, None))


# `Appended` is not a ReplicaManager: LocalBrokerServices, compiled, checks its arguments' types.
pytestmark = pytest.mark.pure_python

MARKERS = [
    TxnMarker(7, 0, True, 1, (("__consumer_offsets", 3), ("orders", 0), ("__consumer_offsets", 4))),
    TxnMarker(8, 0, False, 1, (("__consumer_offsets", 5),)),
]


def test_the_hook_hears_committed_offsets_markers_only() -> None:
    s = services([(ErrorCode.NONE, ErrorCode.NONE, ErrorCode.NOT_LEADER_OR_FOLLOWER), (ErrorCode.NONE,)])
    groups = Groups()
    s.txn_marker_listener = groups
    results = asyncio.run(s.write_txn_markers(MARKERS, 1000))
    assert groups.calls == [(3, 7, True), (5, 8, False)]
    assert [r.errors for r in results] == [
        (ErrorCode.NONE, ErrorCode.NONE, ErrorCode.NOT_LEADER_OR_FOLLOWER), (ErrorCode.NONE,),
    ]  # fmt: skip


def test_a_failing_hook_makes_that_partition_unknown_server_error() -> None:
    s = services([(ErrorCode.NONE, ErrorCode.NONE, ErrorCode.NONE), (ErrorCode.NONE,)])
    s.txn_marker_listener = Groups(fail_on=4)
    results = asyncio.run(s.write_txn_markers(MARKERS, 1000))
    assert results[0].errors == (ErrorCode.NONE, ErrorCode.NONE, ErrorCode.UNKNOWN_SERVER_ERROR)


def test_without_a_hook_the_answers_are_the_appends() -> None:
    s = services([(ErrorCode.NONE,) * 3, (ErrorCode.NONE,)])
    assert [r.errors for r in asyncio.run(s.write_txn_markers(MARKERS, 1000))] == [(ErrorCode.NONE,) * 3, (0,)]
