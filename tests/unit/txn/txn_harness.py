"""A transaction coordinator driven by hand: its records go through the real encoding into a
list that stands for the `__transaction_state` partition, appends succeed unless told not to."""

from __future__ import annotations

import itertools
from typing import Any

from broker.txn.coordinator import Outcome, TxnConfig, TxnCoordinator, Write, appends_of
from broker.txn.messages import (
    AddOffsetsRequest,
    AddPartitionsRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    InitProducerIdResult,
    MarkerRequest,
    TopicPartition,
    TxnResult,
)
from broker.txn.records import decode_key, decode_value, encode_key, encode_value
from quorum.kafka_errors import ErrorCode

E = ErrorCode
TID = "tx"


class Harness:
    def __init__(self, config: TxnConfig | None = None, coordinator_epoch: int = 7, value_version: int = 0) -> None:
        self.config = config or TxnConfig()
        self.value_version = value_version
        self.ids = itertools.count(1000)
        self.id_error: ErrorCode | None = None  # the producer-id source fails with this
        self.log: list[tuple[bytes, bytes | None]] = []  # committed records, encoded
        self.tokens = itertools.count(1)
        self.now = 0
        self.c = TxnCoordinator(self.config, coordinator_epoch, self.next_id)
        self.last = self.c.loaded(self.now)
        self.in_flight: list[list[Write]] = []  # appends: the records of one id in one
        self.markers: list[MarkerRequest] = []

    def next_id(self) -> tuple[ErrorCode, int]:
        if self.id_error is not None:
            return self.id_error, -1
        return E.NONE, next(self.ids)

    # ---------------------------------------------------------------- driving

    def take(self, out: Outcome) -> dict[int, Any]:
        """Keep `out`'s writes (in flight) and markers; its immediate answers."""
        self.in_flight += appends_of(out.writes)
        self.markers += out.markers
        return dict(out.replies)

    def complete(self, code: ErrorCode = E.NONE) -> dict[int, Any]:
        """Finish every append in flight with `code` (NONE: committed, into the log)."""
        replies: dict[int, Any] = {}
        while self.in_flight:
            append = self.in_flight.pop(0)
            if code == E.NONE:
                for w in append:
                    value = None if w.value is None else encode_value(w.value, self.value_version)
                    self.log.append((encode_key(w.key), value))
            replies.update(self.take(self.c.appended(append[0].key.transactional_id, code, self.now)))
        return replies

    def call(self, op: str, req: Any, code: ErrorCode = E.NONE) -> Any:
        """Run one request to its answer (its appends finish with `code`)."""
        token = next(self.tokens)
        replies = self.take(getattr(self.c, op)(req, token, self.now))
        if token not in replies:
            replies.update(self.complete(code))
        return replies[token]

    def init(self, tid: str = TID, timeout: int = 60_000, pid: int = -1, epoch: int = -1, code: ErrorCode = E.NONE,
             ) -> InitProducerIdResult:  # fmt: skip
        r = self.call("init_producer_id", InitProducerIdRequest(tid, timeout, pid, epoch), code)
        assert isinstance(r, InitProducerIdResult)
        return r

    def add(self, pid: int, epoch: int, *tps: TopicPartition, tid: str = TID, code: ErrorCode = E.NONE) -> ErrorCode:
        return self.call("add_partitions", AddPartitionsRequest(tid, pid, epoch, frozenset(tps)), code)  # type: ignore[no-any-return]

    def add_offsets(self, pid: int, epoch: int, group: str, tid: str = TID) -> ErrorCode:
        return self.call("add_offsets", AddOffsetsRequest(tid, pid, epoch, group))  # type: ignore[no-any-return]

    def end(self, pid: int, epoch: int, result: TxnResult, tid: str = TID, code: ErrorCode = E.NONE) -> ErrorCode:
        return self.call("end_txn", EndTxnRequest(tid, pid, epoch, result), code)  # type: ignore[no-any-return]

    def deliver(self, code: ErrorCode = E.NONE) -> None:
        """Answer every marker request sent so far with `code` for each of its partitions."""
        while self.markers:
            m = self.markers.pop(0)
            self.take(self.c.markers_written(m, dict.fromkeys(m.partitions, code), self.now))
            if code != E.NONE:
                return

    def finish(self) -> None:
        """Markers and appends all succeed until nothing is left to do."""
        while self.markers or self.in_flight:
            self.deliver()
            self.complete()

    def tick(self, now: int) -> None:
        self.now = now
        self.take(self.c.tick(now))

    def reload(self, coordinator_epoch: int = 8) -> TxnCoordinator:
        """A new coordinator (a new leader of the partition) replays the committed records."""
        c = TxnCoordinator(self.config, coordinator_epoch, self.next_id)
        for key, value in self.log:
            c.replay(decode_key(key), decode_value(value))
        self.c = c
        self.in_flight = []
        self.markers = []
        self.take(c.loaded(self.now))
        return c

    def state(self, tid: str = TID) -> Any:
        return self.c.txns[tid]
