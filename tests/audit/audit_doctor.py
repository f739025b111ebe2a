"""Doctoring copies of a real metadata log for the audit tests (always on copies: never the originals)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from quorum.metadata.delta import replay_batches
from quorum.metadata.image import EMPTY, MetadataImage
from quorum.metadata.records import MetadataRecord, encode_record
from quorum.raft.types import Batch
from quorum.storage.file_log import FileLog

METADATA_DIR = "__cluster_metadata-0"
AUDITED = (1, 2, 3, 4)  # the three controllers' copies and the copy of broker 4 (never killed)


def copy_logs(scenario: Any, dest: Path, nodes: tuple[int, ...]) -> dict[int, Path]:
    """Copy the nodes' metadata log dirs (meta.properties + __cluster_metadata-0) under `dest`."""
    out = {}
    for n in nodes:
        target = dest / f"node-{n}"
        target.mkdir(parents=True)
        shutil.copy2(scenario.log_dir(n) / "meta.properties", target / "meta.properties")
        shutil.copytree(scenario.metadata_dir(n), target / METADATA_DIR)
        out[n] = target
    return out


def batches(copy: Path) -> list[Batch]:
    with FileLog.open(copy / METADATA_DIR) as flog:
        assert flog.recovery is None, flog.recovery
        return list(flog.batches)


def truncate_to_common_end(copies: dict[int, Path]) -> int:
    """Cut every copy to the end of the shortest one (a batch boundary on all: the prefix is shared)."""
    end = min(batches(c)[-1].end_offset for c in copies.values())
    for c in copies.values():
        with FileLog.open(c / METADATA_DIR) as flog:
            flog.truncate_to(end)
    return end


def final_image(copy: Path) -> tuple[MetadataImage, Batch]:
    """The image after every batch of `copy` (the shared replay), and its last batch."""
    bs = batches(copy)
    return replay_batches(EMPTY, bs), bs[-1]


def append_to_all(copies: dict[int, Path], records: list[MetadataRecord]) -> int:
    """Append one valid batch (next offset, last epoch, last timestamp + 1) to every copy; its offset."""
    offsets = set()
    for c in copies.values():
        with FileLog.open(c / METADATA_DIR) as flog:
            last = flog.batches[-1]
            batch = Batch(last.end_offset, last.epoch, tuple(encode_record(r) for r in records), last.timestamp_ms + 1)
            flog.append([batch])
            flog.flush()
            offsets.add(batch.base_offset)
    assert len(offsets) == 1
    return offsets.pop()
