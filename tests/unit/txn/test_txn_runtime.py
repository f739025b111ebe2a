"""`TxnRuntime` (the transaction coordinator's IO) over the real sans-IO `TxnCoordinator`, with a
partition host whose log keeps the committed records (really encoded, really replayed) and
whose appends complete at once or when the test says so."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from broker.txn.coordinator import TxnConfig
from broker.txn.messages import (
    AddPartitionsRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    InitProducerIdResult,
    MarkerRequest,
    TxnResult,
)
from broker.txn.metadata import TxnState
from broker.txn.records import decode_value
from broker.txn.runtime import TxnRuntime
from quorum.kafka_errors import ErrorCode
from tests.unit.txn.runtime_host import Host

E = ErrorCode
TID = "tx-1"
TP = ("orders", 0)


class Markers:
    def __init__(self) -> None:
        self.sent: list[MarkerRequest] = []
        self.arrived = asyncio.Event()

    def send(self, request: MarkerRequest) -> None:
        self.sent.append(request)
        self.arrived.set()


async def spin(times: int = 20) -> None:
    for _ in range(times):
        await asyncio.sleep(0)


async def started(host: Host, config: TxnConfig | None = None) -> tuple[TxnRuntime, Markers]:
    ids = iter(range(1000, 2000))
    runtime = TxnRuntime(4, host, config or TxnConfig(), lambda: (E.NONE, next(ids)))
    markers = Markers()
    runtime.markers = markers
    runtime.on_metadata()
    assert runtime.is_coordinator(TID) == E.COORDINATOR_LOAD_IN_PROGRESS  # until its records are replayed
    await spin()
    assert runtime.is_coordinator(TID) == E.NONE
    return runtime, markers


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(coro)


async def open_transaction(runtime: TxnRuntime, timeout_ms: int = 60_000) -> InitProducerIdResult:
    init = await runtime.init_producer_id(InitProducerIdRequest(TID, timeout_ms))
    assert init.error == E.NONE
    req = AddPartitionsRequest(TID, init.producer_id, init.producer_epoch, frozenset({TP}))
    assert await runtime.add_partitions(req) == E.NONE
    return init


def test_an_answer_waits_for_its_record_to_commit() -> None:
    async def go() -> None:
        host = Host()
        runtime, _ = await started(host)
        host.auto = False
        init = asyncio.create_task(runtime.init_producer_id(InitProducerIdRequest(TID, 60_000)))
        await spin()
        assert not init.done() and len(host.held) == 1  # written, not committed: no answer yet
        host.finish()
        result = await init
        assert (result.error, result.producer_id, result.producer_epoch) == (E.NONE, 1000, 0)
        assert runtime.describe(TID).state == "Empty"
        await runtime.close()

    run(go())


def test_a_failed_append_answers_its_mapped_error_and_changes_nothing() -> None:
    async def go() -> None:
        host = Host()
        runtime, _ = await started(host)
        init = await open_transaction(runtime)
        host.auto = False
        end = asyncio.create_task(runtime.end_txn(EndTxnRequest(TID, init.producer_id, init.producer_epoch,
                                                                TxnResult.COMMIT)))  # fmt: skip
        await spin()
        host.finish(E.NOT_ENOUGH_REPLICAS)
        assert await end == E.COORDINATOR_NOT_AVAILABLE
        assert runtime.describe(TID).state == "Ongoing"  # the PrepareCommit never committed
        host.auto = True
        req = EndTxnRequest(TID, init.producer_id, init.producer_epoch, TxnResult.COMMIT)
        assert await runtime.end_txn(req) == E.NONE  # the client's retry goes through
        assert runtime.describe(TID).state == "PrepareCommit"
        await runtime.close()

    run(go())


def test_the_markers_complete_the_transaction() -> None:
    async def go() -> None:
        host = Host()
        runtime, markers = await started(host)
        init = await open_transaction(runtime)
        req = EndTxnRequest(TID, init.producer_id, init.producer_epoch, TxnResult.COMMIT)
        assert await runtime.end_txn(req) == E.NONE
        (sent,) = markers.sent
        assert (sent.result, sent.partitions, sent.coordinator_epoch) == (TxnResult.COMMIT, frozenset({TP}), 3)
        runtime.markers_written(sent, {TP: E.NONE})
        await spin()
        assert runtime.describe(TID).state == "CompleteCommit"
        # A report for an older coordinator epoch (a reloaded partition) is ignored.
        runtime.markers_written(MarkerRequest(TID, init.producer_id, init.producer_epoch, 2, TxnResult.COMMIT,
                                              frozenset({TP})), {TP: E.NONE})  # fmt: skip
        await runtime.close()

    run(go())


def test_a_held_request_starts_its_transaction_in_the_completions_batch() -> None:
    async def go() -> None:
        host = Host()
        runtime, markers = await started(host)
        init = await open_transaction(runtime)
        end = EndTxnRequest(TID, init.producer_id, init.producer_epoch, TxnResult.COMMIT)
        assert await runtime.end_txn(end) == E.NONE
        (sent,) = markers.sent
        nxt = AddPartitionsRequest(TID, init.producer_id, init.producer_epoch, frozenset({("orders", 1)}))
        held = asyncio.create_task(runtime.add_partitions(nxt))
        await spin()
        assert not held.done()  # held while the previous transaction completes
        host.auto = False
        runtime.markers_written(sent, {TP: E.NONE})
        await spin()
        assert len(host.held) == 1  # one append: CompleteCommit and the next transaction's Ongoing
        assert not held.done()
        host.finish()
        assert await held == E.NONE
        assert runtime.describe(TID).state == "Ongoing"
        states = [decode_value(v).transaction_status for _, v in host.log.records[-2:] if v is not None]
        assert states == [TxnState.COMPLETE_COMMIT, TxnState.ONGOING]
        await runtime.close()

    run(go())


def test_a_new_leader_replays_the_log_and_resumes_the_markers() -> None:
    async def go() -> None:
        host = Host()
        first, markers = await started(host)
        init = await open_transaction(first)
        req = EndTxnRequest(TID, init.producer_id, init.producer_epoch, TxnResult.ABORT)
        assert await first.end_txn(req) == E.NONE
        await first.close()
        # Another broker leads the partition now (epoch 4), over the same log.
        second, resumed = await started(Host(host.log, epoch=4))
        description = second.describe(TID)
        assert (description.state, description.producer_id, description.topics) == ("PrepareAbort", 1000,
                                                                                    (("orders", (0,)),))  # fmt: skip
        (sent,) = resumed.sent
        assert (sent.result, sent.coordinator_epoch) == (TxnResult.ABORT, 4)
        second.markers_written(sent, {TP: E.NONE})
        await spin()
        assert second.describe(TID).state == "CompleteAbort"
        await second.close()

    run(go())


def test_losing_leadership_answers_not_coordinator() -> None:
    async def go() -> None:
        host = Host()
        runtime, _ = await started(host)
        host.auto = False
        init = asyncio.create_task(runtime.init_producer_id(InitProducerIdRequest(TID, 60_000)))
        await spin()
        host.epoch = None
        runtime.on_metadata()
        assert (await init).error == E.NOT_COORDINATOR
        assert runtime.is_coordinator(TID) == E.NOT_COORDINATOR
        assert (await runtime.init_producer_id(InitProducerIdRequest(TID, 60_000))).error == E.NOT_COORDINATOR
        host.finish()  # the append in flight finishing later changes nothing
        await spin()
        await runtime.close()

    run(go())


def test_a_transaction_open_past_its_timeout_is_aborted_by_the_timer() -> None:
    async def go() -> None:
        host = Host()
        config = TxnConfig(abort_timed_out_transaction_cleanup_interval_ms=20)
        runtime, markers = await started(host, config)
        init = await open_transaction(runtime, timeout_ms=50)
        async with asyncio.timeout(5):
            await markers.arrived.wait()
        (sent,) = markers.sent
        assert sent.result == TxnResult.ABORT
        assert sent.producer_epoch == init.producer_epoch + 1  # the producer is fenced
        assert runtime.describe(TID).state == "PrepareAbort"
        await runtime.close()

    run(go())


def test_an_append_that_timed_out_reloads_the_partition_so_the_state_follows_the_log() -> None:
    async def go() -> None:
        host = Host()
        runtime, markers = await started(host)
        init = await open_transaction(runtime)
        host.auto = False
        req = EndTxnRequest(TID, init.producer_id, init.producer_epoch, TxnResult.COMMIT)
        end = asyncio.create_task(runtime.end_txn(req))
        await spin()
        # The PrepareCommit is in the leader's log but the replicas did not confirm in time:
        # it may still commit, so the coordinator is not told it failed.
        host.finish(E.REQUEST_TIMED_OUT, written=True)
        assert await end == E.NOT_COORDINATOR  # the client finds the coordinator again and retries
        host.auto = True
        await spin()
        assert runtime.is_coordinator(TID) == E.NONE  # loaded again, from the log
        assert runtime.describe(TID).state == "PrepareCommit"
        assert [m.result for m in markers.sent] == [TxnResult.COMMIT]  # its markers resumed
        assert await runtime.end_txn(req) == E.CONCURRENT_TRANSACTIONS  # the retry sees the commit under way
        await runtime.close()

    run(go())
