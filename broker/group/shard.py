"""The group coordinator of one `__consumer_offsets` partition: sans-IO and deterministic.

Kafka's group coordinator (since 3.7) keeps one state machine per partition of
`__consumer_offsets`; this is ours for the classic protocol. Each operation takes a request,
the runtime's token for the request and the time, changes the state at once and returns an
`Outcome`: the records to append to the partition (key and value objects of
`broker.group.records`, encoded by the runtime), and the answers to waiting requests, its
own or others' (a JoinGroup waits for the whole group). The runtime (`broker.group.runtime`)
appends the records with acks=all and sends the answers only once every record appended
before them is committed (so no answer reveals state that a failover could lose); when an
append fails, it calls the outcome's `undo`, which puts back what the records said and
answers with the error instead. `replay` rebuilds the state from the partition's records
when a broker becomes its leader (the same records this module writes).

Timers (session timeouts, rebalance timeouts, the initial rebalance delay, KIP-394's pending
members) are deadlines in `deadlines`; the runtime calls `tick(now)` when the earliest is
due. Nothing here reads a clock, sleeps or does IO; member ids come from `new_id`, so a
simulation can make them deterministic.

What a group may see, and when (the classic protocol's invariants, checked by the
simulation):
- within one generation every member gets the assignment the leader sent for it, and
  only members of that generation are answered with it;
- a commit is accepted only from a member of the current generation (or, with generation
  -1, for a group with no members), never during CompletingRebalance;
- a member whose `group.instance.id` was taken over by a newer member is answered
  FENCED_INSTANCE_ID.

Transactional offsets (TxnOffsetCommit, as Kafka 3.9's OffsetMetadataManager): the offsets a
producer commits inside a transaction stay in `pending_txn`, apart from the committed ones,
and OffsetFetch never shows them (with require_stable, such a partition answers
UNSTABLE_OFFSET_COMMIT). Their records are a transactional batch of that producer
(`Outcome.producer`); when the transaction's marker has committed (`complete_transaction`,
or its control record in `replay_marker`), COMMIT makes each of them the committed offset
unless a plain commit of the partition was written after it (records compare by their
position in the log), ABORT drops them. A tombstone of a partition drops its pending offsets.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, Final
from uuid import UUID

from broker.group.assignors import assign
from broker.group.classic import ClassicGroup, GroupState, Member, Token
from broker.group.consumer_group import (
    REGEX_REFRESH_INTERVAL_MS,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    reconcile,
)
from broker.group.consumer_records import CONSUMER_KEYS, changed_records
from broker.group.consumer_records import replay as replay_consumer_record
from broker.group.messages import (
    CommitRequest,
    CommittedOffset,
    ConsumerGroupDescription,
    ConsumerHeartbeatRequest,
    ConsumerHeartbeatResult,
    ConsumerMemberDescription,
    DescribedMember,
    GroupDescription,
    GroupListing,
    HeartbeatRequest,
    JoinedMember,
    JoinRequest,
    JoinResult,
    LeaveResult,
    LeavingMember,
    SyncRequest,
    SyncResult,
    TxnCommitRequest,
)
from broker.group.records import GroupKey, GroupValue, MemberValue, OffsetKey, OffsetValue, RecordKey, RecordValue
from broker.group.timers import Deadlines
from quorum.frozen_init import fast_frozen_init
from quorum.kafka_errors import ErrorCode

__all__ = ["CoordinatorConfig", "GroupShard", "Outcome", "Record"]

Record = tuple[RecordKey, RecordValue | None]
"""A record to append: the classic groups' and offsets' keys and values, and KIP-848's
(broker/group/consumer_group.py writes those into the same Outcome)."""
TopicPartition = tuple[str, int]

# One write of an offset not yet known committed: (group, (topic, partition), its number).
_Change = tuple[str, TopicPartition, int]

NO_PRODUCER_ID = -1
# A transaction's pending offsets, by (group, (topic, partition)).
PendingOffsets = dict[tuple[str, TopicPartition], OffsetValue]
# What a tombstone did to open transactions: per producer whose offset of the key it removed,
# (producer id, its pending map, the removal as a write of that producer's `_OffsetWrites`),
# settled with the tombstone (a refused tombstone puts back what its removal took).
_Dropped = list[tuple[int, PendingOffsets, _Change]]

# Deadline keys: ("session", group, member), ("pending", group, member), ("join", group),
# ("sync", group, generation).
DeadlineKey = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    """The broker settings the coordinator applies (Kafka's names and defaults)."""

    group_min_session_timeout_ms: int = 6_000  # group.min.session.timeout.ms
    group_max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    group_initial_rebalance_delay_ms: int = 3_000  # group.initial.rebalance.delay.ms
    group_max_size: int = 2**31 - 1  # group.max.size
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000  # offsets.retention.minutes (10080)
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    consumer_session_timeout_ms: int = 45_000  # group.consumer.session.timeout.ms (KIP-848)
    consumer_heartbeat_interval_ms: int = 5_000  # group.consumer.heartbeat.interval.ms
    consumer_assignors: tuple[str, ...] = ("uniform", "range")  # group.consumer.assignors; the first is the default


fast_frozen_init(CoordinatorConfig)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(slots=True, init=False)
class Outcome:
    records: list[Record]
    replies: dict[Token, Any]
    # The append of `records` failed: restore what they changed; the answers to send instead.
    undo: Callable[[ErrorCode], dict[Token, Any]] | None
    # The append of `records` committed. The runtime calls `written` or `undo` for the
    # outcomes of a partition in the order the shard returned them.
    written: Callable[[], None] | None
    # (producer id, producer epoch): `records` are that producer's transactional write (a
    # batch of their own, with the transactional bit), else None (a plain write).
    producer: tuple[int, int] | None

    # An explicit __init__ (init=False): mypyc compiles it, while the dataclass decorator's runs
    # as interpreted Python in a compiled module, slower there than uncompiled.
    def __init__(
        self,
        records: list[Record] | None = None,  # None: a new empty list
        replies: dict[Token, Any] | None = None,  # None: a new empty dict
        undo: Callable[[ErrorCode], dict[Token, Any]] | None = None,
        written: Callable[[], None] | None = None,
        producer: tuple[int, int] | None = None,
    ) -> None:
        self.records = [] if records is None else records
        self.replies = {} if replies is None else replies
        self.undo = undo
        self.written = written
        self.producer = producer


log = logging.getLogger(__name__)

# The codes of every OffsetCommit, as module constants: mypyc loads a Final global directly,
# where `ErrorCode.NONE` is an attribute lookup on the enum class at each use.
_NONE: Final = ErrorCode.NONE
_OFFSET_METADATA_TOO_LARGE: Final = ErrorCode.OFFSET_METADATA_TOO_LARGE


def _default_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"


def append_error(code: ErrorCode) -> ErrorCode:
    """What a group request is answered when its records could not be appended (Kafka's
    mapping in the coordinator runtime)."""
    if code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT):  # fmt: skip
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.FENCED_LEADER_EPOCH):
        return ErrorCode.NOT_COORDINATOR
    if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return code


class GroupShard:
    def __init__(self, config: CoordinatorConfig, *, new_id: Callable[[str], str] = _default_id) -> None:
        self.config = config
        self.new_id = new_id
        self.groups: dict[str, ClassicGroup] = {}
        self.consumer_groups: dict[str, ConsumerGroup] = {}  # KIP-848 groups (a group id is in one map only)
        self.offsets: dict[str, dict[TopicPartition, OffsetValue]] = {}
        self.deadlines: Deadlines[DeadlineKey] = Deadlines()
        self._offset_writes = _OffsetWrites()
        # Open transactions' offsets, by producer id (a producer's map stays, maybe emptied by
        # tombstones, until its transaction completes).
        self.pending_txn: dict[int, PendingOffsets] = {}
        self._position = 0  # the next record's position (`OffsetValue.position`): log order
        self._dropped_pending: dict[_Change, _Dropped] = {}
        self._pending_writes: dict[int, _OffsetWrites] = {}  # per producer, its writes not yet settled

    # ================================================================== loading

    def replay(self, key: Any, value: Any, now_ms: int, *, offset: int = -1, producer_id: int = NO_PRODUCER_ID) -> None:
        """Apply one record of the partition (in log order) to the state: `offset` is its log
        offset (-1: unknown, the next position is taken), `producer_id` its batch's producer
        when the batch is transactional (-1: a plain batch)."""
        if isinstance(key, CONSUMER_KEYS):
            replay_consumer_record(self.consumer_groups, key, value)
            return
        if isinstance(key, OffsetKey):
            assert value is None or isinstance(value, OffsetValue)
            position = offset if offset >= 0 else self._position
            self._position = max(self._position, position + 1)
            tp = (key.topic, key.partition)
            if value is None:
                group_offsets = self.offsets.get(key.group)
                if group_offsets is not None:
                    group_offsets.pop(tp, None)
                    if not group_offsets:
                        del self.offsets[key.group]
                for pending in self.pending_txn.values():  # (a tombstone drops pending offsets)
                    pending.pop((key.group, tp), None)
            else:
                value = replace(value, position=position)
                if producer_id != NO_PRODUCER_ID:
                    self.pending_txn.setdefault(producer_id, {})[(key.group, tp)] = value
                else:
                    self.offsets.setdefault(key.group, {})[tp] = value
                if key.group not in self.groups:
                    self.groups[key.group] = ClassicGroup(key.group, current_state_timestamp=value.commit_timestamp)
            return
        assert value is None or isinstance(value, GroupValue)
        if value is None:
            self.groups.pop(key.group, None)
            return
        group = ClassicGroup(
            key.group,
            state=GroupState.STABLE if value.members else GroupState.EMPTY,
            generation=value.generation,
            protocol_type=value.protocol_type or None,
            protocol=value.protocol,
            leader=value.leader if value.members else None,
            current_state_timestamp=value.current_state_timestamp if value.current_state_timestamp >= 0 else now_ms,
        )
        for mv in value.members:
            group.members[mv.member_id] = Member(
                mv.member_id, mv.group_instance_id, mv.client_id, mv.client_host, mv.rebalance_timeout_ms,
                mv.session_timeout_ms, value.protocol_type, ((value.protocol or "", mv.subscription),), mv.assignment,
            )  # fmt: skip
            if mv.group_instance_id is not None:
                group.static_members[mv.group_instance_id] = mv.member_id
        self.groups[key.group] = group

    def loaded(self, now_ms: int) -> None:
        """Loading is complete: every member gets a full session from now (Kafka's rule)."""
        for group in self.groups.values():
            for m in group.members.values():
                self._touch(group, m, now_ms)
        for consumer_group in self.consumer_groups.values():
            for member in consumer_group.members.values():
                self.deadlines.set(
                    ("csession", consumer_group.group_id, member.member_id),
                    now_ms + self.config.consumer_session_timeout_ms,
                )

    # ================================================================== JoinGroup

    def join(self, req: JoinRequest, token: Token, now_ms: int) -> Outcome:
        out = Outcome()
        error = self._join(req, token, now_ms, out)
        if error is not None:
            out.replies[token] = JoinResult(error, member_id=req.member_id)
        return out

    def _join(self, req: JoinRequest, token: Token, now: int, out: Outcome) -> ErrorCode | None:
        c = self.config
        if not req.group_id:
            return ErrorCode.INVALID_GROUP_ID
        if not c.group_min_session_timeout_ms <= req.session_timeout_ms <= c.group_max_session_timeout_ms:
            return ErrorCode.INVALID_SESSION_TIMEOUT
        consumer_group = self.consumer_groups.get(req.group_id)
        if consumer_group is not None:
            if consumer_group.members:
                return ErrorCode.INCONSISTENT_GROUP_PROTOCOL  # a group speaks one protocol at a time
            del self.consumer_groups[req.group_id]  # an empty consumer group becomes a classic one
            out.records.extend(changed_records(consumer_group, deleted=True))
        group = self.groups.get(req.group_id)
        if group is None:
            if req.member_id:
                return ErrorCode.UNKNOWN_MEMBER_ID
            group = ClassicGroup(req.group_id, current_state_timestamp=now)
        if group.state == GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        names = tuple(name for name, _ in req.protocols)
        if not group.supports(req.protocol_type, names):
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        self.groups.setdefault(req.group_id, group)
        if not req.member_id:
            return self._join_new_member(group, req, token, now, out)
        return self._join_known_member(group, req, token, now, out)

    def _join_new_member(
        self, group: ClassicGroup, req: JoinRequest, token: Token, now: int, out: Outcome
    ) -> ErrorCode | None:
        instance = req.group_instance_id
        if instance is not None and instance in group.static_members:
            return self._replace_static_member(group, req, token, now, out)
        if len(group.members) + len(group.pending_members) >= self.config.group_max_size:
            self._drop_if_unused(group)
            return ErrorCode.GROUP_MAX_SIZE_REACHED
        member_id = self.new_id(instance if instance is not None else req.client_id)
        if instance is None and req.version >= 4:
            # KIP-394: hand out the id; the member joins with it (within a session timeout).
            group.pending_members.add(member_id)
            self.deadlines.set(("pending", group.group_id, member_id), now + req.session_timeout_ms)
            out.replies[token] = JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id=member_id)
            return None
        self._add_member(group, member_id, req, token, now, out)
        return None

    def _add_member(
        self, group: ClassicGroup, member_id: str, req: JoinRequest, token: Token, now: int, out: Outcome
    ) -> None:
        member = Member(
            member_id, req.group_instance_id, req.client_id, req.client_host, req.rebalance_timeout_ms,
            req.session_timeout_ms, req.protocol_type, req.protocols, join_token=token,
        )  # fmt: skip
        if not group.members:
            group.protocol_type = req.protocol_type
        group.members[member_id] = member
        if req.group_instance_id is not None:
            group.static_members[req.group_instance_id] = member_id
        group.pending_members.discard(member_id)
        self.deadlines.cancel(("pending", group.group_id, member_id))
        if group.state == GroupState.PREPARING_REBALANCE and group.initial_delay_active:
            group.new_member_added = True
        self._touch(group, member, now)
        self._prepare_rebalance(group, now, out, f"member {member_id} joined")
        self._maybe_complete_join(group, now, out)

    def _join_known_member(
        self, group: ClassicGroup, req: JoinRequest, token: Token, now: int, out: Outcome
    ) -> ErrorCode | None:
        instance = req.group_instance_id
        if instance is not None and group.static_members.get(instance, req.member_id) != req.member_id:
            return ErrorCode.FENCED_INSTANCE_ID
        if req.member_id in group.pending_members:
            self._add_member(group, req.member_id, req, token, now, out)
            return None
        member = group.members.get(req.member_id)
        if member is None or group.state == GroupState.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if instance is not None and member.group_instance_id != instance:
            return ErrorCode.FENCED_INSTANCE_ID
        changed = member.protocols != req.protocols
        if group.state == GroupState.PREPARING_REBALANCE:
            self._update_member(member, req, token, out)
            self._touch(group, member, now)
            self._maybe_complete_join(group, now, out)
        elif group.state == GroupState.COMPLETING_REBALANCE and not changed:
            # The member missed its JoinGroup answer: send it again (its generation is current).
            out.replies[token] = self._join_answer(group, member)
            self._touch(group, member, now)
        elif group.state == GroupState.STABLE and not changed and member.member_id != group.leader:
            out.replies[token] = self._join_answer(group, member)
            self._touch(group, member, now)
        else:
            self._update_member(member, req, token, out)
            self._touch(group, member, now)
            why = "changed its protocols" if changed else "rejoined"
            self._prepare_rebalance(group, now, out, f"member {member.member_id} {why}")
            self._maybe_complete_join(group, now, out)
        return None

    @staticmethod
    def _update_member(member: Member, req: JoinRequest, token: Token, out: Outcome) -> None:
        if member.join_token is not None and member.join_token != token:
            # A second JoinGroup while the first waits: the first is answered now (the
            # connection answers in request order, so it must not wait forever).
            out.replies[member.join_token] = JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member_id=member.member_id)
        member.protocols = req.protocols
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.session_timeout_ms = req.session_timeout_ms
        member.client_id = req.client_id
        member.client_host = req.client_host
        member.join_token = token

    def _replace_static_member(
        self, group: ClassicGroup, req: JoinRequest, token: Token, now: int, out: Outcome
    ) -> ErrorCode | None:
        """KIP-345: a known group.instance.id joins with no member id: the new member takes the
        old one's place (and partitions); the old id is fenced."""
        instance = req.group_instance_id
        assert instance is not None
        old_id = group.static_members[instance]
        member = group.members[old_id]
        new_id = self.new_id(instance)
        for t in (member.join_token, member.sync_token):
            if t is not None:
                out.replies[t] = (
                    JoinResult(ErrorCode.FENCED_INSTANCE_ID, member_id=old_id)
                    if t == member.join_token
                    else SyncResult(ErrorCode.FENCED_INSTANCE_ID)
                )
        saved = (member.member_id, member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms,
                 member.client_id, member.client_host, group.leader)  # fmt: skip
        del group.members[old_id]
        self.deadlines.cancel(("session", group.group_id, old_id))
        member.member_id = new_id
        member.join_token = member.sync_token = None
        group.members[new_id] = member
        group.static_members[instance] = new_id
        if group.leader == old_id:
            group.leader = new_id
        protocols_same = member.protocols == req.protocols
        if group.state == GroupState.STABLE and protocols_same:
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
            member.session_timeout_ms = req.session_timeout_ms
            member.client_id, member.client_host = req.client_id, req.client_host
            self._touch(group, member, now)
            leader = group.leader == new_id
            out.replies[token] = JoinResult(
                ErrorCode.NONE, group.generation, group.protocol_type, group.protocol, group.leader or "", new_id,
                self._member_list(group) if leader else (), skip_assignment=leader,
            )  # fmt: skip
            out.records.append(self._group_record(group, now))

            def undo(code: ErrorCode) -> dict[Token, Any]:
                if group.members.get(new_id) is member:
                    del group.members[new_id]
                    self.deadlines.cancel(("session", group.group_id, new_id))
                    (member.member_id, member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms,
                     member.client_id, member.client_host, group.leader) = saved  # fmt: skip
                    group.members[old_id] = member
                    group.static_members[instance] = old_id
                    self._touch(group, member, now)
                return {token: JoinResult(append_error(code), member_id="")}

            out.undo = undo
            return None
        self._update_member(member, req, token, out)
        self._touch(group, member, now)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, now, out, f"static member {instance} rejoined as {member.member_id}")
        self._maybe_complete_join(group, now, out)
        return None

    # ================================================================== rebalancing

    def _prepare_rebalance(self, group: ClassicGroup, now: int, out: Outcome, reason: str) -> None:
        if group.state not in (GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            return
        log.info("group %s: preparing to rebalance in state %s, generation %d (%s)",
                 group.group_id, group.state.name, group.generation, reason)  # fmt: skip
        if group.state == GroupState.COMPLETING_REBALANCE:
            for m in group.members.values():
                m.assignment = b""
                if m.sync_token is not None:
                    out.replies[m.sync_token] = SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)
                    m.sync_token = None
        self.deadlines.cancel(("sync", group.group_id, group.generation))
        timeout = group.max_rebalance_timeout_ms()
        delay = self.config.group_initial_rebalance_delay_ms
        if group.state == GroupState.EMPTY and delay > 0:
            group.initial_delay_active = True
            group.new_member_added = False
            group.initial_remaining_ms = max(timeout - delay, 0)
            self.deadlines.set(("join", group.group_id), now + min(delay, timeout))
        else:
            group.initial_delay_active = False
            self.deadlines.set(("join", group.group_id), now + timeout)
        group.transition(GroupState.PREPARING_REBALANCE, now)

    def _maybe_complete_join(self, group: ClassicGroup, now: int, out: Outcome) -> None:
        if group.state == GroupState.PREPARING_REBALANCE and not group.initial_delay_active and group.all_joined():
            self._complete_join(group, now, out)

    def _on_join_deadline(self, group: ClassicGroup, now: int, out: Outcome) -> None:
        if group.state != GroupState.PREPARING_REBALANCE:
            return
        if group.initial_delay_active and group.new_member_added and group.initial_remaining_ms > 0:
            delay = self.config.group_initial_rebalance_delay_ms
            group.new_member_added = False
            step = min(delay, group.initial_remaining_ms)
            group.initial_remaining_ms = max(group.initial_remaining_ms - delay, 0)
            self.deadlines.set(("join", group.group_id), now + step)
            return
        self._complete_join(group, now, out)

    def _complete_join(self, group: ClassicGroup, now: int, out: Outcome) -> None:
        self.deadlines.cancel(("join", group.group_id))
        group.initial_delay_active = False
        for m in list(group.members.values()):
            if m.join_token is None and m.group_instance_id is None:
                self._remove_member(group, m, "it did not rejoin before the rebalance timeout")
        group.generation += 1
        if not group.members:
            group.protocol = None
            group.leader = None
            group.transition(GroupState.EMPTY, now)
            out.records.append(self._group_record(group, now))
            return
        group.protocol = group.select_protocol()
        leader = group.members.get(group.leader or "")
        if leader is None or leader.join_token is None:
            # A leader that did not rejoin (a static member kept through the rebalance timeout)
            # would never send the assignment: a member that joined leads (Kafka's
            # maybeElectNewJoinedLeader).
            joined = [m.member_id for m in group.members.values() if m.join_token is not None]
            group.leader = joined[0] if joined else (group.leader if leader is not None else next(iter(group.members)))
        group.transition(GroupState.COMPLETING_REBALANCE, now)
        log.info("group %s: generation %d joined by %d members (leader %s, protocol %s); waiting for the assignment",
                 group.group_id, group.generation, len(group.members), group.leader, group.protocol)  # fmt: skip
        for m in group.members.values():
            if m.join_token is not None:
                out.replies[m.join_token] = self._join_answer(group, m)
                m.join_token = None
            self._touch(group, m, now)
        self.deadlines.set(("sync", group.group_id, group.generation), now + group.max_rebalance_timeout_ms())

    def _join_answer(self, group: ClassicGroup, member: Member) -> JoinResult:
        leader = member.member_id == group.leader
        return JoinResult(
            ErrorCode.NONE, group.generation, group.protocol_type, group.protocol, group.leader or "",
            member.member_id, self._member_list(group) if leader else (),
        )  # fmt: skip

    @staticmethod
    def _member_list(group: ClassicGroup) -> tuple[JoinedMember, ...]:
        protocol = group.protocol or ""
        return tuple(
            JoinedMember(m.member_id, m.group_instance_id, m.metadata(protocol)) for m in group.members.values()
        )

    def _remove_member(self, group: ClassicGroup, member: Member, reason: str) -> None:
        log.info("group %s: member %s removed (%s)", group.group_id, member.member_id, reason)
        del group.members[member.member_id]
        if (
            member.group_instance_id is not None
            and group.static_members.get(member.group_instance_id) == member.member_id
        ):
            del group.static_members[member.group_instance_id]
        self.deadlines.cancel(("session", group.group_id, member.member_id))
        if group.leader == member.member_id:
            group.leader = next(iter(group.members), None)

    def _remove_and_rebalance(self, group: ClassicGroup, member: Member, now: int, out: Outcome, reason: str) -> None:
        for t in (member.join_token, member.sync_token):
            if t is not None:
                out.replies[t] = (
                    JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member.member_id)
                    if t == member.join_token
                    else SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
                )
        self._remove_member(group, member, reason)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, now, out, f"member {member.member_id} removed: {reason}")
        self._maybe_complete_join(group, now, out)

    def _touch(self, group: ClassicGroup, member: Member, now: int) -> None:
        self.deadlines.set(("session", group.group_id, member.member_id), now + member.session_timeout_ms)

    def _drop_if_unused(self, group: ClassicGroup) -> None:
        if group.state == GroupState.EMPTY and not group.members and not self._has_offsets(group.group_id):
            if group.generation == 0 and not group.pending_members:
                self.groups.pop(group.group_id, None)

    # ================================================================== SyncGroup, Heartbeat, LeaveGroup

    def _check_member(
        self, group: ClassicGroup | None, member_id: str, instance: str | None
    ) -> tuple[Member | None, ErrorCode]:
        if group is None or group.state == GroupState.DEAD:
            return None, ErrorCode.UNKNOWN_MEMBER_ID if group is None else ErrorCode.COORDINATOR_NOT_AVAILABLE
        if instance is not None and group.static_members.get(instance, member_id) != member_id:
            return None, ErrorCode.FENCED_INSTANCE_ID
        member = group.members.get(member_id)
        if member is None:
            return None, ErrorCode.UNKNOWN_MEMBER_ID
        if instance is not None and member.group_instance_id != instance:
            return None, ErrorCode.FENCED_INSTANCE_ID
        return member, ErrorCode.NONE

    def sync(self, req: SyncRequest, token: Token, now_ms: int) -> Outcome:
        out = Outcome()
        group = self.groups.get(req.group_id)
        member, error = self._check_member(group, req.member_id, req.group_instance_id)
        if member is None or group is None:
            out.replies[token] = SyncResult(error)
            return out
        if req.generation != group.generation:
            out.replies[token] = SyncResult(ErrorCode.ILLEGAL_GENERATION)
            return out
        if (req.protocol_type is not None and req.protocol_type != group.protocol_type) or (
            req.protocol_name is not None and req.protocol_name != group.protocol
        ):
            out.replies[token] = SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
            return out
        if group.state == GroupState.PREPARING_REBALANCE:
            out.replies[token] = SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)
            return out
        self._touch(group, member, now_ms)
        if group.state == GroupState.STABLE:
            out.replies[token] = SyncResult(ErrorCode.NONE, group.protocol_type, group.protocol, member.assignment)
            return out
        # CompletingRebalance: wait for the leader's assignment.
        member.sync_token = token
        if member.member_id != group.leader:
            return out
        given = dict(req.assignments)
        for m in group.members.values():
            m.assignment = given.get(m.member_id, b"")
        generation = group.generation
        out.records.append(self._group_record(group, now_ms))
        group.transition(GroupState.STABLE, now_ms)
        log.info("group %s: generation %d stable with %d members", group.group_id, generation, len(group.members))
        self.deadlines.cancel(("sync", group.group_id, generation))
        waiting = {}
        for m in group.members.values():
            if m.sync_token is not None:
                waiting[m.sync_token] = m
                out.replies[m.sync_token] = SyncResult(
                    ErrorCode.NONE, group.protocol_type, group.protocol, m.assignment
                )
                m.sync_token = None

        def undo(code: ErrorCode) -> dict[Token, Any]:
            answers: dict[Token, Any] = {t: SyncResult(append_error(code)) for t in waiting}
            if group.state == GroupState.STABLE and group.generation == generation:
                for m in group.members.values():
                    m.assignment = b""
                extra = Outcome()
                self._prepare_rebalance(group, now_ms, extra, f"the assignment was not written ({code.name})")
                answers.update(extra.replies)
            return answers

        out.undo = undo
        return out

    def heartbeat(self, req: HeartbeatRequest, now_ms: int) -> ErrorCode:
        group = self.groups.get(req.group_id)
        if group is not None and group.state == GroupState.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        member, error = self._check_member(group, req.member_id, req.group_instance_id)
        if member is None or group is None:
            return error
        if req.generation != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
        self._touch(group, member, now_ms)
        if group.state == GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave(self, group_id: str, leaving: Iterable[LeavingMember], token: Token, now_ms: int) -> Outcome:
        out = Outcome()
        group = self.groups.get(group_id)
        if group is None or group.state == GroupState.DEAD:
            code = ErrorCode.UNKNOWN_MEMBER_ID if group is None else ErrorCode.COORDINATOR_NOT_AVAILABLE
            out.replies[token] = LeaveResult(code)
            return out
        answers: list[tuple[LeavingMember, ErrorCode]] = []
        for who in leaving:
            member_id = who.member_id
            if who.group_instance_id is not None:
                known = group.static_members.get(who.group_instance_id)
                if known is None:
                    answers.append((who, ErrorCode.UNKNOWN_MEMBER_ID))
                    continue
                if member_id and member_id != known:
                    answers.append((who, ErrorCode.FENCED_INSTANCE_ID))
                    continue
                member_id = known
            if member_id in group.pending_members:
                group.pending_members.discard(member_id)
                self.deadlines.cancel(("pending", group_id, member_id))
                self._maybe_complete_join(group, now_ms, out)
                answers.append((who, ErrorCode.NONE))
                continue
            member = group.members.get(member_id)
            if member is None:
                answers.append((who, ErrorCode.UNKNOWN_MEMBER_ID))
                continue
            self._remove_and_rebalance(group, member, now_ms, out, "it left the group")
            answers.append((who, ErrorCode.NONE))
        out.replies[token] = LeaveResult(ErrorCode.NONE, tuple(answers))
        return out

    # ================================================================== timers

    def next_deadline(self) -> int | None:
        return self.deadlines.next_deadline()

    def tick(self, now_ms: int) -> Outcome:
        """Act on every deadline due at `now_ms`."""
        out = Outcome()
        for key in self.deadlines.due(now_ms):
            kind, group_id = key[0], key[1]
            if kind in ("csession", "crevoke"):
                self._consumer_deadline(key, out)
                continue
            group = self.groups.get(group_id)
            if group is None:
                continue
            if kind == "session":
                member = group.members.get(key[2])
                if member is not None and member.join_token is None and member.sync_token is None:
                    self._remove_and_rebalance(
                        group, member, now_ms, out, f"no heartbeat for {member.session_timeout_ms} ms"
                    )
                elif member is not None:
                    self._touch(group, member, now_ms)  # a member waiting for an answer is alive
            elif kind == "pending":
                if key[2] in group.pending_members:
                    group.pending_members.discard(key[2])
                    self._maybe_complete_join(group, now_ms, out)
                    self._drop_if_unused(group)
            elif kind == "join":
                self._on_join_deadline(group, now_ms, out)
            elif kind == "sync":
                if group.state == GroupState.COMPLETING_REBALANCE and group.generation == key[2]:
                    # Members that did not sync in time leave; the rest rebalance again.
                    for m in list(group.members.values()):
                        if m.sync_token is None:
                            self._remove_member(group, m, f"no SyncGroup for generation {key[2]} in time")
                    self._prepare_rebalance(group, now_ms, out, "members did not sync in time")
                    self._maybe_complete_join(group, now_ms, out)
        return out

    # ================================================================== offsets

    def commit(self, req: CommitRequest, now_ms: int) -> tuple[Outcome, list[ErrorCode]]:
        """OffsetCommit: per partition an error; the records of the accepted ones."""
        out = Outcome()
        error = self._commit_error(req, now_ms)
        if error != _NONE:
            return out, [error] * len(req.partitions)
        group_id = req.group_id
        group = self.groups.get(group_id)
        created: ClassicGroup | None = None  # the group this commit creates (an unknown group id)
        if group is None and group_id not in self.consumer_groups:
            created = self.groups[group_id] = ClassicGroup(group_id, current_state_timestamp=now_ms)
        errors: list[ErrorCode] = []
        changes: list[_Change] = []
        expire = now_ms + req.retention_ms if req.retention_ms >= 0 else -1
        records = out.records
        for p in req.partitions:
            metadata = p.metadata or ""
            if self._metadata_too_large(metadata):
                errors.append(_OFFSET_METADATA_TOO_LARGE)
                continue
            value = OffsetValue(p.offset, p.leader_epoch, metadata, now_ms, expire, self._position)
            self._position += 1  # (`_next_position`, inline: once per committed partition)
            changes.append(self._write_offset(group_id, (p.topic, p.partition), value))
            records.append((OffsetKey(group_id, p.topic, p.partition), value))
            errors.append(_NONE)
        if records:
            writes = _CommitWrites(self, changes, group_id, created)
            out.undo = writes.undo
            out.written = writes.written
        elif created is not None:
            del self.groups[group_id]
        return out, errors

    def _metadata_too_large(self, metadata: str) -> bool:
        limit = self.config.offset_metadata_max_bytes  # offset.metadata.max.bytes
        # A string's UTF-8 bytes are at most 4 per character: within the limit without encoding
        # it when 4 x its length is (the empty metadata of most commits).
        return 4 * len(metadata) > limit and len(metadata.encode()) > limit

    def _next_position(self) -> int:
        position = self._position
        self._position += 1
        return position

    # ------------------------------------------------------------------ transactional offsets

    def txn_commit(self, req: TxnCommitRequest, now_ms: int) -> tuple[Outcome, list[ErrorCode]]:
        """TxnOffsetCommit: per partition an error; the accepted offsets become pending offsets
        of the producer's transaction, written as its transactional batch (`Outcome.producer`).
        The producer's epoch is checked where Kafka checks it: by the partition log's producer
        state when the batch is appended (INVALID_PRODUCER_EPOCH), not here."""
        out = Outcome()
        error = self._txn_commit_error(req, now_ms)
        if error != ErrorCode.NONE:
            return out, [error] * len(req.partitions)
        created = req.group_id not in self.groups and req.group_id not in self.consumer_groups
        if created:  # generation -1 for an unknown group: a simple group (Kafka's rule)
            self.groups[req.group_id] = ClassicGroup(req.group_id, current_state_timestamp=now_ms)
        pid = req.producer_id
        pending = self.pending_txn.setdefault(pid, {})
        writes = self._pending_writes.setdefault(pid, _OffsetWrites())
        errors: list[ErrorCode] = []
        changes: list[_Change] = []
        for p in req.partitions:
            metadata = p.metadata or ""
            if self._metadata_too_large(metadata):
                errors.append(ErrorCode.OFFSET_METADATA_TOO_LARGE)
                continue
            key = (req.group_id, (p.topic, p.partition))
            value = OffsetValue(p.offset, p.leader_epoch, metadata, now_ms, position=self._next_position())
            changes.append(writes.write(req.group_id, key[1], pending.get(key), value))
            pending[key] = value
            out.records.append((OffsetKey(req.group_id, p.topic, p.partition), value))
            errors.append(ErrorCode.NONE)
        if not out.records:
            if not pending and self.pending_txn.get(pid) is pending:
                del self.pending_txn[pid]
                self._pending_writes.pop(pid, None)
            if created:
                del self.groups[req.group_id]
            return out, errors
        out.producer = (pid, req.producer_epoch)

        def undo(_code: ErrorCode) -> dict[Token, Any]:
            self._settle_pending(pid, pending, changes, False)
            group = self.groups.get(req.group_id)
            if created and group is not None and not group.members and not self._has_offsets(req.group_id):
                del self.groups[req.group_id]
            return {}

        out.undo = undo
        out.written = lambda: self._settle_pending(pid, pending, changes, True)
        return out, errors

    def _settle_pending(self, pid: int, pending: PendingOffsets, changes: list[_Change], committed: bool) -> None:
        """A transaction's offset writes committed, or failed: its pending offsets hold what is
        left (`_OffsetWrites`' rule: an undo never puts back a value whose own write failed)."""
        writes = self._pending_writes.get(pid)
        if writes is None or self.pending_txn.get(pid) is not pending:
            return  # the transaction completed meanwhile
        for change in changes:
            holds = writes.settle(change, committed)
            if holds is None:
                continue
            (value,) = holds
            key = (change[0], change[1])
            if value is None:
                pending.pop(key, None)
            else:
                pending[key] = value
        if not pending and not writes.outstanding():
            del self.pending_txn[pid]  # nothing of this transaction left (nor to put back)
            del self._pending_writes[pid]

    def _txn_commit_error(self, req: TxnCommitRequest, now: int) -> ErrorCode:
        """Kafka's validateOffsetCommit with isTransactional: the group's state is not checked
        (no REBALANCE_IN_PROGRESS), and v0-2's requests (no member, generation -1) pass."""
        if not req.group_id:
            return ErrorCode.INVALID_GROUP_ID
        consumer_group = self.consumer_groups.get(req.group_id)
        if consumer_group is not None:
            code = self.check_consumer_member(consumer_group, req.member_id, req.generation, now)
            return ErrorCode.ILLEGAL_GENERATION if code == ErrorCode.STALE_MEMBER_EPOCH else code
        group = self.groups.get(req.group_id)
        if group is None:
            return ErrorCode.NONE if req.generation < 0 else ErrorCode.ILLEGAL_GENERATION
        if group.state == GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if req.generation < 0 and group.state == GroupState.EMPTY:
            return ErrorCode.NONE
        if req.generation >= 0 or req.member_id or req.group_instance_id is not None:
            member, error = self._check_member(group, req.member_id, req.group_instance_id)
            if member is None:
                return error
            if req.generation != group.generation:
                return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE

    def complete_transaction(self, producer_id: int, committed: bool) -> None:
        """The producer's transaction marker (COMMIT or ABORT) is in the partition, committed:
        on COMMIT each pending offset becomes the committed one unless the committed one's
        record is later in the log (a plain commit after it); on ABORT they are dropped. The
        same rule replays a marker (`replay_marker`)."""
        pending = self.pending_txn.pop(producer_id, None) or {}
        writes = self._pending_writes.pop(producer_id, None)
        if not committed:
            return
        for (group_id, tp), before in [] if writes is None else writes.bases():
            if before is not None and (group_id, tp) not in pending:
                # A tombstone being written removed it: should that fail, it is committed.
                self._offset_writes.rebase(group_id, tp, before)
        for (group_id, tp), value in pending.items():
            if self._offset_writes.rebase(group_id, tp, value):
                continue  # plain writes after it are outstanding: should they fail, it comes back
            mine = self.offsets.setdefault(group_id, {})
            existing = mine.get(tp)
            if existing is None or value.position > existing.position:
                mine[tp] = value
            if group_id not in self.groups and group_id not in self.consumer_groups:
                self.groups[group_id] = ClassicGroup(group_id, current_state_timestamp=value.commit_timestamp)

    def replay_marker(self, producer_id: int, committed: bool, *, offset: int = -1) -> None:
        """Apply a transaction marker read from the partition (in log order)."""
        if offset >= 0:
            self._position = max(self._position, offset + 1)
        self.complete_transaction(producer_id, committed)

    def has_pending(self, group_id: str, tp: TopicPartition) -> bool:
        """Whether an open transaction holds an offset of this partition for the group."""
        return any((group_id, tp) in pending for pending in self.pending_txn.values())

    def _pending_partitions(self, group_id: str) -> set[TopicPartition]:
        return {tp for pending in self.pending_txn.values() for (g, tp) in pending if g == group_id}

    def _has_offsets(self, group_id: str) -> bool:
        """Committed or pending offsets (a group with either is not dropped as unused)."""
        return group_id in self.offsets or bool(self._pending_partitions(group_id))

    def _drop_pending(self, key: tuple[str, TopicPartition]) -> _Dropped:
        """A tombstone of `key` being written: the pending offsets of the key go (Kafka's
        replay of a tombstone), each removal a write of its producer's `_OffsetWrites`."""
        dropped: _Dropped = []
        for producer_id, pending in self.pending_txn.items():
            writes = self._pending_writes.get(producer_id)
            if key in pending or (writes is not None and writes.has_outstanding(*key)):
                writes = self._pending_writes.setdefault(producer_id, _OffsetWrites())
                change = writes.write(key[0], key[1], pending.pop(key, None), None)
                dropped.append((producer_id, pending, change))
        return dropped

    def _commit_error(self, req: CommitRequest, now: int) -> ErrorCode:
        if not req.group_id:
            return ErrorCode.INVALID_GROUP_ID
        consumer_group = self.consumer_groups.get(req.group_id)
        if consumer_group is not None:
            return self.check_consumer_member(consumer_group, req.member_id, req.generation, now)
        group = self.groups.get(req.group_id)
        if group is None:
            if req.generation < 0:
                return ErrorCode.NONE
            return ErrorCode.GROUP_ID_NOT_FOUND if req.version >= 9 else ErrorCode.ILLEGAL_GENERATION
        if req.generation < 0 and group.state == GroupState.EMPTY:
            return ErrorCode.NONE
        if group.state == GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        member, error = self._check_member(group, req.member_id, req.group_instance_id)
        if member is None:
            return error
        if req.generation != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
        if group.state == GroupState.COMPLETING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        self._touch(group, member, now)
        return ErrorCode.NONE

    def fetch_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None, *, require_stable: bool = False
    ) -> list[CommittedOffset]:
        """OffsetFetch: the committed offsets asked (None: all of the group's); pending
        transactional offsets are never shown, and with `require_stable` (v7+) a partition
        that has one answers UNSTABLE_OFFSET_COMMIT."""
        mine = self.offsets.get(group_id, {})
        unstable = self._pending_partitions(group_id) if require_stable else set()
        asked = sorted(mine) if partitions is None else partitions
        out = []
        for t, p in asked:
            v = mine.get((t, p))
            if (t, p) in unstable:
                out.append(CommittedOffset(t, p, error=ErrorCode.UNSTABLE_OFFSET_COMMIT))
            elif v is None:
                out.append(CommittedOffset(t, p))
            else:
                out.append(CommittedOffset(t, p, v.offset, v.leader_epoch, v.metadata))
        return out

    def delete_offsets(
        self, group_id: str, partitions: list[TopicPartition]
    ) -> tuple[ErrorCode, list[ErrorCode], Outcome]:
        """OffsetDelete: a group-level error, then one per partition."""
        out = Outcome()
        group = self.groups.get(group_id)
        if group is None or group.state == GroupState.DEAD:
            return ErrorCode.GROUP_ID_NOT_FOUND, [], out
        subscribed = group.subscribed_topics() if group.members else set()
        mine = self.offsets.get(group_id, {})
        written = self._offset_writes.touched.get(group_id, set())
        errors = []
        changes: list[_Change] = []
        for t, p in partitions:
            if subscribed is None or t in subscribed:
                errors.append(ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC)
                continue
            errors.append(ErrorCode.NONE)
            # An offset changed since loading gets a tombstone even when the memory has none:
            # an undone write that timed out may still be in the log.
            if (t, p) in mine or (t, p) in written or self.has_pending(group_id, (t, p)):
                changes.append(self._write_offset(group_id, (t, p), None))
                out.records.append((OffsetKey(group_id, t, p), None))
        if changes:
            self._undo_deletes(out, changes, None)
        return ErrorCode.NONE, errors, out

    def delete_group(self, group_id: str, now_ms: int) -> tuple[ErrorCode, Outcome]:
        """DeleteGroups, one group: only a group without members."""
        out = Outcome()
        consumer_group = self.consumer_groups.get(group_id)
        if consumer_group is not None:
            if consumer_group.members:
                return ErrorCode.NON_EMPTY_GROUP, out
            del self.consumer_groups[group_id]
            changes = []
            for t, p in sorted(self._deletable_partitions(group_id)):
                changes.append(self._write_offset(group_id, (t, p), None))
                out.records.append((OffsetKey(group_id, t, p), None))
            self._undo_deletes(out, changes, None)  # the offsets come back if the append fails
            out.records.extend(changed_records(consumer_group, deleted=True))
            return ErrorCode.NONE, out
        group = self.groups.get(group_id)
        if group is None or group.state == GroupState.DEAD:
            return ErrorCode.GROUP_ID_NOT_FOUND, out
        if group.members or group.state != GroupState.EMPTY:
            return ErrorCode.NON_EMPTY_GROUP, out
        self._undo_deletes(out, self._drop_group(group, out), group)
        return ErrorCode.NONE, out

    def _drop_group(self, group: ClassicGroup, out: Outcome) -> list[_Change]:
        """Tombstones for an Empty group and its offsets; the offset changes made.

        Every offset changed since loading gets a tombstone too: the memory may lack one the
        log has (a delete still being written, a commit undone after its append timed out)."""
        group_id = group.group_id
        changes = []
        for t, p in sorted(self._deletable_partitions(group_id)):
            changes.append(self._write_offset(group_id, (t, p), None))
            out.records.append((OffsetKey(group_id, t, p), None))
        out.records.append((GroupKey(group_id), None))
        group.state = GroupState.DEAD
        del self.groups[group_id]
        return changes

    def _deletable_partitions(self, group_id: str) -> set[TopicPartition]:
        """The partitions a deletion of the group writes tombstones for: committed offsets,
        those changed since loading, and those of open transactions."""
        return (
            set(self.offsets.get(group_id, {}))
            | self._offset_writes.touched.get(group_id, set())
            | self._pending_partitions(group_id)
        )

    def _undo_deletes(self, out: Outcome, changes: list[_Change], group: ClassicGroup | None) -> None:
        """`out` deleted offsets (`changes`) and maybe the Empty `group`: if its append fails,
        the offsets come back (unless written again since) and so does the group (unless one
        of that name was created since)."""
        previous, previous_written = out.undo, out.written

        def undo(code: ErrorCode) -> dict[Token, Any]:
            answers = previous(code) if previous is not None else {}
            if group is not None and group.group_id not in self.groups:
                group.state = GroupState.EMPTY
                self.groups[group.group_id] = group
            self._settle_offsets(changes, False)
            return answers

        def written() -> None:
            if previous_written is not None:
                previous_written()
            self._settle_offsets(changes, True)

        out.undo = undo
        out.written = written

    def _write_offset(self, group_id: str, tp: TopicPartition, value: OffsetValue | None) -> _Change:
        """Set (or, with None, remove) an offset in memory, as a write not yet committed."""
        mine = self.offsets.get(group_id)
        if mine is None:
            mine = self.offsets[group_id] = {}
        # One tuple object for both lookups: mypyc keeps a `tuple[str, int]` unboxed and builds
        # a new tuple each time it is used as a dict key.
        key: Any = tp
        before = mine.get(key)
        if value is None:
            mine.pop(key, None)
        else:
            mine[key] = value
        if not mine:
            del self.offsets[group_id]
        change = self._offset_writes.write(group_id, tp, before, value)
        if value is None:
            dropped = self._drop_pending((group_id, tp))
            if dropped:
                self._dropped_pending[change] = dropped
        return change

    def _settle_offsets(self, changes: list[_Change], committed: bool) -> None:
        """The appends of `changes` committed, or failed: the memory holds what is left."""
        dropped_pending = self._dropped_pending
        for change in changes:
            if dropped_pending:  # (empty but for tombstones over open transactions' offsets)
                for producer_id, pending, removal in dropped_pending.pop(change, []):
                    self._settle_pending(producer_id, pending, [removal], committed)
            holds = self._offset_writes.settle(change, committed)
            if holds is None:
                continue
            (held,) = holds
            group_id, tp = change[0], change[1]
            if held is None:
                mine = self.offsets.get(group_id, {})
                mine.pop(tp, None)
                if not mine:
                    self.offsets.pop(group_id, None)
            else:
                self.offsets.setdefault(group_id, {})[tp] = held

    def expire_offsets(self, now_ms: int) -> Outcome:
        """offsets.retention.minutes: the offsets of topics no member subscribes to, older than
        the retention (for a group with no members, counted from when it became Empty; else
        from the commit), go; so does an Empty group left with no offsets."""
        out = Outcome()
        retention = self.config.offsets_retention_ms
        for group_id in list(self.consumer_groups):
            consumer_group = self.consumer_groups[group_id]
            subscribed_now = consumer_group.subscribed_topics()
            gone = [
                tp
                for tp, v in self.offsets.get(group_id, {}).items()
                if tp[0] not in subscribed_now
                and not self.has_pending(group_id, tp)
                and (
                    (v.expire_timestamp >= 0 and now_ms >= v.expire_timestamp)
                    or (v.expire_timestamp < 0 and now_ms - v.commit_timestamp >= retention)
                )
            ]
            if gone:
                changes = []
                for tp in gone:
                    changes.append(self._write_offset(group_id, tp, None))
                    out.records.append((OffsetKey(group_id, tp[0], tp[1]), None))
                self._undo_deletes(out, changes, None)
        for group_id in list(self.groups):
            group = self.groups[group_id]
            mine = self.offsets.get(group_id, {})
            if group.state == GroupState.EMPTY and group.protocol_type:
                subscribed: set[str] | None = set()
                base: int | None = group.current_state_timestamp
            elif group.state == GroupState.EMPTY:
                subscribed, base = set(), None
            elif group.state == GroupState.STABLE and group.protocol_type == "consumer":
                subscribed, base = group.subscribed_topics(), None
            else:
                continue
            if subscribed is None:
                continue
            expired = []
            for tp, v in mine.items():
                if tp[0] in subscribed or self.has_pending(group_id, tp):
                    continue  # (an offset with a transaction's pending one is not expired yet)
                start = v.commit_timestamp if base is None else base
                if (v.expire_timestamp >= 0 and now_ms >= v.expire_timestamp) or (
                    v.expire_timestamp < 0 and now_ms - start >= retention
                ):
                    expired.append(tp)
            if not expired:
                continue
            if (
                len(expired) == len(mine)
                and group.state == GroupState.EMPTY
                and not group.members
                and not self._pending_partitions(group_id)  # not while a transaction is open
            ):
                self._undo_deletes(out, self._drop_group(group, out), group)  # nothing left: the group goes too
                continue
            changes = []
            for tp in expired:
                changes.append(self._write_offset(group_id, tp, None))
                out.records.append((OffsetKey(group_id, tp[0], tp[1]), None))
            self._undo_deletes(out, changes, None)
        return out

    # ================================================================== describing

    def list_groups(self, states: set[str] | None) -> list[GroupListing]:
        wanted = {s.lower() for s in states} if states else None
        classic = [
            GroupListing(g.group_id, g.protocol_type or "", g.state.value)
            for g in self.groups.values()
            if wanted is None or g.state.value.lower() in wanted
        ]
        consumer = [
            GroupListing(g.group_id, "consumer", g.state(), "consumer")
            for g in self.consumer_groups.values()
            if wanted is None or g.state().lower() in wanted
        ]
        return classic + consumer

    def describe(self, group_id: str) -> GroupDescription:
        if group_id in self.consumer_groups:
            return GroupDescription(group_id, ErrorCode.GROUP_ID_NOT_FOUND, GroupState.DEAD.value, "", "")
        group = self.groups.get(group_id)
        if group is None:
            return GroupDescription(group_id, ErrorCode.NONE, GroupState.DEAD.value, "", "")
        stable = group.state == GroupState.STABLE
        members = tuple(
            DescribedMember(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.metadata(group.protocol or "") if stable else b"",
                m.assignment if stable else b"",
            )  # fmt: skip
            for m in group.members.values()
        )
        return GroupDescription(
            group_id, ErrorCode.NONE, group.state.value, group.protocol_type or "",
            (group.protocol or "") if stable else "", members,
        )  # fmt: skip

    # ================================================================== records

    def _group_record(self, group: ClassicGroup, now: int) -> Record:
        protocol = group.protocol or ""
        members = tuple(
            MemberValue(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout_ms,
                m.session_timeout_ms,
                m.metadata(protocol),
                m.assignment,
            )  # fmt: skip
            for m in group.members.values()
        )
        value = GroupValue(group.protocol_type or "", group.generation, group.protocol, group.leader, now, members)
        return (GroupKey(group.group_id), value)

    # ================================================================== KIP-848 consumer groups

    def consumer_heartbeat(
        self,
        req: ConsumerHeartbeatRequest,
        topic: Callable[[str], tuple[UUID, int] | None],
        now_ms: int,
        topic_names: Callable[[], Iterable[str]] = tuple,
    ) -> tuple[ConsumerHeartbeatResult, Outcome]:
        """ConsumerGroupHeartbeat: join (epoch 0), leave (-1, -2), or a member's heartbeat;
        `topic` resolves a topic name to its id and partition count (None: no such topic),
        `topic_names` lists every topic (what subscription regexes match). The answer, and the
        records of what changed (to be committed before it is sent)."""
        was_classic = req.group_id in self.groups
        result = self._consumer_heartbeat(req, topic, now_ms, topic_names)
        cg = self.consumer_groups.get(req.group_id)
        if cg is not None:
            cg.touch(req.member_id)
            if result.member_id:
                cg.touch(result.member_id)
        out = Outcome()
        if was_classic and req.group_id not in self.groups:
            out.records.append((GroupKey(req.group_id), None))  # the empty classic group became this one
        group = self.consumer_groups.get(req.group_id)
        if group is not None:
            before = dict(group.persisted)
            out.records.extend(changed_records(group))
            if out.records:
                out.undo = self._restore_persisted(group, before)
        return result, out

    @staticmethod
    def _restore_persisted(group: ConsumerGroup, before: dict[Any, Any]) -> Callable[[ErrorCode], dict[Token, Any]]:
        def undo(_code: ErrorCode) -> dict[Token, Any]:
            group.persisted = before  # not written: the next change writes it again
            group.dirty = None  # compare every member then
            return {}

        return undo

    def _consumer_heartbeat(
        self,
        req: ConsumerHeartbeatRequest,
        topic: Callable[[str], tuple[UUID, int] | None],
        now_ms: int,
        topic_names: Callable[[], Iterable[str]],
    ) -> ConsumerHeartbeatResult:
        c = self.config
        if not req.group_id:
            return ConsumerHeartbeatResult(ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
        if req.subscribed_regex and req.member_epoch >= 0:
            try:
                re.compile(req.subscribed_regex)
            except re.error as exc:
                return ConsumerHeartbeatResult(
                    ErrorCode.INVALID_REGULAR_EXPRESSION,
                    f"SubscribedTopicRegex `{req.subscribed_regex}` is not a valid regular expression: {exc}.",
                )
        classic = self.groups.get(req.group_id)
        if classic is not None:
            if classic.members or classic.state not in (GroupState.EMPTY, GroupState.DEAD):
                return ConsumerHeartbeatResult(
                    ErrorCode.GROUP_ID_NOT_FOUND, f"Group {req.group_id} is not a consumer group."
                )
            del self.groups[req.group_id]  # an empty classic group becomes a consumer group; its offsets stay
        if req.server_assignor is not None and req.server_assignor not in c.consumer_assignors:
            return ConsumerHeartbeatResult(
                ErrorCode.UNSUPPORTED_ASSIGNOR, f"Assignor {req.server_assignor} is not supported."
            )
        group = self.consumer_groups.get(req.group_id)
        if req.member_epoch in (-1, -2):
            member = None if group is None else group.members.get(req.member_id)
            if group is not None and member is not None:
                self._remove_consumer_member(group, member)
            return ConsumerHeartbeatResult(ErrorCode.NONE, None, req.member_id, req.member_epoch)
        if req.member_epoch == 0:
            if req.subscribed is None and req.subscribed_regex is None:
                return ConsumerHeartbeatResult(
                    ErrorCode.INVALID_REQUEST,
                    "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.",
                )
            if group is None:
                group = self.consumer_groups[req.group_id] = ConsumerGroup(req.group_id)
            member_id = req.member_id or self.new_id(req.client_id)
            old = group.members.get(member_id)
            if old is not None:
                self._remove_consumer_member(group, old)  # a member joining again starts afresh
            if req.instance_id is not None:
                holder = next((m for m in group.members.values() if m.instance_id == req.instance_id), None)
                if holder is not None:
                    return ConsumerHeartbeatResult(
                        ErrorCode.UNRELEASED_INSTANCE_ID, f"Static member {req.instance_id} is still in the group."
                    )
            member = ConsumerMember(
                member_id, req.instance_id, req.rack_id, req.client_id, req.client_host, req.rebalance_timeout_ms,
                frozenset(req.subscribed or ()), req.server_assignor, req.subscribed_regex or None,
            )  # fmt: skip
            group.members[member_id] = member
            changed = True
        else:
            member = None if group is None else group.members.get(req.member_id)
            if group is None or member is None:
                return ConsumerHeartbeatResult(
                    ErrorCode.UNKNOWN_MEMBER_ID, f"Member {req.member_id} is not in the group."
                )
            owned_now = set(req.owned) if req.owned is not None else None
            if req.member_epoch > member.epoch or (
                req.member_epoch < member.epoch
                and not (
                    req.member_epoch == member.previous_epoch and owned_now is not None and owned_now <= member.assigned
                )
            ):
                return ConsumerHeartbeatResult(
                    ErrorCode.FENCED_MEMBER_EPOCH, f"The member epoch {req.member_epoch} is not {member.epoch}."
                )
            changed = False
            if req.subscribed is not None and frozenset(req.subscribed) != member.subscribed:
                member.subscribed = frozenset(req.subscribed)
                changed = True
            if req.subscribed_regex is not None and (req.subscribed_regex or None) != member.regex:
                member.regex, member.regex_topics = req.subscribed_regex or None, None
                changed = True
            if req.server_assignor is not None and req.server_assignor != member.server_assignor:
                member.server_assignor = req.server_assignor
                changed = True
            member.rebalance_timeout_ms = req.rebalance_timeout_ms or member.rebalance_timeout_ms
        self.deadlines.set(("csession", group.group_id, member.member_id), now_ms + c.consumer_session_timeout_ms)
        if self._resolve_regexes(group, topic_names, now_ms):
            changed = True
        if self._refresh_topics(group, topic) or changed:
            group.group_epoch += 1  # one bump for whatever changed in this heartbeat
        if group.assignment_epoch < group.group_epoch:
            self._assign(group)
        owned = None if req.owned is None else set(req.owned)
        was_revoking = member.state == MemberState.UNREVOKED_PARTITIONS
        reconcile(group, member, owned)
        if member.state == MemberState.UNREVOKED_PARTITIONS and not was_revoking:
            self.deadlines.set(
                ("crevoke", group.group_id, member.member_id, member.epoch), now_ms + member.rebalance_timeout_ms
            )
        return ConsumerHeartbeatResult(
            ErrorCode.NONE, None, member.member_id, member.epoch, c.consumer_heartbeat_interval_ms,
            tuple(sorted(member.assigned)),
        )  # fmt: skip

    @staticmethod
    def _resolve_regexes(group: ConsumerGroup, topic_names: Callable[[], Iterable[str]], now_ms: int) -> bool:
        """Match the members' subscription regexes against every topic (the whole name, as
        Kafka's coordinator does): a regex not resolved yet at once, the others again every
        REGEX_REFRESH_INTERVAL_MS, so that topics created or deleted since join or leave the
        subscription. Whether a member's matches changed (a first resolution after a load, which
        the persisted subscription already covers, is no change)."""
        members = [m for m in group.members.values() if m.regex]
        if not members:
            return False
        due = now_ms >= group.regex_resolved_ms + REGEX_REFRESH_INTERVAL_MS
        if not due and all(m.regex_topics is not None for m in members):
            return False
        names = list(topic_names())
        matched: dict[str, frozenset[str]] = {}
        changed = False
        for m in members:
            assert m.regex is not None
            if m.regex not in matched:
                try:
                    pattern = re.compile(m.regex)
                except re.error:  # checked when it came; one replayed from an older log is ignored
                    pattern = None
                matched[m.regex] = frozenset(n for n in names if pattern is not None and pattern.fullmatch(n))
            if m.regex_topics is not None and m.regex_topics != matched[m.regex]:
                changed = True
            m.regex_topics = matched[m.regex]
        group.regex_resolved_ms = now_ms
        return changed

    def _refresh_topics(self, group: ConsumerGroup, topic: Callable[[str], tuple[UUID, int] | None]) -> bool:
        """Whether a subscribed topic was created, deleted or grown (that moves the group epoch)."""
        now: dict[str, tuple[UUID, int]] = {}
        for name in sorted(group.subscribed_topics()):
            found = topic(name)
            if found is not None:
                now[name] = found
        if now == group.topics:
            return False
        group.topics = now
        return True

    def _assign(self, group: ConsumerGroup) -> None:
        wanted = [m.server_assignor for m in group.members.values() if m.server_assignor]
        name = max(sorted(set(wanted)), key=wanted.count) if wanted else self.config.consumer_assignors[0]
        subscriptions = {m.member_id: m.topics() for m in group.members.values()}
        current = {m.member_id: set(m.assigned) for m in group.members.values()}
        target = assign(name, subscriptions, group.topics, current)
        for member_id, tps in target.items():
            if group.target.get(member_id) != tps:
                group.touch(member_id)  # its target assignment record changes
        group.target = target
        group.assignor = name
        group.assignment_epoch = group.group_epoch

    def _remove_consumer_member(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        group.touch(member.member_id)  # its records become tombstones
        del group.members[member.member_id]
        group.target.pop(member.member_id, None)
        self.deadlines.cancel(("csession", group.group_id, member.member_id))
        group.group_epoch += 1

    def _consumer_deadline(self, key: DeadlineKey, out: Outcome) -> None:
        group = self.consumer_groups.get(key[1])
        member = None if group is None else group.members.get(key[2])
        if group is None or member is None:
            return
        if key[0] == "csession" or (member.state == MemberState.UNREVOKED_PARTITIONS and member.epoch == key[3]):
            self._remove_consumer_member(group, member)  # session expired, or revocation took too long: fenced
            out.records.extend(changed_records(group))

    def check_consumer_member(self, group: ConsumerGroup, member_id: str, epoch: int, now_ms: int) -> ErrorCode:
        """May this member (at this epoch) commit offsets of `group`? (Admin commits, with no
        member and a negative epoch, only to a group without members.)"""
        if not member_id and epoch < 0:
            return ErrorCode.NONE if not group.members else ErrorCode.UNKNOWN_MEMBER_ID
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if epoch != member.epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    def check_fetch_member(self, group_id: str, member_id: str | None, epoch: int) -> ErrorCode:
        """OffsetFetch v9+ from a KIP-848 member: it must be a member at its epoch."""
        group = self.consumer_groups.get(group_id)
        if member_id is None or group is None:
            return ErrorCode.NONE
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return ErrorCode.NONE if epoch == member.epoch else ErrorCode.STALE_MEMBER_EPOCH

    def describe_consumer_group(self, group_id: str) -> ConsumerGroupDescription:
        group = self.consumer_groups.get(group_id)
        if group is None:
            code = ErrorCode.GROUP_ID_NOT_FOUND
            return ConsumerGroupDescription(group_id, code)
        members = tuple(
            ConsumerMemberDescription(
                m.member_id,
                m.instance_id,
                m.rack_id,
                m.epoch,
                m.client_id,
                m.client_host,
                tuple(sorted(m.subscribed)),
                tuple(sorted(m.assigned)),
                tuple(sorted(group.target.get(m.member_id, ()))),
                m.regex,
            )  # fmt: skip
            for m in group.members.values()
        )
        return ConsumerGroupDescription(
            group_id, ErrorCode.NONE, group.state(), group.group_epoch, group.assignment_epoch, group.assignor, members
        )


class _CommitWrites:
    """What an OffsetCommit's append settles: its offset writes (`changes`, in write order),
    and the classic group it created for an unknown group id (`created`, else None), which a
    refused append removes again if nothing else came to hold it. Its bound `written` and
    `undo` are the commit's `Outcome` callbacks: an object, not closures (a nested function
    and the environment it shares with its sibling refer to each other, a reference cycle per
    commit for the garbage collector)."""

    __slots__ = ("changes", "created", "group_id", "shard")

    def __init__(self, shard: GroupShard, changes: list[_Change], group_id: str, created: ClassicGroup | None) -> None:
        self.shard = shard
        self.changes = changes
        self.group_id = group_id
        self.created = created

    def written(self) -> None:
        self.shard._settle_offsets(self.changes, True)

    def undo(self, code: ErrorCode) -> dict[Token, Any]:
        shard = self.shard
        shard._settle_offsets(self.changes, False)
        group = self.created
        if group is not None and self.group_id not in shard.offsets:
            if shard.groups.get(self.group_id) is group and not group.members:
                del shard.groups[self.group_id]
        return {}


class _OffsetWrites:
    """The offset writes of a shard not yet known committed, per (group, topic, partition),
    in write order over the value before the first of them: what the memory must hold as
    each settles (committed or failed), so that the undo of a failed write never puts back
    a value over a later write, nor a value whose own write failed.

    Settling happens in write order (`Outcome.written` / `undo`). `touched` keeps, per group,
    every partition written since loading: the memory may lack an offset the log has (a
    write that timed out was undone but may still commit), so deleting the group's offsets
    writes a tombstone for each of those too."""

    def __init__(self) -> None:
        # Keyed by (group, topic, partition), flat: one tuple to hash and compare per lookup.
        self._pending: dict[tuple[str, str, int], tuple[OffsetValue | None, list[tuple[int, OffsetValue | None]]]]
        self._pending = {}
        self._count = 0
        self.touched: dict[str, set[TopicPartition]] = {}

    def write(
        self, group_id: str, tp: TopicPartition, before: OffsetValue | None, value: OffsetValue | None
    ) -> _Change:
        self._count += 1
        number = self._count
        fresh: list[tuple[int, OffsetValue | None]] = []
        _base, writes = self._pending.setdefault((group_id, tp[0], tp[1]), (before, fresh))
        writes.append((number, value))
        touched = self.touched.get(group_id)
        if touched is None:
            touched = self.touched[group_id] = set()
        touched.add(tp)
        return (group_id, tp, number)

    def rebase(self, group_id: str, tp: TopicPartition, value: OffsetValue) -> bool:
        """A committed transaction's offset for a key with writes outstanding (all of them
        later in the log than its record): it becomes what the memory holds should they all
        fail, unless that is later still. False when the key has no write outstanding."""
        key = (group_id, tp[0], tp[1])
        entry = self._pending.get(key)
        if entry is None:
            return False
        base, writes = entry
        if base is None or value.position > base.position:
            self._pending[key] = (value, writes)
        return True

    def bases(self) -> list[tuple[tuple[str, TopicPartition], OffsetValue | None]]:
        """Per key with writes outstanding, the value they were written over."""
        return [((group_id, (topic, partition)), base)
                for (group_id, topic, partition), (base, _writes) in self._pending.items()]  # fmt: skip

    def has_outstanding(self, group_id: str, tp: TopicPartition) -> bool:
        return (group_id, tp[0], tp[1]) in self._pending

    def outstanding(self) -> bool:
        """Whether a write has not settled yet."""
        return bool(self._pending)

    def settle(self, change: _Change, committed: bool) -> tuple[OffsetValue | None] | None:
        """Forget a write that committed or failed; `(value,)` when the memory must now hold
        `value` (None: no offset), None when it holds the right one already."""
        group_id, tp, number = change
        key = (group_id, tp[0], tp[1])
        entry = self._pending.pop(key, None)  # (put back below while writes of the key remain)
        if entry is None:
            return None
        base, writes = entry
        if writes and writes[0][0] == number:  # the usual case: writes settle in write order
            at = 0
        else:
            found = [i for i, (n, _) in enumerate(writes) if n == number]
            if not found:
                self._pending[key] = entry
                return None
            at = found[0]
        _, value = writes.pop(at)
        last = at == len(writes)  # it was the latest write of the key
        if committed:
            base = value  # (writes settle in order: everything before it is settled)
        if writes:
            self._pending[key] = (base, writes)
        if committed or not last:
            return None
        return (writes[-1][1] if writes else base,)
