"""QuorumStateStore: Kafka's quorum-state JSON, atomic durable replacement, clear errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from quorum.raft.types import ElectionState
from quorum.storage.quorum_state import QuorumStateError, QuorumStateStore


def test_missing_file_reads_none(tmp_path: Path) -> None:
    assert QuorumStateStore(tmp_path / "quorum-state", [1, 2, 3]).read() is None


def test_round_trip_and_kafka_v0_format(tmp_path: Path) -> None:
    path = tmp_path / "quorum-state"
    store = QuorumStateStore(path, [1, 2, 3])
    store.write(ElectionState(epoch=2, voted_id=-1, leader_id=1))
    assert path.read_text() == (
        '{"clusterId":"","leaderId":1,"leaderEpoch":2,"votedId":-1,"appliedOffset":0,'
        '"currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}'
    )
    assert store.read() == ElectionState(epoch=2, voted_id=-1, leader_id=1)
    store.write(ElectionState(epoch=3, voted_id=2))
    assert QuorumStateStore(path, [1, 2, 3]).read() == ElectionState(epoch=3, voted_id=2, leader_id=-1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["quorum-state"]


def test_reads_kafka_v1_format(tmp_path: Path) -> None:
    path = tmp_path / "quorum-state"
    path.write_text(
        '{"leaderId":-1,"leaderEpoch":2,"votedId":1,"votedDirectoryId":"J8aAPcfLQt2bqs1JT_rMgQ","data_version":1}'
    )
    assert QuorumStateStore(path, []).read() == ElectionState(epoch=2, voted_id=1, leader_id=-1)


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"\xff\xfe garbage",
        b"{not json",
        b"[1, 2]",
        b'{"leaderId":1,"leaderEpoch":2,"data_version":0}',
        b'{"leaderId":1,"leaderEpoch":"2","votedId":-1,"data_version":0}',
        b'{"leaderId":true,"leaderEpoch":2,"votedId":-1,"data_version":0}',
        b'{"leaderId":1,"leaderEpoch":2,"votedId":-1,"data_version":7}',
        b'{"leaderId":1,"leaderEpoch":-4,"votedId":-1,"data_version":0}',
        b'{"leaderId":1,"leaderEpoch":2.5,"votedId":-1,"data_version":0}',
        b"[" * 100_000,
    ],
)
def test_corrupt_file_raises_clear_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "quorum-state"
    path.write_bytes(content)
    with pytest.raises(QuorumStateError) as info:
        QuorumStateStore(path, [1]).read()
    assert str(path) in str(info.value) and info.value.path == path


def test_unreadable_path_raises_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "quorum-state"
    path.mkdir()  # a directory where the file should be
    with pytest.raises(QuorumStateError):
        QuorumStateStore(path, [1]).read()


def test_failed_write_keeps_old_state_and_no_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "quorum-state"
    store = QuorumStateStore(path, [1, 2])
    store.write(ElectionState(epoch=5, voted_id=1))

    def boom(*args: object) -> None:
        raise OSError("fsync failed")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError):
        store.write(ElectionState(epoch=6, voted_id=2))
    monkeypatch.undo()
    assert store.read() == ElectionState(epoch=5, voted_id=1)
    assert not store.tmp_path.exists()


def test_stale_tmp_is_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "quorum-state"
    store = QuorumStateStore(path, [1])
    store.tmp_path.write_text("half a write from a crash")
    assert store.read() is None
    store.write(ElectionState(epoch=1, leader_id=1))
    assert json.loads(path.read_text())["leaderEpoch"] == 1
    assert not store.tmp_path.exists()
