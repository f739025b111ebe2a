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
state machine applied) and never lost. On top of those (issue 9): a leader named in the
durable state of any node is the one leader of that epoch; every node's high watermark is
at most its log end offset; committed entries a node acknowledged stay on its disk (or
in its snapshot) unchanged, those committed by the ack's epoch or an earlier one (issue
23); state machines that applied the same offset hold the same image, whether they
replayed the log or installed a snapshot.

Issue 24: with `connection_resets`, a node that dies makes its peers' requests to it fail
(`RaftCore.request_failed`), as TCP reports a dead process; `failover_ms` records, for every
stop of a leader, the time until a live node led a higher epoch.

KIP-853 (`dynamic=True`): the voters are a `VoterSet` with directory ids, kept in the log
(VotersRecord) and in snapshots, changed with `change_voters`; a node's disk can be wiped
(`wipe`: a new replica under the same id). The majority rules above then use the voter sets
in force, and three more hold: at most one voter-set change uncommitted in a leader's log
("one-change-in-flight"), consecutive voter sets of any log differ by at most one voter
("one-voter-at-a-time"), and a new leader's voter set shares a majority with the committed
one ("no-disjoint-majorities").

Each violation names the property it broke (`InvariantViolation.prop`), so a report can
say which rule caught a fault. `Cluster.coverage` counts the histories a run reached
(Figure-8 comebacks, partial fetches, diverging truncations, snapshot installs, stale and
future epochs, replayed messages, ...); `COVERAGE` sums them over every cluster of the
process, for a report at the end of a test session.
"""

from __future__ import annotations

import heapq
import json
import random
import uuid
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from quorum.raft.config import RaftConfig
from quorum.raft.core import RaftCore
from quorum.raft.errors import ErrorCode, FatalQuorumError, NotLeaderError
from quorum.raft.kraft_control import decode_voters
from quorum.raft.log import RaftLog
from quorum.raft.messages import (
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    Envelope,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    Message,
    VoteRequest,
)
from quorum.raft.ready import Ready
from quorum.raft.roles import LeaderState, Role
from quorum.raft.types import Batch, ControlType, ElectionState, Offset, OffsetAndEpoch
from quorum.raft.voter_change import VoterChange, VoterChangeResult
from quorum.raft.voter_set import ZERO_UUID, ReplicaKey, VoterNode, VoterSet

# Coverage of every cluster built in this process (see `Cluster.coverage`).
COVERAGE: Counter[str] = Counter()


class InvariantViolation(AssertionError):
    """A safety property failed; `prop` names it (e.g. "log-matching")."""

    def __init__(self, message: str, prop: str = "other") -> None:
        super().__init__(f"[{prop}] {message}")
        self.prop = prop


def message_epoch(message: Message) -> int:
    """The leader epoch a message carries (a request's view of the epoch, a response's answer)."""
    match message:
        case VoteRequest():
            return message.candidate_epoch
        case BeginQuorumEpochRequest() | EndQuorumEpochRequest():
            return message.leader_epoch
        case FetchRequest() | FetchSnapshotRequest():
            return message.current_leader_epoch
        case _:
            return message.leader_epoch


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

    def latest_voter_set(self) -> VoterSet | None:
        """The newest voter set this disk holds (a VotersRecord, else the newest snapshot's);
        None when it holds none (the bootstrap's applies)."""
        for b in reversed(self.batches):
            if b.control_type is ControlType.KRAFT_VOTERS:
                return decode_voters(b.records[0])
        sid = self.latest_snapshot()
        return None if sid is None else decode_snapshot(self.snapshots[sid])[1]

    def truncate_to(self, offset: Offset) -> None:
        self.batches = [b for b in self.batches if b.end_offset <= offset]

    # SnapshotSource for the core
    def exists(self, sid: OffsetAndEpoch) -> bool:
        return sid in self.snapshots

    def size(self, sid: OffsetAndEpoch) -> int:
        return len(self.snapshots[sid])

    def read(self, sid: OffsetAndEpoch, position: int, max_bytes: int) -> bytes:
        return self.snapshots[sid][position : position + max_bytes]


def encode_state(values: list[str], voters: VoterSet | None = None) -> bytes:
    """A snapshot: the values, and with KIP-853 the voter set of the log it covers."""
    if voters is None:
        return json.dumps(values).encode()
    keys = [[n.node_id, str(n.key.directory_id)] for n in voters.nodes]
    return json.dumps({"values": values, "voters": keys}).encode()


def decode_state(data: bytes) -> list[str]:
    return decode_snapshot(data)[0]


def decode_snapshot(data: bytes) -> tuple[list[str], VoterSet | None]:
    doc = json.loads(data)
    if isinstance(doc, list):
        return [str(v) for v in doc], None
    assert isinstance(doc, dict)
    voters = VoterSet.of(VoterNode(ReplicaKey(int(i), uuid.UUID(d))) for i, d in doc["voters"])
    return [str(v) for v in doc["values"]], voters


def _digest(values: Iterable[str], start: int = 0) -> int:
    d = start
    for v in values:
        d = hash((d, v))
    return d


@dataclass
class StateMachine:
    """The replicated state: the list of committed data record values, in order.

    `digest` is a running hash of `values`, so that two images compare in O(1)."""

    values: list[str] = field(default_factory=list)
    applied: Offset = 0
    digest: int = 0

    def apply(self, batch: Batch) -> None:
        if batch.base_offset != self.applied:
            raise InvariantViolation(
                f"state machine at {self.applied} given a batch at {batch.base_offset}", "apply-in-order"
            )
        if not batch.is_control:
            new = [r.decode() for r in batch.records]
            self.values.extend(new)
            self.digest = _digest(new, self.digest)
        self.applied = batch.end_offset

    def load(self, sid: OffsetAndEpoch, data: bytes) -> None:
        try:
            self.values = decode_state(data)
        except ValueError as e:
            raise InvariantViolation(f"snapshot {sid} does not decode: {e}", "snapshot-image") from e
        self.applied = sid.offset
        self.digest = _digest(self.values)


class Node:
    def __init__(
        self,
        node_id: int,
        voters: list[int] | VoterSet,
        config: RaftConfig,
        snapshot_every: int,
        directory_id: uuid.UUID = ZERO_UUID,
        bootstrap: Sequence[int] = (),
    ) -> None:
        self.id = node_id
        self.voters = voters  # the bootstrap voters (static ids, or KIP-853's initial set)
        self.directory_id = directory_id
        self.bootstrap = tuple(bootstrap)  # controller.quorum.bootstrap.servers, as node ids
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
        # Called with every Ready before it is persisted, and after the state machine
        # reached a new image ("replay" after a batch, "install" or "load" of a snapshot).
        self.on_persist: Callable[[Node, Ready], None] | None = None
        self.on_image: Callable[[Node, str], None] | None = None
        # Called when a crash armed by `crash_after_steps` strikes, before the core is gone.
        self.on_crash: Callable[[Node], None] | None = None

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
            if self.on_image is not None:
                self.on_image(self, "load")
        log = RaftLog(disk.batches, start_offset=start, snapshot_id=sid)
        voters = self.voters
        if sid is not None and isinstance(voters, VoterSet):
            voters = decode_snapshot(disk.snapshots[sid])[1] or voters
        self.core = RaftCore(
            node_id=self.id,
            voters=voters,
            directory_id=self.directory_id,
            bootstrap=self.bootstrap,
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
                if self.on_crash is not None:
                    self.on_crash(self)
                self.crash()
                # A leader's messages left before its fsync (`Ready.send_before_sync`): they
                # are on the network even though the node died before the fsync ended.
                return list(ready.messages) if ready.send_before_sync and ready.must_sync else []
            self._persist(ready)
            out.extend(ready.messages)
            for batch in ready.committed:
                self._apply(batch)
            core.advance(ready)
        return out

    def _persist(self, ready: Ready) -> None:
        disk = self.disk
        if self.on_persist is not None:
            self.on_persist(self, ready)
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
            voters = decode_snapshot(data)[1]
            if voters is not None and self.core is not None:
                self.core.load_snapshot_voters(sid, None, voters)
            if self.on_image is not None:
                self.on_image(self, "install")
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
                voters = core.voters_at(sid.offset)[1] if isinstance(self.voters, VoterSet) else None
                self.disk.snapshots[sid] = encode_state(self.sm.values, voters)
                core.snapshot_created(sid)
            self._since_snapshot = 0


@dataclass(order=True)
class _InFlight:
    deliver_at: int
    seq: int
    envelope: Envelope = field(compare=False)
    # "", "duplicate", "replay", or "reset": the request `envelope` failed (its destination's
    # connection was refused or reset); the notice goes to its source's incarnation `incarnation`.
    kind: str = field(default="", compare=False)
    incarnation: int = field(default=0, compare=False)


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
        connection_resets: bool = False,
        dynamic: bool = False,
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
        self.dynamic = dynamic
        self.snapshot_every = snapshot_every
        self.initial_voters: VoterSet = VoterSet.static(self.voter_ids)
        self._directories = 0
        bootstrap: list[int] | VoterSet = self.voter_ids
        if dynamic:
            dirs = {i: self._new_directory() for i in self.voter_ids}
            self.initial_voters = VoterSet.of(VoterNode(ReplicaKey(i, dirs[i])) for i in self.voter_ids)
            bootstrap = self.initial_voters
            dirs |= {i: self._new_directory() for i in self.observer_ids}
        self.nodes = {
            i: Node(i, bootstrap, self.config, snapshot_every, dirs[i] if dynamic else ZERO_UUID)
            for i in self.voter_ids + self.observer_ids
        }
        # KIP-853: committed voter sets by the offset of their VotersRecord; the answers to
        # change_voters by token; the epochs whose leader's voter set was checked.
        self.committed_voters: dict[Offset, VoterSet] = {}
        # The voter set whose majority the leader counted when it last moved `max_committed`
        # (its latest, committed or not: Kafka's rule). Its log may be the only one that holds
        # that set (the leader crashed before the change spread), so no live core shows it.
        self.committed_under: VoterSet | None = None
        self.voter_results: dict[tuple[int, int, int], VoterChangeResult] = {}  # (node, incarnation, token)
        self._voters_checked: set[int] = set()
        self.now = 0
        self.max_delay_ms = max_delay_ms
        # TCP's view of a dead process (issue 24): a request to a node that is down, or waiting
        # unanswered at a node that goes down, fails at its sender after a network delay
        # (connection refused or reset), as the real transport reports to `request_failed`.
        # False: a dead node is silent, as a host that lost power or a cut cable.
        self.connection_resets = connection_resets
        self._unanswered: dict[int, dict[tuple[int, int], Envelope]] = {}  # node -> (source, request id) -> request
        # Time to a new leader: when the last leader stopped (crash or shutdown) and, for every
        # stop, how long until a live node led an epoch above the stopped leader's (ms).
        self.leader_stopped: tuple[int, int] | None = None  # (time, epoch of the stopped leader)
        self.failover_ms: list[int] = []
        self.loss = 0.0
        self.duplicate = 0.0
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
        # Issue-9 properties.
        self.named_leaders: dict[int, int] = {}  # epoch -> the leader any durable state names
        # node -> {epoch e: the highest fetch offset the leader of e confirmed in e}; an ack
        # pledges only what is committed by epoch e (see `_check_acked_kept`).
        self.acked: dict[int, dict[int, Offset]] = {}
        self.acked_committed: dict[int, Offset] = {}  # node -> committed prefix it acknowledged
        self._ack_verified: dict[int, Offset] = {}  # node -> its disk was compared below this
        self.images: dict[Offset, tuple[int, str, int]] = {}  # applied offset -> (digest, how, node)
        # Coverage: what kinds of histories this run reached.
        self.coverage: Counter[str] = Counter()
        self._epoch_end: dict[int, Offset] = {}  # epoch -> end of its leader's log
        self._leader_seen: set[int] = set()  # epochs whose leader's start was examined
        self._overwritten: dict[int, tuple[Offset, int]] = {}  # epoch -> (from offset, overwriting epoch)
        self._fig8_active: dict[int, list[tuple[int, Offset]]] = {}  # leader epoch -> [(old epoch, from)]
        self._fig8_spread: set[tuple[int, int]] = set()  # (leader epoch, node)
        self._divergence: dict[int, set[int]] = {}  # node -> epochs removed in its current divergence
        self._diverged_in: dict[int, set[int]] = {}  # leader epoch -> nodes that truncated in it
        self._snapshot_wait: dict[int, int] = {}  # node -> its epoch when first sent to a snapshot
        self._chunks: dict[int, int] = {}  # node -> chunks received in its current transfer
        # Delayed messages: a share of all sent messages is kept, to be delivered again much later.
        self.stash_rate = 0.0
        self.stash_types: tuple[type, ...] | None = None  # keep only these messages (None: all)
        self._stash: list[Envelope] = []
        self._stop: Callable[[], bool] | None = None
        self._stopped = False
        for node in self.nodes.values():
            node.on_commit = self._on_commit
            node.on_persist = self._on_persist
            node.on_image = self._on_image
            node.on_crash = self._on_crash
            node.start(self.now, self.rng)
        self._drain_all()

    def _new_directory(self) -> uuid.UUID:
        self._directories += 1
        return uuid.UUID(int=(self.rng.getrandbits(64) << 16) | self._directories)

    # ------------------------------------------------------------ KIP-853

    def voter_sets_in_use(self) -> list[VoterSet]:
        """The committed voter set and every node's newest one: a live core's, or what a down
        node's disk holds (a leader that wrote an uncommitted change and crashed may be the only
        holder of the set a later election must count)."""
        sets = [self.committed_voter_set()]
        for n in self.nodes.values():
            if n.core is not None:
                sets.append(n.core.voter_set)
            else:
                sets.append(n.disk.latest_voter_set() or self.initial_voters)
        return sets

    def committed_voter_set(self) -> VoterSet:
        """The voter set of the committed log (the last committed VotersRecord)."""
        below = [o for o in self.committed_voters if o < self.max_committed]
        return self.committed_voters[max(below)] if below else self.initial_voters

    def change_voters(self, change: VoterChange) -> tuple[int, int, int] | None:
        """Submit a voter change to the leader; its answer lands in `voter_results` under
        the key returned."""
        node = self.leader()
        if node is None or node.core is None:
            return None
        key = (node.id, node.incarnation, node.core.change_voters(change, self.now))
        self._send(node.drain())
        self.check()
        return key

    def voter_node(self, node_id: int) -> VoterNode:
        """The replica running as `node_id` now (its current directory id)."""
        return VoterNode(ReplicaKey(node_id, self.nodes[node_id].directory_id))

    def wipe(self, node_id: int) -> None:
        """The node's disk is lost: it comes back empty with a new directory id, a new
        replica (its old votes and acknowledgements went with the disk), formatted without
        voters: it finds the leader through the others (controller.quorum.bootstrap.servers)."""
        self.crash(node_id)
        others = [i for i in self.nodes if i != node_id]
        node = Node(node_id, VoterSet(()), self.config, self.snapshot_every, self._new_directory(), others)
        old = self.nodes[node_id]
        node.on_commit, node.on_persist = self._on_commit, self._on_persist
        node.on_image, node.on_crash = self._on_image, self._on_crash
        node.incarnation = old.incarnation
        self.nodes[node_id] = node
        for memo in (self.max_epoch, self.acked, self.acked_committed, self._ack_verified, self._hw_checked):
            memo.pop(node_id, None)
        self._log_owner.pop(node_id, None)
        self._verified.pop((node_id, "disk"), None)
        self._verified.pop((node_id, "core"), None)
        self.votes = {k: v for k, v in self.votes.items() if k[0] != node_id}
        self.note("wiped_disks")

    def holders(self, voters: VoterSet, offset: Offset, leader: RaftCore | None) -> int:
        """How many of these voters (the replicas with their directory ids) durably hold the
        entry at `offset` (the leader's, or else the committed one)?"""
        holders = 0
        for n in voters.nodes:
            node = self.nodes.get(n.node_id)
            if node is None or not voters.is_voter(ReplicaKey(node.id, node.directory_id)):
                continue
            if leader is not None:
                holders += self._durably_holds(node, offset, leader)
            else:
                holders += self._disk_holds_committed(node, offset)
        return holders

    def _check_voter_sets(self) -> None:
        for node in self.nodes.values():
            core = node.core
            if core is None:
                continue
            # (An empty base: a replica formatted without voters, that learns them from the log.)
            history = [core._voter_history.base, *(v for _, v in core._voter_history.entries)]  # noqa: SLF001
            history = [v for v in history if v.nodes]
            for a, b in zip(history, history[1:], strict=False):
                if not a.overlaps_majority(b):
                    raise InvariantViolation(
                        f"node {node.id}: voter sets {sorted(a.ids)} -> {sorted(b.ids)} change more than one voter",
                        "one-voter-at-a-time",
                    )
            if core.role is not Role.LEADER:
                continue
            # (A new leader's own HW may lag what the cluster committed: judge by the latter.)
            committed_end = max(core.high_watermark, self.max_committed)
            uncommitted = [o for o, _ in core._voter_history.entries if o >= committed_end]  # noqa: SLF001
            if len(uncommitted) > 1:
                raise InvariantViolation(
                    f"leader {node.id} has {len(uncommitted)} uncommitted voter changes at {uncommitted}",
                    "one-change-in-flight",
                )
            if core.epoch not in self._voters_checked:
                self._voters_checked.add(core.epoch)
                committed = self.committed_voter_set()
                if not core.voter_set.overlaps_majority(committed):
                    raise InvariantViolation(
                        f"leader {node.id} of epoch {core.epoch} counts votes of {sorted(core.voters)}, "
                        f"committed voters are {sorted(committed.ids)}",
                        "no-disjoint-majorities",
                    )
                self.note("leaders_with_dynamic_voters")

    def note(self, kind: str, n: int = 1) -> None:
        """Count a history kind this run reached (and in the process-wide `COVERAGE`)."""
        self.coverage[kind] += n
        COVERAGE[kind] += n

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

    def drop_in_flight(self, source: int | None = None, destination: int | None = None) -> int:
        """Lose every message in flight from `source` and/or to `destination`."""
        keep = [
            f
            for f in self._queue
            if not (
                (source is None or f.envelope.source == source)
                and (destination is None or f.envelope.destination == destination)
            )
        ]
        dropped = len(self._queue) - len(keep)
        heapq.heapify(keep)
        self._queue = keep
        return dropped

    def replay(self, count: int, destination: int | None = None, types: tuple[type, ...] | None = None) -> int:
        """Deliver again, soon, up to `count` messages kept from the past (see `stash_rate`):
        old requests and answers, with the epochs and request ids they had then."""
        picks = [
            i
            for i, env in enumerate(self._stash)
            if (destination is None or env.destination == destination)
            and (types is None or isinstance(env.message, types))
        ]
        self.rng.shuffle(picks)
        chosen = sorted(picks[:count], reverse=True)
        for i in chosen:
            env = self._stash.pop(i)
            self._seq += 1
            delay = self.rng.randint(1, self.max_delay_ms)
            heapq.heappush(self._queue, _InFlight(self.now + delay, self._seq, env, "replay"))
        return len(chosen)

    # ------------------------------------------------------------ faults

    def crash(self, node_id: int) -> None:
        self._note_stop(node_id)
        self.nodes[node_id].crash()
        self._reset_connections(node_id)

    def _note_stop(self, node_id: int) -> None:
        core = self.nodes[node_id].core
        if core is not None and core.role is Role.LEADER:
            self.leader_stopped = (self.now, core.epoch)

    def _on_crash(self, node: Node) -> None:
        self._note_stop(node.id)
        self._reset_connections(node.id)

    def _reset_connections(self, node_id: int) -> None:
        """The node died: every request it held unanswered fails at its sender."""
        for env in self._unanswered.pop(node_id, {}).values():
            self._fail_request(env)

    def _fail_request(self, env: Envelope) -> None:
        source = self.nodes.get(env.source)
        if not self.connection_resets or source is None or source.core is None:
            return
        self._seq += 1
        delay = self.rng.randint(1, self.max_delay_ms)
        heapq.heappush(self._queue, _InFlight(self.now + delay, self._seq, env, "reset", source.incarnation))

    def crash_mid_ready(self, node_id: int, steps: int) -> None:
        """Crash the node after `steps` persistence steps of its next Ready: at once if
        one is pending, else during the next one it produces (after a message, a tick
        or a proposal). The driver drains every Ready after every event, so between
        events none is pending: without arming, this would be a plain crash."""
        node = self.nodes[node_id]
        if node.up and node.core is not None and node.core.has_ready():
            self._send(node.drain(crash_after_steps=steps))
        elif node.up:
            node.armed_crash = steps

    def restart(self, node_id: int) -> None:
        node = self.nodes[node_id]
        if not node.up:
            node.start(self.now, self.rng)
            self._send(node.drain())
            self.check()

    def shutdown(self, node_id: int) -> None:
        """Graceful: resign if leading, let the resignation go out, then stop. A leader
        first serves, taking no writes, until a voter has its whole log (or its bound
        passes): the cluster runs meanwhile."""
        node = self.nodes[node_id]
        core = node.core
        if core is None:
            return
        core.resign(self.now)
        self._send(node.drain())
        if core.role is Role.LEADER:
            self.run_until_event(lambda: node.core is not core or core.role is not Role.LEADER, limit_ms=60_000)
        if node.core is not core:
            return  # it crashed meanwhile (an armed crash)
        self._send(node.drain())
        self._note_stop(node_id)
        if core.role is Role.RESIGNED:
            self.leader_stopped = (self.now, core.epoch)
        node.crash()
        self._reset_connections(node_id)

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
            if self._stopped:
                return
            self._tick_due()
            if self._stopped or self.now >= end:
                return

    def run_until_event(self, predicate: Callable[[], bool], limit_ms: int = 60_000, propose_every_ms: int = 0) -> bool:
        """Run until `predicate()` holds, checked after every single event (a message or a
        tick), and stop right there: the caller acts before anything else happens."""
        if predicate():
            return True
        self._stop, self._stopped = predicate, False
        try:
            self.run_for(limit_ms, propose_every_ms)
            return self._stopped or predicate()
        finally:
            self._stop, self._stopped = None, False

    def _halt(self) -> bool:
        if self._stop is not None and self._stop():
            self._stopped = True
        return self._stopped

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
            item = heapq.heappop(self._queue)
            env = item.envelope
            if item.kind == "reset":
                self._deliver_reset(item)
                if self._halt():
                    return
                continue
            node = self.nodes.get(env.destination)
            if node is None or node.core is None:
                if env.is_request:
                    self._fail_request(env)  # connection refused
                continue
            core = node.core
            msg = env.message
            if env.is_request:
                self._unanswered.setdefault(env.destination, {})[(env.source, env.request_id)] = env
            epoch_before, end_before = core.epoch, core.log.end_offset
            sent_epoch = message_epoch(msg)
            if item.kind:
                self.note(f"{item.kind}_deliveries")
            if sent_epoch < epoch_before:
                self.note("stale_epoch_deliveries")
                if item.kind == "replay":
                    self.note("replayed_stale_epoch_deliveries")
            epochs_before = list(core.log.epoch_starts) if isinstance(msg, FetchResponse) else []
            if isinstance(msg, FetchRequest) and core.role is Role.LEADER:
                self._note_ack(env.source, msg, core)
            try:
                core.handle(env, self.now)
            except FatalQuorumError as e:  # the core refused to break safety: name the rule
                raise InvariantViolation(str(e), "no-truncation-below-hw") from e
            self.events += 1
            self._send(node.drain())
            if node.core is core:
                if sent_epoch > epoch_before and core.epoch == sent_epoch:
                    self.note("future_epoch_transitions")
                if isinstance(msg, FetchResponse) and env.request_id:
                    self._classify_fetch_answer(node, core, msg, end_before, epochs_before)
            self.check()
            if self._halt():
                return

    def _deliver_reset(self, item: _InFlight) -> None:
        env = item.envelope
        node = self.nodes[env.source]
        if node.core is None or node.incarnation != item.incarnation:
            return  # the requester died since: its requests died with it
        self.note("connection_resets")
        node.core.request_failed(env.destination, env.request_id, self.now)
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
            if self._halt():
                return
            # A deadline still in the past after a tick would make a driver spin at this
            # instant forever; remember it so that time can move on (see the unit tests:
            # `next_deadline()` should be in the future after `tick`).
            core = node.core
            if core is not None and core.next_deadline() <= self.now:
                self._stale[node.id] = (core.next_deadline(), self.now)
                self.stale_ticks += 1

    def _send(self, envelopes: list[Envelope]) -> None:
        for env in envelopes:
            if getattr(env.message, "error", None) == ErrorCode.FENCED_LEADER_EPOCH:
                self.note("stale_epoch_refusals")
            if not env.is_request:
                self._unanswered.get(env.source, {}).pop((env.destination, env.request_id), None)
            if (env.source, env.destination) in self.blocked:
                continue
            if self.loss and self.rng.random() < self.loss:
                continue
            if (
                self.stash_rate
                and (self.stash_types is None or isinstance(env.message, self.stash_types))
                and self.rng.random() < self.stash_rate
            ):
                if len(self._stash) < 256:
                    self._stash.append(env)
                else:
                    self._stash[self.rng.randrange(len(self._stash))] = env
            copies = 2 if self.duplicate and self.rng.random() < self.duplicate else 1
            for copy in range(copies):
                self._seq += 1
                delay = self.rng.randint(1, self.max_delay_ms)
                heapq.heappush(self._queue, _InFlight(self.now + delay, self._seq, env, "duplicate" if copy else ""))

    # ------------------------------------------------------------ coverage

    def _classify_fetch_answer(
        self, node: Node, core: RaftCore, resp: FetchResponse, end_before: Offset, epochs_before: list[tuple[int, int]]
    ) -> None:
        """What an answer to a Fetch did to the follower: diverging truncation, a pointer to
        the snapshot, or records (a partial fetch if the leader's HW is beyond them)."""
        end_after = core.log.end_offset
        if resp.diverging_epoch is not None:
            if end_after >= end_before:
                return
            self.note("diverging_epoch_truncations")
            removed = set()
            for i, (epoch, start) in enumerate(epochs_before):
                stop = epochs_before[i + 1][1] if i + 1 < len(epochs_before) else end_before
                if stop > end_after and start < end_before:
                    removed.add(epoch)
            self._divergence.setdefault(node.id, set()).update(removed)
            nodes = self._diverged_in.setdefault(core.epoch, set())
            nodes.add(node.id)
            if len(nodes) == 2:
                self.note("multi_node_divergences")
        elif resp.snapshot_id is not None:
            self.note("snapshot_redirects")
            self._snapshot_wait.setdefault(node.id, core.epoch)
        elif resp.error == ErrorCode.NONE and resp.leader_epoch == core.epoch:
            run = self._divergence.pop(node.id, None)
            if run is not None and len(run) >= 2:
                self.note("multi_epoch_divergences")
            if end_after > end_before:
                self._snapshot_wait.pop(node.id, None)
                if resp.high_watermark > end_after:
                    self.note("partial_fetches")

    def _on_persist(self, node: Node, ready: Ready) -> None:
        core = node.core
        for result in ready.voter_changes:
            self.voter_results[(node.id, node.incarnation, result.token)] = result
        if ready.snapshot_chunks:
            for chunk in ready.snapshot_chunks:
                if chunk.position == 0 and any(node.disk.receiving.values()):
                    self.note("snapshot_transfer_restarts")
            self._chunks[node.id] = self._chunks.get(node.id, 0) + len(ready.snapshot_chunks)
        if ready.install_snapshot is not None:
            self.note("snapshot_installs")
            if self._chunks.get(node.id, 0) >= 2:
                self.note("multi_chunk_snapshot_installs")
            self._chunks[node.id] = 0
            first_epoch = self._snapshot_wait.pop(node.id, None)
            if core is not None and first_epoch is not None and core.epoch > first_epoch:
                self.note("snapshot_installs_across_leader_change")
        cut = ready.truncate_to
        if cut is not None and core is not None and cut < self.max_committed:
            # Issue 23: a node still in an epoch before the one that committed the entry at
            # `cut` (which it holds) follows that older epoch's leader and truncates it.
            if self.committed_epoch.get(cut, 0) > core.epoch and self._disk_holds_committed(node, cut):
                self.note("later_commit_cut_by_" + ("voter" if core.is_voter else "observer"))
        if ready.entries and self._fig8_active and core is not None and core.role is Role.FOLLOWER:
            stale = self._fig8_active.get(core.epoch)
            if stale and (core.epoch, node.id) not in self._fig8_spread:
                for old_epoch, start in stale:
                    if any(b.epoch == old_epoch and b.end_offset > start for b in ready.entries):
                        self._fig8_spread.add((core.epoch, node.id))
                        self.note("figure8_replications")
                        break

    def _on_image(self, node: Node, how: str) -> None:
        """Same applied offset => same image, however the state machine got there."""
        sm = node.sm
        prev = self.images.setdefault(sm.applied, (sm.digest, how, node.id))
        if prev[0] != sm.digest:
            prop = "same-image" if how == prev[1] == "replay" else "snapshot-image"
            raise InvariantViolation(
                f"node {node.id} ({how}) and node {prev[2]} ({prev[1]}) hold different images at {sm.applied}", prop
            )
        if prev[2] != node.id and (how == "replay") != (prev[1] == "replay"):
            self.note("snapshot_image_matches")

    def _on_new_leader(self, node: Node, core: RaftCore) -> None:
        """Figure 8 of the Raft paper, detected as it happens: a leader of epoch e writes
        entries that reach no majority; a leader of a later epoch starts below their end
        (overwrites them); the leader of e comes back as leader of a yet later epoch still
        holding them, and may replicate them to others (`_on_persist`)."""
        ls = core.state
        assert isinstance(ls, LeaderState)
        epoch, start = core.epoch, ls.epoch_start_offset
        for old_epoch, old_end in self._epoch_end.items():
            if old_epoch < epoch and old_end > start:
                prev = self._overwritten.get(old_epoch)
                if prev is None:
                    self.note("overwritten_uncommitted_suffixes")
                self._overwritten[old_epoch] = (min(start, prev[0]) if prev else start, epoch)
        for old_epoch, (start_of_overwrite, by_epoch) in self._overwritten.items():
            if by_epoch < epoch and self.leaders.get(old_epoch) == node.id:
                held = core.log.end_offset_for_epoch(old_epoch)
                if held.epoch == old_epoch and held.offset > start_of_overwrite:
                    self.note("figure8_histories")
                    self._fig8_active.setdefault(epoch, []).append((old_epoch, start_of_overwrite))

    # ------------------------------------------------------------ acknowledgements

    def _note_ack(self, source: int, req: FetchRequest, leader: RaftCore) -> None:
        """A Fetch at offset k that reaches the leader of its epoch acknowledges the
        fetcher's log below k, if that log durably matches the leader's there."""
        k = req.fetch_offset
        fetcher = self.nodes.get(source)
        if fetcher is None or req.current_leader_epoch != leader.epoch:
            return
        log = leader.log
        if not (log.start_offset < k <= log.end_offset):
            return
        mine = _batch_at(fetcher.disk.batches, k - 1)
        theirs = log.batches[log.index_of(k - 1)]
        if mine is not None and (mine.base_offset, mine.epoch) == (theirs.base_offset, theirs.epoch):
            self._ack(source, leader.epoch, k)

    def _ack(self, node_id: int, epoch: int, k: Offset) -> None:
        """Node `node_id` holds the log of the leader of `epoch` below `k`. Keeps, per node,
        only the acks no other one covers: (e, k) covers (e2, k2) when e >= e2 and k >= k2."""
        acks = self.acked.setdefault(node_id, {})
        if k <= self.acked_committed.get(node_id, 0) or any(e >= epoch and o >= k for e, o in acks.items()):
            return
        for e in [e for e, o in acks.items() if e <= epoch and o <= k]:
            del acks[e]
        acks[epoch] = k

    def _check_acked_kept(self, node: Node, disk_changed: Offset | None) -> None:
        """Committed entries that a node acknowledged never change or vanish from its disk
        (the ones below its log start are in its snapshot, checked by the image property).

        An ack in epoch e pledges the entries committed by a leader of epoch <= e (their
        `committed_epoch`), not those committed later. Raft's Leader Completeness puts an
        entry committed in epoch c in the log of every leader of an epoch above c, and the
        leader of e held the acked log itself; a node that acked in e follows only leaders of
        epochs >= e from then on, so none of them can make it cut an entry committed by
        epoch e. An entry acked in e but first committed in a later epoch c (a deposed
        leader's suffix that the leader of c re-replicated and committed) is not in the logs
        of the leaders of the epochs between e and c: a node still in one of those epochs
        (an observer that has not heard of c, or a voter outside c's majority) rightly
        truncates it when that epoch's leader answers with a diverging epoch, as Kafka's
        followers do (issue 23, seed 9 of the back-to-back failures scenario). That ack
        never counted toward c's HW; the leader of c counts only fetches made in c."""
        nid = node.id
        have = self.acked_committed.get(nid, 0)
        acks = self.acked.get(nid, {})
        for epoch in list(acks):
            k = acks[epoch]
            upto = have
            while upto < min(k, self.max_committed) and self.committed_epoch.get(upto, 1 << 62) <= epoch:
                upto += 1
            if upto < min(k, self.max_committed):
                k = acks[epoch] = upto  # committed after epoch: beyond `upto`, this ack pledges nothing
            have = max(have, upto)
            if k <= have:
                del acks[epoch]
        self.acked_committed[nid] = have
        if not have:
            return
        disk = node.disk
        if disk.end_offset < have:
            raise InvariantViolation(
                f"node {nid} acknowledged committed entries below {have}, its disk ends at {disk.end_offset}",
                "acked-committed-kept",
            )
        verified = self._ack_verified.get(nid, 0)
        if disk_changed is not None:
            verified = min(verified, disk_changed)
        lo = max(verified, disk.log_start)
        if lo < have:
            i = bisect_right(disk.batches, lo, key=_base_offset) - 1
            for b in disk.batches[max(i, 0) :]:
                if b.base_offset >= have:
                    break
                for j, record in enumerate(b.records):
                    offset = b.base_offset + j
                    if lo <= offset < have and self.committed.get(offset, (b.epoch, record)) != (b.epoch, record):
                        raise InvariantViolation(
                            f"node {nid} acknowledged committed offset {offset}, now holds another entry there",
                            "acked-committed-kept",
                        )
        self._ack_verified[nid] = have

    def _drain_all(self) -> None:
        for node in self.nodes.values():
            if node.core is not None:
                self._send(node.drain())

    # --------------------------------------------------------- invariants

    def check(self) -> None:
        for node in self.nodes.values():
            core = node.core
            # Epochs never decrease (durable and in memory).
            epochs = [node.disk.election.epoch if node.disk.election else 0]
            if core is not None:
                epochs.append(core.epoch)
            for e in epochs:
                if e < self.max_epoch.get(node.id, 0):
                    raise InvariantViolation(f"node {node.id} epoch went back to {e}", "epoch-monotonic")
                self.max_epoch[node.id] = max(self.max_epoch.get(node.id, 0), e)
            # At most one leader per epoch (live leaders and durable claims).
            claims = []
            if core is not None and core.role is Role.LEADER:
                claims.append(core.epoch)
            if node.disk.election is not None and node.disk.election.leader_id == node.id:
                claims.append(node.disk.election.epoch)
            for epoch in claims:
                prev = self.leaders.setdefault(epoch, node.id)
                if prev != node.id:
                    raise InvariantViolation(f"two leaders in epoch {epoch}: {prev} and {node.id}", "single-leader")
            # ... and a leader never leads again in its epoch after a restart (it comes back Resigned).
            if core is not None and core.role is Role.LEADER:
                term = self.leader_runs.setdefault(core.epoch, (node.id, node.incarnation))
                if term != (node.id, node.incarnation):
                    raise InvariantViolation(
                        f"node {node.id} leads epoch {core.epoch} again after a restart", "single-leader"
                    )
            # At most one vote per epoch: a durable vote is never changed or forgotten.
            election = node.disk.election
            if election is not None and election.voted_id != -1 and (self.dynamic or node.id in self.voter_ids):
                key = (node.id, election.epoch)
                voted = self.votes.setdefault(key, election.voted_id)
                if voted != election.voted_id:
                    raise InvariantViolation(
                        f"node {node.id} voted for {voted} and {election.voted_id} in epoch {election.epoch}",
                        "one-vote",
                    )
            elif election is not None and (node.id, election.epoch) in self.votes:
                raise InvariantViolation(f"node {node.id} forgot its vote in epoch {election.epoch}", "one-vote")
            if core is None:
                continue
            # Persist before send: once a Ready is carried out, disk and memory agree.
            state = core.election_state
            if state is not election and state != (election or ElectionState(epoch=0)) and not core.has_ready():
                raise InvariantViolation(
                    f"node {node.id} runs {core.election_state}, disk has {election}", "persist-first"
                )
            # A leader named in a durable state is the one leader of its epoch.
            if election is not None and election.leader_id != -1:
                named = self.named_leaders.setdefault(election.epoch, election.leader_id)
                if named != election.leader_id or self.leaders.get(election.epoch, named) != named:
                    raise InvariantViolation(
                        f"node {node.id} names {election.leader_id} leader of epoch {election.epoch}, "
                        f"known leader {self.leaders.get(election.epoch, named)}",
                        "single-leader",
                    )
            # The high watermark is never above the log end offset.
            if core.high_watermark > core.log.end_offset:
                raise InvariantViolation(
                    f"node {node.id} HW {core.high_watermark} above its log end {core.log.end_offset}", "hw-le-leo"
                )
            if core.role is Role.LEADER:
                self._epoch_end[core.epoch] = core.log.end_offset
                if core.epoch not in self._leader_seen:
                    self._leader_seen.add(core.epoch)
                    self._on_new_leader(node, core)
                stopped = self.leader_stopped
                if stopped is not None and core.epoch > stopped[1]:
                    self.failover_ms.append(self.now - stopped[0])
                    self.leader_stopped = None
                self._ack(node.id, core.epoch, min(node.disk.end_offset, core.log.end_offset))
            # A node's high watermark never decreases while it runs.
            if core.high_watermark < node.last_hw:
                raise InvariantViolation(
                    f"node {node.id} HW went back {node.last_hw} -> {core.high_watermark}", "hw-monotonic"
                )
            node.last_hw = core.high_watermark
        disk_changes = self._check_log_matching()
        self._record_commits()
        self._check_committed()
        if self.dynamic:
            self._check_voter_sets()
        for node in self.nodes.values():
            self._check_acked_kept(node, disk_changes.get(node.id))

    def _entry(self, node: Node, offset: Offset) -> tuple[int, bytes] | None:
        """(epoch, record) at `offset` in a live node's log, or None if outside it."""
        core = node.core
        assert core is not None
        log = core.log
        if offset < log.start_offset or offset >= log.end_offset:
            return None
        b = log.batches[log.index_of(offset)]
        return b.epoch, b.records[offset - b.base_offset]

    def _check_log_matching(self) -> dict[int, int]:
        """Same (base offset, epoch) batch => same content and same predecessor, in every
        log (memory and disk) and at every time: a leader writes each (offset, epoch) once.
        And a running node never changes its log below its high watermark.

        Incremental: each log is compared with what it was at the previous check; only
        batches appended since are examined, unless the log was truncated or rebuilt.
        Returns, per node, where its disk log was cut since the last check."""
        disk_changes: dict[int, int] = {}
        for node in self.nodes.values():
            cut = self._match_log((node.id, "disk"), node.disk.batches, node.id)
            if cut is not None:
                disk_changes[node.id] = cut
            core = node.core
            if core is not None:
                changed = self._match_log((node.id, "core"), core.log.batches, node.id)
                if (
                    changed is not None
                    and changed < core.high_watermark
                    and self._log_owner.get(node.id) == node.incarnation
                ):
                    raise InvariantViolation(
                        f"node {node.id} changed its log at {changed}, below its HW {core.high_watermark}",
                        "no-change-below-hw",
                    )
                self._log_owner[node.id] = node.incarnation
        return disk_changes

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
        for b in batches[start:]:
            key = (b.base_offset, b.epoch)
            other = seen.setdefault(key, (b.records, prev))
            if other[0] != b.records or (other[1] is not None and prev is not None and other[1] != prev):
                raise InvariantViolation(f"log matching broken at {key} on node {node_id}", "log-matching")
            prev = key
        self._verified[name] = list(batches)
        return changed

    def _on_commit(self, node: Node, batch: Batch) -> None:
        """Every batch a node applies is committed: record it, and it must never differ."""
        if batch.control_type is ControlType.KRAFT_VOTERS:
            self.committed_voters.setdefault(batch.base_offset, decode_voters(batch.records[0]))
        core = node.core
        for i, record in enumerate(batch.records):
            offset = batch.base_offset + i
            if core is not None:
                # Known committed in this node's epoch: every leader of a later epoch must hold it.
                self.committed_epoch.setdefault(offset, core.epoch)
            entry = (batch.epoch, record)
            prev = self.committed.setdefault(offset, entry)
            if prev != entry:
                raise InvariantViolation(
                    f"node {node.id} applied {entry} at {offset}, committed was {prev}", "committed-unchanged"
                )

    def _record_commits(self) -> None:
        leader = self.leader()
        if leader is None or leader.core is None:
            return
        core = leader.core
        hw = core.high_watermark
        if hw <= self.max_committed:
            return
        # The HW must be on a majority of the leader's voters' durable logs (or their snapshots).
        holders = self.holders(core.voter_set, hw - 1, core)
        if holders < core.voter_set.majority:
            raise InvariantViolation(f"HW {hw} of leader {leader.id} is on only {holders} voters", "hw-on-majority")
        for offset in range(self.max_committed, hw):
            self.committed_epoch.setdefault(offset, core.epoch)
            entry = self._entry(leader, offset)
            if entry is None:
                continue  # below the leader's snapshot (deleted in the event that committed it)
            if offset in self.committed and self.committed[offset] != entry:
                raise InvariantViolation(f"committed offset {offset} changed", "committed-unchanged")
            self.committed[offset] = entry
        self.max_committed = hw
        self.committed_under = core.voter_set

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
                            raise InvariantViolation(
                                f"node {node.id} has different committed data at {offset}", "committed-unchanged"
                            )
            # Leader completeness: a leader of a later epoch holds every committed entry.
            if core.role is Role.LEADER and self.max_committed > 0:
                last = self.max_committed - 1
                if self.committed_epoch.get(last, 1 << 62) < core.epoch:
                    if core.log.end_offset < self.max_committed:
                        raise InvariantViolation(
                            f"leader {node.id} (epoch {core.epoch}) lacks committed {last}", "leader-completeness"
                        )
                    entry = self._entry(node, last)
                    if entry is not None and entry != self.committed[last]:
                        raise InvariantViolation(
                            f"leader {node.id} has a different committed entry at {last}", "leader-completeness"
                        )
        # Nothing committed is ever lost: every committed offset is durable on a majority of
        # the committed voter set, or, while a voter change is uncommitted, of a set that some
        # log already uses (a live core's, or the one the committing leader counted, whose log
        # may be down): the sets differ by one voter, so their majorities overlap.
        if self.max_committed:
            last = self.max_committed - 1
            if last in self.committed:
                sets = [self.committed_voter_set()]
                if self.committed_under is not None and self.dynamic:
                    sets.append(self.committed_under)
                sets += [n.core.voter_set for n in self.nodes.values() if n.core is not None and self.dynamic]
                counts = [(self.holders(vs, last, None), vs.majority) for vs in sets]
                if all(held < majority for held, majority in counts):
                    raise InvariantViolation(
                        f"committed offset {last} is durable on only {counts[0][0]} voters", "committed-durable"
                    )

    def _disk_holds_committed(self, node: Node, offset: Offset) -> bool:
        sid = node.disk.latest_snapshot()
        if sid is not None and sid.offset > offset:
            return True
        held = _batch_at(node.disk.batches, offset)
        return held is not None and (held.epoch, held.records[offset - held.base_offset]) == self.committed.get(offset)

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
