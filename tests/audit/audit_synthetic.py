"""Synthetic metadata logs for the audit tests, written through the real writers
(`FileLog`, `encode_record`, `SnapshotStore` + `encode_snapshot`).

`History` accumulates batches (data and LeaderChange control batches) with explicit
timestamps and epochs. `faulty_cluster(root)` writes one history, full of faults every
check must find, to three voter copies (nodes 1-3) that differ the way real copies do
(segment rolls, a snapshot-started copy) plus on-disk damage (a flipped byte, a spliced
batch, a torn tail, an offset gap).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quorum.metadata.delta import replay_batches
from quorum.metadata.image import EMPTY
from quorum.metadata.records import (
    BrokerEndpoint,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    ConfigResourceType,
    FeatureLevelRecord,
    MetadataRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
    encode_record,
)
from quorum.metadata.snapshot import image_records
from quorum.raft.control_records import encode_leader_change
from quorum.raft.types import Batch, ControlType, OffsetAndEpoch
from quorum.storage.file_log import FileLog
from quorum.storage.record_batch import encode_batch, scan_batches
from quorum.storage.snapshots import SnapshotStore, encode_snapshot

METADATA_DIR = "__cluster_metadata-0"
VOTERS = (1, 2, 3)


def tid(name: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_DNS, name)


@dataclass
class History:
    batches: list[Batch] = field(default_factory=list)
    ts: int = 5_000_000
    epoch: int = 1

    @property
    def end(self) -> int:
        return self.batches[-1].end_offset if self.batches else 0

    def leader_change(self, leader: int, epoch: int, dt: int = 10) -> int:
        self.epoch = epoch
        self.ts += dt
        value = encode_leader_change(leader, VOTERS, VOTERS)
        self.batches.append(Batch(self.end, epoch, (value,), self.ts, ControlType.LEADER_CHANGE))
        return self.end - 1

    def add(self, *records: MetadataRecord, dt: int = 10, epoch: int | None = None) -> int:
        """Append one data batch; returns the offset of its first record."""
        self.ts += dt
        base = self.end
        self.batches.append(
            Batch(base, self.epoch if epoch is None else epoch, tuple(encode_record(r) for r in records), self.ts)
        )
        return base

    def idle(self, ms: int) -> int:
        return self.add(NoOpRecord(), dt=ms)


def register(broker_id: int, epoch: int, rack: str | None) -> RegisterBrokerRecord:
    return RegisterBrokerRecord(
        broker_id=broker_id,
        incarnation_id=uuid.uuid5(uuid.NAMESPACE_OID, f"{broker_id}-{epoch}"),
        broker_epoch=epoch,
        end_points=(BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9000 + broker_id),),
        rack=rack,
        fenced=True,
    )


def partition(topic: str, pid: int, replicas: tuple[int, ...], isr: tuple[int, ...] | None = None) -> PartitionRecord:
    isr = replicas if isr is None else isr
    return PartitionRecord(pid, tid(topic), replicas, isr, leader=isr[0], leader_epoch=0, partition_epoch=0)


def write_copy(
    directory: Path,
    node_id: int,
    batches: list[Batch],
    *,
    segment_bytes: int = 1 << 30,
    start: int = 0,
) -> Path:
    """Write `batches` (those at or after `start`) as node `node_id`'s copy; returns its partition dir."""
    pdir = directory / METADATA_DIR
    pdir.mkdir(parents=True, exist_ok=True)
    (directory / "meta.properties").write_text(f"version=1\ncluster.id=AAAAAAAAAAAAAAAAAAAAAA\nnode.id={node_id}\n")
    with FileLog.open(pdir, segment_bytes=segment_bytes) as flog:
        if start:
            flog.reset(start)
        flog.append([b for b in batches if b.base_offset >= start])
    return pdir


def write_snapshot(pdir: Path, batches: list[Batch], end: int) -> Path:
    """A snapshot of the image after every batch below `end` (a batch boundary)."""
    below = [b for b in batches if b.end_offset <= end]
    assert below and below[-1].end_offset == end
    image = replay_batches(EMPTY, below)
    sid = OffsetAndEpoch(epoch=below[-1].epoch, offset=end)
    data = encode_snapshot(sid, list(image_records(image)), last_contained_timestamp_ms=below[-1].timestamp_ms)
    return SnapshotStore(pdir).create(sid, data)


def rewrite_segment(path: Path, base_offset: int, records: tuple[bytes, ...]) -> None:
    """Replace the records of the batch at `base_offset` (same count, epoch, timestamp; valid CRC)."""
    data = path.read_bytes()
    scan = scan_batches(data)
    assert scan.error is None and scan.consumed == len(data)
    out = []
    found = False
    for b in scan.batches:
        if b.base_offset == base_offset:
            assert len(records) == len(b.records)
            b = Batch(b.base_offset, b.epoch, records, b.timestamp_ms, b.control_type)
            found = True
        out.append(encode_batch(b))
    assert found, f"no batch at {base_offset} in {path}"
    rebuilt = b"".join(out)
    path.write_bytes(rebuilt)


def batch_position(path: Path, base_offset: int) -> int:
    scan = scan_batches(path.read_bytes())
    for b, pos in zip(scan.batches, scan.positions, strict=True):
        if b.base_offset == base_offset:
            return pos
    raise AssertionError(f"no batch at {base_offset} in {path}")


def flip_byte(path: Path, base_offset: int, delta: int = 70) -> None:
    """Flip one byte inside the CRC-covered records of the batch at `base_offset`."""
    pos = batch_position(path, base_offset) + delta
    data = bytearray(path.read_bytes())
    data[pos] ^= 0x40
    path.write_bytes(bytes(data))


def segment_holding(pdir: Path, offset: int) -> Path:
    segments = sorted(pdir.glob("*.log"))
    holding = [s for s in segments if int(s.name[:20]) <= offset]
    return holding[-1]


@dataclass
class FaultyCluster:
    root: Path
    dirs: dict[int, Path]
    history: History
    offsets: dict[str, Any]


def faulty_cluster(root: Path) -> FaultyCluster:
    """One history full of faults, written to three copies with on-disk damage (see the module doc)."""
    h = History()
    o: dict[str, Any] = {}
    h.leader_change(1, 1)
    h.add(FeatureLevelRecord("metadata.version", 1))
    racks = {4: "a", 5: "b", 6: "c", 7: "a"}
    epochs = {}
    for b, rack in racks.items():
        epochs[b] = h.end
        h.add(register(b, h.end, rack))
    for b in racks:
        h.add(BrokerRegistrationChangeRecord(b, epochs[b], fenced=-1))
    h.add(
        TopicRecord("t-ok", tid("t-ok")),
        ConfigRecord(ConfigResourceType.TOPIC, "t-ok", "unclean.leader.election.enable", "true"),
        partition("t-ok", 0, (4, 5, 6)),
        partition("t-ok", 1, (5, 6, 4)),
        partition("t-ok", 2, (6, 4, 5)),
    )
    o["dup"] = h.add(TopicRecord("t-dup", tid("t-dup")), partition("t-dup", 0, (4, 4, 5), (4, 5)))
    o["rf"] = h.add(TopicRecord("t-rf", tid("t-rf")), partition("t-rf", 0, (4, 5, 6)), partition("t-rf", 1, (5, 6))) + 2
    o["rack"] = h.add(TopicRecord("t-rack", tid("t-rack")), partition("t-rack", 0, (4, 7))) + 1
    h.add(
        TopicRecord("t-unclean", tid("t-unclean")),
        ConfigRecord(ConfigResourceType.TOPIC, "t-unclean", "unclean.leader.election.enable", "false"),
        partition("t-unclean", 0, (5, 6, 4), (5, 6)),
    )
    h.idle(200)
    # Leaderless for 5 s, then a leader again.
    o["leaderless_from"] = h.add(PartitionChangeRecord(0, tid("t-ok"), isr=(4,), leader=-1))
    h.idle(2500)
    h.idle(2500)
    o["leaderless_to"] = h.add(PartitionChangeRecord(0, tid("t-ok"), leader=4))
    h.leader_change(2, 2)
    # An unclean election where the topic forbids it, and one where it allows it.
    o["unclean_forbidden"] = h.add(
        PartitionChangeRecord(0, tid("t-unclean"), isr=(4,), leader=4, leader_recovery_state=1)
    )
    o["unclean_allowed"] = h.add(PartitionChangeRecord(0, tid("t-ok"), isr=(5,), leader=5, leader_recovery_state=1))
    # Leader imbalance: broker 5 prefers t-ok-1 but 6 leads it while 5 is in the ISR, for 3 s.
    o["imbalance_from"] = h.add(PartitionChangeRecord(1, tid("t-ok"), leader=6))
    h.idle(1500)
    h.idle(1500)
    o["imbalance_to"] = h.add(PartitionChangeRecord(1, tid("t-ok"), leader=5))
    o["snapshot_end"] = h.end
    # Leader outside the ISR; ISR outside the replicas.
    o["not_in_isr"] = h.add(PartitionChangeRecord(0, tid("t-rf"), isr=(5, 6), leader=4))
    o["isr_outside"] = h.add(PartitionChangeRecord(1, tid("t-rf"), isr=(5, 6, 7)))
    # A fenced broker that keeps leading t-ok-2.
    o["fenced"] = h.add(BrokerRegistrationChangeRecord(6, epochs[6], fenced=1))
    # A record that cannot apply.
    o["replay_error"] = h.add(PartitionChangeRecord(0, tid("no-such-topic"), leader=4))
    # A batch whose leader epoch goes back.
    o["epoch_back"] = h.add(NoOpRecord(), epoch=1)
    h.idle(10)
    o["spliced"] = h.idle(10)
    for _ in range(5):
        h.idle(10)
    o["end"] = h.end

    dirs = {
        1: write_copy(root / "node-1", 1, h.batches, segment_bytes=1024),
        2: write_copy(root / "node-2", 2, h.batches, start=o["snapshot_end"]),
        3: write_copy(root / "node-3", 3, h.batches),
    }
    write_snapshot(dirs[2], h.batches, o["snapshot_end"])
    # node 3: a spliced batch, a flipped byte in the leaderless batch, a torn tail.
    rewrite_segment(
        dirs[3] / "00000000000000000000.log",
        o["spliced"],
        (encode_record(ConfigRecord(ConfigResourceType.BROKER, "", "audit.spliced", "1")),),
    )
    flip_byte(dirs[3] / "00000000000000000000.log", o["leaderless_to"])
    seg3 = dirs[3] / "00000000000000000000.log"
    seg3.write_bytes(
        seg3.read_bytes() + encode_batch(Batch(o["end"], 2, (encode_record(NoOpRecord()),), h.ts + 10))[:30]
    )
    # node 1: a batch that skips five offsets at the end.
    last = segment_holding(dirs[1], o["end"] - 1)
    gap = Batch(o["end"] + 5, 2, (encode_record(NoOpRecord()),), h.ts + 20)
    last.write_bytes(last.read_bytes() + encode_batch(gap))
    o["gap"] = o["end"] + 5
    return FaultyCluster(root, dirs, h, o)
