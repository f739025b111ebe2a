"""Hand-driven `RaftCore`s for the scenario tests: no sockets, no sleeps, no threads.

`Net` holds a few cores and carries out their Readies at once (a perfect disk), but
keeps every message in `pending` until a test delivers it, so a test decides the
order of every message and every tick (etcd's interaction tests work this way).
Every Ready is kept per node in `readies`, so a test can look at what a node was
asked to persist together with what it was asked to send.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from quorum.raft.config import RaftConfig
from quorum.raft.core import RaftCore
from quorum.raft.log import RaftLog
from quorum.raft.messages import Envelope, Message
from quorum.raft.ready import Ready
from quorum.raft.roles import Role
from quorum.raft.types import Batch, ElectionState, OffsetAndEpoch
from quorum.raft.voter_set import ZERO_UUID, VoterSet

CONFIG = RaftConfig(
    election_timeout_ms=1000,
    fetch_timeout_ms=2000,
    election_backoff_max_ms=1000,
    request_timeout_ms=1000,
    retry_backoff_ms=20,
    fetch_max_wait_ms=500,  # caught-up fetches park at the leader, so `stabilize` reaches a fixed point
    snapshot_chunk_bytes=16,
    max_batch_records=8,
)


def batch(base: int, epoch: int, n: int = 1, tag: str = "r") -> Batch:
    """A data batch of `n` records at `base` in `epoch`; records say where they were written."""
    return Batch(base, epoch, tuple(f"{tag}{epoch}:{base + i}".encode() for i in range(n)))


def log_of(*runs: tuple[int, int], start: int = 0, tag: str = "r") -> RaftLog:
    """A log from (epoch, records) runs, one batch per run: log_of((1, 3), (2, 2))."""
    batches = []
    offset = start
    for epoch, n in runs:
        batches.append(batch(offset, epoch, n, tag))
        offset += n
    return RaftLog(batches, start_offset=start)


@dataclass
class MemorySnapshots:
    """A `SnapshotSource` over bytes in memory."""

    snapshots: dict[OffsetAndEpoch, bytes] = field(default_factory=dict)

    def exists(self, snapshot_id: OffsetAndEpoch) -> bool:
        return snapshot_id in self.snapshots

    def size(self, snapshot_id: OffsetAndEpoch) -> int:
        return len(self.snapshots[snapshot_id])

    def read(self, snapshot_id: OffsetAndEpoch, position: int, max_bytes: int) -> bytes:
        return self.snapshots[snapshot_id][position : position + max_bytes]


def new_core(
    node_id: int,
    voters: Sequence[int] | VoterSet,
    *,
    config: RaftConfig = CONFIG,
    seed: int = 0,
    now: int = 0,
    election: ElectionState | None = None,
    log: RaftLog | None = None,
    snapshots: MemorySnapshots | None = None,
    directory_id: uuid.UUID = ZERO_UUID,
) -> RaftCore:
    return RaftCore(
        node_id=node_id,
        voters=voters,
        config=config,
        rng=random.Random(seed * 1000 + node_id),
        now_ms=now,
        election=election,
        log=log,
        snapshots=snapshots,
        directory_id=directory_id,
    )


class Net:
    def __init__(
        self,
        voters: Sequence[int] | VoterSet,
        observers: Sequence[int] = (),
        *,
        config: RaftConfig = CONFIG,
        seed: int = 0,
        logs: dict[int, RaftLog] | None = None,
        elections: dict[int, ElectionState] | None = None,
        snapshots: dict[int, MemorySnapshots] | None = None,
        directories: dict[int, uuid.UUID] | None = None,
    ) -> None:
        self.now = 0
        self.voters = sorted(voters.ids) if isinstance(voters, VoterSet) else list(voters)
        self.cores: dict[int, RaftCore] = {}
        self.readies: dict[int, list[Ready]] = {}
        self.pending: list[Envelope] = []
        self.sent: list[Envelope] = []  # everything ever sent, in order
        self.applied: dict[int, list[Batch]] = {}
        for nid in [*self.voters, *observers]:
            self.cores[nid] = new_core(
                nid,
                voters,
                config=config,
                seed=seed,
                election=(elections or {}).get(nid),
                log=(logs or {}).get(nid),
                snapshots=(snapshots or {}).get(nid),
                directory_id=(directories or {}).get(nid, ZERO_UUID),
            )
            self.readies[nid] = []
            self.applied[nid] = []
            self.flush(nid)

    def __getitem__(self, nid: int) -> RaftCore:
        return self.cores[nid]

    def flush(self, nid: int) -> list[Ready]:
        """Carry out every Ready of node `nid`; its messages go to `pending`."""
        core = self.cores[nid]
        out = []
        while core.has_ready():
            ready = core.ready()
            out.append(ready)
            self.readies[nid].append(ready)
            self.pending.extend(ready.messages)
            self.sent.extend(ready.messages)
            self.applied[nid].extend(ready.committed)
            core.advance(ready)
        return out

    def flush_all(self) -> None:
        for nid in self.cores:
            self.flush(nid)

    def tick(self, nid: int, now: int | None = None) -> None:
        if now is not None:
            self.now = max(self.now, now)
        self.cores[nid].tick(self.now)
        self.flush(nid)

    def fire(self, nid: int) -> None:
        """Move the clock to node `nid`'s next deadline and tick it (and only it)."""
        self.tick(nid, self.cores[nid].next_deadline())

    def take(self, match: Callable[[Envelope], bool]) -> list[Envelope]:
        """Remove and return the pending messages that `match`."""
        taken = [e for e in self.pending if match(e)]
        self.pending = [e for e in self.pending if not match(e)]
        return taken

    def drop(self, match: Callable[[Envelope], bool] = lambda e: True) -> list[Envelope]:
        return self.take(match)

    def deliver_one(self, env: Envelope) -> None:
        core = self.cores.get(env.destination)
        if core is None:
            return
        core.handle(env, self.now)
        self.flush(env.destination)

    def deliver(self, match: Callable[[Envelope], bool] = lambda e: True) -> int:
        """Deliver the matching pending messages (not the answers they cause)."""
        taken = self.take(match)
        for env in taken:
            self.deliver_one(env)
        return len(taken)

    def stabilize(self, match: Callable[[Envelope], bool] = lambda e: True, limit: int = 1000) -> None:
        """Deliver matching messages, and the ones they cause, until none is left."""
        for _ in range(limit):
            if not self.deliver(match):
                return
        raise AssertionError("messages kept flowing: no fixed point")

    def leaders(self) -> list[int]:
        return [nid for nid, core in self.cores.items() if core.role is Role.LEADER]

    def elect(self, nid: int, among: Iterable[int] | None = None) -> None:
        """Make `nid` time out first and win, exchanging messages only with `among`."""
        group = set(self.cores if among is None else among) | {nid}

        def inside(e: Envelope) -> bool:
            return e.source in group and e.destination in group

        self.fire(nid)
        self.stabilize(inside)
        assert self.cores[nid].role is Role.LEADER, self.cores[nid].role


def of_type(kind: type[Message] | tuple[type[Message], ...], *, src: int | None = None, dst: int | None = None):
    """A pending-message matcher by message type and optionally by source/destination."""

    def match(e: Envelope) -> bool:
        return (
            isinstance(e.message, kind) and (src is None or e.source == src) and (dst is None or e.destination == dst)
        )

    return match
