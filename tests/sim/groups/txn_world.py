"""A simulated world for transactional offset commits: one `__consumer_offsets` partition, its
successive group coordinators, transactional producers (TxnOffsetCommit, then a COMMIT or
ABORT marker), a plain committer and an admin deleting the offsets or the group, under
coordinator crashes and moves, refused appends and replication stalls. Deterministic given
the seed; time is simulated ms.

- The coordinator is the REAL `GroupShard`, driven as `broker.group.runtime` drives it:
  operations under the REAL `WriteOrder` (answers once their append and every earlier one
  committed, `undo` on a refused append); a TxnOffsetCommit's records are a batch of the
  producer (`Outcome.producer`); loading replays the log in order, transactional records
  with their producer and markers with `replay_marker`; a marker that commits calls the
  hook `on_txn_marker` of the current coordinator (queued while it loads, as the
  runtime does).
- The log: batches with their records (encoded with `broker.group.records`), the producer
  of a transactional batch, or a marker (control batch); a high watermark (HW, in batches).
  An append commits after a short delay (later during a stall); while appends are refused
  they never enter the log (NOT_ENOUGH_REPLICAS). A crash keeps the committed batches and a
  random part of the uncommitted tail (which then commits); its waiting requests are lost
  (the clients see the connection close and retry). A controlled move commits everything,
  answers, and unloads (NOT_COORDINATOR meanwhile).
- The coordinator writes one append at a time, in order, as the runtime does.
- Producers: each runs transactions one after another: TxnOffsetCommits (retried on a
  coordinator error or a closed connection, with a new record), then, with none in flight,
  EndTxn: the transaction coordinator writes the marker into the partition and writes it
  again until it commits.

The oracle reads the log: the offset OffsetFetch must show for a partition is the record
latest in the log among the plain commits (tombstones: no offset) and the records of
transactions whose COMMIT marker the coordinator applied (Kafka's rule: a transaction's
offset replaces the committed one only if its record is later); a partition with a record
of a transaction whose marker it has not applied, and no tombstone after that record, is
unstable. A marker is applied once it commits (the hook) or when a coordinator loads a log
that has it (loading reads to the log's end, as the runtime does: that tail commits later
on the same leader). Properties (`Violation` names the rule):
- [aborted-visible] an offset of an aborted transaction is never shown;
- [pending-visible] an offset of an open transaction is never shown;
- [committed-visible] otherwise the offset shown is the oracle's (a committed transaction's
  offset is visible once its marker is applied, after any move; no older one shows);
- [unstable] with require_stable exactly the oracle's unstable partitions answer
  UNSTABLE_OFFSET_COMMIT;
- [acked-txn-commit] an acknowledged TxnOffsetCommit's record is committed in the log.
OffsetFetch answers are checked when released (a fetch behind a refused append fails and is
not checked), against the oracle of the log as it was when the fetch was processed; a
loading coordinator's state is checked against the log it loaded.
"""

from __future__ import annotations

import heapq
import random
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from broker.group.messages import CommitPartition, CommitRequest, CommittedOffset, TxnCommitRequest
from broker.group.records import OffsetKey, decode_key, decode_value, encode_key, encode_value
from broker.group.shard import CoordinatorConfig, GroupShard, Outcome, append_error
from broker.group.write_order import WriteOrder
from quorum.kafka_errors import ErrorCode
from tests.sim.groups.harness import Violation

GROUP = "g"
TOPIC = "t"
PARTITIONS = 4
RETRIABLE = frozenset(
    {
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    }
)

TP = tuple[str, int]


@dataclass(slots=True)
class Batch:
    records: list[tuple[bytes, bytes | None]]
    producer: int = -1  # a transactional batch's producer id (-1: plain)
    marker: tuple[int, bool] | None = None  # a control batch: (producer id, COMMIT?)
    on_commit: Callable[[], None] | None = None  # who waits for it (None once done or lost)
    on_lost: Callable[[], None] | None = None  # a marker lost in a crash: written again
    applied: bool = False  # a marker the coordinator applied: committed (the hook), or loaded


def _encoded(out: Outcome) -> list[tuple[bytes, bytes | None]]:
    return [(encode_key(k), None if v is None else encode_value(v)) for k, v in out.records]


class Coordinator:
    """One incarnation of the coordinator: the real shard and write order."""

    def __init__(self, world: TxnWorld, number: int) -> None:
        self.world = world
        self.number = number
        self.shard = GroupShard(CoordinatorConfig())
        self.order = WriteOrder()
        self.ready = False
        self.alive = True
        self.unloaded = False
        self.completions: list[tuple[int, bool]] = []  # hooks that came while loading
        self.on_entry: dict[int, Callable[[ErrorCode], None]] = {}
        self.waiting: list[Callable[[], None]] = []  # what a client does when the connection closes
        # One append in flight, as the runtime writes (so appends complete in order).
        self.queued: deque[tuple[int, Outcome]] = deque()
        self.writing = False

    @property
    def serving(self) -> bool:
        return self.alive and not self.unloaded

    def load(self) -> None:
        if not self.serving:
            return
        w = self.world
        offset = 0
        for batch in w.log:  # to the log's end, as the runtime loads (its tail commits later)
            batch.applied = batch.applied or batch.marker is not None
            for k, v in batch.records:
                if batch.marker is not None:
                    self.shard.replay_marker(batch.marker[0], batch.marker[1], offset=offset)
                else:
                    key = decode_key(k)
                    self.shard.replay(key, decode_value(key, v), w.now, offset=offset, producer_id=batch.producer)
                offset += 1
        for producer_id, committed in self.completions:
            self.shard.complete_transaction(producer_id, committed)
        self.completions.clear()
        self.shard.loaded(w.now)
        self.ready = True
        w.stats["loads"] += 1
        expected, unstable = w.oracle()
        for stable in (False, True):
            w.compare(self.shard.fetch_offsets(GROUP, w.partitions, require_stable=stable), expected,
                      unstable if stable else set(), f"coordinator {self.number} loaded")  # fmt: skip

    def complete(self, producer_id: int, committed: bool) -> None:
        """The marker handler's hook (`GroupCoordinator.on_txn_marker`)."""
        if not self.serving:
            return
        if not self.ready:
            self.completions.append((producer_id, committed))
            return
        self.shard.complete_transaction(producer_id, committed)

    def dispatch(self, out: Outcome, then: Callable[[ErrorCode], None]) -> None:
        entry = self.order.submit(out)
        self.on_entry[entry] = then
        if out.records:
            self.queued.append((entry, out))
            self._write_next()
        self.release()

    def _write_next(self) -> None:
        if not self.writing and self.queued:
            self.writing = True
            self.world.append(self, *self.queued.popleft())

    def completed(self, entry: int, code: ErrorCode) -> None:
        if self.serving:
            self.writing = False
            self.order.completed(entry, code)
            self.release()
            self._write_next()

    def release(self) -> None:
        for released in self.order.drain():
            then = self.on_entry.pop(released.entry, None)
            if then is not None:
                then(released.code)

    # ---------------------------------------------------------- requests

    def txn_commit(self, req: TxnCommitRequest, answer: Callable[[list[ErrorCode]], None]) -> None:
        out, errors = self.shard.txn_commit(req, self.world.now)

        def then(code: ErrorCode) -> None:
            mapped = append_error(code)
            answer(errors if code == ErrorCode.NONE else [mapped if e == ErrorCode.NONE else e for e in errors])

        self.dispatch(out, then)

    def commit(self, req: CommitRequest, answer: Callable[[list[ErrorCode]], None]) -> None:
        out, errors = self.shard.commit(req, self.world.now)
        self.dispatch(out, lambda code: answer(errors if code == ErrorCode.NONE else [append_error(code)]))

    def admin(self, what: str) -> None:
        """kafka-consumer-groups.sh --delete-offsets (every partition) or --delete (the group
        is a simple one, Empty): tombstones, pending offsets dropped."""
        if what == "delete_group":
            _code, out = self.shard.delete_group(GROUP, self.world.now)
        else:
            _code, _errors, out = self.shard.delete_offsets(GROUP, self.world.partitions)
        self.dispatch(out, lambda code: None)

    def fetch(self, stable: bool) -> None:
        w = self.world
        offsets = self.shard.fetch_offsets(GROUP, w.partitions, require_stable=stable)
        # The log as this fetch saw it, with this coordinator's writes still queued after it
        # (were one refused, the fetch fails with it and is not checked).
        expected, unstable = w.oracle([Batch(_encoded(o), -1 if o.producer is None else o.producer[0])
                                       for _, o in self.queued])  # fmt: skip

        def then(code: ErrorCode) -> None:
            if code == ErrorCode.NONE and self.serving:
                w.stats["fetches_checked"] += 1
                w.compare(offsets, expected, unstable if stable else set(), f"OffsetFetch of C{self.number}")

        self.dispatch(Outcome(), then)


@dataclass(slots=True)
class Producer:
    pid: int
    txn: int = 0  # the number of its current transaction
    records: list[str] = field(default_factory=list)  # metadata of the current transaction's commits
    in_flight: int = 0
    ending: bool = False  # EndTxn sent: the marker is being written


class TxnWorld:
    def __init__(self, seed: int, producers: int = 3) -> None:
        self.rng = random.Random(seed)
        self.now = 0
        self._events: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = 0
        self.log: list[Batch] = []
        self.hw = 0
        self.coordinator: Coordinator | None = None
        self.coordinators = 0
        self.partitions: list[TP] = [(TOPIC, p) for p in range(PARTITIONS)]
        self.producers = [Producer(1000 + i) for i in range(producers)]
        self.outcome: dict[tuple[int, int], bool] = {}  # (pid, txn) -> committed, once the marker committed
        self.acked: list[str] = []  # metadata of acknowledged TxnOffsetCommits (checked in the log)
        self.stall_until = -1
        self.refuse = 0  # refuse so many next appends
        self.stats: Counter[str] = Counter()
        self._serial = 0
        self.start_coordinator()

    # ---------------------------------------------------------- plumbing

    def at(self, when: int, fn: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._events, (when, self._seq, fn))

    def run(self, ms: int) -> None:
        end = self.now + ms
        while self._events and self._events[0][0] <= end:
            when, _, fn = heapq.heappop(self._events)
            self.now = max(self.now, when)
            fn()
        self.now = end

    def serial(self) -> int:
        self._serial += 1
        return self._serial

    # ---------------------------------------------------------- the log

    def append(self, c: Coordinator, entry: int, out: Outcome) -> None:
        if self.refuse > 0:
            self.refuse -= 1
            self.stats["appends_refused"] += 1
            self.at(self.now + self.rng.randint(1, 5), lambda: c.completed(entry, ErrorCode.NOT_ENOUGH_REPLICAS))
            return
        producer = -1 if out.producer is None else out.producer[0]
        self._write(Batch(_encoded(out), producer, on_commit=lambda: c.completed(entry, ErrorCode.NONE)))

    def _write(self, batch: Batch) -> None:
        self.log.append(batch)
        self.at(max(self.now + self.rng.randint(1, 20), self.stall_until), self._advance_hw)

    def _advance_hw(self) -> None:
        if self.now < self.stall_until:
            self.at(self.stall_until, self._advance_hw)
            return
        while self.hw < len(self.log):
            self.hw += 1
            self._committed(self.log[self.hw - 1])

    def _committed(self, batch: Batch) -> None:
        then, batch.on_commit = batch.on_commit, None
        if batch.marker is not None:
            pid, committed = batch.marker
            batch.applied = True
            if self.coordinator is not None:
                self.coordinator.complete(pid, committed)
        if then is not None:
            then()

    # ---------------------------------------------------------- coordinator moves

    def start_coordinator(self) -> None:
        self.coordinators += 1
        c = Coordinator(self, self.coordinators)
        self.coordinator = c
        self.at(self.now + self.rng.randint(10, 300), c.load)

    def crash_coordinator(self) -> None:
        c = self.coordinator
        if c is None or not c.ready:
            return
        c.alive = False
        self.coordinator = None
        self.stats["coordinator_crashes"] += 1
        keep = self.hw + self.rng.randint(0, len(self.log) - self.hw)
        lost = self.log[keep:]
        del self.log[keep:]
        self.stats["uncommitted_batches_lost"] += len(lost)
        tail = self.log[self.hw :]
        self.hw = len(self.log)
        for batch in tail:  # the kept tail commits on the new leader
            if batch.marker is None:
                batch.on_commit = None  # (its writer is gone)
            self._committed(batch)
        for batch in lost:
            if batch.on_lost is not None:
                self.at(self.now + 50, batch.on_lost)
        for closed in c.waiting:
            self.at(self.now + self.rng.randint(1, 50), closed)
        c.waiting.clear()
        self.at(self.now + self.rng.randint(200, 3_000), self.start_coordinator)

    def controlled_move(self) -> None:
        c = self.coordinator
        if c is None or not c.ready:
            return
        self.stats["coordinator_controlled_moves"] += 1
        self.stall_until = -1
        self._advance_hw()
        c.unloaded = True
        for closed in c.waiting:
            self.at(self.now + self.rng.randint(1, 50), closed)
        c.waiting.clear()
        self.coordinator = None
        self.at(self.now + self.rng.randint(20, 500), self.start_coordinator)

    def stall_replication(self, ms: int) -> None:
        self.stall_until = max(self.stall_until, self.now + ms)
        self.stats["replication_stalls"] += 1

    # ---------------------------------------------------------- clients

    def _request(self, send: Callable[[Coordinator], None], failed: Callable[[], None]) -> None:
        """Send to the current coordinator (a retriable error when there is none or it loads)."""
        c = self.coordinator
        if c is None or not c.serving or not c.ready:
            self.at(self.now + self.rng.randint(1, 20), failed)
            return
        c.waiting.append(failed)
        send(c)

    def txn_commit(self, p: Producer) -> None:
        if p.ending:
            return
        tps = self.rng.sample(self.partitions, self.rng.randint(1, 2))
        metas = [f"txn/{p.pid}/{p.txn}/{self.serial()}" for _ in tps]
        parts = tuple(CommitPartition(t, n, self.serial(), -1, m) for (t, n), m in zip(tps, metas, strict=True))
        req = TxnCommitRequest(GROUP, p.pid, 0, parts, transactional_id=f"tx{p.pid}")
        p.in_flight += 1
        done = [False]

        def answer(errors: list[ErrorCode]) -> None:
            if done[0]:
                return
            done[0] = True
            p.in_flight -= 1
            if errors == [ErrorCode.NONE] * len(errors):
                self.stats["txn_commits_acked"] += 1
                p.records.extend(metas)
                self.acked.extend(metas)
                self._check_acked(metas)
            elif set(errors) <= RETRIABLE:
                self.at(self.now + 100, lambda: self.txn_commit(p))  # retried (new records)
            else:
                raise Violation(f"[errors] producer {p.pid}: unexpected {errors}")

        def closed() -> None:
            answer([ErrorCode.NOT_COORDINATOR])

        self._request(lambda c: c.txn_commit(req, answer), closed)

    def end_txn(self, p: Producer, commit: bool) -> None:
        """EndTxn: with nothing in flight, the transaction coordinator writes the marker, and
        writes it again (refused, or lost in a crash) until it commits."""
        if p.ending or p.in_flight or not p.records:
            return
        p.ending = True

        def done() -> None:
            self.outcome[(p.pid, p.txn)] = commit
            self.stats["txns_committed" if commit else "txns_aborted"] += 1
            p.txn += 1
            p.records = []
            p.ending = False

        def write() -> None:
            if self.refuse > 0:
                self.refuse -= 1
                self.at(self.now + 100, write)
                return
            self._write(Batch([(b"marker", b"")], marker=(p.pid, commit), on_commit=done, on_lost=write))

        write()

    def plain_commit(self) -> None:
        tp = self.rng.choice(self.partitions)
        meta = f"plain/{self.serial()}"
        req = CommitRequest(GROUP, "", None, -1, -1, (CommitPartition(tp[0], tp[1], self.serial(), -1, meta),), 8)
        self._request(lambda c: c.commit(req, lambda errors: None), lambda: None)
        self.stats["plain_commits"] += 1

    def admin(self, what: str) -> None:
        c = self.coordinator
        if c is not None and c.serving and c.ready:
            self.stats[f"admin_{what}"] += 1
            c.admin(what)

    def fetch(self, stable: bool) -> None:
        c = self.coordinator
        if c is not None and c.serving and c.ready:
            c.fetch(stable)

    # ---------------------------------------------------------- the oracle and the properties

    def oracle(self, queued: list[Batch] | None = None) -> tuple[dict[TP, str | None], set[TP]]:
        """From the log (its applied markers): per partition the metadata of the offset to
        show (the latest plain or committed-transaction record), and the unstable partitions."""
        completed: dict[int, list[bool]] = {}  # pid -> outcomes of its applied markers, in order
        for batch in self.log:
            if batch.applied and batch.marker is not None:
                completed.setdefault(batch.marker[0], []).append(batch.marker[1])
        shown: dict[TP, str | None] = dict.fromkeys(self.partitions)
        unstable: set[TP] = set()
        markers_seen: Counter[int] = Counter()
        for batch in self.log + (queued or []):
            if batch.marker is not None:
                if batch.applied:
                    markers_seen[batch.marker[0]] += 1
                continue
            for k, v in batch.records:
                key = decode_key(k)
                if not isinstance(key, OffsetKey):
                    continue  # (the group's tombstone, of DeleteGroups)
                tp = (key.topic, key.partition)
                value = decode_value(key, v)
                meta = None if value is None else value.metadata  # type: ignore[union-attr]
                if batch.producer < 0:
                    shown[tp] = meta
                    if value is None:
                        unstable.discard(tp)  # a tombstone drops the pending offsets before it
                    continue
                n = markers_seen[batch.producer]  # this record's transaction: the producer's n-th
                outcomes = completed.get(batch.producer, [])
                if n >= len(outcomes):
                    unstable.add(tp)
                elif outcomes[n]:
                    shown[tp] = meta
        # A record shown above was assigned in log order: the latest of the plain records and
        # committed transactions' records, which is Kafka's rule by record offset.
        return shown, unstable

    def compare(self, offsets: list[CommittedOffset], expected: dict[TP, str | None], unstable: set[TP],
                where: str) -> None:  # fmt: skip
        for o in offsets:
            tp = (o.topic, o.partition)
            if o.error == ErrorCode.UNSTABLE_OFFSET_COMMIT:
                if tp not in unstable:
                    raise Violation(f"[unstable] {where}: {tp} is UNSTABLE_OFFSET_COMMIT with no open transaction")
                continue
            if tp in unstable:
                raise Violation(f"[unstable] {where}: {tp} has an open transaction's offset but answered {o}")
            meta = o.metadata if o.offset >= 0 else None
            if meta is not None and meta.startswith("txn/"):
                _, pid, txn, _n = meta.split("/")
                result = self.outcome_of(int(pid), int(txn))
                if result is False:
                    raise Violation(f"[aborted-visible] {where}: {tp} shows {meta} of an aborted transaction")
                if result is None:
                    raise Violation(f"[pending-visible] {where}: {tp} shows {meta} of an open transaction")
            if meta != expected[tp]:
                raise Violation(f"[committed-visible] {where}: {tp} shows {meta!r}, the log says {expected[tp]!r}")

    def outcome_of(self, pid: int, txn: int) -> bool | None:
        """COMMIT / ABORT once the transaction's marker was applied; None while it is open."""
        seen = 0
        for batch in self.log:
            if batch.applied and batch.marker is not None and batch.marker[0] == pid:
                if seen == txn:
                    return batch.marker[1]
                seen += 1
        return None

    def _check_acked(self, metas: list[str]) -> None:
        committed = set()
        for batch in self.log[: self.hw]:
            if batch.producer >= 0:
                for k, v in batch.records:
                    key = decode_key(k)
                    value: Any = decode_value(key, v)
                    committed.add(value.metadata)
        missing = [m for m in metas if m not in committed]
        if missing:
            raise Violation(f"[acked-txn-commit] acknowledged {missing} are not committed in the log")


def txn_walk(seed: int, actions: int = 120) -> TxnWorld:
    """A seeded random history; every fetch and load is checked; at the end every producer
    finishes its transaction and the whole state is checked once more."""
    r = random.Random(seed * 104_729 + 11)
    w = TxnWorld(seed, producers=r.randint(1, 3))
    w.run(400)
    for _ in range(actions):
        x = r.random()
        p = r.choice(w.producers)
        if x < 0.20:
            w.run(r.choice((5, 20, 50, 200, 800)))
        elif x < 0.40:
            w.txn_commit(p)
        elif x < 0.52:
            w.end_txn(p, commit=r.random() < 0.6)
            if r.random() < 0.3:  # a plain commit while the marker is written, its append refused
                w.run(r.randint(0, 20))
                w.refuse = 1
                w.plain_commit()
        elif x < 0.64:
            w.plain_commit()
        elif x < 0.78:
            w.fetch(stable=r.random() < 0.5)
        elif x < 0.83:
            w.crash_coordinator()
        elif x < 0.88:
            w.controlled_move()
        elif x < 0.90:
            w.stall_replication(r.choice((100, 1_000)))
        elif x < 0.93:
            if r.random() < 0.3:
                w.refuse = 1  # (the tombstones refused: the offsets and pending ones come back)
            w.admin(r.choice(("delete_offsets", "delete_group")))
        else:
            w.refuse = r.randint(1, 2)
            w.stats["isr_flaps"] += 1
    w.stall_until, w.refuse = -1, 0
    w.run(5_000)
    for p in w.producers:
        w.end_txn(p, commit=r.random() < 0.5)
    w.run(5_000)
    if w.coordinator is None or not w.coordinator.ready:
        w.run(4_000)
    for stable in (False, True):
        w.fetch(stable)
    w.run(100)
    return w
