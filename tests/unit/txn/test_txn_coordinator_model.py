"""A hypothesis state machine over random sequences of transactional requests from current and
zombie producers, append results (committed or failed), marker results, time, and coordinator
reloads (a crash: records in flight committed or lost at random, then a new coordinator
replays the committed records). Checked after every step:

- no transaction both committed and aborted: its prepared and completed records, its markers
  and the NONE answers to EndTxn all agree on one result;
- a fenced epoch never gets NONE again: neither an epoch answered PRODUCER_FENCED nor one
  below an epoch InitProducerId handed out for the same producer id;
- after a reload the state equals the state before (plus the records in flight that the crash
  committed);
- `drain` (markers and appends all succeed, time passes) takes every prepared transaction to
  CompleteCommit / CompleteAbort, and at the end every request has its answer (those held
  while the previous transaction completed too).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from broker.txn.coordinator import Outcome, TxnConfig, TxnCoordinator, Write, appends_of
from broker.txn.messages import (
    AddOffsetsRequest,
    AddPartitionsRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    InitProducerIdResult,
    MarkerRequest,
    TxnResult,
)
from broker.txn.metadata import COMPLETED, PREPARED, TxnState
from broker.txn.records import TransactionLogValue, decode_key, decode_value, encode_key, encode_value
from quorum.kafka_errors import ErrorCode

E = ErrorCode
TIDS = ("t0", "t1")
PARTITIONS = (("a", 0), ("a", 1), ("b", 0))
CONFIG = TxnConfig(
    transactional_id_expiration_ms=60_000,
    remove_expired_transaction_cleanup_interval_ms=20_000,
    abort_timed_out_transaction_cleanup_interval_ms=5_000,
)
TIMEOUTS = st.sampled_from([1_000, 30_000, 30_000, 30_000, 0])  # 0: INVALID_TRANSACTION_TIMEOUT
SETTLE = st.integers(0, 3).map(bool)  # mostly: the request's appends commit at once
APPEND_FAILURES = (E.NOT_ENOUGH_REPLICAS, E.NOT_LEADER_OR_FOLLOWER, E.MESSAGE_TOO_LARGE)


@dataclass(frozen=True, slots=True)
class Asked:
    op: str
    tid: str
    producer_id: int
    producer_epoch: int
    result: TxnResult | None = None


def result_of(status: int) -> TxnResult | None:
    state = TxnState(status)
    if state in (TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT):
        return TxnResult.COMMIT
    if state in (TxnState.PREPARE_ABORT, TxnState.COMPLETE_ABORT):
        return TxnResult.ABORT
    return None


class TxnCoordinatorModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.ids = itertools.count(1000)
        self.ids_available = True
        self.epoch = 1
        self.now = 0
        self.c = TxnCoordinator(CONFIG, self.epoch, self.next_id)
        self.log: list[tuple[bytes, bytes | None]] = []
        # Appends (the records of one id go in one: a completion and the next transaction's
        # first record), appended in order, completed in order.
        self.in_flight: list[list[Write]] = []
        self.markers: list[tuple[int, MarkerRequest]] = []  # (the transaction's number, its markers)
        # The partitions that hold a marker of each transaction (tid, number), and the
        # partitions each prepared transaction needs them in.
        self.marked: dict[tuple[str, int], set[tuple[str, int]]] = {}
        self.needed: dict[tuple[str, int], frozenset[tuple[str, int]]] = {}
        self.tokens = itertools.count(1)
        self.asked: dict[int, Asked] = {}
        self.creds: dict[str, list[tuple[int, int]]] = {t: [] for t in TIDS}  # every (pid, epoch) handed out
        # Producer id -> the highest epoch InitProducerId answered or a committed record holds.
        self.granted: dict[int, int] = {}
        self.fenced: set[tuple[int, int]] = set()  # (producer id, epoch) answered PRODUCER_FENCED
        # Per transactional id, from the committed records: the number of its current
        # transaction and each transaction's result.
        self.txn_no: dict[str, int] = dict.fromkeys(TIDS, 0)
        self.last_status: dict[str, int | None] = dict.fromkeys(TIDS, None)
        self.results: dict[tuple[str, int], TxnResult] = {}
        self.take(self.c.loaded(self.now))

    def next_id(self) -> tuple[ErrorCode, int]:
        return (E.NONE, next(self.ids)) if self.ids_available else (E.COORDINATOR_LOAD_IN_PROGRESS, -1)

    # ---------------------------------------------------------------- bookkeeping

    def commit_record(self, w: Write) -> None:
        tid = w.key.transactional_id
        self.log.append((encode_key(w.key), None if w.value is None else encode_value(w.value)))
        if w.value is None:
            self.last_status[tid] = None
            return
        status = w.value.transaction_status
        pid = w.value.producer_id
        self.granted[pid] = max(self.granted.get(pid, -1), w.value.producer_epoch)  # older epochs are fenced
        if status == TxnState.ONGOING and self.last_status[tid] != TxnState.ONGOING:
            self.txn_no[tid] += 1
        self.last_status[tid] = status
        result = result_of(status)
        if result is not None:
            key = (tid, self.txn_no[tid])
            assert self.results.setdefault(key, result) == result, f"transaction {key} both committed and aborted"
            if TxnState(status) in PREPARED:
                self.needed[key] = frozenset(
                    (p.topic, i) for p in w.value.transaction_partitions or () for i in p.partition_ids
                )
            else:  # complete: only once every partition holds its marker
                missing = self.needed.get(key, frozenset()) - self.marked.get(key, set())
                assert not missing, f"transaction {key} completed without markers in {missing}"

    def take(self, out: Outcome) -> None:
        self.in_flight += appends_of(out.writes)
        for m in out.markers:
            # Markers go out only for the transaction the log says is prepared, with its result.
            assert self.results.get((m.transactional_id, self.txn_no[m.transactional_id])) == m.result
        self.markers += [(self.txn_no[m.transactional_id], m) for m in out.markers]
        for token, reply in out.replies.items():
            self.answered(self.asked.pop(token), reply)

    def answered(self, asked: Asked, reply: Any) -> None:
        if asked.op == "init":
            assert isinstance(reply, InitProducerIdResult)
            if reply.error == E.NONE:
                self.creds[asked.tid].append((reply.producer_id, reply.producer_epoch))
                self.granted[reply.producer_id] = max(self.granted.get(reply.producer_id, -1), reply.producer_epoch)
            return
        assert isinstance(reply, ErrorCode)
        self.check_answer(asked, reply)

    def check_answer(self, asked: Asked, code: ErrorCode) -> None:
        pid, epoch = asked.producer_id, asked.producer_epoch
        if code == E.PRODUCER_FENCED:
            self.fenced.add((pid, epoch))
        elif code == E.NONE:
            assert (pid, epoch) not in self.fenced, f"{asked}: NONE after PRODUCER_FENCED"
            assert epoch >= self.granted.get(pid, -1), f"{asked}: NONE at an epoch below one handed out or written"
            if asked.op == "end":
                result = self.results.get((asked.tid, self.txn_no[asked.tid]))
                assert result == asked.result, f"{asked}: NONE, but the transaction's result is {result}"

    def cred(self, tid: str, pick: int, bogus: bool) -> tuple[int, int]:
        creds = self.creds[tid]
        if bogus or not creds:
            return (999, pick % 3)
        return creds[-1] if pick < 2 else creds[-1 - pick % len(creds)]  # mostly the latest, sometimes a zombie's

    def ask(self, op: str, asked: Asked, req: Any, settle: bool) -> None:
        token = next(self.tokens)
        self.asked[token] = asked
        self.take(getattr(self.c, op)(req, token, self.now))
        if settle:  # the appends in flight commit now
            while self.in_flight:
                self.append_completes(1, E.NONE)

    # ---------------------------------------------------------------- requests

    @rule(tid=st.sampled_from(TIDS), pick=st.integers(0, 3), expected=st.booleans(),
          timeout=TIMEOUTS, ids=st.integers(0, 7), settle=SETTLE)  # fmt: skip
    def init(self, tid: str, pick: int, expected: bool, timeout: int, ids: int, settle: bool) -> None:
        self.ids_available = ids != 0
        pid, epoch = self.cred(tid, pick, False) if expected and self.creds[tid] else (-1, -1)
        req = InitProducerIdRequest(tid, timeout, pid, epoch)
        self.ask("init_producer_id", Asked("init", tid, pid, epoch), req, settle)

    @rule(tid=st.sampled_from(TIDS), pick=st.integers(0, 3), bogus=st.booleans(),
          parts=st.sets(st.sampled_from(PARTITIONS), max_size=2), settle=SETTLE)  # fmt: skip
    def add(self, tid: str, pick: int, bogus: bool, parts: set[tuple[str, int]], settle: bool) -> None:
        pid, epoch = self.cred(tid, pick, bogus and pick == 0)
        req = AddPartitionsRequest(tid, pid, epoch, frozenset(parts))
        self.ask("add_partitions", Asked("add", tid, pid, epoch), req, settle)

    @rule(tid=st.sampled_from(TIDS), pick=st.integers(0, 3), group=st.sampled_from(["g1", "g2"]), settle=SETTLE)
    def add_offsets(self, tid: str, pick: int, group: str, settle: bool) -> None:
        pid, epoch = self.cred(tid, pick, False)
        self.ask("add_offsets", Asked("offsets", tid, pid, epoch), AddOffsetsRequest(tid, pid, epoch, group), settle)

    @rule(tid=st.sampled_from(TIDS), pick=st.integers(0, 3), parts=st.sets(st.sampled_from(PARTITIONS), min_size=1))
    def verify(self, tid: str, pick: int, parts: set[tuple[str, int]]) -> None:
        pid, epoch = self.cred(tid, pick, False)
        answers = self.c.verify_partitions(AddPartitionsRequest(tid, pid, epoch, frozenset(parts)))
        assert set(answers) == parts
        for code in set(answers.values()):
            self.check_answer(Asked("verify", tid, pid, epoch), code)

    @rule(tid=st.sampled_from(TIDS), pick=st.integers(0, 3), commit=st.booleans(), settle=SETTLE)
    def end(self, tid: str, pick: int, commit: bool, settle: bool) -> None:
        pid, epoch = self.cred(tid, pick, False)
        result = TxnResult.COMMIT if commit else TxnResult.ABORT
        self.ask("end_txn", Asked("end", tid, pid, epoch, result), EndTxnRequest(tid, pid, epoch, result), settle)

    @rule(tid=st.sampled_from(TIDS), commit=st.booleans(), parts=st.sets(st.sampled_from(PARTITIONS), min_size=1))
    def transaction(self, tid: str, commit: bool, parts: set[tuple[str, int]]) -> None:
        """The latest producer of `tid` runs a whole transaction (its appends commit at once)."""
        if not self.creds[tid]:
            self.init(tid, 0, False, 30_000, 1, True)
        self.add(tid, 0, False, parts, True)
        self.end(tid, 0, commit, True)

    # ---------------------------------------------------------------- the world

    @precondition(lambda self: self.in_flight)
    @rule(ok=st.integers(0, 4), failure=st.sampled_from(APPEND_FAILURES))
    def append_completes(self, ok: int, failure: ErrorCode) -> None:
        append = self.in_flight.pop(0)
        code = E.NONE if ok else failure
        if code == E.NONE:
            for w in append:
                self.commit_record(w)
        self.take(self.c.appended(append[0].key.transactional_id, code, self.now))

    @precondition(lambda self: self.markers)
    @rule(i=st.integers(0, 10), ok=st.integers(0, 3), split=st.booleans())
    def marker_result(self, i: int, ok: int, split: bool) -> None:
        no, m = self.markers.pop(i % len(self.markers))
        parts = sorted(m.partitions)
        results = {tp: E.NONE if ok or (split and n) else E.NOT_LEADER_OR_FOLLOWER for n, tp in enumerate(parts)}
        self.write_markers(no, m, results)

    def write_markers(self, no: int, m: MarkerRequest, results: dict[tuple[str, int], ErrorCode]) -> None:
        """The partitions' leaders write the markers that succeed, and report to the coordinator."""
        marked = self.marked.setdefault((m.transactional_id, no), set())
        marked.update(tp for tp, code in results.items() if code == E.NONE)
        self.take(self.c.markers_written(m, results, self.now))

    @rule(dt=st.sampled_from([1, 100, 1_000, 5_000, 70_000]))
    def time_passes(self, dt: int) -> None:
        self.now += dt
        self.take(self.c.tick(self.now))

    @rule(commit=st.lists(st.booleans(), max_size=8))
    def crash_and_reload(self, commit: list[bool]) -> None:
        """The leader of the partition dies; the records in flight are committed or lost (in
        order: a lost one loses the ones after it); a new leader replays the log."""
        expected = dict(self.c.durable_state())
        kept = list(itertools.takewhile(bool, commit))[: len(self.in_flight)]
        for append in self.in_flight[: len(kept)]:
            for w in append:
                self.commit_record(w)
                tid = w.key.transactional_id
                if w.value is None:
                    expected.pop(tid, None)
                else:
                    expected[tid] = w.value
        self.in_flight.clear()
        self.asked.clear()  # their answers are lost with the connection
        self.epoch += 1
        self.c = TxnCoordinator(CONFIG, self.epoch, self.next_id)
        for key, value in self.log:
            self.c.replay(decode_key(key), decode_value(value))
        self.take(self.c.loaded(self.now))
        assert self.c.durable_state() == expected

    @rule()
    def drain(self) -> None:
        self.settle_everything(may_reload=True)

    def settle_everything(self, may_reload: bool) -> None:
        """Every marker and append succeeds and time passes: nothing stays prepared."""
        for _ in range(50):
            prepared_ids = [tid for tid, m in self.c.txns.items() if m.state in PREPARED]
            if not self.in_flight and not self.markers and not prepared_ids:
                break
            while self.markers:
                no, m = self.markers.pop(0)
                self.write_markers(no, m, dict.fromkeys(m.partitions, E.NONE))
            while self.in_flight:
                append = self.in_flight.pop(0)
                for w in append:
                    self.commit_record(w)
                self.take(self.c.appended(append[0].key.transactional_id, E.NONE, self.now))
            self.now += CONFIG.retry_backoff_ms
            self.take(self.c.tick(self.now))
        prepared = {tid: m.state for tid, m in self.c.txns.items() if m.state in PREPARED}
        # A prepared transaction whose completion record failed for good (NOT_COORDINATOR)
        # waits for the next leader, as in Kafka: one reload completes it.
        if prepared and may_reload:
            self.crash_and_reload([])
            self.settle_everything(may_reload=False)
            return
        assert not prepared, f"still prepared after every marker was written: {prepared}"

    # ---------------------------------------------------------------- invariants

    @invariant()
    def one_append_in_flight_per_id(self) -> None:
        tids = [w.key.transactional_id for append in self.in_flight for w in append[:1]]
        assert len(tids) == len(set(tids))
        # Two records of an id in one append: only a completion and the Ongoing right after it.
        for append in self.in_flight:
            statuses = [w.value and TxnState(w.value.transaction_status) for w in append]
            assert len(append) == 1 or (
                len(append) == 2 and statuses[0] in COMPLETED and statuses[1] == TxnState.ONGOING
            ), statuses

    @invariant()
    def state_is_its_last_record(self) -> None:
        last: dict[str, TransactionLogValue | None] = {}
        for key, data in self.log:
            last[decode_key(key).transactional_id] = decode_value(data)
        for tid, value in self.c.durable_state().items():
            assert last.get(tid) == value, f"{tid}: the state is not the last committed record"

    def teardown(self) -> None:
        self.settle_everything(may_reload=True)
        # Every request is answered in the end: held ones once their transaction completes
        # (or their hold runs out), the rest once their records commit.
        self.now += CONFIG.concurrent_transactions_hold_ms
        self.take(self.c.tick(self.now))
        self.settle_everything(may_reload=False)
        assert not self.asked, f"never answered: {sorted(self.asked.values(), key=str)}"


TestTxnCoordinatorModel = TxnCoordinatorModel.TestCase
TestTxnCoordinatorModel.settings = settings(TestTxnCoordinatorModel.settings, stateful_step_count=50)
