"""A node's event log: one JSON object per line, wall-clock ms, for tests and benchmarks.

Events: {"event": "role", "role": ..., "epoch": ...} on every role change, and
{"event": "first_commit", "epoch": ...} when a leader's first record of its epoch
commits (the moment a failover is over).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import IO


class EventLog:
    def __init__(self, path: Path | None, node_id: int) -> None:
        self._node_id = node_id
        self._file: IO[str] | None = path.open("a", encoding="utf-8") if path is not None else None

    def emit(self, event: str, **fields: object) -> None:
        if self._file is None:
            return
        line = {"t": time.time() * 1000, "node": self._node_id, "event": event, **fields}
        self._file.write(json.dumps(line) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
