"""A deterministic simulated cluster of `RaftCore`s: simulated clock, network and disks.

Everything random comes from one seeded `random.Random`, so a run is a pure
function of its seed and its schedule. The driver loop here follows the Ready
contract exactly like the real node does (persist election, snapshot, truncate,
append, fsync, then send and apply), and a crash can stop it half-way through a
Ready, which loses whatever was not yet fsynced.

`Cluster.check()` asserts the safety invariants after every event:
single leader per epoch (and no second reign of a restarted leader in its epoch),
monotonic epochs, at most one durable vote per voter and epoch, persisted election
state equal to the running one once a Ready is carried out, log matching (across all
logs and all time), no change to a running node's log below its high watermark,
monotonic high watermarks that are on a majority of voters, leader completeness,
and that every committed entry is identical wherever it exists (and in whatever any
state machine applied) and never lost; no node's high watermark is above its log end;
state machines at the same applied offset hold the same image, whether they replayed
the log or installed a snapshot.

`COVERAGE` counts, over every cluster of the process, the histories the run reached
(see `Cluster.count`): Figure-8 histories, partial fetches, divergences (and those that
cut several epochs), snapshot installs (and those that crossed a leader change), stale
and future epochs delivered, and delayed and duplicated messages.
"""

from __future__ import annotations

import heapq
import json
import random
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from quorum.raft.config import RaftConfig
from quorum.raft.core import RaftCore
from quorum.raft.errors import ErrorCode, NotLeaderError
from quorum.raft.log import RaftLog
from quorum.raft.messages import (
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    Envelope,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    VoteRequest,
)
from quorum.raft.ready import Ready
from quorum.raft.roles import Role
from quorum.raft.types import Batch, ElectionState, Offset, OffsetAndEpoch


class InvariantViolation(AssertionError):
    pass


# What the simulations of this process reached, summed over every cluster (see `Cluster.count`).
COVERAGE: Counter[str] = Counter()


@dataclass
class Disk:
    """What survives a crash: written by completed (fsynced) steps only."""

    election: ElectionState | None = None
    batches: list[Batch] = field(default_factory=list)
    log_start: Offset = 0
    snapshots: dict[OffsetAndEpoch, bytes] = field(default_factory=dict)
    receiving: dict[OffsetAndEpoch, bytearray] = field(default_factory=dict)

    @property
    def end_offset(self) -> Offset:
        return self.batches[-1].end_offset if self.batches else self.log_start

    def latest_snapshot(self) -> OffsetAndEpoch | None:
        return max(self.snapshots, key=lambda s: s.offset) if self.snapshots else None

    def truncate_to(self, offset: Offset) -> None:
        self.batches = [b for b in self.batches if b.end_offset <= offset]

    # SnapshotSource for the core
    def exists(self, sid: OffsetAndEpoch) -> bool:
        return sid in self.snapshots

    def size(self, sid: OffsetAndEpoch) -> int:
        return len(self.snapshots[sid])

    def read(self, sid: OffsetAndEpoch, position: int, max_bytes: int) -> bytes:
        return self.snapshots[sid][position : position + max_bytes]


def encode_state(values: list[str]) -> bytes:
    return json.dumps(values).encode()


def decode_state(data: bytes) -> list[str]:
    values = json.loads(data)
    assert isinstance(values, list)
    return [str(v) for v in values]


@dataclass
class StateMachine:
    """The replicated state: the list of committed data record values, in order."""

    values: list[str] = field(default_factory=list)
    applied: Offset = 0
    digest: int = 0  # a running hash of `values`: equal images have equal digests

    def apply(self, batch: Batch) -> None:
        assert batch.base_offset == self.applied, (batch.base_offset, self.applied)
        if not batch.is_control:
            for r in batch.records:
                value = r.decode()
                self.values.append(value)
                self.digest = hash((self.digest, value))
        self.applied = batch.end_offset

    def load(self, sid: OffsetAndEpoch, data: bytes) -> None:
        self.values = decode_state(data)
        self.applied = sid.offset
        self.digest = 0
        for value in self.values:
            self.digest = hash((self.digest, value))


class Node:
    def __init__(self, node_id: int, voters: list[int], config: RaftConfig, snapshot_every: int) -> None:
        self.id = node_id
        self.voters = voters
        self.config = config
        self.disk = Disk()
        self.core: RaftCore | None = None
        self.sm = StateMachine()
        self.snapshot_every = snapshot_every
        self._since_snapshot = 0
        self.last_hw = 0
        self.incarnation = 0  # how many times the node was started
        self.armed_crash: int | None = None  # crash after this many steps of the next Ready
        # Called with every committed batch before it is applied (the cluster records it).
        self.on_commit: Callable[[Node, Batch], None] | None = None
        # Called after the state machine changed: (node, how: "replay", "snapshot" or "start").
        self.on_image: Callable[[Node, str], None] | None = None
        # The epoch in which a leader first sent this node to its snapshot, since its last install.
        self.snapshot_redirect_epoch: int | None = None

    @property
    def up(self) -> bool:
        return self.core is not None

    def start(self, now: int, rng: random.Random) -> None:
        disk = self.disk
        sid = disk.latest_snapshot()
        self.sm = StateMachine()
        start = disk.log_start
        if sid is not None:
            self.sm.load(sid, disk.snapshots[sid])
            start = max(start, sid.offset)
        log = RaftLog(disk.batches, start_offset=start, snapshot_id=sid)
        self.core = RaftCore(
            node_id=self.id,
            voters=self.voters,
            config=self.config,
            rng=random.Random(rng.getrandbits(64)),
            now_ms=now,
            election=disk.election,
            log=log,
            snapshots=disk,
        )
        self.last_hw = self.core.high_watermark
        self._since_snapshot = 0
        self.incarnation += 1
        if self.on_image is not None and sid is not None:
            self.on_image(self, "start")

    def crash(self) -> None:
        self.core = None
        self.armed_crash = None
        self.disk.receiving.clear()

    def drain(self, crash_after_steps: int | None = None) -> list[Envelope]:
        """Carry out Readies until none is left; returns the messages to send.

        With `crash_after_steps`, the node dies after that many persistence steps
        of its next Ready (0 = before any), losing every write not yet fsynced.
        """
        core = self.core
        assert core is not None
        if crash_after_steps is None and self.armed_crash is not None and core.has_ready():
            crash_after_steps, self.armed_crash = self.armed_crash, None
        out: list[Envelope] = []
        while core.has_ready():
            ready = core.ready()
            if crash_after_steps is not None:
                self._persist_partially(ready, crash_after_steps)
                self.crash()
                return []
            self._persist(ready)
            out.extend(ready.messages)
            for batch in ready.committed:
                self._apply(batch)
            core.advance(ready)
        return out

    def _persist(self, ready: Ready) -> None:
        disk = self.disk
        if ready.election is not None:
            disk.election = ready.election
        for chunk in ready.snapshot_chunks:
            if chunk.position == 0:
                disk.receiving[chunk.snapshot_id] = bytearray()  # a transfer (re)starts
            buf = disk.receiving.setdefault(chunk.snapshot_id, bytearray())
            assert len(buf) == chunk.position, (len(buf), chunk.position)
            buf.extend(chunk.data)
        if ready.install_snapshot is not None:
            sid = ready.install_snapshot
            data = bytes(disk.receiving.pop(sid))
            disk.snapshots[sid] = data
            disk.batches = []
            disk.log_start = sid.offset
            self.sm.load(sid, data)
            self._since_snapshot = 0
            if self.on_image is not None:
                self.on_image(self, "snapshot")
        if ready.truncate_to is not None:
            disk.truncate_to(ready.truncate_to)
        for batch in ready.entries:
            assert batch.base_offset == disk.end_offset, (self.id, batch.base_offset, disk.end_offset)
            disk.batches.append(batch)
        if ready.delete_before is not None:
            disk.batches = [b for b in disk.batches if b.end_offset > ready.delete_before]
            disk.log_start = ready.delete_before
            # Keep the two newest snapshots so a transfer in progress can finish.
            for old in sorted(disk.snapshots, key=lambda s: s.offset)[:-2]:
                del disk.snapshots[old]

    def _persist_partially(self, ready: Ready, steps: int) -> None:
        """Crash during a Ready: election and truncation are durable writes of their
        own; appended entries survive only up to an arbitrary prefix (no fsync)."""
        disk = self.disk
        if steps >= 1 and ready.election is not None:
            disk.election = ready.election
        if steps >= 2 and ready.install_snapshot is None:
            # (An install is one atomic rename after the chunks are fsynced: not reached.)
            if ready.truncate_to is not None:
                disk.truncate_to(ready.truncate_to)
            keep = min(len(ready.entries), steps - 2)
            for batch in ready.entries[:keep]:
                assert batch.base_offset == disk.end_offset, (self.id, batch.base_offset, disk.end_offset)
                disk.batches.append(batch)

    def _apply(self, batch: Batch) -> None:
        core = self.core
        assert core is not None
        if self.on_commit is not None:
            self.on_commit(self, batch)
        self.sm.apply(batch)
        if self.on_image is not None:
            self.on_image(self, "replay")
        self._since_snapshot += len(batch.records)
        if self.snapshot_every and self._since_snapshot >= self.snapshot_every:
            sid = core.snapshot_id_at(self.sm.applied)
            if sid not in self.disk.snapshots:
                self.disk.snapshots[sid] = encode_state(self.sm.values)
                core.snapshot_created(sid)
            self._since_snapshot = 0


@dataclass(order=True)
class _InFlight:
    deliver_at: int
    seq: int
    envelope: Envelope = field(compare=False)


class Cluster:
    """Voters 1..n plus observers n+1..n+m on a simulated network."""

    def __init__(
        self,
        seed: int,
        voters: int = 3,
        observers: int = 0,
        config: RaftConfig | None = None,
        snapshot_every: int = 0,
        max_delay_ms: int = 5,
    ) -> None:
        self.rng = random.Random(seed)
        self.config = config or RaftConfig(
            election_timeout_ms=1000,
            fetch_timeout_ms=2000,
            election_backoff_max_ms=1000,
            request_timeout_ms=1000,
            fetch_max_wait_ms=100,
            snapshot_chunk_bytes=2048,
            max_batch_records=8,
        )
        self.voter_ids = list(range(1, voters + 1))
        self.observer_ids = list(range(voters + 1, voters + observers + 1))
        self.nodes = {
            i: Node(i, self.voter_ids, self.config, snapshot_every) for i in self.voter_ids + self.observer_ids
        }
        self.now = 0
        self.max_delay_ms = max_delay_ms
        self.loss = 0.0
        self.duplicate = 0.0
        # Occasionally a message takes far longer (it then arrives in a later epoch).
        self.delay_spike = 0.0
        self.delay_spike_ms = 0
        self.slow_links: dict[tuple[int, int], int] = {}  # (source, destination) -> ms every message takes
        self.coverage: Counter[str] = Counter()
        self.blocked: set[tuple[int, int]] = set()  # (source, destination) pairs that drop
        self._queue: list[_InFlight] = []
        self._seq = 0
        self.proposed = 0
        self.events = 0
        self.stale_ticks = 0  # ticks after which next_deadline() was still not in the future
        # History for the invariants.
        self.leaders: dict[int, int] = {}  # epoch -> leader id
        self.votes: dict[tuple[int, int], int] = {}  # (voter, epoch) -> the candidate it voted for
        self.leader_runs: dict[int, tuple[int, int]] = {}  # epoch -> (leader, its incarnation)
        self.max_epoch: dict[int, int] = {}
        self.committed: dict[Offset, tuple[int, bytes]] = {}  # offset -> (epoch, record)
        self.committed_epoch: dict[Offset, int] = {}  # offset -> epoch of the leader that committed it
        self.max_committed: Offset = 0
        # Deadlines a tick could not move (see `_next_event_time`): node -> (deadline, now).
        self._stale: dict[int, tuple[int, int]] = {}
        # Log matching, checked incrementally: every (base offset, epoch) ever seen -> its
        # (records, predecessor key); and each log as it was at the last check.
        self._seen: dict[tuple[int, int], tuple[tuple[bytes, ...], tuple[int, int] | None]] = {}
        self._verified: dict[tuple[int, str], list[Batch]] = {}
        self._log_owner: dict[int, int] = {}  # node -> incarnation whose core log `_verified` holds
        self._hw_checked: dict[int, tuple[int, int]] = {}  # node -> (incarnation, committed checked below)
        self._offset_epochs: dict[Offset, set[int]] = {}  # offset -> epochs of the entries ever written there
        self._images: dict[Offset, tuple[int, str]] = {}  # applied offset -> (image digest, how it was reached)
        for node in self.nodes.values():
            node.on_commit = self._on_commit
            node.on_image = self._on_image
            node.start(self.now, self.rng)
        self._drain_all()

    # ----------------------------------------------------------- topology

    def partition(self, *groups: Iterable[int]) -> None:
        """Only nodes in the same group can talk."""
        sets = [set(g) for g in groups]
        self.blocked = {
            (a, b) for a in self.nodes for b in self.nodes if a != b and not any(a in s and b in s for s in sets)
        }

    def block(self, source: int, destination: int) -> None:
        self.blocked.add((source, destination))

    def heal(self) -> None:
        self.blocked.clear()

    # ------------------------------------------------------------ faults

    def crash(self, node_id: int) -> None:
        self.nodes[node_id].crash()

    def crash_mid_ready(self, node_id: int, steps: int) -> None:
        """Crash the node after `steps` persistence steps of its next Ready: at once if
        one is pending, else during the next one it produces (after a message, a tick
        or a proposal). The driver drains every Ready after every event, so between
        events none is pending: without arming, this would be a plain crash."""
        node = self.nodes[node_id]
        if node.up and node.core is not None and node.core.has_ready():
            node.drain(crash_after_steps=steps)
        elif node.up:
            node.armed_crash = steps

    def restart(self, node_id: int) -> None:
        node = self.nodes[node_id]
        if not node.up:
            node.start(self.now, self.rng)
            self._send(node.drain())
            self.check()

    def shutdown(self, node_id: int) -> None:
        """Graceful: resign if leading, let the resignation go out, then stop."""
        node = self.nodes[node_id]
        if node.core is None:
            return
        node.core.resign(self.now)
        self._send(node.drain())
        node.crash()

    # ------------------------------------------------------------ running

    def leader(self) -> Node | None:
        """The live leader with the highest epoch."""
        best: Node | None = None
        for node in self.nodes.values():
            if node.core is not None and node.core.role is Role.LEADER:
                if best is None or best.core is None or node.core.epoch > best.core.epoch:
                    best = node
        return best

    def propose(self, count: int = 1) -> bool:
        node = self.leader()
        if node is None or node.core is None:
            return False
        values = [f"v{self.proposed + i}".encode() for i in range(count)]
        try:
            node.core.propose(values, self.now)
        except NotLeaderError:
            return False
        self.proposed += count
        self._send(node.drain())
        self.check()
        return True

    def run_for(self, ms: int, propose_every_ms: int = 0) -> None:
        end = self.now + ms
        next_propose = self.now + propose_every_ms if propose_every_ms else end + 1
        while True:
            t = min(self._next_event_time(), next_propose, end)
            self.now = max(self.now, t)
            if self.now >= next_propose:
                self.propose(1)
                next_propose = self.now + propose_every_ms
            self._deliver_due()
            self._tick_due()
            if self.now >= end:
                return

    def run_until(self, predicate: object, limit_ms: int = 60_000) -> bool:
        assert callable(predicate)
        end = self.now + limit_ms
        while self.now < end:
            if predicate():
                return True
            self.run_for(min(10, end - self.now))
        return bool(predicate())

    def _next_event_time(self) -> int:
        t = self._queue[0].deliver_at if self._queue else 1 << 62
        for node in self.nodes.values():
            if node.core is not None:
                d = node.core.next_deadline()
                if self._stale.get(node.id) == (d, self.now):
                    continue  # already ticked at this instant and the deadline did not move
                t = min(t, d)
        return max(t, self.now)

    def _deliver_due(self) -> None:
        while self._queue and self._queue[0].deliver_at <= self.now:
            env = heapq.heappop(self._queue).envelope
            node = self.nodes.get(env.destination)
            if node is None or node.core is None:
                continue
            before = _Before(node.core)
            node.core.handle(env, self.now)
            self._classify(env, node, before)
            self.events += 1
            self._send(node.drain())
            self.check()

    def _tick_due(self) -> None:
        for node in self.nodes.values():
            if node.core is None:
                continue
            d = node.core.next_deadline()
            if d > self.now or self._stale.get(node.id) == (d, self.now):
                continue
            node.core.tick(self.now)
            self.events += 1
            self._send(node.drain())
            self.check()
            # A deadline still in the past after a tick would make a driver spin at this
            # instant forever; remember it so that time can move on (see the unit tests:
            # `next_deadline()` should be in the future after `tick`).
            core = node.core
            if core is not None and core.next_deadline() <= self.now:
                self._stale[node.id] = (core.next_deadline(), self.now)
                self.stale_ticks += 1

    def _send(self, envelopes: list[Envelope]) -> None:
        for env in envelopes:
            if (env.source, env.destination) in self.blocked:
                continue
            if self.loss and self.rng.random() < self.loss:
                continue
            copies = 2 if self.duplicate and self.rng.random() < self.duplicate else 1
            if copies == 2:
                self.count("duplicated_messages")
            for _ in range(copies):
                self._seq += 1
                delay = self.rng.randint(1, self.max_delay_ms)
                if self.delay_spike and self.rng.random() < self.delay_spike:
                    delay = self.rng.randint(self.max_delay_ms, max(self.max_delay_ms, self.delay_spike_ms))
                    self.count("delayed_messages")
                slow = self.slow_links.get((env.source, env.destination))
                if slow:
                    delay = slow + self.rng.randint(0, self.max_delay_ms)
                    self.count("delayed_messages")
                heapq.heappush(self._queue, _InFlight(self.now + delay, self._seq, env))

    def _drain_all(self) -> None:
        for node in self.nodes.values():
            if node.core is not None:
                self._send(node.drain())

    # ----------------------------------------------------------- coverage

    def count(self, kind: str, n: int = 1) -> None:
        self.coverage[kind] += n
        COVERAGE[kind] += n

    def _classify(self, env: Envelope, node: Node, before: _Before) -> None:
        """Count what the delivery of `env` to `node` was (and did)."""
        core = node.core
        if core is None:
            return
        msg = env.message
        epoch = _message_epoch(msg)
        if epoch is not None:
            if epoch < before.epoch:
                self.count("stale_epoch_deliveries")
            elif epoch > before.epoch:
                self.count("future_epoch_deliveries")
                if core.epoch > before.epoch:
                    self.count("future_epoch_transitions")
        if not isinstance(msg, FetchResponse):
            return
        if msg.error == ErrorCode.FENCED_LEADER_EPOCH:
            self.count("fenced_epoch_answers")
        if msg.diverging_epoch is not None:
            self.count("diverging_answers")
            end = core.log.end_offset
            if end < before.end_offset:
                self.count("divergence_truncations")
                cut = {e for e, start in before.epoch_starts if start >= end}
                cut.add(_epoch_at(before.epoch_starts, end))
                if len(cut) >= 2:
                    self.count("multi_epoch_divergences")
        if msg.snapshot_id is not None:
            self.count("snapshot_redirects")
            if node.snapshot_redirect_epoch is None:  # the first redirect since the last install
                node.snapshot_redirect_epoch = core.epoch
        end = core.log.end_offset
        if end > before.end_offset and msg.high_watermark > end:
            # The follower took data from this answer, and the leader's HW is still ahead of
            # its log end: the answer was cut short by the size limit.
            self.count("partial_fetches")

    def _on_image(self, node: Node, how: str) -> None:
        """State machines that applied the same offset hold the same image, however reached."""
        sm = node.sm
        if how == "snapshot":
            self.count("snapshot_installs")
            redirected, node.snapshot_redirect_epoch = node.snapshot_redirect_epoch, None
            if node.core is not None and redirected is not None and node.core.epoch > redirected:
                # The leader that sent this node to a snapshot is not the one it finished with.
                self.count("snapshot_installs_across_leaders")
        known = self._images.get(sm.applied)
        if known is None:
            self._images[sm.applied] = (sm.digest, how)
            return
        if known[0] != sm.digest:
            raise InvariantViolation(
                f"node {node.id} reached offset {sm.applied} by {how} with another image than by {known[1]}"
            )
        if (known[1] == "replay") != (how == "replay"):
            self.count("snapshot_images_matched_by_replay")

    def _on_new_leader(self, leader: int, epoch: int) -> None:
        """Figure 8: a node leads again after an entry it wrote as leader of an earlier epoch
        was overwritten, somewhere, by a leader of an epoch in between."""
        mine = {e for e, node in self.leaders.items() if node == leader and e < epoch}
        if not mine:
            return
        for epochs in self._offset_epochs.values():
            own = epochs & mine
            if own and any(min(own) < e < epoch and e not in mine for e in epochs):
                self.count("figure8_histories")
                return

    # --------------------------------------------------------- invariants

    def check(self) -> None:
        majority = len(self.voter_ids) // 2 + 1
        for node in self.nodes.values():
            core = node.core
            # Epochs never decrease (durable and in memory).
            epochs = [node.disk.election.epoch if node.disk.election else 0]
            if core is not None:
                epochs.append(core.epoch)
            for e in epochs:
                if e < self.max_epoch.get(node.id, 0):
                    raise InvariantViolation(f"node {node.id} epoch went back to {e}")
                self.max_epoch[node.id] = max(self.max_epoch.get(node.id, 0), e)
            # At most one leader per epoch (live leaders and durable claims).
            claims = []
            if core is not None and core.role is Role.LEADER:
                claims.append(core.epoch)
            if node.disk.election is not None and node.disk.election.leader_id == node.id:
                claims.append(node.disk.election.epoch)
            for epoch in claims:
                if epoch not in self.leaders:
                    self.leaders[epoch] = node.id
                    self._on_new_leader(node.id, epoch)
                prev = self.leaders[epoch]
                if prev != node.id:
                    raise InvariantViolation(f"two leaders in epoch {epoch}: {prev} and {node.id}")
            # ... and a leader never leads again in its epoch after a restart (it comes back Resigned).
            if core is not None and core.role is Role.LEADER:
                term = self.leader_runs.setdefault(core.epoch, (node.id, node.incarnation))
                if term != (node.id, node.incarnation):
                    raise InvariantViolation(f"node {node.id} leads epoch {core.epoch} again after a restart")
            # At most one vote per epoch: a durable vote is never changed or forgotten.
            election = node.disk.election
            if election is not None and election.voted_id != -1 and node.id in self.voter_ids:
                key = (node.id, election.epoch)
                voted = self.votes.setdefault(key, election.voted_id)
                if voted != election.voted_id:
                    raise InvariantViolation(
                        f"node {node.id} voted for {voted} and {election.voted_id} in epoch {election.epoch}"
                    )
            elif election is not None and (node.id, election.epoch) in self.votes:
                raise InvariantViolation(f"node {node.id} forgot its vote in epoch {election.epoch}")
            if core is None:
                continue
            # Persist before send: once a Ready is carried out, disk and memory agree.
            state = core.election_state
            if state is not election and state != (election or ElectionState(epoch=0)) and not core.has_ready():
                raise InvariantViolation(f"node {node.id} runs {core.election_state}, disk has {election}")
            # No node knows a high watermark above its own log end.
            if core.high_watermark > core.log.end_offset:
                raise InvariantViolation(
                    f"node {node.id} HW {core.high_watermark} is above its log end {core.log.end_offset}"
                )
            # A node's high watermark never decreases while it runs.
            if core.high_watermark < node.last_hw:
                raise InvariantViolation(f"node {node.id} HW went back {node.last_hw} -> {core.high_watermark}")
            node.last_hw = core.high_watermark
        self._check_log_matching()
        self._record_commits(majority)
        self._check_committed()

    def _entry(self, node: Node, offset: Offset) -> tuple[int, bytes] | None:
        """(epoch, record) at `offset` in a live node's log, or None if outside it."""
        core = node.core
        assert core is not None
        log = core.log
        if offset < log.start_offset or offset >= log.end_offset:
            return None
        b = log.batches[log.index_of(offset)]
        return b.epoch, b.records[offset - b.base_offset]

    def _check_log_matching(self) -> None:
        """Same (base offset, epoch) batch => same content and same predecessor, in every
        log (memory and disk) and at every time: a leader writes each (offset, epoch) once.
        And a running node never changes its log below its high watermark.

        Incremental: each log is compared with what it was at the previous check; only
        batches appended since are examined, unless the log was truncated or rebuilt."""
        for node in self.nodes.values():
            self._match_log((node.id, "disk"), node.disk.batches, node.id)
            core = node.core
            if core is not None:
                changed = self._match_log((node.id, "core"), core.log.batches, node.id)
                if (
                    changed is not None
                    and changed < core.high_watermark
                    and self._log_owner.get(node.id) == node.incarnation
                ):
                    raise InvariantViolation(
                        f"node {node.id} changed its log at {changed}, below its HW {core.high_watermark}"
                    )
                self._log_owner[node.id] = node.incarnation

    def _match_log(self, name: tuple[int, str], batches: Sequence[Batch], node_id: int) -> int | None:
        """Check the batches new since the last check; return the offset from which the
        log differs from then, if it was changed other than by appending or deleting a prefix."""
        memo = self._verified.get(name)
        start = 0
        changed: int | None = None
        if memo and batches:
            # Skip the prefix unchanged since the last check (the head may have been deleted).
            j = 0 if batches[0] is memo[0] else bisect_left(memo, batches[0].base_offset, key=_base_offset)
            n = len(memo) - j
            if n > 0 and len(batches) >= n and batches[n - 1] is memo[-1] and batches[:n] == memo[j:]:
                start = n
            else:
                k = 0
                while k < len(batches) and j + k < len(memo) and batches[k] == memo[j + k]:
                    k += 1
                if j + k < len(memo):  # something we had was cut
                    changed = memo[j + k].base_offset
        seen = self._seen
        prev: tuple[int, int] | None = None
        if start:
            b = batches[start - 1]
            prev = (b.base_offset, b.epoch)
        offset_epochs = self._offset_epochs
        for b in batches[start:]:
            key = (b.base_offset, b.epoch)
            for o in range(b.base_offset, b.end_offset):
                offset_epochs.setdefault(o, set()).add(b.epoch)
            other = seen.setdefault(key, (b.records, prev))
            if other[0] != b.records or (other[1] is not None and prev is not None and other[1] != prev):
                raise InvariantViolation(f"log matching broken at {key} on node {node_id}")
            prev = key
        self._verified[name] = list(batches)
        return changed

    def _on_commit(self, node: Node, batch: Batch) -> None:
        """Every batch a node applies is committed: record it, and it must never differ."""
        core = node.core
        for i, record in enumerate(batch.records):
            offset = batch.base_offset + i
            if core is not None:
                # Known committed in this node's epoch: every leader of a later epoch must hold it.
                self.committed_epoch.setdefault(offset, core.epoch)
            entry = (batch.epoch, record)
            prev = self.committed.setdefault(offset, entry)
            if prev != entry:
                raise InvariantViolation(f"node {node.id} applied {entry} at {offset}, committed was {prev}")

    def _record_commits(self, majority: int) -> None:
        leader = self.leader()
        if leader is None or leader.core is None:
            return
        core = leader.core
        hw = core.high_watermark
        if hw <= self.max_committed:
            return
        # The HW must be on a majority of voters' durable logs (or their snapshots).
        holders = sum(1 for v in self.voter_ids if self._durably_holds(self.nodes[v], hw - 1, core))
        if holders < majority:
            raise InvariantViolation(f"HW {hw} of leader {leader.id} is on only {holders} voters")
        for offset in range(self.max_committed, hw):
            self.committed_epoch.setdefault(offset, core.epoch)
            entry = self._entry(leader, offset)
            if entry is None:
                continue  # below the leader's snapshot (deleted in the event that committed it)
            if offset in self.committed and self.committed[offset] != entry:
                raise InvariantViolation(f"committed offset {offset} changed")
            self.committed[offset] = entry
        self.max_committed = hw

    def _durably_holds(self, node: Node, offset: Offset, leader: RaftCore) -> bool:
        if offset < 0:
            return True
        sid = node.disk.latest_snapshot()
        if sid is not None and sid.offset > offset:
            return True
        b = _batch_at(node.disk.batches, offset)
        if b is None:
            return False
        mine = (b.epoch, b.records[offset - b.base_offset])
        log = leader.log
        if log.start_offset <= offset < log.end_offset:
            lb = log.batches[log.index_of(offset)]
            return mine == (lb.epoch, lb.records[offset - lb.base_offset])
        return True

    def _check_committed(self) -> None:
        for node in self.nodes.values():
            core = node.core
            if core is None:
                continue
            # Everything below this node's HW matches the committed record. Checked as the
            # HW moves: below it the log cannot change (see `_check_log_matching`).
            log = core.log
            inc, upto = self._hw_checked.get(node.id, (-1, 0))
            lo = max(log.start_offset, upto if inc == node.incarnation else 0)
            hw = min(core.high_watermark, log.end_offset)
            self._hw_checked[node.id] = (node.incarnation, max(hw, lo))
            if lo < hw:
                for b in log.batches[log.index_of(lo) :]:
                    if b.base_offset >= hw:
                        break
                    for i, record in enumerate(b.records):
                        offset = b.base_offset + i
                        want = self.committed.get(offset)
                        if lo <= offset < hw and want is not None and want != (b.epoch, record):
                            raise InvariantViolation(f"node {node.id} has different committed data at {offset}")
            # Leader completeness: a leader of a later epoch holds every committed entry.
            if core.role is Role.LEADER and self.max_committed > 0:
                last = self.max_committed - 1
                if self.committed_epoch.get(last, 1 << 62) < core.epoch:
                    if core.log.end_offset < self.max_committed:
                        raise InvariantViolation(f"leader {node.id} (epoch {core.epoch}) lacks committed {last}")
                    entry = self._entry(node, last)
                    if entry is not None and entry != self.committed[last]:
                        raise InvariantViolation(f"leader {node.id} has a different committed entry at {last}")
        # Nothing committed is ever lost: every committed offset is durable on a majority.
        if self.max_committed:
            majority = len(self.voter_ids) // 2 + 1
            last = self.max_committed - 1
            holders = 0
            for v in self.voter_ids:
                node = self.nodes[v]
                sid = node.disk.latest_snapshot()
                if sid is not None and sid.offset > last:
                    holders += 1
                    continue
                held = _batch_at(node.disk.batches, last)
                if held is not None and (held.epoch, held.records[last - held.base_offset]) == self.committed.get(last):
                    holders += 1
            if holders < majority and last in self.committed:
                raise InvariantViolation(f"committed offset {last} is durable on only {holders} voters")

    def committed_values(self) -> list[str]:
        """Data values below the highest committed offset, from the committed record."""
        return [r.decode() for off, (_, r) in sorted(self.committed.items()) if r.startswith(b"v")]


def _base_offset(batch: Batch) -> int:
    return batch.base_offset


def _batch_at(batches: Sequence[Batch], offset: Offset) -> Batch | None:
    """The batch holding `offset` in a contiguous list of batches, or None."""
    i = bisect_right(batches, offset, key=_base_offset) - 1
    if i >= 0 and offset < batches[i].end_offset:
        return batches[i]
    return None


class _Before:
    """A node's epoch and log shape just before a message is handled."""

    __slots__ = ("epoch", "end_offset", "epoch_starts")

    def __init__(self, core: RaftCore) -> None:
        self.epoch = core.epoch
        self.end_offset = core.log.end_offset
        self.epoch_starts = tuple(core.log.epoch_starts)


def _message_epoch(msg: object) -> int | None:
    """The sender's epoch a message carries (requests: the epoch it believes current)."""
    if isinstance(msg, FetchRequest | FetchSnapshotRequest):
        return msg.current_leader_epoch
    if isinstance(msg, VoteRequest):
        return msg.candidate_epoch
    if isinstance(msg, BeginQuorumEpochRequest | EndQuorumEpochRequest):
        return msg.leader_epoch
    epoch = getattr(msg, "leader_epoch", None)
    return epoch if isinstance(epoch, int) else None


def _epoch_at(epoch_starts: Sequence[tuple[int, Offset]], offset: Offset) -> int:
    """The epoch of the entry at `offset`, from a log's (epoch, start offset) list."""
    epoch = -1
    for e, start in epoch_starts:
        if start <= offset:
            epoch = e
    return epoch
