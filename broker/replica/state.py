"""`PartitionState`: the replication rules of one hosted partition replica, sans IO.

Deterministic: no clock, socket, file or task. The replica manager (IO driver) passes the
time in milliseconds and the partition's log (`LogView`), carries out what the answers say
(append, truncate, send AlterPartition, release acks=all waiters) and reports back. The
rules are Kafka's (``Partition``, ``Replica``, ``AbstractFetcherThread``):

Leader side
- The high watermark (HW) is the smallest log end offset (LEO) among the leader and every
  follower that holds it back: members of the *maximal* ISR (KIP-497: the committed ISR
  plus a replica whose addition is in flight; a removal in flight still counts the
  replica) and followers that are caught up and ISR-eligible but not yet in the ISR.
  It never decreases, never passes the leader's LEO, and does not move at all while the
  committed ISR is smaller than the effective ``min.insync.replicas`` (Kafka 3.7+,
  ``isUnderMinIsr``). A new leader counts every follower's LEO as unknown until that
  follower fetches in the new epoch.
- A follower fetch is validated by its ``last_fetched_epoch`` against the leader's epoch
  cache (KIP-320/KIP-595 style): a mismatch answers the diverging epoch and does not count
  the fetch; a fetch position beyond what the cache can vouch for is OFFSET_OUT_OF_RANGE.
- A follower is caught up when its fetch offset reaches the leader LEO, or reaches the LEO
  the leader had at that follower's previous fetch (then it was caught up as of that
  previous fetch): ``last_caught_up_ms``. The fetches of a KIP-227 session that skip a
  partition (nothing changed for it) are not reported one by one: the partition keeps the
  session's clock (`FetchClock`), and what those fetches would have recorded (each the
  same position at the same leader LEO) is applied from it when the partition is next
  looked at (its next recorded fetch, a leader append, a view): O(1), not O(fetches).
  A follower joins the ISR (AlterPartition) once its LEO is at least the HW *and* the start
  offset of the leader's epoch; it leaves once it has not been caught up for
  ``replica.lag.time.max.ms``. One ISR change is in flight at a time.
- acks=-1 is refused with NOT_ENOUGH_REPLICAS when the committed ISR is smaller than the
  effective min ISR; a waiting acks=-1 write completes when the HW passes it, with
  NOT_ENOUGH_REPLICAS_AFTER_APPEND if the maximal ISR has meanwhile shrunk below min ISR.

Follower side
- Fetches from the log end with the log's latest epoch; a DivergingEpoch answer truncates
  (KIP-279), possibly in several rounds; the HW is ``min(leader HW, own LEO)``.

Not a rule of Kafka's partition replication, and not applied here: Raft's "the HW only
advances once the leader has an entry of its own epoch". Kafka does not need it: the
controller only elects ISR members, and a replica joins the ISR only past the start of the
leader's epoch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Final, Protocol

from mypy_extensions import mypyc_attr

from broker.log.epoch_cache import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
from quorum.frozen_init import fast_frozen_init
from quorum.kafka_errors import ErrorCode

# ErrorCode.NONE loaded once: in compiled code `ErrorCode.X` is a lookup through
# EnumType.__getattr__ (~900 instructions), and the data path asks it per partition.
_NONE: Final = ErrorCode.NONE

UNKNOWN_OFFSET = -1
"""A follower's LEO the leader has not learnt in its current leadership."""
RECOVERED = 0
RECOVERING = 1
"""KIP-704 leader recovery states (``LeaderRecoveryState``)."""
DEFAULT_REPLICA_LAG_TIME_MAX_MS = 30_000


class LogView(Protocol):
    """What the replication rules read from a partition's log."""

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    def latest_epoch(self) -> int | None: ...

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """Kafka's ``LeaderEpochFileCache.endOffsetFor`` (see `broker.log.epoch_cache`)."""
        ...


class LeaderLog(LogView, Protocol):
    """A log a leader writes to: it also records where each leader epoch starts."""

    def assign_epoch_start_offset(self, epoch: int, start_offset: int) -> None:
        """Add ``(epoch, start_offset)`` to the epoch cache if ``epoch`` is newer than its latest
        (Kafka's ``maybeAssignEpochStartOffset``); persisted like the rest of the cache."""
        ...


class FetchClock(Protocol):
    """When a follower last fetched a partition without anything to record for it (the
    latest fetch of its session, which skipped the partition), epoch ms; -1 for never."""

    @property
    def last_fetch_ms(self) -> int: ...


class Role(Enum):
    NONE = "none"
    LEADER = "leader"
    FOLLOWER = "follower"


@dataclass(frozen=True, slots=True)
class FollowerView:
    """What a leader knows of one follower (DescribeQuorum/REST-style views)."""

    replica_id: int
    log_start_offset: int
    log_end_offset: int
    """UNKNOWN_OFFSET (-1) until the follower fetches in the current leadership."""
    last_caught_up_ms: int
    """-1 if never caught up in this leadership."""
    last_fetch_ms: int
    broker_epoch: int


@dataclass(frozen=True, slots=True, init=False)
class FollowerFetchResult:
    """The leader's verdict on one partition of a follower's Fetch."""

    error: ErrorCode
    diverging_epoch: tuple[int, int] | None = None
    """(epoch, end_offset) to answer instead of records (error NONE); the fetch did not count."""
    high_watermark_changed: bool = False
    isr_expand_wanted: bool = False
    """This follower may join the ISR now: ask `proposed_isr` and send AlterPartition."""

    # Compiled with the module (the dataclass decorator's __init__ would run as Python there);
    # uncompiled, fast_frozen_init replaces it.
    def __init__(
        self,
        error: ErrorCode,
        diverging_epoch: tuple[int, int] | None = None,
        high_watermark_changed: bool = False,
        isr_expand_wanted: bool = False,
    ) -> None:
        object.__setattr__(self, "error", error)
        object.__setattr__(self, "diverging_epoch", diverging_epoch)
        object.__setattr__(self, "high_watermark_changed", high_watermark_changed)
        object.__setattr__(self, "isr_expand_wanted", isr_expand_wanted)


fast_frozen_init(FollowerFetchResult)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class Truncation:
    """Where a follower truncates after a DivergingEpoch answer."""

    offset: int
    """Drop every offset >= this one (no-op on the records when >= LEO; still trim the epoch cache)."""
    completed: bool
    """False: the follower's epoch differs from the leader's answer: fetch again (another round)."""
    below_high_watermark: int
    """How many offsets below the follower's HW this drops (> 0 only after an unclean election:
    log it as data loss)."""


@dataclass(frozen=True, slots=True, init=False)
class LeaderAnswer:
    """One partition of a leader's Fetch answer, as a follower's rules read it."""

    error: ErrorCode
    high_watermark: int = -1
    log_start_offset: int = -1
    diverging_epoch: tuple[int, int] | None = None
    """(epoch, end_offset) of a DivergingEpoch answer (error NONE)."""
    first_batch: tuple[int, int] | None = None
    """(base offset, last offset) of the first batch of the records; None when there are none."""

    # Compiled with the module (the dataclass decorator's __init__ would run as Python there);
    # uncompiled, fast_frozen_init replaces it.
    def __init__(
        self,
        error: ErrorCode,
        high_watermark: int = -1,
        log_start_offset: int = -1,
        diverging_epoch: tuple[int, int] | None = None,
        first_batch: tuple[int, int] | None = None,
    ) -> None:
        object.__setattr__(self, "error", error)
        object.__setattr__(self, "high_watermark", high_watermark)
        object.__setattr__(self, "log_start_offset", log_start_offset)
        object.__setattr__(self, "diverging_epoch", diverging_epoch)
        object.__setattr__(self, "first_batch", first_batch)


fast_frozen_init(LeaderAnswer)  # not a decorator: mypyc makes a decorated class a Python class


class FollowerStep(Enum):
    APPEND = "append"
    """Append the records (restarting an empty log at `FollowerPlan.offset` first, if >= 0),
    then adopt the leader's log start (`log_start_to_adopt`) and HW (`on_follower_progress`)."""
    TRUNCATE = "truncate"
    """``truncate_to(offset)`` even when offset >= the LEO (it trims the epoch cache), then
    `on_truncated`; fetch again at once."""
    RESTART = "restart"
    """Empty the log and start it at `offset` (``truncate_fully_and_start_at``), then `on_truncated`."""
    ASK_LEADER_OFFSETS = "ask_leader_offsets"
    """OFFSET_OUT_OF_RANGE: ask the leader's log start and end, then follow `out_of_range_plan`."""
    STALE = "stale"
    """The log moved while the request was out: nothing to do, fetch again."""
    BACKOFF = "backoff"
    """Wait ``replica.fetch.backoff.ms``, then fetch again from the log end."""


@dataclass(frozen=True, slots=True, init=False)
class FollowerPlan:
    """What a follower does with one partition of a fetch answer (see `FollowerStep`)."""

    step: FollowerStep
    offset: int = -1
    below_high_watermark: int = 0
    """TRUNCATE: offsets below the follower's HW it drops (> 0 only after an unclean election:
    log it as data loss)."""
    completed: bool = True
    """TRUNCATE: False when another round of divergence is expected."""

    # Compiled with the module (the dataclass decorator's __init__ would run as Python there);
    # uncompiled, fast_frozen_init replaces it.
    def __init__(
        self,
        step: FollowerStep,
        offset: int = -1,
        below_high_watermark: int = 0,
        completed: bool = True,
    ) -> None:
        object.__setattr__(self, "step", step)
        object.__setattr__(self, "offset", offset)
        object.__setattr__(self, "below_high_watermark", below_high_watermark)
        object.__setattr__(self, "completed", completed)


fast_frozen_init(FollowerPlan)  # not a decorator: mypyc makes a decorated class a Python class


@dataclass(frozen=True, slots=True)
class ProduceCheck:
    error: ErrorCode
    message: str = ""


_PRODUCE_OK: Final = ProduceCheck(_NONE)


@dataclass(slots=True)
class _Follower:
    """Kafka's ``Replica`` state, as the leader sees one follower (mutable, private)."""

    log_start_offset: int = UNKNOWN_OFFSET
    log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_ms: int = 0
    last_caught_up_ms: int | None = None
    broker_epoch: int = -1
    isr_eligible: bool = True
    last_fetched_epoch: int = -1  # of its last fetch that recorded a position
    idle_clock: FetchClock | None = None
    """The session whose later fetches skip this partition while nothing changes for it."""

    def settle(self) -> None:
        """Apply the fetches `idle_clock` counted since the last recorded one: each asked the
        same position while the leader's LEO stayed where it was at the last recorded fetch
        (anything else would have made the session read the partition), so together they
        amount to the latest of them: caught up then if caught up at the last recorded one."""
        clock = self.idle_clock
        if clock is None:
            return
        t = clock.last_fetch_ms
        if t > self.last_fetch_ms:
            if (
                self.last_fetch_leader_log_end_offset >= 0
                and self.log_end_offset >= self.last_fetch_leader_log_end_offset
            ):
                self.last_caught_up_ms = max(self.last_caught_up_ms or 0, t)
            self.last_fetch_ms = t

    def is_caught_up(self, leader_log_end_offset: int, now_ms: int, lag_ms: int) -> bool:
        if self.log_end_offset == leader_log_end_offset:
            return True
        return self.last_caught_up_ms is not None and now_ms - self.last_caught_up_ms <= lag_ms


@dataclass(frozen=True, slots=True)
class _Pending:
    """An ISR change sent (or to send) to the controller and not yet answered by metadata."""

    isr: tuple[int, ...]
    expanding: int | None
    """The replica being added (it counts for the HW at once), or None for a shrink/recovery."""
    resend: bool = False


# Compiled, a Python subclass's overrides still take effect (the replication simulation's
# mutants are such subclasses); the broker's own instances keep the native calls.
@mypyc_attr(allow_interpreted_subclasses=True)
class PartitionState:
    """The replication state of one replica of one partition on this broker."""

    def __init__(
        self,
        local_id: int,
        *,
        min_insync_replicas: int = 1,
        replica_lag_time_max_ms: int = DEFAULT_REPLICA_LAG_TIME_MAX_MS,
    ) -> None:
        self.local_id = local_id
        self.min_insync_replicas = min_insync_replicas
        """The topic's ``min.insync.replicas``: the manager keeps it current."""
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.role = Role.NONE
        self.leader_id = -1
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        """The committed ISR (from metadata or an accepted AlterPartition)."""
        self.leader_recovery_state = RECOVERED
        self.high_watermark = 0
        self._leader_since_epoch = -1
        """The leader epoch this broker's current uninterrupted leadership began with."""
        self._epoch_start_offset = 0
        self._followers: dict[int, _Follower] = {}
        self._pending: _Pending | None = None

    # ------------------------------------------------------------------ views

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    @property
    def is_follower(self) -> bool:
        return self.role is Role.FOLLOWER

    @property
    def leader_since_epoch(self) -> int:
        """The leader epoch this broker's current uninterrupted leadership began with (-1: not leading)."""
        return self._leader_since_epoch

    @property
    def epoch_start_offset(self) -> int:
        """The leader's LEO when its current epoch began (a follower joins the ISR only past it)."""
        return self._epoch_start_offset

    @property
    def pending_isr(self) -> tuple[int, ...] | None:
        return None if self._pending is None else self._pending.isr

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """KIP-497: the committed ISR plus a replica whose addition is in flight."""
        pending = self._pending
        if pending is not None and pending.expanding is not None and pending.expanding not in self.isr:
            return (*self.isr, pending.expanding)
        return self.isr

    def effective_min_isr(self) -> int:
        """``min.insync.replicas`` capped by the replication factor (Kafka's ``effectiveMinIsr``)."""
        return max(1, min(self.min_insync_replicas, len(self.replicas) or 1))

    def follower(self, replica_id: int) -> FollowerView | None:
        f = self._followers.get(replica_id)
        if f is None or not self.is_leader:
            return None
        f.settle()
        return FollowerView(
            replica_id,
            f.log_start_offset,
            f.log_end_offset,
            -1 if f.last_caught_up_ms is None else f.last_caught_up_ms,
            f.last_fetch_ms,
            f.broker_epoch,
        )

    def set_initial_high_watermark(self, high_watermark: int, log: LogView | None = None) -> None:
        """At load: the checkpointed HW (capped by the log's end, floored at its start)."""
        hw = max(0, high_watermark)
        if log is not None:
            hw = max(log.log_start_offset, min(hw, log.log_end_offset))
        self.high_watermark = hw

    # ------------------------------------------------------------------ metadata

    def _is_newer(self, leader_epoch: int, partition_epoch: int) -> bool:
        return (leader_epoch, partition_epoch) > (self.leader_epoch, self.partition_epoch)

    def become_leader(
        self,
        *,
        leader_epoch: int,
        partition_epoch: int,
        replicas: Sequence[int],
        isr: Sequence[int],
        now_ms: int,
        log: LeaderLog,
        leader_recovery_state: int = RECOVERED,
    ) -> bool:
        """Metadata says this broker leads. False (and no change) for a stale or repeated state.

        A new leadership (not already leading, or a new leader epoch) assigns the epoch's
        start offset (the LEO) in the log's epoch cache. Followers' LEOs become unknown when
        this broker was not leading before; their ``last_caught_up_ms`` becomes now for ISR
        members and never for the others. Any in-flight ISR change ends: the metadata is the
        truth. The HW may advance at once (e.g. a single-member ISR).
        """
        if not self._is_newer(leader_epoch, partition_epoch):
            return False
        was_leader = self.is_leader
        new_epoch = leader_epoch != self.leader_epoch or not was_leader
        self.role = Role.LEADER
        self.leader_id = self.local_id
        self.replicas = tuple(replicas)
        self.isr = tuple(isr)
        self.partition_epoch = partition_epoch
        self.leader_recovery_state = leader_recovery_state
        self._pending = None
        if new_epoch:
            self.leader_epoch = leader_epoch
            log.assign_epoch_start_offset(leader_epoch, log.log_end_offset)
            self._epoch_start_offset = log.log_end_offset
            if not was_leader:
                self._leader_since_epoch = leader_epoch
            previous = self._followers
            self._followers = {}
            for r in self.replicas:
                if r == self.local_id:
                    continue
                old = previous.get(r)
                f = _Follower() if (old is None or not was_leader) else old
                f.last_caught_up_ms = now_ms if r in self.isr else None
                self._followers[r] = f
        else:
            self._followers = {r: self._followers.get(r, _Follower()) for r in self.replicas if r != self.local_id}
        self._maybe_increment_high_watermark(now_ms, log)
        return True

    def become_follower(
        self,
        *,
        leader_id: int,
        leader_epoch: int,
        partition_epoch: int,
        replicas: Sequence[int],
        isr: Sequence[int],
        leader_recovery_state: int = RECOVERED,
    ) -> bool:
        """Metadata says another broker (or none: ``leader_id`` -1) leads. False for a stale or
        repeated state. Pending acks=-1 writes of a former leadership must be failed by the
        caller (NOT_LEADER_OR_FOLLOWER); the log is not touched: a divergent suffix is found
        and truncated by the first fetches."""
        if not self._is_newer(leader_epoch, partition_epoch):
            return False
        self.role = Role.FOLLOWER
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.replicas = tuple(replicas)
        self.isr = tuple(isr)
        self.leader_recovery_state = leader_recovery_state
        self._pending = None
        self._followers = {}
        self._leader_since_epoch = -1
        return True

    def stop_replica(self) -> None:
        """The replica is no longer hosted (or the broker stops): forget every role."""
        self.role = Role.NONE
        self.leader_id = -1
        self._pending = None
        self._followers = {}
        self._leader_since_epoch = -1

    def check_leader_epoch(self, current_leader_epoch: int, *, require_leader: bool = True) -> ErrorCode:
        """KIP-320 for Fetch/ListOffsets/OffsetForLeaderEpoch: FENCED_LEADER_EPOCH if the
        client's epoch is older, UNKNOWN_LEADER_EPOCH if newer (-1: not checked), then
        NOT_LEADER_OR_FOLLOWER when this replica must lead and does not."""
        if current_leader_epoch >= 0:
            if current_leader_epoch < self.leader_epoch:
                return ErrorCode.FENCED_LEADER_EPOCH
            if current_leader_epoch > self.leader_epoch:
                return ErrorCode.UNKNOWN_LEADER_EPOCH
        if require_leader and not self.is_leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self.role is Role.NONE:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return _NONE

    def offset_for_leader_epoch(
        self, current_leader_epoch: int, epoch: int, log: LogView
    ) -> tuple[ErrorCode, int, int]:
        """OffsetForLeaderEpoch on the leader: ``(error, epoch, end_offset)``."""
        error = self.check_leader_epoch(current_leader_epoch)
        if error != _NONE:
            return error, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        found_epoch, end = log.end_offset_for_epoch(epoch)
        return _NONE, found_epoch, end

    # ------------------------------------------------------------------ leader: follower fetches

    def on_follower_fetch(
        self,
        *,
        replica_id: int,
        fetch_offset: int,
        last_fetched_epoch: int,
        now_ms: int,
        log: LogView,
        log_start_offset: int = UNKNOWN_OFFSET,
        current_leader_epoch: int = -1,
        broker_epoch: int = -1,
        isr_eligible: bool = True,
        idle_clock: FetchClock | None = None,
    ) -> FollowerFetchResult:
        """One partition of a Fetch from follower ``replica_id``.

        ``idle_clock``: the fetch comes in a fetch session whose later fetches may skip this
        partition while nothing changes for it; they are accounted for from this clock.

        ``isr_eligible``: the follower is registered, unfenced, not in controlled shutdown and
        its fetch's broker epoch (if any) is its registered one (KIP-841/KIP-903): the
        manager decides from the metadata image. The caller reads records up to the LEO for
        an answer with error NONE and no diverging epoch.
        """
        error = self.check_leader_epoch(current_leader_epoch)
        if error != _NONE:
            return FollowerFetchResult(error)
        f = self._followers.get(replica_id)
        if f is None:
            # Not a replica of this partition (Kafka: NOT_LEADER_OR_FOLLOWER for an unknown replica).
            return FollowerFetchResult(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if broker_epoch >= 0 and f.broker_epoch >= 0 and broker_epoch != f.broker_epoch:
            if broker_epoch < f.broker_epoch:
                # A fetch of an earlier incarnation read after one of a later (a dead process's
                # request): it says nothing about the follower's log now.
                return FollowerFetchResult(ErrorCode.STALE_BROKER_EPOCH)
            # A new incarnation of the follower (it registered again, KIP-903): what its previous
            # one had fetched may be lost (unflushed at a crash); forget it, and an ISR expansion
            # for it that its previous incarnation earned (never to be sent again under the new
            # epoch: the controller would take it).
            f = self._followers[replica_id] = _Follower(broker_epoch=broker_epoch)
            if self._pending is not None and self._pending.expanding == replica_id:
                self._pending = None
        if last_fetched_epoch >= 0:
            epoch, end = log.end_offset_for_epoch(last_fetched_epoch)
            if epoch == UNDEFINED_EPOCH or end == UNDEFINED_EPOCH_OFFSET:
                return FollowerFetchResult(ErrorCode.OFFSET_OUT_OF_RANGE)
            if self._diverges(epoch, end, last_fetched_epoch, fetch_offset):
                return FollowerFetchResult(_NONE, diverging_epoch=(epoch, end))
        leader_end = log.log_end_offset
        if fetch_offset < log.log_start_offset or fetch_offset > leader_end:
            return FollowerFetchResult(ErrorCode.OFFSET_OUT_OF_RANGE)
        f.settle()  # the session's fetches that skipped this partition since its last recorded one
        # Kafka's Replica.updateFetchState: caught up now, or as of the previous fetch.
        if fetch_offset >= leader_end:
            f.last_caught_up_ms = max(f.last_caught_up_ms or 0, now_ms)
        elif f.last_fetch_leader_log_end_offset >= 0 and fetch_offset >= f.last_fetch_leader_log_end_offset:
            f.last_caught_up_ms = max(f.last_caught_up_ms or 0, f.last_fetch_ms)
        f.log_start_offset = log_start_offset
        f.log_end_offset = fetch_offset
        f.last_fetch_leader_log_end_offset = max(leader_end, f.last_fetch_leader_log_end_offset)
        f.last_fetch_ms = now_ms
        f.broker_epoch = broker_epoch
        f.isr_eligible = isr_eligible
        f.last_fetched_epoch = last_fetched_epoch
        f.idle_clock = idle_clock
        expand = self._can_add_to_isr(replica_id) and self._is_in_sync(f)
        changed = self._maybe_increment_high_watermark(now_ms, log)
        return FollowerFetchResult(_NONE, high_watermark_changed=changed, isr_expand_wanted=expand)

    def on_idle_follower_fetch(
        self,
        *,
        replica_id: int,
        fetch_offset: int,
        last_fetched_epoch: int,
        log_start_offset: int,
        now_ms: int,
        log: LogView,
        broker_epoch: int,
        isr_eligible: bool,
    ) -> bool:
        """`on_follower_fetch` for the commonest fetch of an idle partition, in O(1): an ISR
        member asking again exactly what it asked last time, at the log end, with the high
        watermark there too. Nothing can diverge, move or join: the fetch only records that
        the follower is caught up now. Returns False (nothing recorded) for any other fetch,
        which the caller then gives to `on_follower_fetch`."""
        f = self._followers.get(replica_id)
        end = log.log_end_offset
        if (
            f is None
            or not self.is_leader
            or replica_id not in self.isr
            or fetch_offset != end
            or f.log_end_offset != end
            or f.last_fetch_leader_log_end_offset != end
            or self.high_watermark != end
            or f.last_fetched_epoch != last_fetched_epoch
            or f.log_start_offset != log_start_offset
            or f.broker_epoch != broker_epoch
            or f.isr_eligible != isr_eligible
        ):
            return False
        f.last_caught_up_ms = max(f.last_caught_up_ms or 0, now_ms)
        f.last_fetch_ms = now_ms
        f.idle_clock = None  # a fetch without a session: it names every partition each time
        return True

    def _diverges(self, epoch: int, end: int, last_fetched_epoch: int, fetch_offset: int) -> bool:
        """The follower's (last_fetched_epoch, fetch_offset) is not a prefix of this log."""
        return epoch < last_fetched_epoch or end < fetch_offset

    def _can_add_to_isr(self, replica_id: int) -> bool:
        f = self._followers.get(replica_id)
        return (
            self.is_leader
            and self._pending is None
            and replica_id not in self.isr
            and f is not None
            and f.isr_eligible
            and self.leader_recovery_state == RECOVERED
        )

    def _is_in_sync(self, f: _Follower) -> bool:
        """Kafka's ``isFollowerInSync``: at least the HW and the start of the leader's epoch."""
        return f.log_end_offset >= self.high_watermark and f.log_end_offset >= self._epoch_start_offset

    def on_local_append(self, now_ms: int, log: LogView) -> bool:
        """The leader appended (its LEO moved): True if the HW advanced. Followers that were
        at the old LEO first take the fetches their sessions skipped until now (`settle`):
        from here on, those fetches no longer find the LEO they recorded."""
        if self.role is not Role.LEADER:
            return False
        for f in self._followers.values():
            if f.idle_clock is not None:
                f.settle()
                f.idle_clock = None  # the next fetch of the session reads the partition again
        return self._maybe_increment_high_watermark(now_ms, log)

    def maybe_advance_high_watermark(self, now_ms: int, log: LogView) -> bool:
        """Recompute the HW without a fetch (True if it advanced): after a pending ISR change
        was dropped (the maximal ISR shrank), or once a follower outside the ISR stopped being
        caught up by time. A follower's fetch does it too, but the fetches of a session skip a
        partition in which nothing changed, so the manager asks on its periodic ISR check."""
        return self._maybe_increment_high_watermark(now_ms, log)

    def _holds_high_watermark(self, replica_id: int, f: _Follower, leader_end: int, now_ms: int) -> bool:
        """Does this follower's LEO bound the HW? Maximal-ISR members, and followers that are
        caught up and eligible (Kafka's ``shouldWaitForReplicaToJoinIsr``)."""
        if replica_id in self.maximal_isr:
            return True
        return f.isr_eligible and f.is_caught_up(leader_end, now_ms, self.replica_lag_time_max_ms)

    def _high_watermark_frozen(self) -> bool:
        """Kafka 3.7+ (``isUnderMinIsr``): the HW does not move while the committed ISR is
        smaller than the effective min ISR."""
        return len(self.isr) < self.effective_min_isr()

    def _maybe_increment_high_watermark(self, now_ms: int, log: LogView) -> bool:
        if self.role is not Role.LEADER or self._high_watermark_frozen():
            return False
        leader_end = log.log_end_offset
        candidate = leader_end
        for replica_id, f in self._followers.items():
            if f.log_end_offset < candidate and self._holds_high_watermark(replica_id, f, leader_end, now_ms):
                candidate = f.log_end_offset
        if candidate > self.high_watermark:
            self.high_watermark = candidate
            return True
        return False

    # ------------------------------------------------------------------ leader: ISR changes

    def out_of_sync_replicas(self, now_ms: int, log: LogView, lag_ms: int | None = None) -> tuple[int, ...]:
        """Committed ISR followers that have not been caught up for ``replica.lag.time.max.ms``."""
        lag = self.replica_lag_time_max_ms if lag_ms is None else lag_ms
        leader_end = log.log_end_offset
        out = []
        for r in self.isr:
            f = self._followers.get(r)
            if r != self.local_id and (f is None or not f.is_caught_up(leader_end, now_ms, lag)):
                out.append(r)
        return tuple(out)

    def proposed_isr(self, now_ms: int, lag_ms: int | None, log: LogView) -> tuple[int, ...] | None:
        """The ISR to send with AlterPartition now, or None (nothing to change, or a change is in
        flight). The caller sends it with leader recovery state RECOVERED and the current
        leader and partition epochs, then calls `on_isr_sent`.

        In order: an in-flight change whose answer was lost is proposed again; a leader
        elected uncleanly (RECOVERING) reports RECOVERED with its ISR as it is; lagging
        members leave (shrink); one caught-up follower joins (expand). A follower joins only
        while it is caught up by the same rule that would take it out again (a fetch within
        ``replica.lag.time.max.ms``, or its LEO at the leader's): a follower cut off right at a
        frozen HW is otherwise added back and removed again every check, forever.
        """
        if not self.is_leader:
            return None
        if self._pending is not None:
            return self._pending.isr if self._pending.resend else None
        if self.leader_recovery_state != RECOVERED:
            return self.isr
        lagging = self.out_of_sync_replicas(now_ms, log, lag_ms)
        if lagging:
            return tuple(r for r in self.isr if r not in lagging)
        lag = self.replica_lag_time_max_ms if lag_ms is None else lag_ms
        for r in self.replicas:
            f = self._followers.get(r)
            if (
                f is not None
                and self._can_add_to_isr(r)
                and self._is_in_sync(f)
                and f.is_caught_up(log.log_end_offset, now_ms, lag)
            ):
                return (*self.isr, r)
        return None

    def on_isr_sent(self, isr: Sequence[int]) -> None:
        """An AlterPartition with this ISR is on its way: while it is, a replica being added
        counts for the HW (maximal ISR) and a replica being removed still does."""
        new = tuple(isr)
        joining = [r for r in new if r not in self.isr]
        self._pending = _Pending(new, joining[0] if joining else None)

    def on_isr_committed(
        self, *, isr: Sequence[int], leader_epoch: int, partition_epoch: int, now_ms: int, log: LogView
    ) -> bool:
        """The controller accepted an ISR change (its AlterPartition answer): adopt it unless the
        metadata already brought something newer. True if the HW advanced."""
        if not self.is_leader or leader_epoch != self.leader_epoch or partition_epoch <= self.partition_epoch:
            return False
        self.isr = tuple(isr)
        self.partition_epoch = partition_epoch
        self.leader_recovery_state = RECOVERED
        self._pending = None
        return self._maybe_increment_high_watermark(now_ms, log)

    def on_isr_failed(self, error: ErrorCode | None = None) -> None:
        """The AlterPartition was answered with ``error``, or (None) its outcome is unknown.

        Kafka's rules: INELIGIBLE_REPLICA / OPERATION_NOT_ATTEMPTED mean "not applied, your
        partition epoch is right": the change is dropped and may be proposed afresh. The
        errors that mean newer metadata is coming (FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION,
        UNKNOWN_TOPIC_OR_PARTITION, INVALID_REQUEST) keep it in flight until the metadata ends
        it: it may have been applied by an earlier attempt. Anything else (a timeout, an
        unreachable controller, NOT_CONTROLLER) sends the same change again.
        """
        pending = self._pending
        if pending is None:
            return
        if error in (ErrorCode.INELIGIBLE_REPLICA, ErrorCode.OPERATION_NOT_ATTEMPTED):
            self._pending = None
        elif error in (
            ErrorCode.FENCED_LEADER_EPOCH,
            ErrorCode.INVALID_UPDATE_VERSION,
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            ErrorCode.INVALID_REQUEST,
        ):
            self._pending = _Pending(pending.isr, pending.expanding, resend=False)
        else:
            self._pending = _Pending(pending.isr, pending.expanding, resend=True)

    # ------------------------------------------------------------------ leader: produce

    def check_produce(self, acks: int, min_insync_replicas: int | None = None) -> ProduceCheck:
        """Before appending as leader: NOT_LEADER_OR_FOLLOWER, or for acks=-1 NOT_ENOUGH_REPLICAS
        when the committed ISR is smaller than the effective min ISR."""
        if self.role is not Role.LEADER:
            return ProduceCheck(ErrorCode.NOT_LEADER_OR_FOLLOWER, "This server is not the leader for that partition.")
        if min_insync_replicas is not None:
            self.min_insync_replicas = min_insync_replicas
        if acks == -1:
            min_isr = self.effective_min_isr()
            if len(self.isr) < min_isr:
                return ProduceCheck(
                    ErrorCode.NOT_ENOUGH_REPLICAS,
                    f"The size of the current ISR {set(self.isr)} is insufficient to satisfy "
                    f"the min.isr requirement of {min_isr}",
                )
        return _PRODUCE_OK

    def set_min_insync_replicas(self, value: int, now_ms: int, log: LogView) -> bool:
        """The effective ``min.insync.replicas`` changed (topic or broker default): it applies at
        once, to the next produce and to the HW (which freezes below it). True if the HW advanced."""
        self.min_insync_replicas = value
        return self._maybe_increment_high_watermark(now_ms, log)

    def low_watermark(self, log: LogView, alive: Callable[[int], bool]) -> int:
        """The smallest log start offset among this leader and its followers on live brokers
        (Kafka's ``lowWatermarkIfLeader``; a live follower that has not fetched in this
        leadership counts as -1, unknown): DeleteRecords completes once this reaches the
        requested offset."""
        low = log.log_start_offset
        for replica_id, f in self._followers.items():
            if alive(replica_id):
                low = min(low, f.log_start_offset)
        return low

    def is_acked(self, required_offset: int, append_leader_epoch: int) -> ErrorCode | None:
        """Kafka's ``checkEnoughReplicasReachOffset`` for an acks=-1 write appended as leader in
        ``append_leader_epoch`` whose last offset is ``required_offset - 1``: None while waiting;
        NONE once the HW reached it; NOT_ENOUGH_REPLICAS_AFTER_APPEND if it did while the
        maximal ISR was below min ISR; NOT_LEADER_OR_FOLLOWER once this broker's leadership
        that appended it has ended (the offset may since hold other records)."""
        if not self.is_leader or append_leader_epoch < self._leader_since_epoch:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self.high_watermark < required_offset:
            return None
        if len(self.maximal_isr) < self.effective_min_isr():
            return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return _NONE

    # ------------------------------------------------------------------ follower side

    def fetch_position(self, log: LogView) -> tuple[int, int]:
        """``(fetch_offset, last_fetched_epoch)`` of the next Fetch: the log end and its latest
        epoch (-1 for none). Send it with ``current_leader_epoch`` = `leader_epoch`."""
        epoch = log.latest_epoch()
        return log.log_end_offset, (UNDEFINED_EPOCH if epoch is None else epoch)

    def truncation(self, diverging_epoch: tuple[int, int], log: LogView) -> Truncation:
        """Where to truncate for the leader's DivergingEpoch ``(epoch, end_offset)``
        (``AbstractFetcherThread.getOffsetTruncationState``)."""
        leader_epoch, leader_end = diverging_epoch
        end = log.log_end_offset
        if leader_end == UNDEFINED_EPOCH_OFFSET:
            offset, done = min(self.high_watermark, end), True
        elif leader_epoch == UNDEFINED_EPOCH:
            offset, done = min(leader_end, end), True
        else:
            own_epoch, own_end = log.end_offset_for_epoch(leader_epoch)
            if own_end == UNDEFINED_EPOCH_OFFSET or own_epoch == UNDEFINED_EPOCH:
                offset, done = min(leader_end, end), True
            elif own_epoch == leader_epoch:
                offset, done = min(leader_end, own_end), True
            else:
                offset, done = min(own_end, end), False
        offset = max(offset, 0)
        return Truncation(offset, done, max(0, self.high_watermark - offset))

    def out_of_range_plan(self, leader_log_start_offset: int, leader_log_end_offset: int, log: LogView) -> FollowerPlan:
        """After OFFSET_OUT_OF_RANGE, with the leader's log start and log end offsets (ListOffsets
        earliest and latest as a replica; Kafka's ``fetchOffsetAndTruncate``): TRUNCATE to the
        leader's log end when it ends below ours (only after an unclean election), RESTART
        the log at the leader's log start when ours ends below it, else BACKOFF and fetch
        again from our log end (the leader moved meanwhile)."""
        end = log.log_end_offset
        if leader_log_end_offset < end:
            offset = max(leader_log_end_offset, 0)
            return FollowerPlan(FollowerStep.TRUNCATE, offset, max(0, self.high_watermark - offset))
        if leader_log_start_offset > end:
            return FollowerPlan(FollowerStep.RESTART, leader_log_start_offset)
        return FollowerPlan(FollowerStep.BACKOFF)

    def on_fetch_answer(self, fetch_offset: int, answer: LeaderAnswer, log: LogView) -> FollowerPlan:
        """What one partition of the leader's Fetch answer means for this follower (Kafka's
        ``AbstractFetcherThread.processFetchRequest``), for a request sent at ``fetch_offset``:

        - the log moved while the request was out (``fetch_offset`` is not the log end): STALE,
          whatever the answer says; fetch again;
        - a diverging epoch: TRUNCATE where the logs agree, always, even when that is the log
          end (the truncation also drops epoch-cache entries at or past it, e.g. the
          ``(epoch, LEO)`` a former leader assigned to an epoch in which nothing was written;
          skipping it answers the same divergence forever);
        - records (or none) at the log end: APPEND, then adopt the leader's HW and log start;
          when the log is empty and the leader's first batch starts below its end (a log start
          inside a batch after DeleteRecords), RESTART the log at that batch's base offset
          first (`FollowerPlan.offset`), as Kafka does on ``UnexpectedAppendOffsetException``;
        - OFFSET_OUT_OF_RANGE: ASK_LEADER_OFFSETS, then `out_of_range_plan`;
        - any other error: BACKOFF.
        """
        end = log.log_end_offset
        if fetch_offset != end:
            return FollowerPlan(FollowerStep.STALE)
        if answer.error == _NONE and answer.diverging_epoch is not None:
            cut = self.truncation(answer.diverging_epoch, log)
            return FollowerPlan(FollowerStep.TRUNCATE, cut.offset, cut.below_high_watermark, cut.completed)
        if answer.error == _NONE:
            first = answer.first_batch
            if first is not None and first[0] < end <= first[1] and log.log_start_offset == end:
                return FollowerPlan(FollowerStep.APPEND, first[0])
            return FollowerPlan(FollowerStep.APPEND)
        if answer.error == ErrorCode.OFFSET_OUT_OF_RANGE:
            return FollowerPlan(FollowerStep.ASK_LEADER_OFFSETS)
        return FollowerPlan(FollowerStep.BACKOFF)

    def log_start_to_adopt(self, leader_log_start_offset: int, log: LogView) -> int | None:
        """After an append: the leader's log start offset moved past ours (DeleteRecords or
        retention on the leader): the offset to move ours to (never past our log end), or None."""
        target = min(leader_log_start_offset, log.log_end_offset)
        return target if target > log.log_start_offset else None

    def on_truncated(self, log: LogView) -> None:
        """The log was truncated (or restarted): the HW never exceeds the LEO."""
        self.high_watermark = max(log.log_start_offset, min(self.high_watermark, log.log_end_offset))

    def on_follower_progress(self, leader_high_watermark: int, log: LogView) -> int:
        """After appending a fetch answer: the follower's HW is ``min(leader HW, own LEO)``
        (it may go down when a new leader knows an older HW, as in Kafka)."""
        if self.is_follower:
            self.high_watermark = max(log.log_start_offset, min(leader_high_watermark, log.log_end_offset))
        return self.high_watermark

    # ------------------------------------------------------------------ helpers for tests and views

    def followers(self) -> Iterable[FollowerView]:
        for r in self._followers:
            view = self.follower(r)
            if view is not None:
                yield view
