"""Nodes that come back behind a snapshot: a broker with an empty metadata log, a controller
whose log prefix is gone.

Every test starts its own 3-controller + 3-broker cluster that snapshots every ~2000 bytes
of records (metadata.log.max.record.bytes.between.snapshots=2000) and rolls 4 KiB segments
(metadata.log.segment.bytes=4096), so that the log prefix below a snapshot gets deleted.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from metadata_cluster import SNAPSHOT_TIMINGS, MetadataCluster, closed_after, start_cluster, wait_until

from quorum.storage.snapshots import SnapshotStore

pytestmark = pytest.mark.integration

TOPICS = 16
START_LINE = re.compile(
    r"node (\d+): log \[(\d+), (\d+)\), snapshot OffsetAndEpoch\(epoch=(\d+), offset=(\d+)\), epoch (\d+), (\w+)"
)


@pytest.fixture
def make_md(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[..., MetadataCluster]]:
    clusters: list[MetadataCluster] = []

    def make(**kwargs: Any) -> MetadataCluster:
        c = start_cluster(tmp_path / f"cluster-{len(clusters) + 1}", properties=dict(SNAPSHOT_TIMINGS), **kwargs)
        clusters.append(c)
        return c

    with closed_after(request, clusters):
        yield make


def segment_bases(partition_dir: Path) -> list[int]:
    return sorted(int(p.name.removesuffix(".log")) for p in partition_dir.glob("*.log"))


def snapshot_offsets(partition_dir: Path) -> list[int]:
    return sorted(int(p.name.split("-")[0]) for p in partition_dir.glob("*.checkpoint"))


def fill(md: MetadataCluster, prefix: str, count: int = TOPICS) -> dict[str, str]:
    """Create topics (through every node in turn); name -> topic id."""
    ids = {}
    nodes = md.running_ids()
    for i in range(count):
        name = f"{prefix}-{i:02d}"
        ids[name] = md.create_topic(nodes[i % len(nodes)], name, partitions_count=3)["topic_id"]
    return ids


def snapshotted(md: MetadataCluster, offset: int) -> bool:
    """Every controller has a snapshot at or beyond `offset` and has deleted its log from 0."""
    for node_id in md.controller_ids:
        d = md.nodes[node_id].partition_dir
        snaps, bases = snapshot_offsets(d), segment_bases(d)
        if not snaps or snaps[-1] < offset or not bases or bases[0] == 0:
            return False
    return True


def fill_until_snapshotted(md: MetadataCluster, prefix: str, max_topics: int = 60) -> tuple[dict[str, str], int]:
    """Create TOPICS topics, then more (idle NoOps alone take long to fill a snapshot interval)
    until every controller has a snapshot holding the first TOPICS and has deleted its log
    prefix. (name -> topic id of every topic created, the offset every snapshot reaches.)"""
    expected = fill(md, prefix)
    hw = md.quorum_status()["high_watermark"]  # type: ignore[index]
    extra = 0
    while not snapshotted(md, hw):
        assert extra < max_topics, f"no snapshot beyond {hw} on every controller after {extra} more topics"
        # Give the controllers a moment to write a snapshot they are due before adding more.
        if extra % 4 == 3 and wait_until_or_none(lambda: snapshotted(md, hw), 1.0):
            break
        name = f"{prefix}-filler-{extra:02d}"
        expected[name] = md.create_topic(md.broker_ids[extra % 3], name, partitions_count=3)["topic_id"]
        extra += 1
    print(f"{len(expected)} topics; every controller snapshotted beyond offset {hw} after {extra} filler topics")
    return expected, hw


def wait_until_or_none(predicate: Callable[[], Any], timeout: float) -> Any:
    try:
        return wait_until("condition", predicate, timeout, 0.1)
    except AssertionError:
        return None


def assert_topics(md: MetadataCluster, node_id: int, expected: dict[str, str]) -> None:
    topics = md.topics(node_id)
    got = {name: topics[name]["topic_id"] for name in expected if name in topics}
    assert got == expected, f"node {node_id}: missing or different topics {set(expected.items()) - set(got.items())}"
    for name in expected:
        assert topics[name]["partitions_count"] == 3


# --------------------------------------------------------------------------- 6. a broker from an empty log


def test_broker_with_empty_metadata_log_installs_a_snapshot(make_md: Callable[..., MetadataCluster]) -> None:
    md = make_md()
    expected, hw = fill_until_snapshotted(md, "snap-b")
    leader = md.active_controller()
    reference = md.all_partitions(leader)

    broker = md.broker_ids[1]
    node = md.nodes[broker]
    old_epoch = md.brokers(leader)[broker]["epoch"]
    assert md.terminate(broker) == 0
    data_dir = Path(node.plan.properties["metadata.log.dir"])
    assert node.partition_dir.parent == data_dir and (data_dir / "meta.properties").exists()
    shutil.rmtree(node.partition_dir)
    # The metadata log is gone; meta.properties and the broker's partition logs (log.dirs is
    # the same directory here) stay.
    assert not node.partition_dir.exists() and "meta.properties" in {p.name for p in data_dir.iterdir()}
    log_before = len(md.node_log(broker))

    md.restart(broker)
    md.wait_unfenced([broker], timeout=30.0, min_epoch=old_epoch + 1)
    new_log = md.node_log(broker)[log_before:]
    assert re.search(rf"node {broker}: log \[0, 0\), snapshot None", new_log), new_log[-3000:]
    installed = re.findall(rf"node {broker}: installed snapshot OffsetAndEpoch\(epoch=(\d+), offset=(\d+)\)", new_log)
    assert installed, f"broker {broker} did not install a snapshot:\n{new_log[-3000:]}"
    assert int(installed[0][1]) >= hw
    assert snapshot_offsets(node.partition_dir), "the installed snapshot is not on disk"
    assert_topics(md, broker, expected)

    # Its whole image agrees with the active controller's (leadership and ISRs included), once
    # the ISR changes its own return sets off (its partitions' leaders take it back) have settled.
    def view(node_id: int) -> dict[Any, Any]:
        return {k: (p["replica_ids"], p["isr"], p["leader_id"]) for k, p in md.all_partitions(node_id).items()}

    wait_until("the broker's image to agree with the controller's", lambda: view(broker) == view(leader), 20.0)
    mine = md.all_partitions(broker)
    assert set(mine) == set(reference)
    # And it follows the log from there on.
    md.create_topic(md.controller_ids[0], "after-install")
    wait_until(
        "the broker to see a topic created after it installed the snapshot",
        lambda: "after-install" in md.topics(broker),
        5.0,
    )


# --------------------------------------------------------------------------- 7. a controller behind a snapshot


def test_controller_loads_its_snapshot_after_log_truncation(make_md: Callable[..., MetadataCluster]) -> None:
    md = make_md()
    expected, hw = fill_until_snapshotted(md, "snap-c")
    leader = md.active_controller()
    victim = next(i for i in md.controller_ids if i != leader)
    node = md.nodes[victim]
    assert md.terminate(victim) == 0

    d = node.partition_dir
    snaps = snapshot_offsets(d)
    assert snaps and snaps[-1] >= hw, f"no snapshot covering {hw} in {sorted(p.name for p in d.iterdir())}"
    latest = snaps[-1]
    # Delete every whole segment below the snapshot (the node may already have).
    bases = segment_bases(d)
    for base, next_base in zip(bases, bases[1:], strict=False):
        if next_base <= latest:
            (d / f"{base:020d}.log").unlink()
    bases = segment_bases(d)
    assert bases and bases[0] > 0, f"the log still starts at 0: {bases}"
    assert bases[0] <= latest, f"the log {bases} does not reach the snapshot at {latest}"
    store = SnapshotStore(d)
    sid = store.latest()
    assert sid is not None and sid.offset == latest
    print(f"controller {victim} stopped with segments {bases} and snapshots {snaps}")

    # Two more topics while it is down: it must catch up after loading.
    expected.update(fill(md, "while-down", count=2))
    log_before = len(md.node_log(victim))
    md.restart(victim)
    wait_until(f"controller {victim} to serve REST", lambda: md.rest_up(victim), 30.0, 0.1)
    new_log = md.node_log(victim)[log_before:]
    m = START_LINE.search(new_log)
    assert m, f"no start line reporting a snapshot in the log of controller {victim}:\n{new_log[:3000]}"
    start, _end, snap_epoch, snap_offset = int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5))
    assert int(m.group(1)) == victim
    assert (snap_epoch, snap_offset) == (sid.epoch, sid.offset), m.group(0)
    assert start == snap_offset > 0, m.group(0)
    wait_until(
        f"controller {victim} to show every topic",
        lambda: set(expected) <= set(md.topics(victim)),
        15.0,
        0.1,
    )
    assert_topics(md, victim, expected)
    status = md.quorum_status(victim)
    assert status is not None and victim in status["voters"]
    # It is a working voter again: the quorum survives losing the old leader now.
    md.kill9(leader)
    new_leader = md.active_controller(not_id=leader, timeout=20.0)
    md.create_topic(md.broker_ids[0], "after-reload")
    wait_until(f"controller {victim} to see after-reload", lambda: "after-reload" in md.topics(victim), 10.0)
    print(f"controller {victim} reloaded; leader {leader} killed, new leader {new_leader}")
