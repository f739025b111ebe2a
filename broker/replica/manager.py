"""`ReplicaManager`: the IO driver of the partitions this broker hosts.

It owns, per hosted partition, the `PartitionLog` (broker.log) and the sans-IO
`PartitionState` (broker.replica.state), and does what they decide:

- metadata deltas (`on_metadata`) make this broker leader or follower of its partitions,
  create their logs (many new ones off the loop: `broker.replica.log_creator`), hand
  followed partitions to the fetcher of their leader, and delete the logs of removed
  partitions;
- Produce appends on the leader; `acks=all` waits in `AckWaiters` until `is_acked`
  answers (the high watermark covers the append, or the leadership ended);
- Fetch serves consumers (up to the high watermark) and followers (up to the log end,
  recording their position so the high watermark and the ISR move);
- ISR changes the leader wants go to the controller through `IsrSender` (AlterPartition);
- periodic work: high-watermark/recovery-point/log-start checkpoints, retention, flushes.

What the replication rules decide is `PartitionState`'s (`broker.replica.state`): when an
acks=all write completes (`is_acked`, through `AckWaiters`), what a follower does with a
fetch answer (`broker.replica.follower`), the ISR changes to propose. This module does the
IO around them. Invariants kept here: records above the high watermark are never returned
to consumers; everything runs on the one event loop, and blocking disk work (fsync,
checkpoints, deleting segments) runs on each log dir's disk queue (`broker.log.disk_queue`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final
from uuid import UUID

from broker.log import LogConfig, LogError, LogManager, PartitionLog
from broker.log.control_records import EndTxnMarker
from broker.log.partition_log import AppendInfo
from broker.log.producer_state import VERIFICATION_OFF, VerificationGuard
from broker.replica.follower import apply_fetch_answer, apply_leader_offsets
from broker.replica.log_creator import OFF_LOOP_MIN as LOG_CREATION_OFF_LOOP_MIN
from broker.replica.log_creator import Created, LogCreator
from broker.replica.purgatory import AckWait, AckWaiters, FetchWaiter, FetchWatchers, SessionWatch
from broker.replica.requests import (
    CONSUMER_REPLICA_ID,
    DEBUGGING_REPLICA_ID,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    READ_COMMITTED,
    AbortedTransaction,
    DeleteRecordsPartition,
    DeleteRecordsResult,
    DescribeProducersResult,
    EpochEndOffset,
    EpochQuery,
    FetchParams,
    FetchPartition,
    FetchPartitionResult,
    LeaderHint,
    ListOffsetsPartition,
    ListOffsetsResult,
    LogDirDescription,
    LogDirPartition,
    PartitionView,
    ProduceParams,
    ProducePartition,
    ProducePartitionResult,
    ProducerDescription,
    RecordError,
    ReplicaView,
    TxnMarker,
    TxnMarkerResult,
)
from broker.replica.state import FetchClock, FollowerPlan, LeaderAnswer, PartitionState
from broker.replica.txn_verification import TxnVerify, Verified, verify_coordinator_write, verify_produce
from quorum.kafka_errors import ErrorCode
from quorum.metadata.delta import MetadataDelta
from quorum.metadata.image import MetadataImage, PartitionRegistration, TopicIdPartition
from quorum.metadata.records import ConfigResourceType
from quorum.node.config import NodeConfig

# ErrorCode.NONE loaded once: in compiled code `ErrorCode.X` is a lookup through
# EnumType.__getattr__ (~900 instructions), and the data path asks it per partition.
_NONE: Final = ErrorCode.NONE

log = logging.getLogger(__name__)

MIN_INSYNC_REPLICAS = "min.insync.replicas"  # the topic config a leader's ISR rule reads

TopicPartition = tuple[str, int]


def now_ms() -> int:
    return int(time.time() * 1000)


def _urgent(r: FetchPartitionResult) -> bool:
    """A fetch answer that must not wait for more bytes: an error or a diverging epoch (Kafka's
    DelayedFetch completes at once on either)."""
    return r.error != _NONE or r.diverging_epoch is not None


@dataclass(slots=True)
class HostedPartition:
    """One replica hosted here: its log, its replication state and its waiting rooms."""

    topic: str
    partition: int
    topic_id: UUID
    log: PartitionLog
    state: PartitionState
    registration: PartitionRegistration
    acks: AckWaiters = field(default_factory=AckWaiters)
    deletes: list[tuple[int, asyncio.Future[DeleteRecordsResult]]] = field(default_factory=list)
    """DeleteRecords waiting for every live replica's log start: (required offset, its answer)."""
    progress: FetchWatchers = field(default_factory=FetchWatchers)
    """The long polls waiting on this partition."""

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)

    def leader_hint(self) -> LeaderHint:
        return LeaderHint(self.registration.leader, self.registration.leader_epoch)


class ReplicaManager:
    def __init__(
        self,
        config: NodeConfig,
        logs: LogManager,
        *,
        image: Callable[[], MetadataImage],
        min_insync_replicas: Callable[[str], int],
        on_follow: Callable[[HostedPartition], None],
        on_unfollow: Callable[[HostedPartition], None],
        on_isr_change_wanted: Callable[[], None],
    ) -> None:
        self.config = config
        self.node_id = config.node_id
        self.logs = logs
        self.image = image
        self.min_insync_replicas = min_insync_replicas
        # KIP-890 part 1: set by the data plane when transaction.partition.verification.enable
        # (the transaction coordinator's AddPartitionsToTxn VerifyOnly); None: not verified.
        self.txn_verify: TxnVerify | None = None
        self._on_follow = on_follow
        self._on_unfollow = on_unfollow
        self._on_isr_change_wanted = on_isr_change_wanted
        self.partitions: dict[TopicPartition, HostedPartition] = {}
        self._hw_checkpoint = logs.high_watermark_checkpoint()
        self._log_creator = LogCreator(self._host_created)

    # ------------------------------------------------------------------ metadata

    def on_metadata(self, delta: MetadataDelta | None, image: MetadataImage) -> None:
        """Apply what this broker must do after a metadata delta (Kafka's applyDelta)."""
        if delta is None:
            return
        changes = delta.local_changes(self.node_id)
        for tip in changes.deletes:
            self._remove(tip)
        creating = self._create_logs_off_loop([*changes.leaders, *changes.followers], image)
        for tip, reg in changes.leaders.items():
            if (tip.topic_name, tip.partition_id) not in creating:
                self._become(tip, reg, image, leader=True)
        for tip, reg in changes.followers.items():
            if (tip.topic_name, tip.partition_id) not in creating:
                self._become(tip, reg, image, leader=False)
        brokers_changed = False
        min_isr_topics: set[str] = set()  # topics whose own min.insync.replicas changed
        for resource in delta.changed_configs:
            if resource.type == ConfigResourceType.TOPIC:  # LogConfig takes the broker's static config only
                self.logs.update_config(resource.name, self._topic_config(image, resource.name))
                if delta.config_key_changed(resource, MIN_INSYNC_REPLICAS):
                    min_isr_topics.add(resource.name)
            elif resource.type == ConfigResourceType.BROKER:
                brokers_changed = True
        if brokers_changed or min_isr_topics:
            self._refresh_min_isr(None if brokers_changed else min_isr_topics)
        if changes.leaders or changes.followers:
            self._on_isr_change_wanted()

    def _create_logs_off_loop(self, tips: list[TopicIdPartition], image: MetadataImage) -> set[TopicPartition]:
        """The partitions left to `_host_created` (`broker.replica.log_creator`): those whose
        log is being created, with the new ones of `tips` when they are many. Internal topics'
        partitions (`__consumer_offsets`, `__transaction_state`) are always hosted at once: their
        coordinators look at what is hosted right after the delta."""
        pending = self._log_creator.pending
        new = [
            tip
            for tip in tips
            if not tip.topic_name.startswith("__")
            and (tp := (tip.topic_name, tip.partition_id)) not in self.partitions
            and tp not in pending
            and self.logs.get(*tp) is None
        ]
        if len(new) >= LOG_CREATION_OFF_LOOP_MIN:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                return pending  # no loop to protect (tools): created in place
            # In partition order, not leaders first: every broker creates a partition's replicas
            # at about the same time, so its followers fetch before replica.lag.time.max.ms.
            new.sort(key=lambda t: (t.topic_name, t.partition_id))
            configs: dict[str, LogConfig] = {}  # parsed once per topic
            plans = []
            for t in new:
                config = configs.get(t.topic_name)
                if config is None:
                    config = configs[t.topic_name] = self.logs.config_for(self._topic_config(image, t.topic_name))
                plans.append(self.logs.plan_new_log(t.topic_name, t.partition_id, t.topic_id, config))
            log.info("broker %d: creating %d logs off the event loop", self.node_id, len(plans))
            self._log_creator.submit(plans)
        return pending

    def _host_created(self, created: Created) -> None:
        """Logs made off the loop: host each partition as the image says now (a delta applied
        meanwhile may have moved, deleted or re-created it)."""
        image = self.image()
        hosted = False
        for new, result in created:
            try:
                self.logs.adopt_new_log(new, result)
            except LogError as exc:
                log.error("broker %d: cannot host %s-%d: %s", self.node_id, new.topic, new.partition, exc)
                continue
            t = image.topics.by_name.get(new.topic)
            reg = None if t is None else t.partitions.get(new.partition)
            if t is None or reg is None or self.node_id not in reg.replicas:
                self.logs.delete(new.topic, new.partition)  # no longer a replica here
                continue
            tip = TopicIdPartition(t.id, new.topic, new.partition)
            self._become(tip, reg, image, leader=reg.leader == self.node_id)
            hosted = True
        if hosted:
            self._on_isr_change_wanted()

    def _refresh_min_isr(self, topics: set[str] | None) -> None:
        """``min.insync.replicas`` changed (a topic's, or a broker default when ``topics`` is
        None): every led partition applies the new value at once (the HW may move or freeze;
        the next acks=-1 produce is checked against it)."""
        now = now_ms()
        for hosted in self.partitions.values():
            if topics is None or hosted.topic in topics:
                value = self.min_insync_replicas(hosted.topic)
                if value == hosted.state.min_insync_replicas:
                    continue  # another config of the topic changed: nothing to apply
                if hosted.state.set_min_insync_replicas(value, now, hosted.log):
                    self._advance(hosted)

    def _topic_config(self, image: MetadataImage, topic: str) -> Mapping[str, str]:
        return image.topic_config(topic)

    def _remove(self, tip: TopicIdPartition) -> None:
        tp = (tip.topic_name, tip.partition_id)
        hosted = self.partitions.get(tp)
        if hosted is not None and hosted.topic_id != tip.topic_id:
            return  # a newer topic of the same name lives here now
        if hosted is not None:
            del self.partitions[tp]
            self._on_unfollow(hosted)
            hosted.acks.fail_all(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            self._fail_deletes(hosted, ErrorCode.NOT_LEADER_OR_FOLLOWER)
            hosted.progress.notify()
        try:
            self.logs.delete(tp[0], tp[1])
        except Exception:
            log.exception("deleting the log of %s-%d failed", tp[0], tp[1])
        log.info("broker %d: removed replica %s-%d", self.node_id, tp[0], tp[1])

    def _become(self, tip: TopicIdPartition, reg: PartitionRegistration, image: MetadataImage, *, leader: bool) -> None:
        tp = (tip.topic_name, tip.partition_id)
        hosted = self.partitions.get(tp)
        if hosted is not None and hosted.topic_id != tip.topic_id:
            self._remove(TopicIdPartition(hosted.topic_id, tp[0], tp[1]))
            hosted = None
        if hosted is None:
            plog = self.logs.get_or_create(tp[0], tp[1], tip.topic_id, self._topic_config(image, tp[0]))
            state = PartitionState(
                self.node_id,
                min_insync_replicas=self.min_insync_replicas(tp[0]),
                replica_lag_time_max_ms=self.config.replica_lag_time_max_ms,
            )
            hosted = HostedPartition(tp[0], tp[1], tip.topic_id, plog, state, reg)
            self.partitions[tp] = hosted
            checkpointed = self._hw_checkpoint.pop(tp, None)
            if checkpointed is not None:
                state.set_initial_high_watermark(checkpointed, plog)
        hosted.registration = reg
        hosted.state.min_insync_replicas = self.min_insync_replicas(tp[0])
        now = now_ms()
        if leader:
            self._on_unfollow(hosted)
            hosted.state.become_leader(
                leader_epoch=reg.leader_epoch,
                partition_epoch=reg.partition_epoch,
                replicas=reg.replicas,
                isr=reg.isr,
                now_ms=now,
                log=hosted.log,
                leader_recovery_state=reg.leader_recovery_state,
            )
            self._advance(hosted)
        else:
            hosted.state.become_follower(
                leader_id=reg.leader,
                leader_epoch=reg.leader_epoch,
                partition_epoch=reg.partition_epoch,
                replicas=reg.replicas,
                isr=reg.isr,
            )
            self._advance(hosted)  # acks=-1 writes of the leadership that ended: NOT_LEADER_OR_FOLLOWER
            self._fail_deletes(hosted, ErrorCode.NOT_LEADER_OR_FOLLOWER)
            self._on_unfollow(hosted)
            if reg.leader >= 0:
                self._on_follow(hosted)
        hosted.progress.notify()

    # ------------------------------------------------------------------ helpers

    def _advance(self, hosted: HostedPartition) -> None:
        """After anything that may move the HW: release acks=all waiters, and the consumers'
        long polls if the HW (or the log start) moved."""
        hosted.acks.complete(hosted.state)
        hosted.progress.offsets_moved(hosted.state.high_watermark, hosted.log.log_start_offset)

    def _leader_partition(
        self, topic: str, partition: int, current_leader_epoch: int = -1
    ) -> tuple[HostedPartition | None, ErrorCode]:
        hosted = self.partitions.get((topic, partition))
        if hosted is None:
            image = self.image()
            t = image.topics.by_name.get(topic)
            if t is None or partition not in t.partitions:
                return None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            return None, ErrorCode.NOT_LEADER_OR_FOLLOWER
        return hosted, hosted.state.check_leader_epoch(current_leader_epoch)

    def _hint(self, topic: str, partition: int) -> LeaderHint:
        t = self.image().topics.by_name.get(topic)
        if t is None:
            return LeaderHint()
        reg = t.partitions.get(partition)
        return LeaderHint() if reg is None else LeaderHint(reg.leader, reg.leader_epoch)

    # ------------------------------------------------------------------ produce

    async def produce(self, params: ProduceParams) -> list[ProducePartitionResult]:
        results: list[ProducePartitionResult] = []
        waits: list[tuple[int, HostedPartition]] = []
        acks_wait = AckWait()
        verified: Verified | None = None
        if params.transactional_id is not None and self.txn_verify is not None and not params.coordinator:
            verified = await verify_produce(
                params.transactional_id, params.partitions, self._leader_log, self.txn_verify, now_ms()
            )
        now = now_ms()
        acks = params.acks
        coordinator = params.coordinator
        for i, part in enumerate(params.partitions):
            if verified is None:
                guard = params.verification if coordinator else VERIFICATION_OFF
            else:
                refused = verified.refused.get(i)
                if refused is not None:
                    results.append(ProducePartitionResult(error=refused[0], error_message=refused[1]))
                    continue
                guard = verified.guard(i)
            result, waiting = self._append(part, acks, now, coordinator, guard, acks_wait, i)
            results.append(result)
            if waiting is not None:
                waits.append((i, waiting))
        await self._wait_for_acks(results, waits, acks_wait, params.timeout_ms)
        return results

    async def verify_coordinator_write(
        self, topic: str, partition: int, transactional_id: str, producer_id: int, producer_epoch: int
    ) -> tuple[VerificationGuard | None, ErrorCode]:
        """KIP-890 before a coordinator's transactional write (`txn_verification`): the guard
        for `ProduceParams.verification` and the transaction coordinator's code; verification
        off: (VERIFICATION_OFF, NONE)."""
        if self.txn_verify is None:
            return VERIFICATION_OFF, _NONE
        return await verify_coordinator_write(
            transactional_id, producer_id, producer_epoch, (topic, partition), self._leader_log, self.txn_verify,
            now_ms(),
        )  # fmt: skip

    async def _wait_for_acks(
        self,
        results: list[ProducePartitionResult],
        waits: list[tuple[int, HostedPartition]],
        acks_wait: AckWait,
        timeout_ms: int,
    ) -> None:
        """acks=all: wait up to `timeout_ms` for the appends of `waits` (result index, its
        partition), registered with `acks_wait` under their result index; an error replaces
        its result in place."""
        if not waits:
            return
        await acks_wait.wait(max(timeout_ms, 0) / 1000)
        codes = acks_wait.codes
        for i, hosted in waits:
            code = codes.get(i, ErrorCode.REQUEST_TIMED_OUT)
            if code != _NONE:
                r = results[i]
                results[i] = ProducePartitionResult(
                    error=code,
                    base_offset=r.base_offset if code == ErrorCode.REQUEST_TIMED_OUT else -1,
                    log_start_offset=hosted.log.log_start_offset,
                    current_leader=hosted.leader_hint() if code == ErrorCode.NOT_LEADER_OR_FOLLOWER else None,
                )

    def _append(
        self, part: ProducePartition, acks: int, now: int, coordinator: bool,
        verification: VerificationGuard | None, acks_wait: AckWait, index: int,
    ) -> tuple[ProducePartitionResult, HostedPartition | None]:  # fmt: skip
        records = part.records
        return self._append_to(
            part.topic,
            part.partition,
            acks,
            now,
            lambda hosted: hosted.log.append_as_leader(
                records, hosted.state.leader_epoch, now, coordinator=coordinator, verification=verification
            ),
            acks_wait,
            index,
        )

    def _leader_log(self, topic: str, partition: int) -> PartitionLog | None:
        hosted, error = self._leader_partition(topic, partition)
        return hosted.log if hosted is not None and error == _NONE else None

    def _append_to(
        self, topic: str, partition: int, acks: int, now: int, write: Callable[[HostedPartition], AppendInfo],
        acks_wait: AckWait, index: int,
    ) -> tuple[ProducePartitionResult, HostedPartition | None]:  # fmt: skip
        """The leader's append path of clients' batches and coordinators' markers: leadership,
        min.insync.replicas, `write`, then (acks=all) a waiter for the HW to pass the append,
        registered with `acks_wait` under `index` (the partition is returned with it)."""
        hosted, error = self._leader_partition(topic, partition)
        if error != _NONE or hosted is None:
            hint = self._hint(topic, partition) if error == ErrorCode.NOT_LEADER_OR_FOLLOWER else None
            return ProducePartitionResult(error=error, current_leader=hint), None
        state = hosted.state
        check = state.check_produce(acks, self.min_insync_replicas(topic))
        if check.error != _NONE:
            return ProducePartitionResult(error=check.error, error_message=check.message or None), None
        try:
            info = write(hosted)
        except LogError as exc:
            record_errors = tuple(RecordError(index, why) for index, why in exc.record_errors)
            return ProducePartitionResult(error=exc.code, error_message=str(exc), record_errors=record_errors), None
        except OSError as exc:
            log.error("append to %s-%d failed: %s", topic, partition, exc)
            return ProducePartitionResult(error=ErrorCode.KAFKA_STORAGE_ERROR, error_message=str(exc)), None
        state.on_local_append(now, hosted.log)
        hosted.progress.log_end_moved()
        if acks == -1:
            # Before the HW is looked at: a HW that already covers the append completes it now.
            hosted.acks.add(info.last_offset + 1, state.leader_epoch, acks_wait.waiter(index))
        self._advance(hosted)
        result = ProducePartitionResult(
            error=_NONE,
            base_offset=info.first_offset,
            log_append_time_ms=info.log_append_time_ms,
            log_start_offset=info.log_start_offset,
        )
        return result, (hosted if acks == -1 else None)

    # ------------------------------------------------------------------ transactions

    async def write_txn_markers(self, markers: Sequence[TxnMarker], timeout_ms: int) -> list[TxnMarkerResult]:
        """WriteTxnMarkers (Kafka's handleWriteTxnMarkersRequest): each marker is written as a
        control batch to each of its partitions this broker leads, with acks=all; a partition
        this broker does not host is UNKNOWN_TOPIC_OR_PARTITION (Kafka: no local log), a
        follower's NOT_LEADER_OR_FOLLOWER; the producer-state checks give
        INVALID_PRODUCER_EPOCH and TRANSACTION_COORDINATOR_FENCED."""
        results: list[ProducePartitionResult] = []
        waits: list[tuple[int, HostedPartition]] = []
        acks_wait = AckWait()
        now = now_ms()
        for m in markers:
            marker = EndTxnMarker(m.committed, m.coordinator_epoch)
            for topic, partition in m.partitions:
                if (topic, partition) not in self.partitions:
                    results.append(ProducePartitionResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                    continue

                def write(hosted: HostedPartition, m: TxnMarker = m, marker: EndTxnMarker = marker) -> AppendInfo:
                    return hosted.log.append_marker(
                        m.producer_id, m.producer_epoch, marker, hosted.state.leader_epoch, now
                    )

                result, waiting = self._append_to(topic, partition, -1, now, write, acks_wait, len(results))
                if waiting is not None:
                    waits.append((len(results), waiting))
                results.append(result)
        await self._wait_for_acks(results, waits, acks_wait, timeout_ms)
        out = []
        i = 0
        for m in markers:
            out.append(TxnMarkerResult(m.producer_id, tuple(r.error for r in results[i : i + len(m.partitions)])))
            i += len(m.partitions)
        return out

    def describe_producers(self, topic: str, partition: int) -> DescribeProducersResult:
        """DescribeProducers: the leader's active producers of the partition."""
        hosted, error = self._leader_partition(topic, partition)
        if error != _NONE or hosted is None:
            return DescribeProducersResult(error)
        producers = tuple(
            ProducerDescription(e.producer_id, e.producer_epoch, e.last_seq, e.last_timestamp, e.coordinator_epoch,
                                e.current_txn_first_offset)
            for e in hosted.log.producers.entries.values()
        )  # fmt: skip
        return DescribeProducersResult(_NONE, producers)

    # ------------------------------------------------------------------ fetch

    async def fetch(self, params: FetchParams) -> list[FetchPartitionResult]:
        """Answer at once when `min_bytes` are available, a partition has an error or a
        diverging epoch, or `max_wait_ms` is 0; else wait (Kafka's DelayedFetch) with one
        `FetchWaiter` registered once with each partition, re-reading only the partitions that
        woke it, until one of those holds or `max_wait_ms` expires. A follower's position is
        recorded once, by the first read (Kafka: the purgatory's re-reads do not update it)."""
        deadline = time.monotonic() + max(params.max_wait_ms, 0) / 1000
        follower = params.replica_id >= 0
        if params.session is not None and follower:
            return await self._fetch_in_session(params, params.session, deadline)
        results, total, urgent = self._read_all(params, follower)
        behind = params.yield_to  # a request behind this one on its connection ends the wait
        if urgent or total >= params.min_bytes or time.monotonic() >= deadline:
            return results
        if behind is not None and behind.done():
            return results
        waiter = FetchWaiter()

        def yield_now(_: object) -> None:
            waiter.interrupt()

        if behind is not None:
            behind.add_done_callback(yield_now)
        watching: list[FetchWatchers | None] = []  # by partition index: where `waiter` is registered
        for i, fp in enumerate(params.partitions):
            hosted = self.partitions.get((fp.topic, fp.partition))
            watching.append(None if hosted is None else hosted.progress)
            if hosted is not None:
                hosted.progress.watch(waiter, i, follower=follower)
        try:
            while True:
                woken = await waiter.wait(deadline - time.monotonic())
                changed = waiter.take_changed()
                if not woken:
                    # Expired: the answer carries the current HW and log start of every partition.
                    changed |= self._moved_offsets(params, results)
                total, urgent = self._reread(params, results, total, sorted(changed), follower, waiter, watching)
                if urgent or total >= params.min_bytes or not woken:
                    return results
        finally:
            if behind is not None:
                behind.remove_done_callback(yield_now)
            for watchers in watching:
                if watchers is not None:
                    watchers.unwatch(waiter)

    async def _fetch_in_session(
        self, params: FetchParams, session: SessionWatch, deadline: float
    ) -> list[FetchPartitionResult]:
        """An incremental fetch of a follower's session (`FetchParams.session`): read what the
        request names and what changed, each recording the follower's position; wait on the
        session (registered with its partitions for the session's life, not per fetch); read
        what changes meanwhile, in place or appended (`SessionWatch.extra`). The session's
        other partitions are not visited: their fetch is counted by the session's clock."""
        now = now_ms()
        parts: list[FetchPartition] = list(params.partitions)
        index: dict[TopicPartition, int] = {}
        results: list[FetchPartitionResult] = []
        total = 0
        urgent = False
        session.extra = []

        def first_read(fp: FetchPartition) -> None:
            nonlocal total, urgent
            key = (fp.topic, fp.partition)
            hosted = self.partitions.get(key)
            clock = session.register(key, None if hosted is None else hosted.progress)
            r = self._read_one(
                params, fp, max(params.max_bytes - total, 0), min_one=(total == 0), follower=True, now=now,
                idle_clock=clock,
            )  # fmt: skip
            index[key] = len(results)
            results.append(r)
            total += len(r.records)
            urgent = urgent or _urgent(r)

        follower = (self._fetch_broker_epoch(params), self.isr_eligible(params.replica_id))
        if session.follower is not None and session.follower != follower:
            # The follower was fenced, unfenced, shut down or registered again: what its fetches
            # recorded per partition (eligibility, broker epoch) is stale everywhere. Read the
            # whole session once, as a full fetch would (O(session) per such change).
            named = {(fp.topic, fp.partition) for fp in parts}
            for key in session.keys():
                again = session.request_of(key) if key not in named else None
                if again is not None:
                    parts.append(again)
                    session.extra.append(again)
        session.follower = follower
        for fp in parts:
            first_read(fp)
        # The fetches of this session from now on skip the partitions not read, until they change.
        session.last_fetch_ms = now
        while not (urgent or total >= params.min_bytes or time.monotonic() >= deadline):
            woken = await session.wait(deadline - time.monotonic())
            changed, session.changed = session.changed, set()
            now = now_ms()
            for key in sorted(changed):
                i = index.get(key)
                if i is None:
                    fp_new = session.request_of(key)
                    if fp_new is not None:  # else: it left the session meanwhile
                        parts.append(fp_new)
                        session.extra.append(fp_new)
                        first_read(fp_new)
                    continue
                hosted = self.partitions.get(key)
                session.register(key, None if hosted is None else hosted.progress)
                total, urgent_now = self._read_again(params, parts[i], results, i, total, follower=True, now=now)
                urgent = urgent or urgent_now
            if not woken:
                break
        return results

    def _read_all(self, params: FetchParams, follower: bool) -> tuple[list[FetchPartitionResult], int, bool]:
        """The first read of a fetch, every partition in order: (results, bytes, urgent)."""
        results: list[FetchPartitionResult] = []
        total = 0
        urgent = False
        budget = params.max_bytes
        now = now_ms()
        # Who the follower is, looked up once per fetch, not once per partition.
        broker_epoch = self._fetch_broker_epoch(params) if follower else -1
        eligible = self.isr_eligible(params.replica_id) if follower else False
        partitions = self.partitions
        for fp in params.partitions:
            hosted = partitions.get((fp.topic, fp.partition)) if follower else None
            if (
                hosted is not None
                and fp.current_leader_epoch == hosted.state.leader_epoch
                and hosted.state.on_idle_follower_fetch(
                    replica_id=params.replica_id,
                    fetch_offset=fp.fetch_offset,
                    last_fetched_epoch=fp.last_fetched_epoch,
                    log_start_offset=fp.log_start_offset,
                    now_ms=now,
                    log=hosted.log,
                    broker_epoch=broker_epoch,
                    isr_eligible=eligible,
                )
            ):
                # Caught up at the log end and the HW, as last time: nothing to read (the idle
                # partitions of a follower's fetch session cost this much, not a read).
                hw = hosted.state.high_watermark
                lso = hosted.log.last_stable_offset(hw)
                results.append(FetchPartitionResult(_NONE, hw, lso, hosted.log.log_start_offset))
                continue
            r = self._read_one(params, fp, budget, min_one=(total == 0), follower=follower, now=now)
            results.append(r)
            size = len(r.records)
            total += size
            budget = max(budget - size, 0)
            urgent = urgent or _urgent(r)
        return results, total, urgent

    def _reread(
        self,
        params: FetchParams,
        results: list[FetchPartitionResult],
        total: int,
        indexes: list[int],
        follower: bool,
        waiter: FetchWaiter,
        watching: list[FetchWatchers | None],
    ) -> tuple[int, bool]:
        """Read again the partitions at `indexes` (ascending) in place (`_read_again`), moving
        each one's registration if the partition was replaced meanwhile. Returns (bytes,
        urgent) of the whole answer."""
        urgent = False
        now = now_ms()
        for i in indexes:
            fp = params.partitions[i]
            total, urgent_now = self._read_again(params, fp, results, i, total, follower=follower, now=now)
            urgent = urgent or urgent_now
            hosted = self.partitions.get((fp.topic, fp.partition))
            current = None if hosted is None else hosted.progress
            registered = watching[i]
            if current is not registered:  # the partition was removed or replaced meanwhile
                if registered is not None:
                    registered.unwatch(waiter)
                if current is not None:
                    current.watch(waiter, i, follower=follower)
                watching[i] = current
        return total, urgent

    def _read_again(
        self,
        params: FetchParams,
        fp: FetchPartition,
        results: list[FetchPartitionResult],
        i: int,
        total: int,
        *,
        follower: bool,
        now: int,
    ) -> tuple[int, bool]:
        """Read `fp` again into ``results[i]`` without recording a follower's position (Kafka:
        the purgatory's re-reads do not). It gets the budget the other partitions leave
        (`max_bytes` less what they hold, ``total`` bytes with this one's old answer) and at
        least one batch if no other holds any, as in a first read. Returns (bytes of the
        whole answer, whether this partition's new answer is urgent)."""
        others = total - len(results[i].records)
        r = self._read_one(
            params, fp, max(params.max_bytes - others, 0), min_one=(others == 0), follower=follower, now=now,
            record=False,
        )  # fmt: skip
        results[i] = r
        return others + len(r.records), _urgent(r)

    def _moved_offsets(self, params: FetchParams, results: list[FetchPartitionResult]) -> set[int]:
        """Indexes whose HW or log start differ from those in their result (no wake says so to
        a follower's fetch, nor retention's log start move to anyone): read again at expiry."""
        moved = set()
        if len(params.partitions) != len(results):  # zip(strict=True)'s check, without its keyword call
            raise ValueError(f"{len(results)} results for {len(params.partitions)} partitions")
        for i, (fp, r) in enumerate(zip(params.partitions, results)):  # noqa: B905 - lengths checked above
            hosted = self.partitions.get((fp.topic, fp.partition))
            if (
                hosted is None
                or hosted.state.high_watermark != r.high_watermark
                or hosted.log.log_start_offset != r.log_start_offset
            ):
                moved.add(i)
        return moved

    def _read_one(
        self,
        params: FetchParams,
        fp: FetchPartition,
        budget: int,
        *,
        min_one: bool,
        follower: bool,
        now: int,
        record: bool = True,
        idle_clock: FetchClock | None = None,
    ) -> FetchPartitionResult:
        """One partition of a fetch. A follower's first read (`record`) records its position
        (ISR, HW) and may answer a diverging epoch; its re-reads only read. `idle_clock`: the
        follower's session, whose next fetches may skip the partition."""
        hosted = self.partitions.get((fp.topic, fp.partition))
        if hosted is None:
            t = self.image().topics.by_name.get(fp.topic)
            if t is None or fp.partition not in t.partitions:
                return FetchPartitionResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            return FetchPartitionResult(
                ErrorCode.NOT_LEADER_OR_FOLLOWER, current_leader=self._hint(fp.topic, fp.partition)
            )
        state = hosted.state
        plog = hosted.log
        error = state.check_leader_epoch(fp.current_leader_epoch, require_leader=follower or params.fetch_only_leader)
        if error != _NONE:
            hint = None if error == ErrorCode.UNKNOWN_LEADER_EPOCH else hosted.leader_hint()
            return FetchPartitionResult(error, current_leader=hint)
        if follower and not record:
            max_offset = plog.log_end_offset
        elif follower:
            outcome = state.on_follower_fetch(
                replica_id=params.replica_id,
                fetch_offset=fp.fetch_offset,
                last_fetched_epoch=fp.last_fetched_epoch,
                log_start_offset=fp.log_start_offset,
                now_ms=now,
                log=plog,
                broker_epoch=self._fetch_broker_epoch(params),
                isr_eligible=self.isr_eligible(params.replica_id),
                idle_clock=idle_clock,
            )
            if outcome.isr_expand_wanted:
                self._on_isr_change_wanted()
            if hosted.deletes:
                self._complete_deletes(hosted)
            if outcome.high_watermark_changed:
                # Only a moved HW releases acks=all waiters and consumers' long polls; never
                # other followers' (idle followers' long polls would wake each other forever).
                self._advance(hosted)
            if outcome.diverging_epoch is not None:
                return FetchPartitionResult(
                    _NONE,
                    high_watermark=state.high_watermark,
                    last_stable_offset=plog.last_stable_offset(state.high_watermark),
                    log_start_offset=plog.log_start_offset,
                    diverging_epoch=outcome.diverging_epoch,
                )
            if outcome.error != _NONE:
                return FetchPartitionResult(
                    outcome.error,
                    high_watermark=state.high_watermark,
                    log_start_offset=plog.log_start_offset,
                )
            max_offset = plog.log_end_offset
        else:
            max_offset = state.high_watermark
        hw = state.high_watermark
        lso = plog.last_stable_offset(hw)
        committed = not follower and params.isolation_level == READ_COMMITTED
        if committed:
            max_offset = lso  # Kafka: a read_committed consumer reads below the LSO only
        limit = min(fp.partition_max_bytes, budget) if not min_one else fp.partition_max_bytes
        try:
            records = plog.read_range(fp.fetch_offset, max(limit, 0), max_offset=max_offset, min_one_batch=min_one)
        except LogError as exc:
            return FetchPartitionResult(exc.code, high_watermark=hw, log_start_offset=plog.log_start_offset)
        aborted: tuple[AbortedTransaction, ...] = ()
        if committed and records is not None:
            upper = plog.upper_bound_offset(records, max_offset)
            aborted = tuple(
                AbortedTransaction(t.producer_id, t.first_offset)
                for t in plog.aborted_transactions(fp.fetch_offset, upper)
            )
        return FetchPartitionResult(
            _NONE,
            high_watermark=hw,
            last_stable_offset=lso,
            log_start_offset=plog.log_start_offset,
            records=b"" if records is None else records,
            aborted_transactions=aborted,
        )

    def _fetch_broker_epoch(self, params: FetchParams) -> int:
        """The broker epoch of the incarnation that sent a follower fetch (KIP-903). Fetch v15
        carries it; the replica fetchers here speak v12 (topics by name), which does not, so
        the leader takes the follower's registered epoch as it stands when the fetch is read: a
        restarted follower's first fetch read after its new registration resets what the
        leader knew of it, and an ISR change names the epoch its fetches were counted under,
        which the controller checks against the registration."""
        if params.replica_epoch >= 0:
            return params.replica_epoch
        b = self.image().cluster.brokers.get(params.replica_id)
        return -1 if b is None else b.epoch

    def isr_eligible(self, broker_id: int) -> bool:
        """KIP-841: only a registered, unfenced broker not shutting down may join an ISR."""
        b = self.image().cluster.brokers.get(broker_id)
        return b is not None and not b.fenced and not b.in_controlled_shutdown

    def partition_view(self, topic: str, partition: int) -> PartitionView | None:
        hosted = self.partitions.get((topic, partition))
        if hosted is None or not hosted.state.is_leader:
            return None
        brokers = self.image().cluster.brokers
        views = []
        for r in hosted.registration.replicas:
            b = brokers.get(r)
            rack = b.rack if b is not None else None
            if r == self.node_id:
                views.append(ReplicaView(r, rack, hosted.log.log_start_offset, hosted.log.log_end_offset, now_ms()))
            else:
                f = hosted.state.follower(r)
                if f is None:
                    continue
                views.append(ReplicaView(r, rack, f.log_start_offset, f.log_end_offset, f.last_caught_up_ms))

        return PartitionView(self.node_id, tuple(views))

    # ------------------------------------------------------------------ offsets

    async def list_offsets(
        self, replica_id: int, isolation_level: int, partitions: Sequence[ListOffsetsPartition]
    ) -> list[ListOffsetsResult]:
        out = []
        for p in partitions:
            hosted, error = self._leader_partition(p.topic, p.partition, p.current_leader_epoch)
            if hosted is not None and error == ErrorCode.NOT_LEADER_OR_FOLLOWER and replica_id == DEBUGGING_REPLICA_ID:
                error = _NONE
            if error != _NONE or hosted is None:
                hint = self._hint(p.topic, p.partition) if error == ErrorCode.NOT_LEADER_OR_FOLLOWER else None
                out.append(ListOffsetsResult(error, current_leader=hint))
                continue
            plog = hosted.log
            hw = hosted.state.high_watermark
            client = replica_id == CONSUMER_REPLICA_ID
            # What a client may read: below the HW, or the LSO for READ_COMMITTED (Kafka's
            # lastFetchableOffset); LATEST answers it, and no offset by time at or above it.
            fetchable = plog.last_stable_offset(hw) if isolation_level == READ_COMMITTED else hw
            # Kafka: a new leader whose HW is still below the start of its epoch does not know
            # yet what is committed: a client asking for the latest offset (or a time beyond
            # the HW) gets OFFSET_NOT_AVAILABLE and retries, rather than a stale offset.
            hw_lagging = client and hosted.state.epoch_start_offset > hw
            if p.timestamp == LATEST_TIMESTAMP:
                if hw_lagging:
                    out.append(ListOffsetsResult(ErrorCode.OFFSET_NOT_AVAILABLE))
                    continue
                # A replica (or a debugging tool) gets the log end; a client the HW or the LSO.
                offset = fetchable if client else plog.log_end_offset
                latest = plog.latest_epoch()
                out.append(ListOffsetsResult(_NONE, -1, offset, -1 if latest is None else latest))
                continue
            if p.timestamp == EARLIEST_TIMESTAMP:
                found = plog.offset_for_timestamp(EARLIEST_TIMESTAMP)
                start = plog.log_start_offset
                out.append(ListOffsetsResult(_NONE, -1, start, found[2] if found else -1))
                continue
            found = plog.offset_for_timestamp(p.timestamp)
            if found is None or (client and found[0] >= fetchable):
                code = ErrorCode.OFFSET_NOT_AVAILABLE if hw_lagging else _NONE
                out.append(ListOffsetsResult(code, -1, -1, -1))
                continue
            if p.timestamp == MAX_TIMESTAMP and found[0] >= hw and replica_id == CONSUMER_REPLICA_ID:
                out.append(ListOffsetsResult(_NONE, -1, -1, -1))
                continue
            offset, ts, epoch = found
            out.append(ListOffsetsResult(_NONE, ts, offset, epoch))
        return out

    async def offset_for_leader_epoch(self, replica_id: int, queries: Sequence[EpochQuery]) -> list[EpochEndOffset]:
        out = []
        for q in queries:
            hosted, error = self._leader_partition(q.topic, q.partition, q.current_leader_epoch)
            if error != _NONE or hosted is None:
                out.append(EpochEndOffset(error))
                continue
            epoch, end = hosted.log.end_offset_for_epoch(q.leader_epoch)
            out.append(EpochEndOffset(_NONE, epoch, end))
        return out

    async def delete_records(
        self, timeout_ms: int, partitions: Sequence[DeleteRecordsPartition]
    ) -> list[DeleteRecordsResult]:
        """DeleteRecords on the leader: move the log start, then answer once every live replica's
        log start has followed (Kafka's DelayedDeleteRecords: the low watermark), or with
        REQUEST_TIMED_OUT after ``timeout_ms``."""
        out: list[DeleteRecordsResult] = []
        waits: list[tuple[int, HostedPartition, asyncio.Future[DeleteRecordsResult]]] = []
        for p in partitions:
            hosted, error = self._leader_partition(p.topic, p.partition)
            if error != _NONE or hosted is None:
                out.append(DeleteRecordsResult(error))
                continue
            hw = hosted.state.high_watermark
            offset = hw if p.offset == -1 else p.offset
            if offset < 0 or offset > hw:
                out.append(DeleteRecordsResult(ErrorCode.OFFSET_OUT_OF_RANGE))
                continue
            try:
                low = hosted.log.delete_records_before(offset)
            except LogError as exc:
                out.append(DeleteRecordsResult(exc.code))
                continue
            out.append(DeleteRecordsResult(_NONE, low))
            fut: asyncio.Future[DeleteRecordsResult] = asyncio.get_running_loop().create_future()
            hosted.deletes.append((offset, fut))
            waits.append((len(out) - 1, hosted, fut))
            self._complete_deletes(hosted)
            hosted.progress.notify()  # followers long-polling learn the new log start now
        if waits:
            await asyncio.wait([w[2] for w in waits], timeout=max(timeout_ms, 0) / 1000)
            for i, hosted, fut in waits:
                if not fut.done():
                    fut.cancel()
                    hosted.deletes = [d for d in hosted.deletes if d[1] is not fut]
                    out[i] = DeleteRecordsResult(ErrorCode.REQUEST_TIMED_OUT, self._low_watermark(hosted))
                else:
                    out[i] = fut.result()
        return out

    def _low_watermark(self, hosted: HostedPartition) -> int:
        alive = self.image().cluster.brokers
        return hosted.state.low_watermark(hosted.log, lambda b: b in alive and not alive[b].fenced)

    def _complete_deletes(self, hosted: HostedPartition) -> None:
        low = self._low_watermark(hosted)
        keep = []
        for required, fut in hosted.deletes:
            if fut.done():
                continue
            if low >= required:
                fut.set_result(DeleteRecordsResult(_NONE, low))
            else:
                keep.append((required, fut))
        hosted.deletes = keep

    def _fail_deletes(self, hosted: HostedPartition, error: ErrorCode) -> None:
        deletes, hosted.deletes = hosted.deletes, []
        for _, fut in deletes:
            if not fut.done():
                fut.set_result(DeleteRecordsResult(error))

    def describe_log_dirs(self, topics: Mapping[str, Sequence[int]] | None) -> list[LogDirDescription]:
        import shutil

        out = []
        by_dir: dict[Path, list[LogDirPartition]] = {Path(d): [] for d in self.logs.log_dirs}
        for (topic, partition), hosted in sorted(self.partitions.items()):
            if topics is not None and partition not in topics.get(topic, ()):
                continue
            lag = 0 if hosted.state.is_leader else max(hosted.state.high_watermark - hosted.log.log_end_offset, 0)
            entry = LogDirPartition(topic, partition, hosted.log.size_bytes(), lag)
            by_dir.setdefault(hosted.log.directory.parent, []).append(entry)
        for d, parts in by_dir.items():
            try:
                usage = shutil.disk_usage(d)
                total, free = usage.total, usage.free
            except OSError:
                total, free = -1, -1
            error = ErrorCode.KAFKA_STORAGE_ERROR if self.logs.failures.is_offline(d) else _NONE
            out.append(LogDirDescription(str(d), error, tuple(parts), total, free))
        return out

    # ------------------------------------------------------------------ follower side

    def apply_fetch_answer(
        self, hosted: HostedPartition, fetch_offset: int, answer: LeaderAnswer, records: bytes | memoryview
    ) -> FollowerPlan:
        """One partition of the leader's Fetch answer (`broker.replica.follower`); wakes the
        long polls of consumers reading this follower."""
        plan = apply_fetch_answer(hosted.state, hosted.log, fetch_offset, answer, records)
        hosted.progress.offsets_moved(hosted.state.high_watermark, hosted.log.log_start_offset)
        return plan

    def apply_leader_offsets(self, hosted: HostedPartition, leader_start: int, leader_end: int) -> FollowerPlan:
        plan = apply_leader_offsets(hosted.state, hosted.log, leader_start, leader_end)
        hosted.progress.offsets_moved(hosted.state.high_watermark, hosted.log.log_start_offset)
        return plan

    # ------------------------------------------------------------------ periodic work

    def log_starts_may_have_moved(self) -> None:
        """After retention deleted segments: signal each moved log start (consumers' long polls,
        followers' fetch sessions learn it in their next answer)."""
        for hosted in self.partitions.values():
            hosted.progress.offsets_moved(hosted.state.high_watermark, hosted.log.log_start_offset)

    def high_watermarks(self) -> dict[TopicPartition, int]:
        return {tp: h.state.high_watermark for tp, h in self.partitions.items()}

    def advance_high_watermark(self, hosted: HostedPartition, now: int) -> None:
        """Recompute `hosted`'s HW without a fetch (`PartitionState.maybe_advance_high_watermark`)."""
        if hosted.state.maybe_advance_high_watermark(now, hosted.log):
            self._advance(hosted)

    def isr_changes_wanted(self, now: int) -> list[tuple[HostedPartition, tuple[int, ...]]]:
        """(partition, proposed ISR) for every led partition whose ISR should change now; the HW
        of each is recomputed on the way (time alone can release it, and idle partitions are
        not visited by fetches)."""
        out = []
        lag_ms = self.config.replica_lag_time_max_ms
        for hosted in self.partitions.values():
            if not hosted.state.is_leader:
                continue
            self.advance_high_watermark(hosted, now)
            proposed = hosted.state.proposed_isr(now, lag_ms, hosted.log)
            if proposed is not None:
                out.append((hosted, proposed))
        return out

    def close(self) -> None:
        self._log_creator.close()
        for hosted in self.partitions.values():
            hosted.acks.fail_all(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            self._fail_deletes(hosted, ErrorCode.NOT_LEADER_OR_FOLLOWER)
            hosted.progress.notify()
