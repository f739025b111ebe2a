"""`RaftCore`: KIP-595 Raft as a pure, deterministic state machine.

The core never touches a clock, a socket, a file or unseeded randomness. The
driver feeds it messages (`handle`), the time (`tick`), proposals (`propose`)
and a graceful-shutdown request (`resign`), then collects a `Ready`, carries it
out in the order `quorum.raft.ready` documents and calls `advance`.

Safety rules kept here (and checked by the simulation tests):
- epochs never decrease; at most one vote per epoch, persisted before it is sent;
- a leader is elected only by a majority of voters whose logs are not ahead of it;
- followers pull; a Fetch at offset N acknowledges (durably) everything below N;
- the high watermark is the largest offset on a majority of voters, moves only
  once a majority has passed the start of the leader's epoch, and never goes back;
- nothing below the high watermark is ever truncated.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence
from dataclasses import replace

from quorum.raft.config import RaftConfig
from quorum.raft.control_records import encode_leader_change
from quorum.raft.describe import QuorumDescription, ReplicaDescription
from quorum.raft.errors import ErrorCode, FatalQuorumError, IllegalTransitionError, NotLeaderError
from quorum.raft.kraft_control import decode_kraft_version, decode_voters, kraft_version_batch, voters_batch
from quorum.raft.log import RaftLog, Validity
from quorum.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    Envelope,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Message,
    VoteRequest,
    VoteResponse,
)
from quorum.raft.ready import Ready, SnapshotChunk
from quorum.raft.roles import (
    ALLOWED_TRANSITIONS,
    OBSERVER_ROLES,
    CandidateState,
    FollowerState,
    LeaderState,
    ParkedFetch,
    PendingVoterChange,
    ProspectiveState,
    ReplicaProgress,
    ResignedState,
    Role,
    RoleState,
    SnapshotFetch,
    UnattachedState,
)
from quorum.raft.snapshot_source import SnapshotSource
from quorum.raft.types import (
    NO_LEADER,
    NO_VOTE,
    Batch,
    ControlType,
    ElectionState,
    Epoch,
    NodeId,
    Offset,
    OffsetAndEpoch,
)
from quorum.raft.voter_change import (
    AddVoter,
    LeaderView,
    ObserverFetchState,
    UpgradeKRaftVersion,
    VoterChange,
    VoterChangeResult,
    decide,
    decide_upgrade,
)
from quorum.raft.voter_set import (
    KRAFT_VERSION_DYNAMIC,
    KRAFT_VERSION_STATIC,
    ZERO_UUID,
    OffsetHistory,
    ReplicaKey,
    VoterSet,
)

# Base of the binary exponential election backoff, ms (Kafka's RETRY_BACKOFF_BASE_MS).
_BACKOFF_BASE_MS = 100

# State kinds as tuples for isinstance (in an expression `A | B` builds a new union object
# at every evaluation: about 150 ns, a few hundred instructions, per check).
_FOLLOWING_OR_LEADING = (FollowerState, LeaderState, ResignedState)
_ELECTING = (ProspectiveState, CandidateState)
_UNATTACHED_OR_PROSPECTIVE = (UnattachedState, ProspectiveState)
_LEADING = (LeaderState, ResignedState)


class RaftCore:
    """One replica of the metadata log. Not thread-safe; one driver calls it."""

    def __init__(
        self,
        *,
        node_id: NodeId,
        voters: Sequence[NodeId] | VoterSet,
        config: RaftConfig,
        rng: random.Random,
        now_ms: int,
        election: ElectionState | None = None,
        log: RaftLog | None = None,
        snapshots: SnapshotSource | None = None,
        directory_id: uuid.UUID = ZERO_UUID,
        kraft_version: int | None = None,
        bootstrap: Sequence[NodeId] = (),
    ) -> None:
        """`voters`: the voter set as of the log's start: node ids (the static
        controller.quorum.voters, kraft.version 0) or a `VoterSet` (KIP-853: the bootstrap
        checkpoint's or the latest snapshot's, kraft.version 1 unless told otherwise). The
        VotersRecord and KRaftVersionRecord batches in `log` apply on top. `bootstrap`: ids to
        ask for the leader while no voter is known (controller.quorum.bootstrap.servers)."""
        base = voters if isinstance(voters, VoterSet) else VoterSet.static(voters)
        if not base.nodes and not bootstrap:
            raise ValueError("a quorum needs at least one voter")
        self.node_id = node_id
        self.directory_id = directory_id
        self._bootstrap = tuple(bootstrap)
        if kraft_version is None:
            kraft_version = KRAFT_VERSION_DYNAMIC if isinstance(voters, VoterSet) else KRAFT_VERSION_STATIC
        # The voter set and kraft.version in force at each offset (Kafka's VoterSetHistory).
        self._voter_history: OffsetHistory[VoterSet] = OffsetHistory(base)
        self._kraft_history: OffsetHistory[int] = OffsetHistory(kraft_version)
        self._voter_results: list[VoterChangeResult] = []
        self._next_token = 1
        self.config = config
        self._rng = rng
        self._now = now_ms
        self.log = log if log is not None else RaftLog()
        for batch in self.log.batches:
            self._track_control(batch, notify=False)
        self._snapshots = snapshots
        self._next_request_id = 1

        # Durable election state: `_election` is the latest, `_persisted` what the
        # driver has been told to write. They differ only between handle() and ready().
        self._election = election if election is not None else ElectionState(epoch=0)
        self._persisted: ElectionState | None = election

        # The high watermark this replica knows; monotonic (it is committed data).
        self.high_watermark: Offset = self.log.start_offset
        self._reported_hw: Offset = self.high_watermark
        self._applied: Offset = self.log.start_offset  # committed batches handed out below this

        # Log persistence: memory and disk agree below `_stable_end`; disk ends at
        # `_disk_end`; `_flushed_end` is what an fsync has made durable.
        end = self.log.end_offset
        self._stable_end = end
        self._disk_end = end
        self._flushed_end = end

        self._out: list[Envelope] = []
        self._chunks: list[SnapshotChunk] = []
        self._install: OffsetAndEpoch | None = None
        self._delete_before: Offset | None = None
        self._election_retries = 0

        # Batch timestamps are wall-clock ms (as Kafka's CreateTime) while timers run on the
        # driver's clock: timestamp = now_ms + wall_clock_offset_ms. The driver keeps it current.
        self.wall_clock_offset_ms = 0
        self._shutting_down = False
        self.role: Role = Role.UNATTACHED
        self.state: RoleState = UnattachedState(now_ms)
        self._initialize()

    # ------------------------------------------------------------------ public

    @property
    def epoch(self) -> Epoch:
        return self._election.epoch

    @property
    def leader_id(self) -> NodeId:
        """The leader of the current epoch as far as this node knows, or -1.

        A resigned leader answers -1: it will not lead again in this epoch."""
        if self.role is Role.RESIGNED:
            return NO_LEADER
        return self._election.leader_id

    @property
    def voted_id(self) -> NodeId:
        return self._election.voted_id

    @property
    def election_state(self) -> ElectionState:
        return self._election

    @property
    def voter_set(self) -> VoterSet:
        """The latest voter set in the log, committed or not: what elections and the high
        watermark use (Kafka's rule)."""
        return self._voter_history.latest()

    @property
    def voters(self) -> frozenset[NodeId]:
        return self.voter_set.ids

    @property
    def kraft_version(self) -> int:
        return self._kraft_history.latest()

    @property
    def replica_key(self) -> ReplicaKey:
        return ReplicaKey(self.node_id, self.directory_id)

    def voters_at(self, end_offset: Offset) -> tuple[int, VoterSet]:
        """(kraft.version, voter set) of the log below `end_offset`: what a snapshot ending
        there must hold."""
        return self._kraft_history.value_at(end_offset - 1), self._voter_history.value_at(end_offset - 1)

    @property
    def is_voter(self) -> bool:
        return self.voter_set.is_voter(self.replica_key)

    @property
    def stands(self) -> bool:
        """Whether this replica stands for election when it has no leader: a voter does, and
        so does a replica that the latest voter change removed while that change is not known
        to be committed. Without the second, a leader that removed itself and lost leadership
        before the change committed would hold the longest log and never stand, while the
        others, whose logs lack the change, could never win its vote (a liveness deadlock).
        Votes are still counted against the latest voter set, which does not hold this
        replica: it never counts its own vote, and a leader it becomes resigns once the change
        commits, as the removed leader it was would have."""
        if self.is_voter:
            return True
        changed_at = self._voter_history.latest_offset()
        if changed_at < 0 or changed_at < self.high_watermark:
            return False
        return self._voter_history.value_at(changed_at - 1).is_voter(self.replica_key)

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    @property
    def majority(self) -> int:
        return self.voter_set.majority

    def tick(self, now_ms: int) -> None:
        """Advance time: fire every deadline that has passed."""
        self._now = max(self._now, now_ms)
        match self.state:
            case UnattachedState() as s:
                if self._now >= s.deadline:
                    if self.stands:
                        self._start_election()
                    else:
                        self._probe_for_leader()
            case ProspectiveState() as p:
                if self._now >= p.deadline:
                    self._lose_pre_vote()
                elif self._now >= p.resend_ms:
                    # Voters that refused may have lost their leader since: ask again.
                    p.rejected.clear()
                    self._send_votes(pre_vote=True, skip=p.granted)
                    p.resend_ms = self._now + self._vote_resend_ms()
            case CandidateState() as c:
                if self._now >= c.deadline:
                    if c.backing_off or not self.config.pre_vote:
                        self._start_election()
                    else:
                        self._back_off(c)
                elif not c.backing_off and self._now >= c.resend_ms:
                    self._send_votes(pre_vote=False, skip=c.granted | c.rejected)
                    c.resend_ms = self._now + self._vote_resend_ms()
            case FollowerState() as f:
                self._tick_follower(f)
            case LeaderState() as ls:
                self._tick_leader(ls)
            case ResignedState() as r:
                if self._now >= r.deadline and not self._shutting_down:
                    self._start_election()
                elif r.unacked and self._now >= r.resend_ms:
                    self._send_end_quorum(r)

    def handle(self, envelope: Envelope, now_ms: int) -> None:
        """Process one message addressed to this node."""
        self._now = max(self._now, now_ms)
        if envelope.destination != self.node_id:
            return
        msg = envelope.message
        match msg:
            case VoteRequest():
                self._on_vote_request(envelope, msg)
            case VoteResponse():
                self._on_vote_response(envelope, msg)
            case BeginQuorumEpochRequest():
                self._on_begin_quorum(envelope, msg)
            case BeginQuorumEpochResponse():
                self._on_begin_quorum_response(envelope, msg)
            case EndQuorumEpochRequest():
                self._on_end_quorum(envelope, msg)
            case EndQuorumEpochResponse():
                self._on_end_quorum_response(envelope, msg)
            case FetchRequest():
                self._on_fetch_request(envelope, msg)
            case FetchResponse():
                self._on_fetch_response(envelope, msg)
            case FetchSnapshotRequest():
                self._on_fetch_snapshot_request(envelope, msg)
            case FetchSnapshotResponse():
                self._on_fetch_snapshot_response(envelope, msg)

    def propose(self, records: Sequence[bytes], now_ms: int) -> Offset:
        """Append records as one or more batches in the leader's epoch.

        Returns the offset of the first record; the records are committed once the
        high watermark passes offset + len(records) - 1. Raises NotLeaderError.
        """
        self._now = max(self._now, now_ms)
        if not isinstance(self.state, LeaderState) or self.state.resign_deadline >= 0:
            raise NotLeaderError(self.leader_id, self.epoch)
        if not records:
            raise ValueError("nothing to propose")
        first = self.log.end_offset
        step = self.config.max_batch_records
        for i in range(0, len(records), step):
            chunk = tuple(records[i : i + step])
            self._append(Batch(self.log.end_offset, self.epoch, chunk, timestamp_ms=self._timestamp()))
        self._complete_parked(self.state, only_with_data=True)
        return first

    def resign(self, now_ms: int) -> None:
        """Graceful shutdown: a leader hands leadership to its most caught-up voter.

        The leader first stops taking writes and keeps serving fetches until a voter holds
        its whole log, for at most `RaftConfig.resign_catch_up_ms`: a successor that is
        behind could not win the votes of the others. Then it sends EndQuorumEpoch with
        the voters ranked by their fetch state (`_successors`).
        The node is going away: it stays Resigned (it never stands again in this life)
        until a higher epoch reaches it, as Kafka's pollResigned does while shutting down.
        """
        self._now = max(self._now, now_ms)
        self._shutting_down = True
        ls = self.state
        if isinstance(ls, LeaderState) and ls.resign_deadline < 0:
            ls.resign_deadline = self._now + self.config.resign_catch_up_ms
            self._maybe_finish_resign(ls)

    def change_voters(self, change: VoterChange, now_ms: int) -> int:
        """AddRaftVoter, RemoveRaftVoter, UpdateRaftVoter or a kraft.version upgrade (a
        KRaftVersionRecord before the VotersRecord) on the leader. Returns a token;
        its `VoterChangeResult` comes in a later `Ready.voter_changes`: a refusal at once
        (`voter_change.decide`'s rules), NONE once the new VotersRecord is committed,
        REQUEST_TIMED_OUT if it is not committed within request.timeout.ms, or
        NOT_LEADER_OR_FOLLOWER if leadership is lost first."""
        self._now = max(self._now, now_ms)
        token = self._next_token
        self._next_token += 1
        ls = self.state
        if not isinstance(ls, LeaderState) or ls.resign_deadline >= 0:
            self._voter_results.append(VoterChangeResult(token, ErrorCode.NOT_LEADER_OR_FOLLOWER, "not the leader"))
            return token
        observer: ObserverFetchState | None = None
        if isinstance(change, AddVoter):
            p = ls.observers.get(change.node.node_id)
            if p is not None and change.node.key.directory_id in (ZERO_UUID, p.directory_id):
                observer = ObserverFetchState(p.last_fetch_ms, p.last_caught_up_ms)
        view = LeaderView(
            pending=ls.voter_change is not None,
            hw_known=ls.hw_known,
            high_watermark=self.high_watermark,
            kraft_version=self.kraft_version,
            voters=self.voter_set,
            voters_offset=self._voter_history.latest_offset(),
            now_ms=self._now,
        )
        if isinstance(change, UpgradeKRaftVersion):
            directories = {v: p.directory_id for v, p in ls.voters.items()} | {self.node_id: self.directory_id}
            error, message, new = decide_upgrade(change, view, directories)
        else:
            error, message, new = decide(change, view, observer)
        if new is None:
            self._voter_results.append(VoterChangeResult(token, error, message))
            return token
        if isinstance(change, UpgradeKRaftVersion) and change.validate_only:
            self._voter_results.append(VoterChangeResult(token, ErrorCode.NONE, "valid (validate only)"))
            return token
        if isinstance(change, UpgradeKRaftVersion):
            self._append(kraft_version_batch(self.log.end_offset, self.epoch, change.version, self._timestamp()))
        offset = self.log.end_offset
        ls.voter_change = PendingVoterChange(token, change, offset, self._now + self.config.request_timeout_ms)
        self._append(voters_batch(offset, self.epoch, new, self._timestamp()))
        self._complete_parked(ls, only_with_data=True)
        return token

    def load_snapshot_voters(
        self, snapshot_id: OffsetAndEpoch, kraft_version: int | None, voters: VoterSet | None
    ) -> None:
        """The driver installed `snapshot_id` (Ready.install_snapshot) and read these KIP-853
        records from it (None: the snapshot holds none; what was known stays in force)."""
        if self.log.start_offset != snapshot_id.offset:
            return  # a later snapshot or a truncation came since: not the log's start any more
        # The snapshot's records are the base of the log's history (entries, if any were
        # appended since, are all at or above its end); they sit somewhere below its end:
        # offset snapshot_id.offset - 1 stands for it.
        if kraft_version is not None:
            self._kraft_history.base, self._kraft_history.base_offset = kraft_version, snapshot_id.offset - 1
        if voters is not None:
            self._voter_history.base, self._voter_history.base_offset = voters, snapshot_id.offset - 1
            self._voters_changed()

    @property
    def accepts_writes(self) -> bool:
        """A leader that is not handing over its leadership."""
        return isinstance(self.state, LeaderState) and self.state.resign_deadline < 0

    def request_failed(self, destination: NodeId, request_id: int, now_ms: int) -> None:
        """The driver could not deliver a request or got no answer: the connection was
        refused, reset or timed out. A voter that was fetching from its leader and whose
        fetch fails this way has lost the leader and stands at once (with pre-vote only: the
        others grant it only if they lost the leader too, so a live leader is never
        disturbed). One that has not fetched from it in this role (after a lost pre-vote, at
        start) waits for its fetch deadline as before, so that an unreachable leader cannot
        make it stand again and again. A vote request that fails counts as refused."""
        self._now = max(self._now, now_ms)
        s = self.state
        match s:
            case FollowerState() if request_id == s.inflight_id and destination == s.leader_id:
                s.inflight_id = -1
                if self.stands and self.config.pre_vote and s.has_fetched and not s.leader_resigned:
                    self._start_election()
                else:
                    s.next_fetch_ms = self._now + self.config.retry_backoff_ms
            case ProspectiveState() | CandidateState() if destination in self.voters:
                if destination not in s.granted and request_id in s.vote_requests:
                    self._count_vote(destination, granted=False)

    def snapshot_created(self, snapshot_id: OffsetAndEpoch) -> None:
        """The state machine durably wrote a snapshot of the committed log below
        `snapshot_id.offset`; the log before it may now be deleted."""
        if snapshot_id.offset > self.high_watermark:
            raise ValueError(f"snapshot {snapshot_id} beyond high watermark {self.high_watermark}")
        if not self.log.is_batch_boundary(snapshot_id.offset) and snapshot_id.offset > self.log.start_offset:
            raise ValueError(f"snapshot {snapshot_id} is not on a batch boundary")
        if snapshot_id.offset <= self.log.start_offset:
            return
        self.log.delete_before(snapshot_id)
        self._voter_history.compact_before(snapshot_id.offset)
        self._kraft_history.compact_before(snapshot_id.offset)
        self._delete_before = snapshot_id.offset

    def _timestamp(self) -> int:
        return self._now + self.wall_clock_offset_ms

    def snapshot_id_at(self, offset: Offset) -> OffsetAndEpoch:
        """The snapshot id for a snapshot of the log below `offset`."""
        return OffsetAndEpoch(epoch=self.log.epoch_at(offset - 1), offset=offset)

    def next_deadline(self) -> int:
        """The earliest time at which `tick` has something to do (ms)."""
        match self.state:
            case UnattachedState() as s:
                return s.deadline
            case ProspectiveState() as p:
                return min(p.deadline, p.resend_ms)
            case CandidateState() as c:
                return c.deadline if c.backing_off else min(c.deadline, c.resend_ms)
            case FollowerState() as f:
                d = f.fetch_deadline
                if f.inflight_id >= 0:
                    d = min(d, f.inflight_sent_ms + self.config.request_timeout_ms)
                else:
                    d = min(d, f.next_fetch_ms)
                return d
            case LeaderState() as ls:
                d = ls.check_quorum_deadline
                if ls.begin_quorum_unacked:
                    d = min(d, ls.begin_quorum_resend_ms)
                for parked in ls.parked:
                    d = min(d, parked.deadline)
                if ls.resign_deadline >= 0:
                    d = min(d, ls.resign_deadline)
                if ls.voter_change is not None:
                    d = min(d, ls.voter_change.deadline)
                return d
            case ResignedState() as r:
                deadline = r.deadline if not self._shutting_down else 1 << 62
                return min(deadline, r.resend_ms) if r.unacked else deadline
        raise AssertionError("unreachable")

    def has_ready(self) -> bool:
        return (
            self._persisted != self._election
            or bool(self._out)
            or bool(self._chunks)
            or self._install is not None
            or self._stable_end != self.log.end_offset
            or self._stable_end != self._disk_end
            or self._reported_hw != self.high_watermark
            or self._applied < self.high_watermark
            or self._delete_before is not None
            or bool(self._voter_results)
        )

    def ready(self) -> Ready:
        """Collect what must be persisted, sent and applied; see `quorum.raft.ready`."""
        election = self._election if self._persisted != self._election else None
        install = self._install
        truncate_to: Offset | None = None
        if install is None and self._stable_end < self._disk_end:
            truncate_to = self._stable_end
        entries = self.log.batches_between(self._stable_end, self.log.end_offset) if self.log.batches else ()
        hw = self.high_watermark if self._reported_hw != self.high_watermark else None
        committed: tuple[Batch, ...] = ()
        if self._applied < self.high_watermark:
            committed = self.log.batches_between(self._applied, self.high_watermark)
        ready = Ready(
            election=election,
            snapshot_chunks=tuple(self._chunks),
            install_snapshot=install,
            truncate_to=truncate_to,
            entries=entries,
            # An observer that can never vote (a broker) does not fsync what it appends: its
            # log counts toward no commit, and a tail lost in a crash is fetched again. One
            # that may be added as a voter does (`RaftConfig.sync_as_observer`).
            must_sync=(bool(entries) and (self.is_voter or self.config.sync_as_observer))
            or truncate_to is not None
            or install is not None,
            messages=tuple(self._out),
            high_watermark=hw,
            committed=committed,
            delete_before=self._delete_before,
            voter_changes=tuple(self._voter_results),
            send_before_sync=isinstance(self.state, LeaderState)
            and election is None
            and truncate_to is None
            and install is None
            and not self._chunks,
        )
        self._voter_results = []
        # The driver persists all of this before anything else happens to the core.
        self._persisted = self._election
        self._stable_end = self._disk_end = self.log.end_offset
        self._reported_hw = self.high_watermark
        self._applied = max(self._applied, self.high_watermark)
        self._out = []
        self._chunks = []
        self._install = None
        self._delete_before = None
        return ready

    def advance(self, ready: Ready) -> None:
        """The driver carried out `ready`: its log writes are durable (when must_sync)."""
        if ready.must_sync:
            end = ready.log_end_offset
            if end is not None:
                self._flushed_end = end
        if isinstance(self.state, LeaderState):
            self._flushed_end = min(self._flushed_end, self.log.end_offset)
            self._maybe_advance_hw(self.state)
            self._maybe_resign_removed(self.state)

    def describe(self) -> QuorumDescription:
        """The leader's view for DescribeQuorum; other roles report what they know."""
        if isinstance(self.state, LeaderState):
            ls = self.state

            def directory(nid: NodeId, p: ReplicaProgress) -> uuid.UUID:
                # What the replica's fetches said, else the voter set's (zero with static voters).
                if nid == self.node_id:
                    return self.directory_id
                voter = self.voter_set.node(nid) if nid in ls.voters else None
                if p.directory_id != ZERO_UUID or voter is None:
                    return p.directory_id
                return voter.key.directory_id

            def rows(progress: dict[NodeId, ReplicaProgress]) -> tuple[ReplicaDescription, ...]:
                return tuple(
                    ReplicaDescription(nid, p.end_offset, p.last_fetch_ms, p.last_caught_up_ms, directory(nid, p))
                    for nid, p in sorted(progress.items())
                )

            me = ls.voters.get(self.node_id)
            if me is not None:
                me.end_offset = self.log.end_offset
                me.last_fetch_ms = me.last_caught_up_ms = self._now
            hw = self.high_watermark if ls.hw_known else -1
            return QuorumDescription(self.node_id, self.epoch, hw, rows(ls.voters), rows(ls.observers))
        return QuorumDescription(
            self.leader_id,
            self.epoch,
            self.high_watermark,
            tuple(ReplicaDescription(n.node_id, -1, directory_id=n.key.directory_id) for n in self.voter_set.nodes),
            (),
        )

    # ------------------------------------------------------------ transitions

    def _initialize(self) -> None:
        """Role at start-up from the durable election state (Kafka's QuorumState.initialize)."""
        e = self._election
        if e.epoch < self.log.last_epoch:
            self._election = ElectionState(epoch=self.log.last_epoch)
            self._enter(Role.UNATTACHED, UnattachedState(self._election_deadline()), check=False)
        elif e.leader_id == self.node_id and self.is_voter:
            # Never lead again in the same epoch: unflushed records may have been lost.
            state = ResignedState(self._election_deadline(), (), set(), self._now)
            self._enter(Role.RESIGNED, state, check=False)
        elif e.leader_id == self.node_id:
            # It led this epoch and was removed from the voters since: an observer now (one
            # that still stands while its removal is not known to be committed).
            self._election = ElectionState(epoch=e.epoch, voted_id=e.voted_id)
            deadline = self._election_deadline() if self.stands else self._now
            self._enter(Role.UNATTACHED, UnattachedState(deadline), check=False)
        elif e.leader_id != NO_LEADER:
            # A known leader wins over our own vote: we stood in this epoch and someone else won.
            self._enter(Role.FOLLOWER, FollowerState(e.leader_id, self._fetch_deadline()), check=False)
            self._maybe_send_fetch()
        elif e.voted_id == self.node_id and self.stands:
            self._enter(Role.CANDIDATE, CandidateState(self._election_deadline(), self._own_vote()), check=False)
            self._send_votes(pre_vote=False)
        else:
            deadline = self._election_deadline() if self.stands else self._now
            self._enter(Role.UNATTACHED, UnattachedState(deadline), check=False)

    def _enter(self, role: Role, state: RoleState, *, check: bool = True, new_epoch: bool = False) -> None:
        if check:
            # A leader removed from the voters resigns after the change commits (KIP-853).
            removed_leader = role is Role.RESIGNED and self.role is Role.LEADER
            if not self.stands and role not in OBSERVER_ROLES and not removed_leader:
                raise IllegalTransitionError(f"observer {self.node_id} cannot become {role.value}")
            if not new_epoch and role not in ALLOWED_TRANSITIONS[self.role]:
                raise IllegalTransitionError(f"{self.role.value} -> {role.value} in epoch {self.epoch}")
        if isinstance(self.state, LeaderState) and role is not Role.LEADER:
            self._drop_parked(self.state)
            pending = self.state.voter_change
            if pending is not None:
                self.state.voter_change = None
                result = VoterChangeResult(pending.token, ErrorCode.NOT_LEADER_OR_FOLLOWER, "leadership lost")
                self._voter_results.append(result)
        self.role = role
        self.state = state

    def _set_election(self, election: ElectionState) -> None:
        if election.epoch < self._election.epoch:
            raise FatalQuorumError(f"epoch would go back from {self._election.epoch} to {election.epoch}")
        self._election = election

    def _observe_epoch(self, epoch: Epoch, leader_id: NodeId) -> bool:
        """React to a peer's (epoch, leader). Returns True if this node changed epoch or leader."""
        if epoch > self.epoch:
            if leader_id != NO_LEADER and leader_id != self.node_id:
                self._become_follower(epoch, leader_id, new_epoch=True)
            else:
                self._become_unattached(epoch)
            return True
        if (
            epoch == self.epoch
            and leader_id != NO_LEADER
            and leader_id != self.node_id
            and self._election.leader_id == NO_LEADER  # first news of this epoch's leader
            and not isinstance(self.state, _FOLLOWING_OR_LEADING)
        ):
            self._become_follower(epoch, leader_id)
            return True
        return False

    def _become_unattached(self, epoch: Epoch) -> None:
        self._set_election(ElectionState(epoch=epoch))
        deadline = self._election_deadline() if self.stands else self._now
        self._enter(Role.UNATTACHED, UnattachedState(deadline), new_epoch=True)

    def _become_follower(self, epoch: Epoch, leader_id: NodeId, *, new_epoch: bool = False) -> None:
        voted = self._election.voted_id if epoch == self._election.epoch else NO_VOTE
        self._set_election(ElectionState(epoch=epoch, voted_id=voted, leader_id=leader_id))
        self._election_retries = 0
        self._enter(Role.FOLLOWER, FollowerState(leader_id, self._fetch_deadline()), new_epoch=new_epoch)
        self._maybe_send_fetch()

    def _start_election(self) -> None:
        """Election timeout: pre-vote first (KIP-996), or go straight to Candidate."""
        if not self.stands:
            self._become_unattached_observer()
            return
        if self.config.pre_vote and (len(self.voters) > 1 or not self.is_voter):
            leader = self.leader_id if isinstance(self.state, FollowerState) else NO_LEADER
            state = ProspectiveState(self._election_deadline(), leader, self._own_vote())
            state.resend_ms = self._now + self._vote_resend_ms()
            self._enter(Role.PROSPECTIVE, state)
            self._send_votes(pre_vote=True)
            self._maybe_win_pre_vote()
        else:
            self._become_candidate()

    def _become_candidate(self) -> None:
        self._set_election(ElectionState(epoch=self.epoch + 1, voted_id=self.node_id))
        state = CandidateState(self._election_deadline(), self._own_vote())
        state.resend_ms = self._now + self._vote_resend_ms()
        self._enter(Role.CANDIDATE, state, new_epoch=True)
        self._send_votes(pre_vote=False)
        self._maybe_win_election()

    def _own_vote(self) -> set[NodeId]:
        """The votes a replica starts an election with: its own, if the voters count it."""
        return {self.node_id} if self.is_voter else set()

    def _become_leader(self) -> None:
        epoch_start = self.log.end_offset
        self._set_election(ElectionState(epoch=self.epoch, voted_id=self.voted_id, leader_id=self.node_id))
        self._election_retries = 0
        others = self.voters - {self.node_id}
        granted = self.state.granted if isinstance(self.state, CandidateState) else self._own_vote()
        ls = LeaderState(
            epoch_start_offset=epoch_start,
            voters={v: ReplicaProgress() for v in sorted(self.voters)},
            observers={},
            check_quorum_deadline=self._now + self.config.check_quorum_timeout_ms,
            begin_quorum_unacked=set(others),
            begin_quorum_resend_ms=self._now,
        )
        self._enter(Role.LEADER, ls)
        # The first record of every epoch: once it commits, the HW is known.
        record = encode_leader_change(self.node_id, sorted(self.voters), sorted(granted))
        self._append(Batch(epoch_start, self.epoch, (record,), self._timestamp(), ControlType.LEADER_CHANGE))
        if self.kraft_version >= KRAFT_VERSION_DYNAMIC and self._voter_history.latest_offset() < 0:
            # The voters come from the bootstrap checkpoint only: write them into the log, so
            # that a replica formatted without them (--no-initial-controllers) learns them (Kafka
            # does the same at the start of an epoch).
            ts = self._timestamp()
            self._append(kraft_version_batch(self.log.end_offset, self.epoch, self.kraft_version, ts))
            self._append(voters_batch(self.log.end_offset, self.epoch, self.voter_set, ts))
        self._send_begin_quorum(ls)
        self._maybe_advance_hw(ls)

    def _become_resigned(self, ls: LeaderState) -> None:
        others = [v for v in ls.voters if v != self.node_id]
        state = ResignedState(self._election_deadline(), self._successors(ls), set(others), self._now)
        self._enter(Role.RESIGNED, state)
        self._send_end_quorum(state)

    def _successors(self, ls: LeaderState) -> tuple[NodeId, ...]:
        """The other voters ranked by fetch state, so that the first can win at once:
        those that fetched within a fetch timeout before the silent ones, then the
        largest acknowledged log end, then the most recent fetch, then the node id."""
        live_since = self._now - self.config.fetch_timeout_ms

        def rank(v: NodeId) -> tuple[bool, int, int, int]:
            p = ls.voters[v]
            return (p.last_fetch_ms < 0 or p.last_fetch_ms < live_since, -p.end_offset, -p.last_fetch_ms, v)

        return tuple(sorted((v for v in ls.voters if v != self.node_id), key=rank))

    def _maybe_finish_resign(self, ls: LeaderState) -> None:
        """A resigning leader hands over once a voter holds its whole log, or at the deadline."""
        if ls.resign_deadline < 0:
            return
        end = self.log.end_offset
        caught_up = any(p.end_offset >= end for v, p in ls.voters.items() if v != self.node_id)
        if caught_up or self._now >= ls.resign_deadline or self.voters <= {self.node_id}:
            self._become_resigned(ls)

    def _lose_pre_vote(self) -> None:
        assert isinstance(self.state, ProspectiveState)
        leader = self.state.leader_id
        self._election_retries += 1
        if leader != NO_LEADER:
            # The leader has been silent for a fetch timeout already: keep fetching
            # from it, but stand again after a backoff rather than a full timeout.
            self._enter(Role.FOLLOWER, FollowerState(leader, self._now + self._backoff_ms()))
            self._maybe_send_fetch()
        else:
            self._enter(Role.UNATTACHED, UnattachedState(self._now + self._backoff_ms()))

    def _yield_pre_vote(self, p: ProspectiveState) -> None:
        """A prospective voter granted the pre-vote of one that outranks it: it stops
        standing (answers to its own pre-vote are ignored from now on) and waits a whole
        election timeout for that voter's election, as a voter that granted a vote does."""
        deadline = self._election_deadline()
        if p.leader_id != NO_LEADER:
            self._enter(Role.FOLLOWER, FollowerState(p.leader_id, deadline))
            self._maybe_send_fetch()
        else:
            self._enter(Role.UNATTACHED, UnattachedState(deadline))

    def _back_off(self, c: CandidateState) -> None:
        self._election_retries += 1
        c.backing_off = True
        c.deadline = self._now + self._backoff_ms()

    # ----------------------------------------------------------------- timing

    def _election_deadline(self) -> int:
        t = self.config.election_timeout_ms
        return self._now + t + self._rng.randrange(t)

    def _fetch_deadline(self) -> int:
        # Jittered (up to half an election timeout) so that followers of a dead
        # leader do not all stand at once and split the vote.
        jitter = self._rng.randrange(max(1, self.config.election_timeout_ms // 2))
        return self._now + self.config.fetch_timeout_ms + jitter

    def _backoff_ms(self) -> int:
        """Binary exponential backoff after a lost election, uniform to the millisecond in
        [1, 100 * 2^retries) ms and capped at election.backoff.max.ms. (Kafka draws whole
        multiples of 100 ms: two voters then back off by the same time half of the time
        after a first loss, and stand together again.)"""
        exp = min(self._election_retries, 20)
        backoff = self._rng.randrange(_BACKOFF_BASE_MS << exp)
        return max(1, min(backoff, self.config.election_backoff_max_ms))

    # ------------------------------------------------------------------ votes

    def _vote_resend_ms(self) -> int:
        return max(self.config.retry_backoff_ms, self.config.election_timeout_ms // 10)

    def _send_votes(self, *, pre_vote: bool, skip: set[NodeId] | frozenset[NodeId] = frozenset()) -> None:
        req = VoteRequest(
            candidate_epoch=self.epoch,
            candidate_id=self.node_id,
            last_offset_epoch=self.log.last_epoch,
            last_offset=self.log.end_offset,
            pre_vote=pre_vote,
        )
        s = self.state
        for node in self.voter_set.nodes:
            voter = node.node_id
            if voter == self.node_id or voter in skip:
                continue
            request_id = self._send(voter, replace(req, voter_directory_id=node.key.directory_id))
            if isinstance(s, _ELECTING):
                s.vote_requests.add(request_id)

    def _outranked_by(self, req: VoteRequest) -> bool:
        """The order in which standing voters give way to each other: the longer log
        (last epoch, then end offset) first, the smaller node id on equal logs. It is a
        strict total order, so two prospective voters never grant each other."""
        if not self._log_up_to_date(req.last_offset_epoch, req.last_offset):
            return False
        same_log = (req.last_offset_epoch, req.last_offset) == (self.log.last_epoch, self.log.end_offset)
        return not same_log or req.candidate_id < self.node_id

    def _log_up_to_date(self, last_epoch: Epoch, last_offset: Offset) -> bool:
        return (last_epoch, last_offset) >= (self.log.last_epoch, self.log.end_offset)

    def _on_vote_request(self, env: Envelope, req: VoteRequest) -> None:
        if self.kraft_version == KRAFT_VERSION_STATIC:
            if req.candidate_id not in self.voters or not self.is_voter:
                self._reply_vote(env, ErrorCode.INCONSISTENT_VOTER_SET, False, req.pre_vote)
                return
        elif req.voter_directory_id not in (ZERO_UUID, self.directory_id):
            # KIP-853: the candidate asks another replica of this id (a wiped disk is a new
            # replica, not the voter it replaces). Otherwise any replica may vote, voter or
            # not in its own view: only the candidate's voter set counts the votes.
            self._reply_vote(env, ErrorCode.INVALID_VOTER_KEY, False, req.pre_vote)
            return
        if (
            req.last_offset < 0
            or req.last_offset_epoch < 0
            or (not req.pre_vote and req.last_offset_epoch >= req.candidate_epoch)
        ):
            self._reply_vote(env, ErrorCode.INVALID_REQUEST, False, req.pre_vote)
            return
        if req.candidate_epoch < self.epoch:
            self._reply_vote(env, ErrorCode.FENCED_LEADER_EPOCH, False, req.pre_vote)
            return
        if req.candidate_epoch > self.epoch:
            timer = self._election_timer()
            self._become_unattached(req.candidate_epoch)
            if timer is not None and isinstance(self.state, UnattachedState):
                # Only a granted vote restarts the election timer: a stale candidate that is
                # refused must not keep an up-to-date voter from standing (livelock).
                self.state.deadline = min(self.state.deadline, timer)
        up_to_date = self._log_up_to_date(req.last_offset_epoch, req.last_offset)
        if req.pre_vote:
            p = self.state
            standing = isinstance(p, ProspectiveState)
            grant = up_to_date and (self._outranked_by(req) if standing else self._can_grant_pre_vote())
            self._reply_vote(env, ErrorCode.NONE, grant, True)
            if isinstance(p, ProspectiveState):
                if grant:
                    self._yield_pre_vote(p)  # it can win now; our own grants would cross its
                elif env.source not in p.granted:
                    self._send_votes(pre_vote=True, skip=self.voters - {env.source})  # it stands: ask it now
            return
        granted = False
        s = self.state
        if isinstance(s, _UNATTACHED_OR_PROSPECTIVE) and self.leader_id == NO_LEADER:
            if self.voted_id == req.candidate_id:
                granted = True
            elif self.voted_id == NO_VOTE and up_to_date:
                granted = True
                self._set_election(ElectionState(epoch=self.epoch, voted_id=req.candidate_id))
                if isinstance(s, ProspectiveState):
                    self._enter(Role.UNATTACHED, UnattachedState(self._election_deadline()))
                else:
                    s.deadline = self._election_deadline()
        self._reply_vote(env, ErrorCode.NONE, granted, False)

    def _election_timer(self) -> int | None:
        """When this voter would stand for election if nothing else happened."""
        match self.state:
            case UnattachedState() | ProspectiveState() | CandidateState() | ResignedState() as s:
                return s.deadline
            case FollowerState() as f:
                return f.fetch_deadline
        return None

    def _can_grant_pre_vote(self) -> bool:
        """Pre-votes change nothing; refuse them only while a leader is known to be alive."""
        s = self.state
        if isinstance(s, LeaderState):
            return False
        if isinstance(s, FollowerState):
            return not s.has_fetched or s.leader_resigned
        return True

    def _reply_vote(self, env: Envelope, error: ErrorCode, granted: bool, pre_vote: bool) -> None:
        self._reply(env, VoteResponse(error, self.leader_id, self.epoch, granted, pre_vote))

    def _on_vote_response(self, env: Envelope, resp: VoteResponse) -> None:
        if self._observe_epoch(resp.leader_epoch, resp.leader_id):
            return
        if resp.leader_epoch != self.epoch or resp.error != ErrorCode.NONE or env.source not in self.voters:
            return
        s = self.state
        if isinstance(s, ProspectiveState) and resp.pre_vote:
            self._count_vote(env.source, granted=resp.vote_granted)
        elif isinstance(s, CandidateState) and not resp.pre_vote and not s.backing_off:
            self._count_vote(env.source, granted=resp.vote_granted)

    def _count_vote(self, voter: NodeId, *, granted: bool) -> None:
        """A (pre-)vote answer, or a vote request that could not be delivered (refused)."""
        s = self.state
        if isinstance(s, ProspectiveState):
            (s.granted if granted else s.rejected).add(voter)
            if not self._maybe_win_pre_vote() and len(s.rejected) > len(self.voters) - self.majority:
                self._lose_pre_vote()
        elif isinstance(s, CandidateState) and not s.backing_off:
            (s.granted if granted else s.rejected).add(voter)
            if not self._maybe_win_election() and len(s.rejected) > len(self.voters) - self.majority:
                self._back_off(s)

    def _maybe_win_pre_vote(self) -> bool:
        s = self.state
        if isinstance(s, ProspectiveState) and len(s.granted) >= self.majority:
            self._become_candidate()
            return True
        return False

    def _maybe_win_election(self) -> bool:
        s = self.state
        if isinstance(s, CandidateState) and len(s.granted) >= self.majority:
            self._become_leader()
            return True
        return False

    # --------------------------------------------------- begin / end quorum epoch

    def _send_begin_quorum(self, ls: LeaderState) -> None:
        req = BeginQuorumEpochRequest(self.node_id, self.epoch)
        for voter in sorted(ls.begin_quorum_unacked):
            self._send(voter, req)
        ls.begin_quorum_resend_ms = self._now + self.config.begin_quorum_resend_ms

    def _on_begin_quorum(self, env: Envelope, req: BeginQuorumEpochRequest) -> None:
        if req.leader_epoch < self.epoch:
            self._reply(env, BeginQuorumEpochResponse(ErrorCode.FENCED_LEADER_EPOCH, self.leader_id, self.epoch))
            return
        if req.leader_epoch == self.epoch and isinstance(self.state, _LEADING):
            # Two leaders in one epoch cannot happen; refuse rather than follow.
            self._reply(env, BeginQuorumEpochResponse(ErrorCode.INVALID_REQUEST, self.leader_id, self.epoch))
            return
        if req.leader_epoch == self.epoch and isinstance(self.state, FollowerState):
            if self.leader_id != req.leader_id:
                self._reply(env, BeginQuorumEpochResponse(ErrorCode.INVALID_REQUEST, self.leader_id, self.epoch))
                return
        else:
            self._observe_epoch(req.leader_epoch, req.leader_id)
        self._reply(env, BeginQuorumEpochResponse(ErrorCode.NONE, self.leader_id, self.epoch))

    def _on_begin_quorum_response(self, env: Envelope, resp: BeginQuorumEpochResponse) -> None:
        if self._observe_epoch(resp.leader_epoch, resp.leader_id):
            return
        if isinstance(self.state, LeaderState) and resp.leader_epoch == self.epoch:
            self.state.begin_quorum_unacked.discard(env.source)

    def _send_end_quorum(self, r: ResignedState) -> None:
        req = EndQuorumEpochRequest(self.node_id, self.epoch, r.successors)
        for voter in sorted(r.unacked):
            self._send(voter, req)
        r.resend_ms = self._now + self.config.retry_backoff_ms * 5

    def _on_end_quorum(self, env: Envelope, req: EndQuorumEpochRequest) -> None:
        if req.leader_epoch < self.epoch:
            self._reply(env, EndQuorumEpochResponse(ErrorCode.FENCED_LEADER_EPOCH, self.leader_id, self.epoch))
            return
        if req.leader_epoch > self.epoch:
            self._become_follower(req.leader_epoch, req.leader_id, new_epoch=True)
        s = self.state
        if isinstance(s, FollowerState) and s.leader_id == req.leader_id:
            self._leader_resigned(s, req.preferred_successors)
        self._reply(env, EndQuorumEpochResponse(ErrorCode.NONE, self.leader_id, self.epoch))

    def _leader_resigned(self, f: FollowerState, successors: Sequence[NodeId]) -> None:
        """The leader of this epoch resigned: grant pre-votes, and stand after this voter's
        successor delay (the first successor at once)."""
        f.fetch_deadline = min(f.fetch_deadline, self._now + self._successor_delay(successors))
        f.leader_resigned = True

    def _successor_delay(self, successors: Sequence[NodeId]) -> int:
        """How long a follower waits before standing: 0 for the first successor,
        then growing exponentially (Kafka's strictExponentialElectionBackoffMs)."""
        max_ms = self.config.election_backoff_max_ms
        if self.node_id not in successors:
            return max_ms
        pos = list(successors).index(self.node_id)
        if pos == 0:
            return 0
        n = len(successors)
        return min(max_ms, (max_ms >> max(n - 1, 0)) << (pos - 1))

    def _on_end_quorum_response(self, env: Envelope, resp: EndQuorumEpochResponse) -> None:
        if self._observe_epoch(resp.leader_epoch, resp.leader_id):
            return
        if isinstance(self.state, ResignedState):
            self.state.unacked.discard(env.source)

    # ------------------------------------------------------------- follower

    def _tick_follower(self, f: FollowerState) -> None:
        if self._now >= f.fetch_deadline:
            if self.stands:
                self._start_election()
            else:
                self._become_unattached_observer()
            return
        if f.inflight_id >= 0 and self._now >= f.inflight_sent_ms + self.config.request_timeout_ms:
            f.inflight_id = -1  # the request or its answer was lost; ask again
        self._maybe_send_fetch()

    def _become_unattached_observer(self) -> None:
        self._set_election(ElectionState(epoch=self.epoch, voted_id=self.voted_id))
        self._enter(Role.UNATTACHED, UnattachedState(self._now), new_epoch=True)
        self._probe_for_leader()

    def _probe_for_leader(self) -> None:
        """Observers without a leader fetch from a random voter to learn who leads."""
        s = self.state
        assert isinstance(s, UnattachedState)
        voters = sorted(self.voters - {self.node_id}) or sorted(set(self._bootstrap) - {self.node_id})
        if voters:
            target = voters[self._rng.randrange(len(voters))]
            self._send(target, self._fetch_request())
        s.deadline = self._now + max(self.config.retry_backoff_ms, self.config.request_timeout_ms // 4)

    def _fetch_request(self) -> FetchRequest:
        return FetchRequest(
            replica_id=self.node_id,
            current_leader_epoch=self.epoch,
            fetch_offset=self.log.end_offset,
            last_fetched_epoch=self.log.last_epoch,
            log_start_offset=self.log.start_offset,
            max_wait_ms=self.config.fetch_max_wait_ms,
            max_bytes=self.config.fetch_max_bytes,
            replica_directory_id=self.directory_id,
        )

    def _maybe_send_fetch(self) -> None:
        f = self.state
        if not isinstance(f, FollowerState) or f.inflight_id >= 0 or self._now < f.next_fetch_ms:
            return
        msg: FetchRequest | FetchSnapshotRequest
        if f.snapshot is not None:
            msg = FetchSnapshotRequest(
                self.node_id, self.epoch, f.snapshot.snapshot_id, f.snapshot.position, self.config.snapshot_chunk_bytes
            )
        else:
            msg = self._fetch_request()
        f.inflight_id = self._send(f.leader_id, msg)
        f.inflight_sent_ms = self._now

    def _on_fetch_response(self, env: Envelope, resp: FetchResponse) -> None:
        f = self.state
        if isinstance(f, UnattachedState) and not self.stands:
            # An observer's probe: learn the leader from any voter's answer.
            if resp.leader_id != NO_LEADER and resp.leader_epoch >= self.epoch and resp.leader_id != self.node_id:
                self._become_follower(resp.leader_epoch, resp.leader_id, new_epoch=resp.leader_epoch > self.epoch)
            elif resp.leader_epoch > self.epoch:
                self._observe_epoch(resp.leader_epoch, resp.leader_id)
            return
        if not isinstance(f, FollowerState) or env.request_id != f.inflight_id:
            self._observe_epoch(resp.leader_epoch, resp.leader_id)
            return
        f.inflight_id = -1
        if resp.error != ErrorCode.NONE:
            if self._observe_epoch(resp.leader_epoch, resp.leader_id):
                return
            f.next_fetch_ms = self._now + self.config.retry_backoff_ms
            if resp.error == ErrorCode.NOT_LEADER_OR_FOLLOWER and env.source == f.leader_id:
                # Our leader leads no more in this epoch (it resigned): as an EndQuorumEpoch
                # that does not name this voter, unless the real one already came.
                self._leader_resigned(f, ())
            return
        if resp.leader_epoch != self.epoch or env.source != f.leader_id:
            self._observe_epoch(resp.leader_epoch, resp.leader_id)
            return
        if not f.leader_resigned:
            # After EndQuorumEpoch the successor timer stands: the leader is leaving.
            f.fetch_deadline = self._fetch_deadline()
        f.has_fetched = True
        if resp.diverging_epoch is not None:
            self._truncate_diverging(resp.diverging_epoch)
        elif resp.snapshot_id is not None:
            f.snapshot = SnapshotFetch(resp.snapshot_id)
        else:
            self._append_as_follower(resp.batches)
            leader_hw = resp.high_watermark
            if leader_hw >= 0:
                self._update_follower_hw(min(leader_hw, self.log.end_offset))
        self._maybe_send_fetch()

    def _truncate_diverging(self, diverging: OffsetAndEpoch) -> None:
        target = self.log.truncation_offset_for(diverging)
        if target < self.high_watermark:
            raise FatalQuorumError(
                f"node {self.node_id}: leader asked to truncate to {target}, below high watermark {self.high_watermark}"
            )
        self.log.truncate_to(target)
        had = self._voter_history.latest_offset()
        self._voter_history.truncate_from(target)
        self._kraft_history.truncate_from(target)
        if self._voter_history.latest_offset() != had:
            self._voters_changed()
        self._stable_end = min(self._stable_end, target)
        self._flushed_end = min(self._flushed_end, target)

    def _append_as_follower(self, batches: Sequence[Batch]) -> None:
        for batch in batches:
            if batch.end_offset <= self.log.end_offset:
                continue  # already have it (a duplicated or overlapping answer)
            if batch.base_offset != self.log.end_offset or batch.epoch > self.epoch:
                return  # not contiguous with our log; the next fetch sorts it out
            if batch.epoch < self.log.last_epoch:
                return
            self._append(batch)

    def _update_follower_hw(self, hw: Offset) -> None:
        if hw > self.high_watermark:
            self.high_watermark = hw

    def _on_fetch_snapshot_response(self, env: Envelope, resp: FetchSnapshotResponse) -> None:
        f = self.state
        if not isinstance(f, FollowerState) or env.request_id != f.inflight_id or f.snapshot is None:
            self._observe_epoch(resp.leader_epoch, resp.leader_id)
            return
        f.inflight_id = -1
        if resp.error != ErrorCode.NONE:
            if not self._observe_epoch(resp.leader_epoch, resp.leader_id):
                f.snapshot = None  # e.g. SNAPSHOT_NOT_FOUND: start over with a Fetch
                f.next_fetch_ms = self._now + self.config.retry_backoff_ms
            return
        if resp.leader_epoch != self.epoch or resp.snapshot_id != f.snapshot.snapshot_id:
            self._observe_epoch(resp.leader_epoch, resp.leader_id)
            return
        if not f.leader_resigned:
            f.fetch_deadline = self._fetch_deadline()
        f.has_fetched = True
        snap = f.snapshot
        if resp.position != snap.position or (snap.size >= 0 and resp.size != snap.size) or resp.size < 0:
            f.snapshot = None  # inconsistent answer: restart the transfer
        else:
            snap.size = resp.size
            if resp.data:
                self._chunks.append(SnapshotChunk(snap.snapshot_id, snap.position, resp.data, resp.size))
                snap.position += len(resp.data)
            if snap.position >= snap.size:
                self._install_snapshot(snap.snapshot_id)
                f.snapshot = None
        self._maybe_send_fetch()

    def _install_snapshot(self, sid: OffsetAndEpoch) -> None:
        if sid.offset < self.high_watermark:
            # Snapshots of committed data are at or beyond ours only if we are far behind.
            return
        self.log.reset_to_snapshot(sid)
        # Until the driver reads the snapshot's own records (load_snapshot_voters), the set
        # in force below it as far as this log knew stays.
        self._voter_history.reset(self._voter_history.value_at(sid.offset - 1), sid.offset - 1)
        self._kraft_history.reset(self._kraft_history.value_at(sid.offset - 1), sid.offset - 1)
        self._install = sid
        self._stable_end = self._disk_end = self._flushed_end = sid.offset
        self.high_watermark = max(self.high_watermark, sid.offset)
        self._applied = max(self._applied, sid.offset)
        self._chunks = [c for c in self._chunks if c.snapshot_id == sid]

    # --------------------------------------------------------------- leader

    def _tick_leader(self, ls: LeaderState) -> None:
        if ls.resign_deadline >= 0 and self._now >= ls.resign_deadline:
            self._become_resigned(ls)
            return
        pending = ls.voter_change
        if pending is not None and self._now >= pending.deadline:
            ls.voter_change = None
            message = f"the VotersRecord at {pending.offset} was not committed in time"
            self._voter_results.append(VoterChangeResult(pending.token, ErrorCode.REQUEST_TIMED_OUT, message))
        if self._now >= ls.check_quorum_deadline:
            if self.voters == {self.node_id}:
                # A single voter is its own majority and never resigns (KAFKA-16144).
                ls.check_quorum_deadline = self._now + self.config.check_quorum_timeout_ms
            else:
                # Check-quorum (KAFKA-15489): no fetches from a majority; step down.
                self._become_resigned(ls)
                return
        if ls.begin_quorum_unacked and self._now >= ls.begin_quorum_resend_ms:
            self._send_begin_quorum(ls)
        if ls.parked:
            expired = [p for p in ls.parked if self._now >= p.deadline]
            if expired:
                ls.parked = [p for p in ls.parked if self._now < p.deadline]
                for p in expired:
                    self._answer_fetch(p.source, p.request_id, p.fetch_offset, p.max_bytes, as_voter=p.as_voter)

    def _reject_fetch(self, env: Envelope, error: ErrorCode) -> None:
        self._reply(env, FetchResponse(error, self.leader_id, self.epoch, self.high_watermark, self.log.start_offset))

    def _on_fetch_request(self, env: Envelope, req: FetchRequest) -> None:
        if req.fetch_offset < 0 or req.last_fetched_epoch < 0 or req.last_fetched_epoch > req.current_leader_epoch:
            self._reject_fetch(env, ErrorCode.INVALID_REQUEST)
            return
        if req.current_leader_epoch < self.epoch:
            self._reject_fetch(env, ErrorCode.FENCED_LEADER_EPOCH)
            return
        if req.current_leader_epoch > self.epoch:
            self._reject_fetch(env, ErrorCode.UNKNOWN_LEADER_EPOCH)
            return
        ls = self.state
        if not isinstance(ls, LeaderState):
            self._reject_fetch(env, ErrorCode.NOT_LEADER_OR_FOLLOWER)
            return
        source = req.replica_id
        is_voter = self.voter_set.is_voter(ReplicaKey(source, req.replica_directory_id))
        if is_voter:
            self._note_voter_contact(ls, source)
        verdict = self.log.validate_offset_and_epoch(req.fetch_offset, req.last_fetched_epoch)
        if verdict.kind is Validity.DIVERGING:
            self._reply(env, self._fetch_response(diverging=verdict.position))
            return
        if verdict.kind is Validity.SNAPSHOT:
            self._reply(env, self._fetch_response(snapshot=verdict.position))
            return
        progress = (ls.voters if is_voter else ls.observers).setdefault(source, ReplicaProgress())
        progress.directory_id = req.replica_directory_id
        end = self.log.end_offset
        if req.fetch_offset >= end:
            progress.last_caught_up_ms = self._now
        elif progress.last_fetch_ms >= 0 and req.fetch_offset >= progress.leader_end_at_last_fetch:
            # It holds everything the leader had when it last fetched: caught up as of then.
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, progress.last_fetch_ms)
        progress.end_offset = req.fetch_offset
        progress.last_fetch_ms = self._now
        progress.leader_end_at_last_fetch = end
        if is_voter:
            self._maybe_advance_hw(ls)
        exposed_hw = self.high_watermark if ls.hw_known else -1
        # Park only a replica that has all the data and already knows the current HW; the
        # ack that just moved the HW must come back at once, or that replica (and whoever
        # waits on it) learns of the commit only when the long poll expires.
        if req.fetch_offset >= self.log.end_offset and req.max_wait_ms > 0 and progress.hw_sent == exposed_hw:
            deadline = self._now + req.max_wait_ms
            ls.parked.append(ParkedFetch(source, env.request_id, req.fetch_offset, req.max_bytes, deadline, is_voter))
        else:
            self._answer_fetch(source, env.request_id, req.fetch_offset, req.max_bytes, as_voter=is_voter)
        if is_voter:
            self._maybe_finish_resign(ls)
        if self.state is ls:
            self._maybe_resign_removed(ls)

    def _fetch_response(
        self,
        *,
        diverging: OffsetAndEpoch | None = None,
        snapshot: OffsetAndEpoch | None = None,
        batches: tuple[Batch, ...] = (),
    ) -> FetchResponse:
        ls = self.state
        hw = self.high_watermark if isinstance(ls, LeaderState) and ls.hw_known else -1
        return FetchResponse(
            ErrorCode.NONE, self.node_id, self.epoch, hw, self.log.start_offset, diverging, snapshot, batches
        )

    def _answer_fetch(
        self, source: NodeId, request_id: int, fetch_offset: Offset, max_bytes: int, *, as_voter: bool
    ) -> None:
        batches = self.log.read(fetch_offset, max_bytes)
        resp = self._fetch_response(batches=batches)
        ls = self.state
        if isinstance(ls, LeaderState):
            # (A wiped voter fetches as an observer under the same node id: `as_voter` says which.)
            progress = (ls.voters if as_voter else ls.observers).get(source)
            if progress is not None:
                progress.hw_sent = resp.high_watermark
        self._out.append(Envelope(self.node_id, source, request_id, resp))

    def _complete_parked(self, ls: LeaderState, *, only_with_data: bool) -> None:
        if not ls.parked:
            return
        end = self.log.end_offset
        keep: list[ParkedFetch] = []
        for p in ls.parked:
            if only_with_data and p.fetch_offset >= end:
                keep.append(p)
            else:
                self._answer_fetch(p.source, p.request_id, p.fetch_offset, p.max_bytes, as_voter=p.as_voter)
        ls.parked = keep

    def _drop_parked(self, ls: LeaderState) -> None:
        """Leadership lost: tell parked fetchers at once instead of letting them wait."""
        for p in ls.parked:
            resp = FetchResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, self.leader_id, self.epoch, -1)
            self._out.append(Envelope(self.node_id, p.source, p.request_id, resp))
        ls.parked = []

    def _note_voter_contact(self, ls: LeaderState, voter: NodeId) -> None:
        ls.begin_quorum_unacked.discard(voter)
        if voter == self.node_id:
            return
        ls.fetched_voters.add(voter)
        if len(ls.fetched_voters) >= self.majority - (1 if self.is_voter else 0):
            ls.fetched_voters.clear()
            ls.check_quorum_deadline = self._now + self.config.check_quorum_timeout_ms

    def _maybe_advance_hw(self, ls: LeaderState) -> None:
        """HW = the largest offset a majority of voters holds (the leader: its flushed end),
        once that is past the start of this epoch. Never decreases."""
        me = ls.voters.get(self.node_id)
        if me is not None:
            me.end_offset = self._flushed_end
        offsets = sorted((p.end_offset for p in ls.voters.values()), reverse=True)
        candidate = offsets[len(self.voters) // 2]
        if candidate <= ls.epoch_start_offset:
            return
        ls.hw_known = True
        if candidate > self.high_watermark:
            self.high_watermark = candidate
            self._complete_parked(ls, only_with_data=False)
            pending = ls.voter_change
            if pending is not None and self.high_watermark > pending.offset:
                ls.voter_change = None
                self._voter_results.append(VoterChangeResult(pending.token, ErrorCode.NONE))

    def _maybe_resign_removed(self, ls: LeaderState) -> None:
        """A leader that the committed voter set no longer holds resigns (KIP-853); the
        others learn it from EndQuorumEpoch and elect one of themselves."""
        committed = self._voter_history.latest_offset() < self.high_watermark
        if committed and not self.is_voter and ls.voter_change is None:
            self._become_resigned(ls)

    # ------------------------------------------------------- voter-set history

    def _append(self, batch: Batch) -> None:
        self.log.append(batch)
        self._track_control(batch, notify=True)

    def _track_control(self, batch: Batch, *, notify: bool) -> None:
        if batch.control_type is ControlType.KRAFT_VOTERS:
            self._voter_history.add(batch.base_offset, decode_voters(batch.records[0]))
            if notify:
                self._voters_changed()
        elif batch.control_type is ControlType.KRAFT_VERSION:
            self._kraft_history.add(batch.base_offset, decode_kraft_version(batch.records[0]))

    def _voters_changed(self) -> None:
        """The latest voter set changed (appended, truncated, or read from a snapshot). A
        leader moves replicas between its voters and observers and recounts its HW."""
        ls = self.state
        if not isinstance(ls, LeaderState):
            return
        ids = self.voters
        for v in [v for v in ls.voters if v not in ids]:
            progress = ls.voters.pop(v)
            if v != self.node_id:
                ls.observers[v] = progress
        for v in sorted(v for v in ids if v not in ls.voters):  # (frozenset - keys() is a set, not a frozenset)
            ls.voters[v] = ls.observers.pop(v) if v in ls.observers else ReplicaProgress()
        self._maybe_advance_hw(ls)

    def _on_fetch_snapshot_request(self, env: Envelope, req: FetchSnapshotRequest) -> None:
        def reject(error: ErrorCode) -> None:
            self._reply(env, FetchSnapshotResponse(error, self.leader_id, self.epoch))

        if req.current_leader_epoch < self.epoch:
            reject(ErrorCode.FENCED_LEADER_EPOCH)
            return
        if req.current_leader_epoch > self.epoch:
            reject(ErrorCode.UNKNOWN_LEADER_EPOCH)
            return
        ls = self.state
        if not isinstance(ls, LeaderState):
            reject(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            return
        if req.replica_id in self.voters:
            self._note_voter_contact(ls, req.replica_id)
        source = self._snapshots
        if source is None or not source.exists(req.snapshot_id):
            reject(ErrorCode.SNAPSHOT_NOT_FOUND)
            return
        size = source.size(req.snapshot_id)
        if req.position < 0 or req.position > size:
            reject(ErrorCode.POSITION_OUT_OF_RANGE)
            return
        data = source.read(req.snapshot_id, req.position, max(1, req.max_bytes))
        self._reply(
            env,
            FetchSnapshotResponse(ErrorCode.NONE, self.node_id, self.epoch, req.snapshot_id, size, req.position, data),
        )

    # -------------------------------------------------------------- messaging

    def _send(self, destination: NodeId, message: Message) -> int:
        request_id = self._next_request_id
        self._next_request_id += 1
        self._out.append(Envelope(self.node_id, destination, request_id, message))
        return request_id

    def _reply(self, request: Envelope, message: Message) -> None:
        self._out.append(Envelope(self.node_id, request.source, request.request_id, message))
