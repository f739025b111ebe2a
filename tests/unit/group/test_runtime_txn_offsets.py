"""The runtime's side of transactional offsets (`GroupCoordinator.txn_commit`,
`on_txn_marker`, loading): the batch it writes, byte for byte; answers after the
append; markers replayed on load give the state the live coordinator had.

The partition is an in-memory log that assigns offsets as a leader does (patching the base
offset, which the CRC does not cover); transaction markers are control batches written into
it as the marker handler writes them."""

from __future__ import annotations

import asyncio
import struct

import pytest
from crc32c import crc32c

from broker.group.messages import CommitPartition, CommitRequest, TxnCommitRequest
from broker.group.records import OffsetKey, OffsetValue, encode_key, encode_value
from broker.group.runtime import GroupCoordinator
from broker.group.shard import CoordinatorConfig
from broker.log.control_records import EndTxnMarker, encode_marker_batch
from broker.log.records import batch_records
from quorum.kafka_errors import ErrorCode
from quorum.storage.batch_layout import ATTR_TRANSACTIONAL, HEADER

E = ErrorCode
NOW = 1_700_000_000_000
PID = 4242


class MemLog:
    """A partition log in memory: batches at the offsets a leader gives them."""

    def __init__(self) -> None:
        self.batches: list[bytes] = []
        self.end = 0

    @property
    def log_start_offset(self) -> int:
        return 0

    @property
    def log_end_offset(self) -> int:
        return self.end

    def append(self, batch: bytes) -> None:
        count = HEADER.unpack_from(batch, 0)[12]
        self.batches.append(struct.pack(">q", self.end) + batch[8:])
        self.end += count

    def read(self, offset: int, max_bytes: int, *, max_offset: int, min_one_batch: bool) -> bytes:
        out = b""
        for b in self.batches:
            base, last_delta = HEADER.unpack_from(b, 0)[0], HEADER.unpack_from(b, 0)[6]
            if base + last_delta >= offset and base < max_offset:
                out += b
        return out


class Host:
    """Leads partition 0 of a one-partition `__consumer_offsets`; appends go to `log` and
    answer `result` (or wait on `gate` when set)."""

    def __init__(self, log: MemLog) -> None:
        self.log = log
        self.written: list[bytes] = []  # as the coordinator handed them over
        self.result = E.NONE
        self.gate: asyncio.Event | None = None

    def offsets_partitions(self) -> int:
        return 1

    def led_epoch(self, partition: int) -> int | None:
        return 0

    def partition_log(self, partition: int) -> MemLog:
        return self.log

    async def append(self, partition: int, batch: bytes, timeout_ms: int) -> ErrorCode:
        self.written.append(batch)
        if self.gate is not None:
            await self.gate.wait()
        if self.result == E.NONE:
            self.log.append(batch)
        return self.result

    def topic(self, name: str) -> None:
        return None

    def topic_name(self, topic_id: object) -> None:
        return None


def marker(log: MemLog, pid: int, committed: bool) -> None:
    """What WriteTxnMarkers writes (`broker.log.control_records`): a control batch of the producer."""
    log.append(encode_marker_batch(pid, 0, EndTxnMarker(committed, coordinator_epoch=3), NOW))


def txn_req(offset: int, *, partition: int = 0, pid: int = PID, epoch: int = 5) -> TxnCommitRequest:
    return TxnCommitRequest("g", pid, epoch, (CommitPartition("t", partition, offset, 2, "m"),), transactional_id="tx")


def plain_req(offset: int, *, partition: int = 0) -> CommitRequest:
    return CommitRequest("g", "", None, -1, -1, (CommitPartition("t", partition, offset),), 8)


async def started(log: MemLog) -> tuple[Host, GroupCoordinator]:
    host = Host(log)
    coordinator = GroupCoordinator(4, host, CoordinatorConfig(), clock=lambda: NOW)
    coordinator.on_metadata()
    for _ in range(20):
        await asyncio.sleep(0)
    assert coordinator.is_coordinator("g") == E.NONE
    return host, coordinator


async def view(c: GroupCoordinator) -> list[tuple[ErrorCode, list[tuple[int, ErrorCode]]]]:
    """What OffsetFetch answers for partitions 0..2, without and with require_stable."""
    out = []
    for stable in (False, True):
        code, offsets = await c.fetch_offsets("g", [("t", p) for p in range(3)], require_stable=stable)
        out.append((code, [(o.offset, o.error) for o in offsets]))
    return out


def test_the_transactional_batch_is_the_producers_with_the_transactional_bit_and_sequence_0() -> None:
    """Golden bytes: Kafka 3.9's coordinator runtime builds its batch with the producer's id and
    epoch, baseSequence 0, isTransactional, CreateTime, no partition leader epoch."""

    async def run() -> None:
        host, c = await started(MemLog())
        assert await c.txn_commit(txn_req(77)) == [E.NONE]
        (batch,) = host.written
        fields = HEADER.unpack_from(batch, 0)
        # baseOffset, length, leaderEpoch, magic, crc, attributes, lastOffsetDelta, baseTimestamp,
        # maxTimestamp, producerId, producerEpoch, baseSequence, recordCount
        assert fields[0] == 0 and fields[2] == -1 and fields[3] == 2
        assert fields[5] == ATTR_TRANSACTIONAL and fields[6] == 0
        assert fields[7] == fields[8] == NOW
        assert fields[9:] == (PID, 5, 0, 1)
        key = encode_key(OffsetKey("g", "t", 0))
        value = encode_value(OffsetValue(77, 2, "m", NOW))
        assert key == bytes.fromhex("00010001" + b"g".hex() + "0001" + b"t".hex() + "00000000")
        assert value == bytes.fromhex("0003000000000000004d000000020001" + b"m".hex() + f"{NOW:016x}")
        ((offset, ts, record),) = list(batch_records(batch, payloads=True))
        assert (offset, ts, bytes(record.key or b""), bytes(record.value or b"")) == (0, NOW, key, value)
        # 61 header bytes + 1 + 43 record bytes; varints zigzag: record length 43 -> 0x56, key
        # length 12 -> 0x18, value length 25 -> 0x32; attributes 0, deltas 0, no headers.
        assert batch == bytes.fromhex(
            "0000000000000000" "0000005d" "ffffffff" "02" + batch[17:21].hex() + "0010" "00000000"
            + f"{NOW:016x}" * 2 + f"{PID:016x}" "0005" "00000000" "00000001"
            + "56" "00" "00" "00" "18" + key.hex() + "32" + value.hex() + "00"
        )  # fmt: skip
        assert fields[4] == crc32c(batch[21:])  # CRC-32C of everything after the crc field
        await c.close()

    asyncio.run(run())


@pytest.mark.parametrize(
    ("refused", "answered"),
    [
        (E.INVALID_PRODUCER_EPOCH, E.INVALID_PRODUCER_EPOCH),  # the log's producer state: an older epoch
        (E.PRODUCER_FENCED, E.PRODUCER_FENCED),
        (E.NOT_ENOUGH_REPLICAS, E.COORDINATOR_NOT_AVAILABLE),  # Kafka's mapping of append errors
        (E.NOT_LEADER_OR_FOLLOWER, E.NOT_COORDINATOR),
    ],
)
def test_a_txn_commit_is_answered_after_its_append_and_an_append_error_undoes_it(
    refused: ErrorCode, answered: ErrorCode
) -> None:
    async def run() -> None:
        host, c = await started(MemLog())
        host.gate = asyncio.Event()
        answer = asyncio.create_task(c.txn_commit(txn_req(7)))
        for _ in range(10):
            await asyncio.sleep(0)
        assert not answer.done()  # waits for the append
        host.gate.set()
        assert await answer == [E.NONE]
        assert (await view(c))[1][1][0] == (-1, E.UNSTABLE_OFFSET_COMMIT)
        host.gate = None
        host.result = refused
        assert await c.txn_commit(txn_req(9, partition=1, epoch=4)) == [answered]
        assert (await view(c))[1][1][1] == (-1, E.NONE)  # not pending: the write failed
        await c.close()

    asyncio.run(run())


def test_a_transactional_write_goes_in_a_batch_of_its_own() -> None:
    async def run() -> None:
        host, c = await started(MemLog())
        host.gate = asyncio.Event()
        first = asyncio.create_task(c.commit(plain_req(1)))
        for _ in range(10):
            await asyncio.sleep(0)
        rest = [
            asyncio.create_task(c.commit(plain_req(2))),
            asyncio.create_task(c.txn_commit(txn_req(3))),
            asyncio.create_task(c.commit(plain_req(4))),
            asyncio.create_task(c.commit(plain_req(5))),
        ]
        for _ in range(10):
            await asyncio.sleep(0)
        host.gate.set()
        assert await first == [E.NONE] and [await r for r in rest] == [[E.NONE]] * 4
        shapes = [(HEADER.unpack_from(b, 0)[5], HEADER.unpack_from(b, 0)[9], HEADER.unpack_from(b, 0)[12])
                  for b in host.written]  # fmt: skip
        assert shapes == [(0, -1, 1), (0, -1, 1), (ATTR_TRANSACTIONAL, PID, 1), (0, -1, 2)]
        await c.close()

    asyncio.run(run())


def test_after_a_coordinator_move_the_replay_gives_the_state_the_old_coordinator_had() -> None:
    async def run() -> None:
        log = MemLog()
        _host, old = await started(log)
        assert await old.commit(plain_req(3)) == [E.NONE]
        assert await old.txn_commit(txn_req(7, pid=1)) == [E.NONE]  # committed below
        assert await old.txn_commit(txn_req(8, pid=2, partition=1)) == [E.NONE]  # aborted below
        assert await old.commit(plain_req(4, partition=1)) == [E.NONE]
        assert await old.txn_commit(txn_req(6, pid=3, partition=1)) == [E.NONE]  # committed, after the plain one
        assert await old.txn_commit(txn_req(9, pid=4, partition=2)) == [E.NONE]  # left open
        for pid, committed in ((1, True), (2, False), (3, True)):
            marker(log, pid, committed)
            old.on_txn_marker(0, pid, committed)  # the hook, once the marker committed
        before = await view(old)
        assert before == [
            (E.NONE, [(7, E.NONE), (6, E.NONE), (-1, E.NONE)]),
            (E.NONE, [(7, E.NONE), (6, E.NONE), (-1, E.UNSTABLE_OFFSET_COMMIT)]),
        ]
        await old.close()
        _host, new = await started(log)  # the new leader loads the same partition
        assert await view(new) == before
        assert set(new.partitions[0].shard.pending_txn) == {4}
        new.on_txn_marker(0, 4, True)
        assert (await view(new))[1][1][2] == (9, E.NONE)
        await new.close()

    asyncio.run(run())


def test_a_completion_that_comes_while_the_partition_loads_is_applied_after_the_replay() -> None:
    async def run() -> None:
        log = MemLog()
        _host, old = await started(log)
        assert await old.txn_commit(txn_req(7)) == [E.NONE]
        await old.close()
        host = Host(log)
        new = GroupCoordinator(4, host, CoordinatorConfig(), clock=lambda: NOW)
        new.on_metadata()
        assert new.is_coordinator("g") == E.COORDINATOR_LOAD_IN_PROGRESS
        # The marker committed after the replay read the log's end: only the hook tells.
        new.on_txn_marker(0, PID, True)
        for _ in range(20):
            await asyncio.sleep(0)
        assert (await view(new))[1][1][0] == (7, E.NONE)
        new.on_txn_marker(7, PID, True)  # a partition it does not lead: ignored
        await new.close()

    asyncio.run(run())


class VerifyingHost(Host):
    """A host whose appends record the KIP-890 guard they were handed."""

    def __init__(self, log: MemLog) -> None:
        super().__init__(log)
        self.guards: list[object] = []

    async def append(self, partition: int, batch: bytes, timeout_ms: int, *, verification: object = "off") -> ErrorCode:
        self.guards.append(verification)
        return await super().append(partition, batch, timeout_ms)


def test_kip890_a_txn_commit_is_verified_first_and_appended_with_its_guard() -> None:
    """With verification on, the coordinator asks (`txn_verify`) before the shard sees the
    commit: a refusal is the answer and nothing is written; a verified commit is appended with
    the guard it got; after the producer's marker, no guard is kept (None: the log then takes
    the batch only into a transaction open there)."""
    from broker.log.producer_state import VerificationGuard

    async def run() -> None:
        host = VerifyingHost(MemLog())
        c = GroupCoordinator(4, host, CoordinatorConfig(), clock=lambda: NOW)
        c.on_metadata()
        for _ in range(20):
            await asyncio.sleep(0)
        asked: list[tuple[int, str, int, int]] = []
        guard = VerificationGuard()
        answer = E.TRANSACTION_ABORTABLE

        async def verify(partition: int, tid: str, pid: int, epoch: int) -> tuple[VerificationGuard | None, E]:
            asked.append((partition, tid, pid, epoch))
            return guard, answer

        c.txn_verify = verify
        assert await c.txn_commit(txn_req(7)) == [E.TRANSACTION_ABORTABLE]
        assert host.written == [] and asked == [(0, "tx", PID, 5)]
        answer = E.PRODUCER_FENCED
        assert await c.txn_commit(txn_req(7)) == [E.INVALID_PRODUCER_EPOCH]
        answer = E.NETWORK_EXCEPTION
        assert await c.txn_commit(txn_req(7)) == [E.COORDINATOR_LOAD_IN_PROGRESS]
        answer = E.NONE
        assert await c.txn_commit(txn_req(8)) == [E.NONE]
        assert host.guards == [guard] and len(host.written) == 1
        c.on_txn_marker(0, PID, committed=True)
        assert PID not in c.partitions[0].txn_guards  # the marker dropped it
        await c.close()

    asyncio.run(run())
