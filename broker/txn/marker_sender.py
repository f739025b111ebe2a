"""The marker sender: the coordinator's `MarkerRequest`s go to the current leaders of their
partitions as WriteTxnMarkers (API 27, v1), grouped per destination broker (Kafka's
TransactionMarkerChannelManager).

- Each (transaction, partition) waits until its partition has a leader in the metadata image
  (a partition whose leader is unknown waits for the next metadata change); a partition whose
  topic is gone is reported to `partitions_deleted` (no marker is needed there).
- One request is in flight per destination broker; the markers that came meanwhile go in the
  next one. Every partition's answer goes back to `markers_written`; the coordinator decides
  what is done and what to send again (then `send` is called again).
- A partition answered NOT_LEADER_OR_FOLLOWER or UNKNOWN_TOPIC_OR_PARTITION by a leader is
  retried only once the metadata shows it with another leader or leader epoch; a broker that
  cannot be reached (or answers garbage) is tried again after `retry_backoff_s`.
- Markers of a coordinator that moved or reloaded (`is_current` false) are dropped.

The connections are the replica fetcher's (`quorum.wire.transport.PeerClient`, one per broker:
`broker.txn.peers.PeerPool`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, Protocol

from broker.replica.fetch_wire import FetchWireError
from broker.txn.messages import MarkerRequest, TopicPartition
from broker.txn.peers import PeerPool
from broker.txn.txn_wire import (
    WRITE_TXN_MARKERS_API_KEY,
    WRITE_TXN_MARKERS_VERSION,
    decode_write_txn_markers_response,
    encode_write_txn_markers_request,
)
from quorum.kafka_errors import ErrorCode
from quorum.wire.transport import PeerUnavailable

__all__ = ["NO_PARTITION", "MarkerResults", "MarkerSender"]

log = logging.getLogger(__name__)

NO_PARTITION: Final = None  # `leader_of`'s answer for a partition that does not exist (topic deleted)
# Answers that mean "not here, ask the leader of the moment" (wait for the metadata to move).
_WAIT_FOR_METADATA: Final = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION})

# (leader id, -1 if none; leader epoch), or NO_PARTITION
LeaderLookup = Callable[[str, int], tuple[int, int] | None]


class MarkerResults(Protocol):
    """Where the results go (`broker.txn.runtime.TxnRuntime`)."""

    def markers_written(self, request: MarkerRequest, results: Mapping[TopicPartition, ErrorCode]) -> None: ...

    def partitions_deleted(self, request: MarkerRequest, partitions: frozenset[TopicPartition]) -> None: ...

    def is_current(self, request: MarkerRequest) -> bool: ...


@dataclass(slots=True)
class _Item:
    request: MarkerRequest
    tp: TopicPartition
    not_before: float = 0.0  # time.monotonic(): after a failed send


def _transaction(r: MarkerRequest) -> tuple[str, int, int, int, int]:
    return (r.transactional_id, r.producer_id, r.producer_epoch, r.coordinator_epoch, int(r.result))


class MarkerSender:
    def __init__(
        self,
        node_id: int,
        leader_of: LeaderLookup,
        endpoint: Callable[[int], tuple[str, int] | None],
        results: MarkerResults,
        *,
        request_timeout_s: float = 30.0,
        retry_backoff_s: float = 0.1,
    ) -> None:
        self.node_id = node_id
        self.leader_of = leader_of
        self.endpoint = endpoint
        self.results = results
        self.request_timeout_s = request_timeout_s
        self.retry_backoff_s = retry_backoff_s
        self._waiting: list[_Item] = []
        self._busy: set[int] = set()  # destination brokers with a request in flight
        # A partition refused by its leader of (id, epoch): not sent again while that holds.
        self._refused: dict[TopicPartition, tuple[int, int]] = {}
        self._peers = PeerPool(endpoint, request_timeout_s=request_timeout_s)
        self._correlation = itertools.count(1)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._sends: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ inputs

    def send(self, request: MarkerRequest) -> None:
        self._waiting.extend(_Item(request, tp) for tp in sorted(request.partitions))
        self._wake.set()

    def on_metadata(self) -> None:
        """Leaders may have moved: look at the waiting markers again."""
        if self._waiting:
            self._wake.set()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"txn-markers-{self.node_id}")

    async def stop(self) -> None:
        tasks = [t for t in (self._task, *self._sends) if t is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._task = None
        await self._peers.close()

    @property
    def waiting(self) -> int:
        """How many (transaction, partition) markers wait to be sent."""
        return len(self._waiting)

    # ------------------------------------------------------------------ the loop

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            self._send_ready()
            now = time.monotonic()
            later = [i.not_before - now for i in self._waiting if i.not_before > now]
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(later) if later else None):
                    await self._wake.wait()

    def _send_ready(self) -> None:
        """Start one request per idle destination with the markers whose leader it is."""
        now = time.monotonic()
        keep: list[_Item] = []
        deleted: dict[tuple[str, int, int, int, int], tuple[MarkerRequest, set[TopicPartition]]] = {}
        by_broker: dict[int, list[_Item]] = {}
        for item in self._waiting:
            if not self.results.is_current(item.request):
                continue  # the coordinator moved: its successor sends these
            leader = self.leader_of(*item.tp)
            if leader is NO_PARTITION:
                deleted.setdefault(_transaction(item.request), (item.request, set()))[1].add(item.tp)
                continue
            refused = self._refused.get(item.tp)
            if refused is not None and refused != leader:
                del self._refused[item.tp]
                refused = None
            if leader[0] < 0 or refused is not None or item.not_before > now or leader[0] in self._busy:
                keep.append(item)
                continue
            by_broker.setdefault(leader[0], []).append(item)
        self._waiting = keep
        for request, tps in deleted.values():
            self.results.partitions_deleted(request, frozenset(tps))
        for broker, items in by_broker.items():
            self._busy.add(broker)
            task = asyncio.get_running_loop().create_task(self._send_to(broker, items))
            self._sends.add(task)
            task.add_done_callback(self._sends.discard)

    async def _send_to(self, broker: int, items: list[_Item]) -> None:
        # One entry per transaction (a retry's request and the original's are the same markers).
        grouped: dict[tuple[str, int, int, int, int], tuple[MarkerRequest, list[TopicPartition]]] = {}
        for item in items:
            grouped.setdefault(_transaction(item.request), (item.request, []))[1].append(item.tp)
        leaders = {item.tp: self.leader_of(*item.tp) for item in items}
        try:
            answers = await self._exchange(broker, list(grouped.values()))
        except (PeerUnavailable, FetchWireError, TimeoutError, OSError) as exc:
            log.info("broker %d: transaction markers to broker %d failed: %s", self.node_id, broker, exc)
            retry_at = time.monotonic() + self.retry_backoff_s
            for item in items:
                item.not_before = retry_at
            self._waiting.extend(items)
            return
        finally:
            self._busy.discard(broker)
            self._wake.set()
        for request, tps in grouped.values():
            answered = answers.get(request.producer_id, {})
            results: dict[TopicPartition, ErrorCode] = {}
            for tp in tps:
                # A partition the answer leaves out was not handled: send it again.
                code = answered.get(tp, ErrorCode.NOT_LEADER_OR_FOLLOWER)
                results[tp] = code
                leader = leaders[tp]
                if code in _WAIT_FOR_METADATA and leader is not NO_PARTITION:
                    self._refused[tp] = leader
            self.results.markers_written(request, results)

    async def _exchange(
        self, broker: int, markers: list[tuple[MarkerRequest, list[TopicPartition]]]
    ) -> dict[int, dict[TopicPartition, ErrorCode]]:
        peer = self._peers.peer(broker)
        if peer is None:
            raise PeerUnavailable(f"broker {broker} has no inter-broker endpoint")
        correlation = next(self._correlation)
        frame = encode_write_txn_markers_request(markers, correlation, f"txn-markers-{self.node_id}")
        raw = await peer.send(frame, correlation, WRITE_TXN_MARKERS_API_KEY, WRITE_TXN_MARKERS_VERSION)
        return decode_write_txn_markers_response(raw)
