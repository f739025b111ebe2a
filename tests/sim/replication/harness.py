"""A simulated world for `broker.replica.state.PartitionState`: one partition, N brokers.

Everything is deterministic given the calls made (hypothesis or a seeded `random.Random`
chooses them). Time is simulated milliseconds.

- Brokers host one replica each: a `MemLog` (kept across crashes: a process crash keeps the
  page cache; power loss is not modelled) and a `PartitionState` rebuilt at restart from the
  last high-watermark checkpoint (possibly stale) and the latest metadata.
- The controller (node 0) uses the project's own rules (`quorum.controller.partition_change`):
  AlterPartition validation and change building, fencing a broker whose heartbeats stop
  (removal from the ISR, election of another ISR member, optionally unclean), unfencing on
  heartbeats (election for a leaderless partition), re-registration with a new broker epoch
  after a restart. It does not fail (it is the Raft quorum's job, simulated elsewhere).
- Metadata reaches each broker in order, late, possibly skipping intermediate states (a
  broker applies a batch of records as one delta), only while it can reach the controller.
- The network delays every message by a random time (so messages reorder), drops them with a
  settable probability, and drops everything across partitioned pairs.
- Followers fetch (one request in flight, re-sent after a timeout), truncate on diverging
  epochs, ask the leader's log start/end on OFFSET_OUT_OF_RANGE. Leaders answer fetches,
  send AlterPartition (`proposed_isr`), complete acks=-1 writes (`is_acked`).
- Producers write to any broker that believes it leads (zombies included); consumers read
  below the HW of any broker that believes it leads.

Properties (`check`, after every event), raising `Violation`:
1. an acks=-1 write acknowledged (the ISR had >= min.insync.replicas members) is in the log of
   every leader the controller elects cleanly, and of the current leader at all times;
2. a consumed offset is never truncated from any replica holding the consumed record, and
   every clean leader has it;
3. a leader's HW never goes back during its leadership, never passes its own LEO, and the
   current leader's HW never passes the LEO of any member of the controller's ISR;
4. replicas that share a leader epoch agree on every offset below both their HWs (while no
   unclean election happened); and always: two logs holding the same epoch at an offset hold
   the same records up to it (log matching).
An unclean election forgets the acked/consumed records the new leader lacks (counted as
`lost`); the loss must be reported by the follower truncation (`below_high_watermark`).
"""

from __future__ import annotations

import random
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from broker.replica.follower import apply_fetch_answer, apply_leader_offsets
from broker.replica.purgatory import AckWaiters
from broker.replica.state import FollowerPlan, FollowerStep, LeaderAnswer, PartitionState
from quorum.controller import partition_change as pc
from quorum.controller.requests import IsrMember
from quorum.kafka_errors import ErrorCode
from tests.sim.replication.memlog import MemLog, Record

CONTROLLER = 0


class Violation(AssertionError):
    """A replication property does not hold."""


# ---------------------------------------------------------------- messages


@dataclass(frozen=True, slots=True)
class FetchReq:
    leader_epoch: int
    offset: int
    last_epoch: int
    broker_epoch: int
    log_start: int


@dataclass(frozen=True, slots=True)
class FetchResp:
    req_epoch: int
    req_offset: int
    answer: LeaderAnswer
    records: tuple[Record, ...]


@dataclass(frozen=True, slots=True)
class OffsetsReq:
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class OffsetsResp:
    req_epoch: int
    error: ErrorCode
    start: int
    end: int


_SIM_TOPIC_ID = uuid.UUID(int=1)


@dataclass(frozen=True, slots=True)
class AlterReq:
    broker_epoch: int
    leader_epoch: int
    partition_epoch: int
    isr: tuple[IsrMember, ...]
    sent_at: int
    """Identifies the request: its answer carries it back (the broker's requests have correlation ids)."""


@dataclass(frozen=True, slots=True)
class AlterResp:
    error: ErrorCode
    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]
    req_sent_at: int


@dataclass(frozen=True, slots=True)
class Heartbeat:
    broker_epoch: int


Body = FetchReq | FetchResp | OffsetsReq | OffsetsResp | AlterReq | AlterResp | Heartbeat


@dataclass(order=True)
class Msg:
    at: int
    seq: int
    src: int = field(compare=False)
    dst: int = field(compare=False)
    body: Body = field(compare=False)


# ---------------------------------------------------------------- configuration


StateFactory = Callable[[int, int, int], PartitionState]
"""(broker id, min.insync.replicas, replica.lag.time.max.ms) -> a PartitionState (mutants override)."""


def default_state(broker_id: int, min_isr: int, lag_ms: int) -> PartitionState:
    return PartitionState(broker_id, min_insync_replicas=min_isr, replica_lag_time_max_ms=lag_ms)


@dataclass(frozen=True)
class SimConfig:
    brokers: int = 3
    min_isr: int = 2
    unclean: bool = False
    lag_ms: int = 600
    session_timeout_ms: int = 450
    heartbeat_ms: int = 50
    fetch_timeout_ms: int = 300
    max_delay_ms: int = 40
    max_batch: int = 3
    produce_timeout_ms: int = 1_500
    step_ms: int = 10
    state_factory: StateFactory = default_state


# ---------------------------------------------------------------- the world


@dataclass
class Broker:
    id: int
    log: MemLog = field(default_factory=MemLog)
    state: PartitionState | None = None
    alive: bool = True
    broker_epoch: int = 1
    meta_index: int = -1
    hw_checkpoint: int = 0
    fetch_sent_at: int | None = None
    alter_sent_at: int | None = None
    """When the AlterPartition in flight was sent (its answer times out, as the broker's IsrSender's does)."""
    fetch_offset_sent: int = -1
    caught_up: bool = False
    offsets_pending: bool = False
    last_hb: int = -(10**9)
    next_isr_check: int = 0
    acks: AckWaiters = field(default_factory=AckWaiters)
    """acks=-1 writes waiting (the broker's own purgatory class); each has a deadline in `ack_deadlines`."""
    ack_deadlines: dict[int, int] = field(default_factory=dict)
    """record id -> produce timeout (simulated ms) of a waiting acks=-1 write."""
    last_leader_hw: tuple[int, int] | None = None
    """(leadership start epoch, HW) for property 3."""


class World:
    def __init__(self, config: SimConfig, seed: int = 0) -> None:
        self.config = config
        self.rng = random.Random(seed)
        self.now = 0
        self.seq = 0
        self.msgs: list[Msg] = []
        self.blocked: set[frozenset[int]] = set()
        self.loss = 0.0
        self.stats: Counter[str] = Counter()
        self.next_record = 0
        ids = tuple(range(1, config.brokers + 1))
        self.brokers = {b: Broker(b) for b in ids}
        for broker in self.brokers.values():
            broker.log.on_drop = self._drop_checker(broker)
        # Controller state: the partition, registrations, and the metadata history it published.
        self.part = pc.PartitionState(replicas=ids, isr=ids, leader=ids[0], leader_epoch=0, partition_epoch=0)
        self.regs = {b: pc.BrokerRegistrationState(epoch=1) for b in ids}
        self.last_hb_ctrl = dict.fromkeys(ids, 0)
        self.history: list[pc.PartitionState] = [self.part]
        self.acked: dict[int, int] = {}
        self.consumed: dict[int, int] = {}
        self.unclean_happened = False
        self.settle_started = 0
        self.unclean_snapshots: list[tuple[int, dict[int, int]]] = []
        """(leader epoch, offset -> record id of the new leader's log) of every unclean election."""
        for b in self.brokers.values():
            self._start(b)

    # ------------------------------------------------------------ helpers

    def new_state(self, b: Broker) -> PartitionState:
        return self.config.state_factory(b.id, self.config.min_isr, self.config.lag_ms)

    def _start(self, b: Broker) -> None:
        b.state = self.new_state(b)
        b.state.set_initial_high_watermark(b.hw_checkpoint, b.log)
        b.fetch_sent_at = None
        b.offsets_pending = False
        b.acks = AckWaiters()
        b.ack_deadlines = {}
        b.last_leader_hw = None
        b.last_hb = -(10**9)
        # As a KRaft broker: no partition is applied until the broker has registered and caught
        # up with the metadata log (a stale image would make it lead an epoch long gone, with an
        # ISR that has forgotten its in-flight changes).
        b.caught_up = False
        self._catch_up_metadata(b, latest=True)

    def connected(self, a: int, b: int) -> bool:
        return frozenset((a, b)) not in self.blocked

    def send(self, src: int, dst: int, body: Body) -> None:
        if self.rng.random() < self.loss:
            self.stats["lost_msgs"] += 1
            return
        self.seq += 1
        delay = self.rng.randint(1, self.config.max_delay_ms)
        self.msgs.append(Msg(self.now + delay, self.seq, src, dst, body))

    def live(self) -> list[Broker]:
        return [b for b in self.brokers.values() if b.alive]

    def acceptable(self, broker: int) -> bool:
        r = self.regs.get(broker)
        return r is not None and not r.fenced and not r.in_controlled_shutdown

    # ------------------------------------------------------------ controller

    def _publish(self, change: pc.PartitionChange | None, why: str) -> None:
        if change is None:
            return
        old = self.part
        self.part = pc.apply_change(old, change)
        self.history.append(self.part)
        if self.part.isr != old.isr:
            if set(self.part.isr) < set(old.isr):
                self.stats["isr_shrinks"] += 1
            elif set(self.part.isr) > set(old.isr):
                self.stats["isr_expands"] += 1
        if self.part.leader != old.leader or self.part.leader_epoch != old.leader_epoch:
            self.stats["leader_changes"] += 1
            if self.part.leader >= 0:
                self._on_election(self.part.leader, unclean=change.unclean)
        self.stats[f"change_{why}"] += 1

    def _on_election(self, leader: int, *, unclean: bool) -> None:
        log = self.brokers[leader].log
        if unclean:
            self.stats["unclean_elections"] += 1
            self.unclean_happened = True
            kept = {log.log_start_offset + i: r.record_id for i, r in enumerate(log.records)}
            self.unclean_snapshots.append((self.part.leader_epoch, kept))
            for book in (self.acked, self.consumed):
                for offset, rid in list(book.items()):
                    r = log.at(offset)
                    if r is None or r.record_id != rid:
                        del book[offset]
                        self.stats["lost_to_unclean"] += 1
            return
        for name, book in (("acked", self.acked), ("consumed", self.consumed)):
            for offset, rid in book.items():
                r = log.at(offset)
                if r is None or r.record_id != rid:
                    raise Violation(
                        f"clean leader {leader} lacks {name} record {rid} at offset {offset}: {log.records}"
                    )

    def lost_to_unclean(self, offset: int, rec: Record) -> bool:
        """A record of an epoch before an unclean election that the elected leader lacked is lost
        even if a zombie leader hands it to a consumer or acks it afterwards."""
        for epoch, kept in self.unclean_snapshots:
            if rec.epoch < epoch and kept.get(offset) != rec.record_id:
                return True
        return False

    def _fence(self, broker: int) -> None:
        self.regs[broker] = replace(self.regs[broker], fenced=True)
        self.stats["fences"] += 1
        self._publish(
            pc.remove_broker_from_partition(self.part, broker, self.acceptable, unclean_allowed=self.config.unclean),
            "fence",
        )

    def _controller_tick(self) -> None:
        for b, reg in self.regs.items():
            if not reg.fenced and self.now - self.last_hb_ctrl[b] > self.config.session_timeout_ms:
                self._fence(b)
        if self.part.leader < 0 and self.config.unclean:
            self._publish(
                pc.build_partition_change(self.part, self.acceptable, election=pc.Election.UNCLEAN), "unclean"
            )

    def _on_heartbeat(self, broker: int, epoch: int) -> None:
        reg = self.regs[broker]
        if epoch < reg.epoch:
            return
        self.last_hb_ctrl[broker] = self.now
        if epoch > reg.epoch:  # a restarted broker registers again: its old incarnation is fenced
            if not reg.fenced:
                self._fence(broker)
            self.regs[broker] = pc.BrokerRegistrationState(epoch=epoch, fenced=True)
            reg = self.regs[broker]
        if reg.fenced:
            self.regs[broker] = replace(reg, fenced=False)
            self._publish(
                pc.broker_unfenced(self.part, broker, self.acceptable, unclean_allowed=self.config.unclean), "unfence"
            )

    def _on_alter(self, src: int, req: AlterReq) -> None:
        # The controller's own AlterPartition types and rules (one partition, one item).
        item = pc.AlterPartitionItem(_SIM_TOPIC_ID, 0, req.leader_epoch, req.isr, 0, req.partition_epoch)
        request = pc.AlterPartitionRequest(src, req.broker_epoch, (item,))
        code = pc.validate_alter_partition(self.part, request, item, self.regs)
        if code == ErrorCode.NONE:
            self._publish(pc.alter_partition_change(self.part, item, self.acceptable), "alter")
            self.stats["alter_ok"] += 1
            resp = AlterResp(
                ErrorCode.NONE, self.part.leader_epoch, self.part.partition_epoch, self.part.isr, req.sent_at
            )
        else:
            self.stats[f"alter_{code.name}"] += 1
            resp = AlterResp(code, -1, -1, (), req.sent_at)
        self.send(CONTROLLER, src, resp)

    # ------------------------------------------------------------ brokers: metadata

    def _catch_up_metadata(self, b: Broker, *, latest: bool = False) -> None:
        last = len(self.history) - 1
        if not self.connected(b.id, CONTROLLER):
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
        self._apply_metadata(b, self.history[target])

    def _apply_metadata(self, b: Broker, p: pc.PartitionState) -> None:
        s = b.state
        assert s is not None
        if p.leader == b.id:
            if s.become_leader(
                leader_epoch=p.leader_epoch,
                partition_epoch=p.partition_epoch,
                replicas=p.replicas,
                isr=p.isr,
                now_ms=self.now,
                log=b.log,
                leader_recovery_state=p.leader_recovery_state,
            ):
                b.fetch_sent_at = None
                self._after_hw_change(b)
        elif s.become_follower(
            leader_id=p.leader,
            leader_epoch=p.leader_epoch,
            partition_epoch=p.partition_epoch,
            replicas=p.replicas,
            isr=p.isr,
            leader_recovery_state=p.leader_recovery_state,
        ):
            self._after_hw_change(b)  # the leadership ended: its waiting writes fail
            b.last_leader_hw = None
            b.fetch_sent_at = None
            b.offsets_pending = False

    # ------------------------------------------------------------ brokers: leader side

    def _after_hw_change(self, b: Broker) -> None:
        s = b.state
        assert s is not None
        b.acks.complete(s)
        for rid, deadline in list(b.ack_deadlines.items()):
            if self.now > deadline:  # the produce request timed out (its waiter stays, answered to nobody)
                del b.ack_deadlines[rid]
                self.stats["produce_REQUEST_TIMED_OUT"] += 1

    def _ack_done(self, b: Broker, offset: int, rec: Record) -> Callable[[ErrorCode], None]:
        def done(code: ErrorCode) -> None:
            if b.ack_deadlines.pop(rec.record_id, None) is None:
                return  # timed out: the client was told REQUEST_TIMED_OUT
            if code != ErrorCode.NONE:
                self.stats[f"produce_{code.name}"] += 1
                return
            if self.lost_to_unclean(offset, rec):
                self.stats["acked_but_lost_to_unclean"] += 1
                return
            if self.acked.get(offset, rec.record_id) != rec.record_id:
                raise Violation(f"offset {offset} acked for records {self.acked[offset]} and {rec.record_id}")
            if b.log.at(offset) != rec:
                raise Violation(f"acked {rec.record_id} at {offset} but the leader holds {b.log.at(offset)}")
            self.acked[offset] = rec.record_id
            self.stats["acked"] += 1

        return done

    def _on_fetch(self, b: Broker, src: int, req: FetchReq) -> None:
        s = b.state
        assert s is not None
        reg = self.regs[src]
        eligible = not reg.fenced and req.broker_epoch == reg.epoch
        r = s.on_follower_fetch(
            replica_id=src,
            fetch_offset=req.offset,
            last_fetched_epoch=req.last_epoch,
            now_ms=self.now,
            log=b.log,
            log_start_offset=req.log_start,
            current_leader_epoch=req.leader_epoch,
            broker_epoch=req.broker_epoch,
            isr_eligible=eligible,
        )
        records: tuple[Record, ...] = ()
        if r.error == ErrorCode.NONE and r.diverging_epoch is None:
            n = self.rng.randint(0, self.config.max_batch)
            records = tuple(b.log.read(req.offset, b.log.log_end_offset, n))
        if r.diverging_epoch is not None:
            self.stats["diverging_answers"] += 1
        first = (req.offset, req.offset + len(records) - 1) if records else None
        answer = LeaderAnswer(r.error, s.high_watermark, b.log.log_start_offset, r.diverging_epoch, first)
        self.send(b.id, src, FetchResp(req.leader_epoch, req.offset, answer, records))
        if r.high_watermark_changed:
            self._after_hw_change(b)
        if r.isr_expand_wanted:
            self._maybe_alter(b)

    def _maybe_alter(self, b: Broker) -> None:
        s = b.state
        assert s is not None
        if not s.is_leader:
            return
        isr = s.proposed_isr(self.now, None, b.log)
        if isr is None:
            return
        epochs = {f.replica_id: f.broker_epoch for f in s.followers()}
        members = tuple(IsrMember(r, b.broker_epoch if r == b.id else epochs.get(r, -1)) for r in isr)
        s.on_isr_sent(isr)
        b.alter_sent_at = self.now
        self.stats["alter_sent"] += 1
        self.send(b.id, CONTROLLER, AlterReq(b.broker_epoch, s.leader_epoch, s.partition_epoch, members, self.now))

    def _on_alter_resp(self, b: Broker, resp: AlterResp) -> None:
        s = b.state
        assert s is not None
        if resp.req_sent_at == b.alter_sent_at:  # the answer to the request in flight
            b.alter_sent_at = None
        if resp.error == ErrorCode.NONE:
            if s.on_isr_committed(
                isr=resp.isr,
                leader_epoch=resp.leader_epoch,
                partition_epoch=resp.partition_epoch,
                now_ms=self.now,
                log=b.log,
            ):
                self._after_hw_change(b)
        else:
            s.on_isr_failed(resp.error)

    # ------------------------------------------------------------ brokers: follower side

    def _drop_checker(self, b: Broker) -> Callable[[int, list[Record]], None]:
        return lambda offset, dropped: self._check_drop(b, offset, dropped)

    def _check_drop(self, b: Broker, offset: int, dropped: list[Record]) -> None:
        """`MemLog.on_drop`: records a follower's truncation removed must be neither consumed nor acked."""
        if dropped:
            self.stats["truncations"] += 1
            self.stats["truncated_records"] += len(dropped)
        for i, rec in enumerate(dropped):
            o = offset + i
            if self.consumed.get(o) == rec.record_id:
                raise Violation(f"broker {b.id} truncated consumed record {rec.record_id} at offset {o}")
            if self.acked.get(o) == rec.record_id:
                raise Violation(f"broker {b.id} truncated acked record {rec.record_id} at offset {o}")

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

    def _on_fetch_resp(self, b: Broker, resp: FetchResp) -> None:
        s = b.state
        assert s is not None
        if not s.is_follower or resp.req_epoch != s.leader_epoch:
            return
        if resp.req_offset == b.fetch_offset_sent:  # the answer to the request in flight
            b.fetch_sent_at = None
        hw_before = s.high_watermark
        plan = apply_fetch_answer(s, b.log, resp.req_offset, resp.answer, resp.records)
        self.stats[f"follower_{plan.step.value}"] += 1
        if plan.step is FollowerStep.ASK_LEADER_OFFSETS and not b.offsets_pending:
            b.offsets_pending = True
            self.send(b.id, s.leader_id, OffsetsReq(s.leader_epoch))
        self._after_cut(b, hw_before, plan)

    def _on_offsets(self, b: Broker, src: int, req: OffsetsReq) -> None:
        s = b.state
        assert s is not None
        error = s.check_leader_epoch(req.leader_epoch)
        self.send(b.id, src, OffsetsResp(req.leader_epoch, error, b.log.log_start_offset, b.log.log_end_offset))

    def _on_offsets_resp(self, b: Broker, resp: OffsetsResp) -> None:
        s = b.state
        assert s is not None
        b.offsets_pending = False
        if not s.is_follower or resp.req_epoch != s.leader_epoch or resp.error != ErrorCode.NONE:
            return
        hw_before = s.high_watermark
        plan = apply_leader_offsets(s, b.log, resp.start, resp.end)
        self.stats[f"out_of_range_{plan.step.value}"] += 1
        self._after_cut(b, hw_before, plan)

    # ------------------------------------------------------------ events

    def deliver(self, m: Msg) -> None:
        if m.dst == CONTROLLER:
            if isinstance(m.body, Heartbeat):
                self._on_heartbeat(m.src, m.body.broker_epoch)
            elif isinstance(m.body, AlterReq):
                self._on_alter(m.src, m.body)
            return
        b = self.brokers[m.dst]
        if not b.alive:
            return
        body = m.body
        if isinstance(body, FetchReq):
            self._on_fetch(b, m.src, body)
        elif isinstance(body, FetchResp):
            self._on_fetch_resp(b, body)
        elif isinstance(body, OffsetsReq):
            self._on_offsets(b, m.src, body)
        elif isinstance(body, OffsetsResp):
            self._on_offsets_resp(b, body)
        elif isinstance(body, AlterResp):
            self._on_alter_resp(b, body)

    def _broker_tick(self, b: Broker) -> None:
        s = b.state
        assert s is not None
        if self.connected(b.id, CONTROLLER):
            if self.now - b.last_hb >= self.config.heartbeat_ms:
                b.last_hb = self.now
                self.send(b.id, CONTROLLER, Heartbeat(b.broker_epoch))
            if self.rng.random() < 0.3:
                self._catch_up_metadata(b)
        if s.is_follower and s.leader_id > 0 and not b.offsets_pending:
            if b.fetch_sent_at is None or self.now - b.fetch_sent_at > self.config.fetch_timeout_ms:
                offset, last_epoch = s.fetch_position(b.log)
                b.fetch_sent_at = self.now
                b.fetch_offset_sent = offset
                req = FetchReq(s.leader_epoch, offset, last_epoch, b.broker_epoch, b.log.log_start_offset)
                self.send(b.id, s.leader_id, req)
        if s.is_leader:
            if self.now >= b.next_isr_check:
                b.next_isr_check = self.now + self.config.lag_ms // 2
                self._maybe_alter(b)
            if b.alter_sent_at is not None and self.now - b.alter_sent_at > self.config.fetch_timeout_ms:
                b.alter_sent_at = None
                s.on_isr_failed(None)  # no answer: the outcome is unknown (IsrSender's request timeout)
                self.stats["alter_timeout"] += 1
            if s.pending_isr is not None:
                self._maybe_alter(b)  # re-sends a change whose answer was lost
            if b.ack_deadlines:
                self._after_hw_change(b)
        if self.rng.random() < 0.05:
            b.hw_checkpoint = s.high_watermark

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

    def produce(self, acks: int, pick: int = 0) -> bool:
        leaders = [b for b in self.live() if b.state is not None and b.state.is_leader]
        if not leaders:
            return False
        b = leaders[pick % len(leaders)]
        s = b.state
        assert s is not None
        check = s.check_produce(acks)
        if check.error != ErrorCode.NONE:
            self.stats[f"produce_{check.error.name}"] += 1
            return False
        rid = self.next_record
        self.next_record += 1
        rec = Record(s.leader_epoch, rid)
        offset = b.log.append(rec)
        self.stats["produced"] += 1
        if acks == -1:
            b.ack_deadlines[rid] = self.now + self.config.produce_timeout_ms
            b.acks.add(offset + 1, s.leader_epoch, self._ack_done(b, offset, rec))
        if s.on_local_append(self.now, b.log):
            self._after_hw_change(b)
        self.check()
        return True

    def consume(self, pick: int = 0) -> int:
        leaders = [b for b in self.live() if b.state is not None and b.state.is_leader]
        if not leaders:
            return 0
        b = leaders[pick % len(leaders)]
        s = b.state
        assert s is not None
        records = b.log.read(b.log.log_start_offset, s.high_watermark)
        for i, rec in enumerate(records):
            o = b.log.log_start_offset + i
            if self.lost_to_unclean(o, rec):
                self.stats["consumed_but_lost_to_unclean"] += 1
                continue
            seen = self.consumed.get(o)
            if seen is not None and seen != rec.record_id:
                raise Violation(f"offset {o} consumed as record {seen} and later as {rec.record_id} (broker {b.id})")
            self.consumed[o] = rec.record_id
        self.stats["consumed"] += len(records)
        return len(records)

    def crash(self, broker: int) -> None:
        b = self.brokers[broker]
        if not b.alive:
            return
        b.alive = False
        b.state = None
        self.stats["crashes"] += 1

    def restart(self, broker: int) -> None:
        b = self.brokers[broker]
        if b.alive:
            return
        b.alive = True
        b.broker_epoch += 1
        self._start(b)

    def partition(self, a: int, c: int) -> None:
        if a != c:
            self.blocked.add(frozenset((a, c)))

    def isolate(self, broker: int) -> None:
        for other in (CONTROLLER, *self.brokers):
            self.partition(broker, other)

    def heal(self) -> None:
        self.blocked.clear()

    # ------------------------------------------------------------ properties

    def check(self) -> None:
        states = {b.id: b.state for b in self.live() if b.state is not None}
        for bid, s in states.items():
            b = self.brokers[bid]
            if s.high_watermark > b.log.log_end_offset:
                raise Violation(f"broker {bid}: HW {s.high_watermark} > LEO {b.log.log_end_offset}")
            if s.is_leader:
                since = s._leader_since_epoch
                if (
                    b.last_leader_hw is not None
                    and b.last_leader_hw[0] == since
                    and s.high_watermark < b.last_leader_hw[1]
                ):
                    raise Violation(f"leader {bid}: HW went back {b.last_leader_hw[1]} -> {s.high_watermark}")
                b.last_leader_hw = (since, s.high_watermark)
                if s.leader_epoch == self.part.leader_epoch and self.part.leader == bid:
                    for r in self.part.isr:
                        if s.high_watermark > self.brokers[r].log.log_end_offset:
                            raise Violation(
                                f"leader {bid}: HW {s.high_watermark} > LEO {self.brokers[r].log.log_end_offset} "
                                f"of ISR member {r} (ISR {self.part.isr})"
                            )
                    if not self.unclean_happened:
                        for name, book in (("acked", self.acked), ("consumed", self.consumed)):
                            for offset, rid in book.items():
                                rec = b.log.at(offset)
                                if rec is None or rec.record_id != rid:
                                    raise Violation(f"current leader {bid} lacks {name} {rid} at {offset}")
        logs = [(bid, self.brokers[bid].log) for bid in self.brokers]
        for i, (a, la) in enumerate(logs):
            for c, lc in logs[i + 1 :]:
                self._check_pair(a, la, c, lc, states)

    def _check_pair(self, a: int, la: MemLog, c: int, lc: MemLog, states: Mapping[int, PartitionState]) -> None:
        n = min(la.log_end_offset, lc.log_end_offset)
        # Log matching: find the last offset where both hold the same epoch; everything before must match.
        for o in range(n - 1, -1, -1):
            ra, rc = la.at(o), lc.at(o)
            if ra is not None and rc is not None and ra.epoch == rc.epoch:
                if la.records[: o + 1] != lc.records[: o + 1]:
                    raise Violation(f"log matching: brokers {a} and {c} share epoch {ra.epoch} at {o} but differ")
                break
        sa, sc = states.get(a), states.get(c)
        if self.unclean_happened or sa is None or sc is None or sa.leader_epoch != sc.leader_epoch:
            return
        below = min(sa.high_watermark, sc.high_watermark)
        if la.records[:below] != lc.records[:below]:
            raise Violation(f"brokers {a} and {c} in epoch {sa.leader_epoch} differ below HW {below}")

    # ------------------------------------------------------------ end of a run

    def settle(self, max_ms: int = 20_000) -> None:
        """Heal everything, restart the crashed brokers, stop losing messages, and run until the
        replicas have converged (or ``max_ms`` of simulated time passed: then
        `check_converged` fails the liveness property)."""
        self.heal()
        self.loss = 0.0
        for bid in self.brokers:
            self.restart(bid)
        self.settle_started = self.now
        end = self.now + max_ms
        while self.now < end:
            self.run(500)
            if self.converged():
                return

    def converged(self) -> bool:
        leader = self.brokers.get(self.part.leader)
        if leader is None or leader.state is None or not leader.state.is_leader:
            return False
        hw = leader.state.high_watermark
        return (
            hw == leader.log.log_end_offset
            and set(self.part.isr) == set(self.brokers)
            and all(
                b.log.records == leader.log.records and b.state is not None and b.state.high_watermark == hw
                for b in self.brokers.values()
            )
        )

    def check_converged(self) -> None:
        leader = self.part.leader
        if leader < 0:
            raise Violation(f"no leader after settling: {self.part}")
        ll = self.brokers[leader].log
        ls = self.brokers[leader].state
        assert ls is not None
        for offset, rid in self.acked.items():
            rec = ll.at(offset)
            if rec is None or rec.record_id != rid:
                raise Violation(f"acked record {rid} at {offset} missing on leader {leader} after settling")
        for b in self.brokers.values():
            if b.log.records[: ls.high_watermark] != ll.records[: ls.high_watermark]:
                raise Violation(f"broker {b.id} did not converge below HW {ls.high_watermark}")
        # Liveness: with the network healed and no crash, every live replica is back in the ISR
        # within the settling time (a follower that keeps failing to catch up, e.g. by getting the
        # same diverging answer forever, never is).
        missing = set(self.brokers) - set(self.part.isr)
        if missing:
            raise Violation(
                f"liveness: replicas {sorted(missing)} not back in the ISR {self.part.isr} "
                f"{self.now - self.settle_started} ms after healing"
            )
