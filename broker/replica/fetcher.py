"""Replica fetchers: one per source broker, carrying every partition followed from it.

As Kafka's ReplicaFetcherThread, a fetcher sends one Fetch (v12, `replica_id` = this
broker) for all the partitions this broker follows from one leader, long-polled by
`replica.fetch.wait.max.ms`, and applies the answer partition by partition. The fetches
run in a KIP-227 fetch session (`FetchSessionHandler`): after the first, full, fetch, a
request names only the partitions whose position changed (and forgets those that left),
and the answer lists only the partitions with something new, so an idle round costs what
changed, not what is followed; a refused session (FETCH_SESSION_ID_NOT_FOUND,
INVALID_FETCH_SESSION_EPOCH) makes the next fetch a full one, at once. What an answer
means is decided by `PartitionState.on_fetch_answer` and carried out by
`broker.replica.follower` (the replication simulation runs the same two): append; truncate
on a diverging epoch (KIP-320), always, even to the log end; restart an empty log at the
leader's first batch; on OFFSET_OUT_OF_RANGE ask the leader's log start and end
(ListOffsets as a replica) and truncate or restart; otherwise (NOT_LEADER_OR_FOLLOWER,
FENCED_LEADER_EPOCH, a log error) wait `replica.fetch.backoff.ms`: the next metadata delta
moves the partition to the right fetcher.

A fetcher never blocks the loop on disk beyond page-cache writes; a failed request backs
off `replica.fetch.backoff.ms` and retries with the same positions (appends are
idempotent by offset: a retried response continuing at the log end appends once).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Final
from uuid import UUID

from broker.log import LogError
from broker.replica.fetch_session_client import FetchSessionHandler
from broker.replica.fetch_wire import (
    EARLIEST_TIMESTAMP,
    FETCH_API_KEY,
    FETCH_VERSION,
    LATEST_TIMESTAMP,
    LIST_OFFSETS_API_KEY,
    LIST_OFFSETS_VERSION,
    FetchPartitionRequest,
    FetchWireError,
    ListOffsetsAnswer,
    decode_fetch_answer,
    decode_list_offsets_response,
    encode_fetch_request,
    encode_list_offsets_request,
)
from broker.replica.manager import HostedPartition, ReplicaManager, TopicPartition
from broker.replica.state import FollowerPlan, FollowerStep, LeaderAnswer
from quorum.kafka_errors import ErrorCode
from quorum.node.config import NodeConfig
from quorum.storage.record_batch import peek_batch_header
from quorum.wire.transport import PeerClient, PeerUnavailable, RequestPeer

# ErrorCode.NONE loaded once: in compiled code `ErrorCode.X` is a lookup through
# EnumType.__getattr__ (~900 instructions), and the data path asks it per partition.
_NONE: Final = ErrorCode.NONE

log = logging.getLogger(__name__)

FULL_SCAN_S = 5.0
"""How often a fetcher compares every partition's request with its log (seconds); between
two scans a round looks only at the partitions something marked."""


def _reported(plan: FollowerPlan) -> bool:
    """The follower's plans that `ReplicaFetcher._report` logs: a truncation, or a restart of
    the log (RESTART, or an APPEND at a new offset). A plain append, every fetch round's
    common case, reports nothing."""
    step = plan.step
    return (
        step is FollowerStep.TRUNCATE
        or step is FollowerStep.RESTART
        or (step is FollowerStep.APPEND and plan.offset >= 0)
    )


class ReplicaFetcher:
    def __init__(
        self,
        manager: ReplicaManager,
        config: NodeConfig,
        leader_id: int,
        endpoint: Callable[[int], tuple[str, int] | None],
    ) -> None:
        self.manager = manager
        self.config = config
        self.leader_id = leader_id
        self.endpoint = endpoint
        self.partitions: dict[TopicPartition, HostedPartition] = {}
        self._delayed_until: dict[TopicPartition, float] = {}  # monotonic seconds
        # (topic id, leader epoch) of each partition when last added (kept when it leaves: an
        # ISR change removes and adds it again, which needs no log line).
        self._epochs: dict[TopicPartition, tuple[UUID, int]] = {}
        self._wake = asyncio.Event()
        self._peer: PeerClient | None = None
        self._peer_address: tuple[str, int] | None = None
        self._correlation = 0
        self._task: asyncio.Task[None] | None = None
        # The partitions fetched now (not backing off), each with its request as last built and
        # the HostedPartition it was built for; rebuilt only for `_dirty` ones (O(changed) a round).
        self._wanted: dict[TopicPartition, FetchPartitionRequest] = {}
        self._wanted_hosted: dict[TopicPartition, HostedPartition] = {}
        self._dirty: set[TopicPartition] = set()
        """Partitions whose request may differ from `_wanted`: added, removed, answered (their
        log moved), backing off or back from it; and all of them every `FULL_SCAN_S`."""
        self._next_full_scan = 0.0  # monotonic seconds
        self.session = FetchSessionHandler(f"broker {config.node_id} fetching from broker {leader_id}")
        # Counters since start (tests and benchmarks read them).
        self.requests_sent = 0
        self.partitions_sent = 0  # partitions named in the requests (a full fetch names all)
        self.request_bytes_sent = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"replica-fetcher-{self.config.node_id}-{self.leader_id}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._peer is not None:
            await self._peer.close()

    def add(self, hosted: HostedPartition) -> None:
        """Fetch `hosted` from now on (again: its backoff ends). Logged when it is new here
        or its leader epoch changed, not on every metadata change of the partition (an ISR
        change re-adds it)."""
        epoch = (hosted.topic_id, hosted.state.leader_epoch)
        if self._epochs.get(hosted.tp) != epoch:
            log.info(
                "broker %d: fetching %s-%d from broker %d (epoch %d) at offset %d",
                self.config.node_id, hosted.topic, hosted.partition, self.leader_id, hosted.state.leader_epoch,
                hosted.log.log_end_offset,
            )  # fmt: skip
        self.partitions[hosted.tp] = hosted
        self._epochs[hosted.tp] = epoch
        self._delayed_until.pop(hosted.tp, None)
        self._dirty.add(hosted.tp)
        self._wake.set()

    def remove(self, hosted: HostedPartition) -> None:
        if self.partitions.get(hosted.tp) is hosted:
            del self.partitions[hosted.tp]
            self._delayed_until.pop(hosted.tp, None)
            self._dirty.add(hosted.tp)

    # ------------------------------------------------------------------ the loop

    def _connection(self) -> PeerClient | None:
        address = self.endpoint(self.leader_id)
        if address is None:
            return None
        if self._peer is None or self._peer_address != address:
            if self._peer is not None:
                asyncio.ensure_future(self._peer.close())
            timeout_s = (self.config.replica_socket_timeout_ms + self.config.replica_fetch_wait_max_ms) / 1000
            self._peer = PeerClient(address[0], address[1], connect_timeout_s=2.0, request_timeout_s=timeout_s)
            self._peer_address = address
        return self._peer

    def _refresh(self, now: float) -> set[TopicPartition]:
        """Bring `_wanted` up to date with the dirty partitions (and the backoffs that ended);
        returns those (the only ones whose request may have changed since the last round)."""
        if now >= self._next_full_scan:
            # A safety net for a change no path marks (e.g. this log's start moved by its own
            # retention): every partition's request is compared again, O(partitions) per scan.
            self._dirty.update(self.partitions)
            self._dirty.update(self._wanted)
            self._next_full_scan = now + FULL_SCAN_S
        for tp, until in list(self._delayed_until.items()):  # the partitions backing off: few
            if until <= now:
                del self._delayed_until[tp]
                self._dirty.add(tp)
        dirty, self._dirty = self._dirty, set()
        wanted = self._wanted
        for tp in dirty:
            hosted = self.partitions.get(tp)
            if hosted is None or tp in self._delayed_until:
                wanted.pop(tp, None)
                self._wanted_hosted.pop(tp, None)
                continue
            offset, last_epoch = hosted.state.fetch_position(hosted.log)
            epoch = hosted.state.leader_epoch
            log_start = hosted.log.log_start_offset
            part = wanted.get(tp)
            if (
                part is None
                or self._wanted_hosted.get(tp) is not hosted
                or part.fetch_offset != offset
                or part.current_leader_epoch != epoch
                or part.last_fetched_epoch != last_epoch
                or part.log_start_offset != log_start
            ):
                # The same object as last round when nothing moved: the session compares it by
                # identity first.
                wanted[tp] = FetchPartitionRequest(
                    topic=hosted.topic,
                    partition=hosted.partition,
                    current_leader_epoch=epoch,
                    fetch_offset=offset,
                    last_fetched_epoch=last_epoch,
                    log_start_offset=log_start,
                    partition_max_bytes=self.config.replica_fetch_max_bytes,
                )
                self._wanted_hosted[tp] = hosted
        return dirty

    async def _fetch_round(self, peer: RequestPeer) -> None:
        """One Fetch for the partitions wanted now, if any (`_run`'s round, for tests)."""
        changed = self._refresh(time.monotonic())
        if self._wanted:
            await self._fetch_once(peer, changed)

    async def _run(self) -> None:
        backoff_s = self.config.replica_fetch_backoff_ms / 1000
        while True:
            now = time.monotonic()
            changed = self._refresh(now)
            if not self._wanted:
                self._dirty.update(changed)  # the next request forgets those that left
                self._wake.clear()
                wait_s = min((t - now for t in self._delayed_until.values()), default=None)
                # asyncio.timeout, not wait_for: 3.11's wait_for swallows a cancel that lands after
                # a wake (add) and before this task resumes, and stop() then waits forever.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait_s):
                        await self._wake.wait()
                continue
            peer = self._connection()
            if peer is None:
                self._dirty.update(changed)
                await asyncio.sleep(backoff_s)
                continue
            try:
                await self._fetch_once(peer, changed)
            except (PeerUnavailable, FetchWireError, TimeoutError, OSError) as exc:
                log.info("broker %d: fetch from broker %d failed: %s", self.config.node_id, self.leader_id, exc)
                await asyncio.sleep(backoff_s)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("broker %d: fetcher for broker %d failed", self.config.node_id, self.leader_id)
                await asyncio.sleep(backoff_s)

    async def _fetch_once(self, peer: RequestPeer, changed: set[TopicPartition]) -> None:
        """One Fetch of `_wanted`, naming (in a session) only what `changed` holds that moved."""
        request = self.session.build_changes(self._wanted, changed)
        hosted_by_key = self._wanted_hosted
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        frame = encode_fetch_request(
            correlation_id=self._correlation,
            client_id=f"replica-fetcher-{self.config.node_id}",
            replica_id=self.config.node_id,
            max_wait_ms=self.config.replica_fetch_wait_max_ms,
            min_bytes=self.config.replica_fetch_min_bytes,
            max_bytes=self.config.replica_fetch_response_max_bytes,
            partitions=request.to_send,
            session_id=request.session_id,
            session_epoch=request.session_epoch,
            forgotten=request.forgotten,
        )
        self.requests_sent += 1
        self.partitions_sent += len(request.to_send)
        self.request_bytes_sent += len(frame)
        try:
            raw = await peer.send(frame, self._correlation, FETCH_API_KEY, FETCH_VERSION)
            answer = decode_fetch_answer(raw)
        except BaseException:
            self.session.handle_error()
            raise
        keys = [(p.topic, p.partition) for p in answer.partitions]
        self._dirty.update(keys)  # whatever is done with them, their positions may move
        if not self.session.handle_response(request, answer.error, answer.session_id, keys):
            if answer.error in (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH):
                return  # the next fetch is a full one, at once
            raise FetchWireError(f"fetch answered {answer.error.name}")
        out_of_range: list[tuple[HostedPartition, int]] = []
        for p in answer.partitions:
            key = (p.topic, p.partition)
            sent = request.session[key]  # handle_response checked that the session holds it
            hosted = hosted_by_key.get(key)
            epoch = sent.current_leader_epoch
            if hosted is None or self.partitions.get(key) is not hosted or hosted.state.leader_epoch != epoch:
                continue  # moved on while the request was out
            first = peek_batch_header(p.records, 0) if p.records else None
            leader_answer = LeaderAnswer(
                p.error,
                p.high_watermark,
                p.log_start_offset,
                p.diverging_epoch,
                None if first is None else (first[0], first[0] + first[3]),
            )
            step = self._apply(hosted, sent.fetch_offset, leader_answer, p.records)
            if step is FollowerStep.ASK_LEADER_OFFSETS:
                out_of_range.append((hosted, epoch))
        if out_of_range:
            await self._handle_out_of_range(peer, out_of_range)

    def _delay(self, hosted: HostedPartition) -> None:
        self._delayed_until[hosted.tp] = time.monotonic() + self.config.replica_fetch_backoff_ms / 1000
        self._dirty.add(hosted.tp)  # leaves the session while it backs off

    def _apply(
        self, hosted: HostedPartition, fetch_offset: int, answer: LeaderAnswer, records: bytes | memoryview
    ) -> FollowerStep:
        try:
            plan = self.manager.apply_fetch_answer(hosted, fetch_offset, answer, records)
        except LogError as exc:
            log.warning(
                "broker %d: cannot append to %s-%d from leader %d: %s",
                self.config.node_id, hosted.topic, hosted.partition, self.leader_id, exc,
            )  # fmt: skip
            self._delay(hosted)
            return FollowerStep.BACKOFF
        if _reported(plan):  # the message is built only for a truncation or a restart
            self._report(
                hosted, plan, f"leader {self.leader_id} diverges at epoch {(answer.diverging_epoch or (-1,))[0]}"
            )
        if plan.step is FollowerStep.BACKOFF:
            log.info(
                "broker %d: fetching %s-%d from broker %d: %s; retrying in %d ms",
                self.config.node_id, hosted.topic, hosted.partition, self.leader_id, answer.error.name,
                self.config.replica_fetch_backoff_ms,
            )  # fmt: skip
            self._delay(hosted)
        return plan.step

    def _report(self, hosted: HostedPartition, plan: FollowerPlan, why: str) -> None:
        if plan.step is FollowerStep.TRUNCATE:
            log.info(
                "broker %d: truncated %s-%d to %d (%s)",
                self.config.node_id, hosted.topic, hosted.partition, plan.offset, why,
            )  # fmt: skip
            if plan.below_high_watermark:
                log.warning(
                    "broker %d: %s-%d lost %d offsets below its high watermark (unclean leader election)",
                    self.config.node_id, hosted.topic, hosted.partition, plan.below_high_watermark,
                )  # fmt: skip
        elif _reported(plan):
            log.info(
                "broker %d: %s-%d restarts its log at offset %d (%s)",
                self.config.node_id, hosted.topic, hosted.partition, plan.offset, why,
            )  # fmt: skip

    async def _handle_out_of_range(self, peer: RequestPeer, parts: list[tuple[HostedPartition, int]]) -> None:
        """OFFSET_OUT_OF_RANGE: ask the leader's log start and log end (ListOffsets as a replica,
        as Kafka's fetcher does) and truncate or restart (`out_of_range_plan`)."""
        asked = [(h.topic, h.partition, epoch) for h, epoch in parts]
        offsets: dict[int, dict[TopicPartition, ListOffsetsAnswer]] = {}
        for timestamp in (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP):
            self._correlation = (self._correlation + 1) & 0x7FFFFFFF
            frame = encode_list_offsets_request(
                correlation_id=self._correlation,
                client_id=f"replica-fetcher-{self.config.node_id}",
                replica_id=self.config.node_id,
                timestamp=timestamp,
                partitions=asked,
            )
            raw = await peer.send(frame, self._correlation, LIST_OFFSETS_API_KEY, LIST_OFFSETS_VERSION)
            offsets[timestamp] = {(a.topic, a.partition): a for a in decode_list_offsets_response(raw)}
        for hosted, epoch in parts:
            start = offsets[EARLIEST_TIMESTAMP].get(hosted.tp)
            end = offsets[LATEST_TIMESTAMP].get(hosted.tp)
            if self.partitions.get(hosted.tp) is not hosted or hosted.state.leader_epoch != epoch:
                continue
            if start is None or end is None or start.error != _NONE or end.error != _NONE:
                self._delay(hosted)
                continue
            try:
                plan = self.manager.apply_leader_offsets(hosted, start.offset, end.offset)
            except LogError as exc:
                log.warning(
                    "broker %d: %s-%d out of range: %s", self.config.node_id, hosted.topic, hosted.partition, exc
                )  # fmt: skip
                self._delay(hosted)
                continue
            self._report(hosted, plan, f"out of range: leader's log is [{start.offset}, {end.offset})")
            if plan.step is FollowerStep.BACKOFF:
                self._delay(hosted)


class FetcherManager:
    """The fetchers of this broker, one per source broker (`num.replica.fetchers` = 1)."""

    def __init__(self, manager: ReplicaManager, config: NodeConfig, endpoint: Callable[[int], tuple[str, int] | None]):
        self.manager = manager
        self.config = config
        self.endpoint = endpoint
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._following: dict[TopicPartition, int] = {}

    def follow(self, hosted: HostedPartition) -> None:
        leader = hosted.registration.leader
        self.unfollow(hosted)
        fetcher = self.fetchers.get(leader)
        if fetcher is None:
            fetcher = self.fetchers[leader] = ReplicaFetcher(self.manager, self.config, leader, self.endpoint)
            fetcher.start()
        fetcher.add(hosted)
        self._following[hosted.tp] = leader

    def unfollow(self, hosted: HostedPartition) -> None:
        leader = self._following.pop(hosted.tp, None)
        if leader is not None and leader in self.fetchers:
            self.fetchers[leader].remove(hosted)

    async def stop(self) -> None:
        for f in self.fetchers.values():
            await f.stop()
        self.fetchers.clear()
