"""A simulated world for the group coordinator (`broker.group.shard.GroupShard`): one
`__consumer_offsets` partition, its successive coordinators, and consumers of one group.

Everything is deterministic given the seed and the calls made. Time is simulated ms.

- The coordinator is the REAL `GroupShard`, driven as `broker.group.runtime` drives it: each
  request becomes an operation of the shard under a token; the operation's records are
  encoded with `broker.group.records` and appended to the simulated partition log; its
  answers go out through the REAL `broker.group.write_order.WriteOrder` (only once its own
  append and every earlier one completed; `undo` on a failed append); heartbeats are answered
  at once, OffsetFetch after the appends before it; due deadlines run `tick`.
- The partition log holds encoded batches and a high watermark (HW). An append commits after
  a short replication delay; during a replication stall the HW stops, and an append not
  committed within `offsets.commit.timeout.ms` completes with REQUEST_TIMED_OUT (its records
  stay in the log and may commit later); while the ISR is below min.insync.replicas appends
  are refused (NOT_ENOUGH_REPLICAS: not in the log).
- Coordinator moves. A crash silences the coordinator at once (nothing more is answered);
  after a failover delay a new one loads the log the new leader has: the committed prefix
  plus a random part of the uncommitted tail (which then commits), decoded and replayed in
  order, answering COORDINATOR_LOAD_IN_PROGRESS meanwhile. A controlled shutdown first
  commits everything appended (answers go), then unloads: waiting requests get
  NOT_COORDINATOR, as every later request to it does.
- The network delays each request and answer (so they reorder), loses them with a settable
  probability and delays some far beyond the client's request timeout. A client gives a
  request up after `request_timeout_ms` (a JoinGroup: the rebalance timeout + 5 s, as the
  clients do) and never reads its answer (the connection is gone).
- Members (`Member`) follow the classic protocol as kafka-python and librdkafka do: JoinGroup
  v5 (KIP-394: an empty id gets MEMBER_ID_REQUIRED and the id, then joins with it), the leader
  range-assigns the topic's partitions from the members' subscriptions, SyncGroup, then
  OffsetFetch for its partitions and consumption from there, heartbeats, commits of what it
  consumed (asynchronous: several may be in flight; also before rejoining, as an eager
  consumer does when revoking), LeaveGroup
  (dynamic members only, as KIP-345 clients do). Crash = silence; pause = silence for a while,
  then it resumes where it was; a static member (group.instance.id) restarts as a new process
  with the same instance id; a duplicate of a paused static member makes the paused one a
  zombie that must be fenced. An admin deletes the offsets of an empty group, or the group,
  and reads all of its offsets (kafka-consumer-groups.sh --describe).

Properties (checked as each event happens; `Violation` names the rule):
1. [one-owner] within one generation no partition is in the assignments answered to two
   members (a static member is its instance: a restarted process takes its predecessor's
   partitions);
2. [acked-commit] an acknowledged offset commit is never lost nor rolled back: an
   OffsetFetch (members', and an admin's --describe) and the state a new coordinator loads
   give, per partition, the last acknowledged commit or one the coordinator accepted after
   it; an acknowledged delete is not undone (only a later accepted commit, or a later
   accepted delete not refused, may show instead); [acked-delete] a group an acknowledged
   DeleteGroups removed does not come back (unless joined or committed to since);
3. [fenced-commit] a commit is refused from a member fenced by a newer generation (one whose
   SyncGroup was answered) or by a newer member id of its group.instance.id (answered a
   SyncGroup);
4. [liveness] (`settle`) once the faults stop, within a bound every live member is in the
   Stable group at its generation, and their assignments cover every partition exactly
   once (a member fenced for good, FENCED_INSTANCE_ID, has stopped: it is not live);
and [static-map] every group.instance.id maps to a member of that instance.
"""

from __future__ import annotations

import heapq
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from broker.group.messages import (
    CommitPartition,
    CommitRequest,
    CommittedOffset,
    HeartbeatRequest,
    JoinRequest,
    JoinResult,
    LeaveResult,
    LeavingMember,
    SyncRequest,
    SyncResult,
)
from broker.group.records import decode_key, decode_value, encode_key, encode_value
from broker.group.shard import CoordinatorConfig, GroupShard, Outcome, append_error
from broker.group.write_order import WriteOrder
from quorum.kafka_errors import ErrorCode
from tests.sim.groups.protocol import decode_assignment, encode_subscription, range_assign

GROUP = "g"
TRACE = False  # keep a trace of every run (`World.trace`), to debug a seed
TOPIC = "t"
COORDINATOR_ERRORS = frozenset(
    {
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.UNKNOWN_SERVER_ERROR,
    }
)


class Violation(AssertionError):
    """A group property does not hold."""


@dataclass(frozen=True)
class SimConfig:
    partitions: int = 6
    session_timeout_ms: int = 6_000
    rebalance_timeout_ms: int = 8_000
    heartbeat_interval_ms: int = 1_000
    request_timeout_ms: int = 4_000
    retry_backoff_ms: int = 100
    initial_rebalance_delay_ms: int = 0
    commit_timeout_ms: int = 2_000  # offsets.commit.timeout.ms
    # How long after the faults stop every live member must be in a Stable group.
    liveness_bound_ms: int = 60_000


# ---------------------------------------------------------------- the partition log


@dataclass(slots=True)
class _Batch:
    records: list[tuple[bytes, bytes | None]]
    writer: Coordinator | None  # who waits for its commit (None once completed or dropped)
    entry: int


class OffsetsLog:
    """The `__consumer_offsets` partition: encoded batches and the HW (a count of batches)."""

    def __init__(self) -> None:
        self.batches: list[_Batch] = []
        self.hw = 0


# ---------------------------------------------------------------- the coordinator


class Coordinator:
    """One incarnation of the group's coordinator: a real `GroupShard` and `WriteOrder`,
    driven as `broker.group.runtime.GroupCoordinator` drives them."""

    def __init__(self, world: World, number: int) -> None:
        self.world = world
        self.number = number
        self.shard = GroupShard(
            CoordinatorConfig(group_initial_rebalance_delay_ms=world.config.initial_rebalance_delay_ms),
            new_id=world.new_member_id,
        )
        self.order = WriteOrder()
        self.ready = False
        self.alive = True  # False once crashed: silent from then on
        self.unloaded = False  # a controlled shutdown moved the partition away
        # token -> (member, request number, kind, request, the world's group epoch then)
        self.waiting: dict[int, tuple[Member, int, str, Any, int]] = {}
        # WriteOrder entry -> what to do once it is released
        self.on_entry: dict[int, Callable[[ErrorCode], None]] = {}

    @property
    def serving(self) -> bool:
        return self.alive and not self.unloaded

    # ---------------------------------------------------------- loading

    def load(self) -> None:
        w = self.world
        for batch in w.log.batches:
            for k, v in batch.records:
                key = decode_key(k)
                self.shard.replay(key, decode_value(key, v), w.now)
        self.shard.loaded(w.now)
        self.ready = True
        w.stats["loads"] += 1
        w.check_loaded_offsets(self)

    # ---------------------------------------------------------- requests (the runtime's handling)

    def handle(self, member: Member, number: int, kind: str, req: Any) -> None:
        w = self.world
        w.note(f"C{self.number} <- {member.name} {kind} {req}")
        if not self.ready:
            member_answer(w, member, number, kind, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
            return
        if kind in ("join", "commit"):  # (either may create the group again)
            w.group_touched = w.next_seq()
            w.group_deleted = False
        now = w.now
        if kind in ("join", "sync", "leave"):
            token = w.new_token()
            self.waiting[token] = (member, number, kind, req, w.group_epoch)
            if kind == "join":
                out = self.shard.join(req, token, now)
            elif kind == "sync":
                out = self.shard.sync(req, token, now)
            else:
                out = self.shard.leave(GROUP, req, token, now)
            self.dispatch(out)
        elif kind == "heartbeat":
            w.send_answer(self, member, number, kind, self.shard.heartbeat(req, now))
        elif kind == "commit":
            out, errors = self.shard.commit(req, now)
            w.on_commit_processed(member, req, errors)
            entry = self.dispatch(out)

            def committed(code: ErrorCode, errors: list[ErrorCode] = errors) -> None:
                if code != ErrorCode.NONE:
                    mapped = append_error(code)
                    errors = [mapped if e == ErrorCode.NONE else e for e in errors]
                w.on_commit_answered(req, errors)
                w.send_answer(self, member, number, kind, errors)

            self.on_entry[entry] = committed
            self.release()
        elif kind == "fetch":
            offsets = self.shard.fetch_offsets(GROUP, req)
            w.on_fetch_processed(offsets)
            if self.order.pending():
                entry = self.dispatch(Outcome())
                self.on_entry[entry] = lambda code: w.send_answer(
                    self, member, number, kind, offsets if code == ErrorCode.NONE else append_error(code)
                )
                self.release()
            else:
                w.send_answer(self, member, number, kind, offsets)
        elif kind == "admin":
            self.admin(req)
        else:  # pragma: no cover
            raise AssertionError(kind)

    def admin(self, what: str) -> None:
        w = self.world
        if what == "describe_offsets":  # kafka-consumer-groups.sh --describe: OffsetFetch of all
            w.on_fetch_processed(self.shard.fetch_offsets(GROUP, None))
            return
        if what == "delete_group":
            code, out = self.shard.delete_group(GROUP, w.now)
            deleted = [(TOPIC, p) for p in range(w.config.partitions)] if code == ErrorCode.NONE else []
            if code == ErrorCode.NONE:
                w.on_group_deleted()
        else:
            tps = [(TOPIC, p) for p in range(w.config.partitions)]
            code, errors, out = self.shard.delete_offsets(GROUP, tps)
            ok = code == ErrorCode.NONE
            deleted = [tp for tp, e in zip(tps, errors, strict=ok) if ok and e == ErrorCode.NONE]
        seq = w.next_seq()
        for tp in deleted:
            w.deletes_accepted.setdefault(tp, set()).add(seq)
        entry = self.dispatch(out)

        def answered(written: ErrorCode) -> None:
            if written == ErrorCode.NONE and deleted:
                w.on_delete_acked(deleted, seq, what == "delete_group")
            elif written != ErrorCode.REQUEST_TIMED_OUT:  # refused: these deletes never happened
                for tp in deleted:
                    w.deletes_accepted[tp].discard(seq)

        self.on_entry[entry] = answered
        self.release()

    def tick(self) -> None:
        self.dispatch(self.shard.tick(self.world.now))

    # ---------------------------------------------------------- writes and answers (WriteOrder)

    def dispatch(self, out: Outcome) -> int:
        entry = self.order.submit(out)
        if out.records:
            self.world.append(self, entry, out)
        self.release()
        return entry

    def completed(self, entry: int, code: ErrorCode) -> None:
        if not self.serving:
            return
        self.world.note(f"C{self.number} append of entry {entry}: {code.name}")
        if code != ErrorCode.NONE:
            self.world.stats["append_failures"] += 1
        self.order.completed(entry, code)
        self.release()

    def release(self) -> None:
        w = self.world
        for released in self.order.drain():
            for token, reply in released.replies.items():
                waiting = self.waiting.pop(token, None)
                if waiting is not None:
                    member, number, kind, req, epoch = waiting
                    w.note(f"C{self.number} -> {member.name} {kind} {reply}")
                    w.on_released(member, req, reply, epoch)
                    w.send_answer(self, member, number, kind, reply)
            then = self.on_entry.pop(released.entry, None)
            if then is not None:
                then(released.code)

    def unload(self) -> None:
        """Leadership moved away (controlled): waiting requests get NOT_COORDINATOR."""
        self.unloaded = True
        for member, number, kind, _, _ in self.waiting.values():
            member_answer(self.world, member, number, kind, ErrorCode.NOT_COORDINATOR)
        self.waiting.clear()


def member_answer(w: World, member: Member, number: int, kind: str, code: ErrorCode) -> None:
    """An error answer of the coordinator (not from the shard) for a request of `kind`."""
    reply: Any
    if kind == "join":
        reply = JoinResult(code)
    elif kind == "sync":
        reply = SyncResult(code)
    elif kind == "leave":
        reply = LeaveResult(code)
    elif kind == "commit":
        reply = [code]
    elif kind == "fetch":
        reply = code
    else:
        reply = code
    w.send_answer(None, member, number, kind, reply)


# ---------------------------------------------------------------- members


class State(Enum):
    JOINING = "joining"
    SYNCING = "syncing"
    STABLE = "stable"
    DEAD = "dead"  # crashed, or a fatal error (FENCED_INSTANCE_ID), or closed


@dataclass(eq=False)
class Member:
    """One consumer process."""

    name: str  # the process, for messages
    instance: str | None  # group.instance.id
    state: State = State.JOINING
    member_id: str = ""
    generation: int = -1
    owned: frozenset[tuple[str, int]] = frozenset()
    positions: dict[tuple[str, int], int] = field(default_factory=dict)  # known after OffsetFetch
    dirty: bool = False  # consumed since the last commit
    paused_until: int = -1  # silent until then
    fenced: bool = False
    group_request: int = 0  # the number of the join/sync/heartbeat/leave in flight (0: none)
    offset_request: int = 0  # the number of the OffsetFetch in flight
    commits: set[int] = field(default_factory=set)  # the numbers of the commits in flight (async)
    next_heartbeat: int = 0
    synced_generation: int = -1

    @property
    def live(self) -> bool:
        return self.state is not State.DEAD

    def owner(self) -> str:
        return self.instance if self.instance is not None else self.member_id


# ---------------------------------------------------------------- the world


class World:
    def __init__(self, config: SimConfig, seed: int) -> None:
        self.config = config
        self.rng = random.Random(seed)
        self.now = 0
        self._events: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = 0
        self.log = OffsetsLog()
        self.coordinators: list[Coordinator] = []
        self.coordinator: Coordinator | None = None
        self.members: list[Member] = []
        self._ids = 0
        self._tokens = 0
        self._requests = 0
        self._commit_seq = 0
        self.loss = 0.0
        self.long_delay = 0.0
        self.stall_until = -1  # the HW does not move before
        self.refuse_until = -1  # appends are refused (ISR below min.insync.replicas) before
        self.refuse_next = 0  # ... and so many next ones (a flapping ISR)
        self.stats: Counter[str] = Counter()
        # Property 1: (group epoch, generation, partition) -> the owner answered with it; the
        # group epoch counts DeleteGroups (a new group numbers its generations from 1 again).
        self.assigned: dict[tuple[int, int, tuple[str, int]], str] = {}
        self.group_epoch = 0
        # Property 3: the newest generation answered by a SyncGroup; per instance, the newest
        # member id (in the order the coordinator made them) answered by a SyncGroup.
        self.synced_generation = -1
        self.synced_member_of: dict[str, str] = {}
        self.id_order: dict[str, int] = {}  # member id -> when the coordinator made it
        # Property 2: commit metadata -> the order in which the coordinator accepted it;
        # per partition, the latest acknowledged (order, offset or None for a delete).
        self.accepted: dict[str, int] = {}
        self.acked: dict[tuple[str, int], tuple[int, int | None]] = {}
        # The orders of the deletes accepted and not refused, per partition.
        self.deletes_accepted: dict[tuple[str, int], set[int]] = {}
        self.group_touched = 0  # the order of the last JoinGroup or OffsetCommit processed
        self.group_deleted = False  # a DeleteGroups was acknowledged, and nothing joined or committed since
        self.trace: list[str] | None = [] if TRACE else None  # what happened (debugging a seed)
        self.start_coordinator()
        self.run(0)

    # ---------------------------------------------------------- plumbing

    def at(self, when: int, fn: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._events, (when, self._seq, fn))

    def note(self, line: str) -> None:
        if self.trace is not None:
            self.trace.append(f"{self.now:>7} {line}")

    def new_member_id(self, prefix: str) -> str:
        self._ids += 1
        member_id = f"{prefix}-{self._ids:05d}"
        self.id_order[member_id] = self._ids
        return member_id

    def new_token(self) -> int:
        self._tokens += 1
        return self._tokens

    def next_seq(self) -> int:
        self._commit_seq += 1
        return self._commit_seq

    def run(self, ms: int) -> None:
        """Run the world for `ms` simulated ms, checking the properties after every event."""
        end = self.now + ms
        while True:
            c = self.coordinator
            deadline = c.shard.next_deadline() if c is not None and c.serving and c.ready else None
            nxt = self._events[0][0] if self._events else None
            if deadline is not None and (nxt is None or deadline < nxt) and deadline <= end:
                self.now = max(self.now, deadline)
                assert c is not None
                c.tick()
            elif nxt is not None and nxt <= end:
                when, _, fn = heapq.heappop(self._events)
                self.now = max(self.now, when)
                fn()
            else:
                break
            self.check()
        self.now = end

    def delay(self) -> int | None:
        """A network delay (ms), or None when the message is lost."""
        if self.rng.random() < self.loss:
            self.stats["lost_msgs"] += 1
            return None
        if self.rng.random() < self.long_delay:
            self.stats["long_delayed_msgs"] += 1
            return self.rng.randint(self.config.request_timeout_ms // 2, 2 * self.config.request_timeout_ms)
        return self.rng.randint(1, 15)

    # ---------------------------------------------------------- the log

    def append(self, c: Coordinator, entry: int, out: Outcome) -> None:
        if self.now < self.refuse_until or self.refuse_next > 0:
            self.refuse_next = max(0, self.refuse_next - 1)
            self.stats["appends_refused"] += 1
            self.at(self.now + self.rng.randint(1, 5), lambda: c.completed(entry, ErrorCode.NOT_ENOUGH_REPLICAS))
            return
        records = [(encode_key(k), None if v is None else encode_value(v)) for k, v in out.records]
        batch = _Batch(records, c, entry)
        self.log.batches.append(batch)
        index = len(self.log.batches)
        self.at(max(self.now + self.rng.randint(1, 20), self.stall_until), self._advance_hw)

        def timeout() -> None:
            if batch.writer is c and self.log.hw < index:  # (a crash clears every writer)
                batch.writer = None
                self.stats["appends_timed_out"] += 1
                c.completed(entry, ErrorCode.REQUEST_TIMED_OUT)

        self.at(self.now + self.config.commit_timeout_ms, timeout)

    def _advance_hw(self) -> None:
        if self.now < self.stall_until:
            self.at(self.stall_until, self._advance_hw)
            return
        while self.log.hw < len(self.log.batches):
            batch = self.log.batches[self.log.hw]
            self.log.hw += 1
            writer, batch.writer = batch.writer, None
            if writer is not None:
                writer.completed(batch.entry, ErrorCode.NONE)

    # ---------------------------------------------------------- coordinator moves

    def start_coordinator(self) -> None:
        c = Coordinator(self, len(self.coordinators) + 1)
        self.coordinators.append(c)
        self.coordinator = c
        self.at(self.now + self.rng.randint(10, 300), c.load)

    def crash_coordinator(self) -> None:
        """kill -9 of the coordinator's broker: the new leader has the committed batches and
        maybe part of the uncommitted tail; it loads after a failover delay."""
        c = self.coordinator
        if c is None or not c.ready:
            return
        c.alive = False
        self.coordinator = None
        self.stats["coordinator_crashes"] += 1
        keep = self.log.hw + self.rng.randint(0, len(self.log.batches) - self.log.hw)
        if keep < len(self.log.batches):
            self.stats["uncommitted_batches_lost"] += len(self.log.batches) - keep
        del self.log.batches[keep:]
        for batch in self.log.batches:
            batch.writer = None
        self.log.hw = len(self.log.batches)
        self.at(self.now + self.rng.randint(200, 3_000), self.start_coordinator)

    def controlled_move(self) -> None:
        """Controlled shutdown (or a preferred election): everything appended commits, its
        answers go, then the partition moves."""
        c = self.coordinator
        if c is None or not c.ready:
            return
        self.stats["coordinator_controlled_moves"] += 1
        self.stall_until = -1
        self._advance_hw()
        c.unload()
        self.coordinator = None
        self.at(self.now + self.rng.randint(20, 500), self.start_coordinator)

    # ---------------------------------------------------------- the network

    def send(self, member: Member, kind: str, req: Any) -> int:
        """A request of `member` to the coordinator it finds now; its number."""
        self._requests += 1
        number = self._requests
        if kind == "commit":
            member.commits.add(number)
        elif kind == "fetch":
            member.offset_request = number
        else:
            member.group_request = number
        target = self.coordinator
        if target is None:  # FindCoordinator: COORDINATOR_NOT_AVAILABLE
            self.at(self.now + self.rng.randint(1, 20),
                    lambda: member_answer(self, member, number, kind, ErrorCode.COORDINATOR_NOT_AVAILABLE))  # fmt: skip
        else:
            d = self.delay()
            if d is not None:
                self.at(self.now + d, lambda: self._deliver(target, member, number, kind, req))
        # A JoinGroup waits for the whole group: clients give it the rebalance timeout + 5 s
        # (the Java client's JOIN_GROUP_TIMEOUT_LAPSE; librdkafka's is alike).
        timeout = self.config.request_timeout_ms
        if kind == "join":
            timeout = max(timeout, self.config.rebalance_timeout_ms + 5_000)
        self.at(self.now + timeout, lambda: self._timed_out(member, number, kind))
        return number

    def _deliver(self, target: Coordinator, member: Member, number: int, kind: str, req: Any) -> None:
        if not target.alive:
            return
        if target.unloaded:
            member_answer(self, member, number, kind, ErrorCode.NOT_COORDINATOR)
            return
        target.handle(member, number, kind, req)

    def send_answer(self, c: Coordinator | None, member: Member, number: int, kind: str, reply: Any) -> None:
        if c is not None and not c.alive:
            return
        d = self.delay()
        if d is not None:
            self.at(self.now + d, lambda: self._answered(member, number, kind, reply))

    @staticmethod
    def _in_flight(member: Member, number: int, kind: str) -> bool:
        if kind == "commit":
            return number in member.commits
        return number == (member.offset_request if kind == "fetch" else member.group_request)

    def _answered(self, member: Member, number: int, kind: str, reply: Any) -> None:
        if not self._in_flight(member, number, kind) or not member.live or self.now < member.paused_until:
            return  # given up (connection closed), or the process is gone or frozen
        if kind == "commit":
            member.commits.discard(number)
        elif kind == "fetch":
            member.offset_request = 0
        else:
            member.group_request = 0
        on_answer(self, member, kind, reply)

    def _timed_out(self, member: Member, number: int, kind: str) -> None:
        if not self._in_flight(member, number, kind) or not member.live:
            return
        if self.now < member.paused_until:
            self.at(member.paused_until, lambda: self._timed_out(member, number, kind))
            return
        self.stats["request_timeouts"] += 1
        if kind == "commit":
            member.commits.discard(number)
        elif kind == "fetch":
            member.offset_request = 0
            if member.state is State.STABLE:
                fetch_positions(self, member)
        else:
            member.group_request = 0
            if kind in ("join", "sync"):
                rejoin(self, member)

    # ---------------------------------------------------------- members

    def start_member(self, static: str | None = None) -> Member:
        m = Member(f"p{len(self.members) + 1}", static)
        self.members.append(m)
        self.stats["members_started"] += 1
        send_join(self, m)
        self.at(self.now + self.config.heartbeat_interval_ms, lambda: heartbeat_loop(self, m))
        return m

    def crash_member(self, m: Member) -> None:
        if m.live:
            m.state = State.DEAD
            self.stats["member_crashes"] += 1

    def close_member(self, m: Member) -> None:
        """consumer.close(): commit, then LeaveGroup (dynamic members; static ones just stop)."""
        if not m.live or self.now < m.paused_until:
            return
        if m.state is State.STABLE and m.dirty:
            send_commit(self, m)
        if m.instance is None and m.member_id:
            self.send(m, "leave", (LeavingMember(m.member_id),))
            self.stats["leaves"] += 1
        m.state = State.DEAD

    def pause_member(self, m: Member, ms: int) -> None:
        if m.live:
            m.paused_until = max(m.paused_until, self.now + ms)
            self.stats["member_pauses"] += 1

    def restart_static(self, m: Member, duplicate: bool) -> Member | None:
        """A new process with `m`'s group.instance.id: `m` crashed (a restart), or it is paused
        and will come back as a zombie (a duplicate)."""
        if m.instance is None or any(o.instance == m.instance and o.live and o is not m for o in self.members):
            return None
        if duplicate:
            self.pause_member(m, self.rng.randint(500, 3 * self.config.session_timeout_ms))
            self.stats["static_duplicates"] += 1
        else:
            self.crash_member(m)
            self.stats["static_restarts"] += 1
        return self.start_member(m.instance)

    def consume(self, m: Member) -> None:
        if m.state is not State.STABLE or self.now < m.paused_until or not m.positions:
            return
        tp = self.rng.choice(sorted(m.positions))
        m.positions[tp] += self.rng.randint(1, 5)
        m.dirty = True
        self.stats["consumed"] += 1

    def commit(self, m: Member) -> None:
        if m.state is State.STABLE and self.now >= m.paused_until and m.dirty:
            send_commit(self, m)

    def admin_delete(self, what: str) -> None:
        """kafka-consumer-groups.sh --delete / --delete-offsets (they work on an empty group),
        or --describe (`describe_offsets`: an OffsetFetch of all the group's offsets)."""
        c = self.coordinator
        if c is None or not c.serving or not c.ready:
            return
        self.stats[f"admin_{what}"] += 1
        c.handle(_ADMIN, 0, "admin", what)

    # ---------------------------------------------------------- faults

    def set_network(self, loss: float, long_delay: float) -> None:
        self.loss, self.long_delay = loss, long_delay

    def stall_replication(self, ms: int) -> None:
        self.stall_until = max(self.stall_until, self.now + ms)
        self.stats["replication_stalls"] += 1

    def refuse_appends(self, ms: int) -> None:
        self.refuse_until = max(self.refuse_until, self.now + ms)
        self.stats["isr_below_min"] += 1

    def refuse_next_appends(self, count: int) -> None:
        self.refuse_next += count
        self.stats["isr_flaps"] += 1

    # ---------------------------------------------------------- bookkeeping for the properties

    def on_released(self, member: Member, req: Any, reply: Any, epoch: int) -> None:
        """An answer the coordinator sends (it may still be lost on the way)."""
        if isinstance(req, SyncRequest) and isinstance(reply, SyncResult) and reply.error == ErrorCode.NONE:
            self._on_assignment(req, reply, epoch)
        if isinstance(reply, JoinResult | SyncResult) and reply.error == ErrorCode.FENCED_INSTANCE_ID:
            self.stats["fenced_instance_answers"] += 1

    def on_group_deleted(self) -> None:
        """DeleteGroups removed the group: a new one starts its generations again."""
        self.group_epoch += 1
        self.synced_generation = -1
        self.synced_member_of = {}
        self.stats["groups_deleted"] += 1

    def _on_assignment(self, req: SyncRequest, reply: SyncResult, epoch: int) -> None:
        """A SyncGroup answered with an assignment; `epoch`: the group epoch when it was
        processed (a group deleted since numbers its generations again)."""
        generation = req.generation
        owner = req.group_instance_id if req.group_instance_id is not None else req.member_id
        for tp in decode_assignment(reply.assignment):
            other = self.assigned.setdefault((epoch, generation, tp), owner)
            if other != owner:
                raise Violation(f"[one-owner] generation {generation}: {tp} answered to {owner} and to {other}")
        if epoch != self.group_epoch:
            return  # (an answer to the deleted group's last members: it fences nobody now)
        if generation > self.synced_generation:
            self.synced_generation = generation
            self.stats["generations_synced"] += 1
        instance = req.group_instance_id
        if instance is not None:
            latest = self.synced_member_of.get(instance)
            if latest is None or self.id_order[req.member_id] > self.id_order[latest]:
                self.synced_member_of[instance] = req.member_id
                if latest is not None:
                    self.stats["static_replacements_synced"] += 1

    def on_commit_processed(self, member: Member, req: CommitRequest, errors: list[ErrorCode]) -> None:
        accepted = bool(errors) and all(e == ErrorCode.NONE for e in errors)
        if not accepted:
            if any(e in (ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID)
                   for e in errors):  # fmt: skip
                self.stats["fenced_commits_refused"] += 1
            return
        if req.generation < self.synced_generation:
            raise Violation(
                f"[fenced-commit] {member.name} ({req.member_id}) committed with generation {req.generation} "
                f"after generation {self.synced_generation} was synced"
            )
        latest = self.synced_member_of.get(req.group_instance_id or "")
        if latest is not None and self.id_order.get(req.member_id, 0) < self.id_order[latest]:
            raise Violation(
                f"[fenced-commit] {member.name} committed as {req.member_id} of instance {req.group_instance_id} "
                f"after the newer {latest} was answered its SyncGroup"
            )
        for p in req.partitions:
            self.accepted[p.metadata or ""] = self.next_seq()

    def on_commit_answered(self, req: CommitRequest, errors: list[ErrorCode]) -> None:
        for p, e in zip(req.partitions, errors, strict=True):
            if e == ErrorCode.NONE:
                seq = self.accepted[p.metadata or ""]
                tp = (p.topic, p.partition)
                if tp not in self.acked or self.acked[tp][0] < seq:
                    self.acked[tp] = (seq, p.offset)
                self.stats["commits_acked"] += 1

    def on_delete_acked(self, tps: list[tuple[str, int]], seq: int, group: bool) -> None:
        for tp in tps:
            self.acked[tp] = (seq, None)
        self.stats["deletes_acked"] += 1
        if group and seq > self.group_touched:
            self.group_deleted = True

    def acked_partitions(self) -> list[tuple[str, int]]:
        return sorted(self.acked)

    def _check_offset(self, tp: tuple[str, int], offset: int, metadata: str, where: str) -> None:
        acked = self.acked.get(tp)
        if acked is None:
            return
        seq, value = acked
        if offset < 0:
            if value is not None and max(self.deletes_accepted.get(tp, ()), default=-1) < seq:
                raise Violation(f"[acked-commit] {where}: {tp} has no offset; acknowledged: {value}")
            return
        got = self.accepted.get(metadata)
        if got is None:
            raise Violation(f"[acked-commit] {where}: {tp} = {offset} ({metadata!r}) was never accepted")
        if got < seq:
            raise Violation(
                f"[acked-commit] {where}: {tp} = {offset} (accepted #{got}) is older than the acknowledged "
                f"{'delete' if value is None else value} (#{seq})"
            )

    def on_fetch_processed(self, offsets: list[CommittedOffset]) -> None:
        for o in offsets:
            self._check_offset((o.topic, o.partition), o.offset, o.metadata, "OffsetFetch")

    def check_loaded_offsets(self, c: Coordinator) -> None:
        if self.group_deleted and GROUP in c.shard.groups:
            raise Violation(f"[acked-delete] coordinator {c.number} loaded a group an acked DeleteGroups removed")
        mine = c.shard.offsets.get(GROUP, {})
        for tp in self.acked:
            v = mine.get(tp)
            self._check_offset(tp, -1 if v is None else v.offset, "" if v is None else v.metadata,
                               f"coordinator {c.number} loaded")  # fmt: skip

    # ---------------------------------------------------------- properties

    def check(self) -> None:
        """The per-event properties are checked where they happen (answers, commits,
        fetches, loads); this is the hook for the state-wide ones."""
        c = self.coordinator
        if c is not None and c.ready and c.serving:
            group = c.shard.groups.get(GROUP)
            if group is not None:
                for instance, member_id in group.static_members.items():
                    m = group.members.get(member_id)
                    if m is None or m.group_instance_id != instance:
                        raise Violation(f"[static-map] {instance} -> {member_id} is not that instance's member")

    def settle(self) -> None:
        """Stop the faults and require every live member in one Stable generation, every
        partition owned exactly once, within the liveness bound."""
        self.set_network(0.0, 0.0)
        self.stall_until = self.refuse_until = -1
        self.refuse_next = 0
        for m in self.members:
            m.paused_until = min(m.paused_until, self.now)
        if self.coordinator is None:
            self.run(3_500)
        start = self.now
        step = 500
        while True:
            problem = self.liveness_problem()
            if problem is None:
                self.stats["settled_ms"] += self.now - start
                return
            if self.now - start >= self.config.liveness_bound_ms:
                raise Violation(f"[liveness] not stable {self.now - start} ms after the faults stopped: {problem}")
            self.run(step)

    def liveness_problem(self) -> str | None:
        c = self.coordinator
        if c is None or not c.ready:
            return "no coordinator"
        live = [m for m in self.members if m.live]
        group = c.shard.groups.get(GROUP)
        if not live:
            return None
        if group is None:
            return "no group"
        if group.state.value != "Stable":
            return f"group {group.state.value}"
        ids = {m.member_id for m in live}
        if set(group.members) != ids:
            return f"group members {sorted(group.members)} != live {sorted(ids)}"
        for m in live:
            if m.state is not State.STABLE or m.generation != group.generation:
                return f"{m.name} {m.state.value} at generation {m.generation}, group at {group.generation}"
        owned: Counter[tuple[str, int]] = Counter()
        for m in live:
            owned.update(m.owned)
        want = {(TOPIC, p) for p in range(self.config.partitions)}
        if set(owned) != want or any(n != 1 for n in owned.values()):
            return f"assignment {sorted(owned.items())} does not cover {self.config.partitions} partitions once"
        return None


_ADMIN = Member("admin", None)


# ---------------------------------------------------------------- the members' protocol


def _join_request(w: World, m: Member) -> JoinRequest:
    return JoinRequest(
        GROUP, m.member_id, m.instance, "consumer", (("range", encode_subscription([TOPIC])),),
        w.config.session_timeout_ms, w.config.rebalance_timeout_ms, m.name, "127.0.0.1", 5,
    )  # fmt: skip


def send_join(w: World, m: Member) -> None:
    m.state = State.JOINING
    m.owned = frozenset()
    m.positions = {}
    m.dirty = False
    w.send(m, "join", _join_request(w, m))


def rejoin(w: World, m: Member, *, backoff: bool = True) -> None:
    """Revoke everything and join again (after a retry backoff)."""
    if not m.live:
        return
    m.state = State.JOINING
    m.owned = frozenset()
    m.positions = {}
    m.group_request = -1  # nothing else goes until the join is sent
    delay = w.config.retry_backoff_ms if backoff else 0

    def go() -> None:
        if m.live and m.state is State.JOINING and m.group_request == -1:
            if w.now < m.paused_until:
                w.at(m.paused_until, go)
                return
            w.send(m, "join", _join_request(w, m))

    w.at(w.now + delay, go)


def fatal(w: World, m: Member) -> None:
    m.state = State.DEAD
    m.fenced = True
    w.stats["members_fenced"] += 1


def send_commit(w: World, m: Member) -> None:
    parts = []
    for (t, p), offset in sorted(m.positions.items()):
        parts.append(CommitPartition(t, p, offset, -1, f"{m.name}/{w.new_token()}"))
    if not parts:
        return
    m.dirty = False
    req = CommitRequest(GROUP, m.member_id, m.instance, m.generation, -1, tuple(parts), 8)
    w.send(m, "commit", req)
    w.stats["commits_sent"] += 1


def fetch_positions(w: World, m: Member) -> None:
    if m.owned:
        w.send(m, "fetch", sorted(m.owned))


def heartbeat_loop(w: World, m: Member) -> None:
    if not m.live:
        return
    w.at(w.now + w.config.heartbeat_interval_ms, lambda: heartbeat_loop(w, m))
    if w.now < m.paused_until or m.state is not State.STABLE or m.group_request:
        return
    w.send(m, "heartbeat", HeartbeatRequest(GROUP, m.member_id, m.instance, m.generation))


def on_answer(w: World, m: Member, kind: str, reply: Any) -> None:
    if kind == "join":
        on_join(w, m, reply)
    elif kind == "sync":
        on_sync(w, m, reply)
    elif kind == "heartbeat":
        on_group_error(w, m, reply, "heartbeat")
    elif kind == "commit":
        codes = set(reply)
        if codes == {ErrorCode.NONE}:
            return
        m.dirty = True
        bad = codes - {ErrorCode.NONE} - COORDINATOR_ERRORS
        if bad and m.state is State.STABLE:
            on_group_error(w, m, next(iter(sorted(bad, key=lambda e: e.value))), "commit")
    elif kind == "fetch":
        if isinstance(reply, ErrorCode):
            if m.state is State.STABLE:
                w.at(w.now + w.config.retry_backoff_ms, lambda: fetch_positions(w, m) if not m.offset_request else None)
            return
        if m.state is State.STABLE:
            m.positions = {(o.topic, o.partition): max(o.offset, 0) for o in reply if (o.topic, o.partition) in m.owned}
    # leave answers need nothing


def on_group_error(w: World, m: Member, code: ErrorCode, what: str) -> None:
    if code == ErrorCode.NONE:
        return
    if code == ErrorCode.FENCED_INSTANCE_ID:
        fatal(w, m)
    elif code in COORDINATOR_ERRORS:
        return  # the next heartbeat / commit finds the coordinator again
    elif code == ErrorCode.REBALANCE_IN_PROGRESS:
        if m.state is State.STABLE:
            if m.dirty:
                send_commit(w, m)  # eager: commit what was consumed before revoking
            rejoin(w, m, backoff=False)
    elif code == ErrorCode.UNKNOWN_MEMBER_ID:
        m.member_id = ""
        w.stats[f"{what}_unknown_member"] += 1
        rejoin(w, m)
    elif code == ErrorCode.ILLEGAL_GENERATION:
        w.stats[f"{what}_illegal_generation"] += 1
        rejoin(w, m)
    else:
        raise Violation(f"[errors] {m.name}: unexpected {code.name} to a {what}")


def on_join(w: World, m: Member, res: JoinResult) -> None:
    if m.state is not State.JOINING:
        return
    if res.error == ErrorCode.MEMBER_ID_REQUIRED:
        w.stats["member_id_required"] += 1
        m.member_id = res.member_id
        w.send(m, "join", _join_request(w, m))
        return
    if res.error != ErrorCode.NONE:
        if res.error == ErrorCode.FENCED_INSTANCE_ID:
            fatal(w, m)
        elif res.error == ErrorCode.UNKNOWN_MEMBER_ID:
            m.member_id = ""
            rejoin(w, m)
        elif res.error in COORDINATOR_ERRORS or res.error in (ErrorCode.REBALANCE_IN_PROGRESS,
                                                                ErrorCode.ILLEGAL_GENERATION):  # fmt: skip
            rejoin(w, m)
        else:
            raise Violation(f"[errors] {m.name}: unexpected {res.error.name} to a JoinGroup")
        return
    m.member_id = res.member_id
    m.generation = res.generation
    m.state = State.SYNCING
    assignments: tuple[tuple[str, bytes], ...] = ()
    if res.members and not res.skip_assignment:
        given = range_assign([(j.member_id, j.group_instance_id, j.metadata) for j in res.members],
                             {TOPIC: w.config.partitions})  # fmt: skip
        assignments = tuple(sorted(given.items()))
        w.stats["leader_assignments"] += 1
    w.send(m, "sync", SyncRequest(GROUP, m.member_id, m.instance, m.generation, "consumer", "range", assignments))


def on_sync(w: World, m: Member, res: SyncResult) -> None:
    if m.state is not State.SYNCING:
        return
    if res.error != ErrorCode.NONE:
        if res.error == ErrorCode.FENCED_INSTANCE_ID:
            fatal(w, m)
        elif res.error == ErrorCode.UNKNOWN_MEMBER_ID:
            m.member_id = ""
            rejoin(w, m)
        elif res.error in COORDINATOR_ERRORS or res.error in (ErrorCode.REBALANCE_IN_PROGRESS,
                                                                ErrorCode.ILLEGAL_GENERATION):  # fmt: skip
            rejoin(w, m)
        else:
            raise Violation(f"[errors] {m.name}: unexpected {res.error.name} to a SyncGroup")
        return
    m.state = State.STABLE
    m.synced_generation = m.generation
    m.owned = decode_assignment(res.assignment)
    m.positions = {}
    fetch_positions(w, m)
