"""A deterministic world for transactions: the product's transaction rules under a hostile
network, crashes and zombie producers, checked after every event.

What is real (the product's own code, unmodified): `TxnCoordinator` (one per
`__transaction_state` partition; its log is the list of committed records; a crash replays
that list into a new coordinator with a higher coordinator epoch and calls `loaded`), and
per data partition a `ProducerStateManager` (`check_client_append`, `check_marker`,
`on_append`, `first_unstable_offset`) with the aborted-transaction list made from the
`CompletedTxn`s `on_append` returns (as the `.txnindex` is) and read with `collect_aborted`.

What is simulated: time (ms, one event queue), the network (every message delayed 1 ms ..
`max_delay_ms`, some dropped, produce requests and answers sometimes duplicated, produce
requests sometimes delayed beyond the client's request timeout: the late write KIP-890
guards against), coordinator moves (half of them leave the old coordinator paused and acting on once it
resumes, after its successor loaded: its records fail, its outstanding markers are sent
again with its old coordinator epoch), appends (a coordinator record commits after a delay or fails; a data
append is acknowledged (acks=all) once the partition's high watermark passes it; a leader
crash truncates the log to the HW and rebuilds the producer state by replaying the log
through `on_append`), and the clients: transactional producers following the client
protocol (InitProducerId, AddPartitionsToTxn before a partition's first batch, Produce
with sequence numbers and retries, EndTxn, an epoch bump after an aborted error, fatal on
PRODUCER_FENCED / INVALID_PRODUCER_EPOCH), their zombie instances (an old instance goes on
after a new one initialised), stalls past `transaction.timeout.ms`, and idempotent
producers (an application that sends records again after a non-retriable error).

A partition leader verifies a transactional batch (KIP-890 part 1) as the product is to:
when the producer has no ongoing transaction in the partition it asks the coordinator's
`verify_partitions` and appends only if the answer is NONE.

Bounds that make the network no worse than TCP: a marker request and a coordinator request
arrive within `max_delay_ms` or never, and every sender's timeout is longer than that, so a
request sent again was delivered or lost first; only produce requests arrive late.

Properties (`Violation`), checked after every event: no batch appended twice (producer id,
epoch, first sequence unique in a log); no write (data or marker) with a producer epoch
below one the log already holds for its producer, no marker from a coordinator epoch below
one the log holds (a fenced epoch never writes again); no record in two places; every
batch of a client transaction gets the same fate (COMMIT or ABORT marker) in every
partition, the fate the client was told; no coordinator transaction both committed and
aborted, and every marker in a log is a decision of the coordinator's log; a read_committed
reader (the client's rule) sees no record of an aborted or open transaction and every
record of a committed one below the LSO. `settle` then stops the producers and faults and
requires every partition's LSO to reach its HW and every transaction to be complete
(liveness).
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from broker.log.control_records import EndTxnMarker
from broker.log.errors import LogError
from broker.log.producer_state import ProducerBatch, ProducerStateManager
from broker.log.txn_index import AbortedTxn, collect_aborted
from broker.txn.coordinator import Outcome, TxnConfig, TxnCoordinator, Write, appends_of
from broker.txn.messages import (
    AddPartitionsRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    InitProducerIdResult,
    MarkerRequest,
    TopicPartition,
    TxnResult,
)
from broker.txn.metadata import TxnState
from quorum.kafka_errors import ErrorCode
from quorum.storage.batch_layout import ATTR_CONTROL, ATTR_TRANSACTIONAL

TOPIC = "data"
E = ErrorCode
# Answers a client sends again (after retry.backoff.ms); a timeout counts as one.
RETRIABLE = frozenset({
    E.NOT_LEADER_OR_FOLLOWER, E.NOT_ENOUGH_REPLICAS, E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE,
    E.COORDINATOR_LOAD_IN_PROGRESS, E.CONCURRENT_TRANSACTIONS, E.REQUEST_TIMED_OUT, E.UNKNOWN_TOPIC_OR_PARTITION,
})  # fmt: skip
FATAL = frozenset({E.PRODUCER_FENCED, E.INVALID_PRODUCER_EPOCH, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED})
# KIP-890 part 1: what Produce answers for a verification that did not say NONE (Kafka maps
# the coordinator's availability errors to the retriable NOT_ENOUGH_REPLICAS).
VERIFY_RETRY = frozenset({E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS,
                          E.CONCURRENT_TRANSACTIONS})  # fmt: skip


class Violation(AssertionError):
    """A transaction property does not hold."""


@dataclass(frozen=True)
class SimConfig:
    transactional_ids: int = 3
    coordinator_partitions: int = 2
    data_partitions: int = 3
    idempotent_producers: int = 1
    max_delay_ms: int = 40  # every message arrives within this, or is lost (or is a late produce)
    request_timeout_ms: int = 400  # clients' and the marker sender's request.timeout.ms
    retry_backoff_ms: int = 50
    transaction_timeout_ms: int = 2_000
    loss: float = 0.03
    duplicate: float = 0.03
    late_produce: float = 0.02  # a produce request arriving after the client gave up on it
    append_fail: float = 0.05  # a coordinator record that cannot commit (NOT_ENOUGH_REPLICAS)
    fault_every_ms: int = 300
    fault_probability: float = 0.3
    stall_probability: float = 0.01  # a producer pausing past transaction.timeout.ms
    produce_retries: int = 4  # tries of one batch before the transactional client aborts


@dataclass(frozen=True, slots=True)
class Batch:
    """One batch of a data partition's log."""

    offset: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records: tuple[int, ...]  # record ids (a marker has none)
    transactional: bool
    control: bool = False
    committed: bool = False  # a marker's result
    coordinator_epoch: int = -1
    txn_uid: int = -1  # the client transaction a transactional data batch belongs to

    @property
    def last_offset(self) -> int:
        return self.offset + max(len(self.records), 1) - 1

    def producer_batch(self, timestamp: int) -> ProducerBatch:
        attributes = (ATTR_TRANSACTIONAL if self.transactional else 0) | (ATTR_CONTROL if self.control else 0)
        marker = EndTxnMarker(self.committed, self.coordinator_epoch) if self.control else None
        return ProducerBatch(self.producer_id, self.producer_epoch, self.base_sequence, self.offset,
                             max(len(self.records), 1) - 1, timestamp, attributes, marker)  # fmt: skip


class DataPartition:
    """A partition leader: the product's producer state over an in-memory log."""

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.log: list[Batch] = []
        self.hw = 0
        self.up = True
        self.psm = ProducerStateManager(f"{tp[0]}-{tp[1]}")
        self.aborted: list[AbortedTxn] = []
        self.waiting: list[tuple[int, Callable[[], None]]] = []  # (last offset, ack) until the HW passes it
        self.records: set[int] = set()  # the record ids in `log`

    @property
    def leo(self) -> int:
        return self.log[-1].last_offset + 1 if self.log else 0

    def record_completed(self, batch: Batch, now: int) -> None:
        for txn, lso in self.psm.on_append([batch.producer_batch(now)], batch.last_offset + 1):
            if txn.aborted:
                self.aborted.append(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, lso))

    def rebuild(self, now: int) -> None:
        """A new leader: the log as replicated (to the HW), its producer state by replaying it."""
        self.log = [b for b in self.log if b.offset < self.hw]
        self.records = {r for b in self.log for r in b.records}
        self.psm = ProducerStateManager(self.psm.where)
        self.aborted = []
        for b in self.log:
            self.record_completed(b, now)
        self.waiting = []

    def lso(self) -> int:
        first = self.psm.first_unstable_offset(self.hw)
        return self.hw if first is None else min(first, self.hw)

    def read_committed(self) -> list[int]:
        """What a read_committed consumer reads from offset 0 (the client's rule: batches below
        the LSO; a transactional batch of a producer inside an aborted transaction the broker
        listed is skipped; control batches are skipped)."""
        lso = self.lso()
        aborted, _ = collect_aborted(self.aborted, 0, lso)
        pending = sorted(aborted, key=lambda a: a.first_offset)
        skipping: set[int] = set()
        out: list[int] = []
        for b in self.log:
            if b.last_offset >= lso:
                break
            while pending and pending[0].first_offset <= b.offset:
                skipping.add(pending.pop(0).producer_id)
            if b.control:
                if not b.committed:
                    skipping.discard(b.producer_id)
                continue
            if b.transactional and b.producer_id in skipping:
                continue
            out.extend(b.records)
        return out


@dataclass
class CoordPartition:
    """A `__transaction_state` partition: its committed records and its coordinator."""

    index: int
    log: list[Write] = field(default_factory=list)
    coordinator: TxnCoordinator | None = None  # None: no leader, or loading
    epoch: int = 0
    inflight: list[list[Write]] = field(default_factory=list)  # appends (the records of one id in one)
    tokens: dict[int, Callable[[object], None]] = field(default_factory=dict)


@dataclass
class ClientTxn:
    uid: int
    plan: list[tuple[TopicPartition, list[tuple[int, ...]]]]  # partition -> its batches of record ids
    commit: bool
    added: set[TopicPartition] = field(default_factory=set)
    step: int = 0  # index into plan
    batch: int = 0  # index into the partition's batches
    tries: int = 0


class World:
    def __init__(self, config: SimConfig, seed: int) -> None:
        self.config = cfg = config
        self.seed = seed
        self.rng = random.Random(seed)
        self.now = 0
        self._queue: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self.stats: Counter[str] = Counter()
        self.faults = True
        self.next_pid = 1000
        self.next_record = 0
        self.next_uid = 0
        self.next_token = 0
        self.txn_config = TxnConfig(
            transaction_max_timeout_ms=60_000,
            abort_timed_out_transaction_cleanup_interval_ms=200,
            retry_backoff_ms=cfg.retry_backoff_ms,
        )
        self.coords = [CoordPartition(i) for i in range(cfg.coordinator_partitions)]
        # Deposed coordinators still acting until a time: their appends fail (NOT_LEADER_OR_FOLLOWER),
        # their markers go on being sent.
        self.zombie_coordinators: dict[int, tuple[TxnCoordinator, int, int]] = {}  # (it, resumes at, until)
        for c in self.coords:
            self._load(c)
        self.partitions = {(TOPIC, i): DataPartition((TOPIC, i)) for i in range(cfg.data_partitions)}
        # The ground truth the properties compare against.
        self.told: dict[int, bool] = {}  # client transaction uid -> committed (True) / aborted, as answered
        self.record_home: dict[int, tuple[TopicPartition, int]] = {}
        self.producers: list[Producer] = []
        self.idempotent: list[IdempotentProducer] = []
        for i in range(cfg.transactional_ids):
            self.start_producer(f"tx{i}")
        for i in range(cfg.idempotent_producers):
            self.idempotent.append(IdempotentProducer(self, i))
        self.after(cfg.fault_every_ms, self._fault)

    # ================================================================== time and network

    def after(self, delay_ms: int, fn: Callable[[], None]) -> None:
        heapq.heappush(self._queue, (self.now + max(delay_ms, 0), next(self._seq), fn))

    def send(self, fn: Callable[[], None], *, produce: bool = False, duplicable: bool = True) -> None:
        cfg, r = self.config, self.rng
        if self.faults and r.random() < cfg.loss:
            self.stats["lost_msgs"] += 1
            return
        if self.faults and produce and r.random() < cfg.late_produce:
            self.stats["late_produces"] += 1
            self.after(cfg.request_timeout_ms + r.randint(1, cfg.request_timeout_ms), fn)
            return
        self.after(r.randint(1, cfg.max_delay_ms), fn)
        if self.faults and duplicable and r.random() < cfg.duplicate:
            self.stats["duplicated_msgs"] += 1
            self.after(r.randint(1, cfg.max_delay_ms), fn)

    def run(self, ms: int) -> None:
        end = self.now + ms
        while self._queue and self._queue[0][0] <= end:
            at, _, fn = heapq.heappop(self._queue)
            self.now = at
            fn()
        self.now = end

    def new_pid(self) -> tuple[ErrorCode, int]:
        self.next_pid += 1
        return E.NONE, self.next_pid

    # ================================================================== faults

    def _fault(self) -> None:
        if not self.faults:
            return
        r = self.rng
        self.after(self.config.fault_every_ms, self._fault)
        if r.random() >= self.config.fault_probability:
            return
        x = r.random()
        if x < 0.3:
            self.crash_coordinator(r.choice(self.coords))
        elif x < 0.6:
            self.crash_leader(r.choice(list(self.partitions.values())))
        elif x < 0.9:
            self.start_producer(r.choice(self.producers).tid)  # a new instance: the old is a zombie
        else:
            p = r.choice(self.producers)
            p.alive = False  # a producer process dies (its messages in flight still arrive)
            self.after(r.randint(100, 3_000), lambda: self.start_producer(p.tid))

    def crash_coordinator(self, c: CoordPartition) -> None:
        if c.coordinator is None:
            return
        self.stats["coordinator_moves"] += 1
        for append in c.inflight:  # an append in flight may have committed before the crash
            if self.rng.random() < 0.5:
                for w in append:
                    self._commit_record(c, w)
        c.inflight = []
        c.tokens = {}
        load_in = self.rng.randint(20, 1_500)
        if self.rng.random() < 0.5:  # deposed, not dead: it acts until after its successor loaded
            self.stats["zombie_coordinators"] += 1
            # It was deposed because it paused (a GC pause, a stalled disk): it resumes after its
            # successor loaded, its marker sender times out and sends every outstanding marker again.
            resume = self.now + load_in + self.rng.randint(0, 500)
            zombie = c.coordinator
            self.zombie_coordinators[id(zombie)] = (zombie, resume, resume + self.rng.randint(100, 1_500))
            self.after(resume - self.now, lambda: self._resume_zombie(c, zombie))
        c.coordinator = None
        self.after(load_in, lambda: self._load(c))

    def _resume_zombie(self, c: CoordPartition, zombie: TxnCoordinator) -> None:
        for markers in list(zombie._markers.values()):
            r = markers.request
            if markers.remaining:
                self.stats["zombie_markers_resent"] += 1
                again = MarkerRequest(r.transactional_id, r.producer_id, r.producer_epoch, r.coordinator_epoch,
                                      r.result, frozenset(markers.remaining))  # fmt: skip
                self._send_markers(c, zombie, again)

    def _load(self, c: CoordPartition) -> None:
        c.epoch += 1
        coordinator = TxnCoordinator(self.txn_config, c.epoch, self.new_pid)
        for w in c.log:
            coordinator.replay(w.key, w.value)
        c.coordinator = coordinator
        self._outcome(c, coordinator, coordinator.loaded(self.now))
        self._tick(c, coordinator)

    def acting(self, c: CoordPartition, coordinator: TxnCoordinator) -> bool:
        """`coordinator` is `c`'s, or a deposed one that does not know it yet."""
        if c.coordinator is coordinator:
            return True
        zombie = self.zombie_coordinators.get(id(coordinator))
        return zombie is not None and zombie[0] is coordinator and zombie[1] <= self.now < zombie[2]

    def _tick(self, c: CoordPartition, coordinator: TxnCoordinator) -> None:
        if not self.acting(c, coordinator):
            return
        out = coordinator.tick(self.now)
        self.stats["timeout_aborts"] += sum(
            1 for w in out.writes if w.value is not None and w.value.transaction_status == TxnState.PREPARE_ABORT
        )
        self._outcome(c, coordinator, out)
        self.after(50, lambda: self._tick(c, coordinator))

    def crash_leader(self, p: DataPartition) -> None:
        if not p.up:
            return
        self.stats["leader_crashes"] += 1
        p.up = False
        p.waiting = []

        def elected() -> None:
            p.rebuild(self.now)
            self.check_partition(p)
            p.up = True

        self.after(self.rng.randint(20, 800), elected)

    def start_producer(self, tid: str) -> None:
        if self.producers and not self.faults:  # settling: no producer starts any more
            return
        live = [p for p in self.producers if p.tid == tid and p.alive]
        if len(live) >= 2:
            return
        if live:
            self.stats["zombies"] += 1
        p = Producer(self, tid)
        self.producers.append(p)
        p.next()

    # ================================================================== the coordinator side

    def coordinator_of(self, tid: str) -> CoordPartition:
        return self.coords[int(tid[2:]) % len(self.coords)]

    def to_coordinator(self, tid: str, call: Callable[[TxnCoordinator, int], Outcome],
                       answer: Callable[[object], None]) -> None:  # fmt: skip
        """A client request to the coordinator of `tid` (over the network both ways)."""

        def deliver() -> None:
            c = self.coordinator_of(tid)
            coordinator = c.coordinator
            if coordinator is None:
                self.send(lambda: answer(E.NOT_COORDINATOR))
                return
            self.next_token += 1
            token = self.next_token
            c.tokens[token] = answer
            self._outcome(c, coordinator, call(coordinator, token))

        # Not duplicated by the network (TCP does not): a request to the coordinator is sent
        # again only by its client, after its timeout, when the first was delivered or lost.
        self.send(deliver, duplicable=False)

    def _outcome(self, c: CoordPartition, coordinator: TxnCoordinator, out: Outcome) -> None:
        if not self.acting(c, coordinator):
            return
        if c.coordinator is not coordinator:  # a deposed coordinator: no record of it commits
            for append in appends_of(out.writes):
                tid = append[0].key.transactional_id
                self.after(
                    self.rng.randint(1, 60),
                    lambda tid=tid: self._outcome(  # type: ignore[misc]
                        c, coordinator, coordinator.appended(tid, E.NOT_LEADER_OR_FOLLOWER, self.now)
                    ),
                )
            for m in out.markers:
                self._send_markers(c, coordinator, m)
            return
        for token, reply in out.replies.items():
            fn = c.tokens.pop(token, None)
            if fn is not None:
                self.send(lambda fn=fn, reply=reply: fn(reply))  # type: ignore[misc]
        for append in appends_of(out.writes):
            c.inflight.append(append)
            self.after(self.rng.randint(1, 60), lambda a=append: self._append_done(c, coordinator, a))  # type: ignore[misc]
        for m in out.markers:
            self._send_markers(c, coordinator, m)

    def _append_done(self, c: CoordPartition, coordinator: TxnCoordinator, append: list[Write]) -> None:
        if c.coordinator is not coordinator or not any(x is append for x in c.inflight):
            return
        c.inflight = [x for x in c.inflight if x is not append]
        tid = append[0].key.transactional_id
        if self.faults and self.rng.random() < self.config.append_fail:
            self.stats["appends_failed"] += 1
            self._outcome(c, coordinator, coordinator.appended(tid, E.NOT_ENOUGH_REPLICAS, self.now))
            return
        for w in append:
            self._commit_record(c, w)
        self._outcome(c, coordinator, coordinator.appended(tid, E.NONE, self.now))

    def _commit_record(self, c: CoordPartition, w: Write) -> None:
        c.log.append(w)
        self.check_decisions(c)

    def _send_markers(self, c: CoordPartition, coordinator: TxnCoordinator, m: MarkerRequest) -> None:
        """The marker sender: one WriteTxnMarkers entry per partition's leader; a partition's
        result (or REQUEST_TIMED_OUT) goes back to the coordinator that sent it."""
        for tp in sorted(m.partitions):
            done = [False]

            def result(code: ErrorCode, tp: TopicPartition = tp, done: list[bool] = done) -> None:
                if done[0] or not self.acting(c, coordinator):
                    return
                done[0] = True
                self._outcome(c, coordinator, coordinator.markers_written(m, {tp: code}, self.now))

            def deliver(tp: TopicPartition = tp, result: Callable[[ErrorCode], None] = result) -> None:
                self.write_marker(self.partitions[tp], m, lambda code: self.send(lambda: result(code)))

            self.send(deliver, duplicable=False)
            self.after(self.config.request_timeout_ms, lambda result=result: result(E.REQUEST_TIMED_OUT))  # type: ignore[misc]

    # ================================================================== the partition side

    def write_marker(self, p: DataPartition, m: MarkerRequest, answer: Callable[[ErrorCode], None]) -> None:
        if not p.up:
            answer(E.NOT_LEADER_OR_FOLLOWER)
            return
        marker = EndTxnMarker(m.result == TxnResult.COMMIT, m.coordinator_epoch)
        try:
            p.psm.check_marker(m.producer_id, m.producer_epoch, marker, p.leo)
        except LogError as exc:
            self.stats[f"marker_{exc.code.name}"] += 1
            answer(exc.code)
            return
        b = Batch(p.leo, m.producer_id, m.producer_epoch, -1, (), True, True, marker.committed, m.coordinator_epoch)
        self.check_marker_decided(m)
        self._append(p, b, lambda: answer(E.NONE))

    def produce(self, p: DataPartition, tid: str | None, b: Batch, answer: Callable[[ErrorCode], None]) -> None:
        if not p.up:
            answer(E.NOT_LEADER_OR_FOLLOWER)
            return
        entry = p.psm.last_entry(b.producer_id)
        if b.transactional and tid is not None and (entry is None or entry.current_txn_first_offset < 0):
            code = self.verify(tid, b, p.tp)
            if code != E.NONE:
                self.stats[f"verify_{code.name}"] += 1
                if code == E.TRANSACTION_ABORTABLE and self._would_append(p, b):
                    self.stats["hanging_attempts"] += 1  # a late batch that would open a transaction nobody ends
                answer(E.NOT_ENOUGH_REPLICAS if code in VERIFY_RETRY else code)
                return
        b = Batch(p.leo, b.producer_id, b.producer_epoch, b.base_sequence, b.records, b.transactional,
                  txn_uid=b.txn_uid)  # fmt: skip
        try:
            duplicate = p.psm.check_client_append([b.producer_batch(self.now)])
        except LogError as exc:
            self.stats[f"produce_{exc.code.name}"] += 1
            answer(exc.code)
            return
        if duplicate is not None:
            self.stats["duplicates_caught"] += 1
            if duplicate.last_offset < p.hw:
                answer(E.NONE)
            else:
                p.waiting.append((duplicate.last_offset, lambda: answer(E.NONE)))
            return
        self._append(p, b, lambda: answer(E.NONE))

    def _would_append(self, p: DataPartition, b: Batch) -> bool:
        try:
            return p.psm.check_client_append([b.producer_batch(self.now)]) is None
        except LogError:
            return False

    def verify(self, tid: str, b: Batch, tp: TopicPartition) -> ErrorCode:
        """KIP-890 part 1: the coordinator says whether `tp` is in the producer's transaction."""
        coordinator = self.coordinator_of(tid).coordinator
        if coordinator is None:
            return E.COORDINATOR_NOT_AVAILABLE
        req = AddPartitionsRequest(tid, b.producer_id, b.producer_epoch, frozenset({tp}))
        return coordinator.verify_partitions(req)[tp]

    def _append(self, p: DataPartition, b: Batch, ack: Callable[[], None]) -> None:
        self.check_append(p, b)
        p.log.append(b)
        p.record_completed(b, self.now)
        for r in b.records:
            self.record_home[r] = (p.tp, b.offset)
        p.records.update(b.records)
        p.waiting.append((b.last_offset, ack))
        self.after(self.rng.randint(1, 30), lambda: self._replicate(p))
        self.check_partition(p)

    def _replicate(self, p: DataPartition) -> None:
        if not p.up:
            return
        p.hw = p.leo
        ready = [ack for last, ack in p.waiting if last < p.hw]
        p.waiting = [(last, ack) for last, ack in p.waiting if last >= p.hw]
        self.check_partition(p)
        for ack in ready:
            ack()

    # ================================================================== properties

    def fail(self, what: str) -> None:
        raise Violation(f"seed {self.seed} at {self.now} ms: {what}")

    def check_append(self, p: DataPartition, b: Batch) -> None:
        """Before `b` joins `p`'s log: not a batch already there, no fenced epoch, no record twice."""
        for old in p.log:
            if old.producer_id != b.producer_id:
                continue
            if not b.control and not old.control and (old.producer_epoch, old.base_sequence) == (
                b.producer_epoch, b.base_sequence,
            ):  # fmt: skip
                self.fail(f"{p.tp}: batch {b} appended twice (first at {old.offset})")
            if b.producer_epoch < old.producer_epoch:
                self.fail(f"{p.tp}: epoch {b.producer_epoch} of producer {b.producer_id} writes after epoch "
                          f"{old.producer_epoch} at {old.offset}: {b}")  # fmt: skip
            if b.control and old.control and b.coordinator_epoch < old.coordinator_epoch:
                self.fail(f"{p.tp}: a marker of coordinator epoch {b.coordinator_epoch} after one of "
                          f"{old.coordinator_epoch}: {b}")  # fmt: skip
        for r in b.records:
            if r in p.records:
                self.fail(f"{p.tp}: record {r} appended again (already at {self.record_home[r]}): {b}")

    @staticmethod
    def fates(p: DataPartition) -> dict[int, Batch | None]:
        """Per transactional data batch (by offset): the marker that closed it (None: open)."""
        fate: dict[int, Batch | None] = {}
        open_batches: dict[int, list[int]] = {}
        for b in p.log:
            if b.control:
                for off in open_batches.pop(b.producer_id, []):
                    fate[off] = b
            elif b.transactional:
                open_batches.setdefault(b.producer_id, []).append(b.offset)
                fate[b.offset] = None
        return fate

    def check_partition(self, p: DataPartition) -> None:
        fate = self.fates(p)
        lso = p.lso()
        seen = p.read_committed()
        visible = set(seen)
        if len(visible) != len(seen):
            self.fail(f"{p.tp}: read_committed reads a record twice")
        for b in p.log:
            if b.control:
                continue
            marker = fate.get(b.offset) if b.transactional else None
            if b.transactional and marker is not None and b.txn_uid in self.told:
                if marker.committed != self.told[b.txn_uid]:
                    told = "committed" if self.told[b.txn_uid] else "aborted"
                    got = "COMMIT" if marker.committed else "ABORT"
                    self.fail(f"{p.tp}: transaction {b.txn_uid} was answered {told} but its batch at "
                              f"{b.offset} got {got} at {marker.offset}")  # fmt: skip
            for r in b.records:
                if r in visible:
                    if b.transactional and (marker is None or not marker.committed):
                        state = "open" if marker is None else f"aborted at {marker.offset}"
                        self.fail(f"{p.tp}: read_committed sees record {r} of a transaction {state} "
                                  f"(batch {b.offset}, LSO {lso}, HW {p.hw})")  # fmt: skip
                elif b.last_offset < lso and (not b.transactional or (marker is not None and marker.committed
                                                                       and marker.offset < lso)):  # fmt: skip
                    self.fail(
                        f"{p.tp}: read_committed misses record {r} of batch {b.offset} "
                        f"({'committed' if b.transactional else 'idempotent'}; LSO {lso})"
                    )
        # One fate per client transaction across partitions.
        self._check_atomic()

    def _check_atomic(self) -> None:
        result: dict[int, tuple[bool, TopicPartition, int]] = {}
        for p in self.partitions.values():
            fate = self.fates(p)
            for b in p.log:
                marker = fate.get(b.offset)
                if b.control or not b.transactional or marker is None:
                    continue
                prior = result.setdefault(b.txn_uid, (marker.committed, p.tp, marker.offset))
                if prior[0] != marker.committed:
                    self.fail(
                        f"transaction {b.txn_uid}: {'COMMIT' if prior[0] else 'ABORT'} in {prior[1]} at "
                        f"{prior[2]}, {'COMMIT' if marker.committed else 'ABORT'} in {p.tp} at {marker.offset}"
                    )

    def check_decisions(self, c: CoordPartition) -> None:
        """No coordinator transaction (id, producer id, start time) both prepared to commit and to abort."""
        decided: dict[tuple[str, int, int], int] = {}
        for w in c.log:
            v = w.value
            if v is None or v.transaction_status not in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                continue
            key = (w.key.transactional_id, v.producer_id, v.transaction_start_timestamp_ms)
            if decided.setdefault(key, v.transaction_status) != v.transaction_status:
                self.fail(f"coordinator {c.index}: transaction {key} both committed and aborted")

    def check_marker_decided(self, m: MarkerRequest) -> None:
        c = self.coordinator_of(m.transactional_id)
        wanted = TxnState.PREPARE_COMMIT if m.result == TxnResult.COMMIT else TxnState.PREPARE_ABORT
        for w in c.log:
            v = w.value
            if (w.key.transactional_id == m.transactional_id and v is not None and v.transaction_status == wanted
                    and (v.producer_id, v.producer_epoch) == (m.producer_id, m.producer_epoch)):  # fmt: skip
                return
        self.fail(f"marker {m} is no decision of the coordinator's log")

    def check(self) -> None:
        for p in self.partitions.values():
            self.check_partition(p)
        for c in self.coords:
            self.check_decisions(c)

    # ================================================================== the end

    def settle(self, ms: int = 20_000) -> None:
        """Faults and producers stop; every transaction must end and every LSO reach its HW."""
        self.faults = False
        for p in self.producers:
            p.alive = False
        for i in self.idempotent:
            i.alive = False
        self.run(ms)
        for c in self.coords:
            if c.coordinator is None:
                self.fail(f"coordinator {c.index} never loaded")
            for tid, m in c.coordinator.txns.items():
                if m.state not in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
                    self.fail(f"liveness: {tid} still {m.state.name} {ms} ms after the faults stopped")
        for p in self.partitions.values():
            if not p.up:
                self.fail(f"{p.tp} has no leader")
            if p.hw != p.leo or p.lso() != p.hw:
                self.fail(
                    f"liveness: {p.tp} LSO {p.lso()} HW {p.hw} LEO {p.leo} {ms} ms after the faults "
                    f"stopped (open transactions: {p.psm.ongoing})"
                )
        self.check()
        self.stats["records_visible"] += sum(len(p.read_committed()) for p in self.partitions.values())


class Producer:
    """One transactional producer instance (a client process)."""

    def __init__(self, world: World, tid: str) -> None:
        self.w = world
        self.tid = tid
        self.alive = True
        self.pid = -1
        self.epoch = -1
        self.bump = False  # the next InitProducerId bumps the current epoch (after an aborted error)
        self.seq: dict[TopicPartition, int] = {}
        self.txn: ClientTxn | None = None
        self.attempt = 0

    # A request: `attempt` tags it; an answer or timeout of an older attempt is ignored.
    def _request(self, send: Callable[[Callable[[object], None]], None], on: Callable[[object], None]) -> None:
        self.attempt += 1
        attempt = self.attempt

        def answer(reply: object) -> None:
            if self.alive and attempt == self.attempt:
                self.attempt += 1
                on(reply)

        send(answer)
        self.w.after(self.w.config.request_timeout_ms, lambda: answer(E.REQUEST_TIMED_OUT))

    def _later(self, fn: Callable[[], None], ms: int | None = None) -> None:
        self.w.after(self.w.config.retry_backoff_ms if ms is None else ms, lambda: self.alive and fn())  # type: ignore[func-returns-value]

    def _fatal(self, code: ErrorCode) -> None:
        self.w.stats["fenced_producers"] += 1
        self.w.stats[f"fatal_{code.name}"] += 1
        self.alive = False
        tid = self.tid
        self.w.after(self.w.rng.randint(50, 500), lambda: self.w.start_producer(tid))

    def next(self) -> None:
        """Take the next step of the client protocol."""
        if not self.alive:
            return
        w = self.w
        if self.pid < 0 or self.bump:
            self._init()
        elif self.txn is None:
            self._begin()
        elif w.faults and w.rng.random() < w.config.stall_probability:
            w.stats["producer_stalls"] += 1
            self._later(self._resume, w.config.transaction_timeout_ms + w.rng.randint(200, 2_000))
        else:
            self._resume()

    def _init(self) -> None:
        req = InitProducerIdRequest(self.tid, self.w.config.transaction_timeout_ms,
                                    *((self.pid, self.epoch) if self.bump else (-1, -1)))  # fmt: skip

        def on(reply: object) -> None:
            code = reply.error if isinstance(reply, InitProducerIdResult) else reply
            assert isinstance(code, ErrorCode)
            if code == E.NONE:
                assert isinstance(reply, InitProducerIdResult)
                self.pid, self.epoch, self.bump, self.seq = reply.producer_id, reply.producer_epoch, False, {}
                self.w.stats["inits"] += 1
                self.next()
            elif code in RETRIABLE:
                self._later(self._init)
            else:
                self._fatal(code)

        self._request(lambda a: self.w.to_coordinator(self.tid, lambda c, t: c.init_producer_id(req, t, self.w.now), a),
                      on)  # fmt: skip

    def _begin(self) -> None:
        w = self.w
        w.next_uid += 1
        tps = w.rng.sample(sorted(w.partitions), w.rng.randint(1, len(w.partitions)))
        plan = []
        for tp in tps:
            batches = []
            for _ in range(w.rng.randint(1, 3)):
                n = w.rng.randint(1, 3)
                batches.append(tuple(range(w.next_record, w.next_record + n)))
                w.next_record += n
            plan.append((tp, batches))
        self.txn = ClientTxn(w.next_uid, plan, w.rng.random() < 0.75)
        self.next()

    def _resume(self) -> None:
        txn = self.txn
        assert txn is not None
        if txn.step >= len(txn.plan):
            self._end(TxnResult.COMMIT if txn.commit else TxnResult.ABORT, error=False)
            return
        tp, batches = txn.plan[txn.step]
        if tp not in txn.added:
            self._add(txn, tp)
        else:
            self._produce(txn, tp, batches[txn.batch])

    def _add(self, txn: ClientTxn, tp: TopicPartition) -> None:
        req = AddPartitionsRequest(self.tid, self.pid, self.epoch, frozenset({tp}))

        def on(reply: object) -> None:
            assert isinstance(reply, ErrorCode)
            if reply == E.NONE:
                txn.added.add(tp)
                self.next()
            elif reply in RETRIABLE:
                self._later(lambda: self._add(txn, tp))
            elif reply in FATAL:
                self._fatal(reply)
            else:
                self._abort_on_error(reply)

        self._request(lambda a: self.w.to_coordinator(self.tid, lambda c, t: c.add_partitions(req, t, self.w.now), a),
                      on)  # fmt: skip

    def _produce(self, txn: ClientTxn, tp: TopicPartition, records: tuple[int, ...]) -> None:
        w = self.w
        seq = self.seq.get(tp, 0)
        b = Batch(-1, self.pid, self.epoch, seq, records, True, txn_uid=txn.uid)
        tid = self.tid

        def on(reply: object) -> None:
            assert isinstance(reply, ErrorCode)
            if reply == E.NONE:
                self.seq[tp] = seq + len(records)
                txn.tries = 0
                txn.batch += 1
                if txn.batch >= len(txn.plan[txn.step][1]):
                    txn.step, txn.batch = txn.step + 1, 0
                self.next()
            elif reply in RETRIABLE and txn.tries < w.config.produce_retries:
                txn.tries += 1
                self._later(lambda: self._produce(txn, tp, records))
            elif reply in FATAL:
                self._fatal(reply)
            else:
                self._abort_on_error(reply)

        self._request(lambda a: w.send(lambda: w.produce(w.partitions[tp], tid, b, a), produce=True), on)  # type: ignore[arg-type]

    def _abort_on_error(self, code: ErrorCode) -> None:
        self.w.stats[f"abortable_{code.name}"] += 1
        self._end(TxnResult.ABORT, error=True)

    def _end(self, result: TxnResult, *, error: bool) -> None:
        txn = self.txn
        assert txn is not None
        req = EndTxnRequest(self.tid, self.pid, self.epoch, result)
        w = self.w

        def on(reply: object) -> None:
            assert isinstance(reply, ErrorCode)
            if reply == E.NONE:
                w.told[txn.uid] = result == TxnResult.COMMIT
                w.stats["commits" if result == TxnResult.COMMIT else "aborts"] += 1
                self.txn = None
                self.bump = error
                self.next()
            elif reply in RETRIABLE:
                self._later(lambda: self._end(result, error=error))
            elif reply in FATAL:
                self._fatal(reply)
            elif result == TxnResult.COMMIT:
                self._abort_on_error(reply)
            else:  # the abort itself is refused (INVALID_TXN_STATE): start over with a new epoch
                w.stats[f"abort_refused_{reply.name}"] += 1
                self.txn = None
                self.bump = True
                self.next()

        self._request(lambda a: w.to_coordinator(self.tid, lambda c, t: c.end_txn(req, t, w.now), a), on)


class IdempotentProducer:
    """An idempotent (non-transactional) producer whose application sends a batch's records
    again, under a new producer id, when the batch fails with a non-retriable error."""

    def __init__(self, world: World, index: int) -> None:
        self.w = world
        self.alive = True
        self.attempt = 0
        _, self.pid = world.new_pid()
        self.seq: dict[TopicPartition, int] = {}
        self.w.after(1, self._send_next)

    def _send_next(self) -> None:
        if not self.alive:
            return
        w = self.w
        n = w.rng.randint(1, 3)
        records = tuple(range(w.next_record, w.next_record + n))
        w.next_record += n
        self._send(w.rng.choice(sorted(w.partitions)), records)

    def _send(self, tp: TopicPartition, records: tuple[int, ...]) -> None:
        w = self.w
        seq = self.seq.get(tp, 0)
        b = Batch(-1, self.pid, 0, seq, records, False)
        self.attempt += 1
        attempt = self.attempt

        def answer(code: ErrorCode) -> None:
            if not self.alive or attempt != self.attempt:
                return
            self.attempt += 1
            if code == E.NONE:
                self.seq[tp] = seq + len(records)
                w.stats["idempotent_acked"] += 1
                w.after(w.rng.randint(1, 100), self._send_next)
            elif code in RETRIABLE:
                w.after(w.config.retry_backoff_ms, lambda: self.alive and self._send(tp, records))  # type: ignore[func-returns-value]
            else:
                w.stats[f"idempotent_resent_{code.name}"] += 1
                _, self.pid = w.new_pid()
                self.seq = {}
                w.after(w.config.retry_backoff_ms, lambda: self.alive and self._send(tp, records))  # type: ignore[func-returns-value]

        w.send(lambda: w.produce(w.partitions[tp], None, b, answer), produce=True)
        w.after(w.config.request_timeout_ms, lambda: answer(E.REQUEST_TIMED_OUT))
