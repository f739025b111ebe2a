"""A `__transaction_state` partition for `TxnRuntime` tests: a log that keeps the committed
records (really encoded, really replayed) and appends that commit at once or when the test
says so."""

from __future__ import annotations

import asyncio

from broker.coordinator.append_queue import encode_batch
from broker.log.records import batch_records
from quorum.kafka_errors import ErrorCode

E = ErrorCode


class Log:
    """The committed records of the partition, read back as one batch (offsets 0..)."""

    def __init__(self) -> None:
        self.records: list[tuple[bytes, bytes | None]] = []

    @property
    def log_start_offset(self) -> int:
        return 0

    @property
    def log_end_offset(self) -> int:
        return len(self.records)

    def read(self, offset: int, max_bytes: int, *, max_offset: int, min_one_batch: bool) -> bytes:
        assert offset == 0
        return encode_batch(self.records, 1) if self.records else b""


class Host:
    def __init__(self, log: Log | None = None, epoch: int = 3) -> None:
        self.log = log or Log()
        self.epoch: int | None = epoch
        self.auto = True  # appends commit at once
        self.held: list[tuple[asyncio.Future[ErrorCode], bytes]] = []

    def partition_count(self) -> int:
        return 1

    def led_epoch(self, partition: int) -> int | None:
        return self.epoch

    def partition_log(self, partition: int) -> Log:
        return self.log

    def _commit(self, batch: bytes) -> None:
        for _off, _ts, rec in batch_records(batch, payloads=True):
            assert rec.key is not None
            self.log.records.append((bytes(rec.key), None if rec.value is None else bytes(rec.value)))

    async def append(self, partition: int, batch: bytes, timeout_ms: int) -> ErrorCode:
        if self.auto:
            self._commit(batch)
            return E.NONE
        fut: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        self.held.append((fut, batch))
        return await fut

    def finish(self, code: ErrorCode = E.NONE, *, written: bool | None = None) -> None:
        """Complete the held appends with `code`; their records go into the log if `written`
        (default: when NONE; a timed-out append may have been written too)."""
        held, self.held = self.held, []
        for fut, batch in held:
            if written if written is not None else code == E.NONE:
                self._commit(batch)
            fut.set_result(code)
