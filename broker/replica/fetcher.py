"""Replica fetchers: one per source broker, carrying every partition followed from it.

As Kafka's ReplicaFetcherThread, a fetcher sends one Fetch (v12, `replica_id` = this
broker) for all the partitions this broker follows from one leader, long-polled by
`replica.fetch.wait.max.ms`, and applies the answer partition by partition:

- records: appended as they are (`PartitionLog.append_as_follower`); the follower's high
  watermark becomes min(leader's HW, own log end);
- a diverging epoch: the log is truncated to where it agrees with the leader (KIP-320),
  then fetching resumes from there;
- OFFSET_OUT_OF_RANGE: the follower is below the leader's log start (start over at the
  leader's log start offset) or above its end (truncate to the leader's high watermark,
  which every ISR member has);
- NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH: this broker's metadata is behind or ahead
  of the leader's; the partition waits out `replica.fetch.backoff.ms` and the next
  metadata delta moves it to the right fetcher.

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

from broker.log import LogError
from broker.replica.fetch_wire import (
    FETCH_API_KEY,
    FETCH_VERSION,
    FetchPartitionRequest,
    FetchWireError,
    decode_fetch_response,
    encode_fetch_request,
)
from broker.replica.manager import HostedPartition, ReplicaManager, TopicPartition
from quorum.kafka_errors import ErrorCode
from quorum.node.config import NodeConfig
from quorum.wire.transport import PeerClient, PeerUnavailable

log = logging.getLogger(__name__)


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
        self._wake = asyncio.Event()
        self._peer: PeerClient | None = None
        self._peer_address: tuple[str, int] | None = None
        self._correlation = 0
        self._task: asyncio.Task[None] | None = None

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
        log.info(
            "broker %d: fetching %s-%d from broker %d (epoch %d) at offset %d",
            self.config.node_id, hosted.topic, hosted.partition, self.leader_id, hosted.state.leader_epoch,
            hosted.log.log_end_offset,
        )  # fmt: skip
        self.partitions[hosted.tp] = hosted
        self._delayed_until.pop(hosted.tp, None)
        self._wake.set()

    def remove(self, hosted: HostedPartition) -> None:
        if self.partitions.get(hosted.tp) is hosted:
            del self.partitions[hosted.tp]
            self._delayed_until.pop(hosted.tp, None)

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

    async def _run(self) -> None:
        backoff_s = self.config.replica_fetch_backoff_ms / 1000
        while True:
            now = time.monotonic()
            ready = [h for tp, h in self.partitions.items() if self._delayed_until.get(tp, 0.0) <= now]
            if not ready:
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
                await asyncio.sleep(backoff_s)
                continue
            try:
                await self._fetch_once(peer, ready)
            except (PeerUnavailable, FetchWireError, TimeoutError, OSError) as exc:
                log.info("broker %d: fetch from broker %d failed: %s", self.config.node_id, self.leader_id, exc)
                await asyncio.sleep(backoff_s)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("broker %d: fetcher for broker %d failed", self.config.node_id, self.leader_id)
                await asyncio.sleep(backoff_s)

    async def _fetch_once(self, peer: PeerClient, ready: list[HostedPartition]) -> None:
        requests = []
        sent: dict[TopicPartition, tuple[HostedPartition, int, int]] = {}
        for hosted in ready:
            offset, last_epoch = hosted.state.fetch_position(hosted.log)
            requests.append(
                FetchPartitionRequest(
                    topic=hosted.topic,
                    partition=hosted.partition,
                    current_leader_epoch=hosted.state.leader_epoch,
                    fetch_offset=offset,
                    last_fetched_epoch=last_epoch,
                    log_start_offset=hosted.log.log_start_offset,
                    partition_max_bytes=self.config.replica_fetch_max_bytes,
                )
            )
            sent[hosted.tp] = (hosted, hosted.state.leader_epoch, offset)
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        frame = encode_fetch_request(
            correlation_id=self._correlation,
            client_id=f"replica-fetcher-{self.config.node_id}",
            replica_id=self.config.node_id,
            max_wait_ms=self.config.replica_fetch_wait_max_ms,
            min_bytes=self.config.replica_fetch_min_bytes,
            max_bytes=self.config.replica_fetch_response_max_bytes,
            partitions=requests,
        )
        raw = await peer.send(frame, self._correlation, FETCH_API_KEY, FETCH_VERSION)
        top, parts = decode_fetch_response(raw)
        if top != ErrorCode.NONE:
            raise FetchWireError(f"fetch answered {top.name}")
        for p in parts:
            entry = sent.get((p.topic, p.partition))
            if entry is None:
                continue
            hosted, epoch, offset = entry
            if self.partitions.get(hosted.tp) is not hosted or hosted.state.leader_epoch != epoch:
                continue  # moved on while the request was out
            self._apply(hosted, p.error, p.records, p.high_watermark, p.log_start_offset, p.diverging_epoch, offset)

    def _delay(self, hosted: HostedPartition) -> None:
        self._delayed_until[hosted.tp] = time.monotonic() + self.config.replica_fetch_backoff_ms / 1000

    def _apply(
        self,
        hosted: HostedPartition,
        error: ErrorCode,
        records: bytes,
        leader_hw: int,
        leader_log_start: int,
        diverging: tuple[int, int] | None,
        fetch_offset: int,
    ) -> None:
        plog = hosted.log
        state = hosted.state
        if error == ErrorCode.NONE and diverging is not None:
            cut = state.truncation(diverging, plog)
            if cut.offset < plog.log_end_offset:
                self._truncate(hosted, cut.offset, f"leader {self.leader_id} diverges at epoch {diverging[0]}")
                if cut.below_high_watermark:
                    log.warning(
                        "broker %d: %s-%d lost %d offsets below its high watermark (unclean leader election)",
                        self.config.node_id, hosted.topic, hosted.partition, cut.below_high_watermark,
                    )  # fmt: skip
            state.on_truncated(plog)
            return
        if error == ErrorCode.NONE:
            if fetch_offset != plog.log_end_offset:
                return  # the log moved (truncated) while the request was out: refetch
            try:
                self.manager.follower_append(hosted, records, leader_hw, leader_log_start)
            except LogError as exc:
                log.warning(
                    "broker %d: cannot append to %s-%d from leader %d: %s",
                    self.config.node_id, hosted.topic, hosted.partition, self.leader_id, exc,
                )  # fmt: skip
                self._delay(hosted)
            return
        if error == ErrorCode.OFFSET_OUT_OF_RANGE and leader_log_start >= 0 and leader_hw >= 0:
            # The leader's HW stands in for its log end (HW <= LEO): truncating to it drops at
            # most records the leader would send again.
            action, offset = state.out_of_range_target(leader_log_start, leader_hw, plog)
            if action == "truncate":
                self._truncate(hosted, offset, "out of range: above the leader's high watermark")
            elif action == "restart":
                log.info(
                    "broker %d: %s-%d restarts at the leader's log start %d",
                    self.config.node_id, hosted.topic, hosted.partition, offset,
                )  # fmt: skip
                plog.truncate_fully_and_start_at(offset)
            else:
                self._delay(hosted)
            state.on_truncated(plog)
            return
        log.info(
            "broker %d: fetching %s-%d from broker %d: %s; retrying in %d ms",
            self.config.node_id, hosted.topic, hosted.partition, self.leader_id, error.name,
            self.config.replica_fetch_backoff_ms,
        )  # fmt: skip
        self._delay(hosted)

    def _truncate(self, hosted: HostedPartition, offset: int, why: str) -> None:
        log.info(
            "broker %d: truncating %s-%d from %d to %d (%s)",
            self.config.node_id, hosted.topic, hosted.partition, hosted.log.log_end_offset, offset, why,
        )  # fmt: skip
        hosted.log.truncate_to(offset)


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
