"""`QuorumStateStore`: the durable election state, Kafka's `quorum-state` file.

The file is JSON in Kafka's v0 layout (`FileQuorumStateStore`), e.g.

    {"clusterId":"","leaderId":1,"leaderEpoch":2,"votedId":-1,"appliedOffset":0,
     "currentVoters":[{"voterId":1},{"voterId":2}],"data_version":0}

A write goes to `<path>.tmp`, is fsynced, renamed over `<path>` (atomic on POSIX),
and then the directory is fsynced, so after a crash the file holds either the old or
the new state, never a mix. Reading also accepts Kafka's v1 layout (KIP-853), which
has the same leaderId/leaderEpoch/votedId fields.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from quorum.raft.types import ElectionState
from quorum.storage.durable import atomic_write

__all__ = ["QUORUM_STATE_FILE", "QuorumStateError", "QuorumStateStore"]

QUORUM_STATE_FILE = "quorum-state"


class QuorumStateError(Exception):
    """The quorum-state file exists but cannot be read or parsed."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"corrupt or unreadable quorum-state file {path}: {reason}")
        self.path = path
        self.reason = reason


def _require_int(obj: dict[str, Any], key: str, path: Path) -> int:
    value = obj.get(key)
    # bool is an int subclass in Python; JSON true/false is not a valid id or epoch.
    if type(value) is not int:
        raise QuorumStateError(path, f"field {key!r} missing or not an integer: {value!r}")
    return value


class QuorumStateStore:
    """Reads and atomically writes one quorum-state file.

    `voters` and `cluster_id` only fill the informational `currentVoters` and
    `clusterId` fields that Kafka's v0 format carries; `read` ignores them.
    """

    def __init__(self, path: Path, voters: Sequence[int] = (), *, cluster_id: str = "") -> None:
        self.path = Path(path)
        self._voters = tuple(voters)
        self._cluster_id = cluster_id

    @property
    def tmp_path(self) -> Path:
        return self.path.with_name(self.path.name + ".tmp")

    def read(self) -> ElectionState | None:
        """The stored state, or None if the file does not exist. Raises QuorumStateError."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise QuorumStateError(self.path, f"cannot read: {exc}") from exc
        try:
            obj = json.loads(raw)
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            raise QuorumStateError(self.path, f"invalid JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise QuorumStateError(self.path, "top level is not a JSON object")
        version = _require_int(obj, "data_version", self.path)
        if version not in (0, 1):
            raise QuorumStateError(self.path, f"unsupported data_version {version}")
        epoch = _require_int(obj, "leaderEpoch", self.path)
        leader_id = _require_int(obj, "leaderId", self.path)
        voted_id = _require_int(obj, "votedId", self.path)
        if epoch < 0 or leader_id < -1 or voted_id < -1:
            raise QuorumStateError(
                self.path, f"out-of-range values: leaderEpoch={epoch} leaderId={leader_id} votedId={voted_id}"
            )
        return ElectionState(epoch=epoch, voted_id=voted_id, leader_id=leader_id)

    def encode(self, state: ElectionState) -> bytes:
        """The file contents for `state` (Kafka's v0 JSON, compact, key order as Kafka writes it)."""
        doc = {
            "clusterId": self._cluster_id,
            "leaderId": state.leader_id,
            "leaderEpoch": state.epoch,
            "votedId": state.voted_id,
            "appliedOffset": 0,
            "currentVoters": [{"voterId": v} for v in self._voters],
            "data_version": 0,
        }
        return json.dumps(doc, separators=(",", ":")).encode()

    def write(self, state: ElectionState) -> None:
        """Durably replace the stored state: write tmp, fsync, rename, fsync the directory."""
        atomic_write(self.path, self.encode(state), tmp=self.tmp_path)
