"""Kafka's small text files, written atomically (temp file, fsync, rename, fsync dir).

- offset checkpoints (`recovery-point-offset-checkpoint`, `replication-offset-checkpoint`,
  `log-start-offset-checkpoint`, one per log dir): `0`, the entry count, then
  `<topic> <partition> <offset>` lines;
- `leader-epoch-checkpoint` (one per partition): `0`, the count, `<epoch> <start offset>` lines;
- `partition.metadata`: `version: 0` and `topic_id: <the id as Kafka prints it>` (URL-safe
  base64 of the 16 bytes, without padding).

A file that does not parse is reported as ValueError; callers treat it as absent (and the
log recovers from scratch), as Kafka does for a corrupt checkpoint.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from pathlib import Path
from uuid import UUID

from quorum.storage.durable import atomic_write

RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
REPLICATION_OFFSET_FILE = "replication-offset-checkpoint"
LOG_START_OFFSET_FILE = "log-start-offset-checkpoint"
LEADER_EPOCH_FILE = "leader-epoch-checkpoint"
PARTITION_METADATA_FILE = "partition.metadata"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
CHECKPOINT_FILES = (RECOVERY_POINT_FILE, REPLICATION_OFFSET_FILE, LOG_START_OFFSET_FILE)


def _lines(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    if len(lines) < 2 or lines[0].strip() != "0":
        raise ValueError(f"{path}: not a version-0 checkpoint")
    count = int(lines[1])
    body = [line for line in lines[2:] if line.strip()]
    if count != len(body):
        raise ValueError(f"{path}: says {count} entries, has {len(body)}")
    return body


def write_offsets(path: Path, offsets: Mapping[tuple[str, int], int]) -> None:
    body = "".join(f"{t} {p} {o}\n" for (t, p), o in sorted(offsets.items()))
    atomic_write(path, f"0\n{len(offsets)}\n{body}".encode())


def read_offsets(path: Path) -> dict[tuple[str, int], int]:
    if not path.exists():
        return {}
    out: dict[tuple[str, int], int] = {}
    for line in _lines(path):
        topic, partition, offset = line.rsplit(" ", 2)
        out[(topic, int(partition))] = int(offset)
    return out


def write_epochs(path: Path, entries: Iterable[tuple[int, int]]) -> None:
    items = list(entries)
    body = "".join(f"{e} {o}\n" for e, o in items)
    atomic_write(path, f"0\n{len(items)}\n{body}".encode())


def read_epochs(path: Path) -> list[tuple[int, int]]:
    if not path.exists():
        return []
    out = []
    for line in _lines(path):
        epoch, offset = line.split()
        out.append((int(epoch), int(offset)))
    return out


def kafka_uuid(u: UUID) -> str:
    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


def parse_kafka_uuid(text: str) -> UUID:
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(raw) != 16:
        raise ValueError(f"{text!r} is not a topic id")
    return UUID(bytes=raw)


def write_partition_metadata(directory: Path, topic_id: UUID) -> None:
    atomic_write(directory / PARTITION_METADATA_FILE, f"version: 0\ntopic_id: {kafka_uuid(topic_id)}".encode())


def read_partition_metadata(directory: Path) -> UUID | None:
    path = directory / PARTITION_METADATA_FILE
    if not path.exists():
        return None
    fields = dict(line.split(": ", 1) for line in path.read_text(encoding="utf-8").splitlines() if ": " in line)
    if fields.get("version") != "0" or "topic_id" not in fields:
        raise ValueError(f"{path}: unknown format")
    return parse_kafka_uuid(fields["topic_id"].strip())
