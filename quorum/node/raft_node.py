"""`RaftNode`: runs a `RaftCore` over the real log, the quorum-state file and TCP.

One asyncio task owns the core. Each turn it hands the core every message and
proposal that arrived, ticks it, and then carries out each `Ready` in the order
its contract demands: quorum-state (atomic rename), snapshot bytes, truncation,
appends, one fsync for all of them, and only then sends, applies committed
batches and resolves proposals. Blocking file IO happens on the loop thread on
purpose: while an fsync runs, new requests queue up and become the next group
commit (one batch, one fsync for many proposals).

Controllers serve the Raft RPCs on their controller listener; observers (brokers)
use the same class without a listener.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import random
import threading
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from quorum.node.bootstrap_voters import controller_endpoint
from quorum.node.config import HostPort, NodeConfig
from quorum.node.feature_updates import api_versions_result, handle_update_features
from quorum.node.meta_properties import StorageError
from quorum.node.state_machine import StateMachine
from quorum.raft.config import RaftConfig
from quorum.raft.core import RaftCore
from quorum.raft.describe import QuorumDescription, ReplicaDescription
from quorum.raft.errors import ErrorCode, NotLeaderError
from quorum.raft.log import RaftLog
from quorum.raft.messages import (
    REQUEST_TYPES,
    BeginQuorumEpochResponse,
    EndQuorumEpochResponse,
    Envelope,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Response,
    VoteResponse,
)
from quorum.raft.ready import Ready
from quorum.raft.roles import LeaderState, Role
from quorum.raft.types import Batch, Epoch, NodeId, Offset, OffsetAndEpoch
from quorum.raft.voter_change import AddVoter, RemoveVoter, UpdateVoter, VoterChange, VoterChangeResult
from quorum.raft.voter_set import KRAFT_VERSION_DYNAMIC, ZERO_UUID, VoterNode, VoterSet
from quorum.storage.file_log import FileLog
from quorum.storage.quorum_state import QuorumStateStore
from quorum.storage.snapshots import SnapshotStore, SnapshotVoters, decode_snapshot_full, encode_snapshot
from quorum.wire import codec, voter_codec
from quorum.wire.transport import CloseConnection, ConnectionLimits, PeerClient, PeerUnavailable, close_server, serve
from quorum.wire.transport import request as one_shot_request

log = logging.getLogger(__name__)

ResponseTypes = (VoteResponse, BeginQuorumEpochResponse, EndQuorumEpochResponse, FetchResponse, FetchSnapshotResponse)
# The requests that go on a peer's fetch channel (a tuple: `A | B` in an expression is a new
# union object per evaluation).
_FETCHES = (FetchRequest, FetchSnapshotRequest)

METADATA_PARTITION_DIR = "__cluster_metadata-0"
RELAY_CLIENT_ID = "pykraft-describe-relay"
# How often (s) the leader tries an AddRaftVoter again while its TimeoutMs lasts.
_ADD_VOTER_RETRY_S = 0.05
# Requests handled concurrently per connection on the controller listener (answers still go
# out in request order). Handlers start in request order and each puts its request into the
# Raft inbox, or decides and appends its controller write, before it first suspends, so the
# order in which a connection's requests take effect is unchanged. A broker forwards the REST
# writes it receives over a few pooled connections: one at a time per connection, their
# writes could share a commit only as many as there are connections (8).
CONTROLLER_PIPELINE_DEPTH = 64


def raft_config_of(config: NodeConfig) -> RaftConfig:
    return RaftConfig(
        election_timeout_ms=config.controller_quorum_election_timeout_ms,
        fetch_timeout_ms=config.controller_quorum_fetch_timeout_ms,
        election_backoff_max_ms=config.controller_quorum_election_backoff_max_ms,
        request_timeout_ms=config.controller_quorum_request_timeout_ms,
        retry_backoff_ms=config.controller_quorum_retry_backoff_ms,
        # Long polls must end well before a follower would give up on the leader.
        fetch_max_wait_ms=min(500, config.controller_quorum_fetch_timeout_ms // 2),
        sync_as_observer=config.is_controller,
    )


class _SnapshotSource:
    """The core's read-only view of the snapshot store."""

    def __init__(self, store: SnapshotStore) -> None:
        self._store = store

    def exists(self, snapshot_id: OffsetAndEpoch) -> bool:
        return self._store.contains(snapshot_id)

    def size(self, snapshot_id: OffsetAndEpoch) -> int:
        return self._store.size(snapshot_id)

    def read(self, snapshot_id: OffsetAndEpoch, position: int, max_bytes: int) -> bytes:
        return self._store.read(snapshot_id, position, max_bytes)


class _SyncThread:
    """The thread that runs a node's log fsyncs, one at a time, for its Raft task. A hand-off
    is a queue put and, when the fsync is over, one `call_soon_threadsafe`: less of the
    loop's time per batch than `asyncio.to_thread` (context copy, executor, a concurrent
    future chained to an asyncio one), and less Python for the thread to run while it holds
    the GIL (each fsync's two hand-offs wait for it)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[_SyncJob | None] = queue.SimpleQueue()
        # not `_thread`: mypyc names the C field `__thread`, a C keyword (thread-local storage)
        self._worker: threading.Thread | None = None

    def run(self, fn: Callable[[], None]) -> asyncio.Future[None]:
        """Run `fn` on the thread; the future resolves (or fails with its error) after it."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        if self._worker is None:
            self._worker = threading.Thread(target=self._serve, name=self._name, daemon=True)
            self._worker.start()
        self._jobs.put((fn, done, loop))
        return done

    def close(self) -> None:
        """Let the thread end once the jobs given before are done."""
        if self._worker is not None:
            self._jobs.put(None)
            self._worker = None

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            fn, done, loop = job
            error: Exception | None = None
            try:
                fn()
            except Exception as exc:  # the Raft task sees it, as it would from to_thread
                error = exc
            with contextlib.suppress(RuntimeError):  # the loop is closed: no one waits any more
                loop.call_soon_threadsafe(_settle, done, error)


_SyncJob = tuple[Callable[[], None], "asyncio.Future[None]", asyncio.AbstractEventLoop]


def _settle(done: asyncio.Future[None], error: Exception | None) -> None:
    if done.done():
        return
    if error is None:
        done.set_result(None)
    else:
        done.set_exception(error)


@dataclass(slots=True)
class _Waiter:
    last_offset: Offset
    epoch: Epoch
    future: asyncio.Future[Offset]


class RaftNode:
    def __init__(
        self,
        config: NodeConfig,
        *,
        cluster_id: str,
        state_machine: StateMachine,
        serve_raft: bool | None = None,
        on_commit: Callable[[Sequence[Batch]], None] | None = None,
        on_role_change: Callable[[Role, Epoch], None] | None = None,
        on_first_commit: Callable[[Epoch], None] | None = None,
        directory_id: uuid.UUID = ZERO_UUID,
    ) -> None:
        self.config = config
        self.directory_id = directory_id  # meta.properties' directory.id of the metadata log dir (KIP-853)
        self.node_id: NodeId = config.node_id
        self.cluster_id = cluster_id
        self.state_machine = state_machine
        # Where each voter listens: controller.quorum.voters (kraft.version 0), else (KIP-853) the
        # endpoints of the voter set in the log and the leader endpoints answers carry. Updated in
        # place (`_refresh_addresses`): the controller client reads it.
        self.voters: dict[NodeId, HostPort] = dict(config.controller_quorum_voters)
        self._endpoints = {nid: (hp.host, hp.port) for nid, hp in self.voters.items()}
        # controller.quorum.bootstrap.servers under Kafka's ids for them: -2, -3, ...
        self._bootstrap: dict[NodeId, HostPort] = {
            -2 - i: hp for i, hp in enumerate(config.controller_quorum_bootstrap_servers)
        }
        self._voter_set_seen: VoterSet | None = None
        self._voter_calls: deque[tuple[VoterChange, asyncio.Future[VoterChangeResult]]] = deque()
        self._voter_waiters: dict[int, asyncio.Future[VoterChangeResult]] = {}
        # KIP-853: the epoch in which this voter last asked its leader to update its endpoints
        # (UpdateRaftVoter), and the task doing it.
        self._update_sent_epoch = -1
        self._update_task: asyncio.Task[None] | None = None
        self._serve_raft = config.is_controller if serve_raft is None else serve_raft
        self._on_commit = on_commit
        self._on_role_change = on_role_change
        self._on_first_commit = on_first_commit
        self._first_commit_epoch = -1
        self.directory = Path(config.metadata_log_dir or config.log_dirs[0]) / METADATA_PARTITION_DIR
        self.raft_config = raft_config_of(config)
        self._snapshot_bytes = config.metadata_log_max_record_bytes_between_snapshots
        self._snapshot_interval_ms = config.metadata_log_max_snapshot_interval_ms

        self.core: RaftCore | None = None
        self._log: FileLog | None = None
        self._qstate = QuorumStateStore(self.directory / "quorum-state", voters=sorted(self.voters))
        self._snapshots: SnapshotStore | None = None
        self._server: asyncio.Server | None = None
        self._peers: dict[tuple[NodeId, str], PeerClient] = {}
        self._inbox: deque[Envelope] = deque()
        # Requests of the core that failed in the transport (refused, reset, timed out):
        # (destination, request id), reported to `RaftCore.request_failed`.
        self._failed: deque[tuple[NodeId, int]] = deque()
        self._proposals: deque[tuple[list[bytes], asyncio.Future[Offset]]] = deque()
        self._waiters: deque[_Waiter] = deque()
        self._inbound: dict[int, asyncio.Future[Response]] = {}
        self._next_inbound_id = -1  # inbound requests get negative ids; the core's own are positive
        self._wake = asyncio.Event()
        self._epoch_changed = asyncio.Event()  # set whenever the core's epoch or role changes
        self._task: asyncio.Task[None] | None = None
        self._send_tasks: set[asyncio.Task[None]] = set()
        self._closing = False
        self._correlation = 0
        self._last_role: tuple[Role, Epoch] | None = None
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = 0
        self._snapshot_task: asyncio.Future[int] | None = None
        # The fsync of the metadata log runs on a worker thread so that the loop keeps
        # reading, decoding and answering meanwhile (what arrives is batched into the next
        # append: group commit). While it runs nothing else touches the FileLog, and the
        # core is driven by `_step` alone: `resign` and finished snapshots are queued for it.
        self._flushing: asyncio.Future[None] | None = None
        self._sync_thread = _SyncThread(f"raft-fsync-{self.node_id}")
        self._resign_requested = False
        self._snapshots_created: deque[OffsetAndEpoch] = deque()
        self.fatal_error: BaseException | None = None
        # Called right before the core may append a voter-set change: the active controller
        # appends its open batch first, so that its records keep the offsets it gave them.
        self.before_voter_change: Callable[[], None] | None = None
        # Called after each fsync of the log, in the Raft task: the active controller appends
        # the writes that gathered during it (they go into the next fsync).
        self.after_flush: Callable[[], None] | None = None
        # Serves the APIs on the controller listener that are not the quorum's own.
        # The controller's apis: a coroutine, or a future the handler resolves itself.
        self.extra_api_handler: Callable[[int, bytes | bytearray], Awaitable[bytes | None]] | None = None
        self.failed = asyncio.Event()  # set when the loop stopped on an error
        self.stopped = asyncio.Event()

    # ------------------------------------------------------------ lifecycle

    @staticmethod
    def now_ms() -> int:
        return time.monotonic_ns() // 1_000_000

    async def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._snapshots = SnapshotStore(self.directory)
        self._log = FileLog.open(self.directory, segment_bytes=self.config.metadata_log_segment_bytes)
        recovery = getattr(self._log, "recovery", None)
        if recovery is not None:
            log.warning("metadata log recovered: %s", recovery)
        snapshot_id = self._snapshots.latest()
        start = self._log.start_offset
        if snapshot_id is not None and snapshot_id.offset > self._log.end_offset:
            # Crashed while installing a received snapshot: the log restarts after it.
            self._log.reset(snapshot_id.offset)
            start = snapshot_id.offset
        snapshot_voters: SnapshotVoters | None = None
        if snapshot_id is not None:
            _, records, snapshot_voters = decode_snapshot_full(self._snapshots.read_all(snapshot_id))
            self.state_machine.load_snapshot(snapshot_id.offset, records)
            start = max(start, snapshot_id.offset)
        elif start > 0:
            raise RuntimeError(f"{self.directory}: log starts at {start} but there is no snapshot")
        raft_log = RaftLog(self._log.batches, start_offset=start, snapshot_id=snapshot_id)
        now = self.now_ms()
        self._last_snapshot_ms = now
        voters: list[NodeId] | VoterSet = sorted(self.config.controller_quorum_voters)
        kraft_version: int | None = None
        if not voters:
            # KIP-853: the voter set of the bootstrap checkpoint or of the latest snapshot (the log's
            # VotersRecords apply on top); none yet for a node that joins (--no-initial-controllers,
            # brokers): it asks the bootstrap servers for the leader.
            voters = VoterSet(())
            if snapshot_voters is not None:
                kraft_version = snapshot_voters.kraft_version
                voters = snapshot_voters.voters or voters
        self.core = RaftCore(
            node_id=self.node_id,
            voters=voters,
            kraft_version=kraft_version,
            bootstrap=tuple(self._bootstrap) if not self.config.controller_quorum_voters else (),
            config=self.raft_config,
            rng=random.Random(),  # noqa: S311 - election jitter, not security
            now_ms=now,
            election=self._qstate.read(),
            log=raft_log,
            snapshots=_SnapshotSource(self._snapshots),
            directory_id=self.directory_id,
        )
        self._refresh_addresses(self.core)
        log.info(
            "node %d: log [%d, %d), snapshot %s, epoch %d, %s",
            self.node_id,
            raft_log.start_offset,
            raft_log.end_offset,
            snapshot_id,
            self.core.epoch,
            self.core.role.value,
        )
        if self._serve_raft:
            listener = self.config.controller_listeners[0]
            self._server = await serve(
                listener.host or "0.0.0.0",  # noqa: S104
                listener.port,
                self._handle_frame,
                limits=ConnectionLimits.from_config(self.config),
                pipeline_depth=CONTROLLER_PIPELINE_DEPTH,
                request_behind=False,  # no handler here answers early (a Fetch waits for data only)
            )
        self._task = asyncio.create_task(self._run(), name=f"raft-{self.node_id}")

    async def stop(self, *, graceful: bool = True, resign_wait_s: float | None = None) -> None:
        """Stop the node. Gracefully, a leader first resigns: it stops taking writes, lets a
        voter catch up (at most `RaftConfig.resign_catch_up_ms`), and tells the voters
        (EndQuorumEpoch) so that a successor is elected at once. It waits for that election
        at most `resign_wait_s` (default: the catch-up bound + 0.5 s)."""
        core = self.core
        if resign_wait_s is None:
            resign_wait_s = self.raft_config.resign_catch_up_ms / 1000 + 0.5
        if graceful and core is not None and self._task is not None and not self._task.done():
            if core.is_leader or core.role is Role.RESIGNED:
                self.resign()
                epoch = core.epoch
                deadline = time.monotonic() + resign_wait_s
                # Serve until the successor's election reaches us (our epoch moves on),
                # so that its pre-vote and vote can count ours; or until time is up.
                while time.monotonic() < deadline and core.epoch == epoch and not self._task.done():
                    self._epoch_changed.clear()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(deadline - time.monotonic()):
                            await self._epoch_changed.wait()
        self._closing = True
        self._wake.set()
        if self._server is not None:
            await close_server(self._server)
        if self._task is not None:
            # The loop sees _closing within a turn; cancelled (and waited for) if it does not.
            _, running = await asyncio.wait({self._task}, timeout=2)
            for task in running:
                task.cancel()
                await asyncio.wait({task})
        for task in [*self._send_tasks, *([self._update_task] if self._update_task is not None else [])]:
            task.cancel()
        for peer in self._peers.values():
            await peer.close()
        self._fail_waiters(NotLeaderError(-1, core.epoch if core else 0))
        for fut in self._inbound.values():
            if not fut.done():
                fut.cancel()
        if self._flushing is not None:
            with contextlib.suppress(Exception):
                await self._flushing
        self._sync_thread.close()
        if self._log is not None:
            self._log.close()
        self.stopped.set()

    def resign(self) -> None:
        """Start a graceful handover now (a process told to stop calls this first, before
        closing anything else): a leader stops taking writes and resigns as soon as a voter
        holds its whole log; `stop` then waits for the successor's election."""
        core = self.core
        if core is not None and self._task is not None and not self._task.done():
            self._resign_requested = True  # done by `_step`, the core's only driver
            self._wake.set()

    # ------------------------------------------------------------- writing

    def submit(self, records: Sequence[bytes]) -> asyncio.Future[Offset]:
        """Propose records; the future gives the offset of the last one once it is
        committed, or fails with NotLeaderError (the write may or may not commit)."""
        fut: asyncio.Future[Offset] = asyncio.get_running_loop().create_future()
        core = self.core
        if core is None or not core.accepts_writes:
            fut.set_exception(NotLeaderError(core.leader_id if core else -1, core.epoch if core else 0))
            return fut
        self._proposals.append((list(records), fut))
        self._wake.set()
        return fut

    async def append(self, records: Sequence[bytes]) -> Offset:
        return await self.submit(records)

    def propose_now(self, records: Sequence[bytes]) -> tuple[Offset, asyncio.Future[Offset]]:
        """Append at once (leader only): the records get offsets first .. first+n-1.

        Returns (first, future); the future gives the last offset once committed, or
        fails with NotLeaderError. Used by the active controller, which must know the
        offsets of what it writes (a broker's epoch is its registration's offset).
        """
        core = self.core
        if core is None or not core.accepts_writes:
            raise NotLeaderError(core.leader_id if core else -1, core.epoch if core else 0)
        fut: asyncio.Future[Offset] = asyncio.get_running_loop().create_future()
        now = self.now_ms()
        core.wall_clock_offset_ms = time.time_ns() // 1_000_000 - now
        first = core.propose(list(records), now)
        self._waiters.append(_Waiter(first + len(records) - 1, core.epoch, fut))
        self._wake.set()
        return first, fut

    # -------------------------------------------------------------- queries

    @property
    def role(self) -> Role:
        assert self.core is not None
        return self.core.role

    @property
    def high_watermark(self) -> Offset:
        assert self.core is not None
        return self.core.high_watermark

    def describe(self) -> QuorumDescription:
        """DescribeQuorum with timestamps converted to wall-clock epoch ms."""
        assert self.core is not None
        d = self.core.describe()
        shift = int(time.time() * 1000) - self.now_ms()

        def wall(rows: tuple[ReplicaDescription, ...]) -> tuple[ReplicaDescription, ...]:
            return tuple(
                ReplicaDescription(
                    r.replica_id,
                    r.log_end_offset,
                    r.last_fetch_ms + shift if r.last_fetch_ms >= 0 else -1,
                    r.last_caught_up_ms + shift if r.last_caught_up_ms >= 0 else -1,
                    r.directory_id,
                )
                for r in rows
            )

        return QuorumDescription(d.leader_id, d.leader_epoch, d.high_watermark, wall(d.voters), wall(d.observers))

    # ------------------------------------------------------------ the loop

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        core = self.core
        assert core is not None
        try:
            await self._step()
            while not self._closing:
                if not (self._inbox or self._proposals or self._failed or self._pending_calls() or core.has_ready()):
                    delay = max(0, core.next_deadline() - self.now_ms()) / 1000
                    self._wake.clear()
                    timer = loop.call_later(delay, self._wake.set)
                    await self._wake.wait()
                    timer.cancel()
                else:
                    await asyncio.sleep(0)  # let the network deliver what is ready
                await self._step()
        except Exception as exc:  # a safety check failed: stop rather than go on wrongly
            log.exception("node %d: raft loop failed", self.node_id)
            self.fatal_error = exc
            self._closing = True
            self.failed.set()

    def _pending_calls(self) -> bool:
        return self._resign_requested or bool(self._snapshots_created) or bool(self._voter_calls)

    def _refresh_addresses(self, core: RaftCore) -> None:
        """Learn the voters' addresses from the voter set (KIP-853 VotersRecord endpoints): the
        endpoint named by our first controller listener name, else the voter's first one."""
        self._voter_set_seen = core.voter_set
        wanted = self.config.controller_listener_names[0] if self.config.controller_listener_names else ""
        for node in core.voter_set.nodes:
            if not node.endpoints:
                continue
            ep = next((e for e in node.endpoints if e.name == wanted), node.endpoints[0])
            self._learn_address(node.node_id, ep.host, ep.port)

    def _learn_address(self, node_id: NodeId, host: str, port: int) -> None:
        if node_id < 0 or node_id in self.config.controller_quorum_voters:
            return  # the static configuration wins
        if self.voters.get(node_id) != HostPort(host, port):
            self.voters[node_id] = HostPort(host, port)
            self._endpoints[node_id] = (host, port)

    async def _step(self) -> None:
        core = self.core
        assert core is not None
        now = self.now_ms()
        core.wall_clock_offset_ms = time.time_ns() // 1_000_000 - now
        if self._resign_requested:
            self._resign_requested = False
            core.resign(now)
        while self._snapshots_created:
            sid = self._snapshots_created.popleft()
            if sid.offset <= core.high_watermark:
                core.snapshot_created(sid)
        while self._inbox:
            core.handle(self._inbox.popleft(), now)
        while self._failed:
            destination, request_id = self._failed.popleft()
            core.request_failed(destination, request_id, now)
        if self._proposals:
            self._propose(core, now)
        while self._voter_calls:
            change, fut = self._voter_calls.popleft()
            if not fut.done():
                if self.before_voter_change is not None and core.accepts_writes:
                    self.before_voter_change()
                self._voter_waiters[core.change_voters(change, now)] = fut
        core.tick(now)
        while core.has_ready():
            ready = core.ready()
            # A leader's committed batches are durable on a majority already: applied and
            # answered before it fsyncs newer entries, not one fsync later.
            committed_first = ready.must_sync and bool(ready.committed) and isinstance(core.state, LeaderState)
            if committed_first:
                self._apply(ready.committed)
                self._resolve_waiters(core)
            flushed = self._persist(ready)
            sent = flushed and ready.send_before_sync
            if sent:
                # A leader's messages leave now: its followers fetch and fsync these entries
                # while it fsyncs them (its own share of the high watermark waits for its fsync).
                self._dispatch(ready.messages)
            if flushed:
                await self._flush()
            if not sent:
                self._dispatch(ready.messages)
            if ready.committed and not committed_first:
                self._apply(ready.committed)
            if ready.delete_before is not None:
                self._delete_before(ready.delete_before)
            for result in ready.voter_changes:
                waiter = self._voter_waiters.pop(result.token, None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(result)
            core.advance(ready)
            if ready.high_watermark is not None or self._waiters:
                self._resolve_waiters(core)
            if flushed:
                if self.after_flush is not None:
                    self.after_flush()
                if self._first_commit_epoch == core.epoch:
                    # A leader past its first commit starts a new turn, which takes what
                    # arrived during the fsync (followers' acks of earlier entries, votes,
                    # resign and voter calls, timers) before the next fsync: a write proposed
                    # meanwhile must not hold up the commit of those before it.
                    break
        self._note_role(core)
        if core.voter_set is not self._voter_set_seen:
            self._refresh_addresses(core)
        self._maybe_update_voter(core)
        state = core.state
        if isinstance(state, LeaderState) and state.hw_known and self._first_commit_epoch != core.epoch:
            # The leader's first record of its epoch is committed: it can serve writes.
            self._first_commit_epoch = core.epoch
            if self._on_first_commit is not None:
                self._on_first_commit(core.epoch)

    def _propose(self, core: RaftCore, now: int) -> None:
        if not core.accepts_writes:
            while self._proposals:
                _, fut = self._proposals.popleft()
                if not fut.done():
                    fut.set_exception(NotLeaderError(core.leader_id, core.epoch))
            return
        records: list[bytes] = []
        futures: list[tuple[int, asyncio.Future[Offset]]] = []
        while self._proposals:
            recs, fut = self._proposals.popleft()
            records.extend(recs)
            futures.append((len(records), fut))
        first = core.propose(records, now)
        for count, fut in futures:
            self._waiters.append(_Waiter(first + count - 1, core.epoch, fut))

    def _resolve_waiters(self, core: RaftCore) -> None:
        hw = core.high_watermark
        waiters = self._waiters
        while waiters and waiters[0].last_offset < hw:
            w = waiters.popleft()
            if not w.future.done():
                w.future.set_result(w.last_offset)
        if waiters and (not core.is_leader or core.epoch != waiters[0].epoch):
            self._fail_waiters(NotLeaderError(core.leader_id, core.epoch))

    def _fail_waiters(self, error: Exception) -> None:
        while self._waiters:
            w = self._waiters.popleft()
            if not w.future.done():
                w.future.set_exception(error)
        while self._proposals:
            _, fut = self._proposals.popleft()
            if not fut.done():
                fut.set_exception(error)

    def _note_role(self, core: RaftCore) -> None:
        current = (core.role, core.epoch)
        if current != self._last_role:
            self._epoch_changed.set()
            if self._last_role is None or self._last_role[0] is not core.role:
                log.info(
                    "node %d: %s in epoch %d (leader %d)", self.node_id, core.role.value, core.epoch, core.leader_id
                )
            self._last_role = current
            if self._waiters and not core.is_leader:
                self._fail_waiters(NotLeaderError(core.leader_id, core.epoch))
            if self._on_role_change is not None:
                self._on_role_change(core.role, core.epoch)

    # ----------------------------------------------------------- persisting

    def _persist(self, ready: Ready) -> bool:
        """Write what `ready` asks for; True when the log must be fsynced (`_flush`) before
        its messages go out."""
        assert self._log is not None and self._snapshots is not None
        if ready.election is not None:
            self._qstate.write(ready.election)
        for chunk in ready.snapshot_chunks:
            if chunk.position == 0:
                self._snapshots.begin_receive(chunk.snapshot_id, chunk.size)
            self._snapshots.write_chunk(chunk.snapshot_id, chunk.position, chunk.data)
        if ready.install_snapshot is not None:
            sid = ready.install_snapshot
            self._snapshots.finish_receive(sid)
            self._log.reset(sid.offset)
            _, records, snapshot_voters = decode_snapshot_full(self._snapshots.read_all(sid))
            self.state_machine.load_snapshot(sid.offset, records)
            if snapshot_voters is not None and self.core is not None:
                self.core.load_snapshot_voters(sid, snapshot_voters.kraft_version, snapshot_voters.voters)
            self._bytes_since_snapshot = 0
            log.info("node %d: installed snapshot %s", self.node_id, sid)
        if ready.truncate_to is not None:
            log.info("node %d: truncating the metadata log to %d", self.node_id, ready.truncate_to)
            self._log.truncate_to(ready.truncate_to)
        if ready.entries:
            self._log.append(ready.entries)
        return ready.must_sync

    async def _flush(self) -> None:
        """fsync the log on the node's sync thread. If the Raft task is cancelled meanwhile (`stop`),
        the flush still finishes before `stop` closes the log (`_flushing`)."""
        log_ = self._log
        assert log_ is not None
        self._flushing = self._sync_thread.run(log_.flush)
        try:
            await asyncio.shield(self._flushing)
        finally:
            if self._flushing.done():
                self._flushing = None

    def _apply(self, batches: Sequence[Batch]) -> None:
        sm = self.state_machine
        for batch in batches:
            if batch.end_offset <= sm.applied_offset:
                continue
            sm.apply(batch)
            self._bytes_since_snapshot += sum(len(r) for r in batch.records)
        if self._on_commit is not None:
            self._on_commit(batches)
        self._maybe_snapshot()

    def _maybe_snapshot(self) -> None:
        core = self.core
        assert core is not None and self._snapshots is not None
        if self._snapshot_task is not None:
            return  # one snapshot at a time
        now = self.now_ms()
        due = self._bytes_since_snapshot >= self._snapshot_bytes or (
            self._snapshot_interval_ms > 0
            and self._bytes_since_snapshot > 0
            and now - self._last_snapshot_ms >= self._snapshot_interval_ms
        )
        offset = self.state_machine.applied_offset
        if not due or offset <= core.log.start_offset or offset > core.high_watermark:
            return
        sid = core.snapshot_id_at(offset)
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = now
        if self._snapshots.contains(sid):
            core.snapshot_created(sid)
            return
        timestamp = core.log.batches[core.log.index_of(offset - 1)].timestamp_ms
        # The records are captured now (the state is immutable or copied); encoding and
        # the fsynced write happen on a worker thread so the Raft loop keeps serving.
        records = self.state_machine.snapshot_records()
        store = self._snapshots
        kraft_version, voter_set = core.voters_at(offset)
        voters = SnapshotVoters(kraft_version, voter_set)

        def write() -> int:
            data = encode_snapshot(sid, records, last_contained_timestamp_ms=timestamp, voters=voters)
            store.create(sid, data)
            return len(data)

        task = asyncio.get_running_loop().run_in_executor(None, write)
        self._snapshot_task = task
        task.add_done_callback(lambda done: self._snapshot_written(sid, done))

    def _snapshot_written(self, sid: OffsetAndEpoch, done: asyncio.Future[int]) -> None:
        self._snapshot_task = None
        if done.cancelled() or self.core is None or self._closing:
            return
        error = done.exception()
        if error is not None:
            log.error("node %d: writing snapshot %s failed: %s", self.node_id, sid, error)
            return
        log.info("node %d: wrote snapshot %s (%d bytes)", self.node_id, sid, done.result())
        self._snapshots_created.append(sid)  # told to the core by `_step`
        self._wake.set()

    def _delete_before(self, offset: Offset) -> None:
        assert self._log is not None and self._snapshots is not None
        self._log.delete_before(offset)
        # Keep the two newest snapshots so that a transfer in progress can finish.
        snapshots = self._snapshots.list()
        if len(snapshots) > 2:
            self._snapshots.delete_before(snapshots[-2])

    # --------------------------------------------------------------- network

    def _dispatch(self, messages: Sequence[Envelope]) -> None:
        for env in messages:
            if env.is_request:
                task = asyncio.create_task(self._send_request(env))
                self._send_tasks.add(task)
                task.add_done_callback(self._send_tasks.discard)
            else:
                fut = self._inbound.pop(env.request_id, None)
                if fut is not None and not fut.done() and isinstance(env.message, ResponseTypes):
                    fut.set_result(env.message)

    def _peer(self, node_id: NodeId, channel: str) -> PeerClient | None:
        key = (node_id, channel)
        peer = self._peers.get(key)
        address = self.voters.get(node_id) or self._bootstrap.get(node_id)
        if peer is not None and address is not None and (peer.host, peer.port) != address:
            # The replica of this id moved (replaced with a new listener): reconnect.
            task = asyncio.create_task(peer.close())
            self._send_tasks.add(task)
            task.add_done_callback(self._send_tasks.discard)
            peer = None
        if peer is None:
            if address is None:
                return None
            timeout = self.raft_config.request_timeout_ms / 1000
            peer = PeerClient(address.host, address.port, connect_timeout_s=timeout, request_timeout_s=timeout)
            self._peers[key] = peer
        return peer

    async def _send_request(self, env: Envelope) -> None:
        # Fetches long-poll; they get their own connection so that votes and
        # epoch changes never wait behind a parked fetch.
        message = env.message
        if not isinstance(message, REQUEST_TYPES):
            return
        channel = "fetch" if isinstance(message, _FETCHES) else "control"
        peer = self._peer(env.destination, channel)
        if peer is None:
            return
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        corr = self._correlation
        try:
            api_key = codec.api_key_of(message)
            api_version = codec.REQUEST_VERSIONS[api_key]
            frame = codec.encode_request(
                message,
                correlation_id=corr,
                client_id=f"raft-{self.node_id}",
                cluster_id=self.cluster_id,
                source_id=self.node_id,
                destination_id=env.destination,
                api_version=api_version,
                endpoints=self._endpoints,
            )
            raw = await peer.send(frame, corr, api_key, api_version)
            _, response = codec.decode_response(api_key, api_version, raw, request=message)
            leader = getattr(response, "leader_id", -1)
            if isinstance(leader, int) and leader >= 0 and leader not in self.voters:
                # KIP-853: a replica that knows no voters learns where the leader listens.
                for nid, (host, port) in codec.response_node_endpoints(api_key, api_version, raw).items():
                    self._learn_address(nid, host, port)
        except (PeerUnavailable, TimeoutError, OSError) as exc:
            # The connection was refused, reset or timed out: the core learns it at once (a
            # follower whose leader's process is gone stands without waiting for the fetch timeout).
            log.debug("node %d: request to %d failed: %s", self.node_id, env.destination, exc)
            if not self._closing:
                self._failed.append((env.destination, env.request_id))
                self._wake.set()
            return
        except codec.WireError as exc:
            log.debug("node %d: bad answer from %d: %s", self.node_id, env.destination, exc)
            return
        if not isinstance(response, ResponseTypes):
            return
        self._inbox.append(Envelope(env.destination, self.node_id, env.request_id, response))
        self._wake.set()

    async def _relay_describe(self, leader_id: NodeId) -> QuorumDescription | None:
        """A follower answers DescribeQuorum with its leader's answer, so that any
        controller can be the CLI's bootstrap (relayed once: never relayed again)."""
        address = self.voters.get(leader_id)
        if address is None or leader_id == self.node_id:
            return None
        api_key = codec.api_key_of(codec.DescribeQuorumCall())
        version = codec.REQUEST_VERSIONS[api_key]
        frame = codec.encode_request(
            codec.DescribeQuorumCall(),
            correlation_id=1,
            client_id=RELAY_CLIENT_ID,
            cluster_id=self.cluster_id,
            source_id=self.node_id,
            destination_id=leader_id,
            api_version=version,
        )
        try:
            async with asyncio.timeout(2.0):
                raw = await one_shot_request(address.host, address.port, frame)
            _, answer = codec.decode_response(api_key, version, raw)
        except (PeerUnavailable, codec.WireError, TimeoutError, OSError):
            return None
        return answer if isinstance(answer, QuorumDescription) else None

    def _handle_frame(self, frame: bytes | bytearray) -> Awaitable[bytes | None]:
        """The listener's handler: what answers `frame` (the handler of its api's own, not a
        coroutine awaiting it: a controller write is answered by a future of its own)."""
        if len(frame) >= 2:
            api_key = (frame[0] << 8) | frame[1]
            if api_key >= 0x8000:
                api_key -= 0x10000  # int16, big-endian
            if api_key in codec.VOTER_API_VERSIONS:
                return self._handle_voter_call(frame)
            if api_key in codec.FEATURE_API_VERSIONS:
                return handle_update_features(self, frame)  # kraft.version upgrade
            if self.extra_api_handler is not None and api_key not in codec.API_VERSIONS:
                # Not a quorum API: the controller's (CreateTopics, BrokerHeartbeat, ...).
                return self.extra_api_handler(api_key, frame)
        return self._handle_quorum_frame(frame)

    async def _handle_quorum_frame(self, frame: bytes | bytearray) -> bytes | None:
        try:
            request = codec.decode_request(frame)
        except codec.WireError as exc:
            answer = codec.error_response_for(exc)
            if answer is None:
                raise CloseConnection from exc
            return answer
        if request.cluster_id is not None and request.cluster_id != self.cluster_id:
            log.warning(
                "node %d: refused %s from cluster %s (ours is %s)",
                self.node_id,
                type(request.message).__name__,
                request.cluster_id,
                self.cluster_id,
            )
            return codec.encode_response(request, ErrorCode.INCONSISTENT_CLUSTER_ID, cluster_id=self.cluster_id)
        message = request.message
        if isinstance(message, codec.ApiVersionsCall):
            return codec.encode_response(request, api_versions_result(self), cluster_id=self.cluster_id)
        if isinstance(message, codec.DescribeQuorumCall):
            core = self.core
            described: QuorumDescription | None = None
            if core is not None and core.is_leader:
                described = self.describe()
            elif core is not None and request.client_id != RELAY_CLIENT_ID:
                described = await self._relay_describe(core.leader_id)
            if described is None:
                return codec.encode_response(request, ErrorCode.NOT_LEADER_OR_FOLLOWER, cluster_id=self.cluster_id)
            return codec.encode_response(request, described, cluster_id=self.cluster_id, endpoints=self._endpoints)
        if self._closing or self.core is None:
            return codec.encode_response(request, ErrorCode.BROKER_NOT_AVAILABLE, cluster_id=self.cluster_id)
        request_id = self._next_inbound_id
        self._next_inbound_id -= 1
        fut: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._inbound[request_id] = fut
        self._inbox.append(Envelope(request.source_id, self.node_id, request_id, message))
        self._wake.set()
        try:
            async with asyncio.timeout(self.raft_config.request_timeout_ms / 1000 + 1):
                response = await fut
        except (TimeoutError, asyncio.CancelledError):  # also: stop() cancels the answers it leaves
            self._inbound.pop(request_id, None)
            return codec.encode_response(request, ErrorCode.REQUEST_TIMED_OUT, cluster_id=self.cluster_id)
        return codec.encode_response(request, response, cluster_id=self.cluster_id, endpoints=self._endpoints)

    @property
    def flushing(self) -> bool:
        """An fsync of the log is under way (what is proposed now goes into the next one)."""
        return self._flushing is not None

    @property
    def closing(self) -> bool:
        """stop() has begun."""
        return self._closing

    # ------------------------------------------------------ voter changes (KIP-853)

    def _maybe_update_voter(self, core: RaftCore) -> None:
        """A follower that is a voter (kraft.version 1) whose entry in the voter set does not hold
        its own controller endpoint asks the leader to update it (UpdateRaftVoter, as Kafka's
        voters do), once per epoch unless the request failed."""
        if core.role is not Role.FOLLOWER or core.kraft_version < KRAFT_VERSION_DYNAMIC or self._closing:
            return
        if self._update_sent_epoch == core.epoch or (self._update_task is not None and not self._update_task.done()):
            return
        entry = core.voter_set.node(self.node_id)
        if entry is None or entry.key != core.replica_key or not self._serve_raft:
            return
        try:
            endpoint = controller_endpoint(self.config)
        except StorageError:
            return  # no fixed host and port to advertise
        if entry.endpoints == (endpoint,):
            return
        address = self.voters.get(core.leader_id)
        if address is None:
            return
        self._update_sent_epoch = core.epoch
        update = voter_codec.UpdateRaftVoter(
            self.cluster_id,
            core.epoch,
            replace(entry, endpoints=(endpoint,), min_kraft_version=0, max_kraft_version=KRAFT_VERSION_DYNAMIC),
        )
        self._update_task = asyncio.create_task(self._send_voter_update(update, address, core.epoch))

    async def _send_voter_update(self, update: voter_codec.UpdateRaftVoter, address: HostPort, epoch: Epoch) -> None:
        frame, api_key, version = voter_codec.encode_voter_request(
            update, correlation_id=1, client_id=f"raft-{self.node_id}"
        )
        try:
            async with asyncio.timeout(self.raft_config.request_timeout_ms / 1000 + 4):
                raw = await one_shot_request(address.host, address.port, frame)
            answer = voter_codec.decode_voter_response(api_key, version, raw)
        except (PeerUnavailable, codec.WireError, TimeoutError, OSError) as exc:
            answer = voter_codec.VoterCallAnswer(ErrorCode.NETWORK_EXCEPTION, str(exc))
        if answer.error == ErrorCode.NONE:
            log.info("node %d: updated its voter endpoints to %s", self.node_id, update.voter.endpoints)
            return
        log.info("node %d: UpdateRaftVoter in epoch %d: %s %s", self.node_id, epoch, answer.error.name, answer.message)
        await asyncio.sleep(self.raft_config.request_timeout_ms / 1000)
        if self._update_sent_epoch == epoch:
            self._update_sent_epoch = -1  # try again (e.g. another change was in flight)
        self._wake.set()

    def change_voters(self, change: VoterChange) -> asyncio.Future[VoterChangeResult]:
        """Submit AddRaftVoter/RemoveRaftVoter/UpdateRaftVoter to the core (`RaftCore.change_voters`);
        the future gives its final result: NONE once the new VotersRecord is committed."""
        fut: asyncio.Future[VoterChangeResult] = asyncio.get_running_loop().create_future()
        self._voter_calls.append((change, fut))
        self._wake.set()
        return fut

    async def _handle_voter_call(self, frame: bytes | bytearray) -> bytes:
        try:
            head, call = voter_codec.decode_voter_request(frame)
        except codec.WireError as exc:
            if exc.header is None:
                raise CloseConnection from exc
            return voter_codec.encode_voter_response(exc.header, voter_codec.VoterCallAnswer(exc.code, exc.message))
        core = self.core
        if call.cluster_id is not None and call.cluster_id != self.cluster_id:
            answer = voter_codec.VoterCallAnswer(ErrorCode.INCONSISTENT_CLUSTER_ID, f"cluster {self.cluster_id}")
        elif core is None or self._closing:
            answer = voter_codec.VoterCallAnswer(ErrorCode.NOT_LEADER_OR_FOLLOWER, "the node is stopping")
        elif not core.is_leader:
            # Any controller can be the tool's bootstrap: a follower relays to its leader once.
            relayed = None if head.client_id == RELAY_CLIENT_ID else await self._relay_voter_call(call, head)
            answer = relayed or voter_codec.VoterCallAnswer(
                ErrorCode.NOT_LEADER_OR_FOLLOWER, f"node {self.node_id} is not the leader"
            )
        else:
            answer = await self._change_voters_as_leader(call)
        if head.api_key == voter_codec.UPDATE_RAFT_VOTER and core is not None:
            address = self.voters.get(core.leader_id)
            answer = replace(
                answer,
                leader_id=core.leader_id,
                leader_epoch=core.epoch,
                leader_host=address.host if address else "",
                leader_port=address.port if address else -1,
            )
        return voter_codec.encode_voter_response(head, answer)

    async def _change_voters_as_leader(self, call: voter_codec.VoterCall) -> voter_codec.VoterCallAnswer:
        change: VoterChange
        match call:
            case voter_codec.AddRaftVoter(_, voter, timeout_ms):
                return await self._add_voter_as_leader(voter, timeout_ms)
            case voter_codec.RemoveRaftVoter(_, key):
                change = RemoveVoter(key)
            case voter_codec.UpdateRaftVoter(_, _, voter):
                change = UpdateVoter(voter)
        # The core answers REQUEST_TIMED_OUT itself after controller.quorum.request.timeout.ms.
        fut = self.change_voters(change)
        try:
            async with asyncio.timeout(self.raft_config.request_timeout_ms / 1000 + 2):
                result = await fut
        except TimeoutError:
            return voter_codec.VoterCallAnswer(ErrorCode.REQUEST_TIMED_OUT, "no answer from the quorum in time")
        if result.error == ErrorCode.NONE:
            log.info("node %d: voter change committed: %s", self.node_id, change)
        return voter_codec.VoterCallAnswer(result.error, result.message or None)

    async def _add_voter_as_leader(self, voter: VoterNode, timeout_ms: int) -> voter_codec.VoterCallAnswer:
        """AddRaftVoter, answered within the request's TimeoutMs (ms from its arrival; negative
        counts as 0). A refusal that time can cure (REQUEST_TIMED_OUT before the VotersRecord is
        written: a previous change in flight, no commit yet in this epoch, the latest voter set
        uncommitted, the new replica not a caught-up observer) is tried again every
        _ADD_VOTER_RETRY_S until TimeoutMs has passed, so an operator may add a controller that
        is still catching up (the wait KAFKA-17147 plans for Kafka's AddVoterHandler). Once the
        VotersRecord is in the log the answer is NONE when it commits, REQUEST_TIMED_OUT if it
        has not by TimeoutMs (the record stays in the log, as in Kafka), also when TimeoutMs is
        longer than controller.quorum.request.timeout.ms, after which the core stops waiting."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_ms, 0) / 1000
        refused = VoterChangeResult(
            -1, ErrorCode.REQUEST_TIMED_OUT, f"{voter.key} was not added within {timeout_ms} ms"
        )
        while True:
            fut = self.change_voters(AddVoter(voter))
            try:
                async with asyncio.timeout_at(deadline):
                    result = await fut
            except TimeoutError:
                fut.cancel()  # a change the core has not taken yet never reaches it
                result = refused  # the last refusal says why
                break
            core = self.core
            if result.error != ErrorCode.REQUEST_TIMED_OUT or core is None or self._closing:
                break
            if core.voter_set.is_voter(voter.key):
                # Written, but not committed within the core's own timeout: wait for the commit.
                if await self._voter_committed(core, voter, deadline):
                    result = replace(result, error=ErrorCode.NONE, message="")
                break
            refused = result
            await asyncio.sleep(max(0.0, min(_ADD_VOTER_RETRY_S, deadline - loop.time())))
        if result.error == ErrorCode.NONE:
            log.info("node %d: voter change committed: add %s", self.node_id, voter.key)
        return voter_codec.VoterCallAnswer(result.error, result.message or None)

    async def _voter_committed(self, core: RaftCore, voter: VoterNode, deadline: float) -> bool:
        """Whether the committed voter set holds `voter` by `deadline` (loop time, s), while
        this node leads."""
        loop = asyncio.get_running_loop()
        while self.core is core and core.is_leader and not self._closing:
            if core.voters_at(core.high_watermark)[1].is_voter(voter.key):
                return True
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(_ADD_VOTER_RETRY_S)
        return False

    async def _relay_voter_call(
        self, call: voter_codec.VoterCall, head: codec.RequestHeaderInfo
    ) -> voter_codec.VoterCallAnswer | None:
        core = self.core
        address = self.voters.get(core.leader_id) if core is not None and core.leader_id >= 0 else None
        if address is None:
            return None
        frame, api_key, version = voter_codec.encode_voter_request(
            call, correlation_id=1, client_id=RELAY_CLIENT_ID, api_version=head.api_version
        )
        wait_s = max(self.raft_config.request_timeout_ms, voter_codec.requested_timeout_ms(call)) / 1000 + 4
        try:
            async with asyncio.timeout(wait_s):
                raw = await one_shot_request(address.host, address.port, frame, request_timeout_s=wait_s)
            return voter_codec.decode_voter_response(api_key, version, raw)
        except (PeerUnavailable, codec.WireError, TimeoutError, OSError):
            return None
