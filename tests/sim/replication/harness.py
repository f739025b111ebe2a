"""A simulated world for `broker.replica.state.PartitionState`: several partitions, N brokers.

Everything is deterministic given the calls made (hypothesis or a seeded `random.Random`
chooses them). Time is simulated milliseconds.

- Brokers host one replica of each partition (replication factor = brokers; partition p's
  replica list is the broker ids rotated by p, so each has another preferred leader). A
  replica is a `MemLog` and a `PartitionState` rebuilt at restart from the last high-watermark
  checkpoint (possibly stale) and the latest metadata. A process crash keeps the page cache;
  a power loss (`power_loss`) keeps only each log's flushed prefix (logs flush on their own
  schedule, per broker, or never; a clean shutdown flushes).
- The controller (node 0) uses the project's own rules (`quorum.controller.partition_change`):
  AlterPartition validation and change building, fencing a broker whose heartbeats stop
  (removal from the ISR, election of another ISR member, optionally unclean), unfencing on
  heartbeats (election for a leaderless partition), re-registration with a new broker epoch
  after a restart, controlled shutdown (the broker asks in its heartbeats; the controller
  takes it out of every ISR and moves its leaderships, and lets it stop once it leads
  nothing), preferred-leader election. Its state survives a failover (it is the Raft
  quorum's), but a failover loses what was in flight to and from the old controller; the
  new one is unavailable for a while, then starts every broker's session afresh.
- Metadata reaches each broker in order, late, possibly skipping intermediate states (a
  broker applies a batch of records as one delta), only while it can reach the controller.
- The network delays every message by a random time (so messages reorder), drops them with a
  settable probability, duplicates them, delays some far beyond the usual jitter, replays old
  ones much later (`replay`), and drops everything across partitioned pairs. A message
  belongs to the incarnations (broker epochs, controller term) of its ends: when either
  end restarts or fails over, what is in flight on that connection is lost.
- Each follower has ONE fetcher per leader broker: a fetch request carries every partition
  the follower follows from that leader (one in flight per leader, re-sent after a timeout),
  answered per partition by the leader's rules; the follower carries out each answer with
  `broker.replica.follower` (truncate on diverging epochs, restart on OFFSET_OUT_OF_RANGE,
  adopt the leader's log start). Leaders answer with whole batches, send AlterPartition
  (`proposed_isr`), complete acks=-1 writes (`is_acked`), and delete records on request
  (DeleteRecords, retention) below their HW.
- Producers write batches to any broker that believes it leads (zombies included);
  consumers read below the HW of any broker that believes it leads.

Properties (`check`, after every event), per partition, raising `Violation`:
1. an acks=-1 write acknowledged is in the log of every leader the controller elects cleanly,
   and of the current leader at all times (unless deleted on purpose: offsets below a
   DeleteRecords/retention point may be gone); acks=-1 is accepted only with the leader's
   ISR at least min.insync.replicas;
2. a consumed offset, and a committed one (below the HW of the controller's current leader,
   read or not), is never truncated from any replica holding its record, never changes its
   record, and every clean leader has it;
3. a leader's HW never goes back during its leadership, never passes its own LEO, and the
   current leader's HW never passes the LEO of any member of the controller's ISR;
4. replicas that share a leader epoch agree on every offset below both their HWs (while no
   unclean election happened); and always: two logs holding the same epoch at an offset hold
   the same records up to it (log matching);
5. a follower that has been cut off from a healthy leader (crashed, or partitioned from it)
   while the leader's log grew past it, for longer than replica.lag.time.max.ms plus the
   session timeout and the round trips, is out of the ISR (the lag rule works).
An unclean election forgets the acked/consumed/committed records the new leader lacks (counted
as `lost`); the loss must be reported by the follower truncation (`below_high_watermark`).
So does Kafka without KIP-966 (not modelled) when the sole ISR member lost its unflushed
tail in a power loss and is elected again while another replica still holds the records
(`lost_to_unclean_shutdown`); every other loss is a violation. Power losses are allowed only
while fewer than min.insync.replicas replicas of a partition have lost records and not yet
rejoined its ISR.
"""

from __future__ import annotations

import random
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from broker.replica.follower import apply_fetch_answer, apply_leader_offsets
from broker.replica.purgatory import AckWaiters
from broker.replica.state import FollowerPlan, FollowerStep, LeaderAnswer, PartitionState
from quorum.controller import partition_change as pc
from quorum.controller.requests import IsrMember
from quorum.kafka_errors import ErrorCode
from tests.sim.replication.memlog import AppendOffsetError, Chunk, MemLog, Record

CONTROLLER = 0


class Violation(AssertionError):
    """A replication property does not hold."""


# ---------------------------------------------------------------- messages


@dataclass(frozen=True, slots=True)
class FetchItem:
    partition: int
    leader_epoch: int
    offset: int
    last_epoch: int
    log_start: int


@dataclass(frozen=True, slots=True)
class FetchReq:
    broker_epoch: int
    req_id: int
    items: tuple[FetchItem, ...]


@dataclass(frozen=True, slots=True)
class FetchAnswer:
    partition: int
    req_epoch: int
    req_offset: int
    answer: LeaderAnswer
    chunk: Chunk


@dataclass(frozen=True, slots=True)
class FetchResp:
    req_id: int
    items: tuple[FetchAnswer, ...]


@dataclass(frozen=True, slots=True)
class OffsetsReq:
    partition: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class OffsetsResp:
    partition: int
    req_epoch: int
    error: ErrorCode
    start: int
    end: int


_SIM_TOPIC_ID = uuid.UUID(int=1)


@dataclass(frozen=True, slots=True)
class AlterReq:
    partition: int
    broker_epoch: int
    leader_epoch: int
    partition_epoch: int
    isr: tuple[IsrMember, ...]
    sent_at: int
    """Identifies the request: its answer carries it back (the broker's requests have correlation ids)."""


@dataclass(frozen=True, slots=True)
class AlterResp:
    partition: int
    error: ErrorCode
    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]
    req_sent_at: int


@dataclass(frozen=True, slots=True)
class Heartbeat:
    broker_epoch: int
    want_shut_down: bool = False


@dataclass(frozen=True, slots=True)
class HeartbeatResp:
    broker_epoch: int
    shut_down: bool


Body = FetchReq | FetchResp | OffsetsReq | OffsetsResp | AlterReq | AlterResp | Heartbeat | HeartbeatResp


@dataclass(order=True)
class Msg:
    at: int
    seq: int
    src: int = field(compare=False)
    dst: int = field(compare=False)
    body: Body = field(compare=False)
    src_inc: int = field(compare=False, default=0)
    """The sender's incarnation (broker epoch, controller term) when it was sent."""
    dst_inc: int = field(compare=False, default=0)


# ---------------------------------------------------------------- configuration


StateFactory = Callable[[int, int, int], PartitionState]
"""(broker id, min.insync.replicas, replica.lag.time.max.ms) -> a PartitionState (mutants override)."""


def default_state(broker_id: int, min_isr: int, lag_ms: int) -> PartitionState:
    return PartitionState(broker_id, min_insync_replicas=min_isr, replica_lag_time_max_ms=lag_ms)


@dataclass(frozen=True)
class SimConfig:
    brokers: int = 3
    partitions: int = 3
    min_isr: int = 2
    unclean: bool = False
    lag_ms: int = 600
    session_timeout_ms: int = 450
    heartbeat_ms: int = 50
    fetch_timeout_ms: int = 300
    max_delay_ms: int = 40
    long_delay_ms: tuple[int, int] = (400, 2_500)
    """The range of a far delay (a message stuck in a queue, a GC pause)."""
    max_batch: int = 3
    """Batches per partition in one fetch answer (0..max_batch)."""
    max_records_per_batch: int = 3
    produce_timeout_ms: int = 1_500
    step_ms: int = 10
    failover_ms: tuple[int, int] = (100, 600)
    """How long the controller is unavailable after a failover."""
    state_factory: StateFactory = default_state


# ---------------------------------------------------------------- the world


@dataclass
class Replica:
    partition: int
    log: MemLog = field(default_factory=MemLog)
    state: PartitionState | None = None
    hw_checkpoint: int = 0
    fetch_offset_sent: int = -1
    offsets_pending: bool = False
    alter_sent_at: int | None = None
    """When the AlterPartition in flight was sent (its answer times out, as the broker's IsrSender's does)."""
    next_isr_check: int = 0
    acks: AckWaiters = field(default_factory=AckWaiters)
    """acks=-1 writes waiting (the broker's own purgatory class); each has a deadline in `ack_deadlines`."""
    ack_deadlines: dict[int, int] = field(default_factory=dict)
    """first record id of a batch -> produce timeout (simulated ms) of a waiting acks=-1 write."""
    last_leader_hw: tuple[int, int] | None = None
    """(leadership start epoch, HW) for property 3."""


@dataclass
class Broker:
    id: int
    reps: dict[int, Replica]
    alive: bool = True
    broker_epoch: int = 1
    meta_index: int = -1
    caught_up: bool = False
    last_hb: int = -(10**9)
    fetches: dict[int, tuple[int, int]] = field(default_factory=dict)
    """leader broker -> (request id, sent at) of the one fetch in flight to it."""
    flush_ms: int | None = None
    """The log flush interval (None: never; only a clean shutdown flushes)."""
    next_flush: int = 0
    shutting_down: bool = False
    shutdown_started: int = 0
    up_since: int = 0


class World:
    def __init__(self, config: SimConfig, seed: int = 0) -> None:
        self.config = config
        self.rng = random.Random(seed)
        self.now = 0
        self.seq = 0
        self.req_ids = 0
        self.msgs: list[Msg] = []
        self.sent: deque[Msg] = deque(maxlen=400)
        """Recent messages (heartbeats excepted) that `replay` may deliver again."""
        self.blocked: set[frozenset[int]] = set()
        self.loss = 0.0
        self.duplicate = 0.0
        self.long_delay = 0.0
        self.stats: Counter[str] = Counter()
        self.next_record = 0
        self.next_batch = 0
        ids = tuple(range(1, config.brokers + 1))
        pids = tuple(range(config.partitions))
        self.brokers = {b: Broker(b, {p: Replica(p) for p in pids}) for b in ids}
        for broker in self.brokers.values():
            broker.flush_ms = self.rng.choice((None, None, 100, 400, 1_500))
            for rep in broker.reps.values():
                rep.log.on_drop = self._drop_checker(broker, rep.partition)
        # Controller state: the partitions, registrations, and the metadata history it published.
        self.parts = {
            p: pc.PartitionState(replicas=(r := ids[p % len(ids) :] + ids[: p % len(ids)]), isr=r, leader=r[0])
            for p in pids
        }
        self.regs = {b: pc.BrokerRegistrationState(epoch=1) for b in ids}
        self.last_hb_ctrl = dict.fromkeys(ids, 0)
        self.ctrl_term = 1
        self.ctrl_down_until = 0
        self.history: list[dict[int, pc.PartitionState]] = [dict(self.parts)]
        self.acked: dict[int, dict[int, int]] = {p: {} for p in pids}
        self.consumed: dict[int, dict[int, int]] = {p: {} for p in pids}
        self.committed: dict[int, dict[int, int]] = {p: {} for p in pids}
        """offset -> record id of every record the controller's current leader's HW passed,
        whether or not a client acked or read it (Kafka's commitment: every clean leader has it)."""
        self.committed_mark: dict[int, tuple[int, int, int]] = {}
        """partition -> (leader, leader epoch, HW) up to which `committed` holds that leadership's log."""
        self.deleted_below = dict.fromkeys(pids, 0)
        """Offsets below this were deleted on purpose (DeleteRecords, retention): they may be gone."""
        self.lossy: dict[int, set[int]] = {p: set() for p in pids}
        """Brokers whose replica lost records in a power loss and has not rejoined the ISR since."""
        self.loss_epoch: dict[tuple[int, int], int] = {}
        """(partition, broker) -> the broker epoch of the incarnation that lost power last."""
        self.unclean_happened: set[int] = set()
        self.unclean_snapshots: dict[int, list[tuple[int, dict[int, int]]]] = {p: [] for p in pids}
        """(leader epoch, offset -> record id of the new leader's log) of every unclean election."""
        self.settle_started = 0
        self.last_disturbance = 0
        self.appended_at: dict[int, dict[int, int]] = {p: {} for p in pids}
        """offset -> when a producer last appended a record there (property 5)."""
        """When the network, a process or a leadership last changed (property 5 waits after it)."""
        for b in self.brokers.values():
            self._start(b)

    # ------------------------------------------------------------ helpers

    def new_state(self, b: Broker) -> PartitionState:
        return self.config.state_factory(b.id, self.config.min_isr, self.config.lag_ms)

    def _start(self, b: Broker) -> None:
        for rep in b.reps.values():
            rep.state = self.new_state(b)
            rep.state.set_initial_high_watermark(rep.hw_checkpoint, rep.log)
            rep.offsets_pending = False
            rep.alter_sent_at = None
            rep.acks = AckWaiters()
            rep.ack_deadlines = {}
            rep.last_leader_hw = None
        b.fetches = {}
        b.last_hb = -(10**9)
        b.shutting_down = False
        b.up_since = self.now
        # As a KRaft broker: no partition is applied until the broker has registered and caught
        # up with the metadata log (a stale image would make it lead an epoch long gone, with an
        # ISR that has forgotten its in-flight changes).
        b.caught_up = False
        self._catch_up_metadata(b, latest=True)

    def connected(self, a: int, b: int) -> bool:
        return frozenset((a, b)) not in self.blocked

    def _incarnation(self, node: int) -> int:
        if node == CONTROLLER:
            return self.ctrl_term
        b = self.brokers[node]
        return b.broker_epoch if b.alive else -1

    def send(self, src: int, dst: int, body: Body) -> None:
        if self.rng.random() < self.loss:
            self.stats["lost_msgs"] += 1
            return
        copies = 2 if self.rng.random() < self.duplicate else 1
        if copies == 2:
            self.stats["duplicated_msgs"] += 1
        for _ in range(copies):
            self.seq += 1
            delay = self.rng.randint(1, self.config.max_delay_ms)
            if self.rng.random() < self.long_delay:
                delay += self.rng.randint(*self.config.long_delay_ms)
                self.stats["long_delayed_msgs"] += 1
            m = Msg(self.now + delay, self.seq, src, dst, body, self._incarnation(src), self._incarnation(dst))
            self.msgs.append(m)
            if not isinstance(body, Heartbeat | HeartbeatResp):
                self.sent.append(m)

    def replay(self, count: int) -> int:
        """Deliver ``count`` old messages again, much later than they were sent (a retry of a
        request whose answer was slow, a proxy's queue): each end's incarnation must still be
        the one it was sent in (a restart or failover closes the connection)."""
        if not self.sent:
            return 0
        n = 0
        for m in self.rng.sample(list(self.sent), min(count, len(self.sent))):
            if self._incarnation(m.src) != m.src_inc or self._incarnation(m.dst) != m.dst_inc:
                continue
            self.seq += 1
            self.msgs.append(replace(m, at=self.now + self.rng.randint(1, self.config.max_delay_ms), seq=self.seq))
            n += 1
        self.stats["replayed_msgs"] += n
        return n

    def live(self) -> list[Broker]:
        return [b for b in self.brokers.values() if b.alive]

    def acceptable(self, broker: int) -> bool:
        r = self.regs.get(broker)
        return r is not None and not r.fenced and not r.in_controlled_shutdown

    def _disturbed(self) -> None:
        self.last_disturbance = self.now

    # ------------------------------------------------------------ controller

    @property
    def controller_up(self) -> bool:
        return self.now >= self.ctrl_down_until

    def _publish(self, pid: int, change: pc.PartitionChange | None, why: str) -> None:
        if change is None:
            return
        old = self.parts[pid]
        new = pc.apply_change(old, change)
        self.parts = {**self.parts, pid: new}
        self.history.append(self.parts)
        if set(new.isr) < set(old.isr):
            self.stats["isr_shrinks"] += 1
        elif set(new.isr) > set(old.isr):
            self.stats["isr_expands"] += 1
        for joined in set(new.isr) - set(old.isr):
            # Caught up to the HW again, it holds every acked record: only if the incarnation that
            # joined is a later one than the one that lost power (an AlterPartition sent before the
            # loss may still be accepted while the controller knows only the old registration).
            if self.regs[joined].epoch > self.loss_epoch.get((pid, joined), -1):
                self.lossy[pid].discard(joined)
        if new.leader != old.leader or new.leader_epoch != old.leader_epoch:
            self.stats["leader_changes"] += 1
            self._disturbed()
            if new.leader >= 0:
                self._on_election(pid, new.leader, old.isr, unclean=change.unclean)
        self.stats[f"change_{why}"] += 1

    def _forget_missing(self, pid: int, leader: int, counter: str) -> None:
        """The new leader's log becomes the partition's truth: acked/consumed records it lacks are lost."""
        log = self.brokers[leader].reps[pid].log
        self.unclean_happened.add(pid)
        kept = {log.base_offset + i: r.record_id for i, r in enumerate(log.records)}
        self.unclean_snapshots[pid].append((self.parts[pid].leader_epoch, kept))
        for book in self._books(pid).values():
            for offset, rid in list(book.items()):
                if not self._holds(log, pid, offset, rid):
                    del book[offset]
                    self.stats[counter] += 1

    def _books(self, pid: int) -> dict[str, dict[int, int]]:
        """What a clean leader must hold (offset -> record id): acked, consumed and committed."""
        return {"acked": self.acked[pid], "consumed": self.consumed[pid], "committed": self.committed[pid]}

    def _note_committed(self, pid: int, leader: int, s: PartitionState, log: MemLog) -> None:
        """Add what the current leader's HW passed since last seen to `committed`; a committed
        offset never changes its record (unless an unclean election forgot it first)."""
        hw = s.high_watermark
        mark = self.committed_mark.get(pid)
        lo = mark[2] if mark is not None and mark[:2] == (leader, s.leader_epoch) else 0
        lo = max(lo, log.log_start_offset)
        book = self.committed[pid]
        for i, rec in enumerate(log.span(lo, hw) if hw > lo else ()):
            seen = book.setdefault(lo + i, rec.record_id)
            if seen != rec.record_id:
                raise Violation(f"partition {pid}: committed offset {lo + i} held {seen}, leader {leader} has {rec}")
        self.committed_mark[pid] = (leader, s.leader_epoch, max(hw, lo))

    def _holds(self, log: MemLog, pid: int, offset: int, rid: int) -> bool:
        """The log has record ``rid`` at ``offset``, or the offset was deleted on purpose."""
        rec = log.at(offset)
        if rec is not None:
            return rec.record_id == rid
        return offset < log.log_start_offset and offset < self.deleted_below[pid]

    def _on_election(self, pid: int, leader: int, old_isr: tuple[int, ...], *, unclean: bool) -> None:
        if unclean:
            self.stats["unclean_elections"] += 1
            self._forget_missing(pid, leader, "lost_to_unclean")
            return
        log = self.brokers[leader].reps[pid].log
        missing = [
            (name, offset, rid)
            for name, book in self._books(pid).items()
            for offset, rid in book.items()
            if not self._holds(log, pid, offset, rid)
        ]
        if not missing:
            return
        b = self.brokers[leader]
        if leader in self.lossy[pid] and (not b.alive or self.regs[leader].epoch != b.broker_epoch):
            # Elected while down after a power loss (not fenced yet): it cannot act as leader
            # before it registers again, which fences this incarnation and takes it out of the ISR.
            self.stats["lossy_elected_while_down"] += 1
            return
        others = [b.reps[pid].log for b in self.brokers.values() if b.id != leader]
        if (
            leader in self.lossy[pid]
            and self.parts[pid].isr == (leader,)
            and all(any(self._holds(o, pid, offset, rid) for o in others) for _, offset, rid in missing)
        ):
            # Kafka without eligible leader replicas (KIP-966): the sole ISR member lost its
            # unflushed tail and leads again; the records survive only on replicas out of the ISR.
            self.stats["unclean_shutdown_elections"] += 1
            self._forget_missing(pid, leader, "lost_to_unclean_shutdown")
            return
        # The exemption above looks at committed records, not only at those a client acked or
        # read: a lost committed record nobody read is lost all the same, and the replicas that
        # hold it keep an HW above it (a restarted one from its checkpoint, as Kafka's
        # replication-offset-checkpoint; the broker does the same) until their first fetch in
        # the new epoch truncates it, reporting the loss. Property 4 (agreement below the HW)
        # cannot hold across such an election, so it must count as unclean (walk 375, min ISR
        # 2, unclean off: the sole ISR member lost two unread committed records to a power
        # loss and led epoch 5; a follower restarted with HW 2 over them).
        name, offset, rid = missing[0]
        raise Violation(
            f"partition {pid}: clean leader {leader} lacks {name} record {rid} at offset {offset}: {log.records}"
        )

    def lost_to_unclean(self, pid: int, offset: int, rec: Record) -> bool:
        """A record of an epoch before an unclean election that the elected leader lacked is lost
        even if a zombie leader hands it to a consumer or acks it afterwards."""
        for epoch, kept in self.unclean_snapshots[pid]:
            if rec.epoch < epoch and kept.get(offset) != rec.record_id:
                return True
        return False

    def _fence(self, broker: int) -> None:
        self.regs[broker] = replace(self.regs[broker], fenced=True)
        self.stats["fences"] += 1
        self._leave_partitions(broker, "fence")

    def _leave_partitions(self, broker: int, why: str) -> None:
        for pid in self.parts:
            if broker in self.parts[pid].isr or self.parts[pid].leader == broker:
                change = pc.remove_broker_from_partition(
                    self.parts[pid], broker, self.acceptable, unclean_allowed=self.config.unclean
                )
                self._publish(pid, change, why)

    def _controller_tick(self) -> None:
        if not self.controller_up:
            return
        if self.now == self.ctrl_down_until:
            self.last_hb_ctrl = dict.fromkeys(self.brokers, self.now)  # the new controller's own clock
        for b, reg in self.regs.items():
            if not reg.fenced and self.now - self.last_hb_ctrl[b] > self.config.session_timeout_ms:
                self._fence(b)
        if self.config.unclean:
            for pid, p in self.parts.items():
                if p.leader < 0:
                    change = pc.build_partition_change(p, self.acceptable, election=pc.Election.UNCLEAN)
                    self._publish(pid, change, "unclean")

    def _on_heartbeat(self, broker: int, hb: Heartbeat) -> None:
        reg = self.regs[broker]
        if hb.broker_epoch < reg.epoch:
            return
        self.last_hb_ctrl[broker] = self.now
        if hb.broker_epoch > reg.epoch:  # a restarted broker registers again: its old incarnation is fenced
            if not reg.fenced:
                self._fence(broker)
            self.regs[broker] = pc.BrokerRegistrationState(epoch=hb.broker_epoch, fenced=True)
            reg = self.regs[broker]
        if reg.fenced:
            if hb.want_shut_down:
                self.send(CONTROLLER, broker, HeartbeatResp(hb.broker_epoch, shut_down=True))
                return
            self.regs[broker] = replace(reg, fenced=False)
            for pid in self.parts:
                change = pc.broker_unfenced(
                    self.parts[pid], broker, self.acceptable, unclean_allowed=self.config.unclean
                )
                self._publish(pid, change, "unfence")
        elif hb.want_shut_down:
            if not reg.in_controlled_shutdown:
                self.regs[broker] = replace(reg, in_controlled_shutdown=True)
                self._leave_partitions(broker, "controlled_shutdown")
            if not any(p.leader == broker for p in self.parts.values()):
                self.send(CONTROLLER, broker, HeartbeatResp(hb.broker_epoch, shut_down=True))

    def _on_alter(self, src: int, req: AlterReq) -> None:
        # The controller's own AlterPartition types and rules (one partition per request here).
        pid = req.partition
        item = pc.AlterPartitionItem(_SIM_TOPIC_ID, pid, req.leader_epoch, req.isr, 0, req.partition_epoch)
        request = pc.AlterPartitionRequest(src, req.broker_epoch, (item,))
        code = pc.validate_alter_partition(self.parts[pid], request, item, self.regs)
        if code == ErrorCode.NONE:
            self._publish(pid, pc.alter_partition_change(self.parts[pid], item, self.acceptable), "alter")
            self.stats["alter_ok"] += 1
            p = self.parts[pid]
            resp = AlterResp(pid, ErrorCode.NONE, p.leader_epoch, p.partition_epoch, p.isr, req.sent_at)
        else:
            self.stats[f"alter_{code.name}"] += 1
            resp = AlterResp(pid, code, -1, -1, (), req.sent_at)
        self.send(CONTROLLER, src, resp)

    # ------------------------------------------------------------ operator actions

    def controlled_shutdown(self, broker: int) -> bool:
        """The broker asks to shut down (SIGTERM): its heartbeats say so until the controller
        lets it stop, or until twice the session timeout has passed (then it stops anyway)."""
        b = self.brokers[broker]
        if not b.alive or b.shutting_down:
            return False
        b.shutting_down = True
        b.shutdown_started = self.now
        b.last_hb = -(10**9)
        self.stats["shutdowns_asked"] += 1
        return True

    def preferred_election(self) -> int:
        """ElectLeaders(PREFERRED) for every partition (what auto.leader.rebalance.enable runs)."""
        if not self.controller_up:
            return 0
        n = 0
        for pid, p in self.parts.items():
            if p.leader != p.replicas[0] and pc.can_preferred_replica_lead(p, self.acceptable):
                self._publish(pid, pc.elect_preferred(p, self.acceptable), "preferred")
                if self.parts[pid].leader == p.replicas[0]:
                    n += 1
        self.stats["preferred_elections"] += n
        return n

    def controller_failover(self) -> None:
        """The active controller changes: the metadata stays (it is committed in the quorum), what
        was in flight to or from the old one is lost, and the new one takes a while to start."""
        self.ctrl_term += 1
        self.ctrl_down_until = self.now + self.rng.randint(*self.config.failover_ms)
        self.ctrl_down_until -= self.ctrl_down_until % self.config.step_ms
        self.stats["controller_failovers"] += 1
        self._disturbed()

    # ------------------------------------------------------------ brokers: metadata

    def _catch_up_metadata(self, b: Broker, *, latest: bool = False) -> None:
        last = len(self.history) - 1
        if not self.connected(b.id, CONTROLLER) or not self.controller_up:
            return
        if not b.caught_up:
            # A (re)started broker registers first; its first image is the controller's state
            # after that registration (so requests of its previous incarnation are either in the
            # image or refused as STALE_BROKER_EPOCH).
            if self.regs[b.id].epoch != b.broker_epoch:
                return
            b.caught_up = True
            latest = True
        elif b.meta_index >= last:
            return
        target = last if latest else self.rng.randint(b.meta_index + 1, last)
        b.meta_index = target
        for pid, p in self.history[target].items():
            self._apply_metadata(b, b.reps[pid], p)

    def _apply_metadata(self, b: Broker, rep: Replica, p: pc.PartitionState) -> None:
        s = rep.state
        assert s is not None
        if p.leader == b.id:
            if s.become_leader(
                leader_epoch=p.leader_epoch,
                partition_epoch=p.partition_epoch,
                replicas=p.replicas,
                isr=p.isr,
                now_ms=self.now,
                log=rep.log,
                leader_recovery_state=p.leader_recovery_state,
            ):
                self._after_hw_change(rep)
        elif s.become_follower(
            leader_id=p.leader,
            leader_epoch=p.leader_epoch,
            partition_epoch=p.partition_epoch,
            replicas=p.replicas,
            isr=p.isr,
            leader_recovery_state=p.leader_recovery_state,
        ):
            self._after_hw_change(rep)  # the leadership ended: its waiting writes fail
            rep.last_leader_hw = None
            rep.offsets_pending = False

    # ------------------------------------------------------------ brokers: leader side

    def _after_hw_change(self, rep: Replica) -> None:
        s = rep.state
        assert s is not None
        rep.acks.complete(s)
        for rid, deadline in list(rep.ack_deadlines.items()):
            if self.now > deadline:  # the produce request timed out (its waiter stays, answered to nobody)
                del rep.ack_deadlines[rid]
                self.stats["produce_REQUEST_TIMED_OUT"] += 1

    def _ack_done(self, rep: Replica, base: int, batch: tuple[Record, ...]) -> Callable[[ErrorCode], None]:
        pid = rep.partition

        def done(code: ErrorCode) -> None:
            if rep.ack_deadlines.pop(batch[0].record_id, None) is None:
                return  # timed out: the client was told REQUEST_TIMED_OUT
            if code != ErrorCode.NONE:
                self.stats[f"produce_{code.name}"] += 1
                return
            for i, rec in enumerate(batch):
                offset = base + i
                if self.lost_to_unclean(pid, offset, rec):
                    self.stats["acked_but_lost_to_unclean"] += 1
                    continue
                if self.acked[pid].get(offset, rec.record_id) != rec.record_id:
                    raise Violation(
                        f"partition {pid}: offset {offset} acked for {self.acked[pid][offset]} and {rec.record_id}"
                    )
                if rep.log.at(offset) != rec and offset >= rep.log.log_start_offset:
                    raise Violation(
                        f"partition {pid}: acked {rec.record_id} at {offset}, leader holds {rep.log.at(offset)}"
                    )
                self.acked[pid][offset] = rec.record_id
                self.stats["acked"] += 1

        return done

    def _answer_fetch(self, b: Broker, src: int, req: FetchReq, item: FetchItem) -> FetchAnswer:
        rep = b.reps[item.partition]
        s = rep.state
        assert s is not None
        reg = self.regs[src]
        eligible = not reg.fenced and not reg.in_controlled_shutdown and req.broker_epoch == reg.epoch
        r = s.on_follower_fetch(
            replica_id=src,
            fetch_offset=item.offset,
            last_fetched_epoch=item.last_epoch,
            now_ms=self.now,
            log=rep.log,
            log_start_offset=item.log_start,
            current_leader_epoch=item.leader_epoch,
            broker_epoch=req.broker_epoch,
            isr_eligible=eligible,
        )
        chunk = Chunk(item.offset, ())
        if r.error == ErrorCode.NONE and r.diverging_epoch is None:
            chunk = rep.log.read_batches(item.offset, self.rng.randint(0, self.config.max_batch))
            if chunk.base_offset < item.offset:
                self.stats["answers_from_inside_a_batch"] += 1
        if r.diverging_epoch is not None:
            self.stats["diverging_answers"] += 1
        elif r.error == ErrorCode.OFFSET_OUT_OF_RANGE:
            self.stats["out_of_range_answers"] += 1
        first = (chunk.base_offset, chunk.last_offset) if chunk.records else None
        answer = LeaderAnswer(r.error, s.high_watermark, rep.log.log_start_offset, r.diverging_epoch, first)
        if r.high_watermark_changed:
            self._after_hw_change(rep)
        if r.isr_expand_wanted:
            self._maybe_alter(b, rep)
        return FetchAnswer(item.partition, item.leader_epoch, item.offset, answer, chunk)

    def _on_fetch(self, b: Broker, src: int, req: FetchReq) -> None:
        items = tuple(self._answer_fetch(b, src, req, item) for item in req.items)
        self.send(b.id, src, FetchResp(req.req_id, items))

    def _maybe_alter(self, b: Broker, rep: Replica) -> None:
        s = rep.state
        assert s is not None
        if not s.is_leader:
            return
        isr = s.proposed_isr(self.now, None, rep.log)
        if isr is None:
            return
        epochs = {f.replica_id: f.broker_epoch for f in s.followers()}
        members = tuple(IsrMember(r, b.broker_epoch if r == b.id else epochs.get(r, -1)) for r in isr)
        s.on_isr_sent(isr)
        rep.alter_sent_at = self.now
        self.stats["alter_sent"] += 1
        req = AlterReq(rep.partition, b.broker_epoch, s.leader_epoch, s.partition_epoch, members, self.now)
        self.send(b.id, CONTROLLER, req)

    def _on_alter_resp(self, b: Broker, resp: AlterResp) -> None:
        rep = b.reps[resp.partition]
        s = rep.state
        assert s is not None
        if resp.req_sent_at == rep.alter_sent_at:  # the answer to the request in flight
            rep.alter_sent_at = None
        if resp.error == ErrorCode.NONE:
            if s.on_isr_committed(
                isr=resp.isr,
                leader_epoch=resp.leader_epoch,
                partition_epoch=resp.partition_epoch,
                now_ms=self.now,
                log=rep.log,
            ):
                self._after_hw_change(rep)
        else:
            s.on_isr_failed(resp.error)

    def _delete_before(self, pid: int, fraction: float, *, whole_batches: bool, why: str) -> bool:
        """DeleteRecords (any offset) or retention (whole batches) on a broker that believes it
        leads ``pid``: the log start moves up to at most the HW."""
        leaders = [b for b in self.live() if (s := b.reps[pid].state) is not None and s.is_leader]
        if not leaders:
            return False
        rep = self.rng.choice(leaders).reps[pid]
        s = rep.state
        assert s is not None
        log = rep.log
        if s.high_watermark <= log.log_start_offset:
            return False
        offset = log.log_start_offset + max(1, int((s.high_watermark - log.log_start_offset) * fraction))
        if whole_batches and offset < log.log_end_offset:
            offset = log.read_batches(offset, 1).base_offset
            if offset <= log.log_start_offset:
                return False
        log.delete_records_before(offset)
        self.deleted_below[pid] = max(self.deleted_below[pid], offset)
        self.stats[why] += 1
        if log.at(offset) is not None and log.read_batches(offset, 1).base_offset < offset:
            self.stats[f"{why}_inside_a_batch"] += 1
        return True

    # ------------------------------------------------------------ brokers: follower side

    def _drop_checker(self, b: Broker, pid: int) -> Callable[[int, list[Record]], None]:
        return lambda offset, dropped: self._check_drop(b, pid, offset, dropped)

    def _check_drop(self, b: Broker, pid: int, offset: int, dropped: list[Record]) -> None:
        """`MemLog.on_drop`: records a follower's truncation removed must be neither consumed,
        acked nor committed (unless deleted on purpose)."""
        if dropped:
            self.stats["truncations"] += 1
            self.stats["truncated_records"] += len(dropped)
        books = self._books(pid)
        for i, rec in enumerate(dropped):
            o = offset + i
            if o < self.deleted_below[pid]:
                continue
            for name, book in books.items():
                if book.get(o) == rec.record_id:
                    raise Violation(f"partition {pid}: broker {b.id} truncated {name} record {rec.record_id} at {o}")

    def _after_cut(self, b: Broker, hw_before: int, plan: FollowerPlan) -> None:
        if plan.step is not FollowerStep.TRUNCATE:
            return
        expected_loss = max(0, hw_before - plan.offset)
        if plan.below_high_watermark != expected_loss:
            raise Violation(
                f"broker {b.id}: truncation below HW {expected_loss} reported as {plan.below_high_watermark}"
            )
        if expected_loss:
            self.stats["loss_logged"] += 1

    def _on_fetch_resp(self, b: Broker, src: int, resp: FetchResp) -> None:
        inflight = b.fetches.get(src)
        if inflight is not None and inflight[0] == resp.req_id:  # the answer to the request in flight
            del b.fetches[src]
        for item in resp.items:
            self._on_fetch_answer(b, src, item)

    def _on_fetch_answer(self, b: Broker, src: int, item: FetchAnswer) -> None:
        rep = b.reps[item.partition]
        s = rep.state
        assert s is not None
        if not s.is_follower or s.leader_id != src or item.req_epoch != s.leader_epoch:
            return
        hw_before = s.high_watermark
        try:
            plan = apply_fetch_answer(s, rep.log, item.req_offset, item.answer, item.chunk)
        except AppendOffsetError as exc:
            raise Violation(f"partition {item.partition}: broker {b.id}: {exc}") from exc
        self.stats[f"follower_{plan.step.value}"] += 1
        if plan.step is FollowerStep.APPEND and plan.offset >= 0:
            self.stats["follower_restart_at_batch_base"] += 1
        if plan.step is FollowerStep.ASK_LEADER_OFFSETS and not rep.offsets_pending:
            rep.offsets_pending = True
            self.send(b.id, s.leader_id, OffsetsReq(item.partition, s.leader_epoch))
        self._after_cut(b, hw_before, plan)

    def _on_offsets(self, b: Broker, src: int, req: OffsetsReq) -> None:
        rep = b.reps[req.partition]
        s = rep.state
        assert s is not None
        error = s.check_leader_epoch(req.leader_epoch)
        log = rep.log
        self.send(
            b.id, src, OffsetsResp(req.partition, req.leader_epoch, error, log.log_start_offset, log.log_end_offset)
        )

    def _on_offsets_resp(self, b: Broker, src: int, resp: OffsetsResp) -> None:
        rep = b.reps[resp.partition]
        s = rep.state
        assert s is not None
        rep.offsets_pending = False
        if not s.is_follower or s.leader_id != src or resp.req_epoch != s.leader_epoch or resp.error != ErrorCode.NONE:
            return
        hw_before = s.high_watermark
        plan = apply_leader_offsets(s, rep.log, resp.start, resp.end)
        self.stats[f"out_of_range_{plan.step.value}"] += 1
        self._after_cut(b, hw_before, plan)

    # ------------------------------------------------------------ events

    def deliver(self, m: Msg) -> None:
        if m.dst_inc < 0 or self._incarnation(m.src) != m.src_inc or self._incarnation(m.dst) != m.dst_inc:
            return  # an end is down, restarted (or the controller failed over): the connection is gone
        if m.dst == CONTROLLER:
            if not self.controller_up:
                return
            if isinstance(m.body, Heartbeat):
                self._on_heartbeat(m.src, m.body)
            elif isinstance(m.body, AlterReq):
                self._on_alter(m.src, m.body)
            return
        b = self.brokers[m.dst]
        body = m.body
        if isinstance(body, FetchReq):
            self._on_fetch(b, m.src, body)
        elif isinstance(body, FetchResp):
            self._on_fetch_resp(b, m.src, body)
        elif isinstance(body, OffsetsReq):
            self._on_offsets(b, m.src, body)
        elif isinstance(body, OffsetsResp):
            self._on_offsets_resp(b, m.src, body)
        elif isinstance(body, AlterResp):
            self._on_alter_resp(b, body)
        elif isinstance(body, HeartbeatResp):
            if body.shut_down and b.shutting_down and body.broker_epoch == b.broker_epoch:
                self._stop(b, clean=True)
                self.stats["controlled_shutdowns"] += 1

    def _fetch_from_leaders(self, b: Broker) -> None:
        """One fetcher per leader broker: one request carries every partition followed from it."""
        by_leader: dict[int, list[Replica]] = {}
        for rep in b.reps.values():
            s = rep.state
            assert s is not None
            if s.is_follower and s.leader_id > 0 and not rep.offsets_pending:
                by_leader.setdefault(s.leader_id, []).append(rep)
        for leader, reps in by_leader.items():
            inflight = b.fetches.get(leader)
            if inflight is not None and self.now - inflight[1] <= self.config.fetch_timeout_ms:
                continue
            items = []
            for rep in reps:
                s = rep.state
                assert s is not None
                offset, last_epoch = s.fetch_position(rep.log)
                rep.fetch_offset_sent = offset
                items.append(FetchItem(rep.partition, s.leader_epoch, offset, last_epoch, rep.log.log_start_offset))
            self.req_ids += 1
            b.fetches[leader] = (self.req_ids, self.now)
            if len(items) > 1:
                self.stats["multi_partition_fetches"] += 1
            self.send(b.id, leader, FetchReq(b.broker_epoch, self.req_ids, tuple(items)))

    def _broker_tick(self, b: Broker) -> None:
        if self.connected(b.id, CONTROLLER):
            if self.now - b.last_hb >= self.config.heartbeat_ms:
                b.last_hb = self.now
                self.send(b.id, CONTROLLER, Heartbeat(b.broker_epoch, b.shutting_down))
            if self.rng.random() < 0.3:
                self._catch_up_metadata(b)
        if b.shutting_down and self.now - b.shutdown_started > 2 * self.config.session_timeout_ms:
            self._stop(b, clean=True)  # the controller never let it: it stops anyway (Kafka's timeout)
            self.stats["shutdowns_timed_out"] += 1
            return
        self._fetch_from_leaders(b)
        for rep in b.reps.values():
            s = rep.state
            assert s is not None
            if s.is_leader:
                if self.now >= rep.next_isr_check:
                    rep.next_isr_check = self.now + self.config.lag_ms // 2
                    self._maybe_alter(b, rep)
                if rep.alter_sent_at is not None and self.now - rep.alter_sent_at > self.config.fetch_timeout_ms:
                    rep.alter_sent_at = None
                    s.on_isr_failed(None)  # no answer: the outcome is unknown (IsrSender's request timeout)
                    self.stats["alter_timeout"] += 1
                if s.pending_isr is not None:
                    self._maybe_alter(b, rep)  # re-sends a change whose answer was lost
                if rep.ack_deadlines:
                    self._after_hw_change(rep)
            if self.rng.random() < 0.05:
                rep.hw_checkpoint = s.high_watermark
        if b.flush_ms is not None and self.now >= b.next_flush:
            b.next_flush = self.now + b.flush_ms
            for rep in b.reps.values():
                rep.log.flush()

    def step(self) -> None:
        """Advance the clock by one step: deliver what is due (in delivery order), tick every node."""
        self.now += self.config.step_ms
        due = sorted(m for m in self.msgs if m.at <= self.now)
        self.msgs = [m for m in self.msgs if m.at > self.now]
        for m in due:
            if not self.connected(m.src, m.dst):
                continue
            self.deliver(m)
            self.check()
        self._controller_tick()
        for b in self.live():
            self._broker_tick(b)
        self.check()

    def run(self, ms: int) -> None:
        end = self.now + ms
        while self.now < end:
            self.step()

    # ------------------------------------------------------------ external actions

    def _leaders_of(self, pid: int) -> list[Broker]:
        return [b for b in self.live() if (s := b.reps[pid].state) is not None and s.is_leader]

    def produce(self, acks: int, pick: int = 0, partition: int = 0, records: int = 1) -> bool:
        pid = partition % self.config.partitions
        leaders = self._leaders_of(pid)
        if not leaders:
            return False
        rep = leaders[pick % len(leaders)].reps[pid]
        s = rep.state
        assert s is not None
        check = s.check_produce(acks)
        if check.error != ErrorCode.NONE:
            self.stats[f"produce_{check.error.name}"] += 1
            return False
        if acks == -1 and len(s.isr) < s.effective_min_isr():
            raise Violation(f"partition {pid}: acks=-1 accepted with ISR {s.isr} below min.insync.replicas")
        n = max(1, min(records, self.config.max_records_per_batch))
        batch_id = self.next_batch if n > 1 else -1
        self.next_batch += 1
        batch = tuple(Record(s.leader_epoch, self.next_record + i, batch_id) for i in range(n))
        self.next_record += n
        base = rep.log.log_end_offset
        for rec in batch:
            self.appended_at[pid][rep.log.append(rec)] = self.now
        self.stats["produced"] += n
        if acks == -1:
            rep.ack_deadlines[batch[0].record_id] = self.now + self.config.produce_timeout_ms
            rep.acks.add(base + n, s.leader_epoch, self._ack_done(rep, base, batch))
        if s.on_local_append(self.now, rep.log):
            self._after_hw_change(rep)
        self.check()
        return True

    def consume(self, pick: int = 0, partition: int = 0) -> int:
        pid = partition % self.config.partitions
        leaders = self._leaders_of(pid)
        if not leaders:
            return 0
        rep = leaders[pick % len(leaders)].reps[pid]
        s = rep.state
        assert s is not None
        start = rep.log.log_start_offset
        records = rep.log.read(start, s.high_watermark)
        book = self.consumed[pid]
        for i, rec in enumerate(records):
            o = start + i
            if self.lost_to_unclean(pid, o, rec):
                self.stats["consumed_but_lost_to_unclean"] += 1
                continue
            seen = book.get(o)
            if seen is not None and seen != rec.record_id:
                raise Violation(f"partition {pid}: offset {o} consumed as {seen} and later as {rec.record_id}")
            book[o] = rec.record_id
        self.stats["consumed"] += len(records)
        return len(records)

    def delete_records(self, partition: int, fraction: float) -> bool:
        """DeleteRecords: the leader's log start moves to an offset at most its HW (maybe inside a batch)."""
        return self._delete_before(
            partition % self.config.partitions, fraction, whole_batches=False, why="delete_records"
        )

    def retention(self, partition: int, fraction: float) -> bool:
        """Retention on the leader: whole old batches (segments) below the HW go."""
        return self._delete_before(partition % self.config.partitions, fraction, whole_batches=True, why="retention")

    def _stop(self, b: Broker, *, clean: bool) -> None:
        b.alive = False
        b.shutting_down = False
        for rep in b.reps.values():
            if clean and rep.state is not None:
                rep.log.flush()
                rep.hw_checkpoint = rep.state.high_watermark
            rep.state = None
        self._disturbed()

    def crash(self, broker: int) -> None:
        b = self.brokers[broker]
        if not b.alive:
            return
        self._stop(b, clean=False)
        self.stats["crashes"] += 1

    def power_loss(self, broker: int) -> bool:
        """The broker's machine loses power: each log keeps only its flushed prefix. Refused
        (False) when it would make min.insync.replicas replicas of a partition lossy at once."""
        b = self.brokers[broker]
        losing = [pid for pid, rep in b.reps.items() if rep.log.log_end_offset > rep.log.flushed_end]
        if any(len(self.lossy[pid] | {broker}) >= self.config.min_isr for pid in losing):
            self.stats["power_loss_refused"] += 1
            return False
        if b.alive:
            self._stop(b, clean=False)
        lost = 0
        for pid in losing:
            lost += b.reps[pid].log.lose_unflushed()
            self.lossy[pid].add(broker)
            self.loss_epoch[(pid, broker)] = b.broker_epoch
        self.stats["power_losses"] += 1
        if lost:
            self.stats["power_losses_with_loss"] += 1
            self.stats["records_lost_to_power_loss"] += lost
        self._disturbed()
        return True

    def restart(self, broker: int) -> None:
        b = self.brokers[broker]
        if b.alive:
            return
        b.alive = True
        b.broker_epoch += 1
        self._start(b)
        self._disturbed()

    def partition(self, a: int, c: int) -> None:
        if a != c and frozenset((a, c)) not in self.blocked:
            self.blocked.add(frozenset((a, c)))
            self._disturbed()

    def isolate(self, broker: int) -> None:
        for other in (CONTROLLER, *self.brokers):
            self.partition(broker, other)

    def heal(self) -> None:
        if self.blocked:
            self.blocked.clear()
            self._disturbed()

    def set_network(self, loss: float = 0.0, duplicate: float = 0.0, long_delay: float = 0.0) -> None:
        self.loss, self.duplicate, self.long_delay = loss, duplicate, long_delay
        self._disturbed()

    # ------------------------------------------------------------ properties

    def check(self) -> None:
        for pid in self.parts:
            self._check_partition(pid)

    def _check_partition(self, pid: int) -> None:
        p = self.parts[pid]
        states = {b.id: s for b in self.live() if (s := b.reps[pid].state) is not None}
        for bid, s in states.items():
            rep = self.brokers[bid].reps[pid]
            if s.high_watermark > rep.log.log_end_offset:
                raise Violation(f"partition {pid}: broker {bid}: HW {s.high_watermark} > LEO {rep.log.log_end_offset}")
            if not s.is_leader:
                continue
            since = s.leader_since_epoch
            if (
                rep.last_leader_hw is not None
                and rep.last_leader_hw[0] == since
                and s.high_watermark < rep.last_leader_hw[1]
            ):
                raise Violation(
                    f"partition {pid}: leader {bid}: HW went back {rep.last_leader_hw[1]} -> {s.high_watermark}"
                )
            rep.last_leader_hw = (since, s.high_watermark)
            if s.leader_epoch != p.leader_epoch or p.leader != bid:
                continue
            self._note_committed(pid, bid, s, rep.log)
            for r in p.isr:
                leo = self.brokers[r].reps[pid].log.log_end_offset
                if s.high_watermark > leo and r not in self.lossy[pid]:
                    raise Violation(
                        f"partition {pid}: leader {bid}: HW {s.high_watermark} > LEO {leo} "
                        f"of ISR member {r} (ISR {p.isr})"
                    )
            if pid not in self.unclean_happened:
                for name, book in (("acked", self.acked[pid]), ("consumed", self.consumed[pid])):
                    for offset, rid in book.items():
                        if not self._holds(rep.log, pid, offset, rid):
                            raise Violation(f"partition {pid}: current leader {bid} lacks {name} {rid} at {offset}")
        self._check_cut_off(pid, states)
        logs = [(bid, self.brokers[bid].reps[pid].log) for bid in self.brokers]
        for i, (a, la) in enumerate(logs):
            for c, lc in logs[i + 1 :]:
                self._check_pair(pid, a, la, c, lc, states)

    def cut_off_bound_ms(self) -> int:
        """Property 5's bound: the lag rule, the leader's ISR check period, fencing, and the
        AlterPartition round trips (each far delay and each resend after a timeout)."""
        c = self.config
        return 2 * c.lag_ms + c.session_timeout_ms + 4 * c.fetch_timeout_ms + c.long_delay_ms[1]

    def _check_cut_off(self, pid: int, states: dict[int, PartitionState]) -> None:
        if self.now - self.last_disturbance <= self.cut_off_bound_ms() or self.loss > 0.05 or self.long_delay > 0.05:
            return
        p = self.parts[pid]
        ls = states.get(p.leader)
        if (
            ls is None
            or not ls.is_leader
            or ls.leader_epoch != p.leader_epoch
            or not self.connected(p.leader, CONTROLLER)
        ):
            return
        if not self.controller_up:
            return
        leader_end = self.brokers[p.leader].reps[pid].log.log_end_offset
        for r in p.isr:
            b = self.brokers[r]
            if r == p.leader or (b.alive and self.connected(r, p.leader)):
                continue
            end = b.reps[pid].log.log_end_offset
            behind_since = max(self.appended_at[pid].get(end, 0), self.last_disturbance)
            if end < leader_end and self.now - behind_since > self.cut_off_bound_ms():
                raise Violation(
                    f"partition {pid}: replica {r} cut off from leader {p.leader} and behind it for "
                    f"{self.now - behind_since} ms, still in the ISR {p.isr}"
                )

    def _check_pair(self, pid: int, a: int, la: MemLog, c: int, lc: MemLog, states: dict[int, PartitionState]) -> None:
        lo = max(la.log_start_offset, lc.log_start_offset)
        n = min(la.log_end_offset, lc.log_end_offset)
        # Log matching: find the last offset where both hold the same epoch; everything before must match.
        for o in range(n - 1, lo - 1, -1):
            ra, rc = la.at(o), lc.at(o)
            if ra is not None and rc is not None and ra.epoch == rc.epoch:
                if la.span(lo, o + 1) != lc.span(lo, o + 1):
                    raise Violation(
                        f"partition {pid}: log matching: brokers {a} and {c} share epoch {ra.epoch} at {o} but differ"
                    )
                break
        sa, sc = states.get(a), states.get(c)
        if pid in self.unclean_happened or sa is None or sc is None or sa.leader_epoch != sc.leader_epoch:
            return
        below = min(sa.high_watermark, sc.high_watermark)
        if lo < below and la.span(lo, below) != lc.span(lo, below):
            raise Violation(f"partition {pid}: brokers {a} and {c} in epoch {sa.leader_epoch} differ below HW {below}")

    # ------------------------------------------------------------ end of a run

    def settle(self, max_ms: int = 20_000) -> None:
        """Heal everything, restart the stopped brokers, stop losing, duplicating and delaying
        messages, and run until the replicas have converged (or ``max_ms`` of simulated time
        passed: then `check_converged` fails the liveness property)."""
        self.heal()
        self.set_network()
        self.ctrl_down_until = min(self.ctrl_down_until, self.now + self.config.failover_ms[0])
        self.ctrl_down_until -= self.ctrl_down_until % self.config.step_ms
        self.settle_started = self.now
        end = self.now + max_ms
        while self.now < end:
            for bid in self.brokers:  # (a broker in controlled shutdown stops first, then comes back)
                self.restart(bid)
            self.run(500)
            if self.converged():
                return

    def _replicas_of(self, pid: int) -> Iterable[Replica]:
        return (b.reps[pid] for b in self.brokers.values())

    def converged(self) -> bool:
        for pid, p in self.parts.items():
            leader = self.brokers.get(p.leader)
            if leader is None or (ls := leader.reps[pid].state) is None or not ls.is_leader:
                return False
            ll = leader.reps[pid].log
            hw = ls.high_watermark
            if hw != ll.log_end_offset or set(p.isr) != set(self.brokers):
                return False
            for rep in self._replicas_of(pid):
                lo = max(rep.log.log_start_offset, ll.log_start_offset)
                if (
                    rep.state is None
                    or rep.state.high_watermark != hw
                    or rep.log.log_end_offset != ll.log_end_offset
                    or rep.log.span(lo, hw) != ll.span(lo, hw)
                ):
                    return False
        return True

    def check_converged(self) -> None:
        for pid, p in self.parts.items():
            self._check_converged(pid, p)

    def _check_converged(self, pid: int, p: pc.PartitionState) -> None:
        if p.leader < 0:
            raise Violation(f"partition {pid}: no leader after settling: {p}")
        ll = self.brokers[p.leader].reps[pid].log
        ls = self.brokers[p.leader].reps[pid].state
        assert ls is not None
        for offset, rid in self.acked[pid].items():
            if not self._holds(ll, pid, offset, rid):
                raise Violation(
                    f"partition {pid}: acked record {rid} at {offset} missing on leader {p.leader} after settling"
                )
        hw = ls.high_watermark
        for rep in self._replicas_of(pid):
            lo = max(rep.log.log_start_offset, ll.log_start_offset)
            if rep.log.log_end_offset < hw or rep.log.span(lo, hw) != ll.span(lo, hw):
                raise Violation(f"partition {pid}: a replica did not converge below HW {hw}")
        # Liveness: with the network healed and no crash, every live replica is back in the ISR
        # within the settling time (a follower that keeps failing to catch up, e.g. by getting the
        # same diverging answer forever, never is).
        missing = set(self.brokers) - set(p.isr)
        if missing:
            raise Violation(
                f"liveness: partition {pid}: replicas {sorted(missing)} not back in the ISR {p.isr} "
                f"{self.now - self.settle_started} ms after healing"
            )
