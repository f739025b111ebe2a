"""The audit's checks as plain Python: findings, settings, and the three kinds of check.

1. Per-copy log checks (`log_findings`): along one copy in file order, offsets rise by one
   (`offsets_not_contiguous`), batch leader epochs never decrease (`leader_epoch_decreasing`),
   and every batch is readable (`bad_crc`, `corrupt_batch`, `undecodable_record`,
   `invalid_snapshot`; a torn tail is `torn_tail`, information only).
2. Agreement between copies (`agreement_findings`): copies must hold the same record
   (batch epoch, control flag, bytes) at every *committed* offset (`replicas_disagree`).
   The high watermark is not on disk, so the rule is: with V the voter set named by the
   LeaderChange records and q = |V|/2 + 1, an offset is committed when at least q of the
   voter copies given hold a readable record there (e.g. >= 2 of 3 controller copies).
   Every copy holding a committed offset (voter or observer) is compared. When fewer than q
   voter copies are given, the rule falls back to the offsets that every given copy holds.
3. Semantic checks (`CopyReplayer`): one copy replayed in log order with the shared
   `MetadataDelta.replay` (one delta accumulates the records and answers for the current
   state; `apply()` runs when topic configs are read and at the end, so that no map is
   copied per batch), from the copy's snapshot (`image_from_records`) when its log does not
   start at 0. It emits the partition timeline (every partition's leader, ISR, leader epoch and
   partition epoch after each change), the broker timeline (registration, fencing,
   unfencing, controlled shutdown), the leader imbalance per broker, and the findings:
   `leader_not_in_isr`, `isr_not_in_replicas`, `unclean_election` (a new leader outside the
   previous ISR, or Kafka's RECOVERING marker; a violation only where the topic's
   `unclean.leader.election.enable`, resolved as the controller does, forbids it),
   `fenced_leader` (checked at batch ends: a batch is atomic), `partition_leaderless` (with
   its duration in batch-timestamp ms), `replication_factor`, `duplicate_replicas`,
   `replicas_on_one_rack`, `leader_imbalance` (Kafka's ratio of a broker's preferred
   partitions it does not lead, above leader.imbalance.per.broker.percentage while the
   broker is live and, with auto.leader.rebalance.enable, while one of those partitions has
   it in its ISR so that the rebalance could act, for longer than
   leader.imbalance.check.interval.seconds of batch timestamps), and `replay_error`.
   `partition_epoch_not_plus_one` / `leader_epoch_not_plus_one` are checked on the
   partition timeline (`epoch_findings`).

The Spark job (`quorum.audit.job`) runs 1 in its read tasks (`LogChecker` per byte range,
stitched by `log_events_across`), 2 as Spark SQL (a join on offset), 3 through `CopyReplayer`
per copy (split by topic into shards when there are fewer copies than cores, the leader
imbalance then summed over shards on the driver); `quorum.audit.baseline` runs all of them
through the Python functions here in one loop.
Both produce the same findings and timelines (tests/audit checks it).
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from quorum.controller.partition_change import brokers_over_threshold
from quorum.controller.replication_control import ReplicationSettings, unclean_allowed
from quorum.metadata.delta import MetadataDelta
from quorum.metadata.errors import MetadataReplayError, RecordDecodeError
from quorum.metadata.image import EMPTY, BrokerRegistration, MetadataImage, PartitionRegistration
from quorum.metadata.records import (
    NO_LEADER_CHANGE,
    BrokerRegistrationChangeRecord,
    FenceBrokerRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    decode_record,
    is_unclean_election,
    kafka_uuid_string,
    record_type_name,
)
from quorum.metadata.snapshot import image_from_records

__all__ = [
    "BROKER_FIELDS",
    "CHECKS",
    "COMMITTED_RULE",
    "FINDING_FIELDS",
    "IMBALANCE_DELTA_FIELDS",
    "IMBALANCE_FIELDS",
    "MAX_OFFSETS",
    "PARTITION_FIELDS",
    "AuditSettings",
    "CopyReplayer",
    "Finding",
    "agreement_findings",
    "epoch_findings",
    "epoch_step",
    "log_events_across",
    "log_findings",
    "merge_findings",
    "merge_shards",
]

VIOLATION = "violation"
WARNING = "warning"
INFO = "info"
MAX_OFFSETS = 100  # offsets listed per finding (offset_count has the total)

CHECKS: dict[str, str] = {
    "replicas_disagree": "copies hold different records at a committed offset",
    "offsets_not_contiguous": "offsets along one copy do not rise by one",
    "leader_epoch_decreasing": "the batch leader epoch decreases along one copy",
    "bad_crc": "a batch fails its CRC32C",
    "corrupt_batch": "a batch is malformed (framing, magic, record layout)",
    "undecodable_record": "a record in a valid batch does not decode",
    "invalid_snapshot": "a snapshot lacks its header/footer or its offsets are wrong",
    "torn_tail": "an incomplete batch at the end of a segment (a crash; truncated at restart)",
    "replay_error": "a record cannot apply to the metadata (MetadataReplayError)",
    "leader_not_in_isr": "a partition change leaves the leader outside the ISR",
    "isr_not_in_replicas": "a partition change leaves ISR members outside the replicas",
    "leader_epoch_not_plus_one": "a partition's leader epoch does not rise by one when its leader is set",
    "partition_epoch_not_plus_one": "a partition's partition epoch does not rise by one on a change",
    "unclean_election": "a leader elected from outside the previous ISR",
    "fenced_leader": "a partition led by a fenced broker",
    "partition_leaderless": "a partition without a leader (duration in batch-timestamp ms)",
    "isr_below_min_insync": "a partition whose ISR is smaller than its min.insync.replicas (acks=all "
    "produces fail; duration in batch-timestamp ms)",
    "replication_factor": "a partition's replica count differs from its topic's replication factor",
    "duplicate_replicas": "two replicas of a partition on one broker",
    "replicas_on_one_rack": "all replicas on one rack while live brokers span more racks",
    "leader_imbalance": "a broker's leader imbalance above the threshold for longer than the check interval",
}

COMMITTED_RULE = (
    "An offset is committed when at least a majority (|V|/2 + 1) of the voter set V named by the "
    "LeaderChange records hold a readable record there, counting the voter copies given (a record "
    "present on >= 2 of 3 controller copies is committed). Every copy holding a committed offset, "
    "voter or observer, must hold the same record there (batch epoch, control flag and record bytes). "
    "With fewer voter copies than a majority, the offsets held by every given copy are compared instead."
)

UNCLEAN = "unclean.leader.election.enable"
IMBALANCE_PCT = "leader.imbalance.per.broker.percentage"
IMBALANCE_INTERVAL = "leader.imbalance.check.interval.seconds"
AUTO_REBALANCE = "auto.leader.rebalance.enable"
MIN_ISR = "min.insync.replicas"


# --------------------------------------------------------------------------- settings and findings


@dataclass(frozen=True)
class AuditSettings:
    """Broker configs the checks depend on (`--broker-default NAME=VALUE`), Kafka's defaults otherwise."""

    broker_defaults: Mapping[str, str] = field(default_factory=dict)

    @property
    def imbalance_percentage(self) -> int:
        return int(self.broker_defaults.get(IMBALANCE_PCT, "10"))

    @property
    def imbalance_interval_ms(self) -> int:
        return int(float(self.broker_defaults.get(IMBALANCE_INTERVAL, "300")) * 1000)

    @property
    def auto_rebalance(self) -> bool:
        return self.broker_defaults.get(AUTO_REBALANCE, "true").strip().lower() == "true"

    @property
    def min_insync_default(self) -> int:
        return int(self.broker_defaults.get(MIN_ISR, "1"))

    @property
    def unclean_default(self) -> bool:
        return self.broker_defaults.get(UNCLEAN, "false").strip().lower() == "true"

    def replication_settings(self) -> ReplicationSettings:
        return ReplicationSettings(broker_defaults=dict(self.broker_defaults))

    def validate(self) -> None:
        """Raise ValueError for a value the checks cannot use."""
        for key, value in self.broker_defaults.items():
            if key in (UNCLEAN, AUTO_REBALANCE) and value.strip().lower() not in ("true", "false"):
                raise ValueError(f"{key} must be true or false, not {value!r}")
        if not 0 <= self.imbalance_percentage <= 100:
            raise ValueError(f"{IMBALANCE_PCT} must be within 0..100")
        if self.imbalance_interval_ms < 0:
            raise ValueError(f"{IMBALANCE_INTERVAL} must be >= 0")
        try:
            if self.min_insync_default < 1:
                raise ValueError
        except ValueError:
            raise ValueError(f"{MIN_ISR} must be an integer >= 1") from None

    def as_dict(self) -> dict[str, Any]:
        return {
            UNCLEAN: self.unclean_default,
            IMBALANCE_PCT: self.imbalance_percentage,
            IMBALANCE_INTERVAL: self.imbalance_interval_ms / 1000,
            AUTO_REBALANCE: self.auto_rebalance,
            MIN_ISR: self.min_insync_default,
        }


@dataclass
class Finding:
    """One named finding with the offsets that prove it."""

    check: str
    severity: str
    subject: str
    message: str
    offsets: list[int] = field(default_factory=list)
    offset_count: int = 0
    log_dir: str | None = None
    node_id: int | None = None
    duration_ms: int | None = None
    details: dict[str, Any] = field(default_factory=dict)
    accumulated: bool = False  # one finding collecting every offset of (check, subject) in a copy

    def add_offset(self, offset: int) -> None:
        self.offset_count += 1
        if len(self.offsets) < MAX_OFFSETS:
            self.offsets.append(offset)

    @property
    def key(self) -> tuple[str, str, int | None]:
        return self.check, self.subject, self.offsets[0] if self.offsets else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "severity": self.severity,
            "subject": self.subject,
            "message": self.message,
            "offsets": list(self.offsets),
            "offset_count": max(self.offset_count, len(self.offsets)),
            "duration_ms": self.duration_ms,
            "details": self.details,
        }


# (name, Spark SQL type) of the rows the replay emits; every row tuple follows its layout.
PARTITION_FIELDS: tuple[tuple[str, str], ...] = (
    ("node_id", "INT"),
    ("log_dir", "STRING"),
    ("offset", "BIGINT"),
    ("batch_timestamp_ms", "BIGINT"),
    ("controller_epoch", "INT"),
    ("change", "STRING"),  # PARTITION_RECORD | PARTITION_CHANGE_RECORD | SNAPSHOT | REMOVE_TOPIC
    ("topic_id", "STRING"),
    ("topic_name", "STRING"),
    ("partition_id", "INT"),
    ("leader", "INT"),
    ("prev_leader", "INT"),
    ("leader_changed", "BOOLEAN"),
    ("isr", "ARRAY<INT>"),
    ("isr_size", "INT"),
    ("replicas", "ARRAY<INT>"),
    ("leader_epoch", "INT"),
    ("partition_epoch", "INT"),
    ("leader_recovery_state", "INT"),
    ("leader_set", "BOOLEAN"),  # the record set the leader field (the leader epoch must rise)
    ("unclean", "BOOLEAN"),
)
BROKER_FIELDS: tuple[tuple[str, str], ...] = (
    ("node_id", "INT"),
    ("log_dir", "STRING"),
    ("offset", "BIGINT"),
    ("batch_timestamp_ms", "BIGINT"),
    ("controller_epoch", "INT"),
    ("broker_id", "INT"),
    ("broker_epoch", "BIGINT"),
    ("event", "STRING"),  # registered | fenced | unfenced | controlled_shutdown | unregistered | snapshot
    ("fenced", "BOOLEAN"),
    ("in_controlled_shutdown", "BOOLEAN"),
    ("rack", "STRING"),
)
IMBALANCE_FIELDS: tuple[tuple[str, str], ...] = (
    ("node_id", "INT"),
    ("log_dir", "STRING"),
    ("offset", "BIGINT"),
    ("batch_timestamp_ms", "BIGINT"),
    ("broker_id", "INT"),
    ("preferred", "INT"),
    ("not_led", "INT"),
    ("ratio", "DOUBLE"),
    ("live", "BOOLEAN"),
)
IMBALANCE_DELTA_FIELDS: tuple[tuple[str, str], ...] = (
    ("node_id", "INT"),
    ("log_dir", "STRING"),
    ("offset", "BIGINT"),
    ("batch_timestamp_ms", "BIGINT"),
    ("broker_id", "INT"),
    ("d_preferred", "INT"),
    ("d_not_led", "INT"),
    ("d_fixable", "INT"),
    ("live", "BOOLEAN"),  # set on liveness rows (shard 0), NULL on count changes
)
FINDING_FIELDS: tuple[tuple[str, str], ...] = (
    ("node_id", "INT"),
    ("log_dir", "STRING"),
    ("check", "STRING"),
    ("severity", "STRING"),
    ("subject", "STRING"),
    ("message", "STRING"),
    ("offsets", "ARRAY<BIGINT>"),
    ("offset_count", "BIGINT"),
    ("duration_ms", "BIGINT"),
    ("details", "STRING"),
    ("accumulated", "BOOLEAN"),
)


class ReplaySink(Protocol):
    def partition(self, row: tuple[Any, ...]) -> None: ...
    def broker(self, row: tuple[Any, ...]) -> None: ...
    def imbalance(self, row: tuple[Any, ...]) -> None: ...
    def imbalance_delta(self, row: tuple[Any, ...]) -> None: ...
    def finding(self, finding: Finding) -> None: ...


class ListSink:
    """A ReplaySink that keeps everything in lists."""

    def __init__(self) -> None:
        self.partitions: list[tuple[Any, ...]] = []
        self.brokers: list[tuple[Any, ...]] = []
        self.imbalances: list[tuple[Any, ...]] = []
        self.imbalance_deltas: list[tuple[Any, ...]] = []
        self.findings: list[Finding] = []

    def partition(self, row: tuple[Any, ...]) -> None:
        self.partitions.append(row)

    def broker(self, row: tuple[Any, ...]) -> None:
        self.brokers.append(row)

    def imbalance(self, row: tuple[Any, ...]) -> None:
        self.imbalances.append(row)

    def imbalance_delta(self, row: tuple[Any, ...]) -> None:
        self.imbalance_deltas.append(row)

    def finding(self, finding: Finding) -> None:
        self.findings.append(finding)


# --------------------------------------------------------------------------- 3. the replay

_Key = tuple[int, int]  # (topic id as an int, partition id): cheap to hash, unlike UUID
_BROKER_RECORDS = (
    RegisterBrokerRecord,
    BrokerRegistrationChangeRecord,
    FenceBrokerRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)


class CopyReplayer:
    """Replays one copy's records in log order through `MetadataDelta` (see the module docstring).

    Feed it with `load_snapshot` (optional, first), then `feed` for every segment row in
    file order, then `finish`. Rows below the replay start (the snapshot's end offset) are
    skipped. The replay stops at the first invalid row (the state after it is unknown) or
    when the log does not start where the replay must (history missing); `finish` says so.

    Sharding (the Spark job's parallel replay of one copy): with `shard` / `shards`, the
    caller gives this replayer every record except the partition records of topics another
    shard owns (of those it gets the first row of their batch, marked `foreign`, so that it
    sees every batch). It replays the records it owns plus every broker, topic, config and
    control record, so its partitions' checks are exact; broker timeline rows and findings
    about non-partition records come from shard 0 only. With `imbalance_deltas`, the leader
    imbalance is not judged here but emitted as per-batch changes of the per-broker counts
    (`IMBALANCE_DELTA_FIELDS`, liveness from shard 0) for the caller to sum over shards.
    """

    def __init__(
        self,
        log_dir: str,
        node_id: int | None,
        settings: AuditSettings,
        sink: ReplaySink,
        start_offset: int = 0,
        *,
        shard: int = 0,
        imbalance_deltas: bool = False,
    ) -> None:
        self.log_dir = log_dir
        self.node_id = node_id
        self.settings = settings
        self.sink = sink
        self.shard = shard
        self._lead_shard = shard == 0
        self._deltas = imbalance_deltas
        self._rs = settings.replication_settings()
        self._pct = settings.imbalance_percentage
        self._interval_ms = settings.imbalance_interval_ms
        self._auto = settings.auto_rebalance
        self.image: MetadataImage = EMPTY
        self.delta = MetadataDelta(EMPTY)
        self.next_offset = start_offset  # the offset the replay expects next
        self.start_offset = start_offset
        self.snapshot: str | None = None
        self.stopped: dict[str, Any] | None = None
        self.records = 0
        self.first_ts: int | None = None
        self.last_ts: int | None = None
        self.last_offset = -1
        # the batch being replayed
        self._batch: int | None = None
        self._floor = start_offset  # rows of the current batch below this were replayed already
        self._ts = 0
        self._epoch = -1
        self._dirty = False  # the delta holds records the image does not
        self._brokers_cache: Mapping[int, BrokerRegistration] | None = None
        self._tid_text: dict[int, str] = {}
        self._touched: set[_Key] = set()
        self._touched_brokers: set[int] = set()
        self._fenced_in_batch: set[int] = set()
        # indexes over the current state
        self._pref: dict[int, int] = defaultdict(int)
        self._not_led: dict[int, int] = defaultdict(int)
        self._fixable: dict[int, int] = defaultdict(int)
        self._leads: dict[int, set[_Key]] = defaultdict(set)
        self._topic_rf: dict[int, int] = {}
        self._uuids: dict[int, uuid.UUID] = {}
        self._last_ratio: dict[int, tuple[float, bool]] = {}
        self._emitted: dict[int, tuple[int, int, int]] = {}  # broker -> counts last emitted as deltas
        self._broker_records: set[int] = set()  # brokers changed by a broker record in this batch
        self._imbalanced_since: dict[int, tuple[int, int]] = {}  # broker -> (offset, ts)
        self._leaderless_since: dict[_Key, tuple[int, int, str]] = {}  # key -> (offset, ts, subject)
        # key -> (offset, ts, subject, min.insync.replicas, smallest ISR size seen) while ISR < min ISR
        self._under_min_since: dict[_Key, tuple[int, int, str, int, int]] = {}
        self._min_isr: dict[str, int] = {}  # topic name -> its min.insync.replicas (cleared on config changes)
        self._fenced_leader: set[_Key] = set()
        self._acc: dict[tuple[str, str], Finding] = {}

    # ------------------------------------------------------------------ input

    def load_snapshot(self, name: str, values: Sequence[bytes], end_offset: int, epoch: int, ts: int | None) -> bool:
        """Start from a snapshot's records (shared `image_from_records`). False if it does not load."""
        try:
            image = image_from_records(values, end_offset - 1, epoch)
        except (RecordDecodeError, MetadataReplayError) as exc:
            self._add("invalid_snapshot", VIOLATION, name, f"snapshot {name} does not replay: {exc}", end_offset - 1)
            self.stopped = {"offset": end_offset - 1, "reason": f"snapshot {name} does not replay"}
            return False
        self.snapshot = name
        self.image = image
        self.delta = MetadataDelta(image)
        self.next_offset = self.start_offset = self._floor = end_offset
        offset = end_offset - 1
        self._batch = offset  # the snapshot is replayed as one batch at its last offset
        self.last_offset = offset
        self._ts = ts if ts is not None else 0
        self._epoch = epoch
        self.first_ts = self.last_ts = ts
        for broker in image.cluster.brokers.values():
            self._touched_brokers.add(broker.id)
            self._broker_records.add(broker.id)
            if self._lead_shard:
                self.sink.broker(
                    (self.node_id, self.log_dir, offset, ts, epoch, broker.id, broker.epoch, "snapshot",
                     broker.fenced, broker.in_controlled_shutdown, broker.rack)
                )  # fmt: skip
        for topic, pid, reg in image.iter_partitions():
            key = (self._key_id(topic.id), pid)
            self._topic_rf.setdefault(key[0], len(reg.replicas))
            self._partition_update(key, topic.name, None, reg, "SNAPSHOT", offset, leader_set=None, record=None)
        self._end_batch()
        self._batch = None
        return True

    def feed(
        self,
        offset: int | None,
        batch_base: int | None,
        batch_last: int | None,
        epoch: int | None,
        ts: int | None,
        is_control: bool | None,
        valid: bool,
        error_kind: str | None,
        value: bytes | None,
        foreign: bool = False,
    ) -> None:
        """One segment row, in file order (an invalid row's header fields may be None).

        `foreign`: a partition record another shard replays (only its batch is noted).
        """
        if self.stopped is not None or (offset is not None and offset < self.start_offset):
            return
        if not valid or offset is None or batch_base is None or epoch is None or ts is None:
            self._end_batch()
            where = offset if offset is not None else self.next_offset
            reason = f"unreadable batch ({error_kind}): the state after it is unknown"
            self.stopped = {"offset": where, "reason": reason}
            return
        if batch_base != self._batch:
            self._end_batch()
            first = max(batch_base, offset)
            if first > self.next_offset:
                if self.records == 0 and self.snapshot is None:
                    reason = f"the log starts at {first} and no snapshot covers the offsets before it"
                else:
                    reason = f"offset {first} follows {self.next_offset - 1}: records are missing"
                self.stopped = {"offset": first, "reason": reason}
                return
            self._batch = batch_base
            self._floor = self.next_offset
            self._ts = ts
            self._epoch = epoch
            if self.first_ts is None:
                self.first_ts = ts
            if self.last_ts is None or ts > self.last_ts:
                self.last_ts = ts
            last = batch_last if batch_last is not None and batch_last >= offset else offset
            if last >= self.next_offset:
                self.records += last - self.next_offset + 1
                self.next_offset = last + 1
            self.last_offset = max(self.last_offset, last)
        if offset < self._floor or foreign:
            return
        if is_control or value is None:
            self.delta.set_provenance(offset, epoch)
            return
        try:
            record = decode_record(value)
        except RecordDecodeError as exc:  # the data source marks these invalid; kept for direct callers
            if self._lead_shard:
                self._add("undecodable_record", VIOLATION, self._copy_subject(), str(exc), offset)
            return
        self._record(record, offset, epoch)

    # ------------------------------------------------------------------ records

    def _record(self, rec: Any, offset: int, epoch: int) -> None:
        t = type(rec)
        delta = self.delta
        if t is PartitionChangeRecord or t is PartitionRecord:
            key = (self._key_id(rec.topic_id), rec.partition_id)
            before = delta.partition(rec.topic_id, rec.partition_id) if t is PartitionChangeRecord else None
            if not self._replay(rec, offset, epoch):
                return
            after = delta.partition(rec.topic_id, rec.partition_id)
            assert after is not None
            name = delta.topic_name(rec.topic_id) or self._tid(key[0])
            if t is PartitionRecord:
                self._topic_rf.setdefault(key[0], len(after.replicas))
                self._partition_update(key, name, None, after, "PARTITION_RECORD", offset, None, rec)
            else:
                self._partition_update(
                    key, name, before, after, "PARTITION_CHANGE_RECORD", offset, rec.leader != NO_LEADER_CHANGE, rec
                )
        elif t in _BROKER_RECORDS:
            if not self._replay(rec, offset, epoch):
                return
            self._broker_update(rec, offset)
        elif t is RemoveTopicRecord:
            self._remove_topic(rec, offset, epoch)
        else:
            self._replay(rec, offset, epoch)

    def _replay(self, rec: Any, offset: int, epoch: int) -> bool:
        try:
            self.delta.replay(rec, offset, epoch)
        except MetadataReplayError as exc:
            # Every shard replays the non-partition records: shard 0 speaks for them.
            if self._lead_shard or type(rec) is PartitionChangeRecord or type(rec) is PartitionRecord:
                name = record_type_name(rec)
                self._add("replay_error", VIOLATION, name, f"{name} does not apply: {exc}", offset)
            return False
        self._dirty = True
        return True

    def _subject(self, key: _Key, name: str | None) -> str:
        return f"{name if name is not None else self._tid(key[0])}-{key[1]}"

    def _copy_subject(self) -> str:
        return f"node {self.node_id}" if self.node_id is not None else self.log_dir

    def _partition_update(
        self,
        key: _Key,
        name: str,
        before: PartitionRegistration | None,
        after: PartitionRegistration,
        change: str,
        offset: int,
        leader_set: bool | None,
        record: Any,
    ) -> None:
        subject = f"{name}-{key[1]}"
        leader = after.leader
        prev_leader = before.leader if before is not None else None
        unclean = False
        if leader_set and leader >= 0 and before is not None:
            unclean = is_unclean_election(record) or (leader not in before.isr and leader in after.isr)
        self.sink.partition(
            (self.node_id, self.log_dir, offset, self._ts, self._epoch, change, self._tid(key[0]), name,
             key[1], leader, prev_leader, before is None or leader != prev_leader, list(after.isr), len(after.isr),
             list(after.replicas), after.leader_epoch, after.partition_epoch, after.leader_recovery_state,
             leader_set, unclean)
        )  # fmt: skip
        self._unindex(key, before)
        self._index(key, after)
        self._touched.add(key)
        # leader in ISR, ISR within replicas
        if leader >= 0 and leader not in after.isr:
            self._add(
                "leader_not_in_isr", VIOLATION, subject,
                f"{subject}: leader {leader} is not in the ISR {list(after.isr)}", offset,
                leader=leader, isr=list(after.isr),
            )  # fmt: skip
        outside = [b for b in after.isr if b not in after.replicas]
        if outside:
            self._add(
                "isr_not_in_replicas", VIOLATION, subject,
                f"{subject}: ISR members {outside} are not replicas {list(after.replicas)}", offset,
                isr=list(after.isr), replicas=list(after.replicas),
            )  # fmt: skip
        if unclean and before is not None:
            self._unclean(key, subject, name, before, after, offset)
        if change in ("PARTITION_RECORD", "SNAPSHOT") or (record is not None and record.replicas is not None):
            self._check_replicas(key, subject, name, after, offset)
        # leaderless intervals
        if leader < 0:
            if key not in self._leaderless_since:
                self._leaderless_since[key] = (offset, self._ts, subject)
        elif key in self._leaderless_since:
            self._close_leaderless(key, offset, ongoing=False)
        # intervals with the ISR below min.insync.replicas
        size = len(after.isr)
        under = self._under_min_since.get(key)
        if under is not None and size < under[3]:
            if size < under[4]:
                self._under_min_since[key] = (*under[:4], size)
        else:
            need = self._min_insync(name)
            if under is not None and size >= need:
                self._close_under_min(key, offset, ongoing=False)
            elif under is None and size < need:
                self._under_min_since[key] = (offset, self._ts, subject, need, size)

    def _min_insync(self, name: str) -> int:
        """The topic's min.insync.replicas: its own config, else the broker default (Kafka's: 1)."""
        if self.delta.changed_configs:
            self._rebase()
            self._min_isr.clear()
        found = self._min_isr.get(name)
        if found is None:
            value = self.image.topic_config(name).get(MIN_ISR)
            try:
                found = int(value) if value is not None else self.settings.min_insync_default
            except ValueError:
                found = self.settings.min_insync_default
            self._min_isr[name] = found
        return found

    def _unclean(
        self,
        key: _Key,
        subject: str,
        name: str,
        before: PartitionRegistration,
        after: PartitionRegistration,
        offset: int,
    ) -> None:
        if self.delta.changed_configs:
            self._rebase()
        image = self.image
        allowed = unclean_allowed(image, name, self._rs)
        topic_value = image.topic_config(name).get(UNCLEAN)
        source = "topic config" if topic_value is not None else "broker default"
        finding = Finding(
            "unclean_election",
            INFO if allowed else VIOLATION,
            subject,
            f"{subject}: broker {after.leader} elected leader from outside the previous ISR {list(before.isr)} "
            f"({UNCLEAN}={'true' if allowed else 'false'} by {source})",
            details={
                "new_leader": after.leader,
                "previous_leader": before.leader,
                "previous_isr": list(before.isr),
                "isr": list(after.isr),
                "leader_recovery_state": after.leader_recovery_state,
                "allowed": allowed,
                "config_source": source,
            },
        )
        finding.add_offset(offset)
        self._emit(finding)

    def _check_replicas(self, key: _Key, subject: str, name: str, reg: PartitionRegistration, offset: int) -> None:
        replicas = list(reg.replicas)
        topic_subject = name
        if len(set(replicas)) != len(replicas):
            self._add(
                "duplicate_replicas", VIOLATION, topic_subject,
                f"{subject}: replicas {replicas} put two replicas on one broker", offset, partition=subject,
            )  # fmt: skip
        rf = self._topic_rf.get(key[0])
        effective = len(replicas) - len(reg.adding_replicas)
        if rf is not None and effective != rf:
            self._add(
                "replication_factor", VIOLATION, topic_subject,
                f"{subject}: {effective} replicas {replicas}, but the topic's replication factor is {rf}", offset,
                partition=subject,
            )  # fmt: skip
        if len(set(replicas)) >= 2:
            brokers = self._brokers_now()
            racks = {brokers[b].rack for b in replicas if b in brokers and brokers[b].rack is not None}
            live_racks = {b.rack for b in brokers.values() if b.is_active and b.rack is not None}
            known = all(b in brokers and brokers[b].rack is not None for b in replicas)
            if known and len(racks) == 1 and len(live_racks) > 1:
                self._add(
                    "replicas_on_one_rack", VIOLATION, topic_subject,
                    f"{subject}: replicas {replicas} are all on rack {next(iter(racks))} while live brokers span "
                    f"racks {sorted(live_racks)}", offset, partition=subject,
                )  # fmt: skip

    def _rebase(self) -> None:
        """Apply the delta: the image catches up with every record replayed so far."""
        if self._dirty:
            self.image = self.delta.apply()
            self.delta = MetadataDelta(self.image)
            self._dirty = False
            self._brokers_cache = None

    def _brokers_now(self) -> Mapping[int, BrokerRegistration]:
        """Every registered broker as of the record being replayed (image + the delta's changes)."""
        if self._brokers_cache is not None:
            return self._brokers_cache
        changed = self.delta.changed_brokers
        if not changed:
            brokers: Mapping[int, BrokerRegistration] = self.image.cluster.brokers
        else:
            merged = dict(self.image.cluster.brokers)
            for broker_id, reg in changed.items():
                if reg is None:
                    merged.pop(broker_id, None)
                else:
                    merged[broker_id] = reg
            brokers = merged
        self._brokers_cache = brokers
        return brokers

    def _key_id(self, topic_id: uuid.UUID) -> int:
        """The topic id as an int (keys of the indexes); remembers the UUID."""
        value = topic_id.int
        if value not in self._uuids:
            self._uuids[value] = topic_id
        return value

    def _tid(self, topic: int) -> str:
        """Kafka's text form of a topic id (cached)."""
        text = self._tid_text.get(topic)
        if text is None:
            text = self._tid_text[topic] = kafka_uuid_string(self._uuids[topic])
        return text

    def _index(self, key: _Key, reg: PartitionRegistration | None) -> None:
        if reg is None:
            return
        if reg.leader >= 0:
            self._leads[reg.leader].add(key)
        if reg.replicas:
            b = reg.replicas[0]
            self._pref[b] += 1
            if reg.leader != b:
                self._not_led[b] += 1
                if b in reg.isr:
                    self._fixable[b] += 1
            self._touched_brokers.add(b)

    def _unindex(self, key: _Key, reg: PartitionRegistration | None) -> None:
        if reg is None:
            return
        if reg.leader >= 0:
            self._leads[reg.leader].discard(key)
        if reg.replicas:
            b = reg.replicas[0]
            self._pref[b] -= 1
            if reg.leader != b:
                self._not_led[b] -= 1
                if b in reg.isr:
                    self._fixable[b] -= 1
            self._touched_brokers.add(b)

    def _broker_update(self, rec: Any, offset: int) -> None:
        broker_id = rec.broker_id
        self._brokers_cache = None
        after = self.delta.broker(broker_id)
        t = type(rec)
        events: list[str] = []
        if t is RegisterBrokerRecord:
            events.append("registered")
        elif t is UnregisterBrokerRecord:
            events.append("unregistered")
        elif t is FenceBrokerRecord:
            events.append("fenced")
        elif t is UnfenceBrokerRecord:
            events.append("unfenced")
        else:
            if rec.fenced == 1:
                events.append("fenced")
            elif rec.fenced == -1:
                events.append("unfenced")
            if rec.in_controlled_shutdown == 1:
                events.append("controlled_shutdown")
            if not events:
                events.append("changed")
        if after is None or after.fenced:
            self._fenced_in_batch.add(broker_id)
        self._touched_brokers.add(broker_id)
        self._broker_records.add(broker_id)
        if not self._lead_shard:
            return
        for event in events:
            self.sink.broker(
                (self.node_id, self.log_dir, offset, self._ts, self._epoch, broker_id, rec.broker_epoch, event,
                 after.fenced if after is not None else None,
                 after.in_controlled_shutdown if after is not None else None,
                 after.rack if after is not None else None)
            )  # fmt: skip

    def _remove_topic(self, rec: RemoveTopicRecord, offset: int, epoch: int) -> None:
        delta = self.delta
        name = delta.topic_name(rec.topic_id)
        partitions: dict[int, PartitionRegistration] = {}
        td = delta.changed_topics.get(rec.topic_id)
        base = td.base if td is not None else self.image.topics.by_id.get(rec.topic_id)
        if base is not None:
            partitions.update(base.partitions)
        if td is not None:
            partitions.update(td.partitions)
        if not self._replay(rec, offset, epoch):
            return
        tint = self._key_id(rec.topic_id)
        for pid, reg in sorted(partitions.items()):
            key = (tint, pid)
            self.sink.partition(
                (self.node_id, self.log_dir, offset, self._ts, self._epoch, "REMOVE_TOPIC",
                 self._tid(tint), name, pid, None, reg.leader, reg.leader >= 0, None, None,
                 list(reg.replicas), reg.leader_epoch, reg.partition_epoch, reg.leader_recovery_state, None, False)
            )  # fmt: skip
            self._unindex(key, reg)
            if key in self._leaderless_since:
                self._close_leaderless(key, offset, ongoing=False, removed=True)
            if key in self._under_min_since:
                self._close_under_min(key, offset, ongoing=False, removed=True)
            self._fenced_leader.discard(key)
            self._touched.discard(key)
        self._topic_rf.pop(tint, None)

    # ------------------------------------------------------------------ batch ends

    def _end_batch(self) -> None:
        """Checks that hold for whole batches (a batch is atomic), at the batch's base offset."""
        if self._batch is None:
            return
        # The state is the delta's: it accumulates every record (apply() runs only when configs
        # are read and at the end), which is the same replay without copying maps per batch.
        delta = self.delta
        brokers = self._brokers_now()
        offset = self._batch
        # No fenced broker leads (the controller writes a fence and the leadership moves it
        # implies in one batch).
        check = set(self._touched)
        for b in self._fenced_in_batch:
            check.update(self._leads.get(b, ()))
        for key in check:
            reg = delta.partition(self._uuids[key[0]], key[1])
            if reg is None or reg.leader < 0:
                self._fenced_leader.discard(key)
                continue
            leader = brokers.get(reg.leader)
            if leader is not None and not leader.fenced:
                self._fenced_leader.discard(key)
            elif key not in self._fenced_leader:
                self._fenced_leader.add(key)
                subject = self._subject(key, delta.topic_name(self._uuids[key[0]]))
                state = "fenced" if leader is not None else "not registered"
                self._add(
                    "fenced_leader", VIOLATION, subject, f"{subject} is led by broker {reg.leader}, which is {state}",
                    offset, leader=reg.leader,
                )  # fmt: skip
        if self._deltas:
            self._imbalance_deltas(brokers, offset)
        else:
            self._imbalance(brokers, offset)
        self._touched.clear()
        self._touched_brokers.clear()
        self._fenced_in_batch.clear()
        self._broker_records.clear()

    def _live(self, brokers: Mapping[int, BrokerRegistration], broker_id: int) -> bool:
        registration = brokers.get(broker_id)
        return registration is not None and registration.is_active

    def _imbalance(self, brokers: Mapping[int, BrokerRegistration], offset: int) -> None:
        """Leader imbalance per broker (Kafka's ratio: the share of its preferred partitions it does
        not lead), judged here: an episode is a live broker above the threshold (with the auto
        rebalance on: while one of those partitions has it in the ISR, so the rebalance could act)."""
        for b in self._touched_brokers:
            pref = self._pref.get(b, 0)
            ratio = self._not_led.get(b, 0) / pref if pref > 0 else 0.0
            live = self._live(brokers, b)
            if self._last_ratio.get(b) != (ratio, live):
                self._last_ratio[b] = (ratio, live)
                self.sink.imbalance(
                    (self.node_id, self.log_dir, offset, self._ts, b, pref, self._not_led.get(b, 0), ratio, live)
                )
            over = live and bool(brokers_over_threshold({b: ratio}, self._pct))
            if self._auto:
                over = over and self._fixable.get(b, 0) > 0
            if over and b not in self._imbalanced_since:
                self._imbalanced_since[b] = (offset, self._ts)
            elif not over and b in self._imbalanced_since:
                self._close_imbalance(b, offset, ongoing=False)

    def _imbalance_deltas(self, brokers: Mapping[int, BrokerRegistration], offset: int) -> None:
        """The per-broker counts' changes in this batch (and, from shard 0, liveness) as rows."""
        emit = self.sink.imbalance_delta
        for b in self._touched_brokers:
            now = (self._pref.get(b, 0), self._not_led.get(b, 0), self._fixable.get(b, 0))
            before = self._emitted.get(b, (0, 0, 0))
            if now != before:
                self._emitted[b] = now
                emit(
                    (self.node_id, self.log_dir, offset, self._ts, b, now[0] - before[0], now[1] - before[1],
                     now[2] - before[2], None)
                )  # fmt: skip
        if self._lead_shard:
            for b in self._broker_records:
                emit((self.node_id, self.log_dir, offset, self._ts, b, 0, 0, 0, self._live(brokers, b)))

    def _close_leaderless(self, key: _Key, offset: int, *, ongoing: bool, removed: bool = False) -> None:
        start, start_ts, subject = self._leaderless_since.pop(key)
        end_ts = self._ts if not ongoing else (self.last_ts if self.last_ts is not None else start_ts)
        duration = max(0, end_ts - start_ts)
        if duration == 0 and not ongoing:
            return
        what = "until the end of the log" if ongoing else "until its topic was deleted" if removed else ""
        finding = Finding(
            "partition_leaderless",
            WARNING,
            subject,
            f"{subject} had no leader for {duration} ms (offsets {start}..{offset}){' ' + what if what else ''}",
            duration_ms=duration,
            details={"from_offset": start, "to_offset": offset, "ongoing": ongoing},
        )
        finding.add_offset(start)
        if offset != start:
            finding.add_offset(offset)
        self._emit(finding)

    def _close_under_min(self, key: _Key, offset: int, *, ongoing: bool, removed: bool = False) -> None:
        start, start_ts, subject, need, smallest = self._under_min_since.pop(key)
        end_ts = self._ts if not ongoing else (self.last_ts if self.last_ts is not None else start_ts)
        duration = max(0, end_ts - start_ts)
        if duration == 0 and not ongoing:
            return
        what = "until the end of the log" if ongoing else "until its topic was deleted" if removed else ""
        finding = Finding(
            "isr_below_min_insync",
            WARNING,
            subject,
            f"{subject}: ISR of {smallest} below {MIN_ISR}={need} for {duration} ms (offsets {start}..{offset})"
            + (f" {what}" if what else ""),
            duration_ms=duration,
            details={"from_offset": start, "to_offset": offset, "ongoing": ongoing, "min_insync_replicas": need,
                     "smallest_isr": smallest},
        )  # fmt: skip
        finding.add_offset(start)
        if offset != start:
            finding.add_offset(offset)
        self._emit(finding)

    def _close_imbalance(self, broker: int, offset: int, *, ongoing: bool) -> None:
        start, start_ts = self._imbalanced_since.pop(broker)
        end_ts = self._ts if not ongoing else (self.last_ts if self.last_ts is not None else start_ts)
        duration = max(0, end_ts - start_ts)
        if duration <= self._interval_ms:
            return
        pct = self._pct
        finding = Finding(
            "leader_imbalance",
            VIOLATION if self._auto else WARNING,
            f"broker {broker}",
            f"broker {broker}: leader imbalance above {pct}% for {duration} ms (offsets {start}..{offset}), longer "
            f"than the {self._interval_ms // 1000} s check interval"
            + ("" if self._auto else " (auto.leader.rebalance.enable=false)"),
            duration_ms=duration,
            details={"from_offset": start, "to_offset": offset, "ongoing": ongoing, "threshold_percentage": pct},
        )
        finding.add_offset(start)
        finding.add_offset(offset)
        self._emit(finding)

    # ------------------------------------------------------------------ findings

    def _add(self, check: str, severity: str, subject: str, message: str, offset: int, **details: Any) -> None:
        """Accumulate offsets of one (check, subject) into one finding."""
        key = (check, subject)
        finding = self._acc.get(key)
        if finding is None:
            finding = self._acc[key] = Finding(
                check,
                severity,
                subject,
                message,
                log_dir=self.log_dir,
                node_id=self.node_id,
                details=details,
                accumulated=True,
            )
        finding.add_offset(offset)

    def _emit(self, finding: Finding) -> None:
        finding.log_dir = self.log_dir
        finding.node_id = self.node_id
        self.sink.finding(finding)

    def finish(self) -> dict[str, Any]:
        """Close the replay: open intervals end at the last batch timestamp; emit every finding."""
        self._end_batch()
        self._rebase()
        end = self.last_offset if self.last_offset >= 0 else self.start_offset - 1
        for key in list(self._leaderless_since):
            self._close_leaderless(key, end, ongoing=True)
        for key in list(self._under_min_since):
            self._close_under_min(key, end, ongoing=True)
        for broker in list(self._imbalanced_since):
            self._close_imbalance(broker, end, ongoing=True)
        for finding in self._acc.values():
            self._emit(finding)
        self._acc.clear()
        return {
            "log_dir": self.log_dir,
            "node_id": self.node_id,
            "shard": self.shard,
            "last_timestamp_ms": self.last_ts,
            "snapshot": self.snapshot,
            "replay_start_offset": self.start_offset,
            "records_replayed": self.records,
            "last_offset": self.last_offset,
            "stopped": self.stopped,
            "topics": len(self.image.topics.by_id),
            "partitions": self.image.topics.partition_count(),
            "brokers": len(self.image.cluster.brokers),
        }

    def imbalance_ratios(self) -> dict[int, float]:
        """The current leader imbalance ratio of every broker that prefers a partition (for tests)."""
        return {b: self._not_led.get(b, 0) / n for b, n in self._pref.items() if n > 0}


# --------------------------------------------------------------------------- 1. per-copy log checks

_ERROR_CHECKS = {
    "crc_mismatch": ("bad_crc", VIOLATION),
    "corrupt_batch": ("corrupt_batch", VIOLATION),
    "bad_record": ("undecodable_record", VIOLATION),
    "bad_snapshot": ("invalid_snapshot", VIOLATION),
    "torn_tail": ("torn_tail", INFO),
}


def copy_label(node_id: int | None, log_dir: str) -> str:
    return f"node {node_id}" if node_id is not None else log_dir


class LogChecker:
    """The per-copy log checks over one copy's segment rows, fed in file order.

    Mirrors the Spark window functions of `quorum.audit.job` (lag over file, position, offset).
    """

    def __init__(self) -> None:
        self.events: list[tuple[str, int | None]] = []
        self._prev: tuple[int | None, int | None, bool] | None = None
        self._prev_file: str | None = None

    def resume(self, source_file: str, offset: int | None, epoch: int | None, valid: bool) -> None:
        """Continue after this row without checking it: the rows before it were checked elsewhere
        (e.g. a segment read in byte ranges by several tasks, stitched by `log_events_across`)."""
        self._prev = (offset, epoch, valid)
        self._prev_file = source_file

    def invalid(self, error_kind: str | None, offset: int | None) -> None:
        """An invalid row of a snapshot (only readability is checked there)."""
        self.events.append((_ERROR_CHECKS.get(error_kind or "", ("corrupt_batch", VIOLATION))[0], offset))

    def row(self, source_file: str, offset: int | None, epoch: int | None, valid: bool, error_kind: str | None) -> None:
        events = self.events
        if not valid:
            events.append((_ERROR_CHECKS.get(error_kind or "", ("corrupt_batch", VIOLATION))[0], offset))
        elif source_file != self._prev_file and offset != int(source_file[:20]):
            events.append(("offsets_not_contiguous", offset))
        prev = self._prev
        if prev is not None and valid and prev[2]:
            p_offset, p_epoch, _ = prev
            if offset is not None and p_offset is not None and offset != p_offset + 1:
                events.append(("offsets_not_contiguous", offset))
            if epoch is not None and p_epoch is not None and epoch < p_epoch:
                events.append(("leader_epoch_decreasing", offset))
        self._prev = (offset, epoch, valid)
        self._prev_file = source_file


def log_check_events(
    rows: Iterable[tuple[str, int | None, int | None, bool, str | None]],
) -> list[tuple[str, int | None]]:
    """(check, offset) events along one copy's segment rows: (source_file, offset, leader_epoch,
    valid, error_kind) in file order."""
    checker = LogChecker()
    for row in rows:
        checker.row(*row)
    return checker.events


LogRow = tuple[str, int | None, int | None, bool, str | None]  # (source_file, offset, epoch, valid, error_kind)


def log_events_across(
    ranges: Iterable[tuple[Iterable[tuple[str, int | None]], LogRow | None, LogRow | None]],
) -> list[tuple[str, int | None]]:
    """The log-check events of one copy read in consecutive ranges by several tasks: `ranges` gives,
    in file order, each range's events (a `LogChecker` that `resume`d after the range's first row's
    predecessor when the range starts inside a file) and its first and last segment rows (None when
    it has none). Each range's first row is checked again after the previous non-empty range's last
    row, as one checker over every row would; the events it repeats are the same (check, offset)
    pairs, which `log_findings` counts once."""
    events: list[tuple[str, int | None]] = []
    last: LogRow | None = None
    for found, head, tail in ranges:
        events.extend(found)
        if head is None:
            continue
        if last is not None:
            checker = LogChecker()
            checker.resume(*last[:4])
            checker.row(*head)
            events.extend(checker.events)
        last = tail
    return events


def log_findings(log_dir: str, node_id: int | None, events: Iterable[tuple[str, int | None]]) -> list[Finding]:
    """Group log-check events of one copy into one finding per check (distinct offsets, smallest first)."""
    offsets: dict[str, set[int | None]] = defaultdict(set)
    for check, offset in events:
        offsets[check].add(offset)
    label = copy_label(node_id, log_dir)
    findings = []
    for check, found in offsets.items():
        n = len(found)
        finding = Finding(
            check,
            INFO if check == "torn_tail" else VIOLATION,
            label,
            f"{label}: {CHECKS[check]} ({n} time{'s' if n != 1 else ''})",
            offsets=sorted(o for o in found if o is not None)[:MAX_OFFSETS],
            offset_count=n,
            log_dir=log_dir,
            node_id=node_id,
        )
        findings.append(finding)
    return findings


# --------------------------------------------------------------------------- 2. agreement


def majority(voters: Iterable[int]) -> int:
    return len(set(voters)) // 2 + 1


def agreement_findings(
    copies: Mapping[str, Mapping[int, tuple[int, bool, bytes]]],
    node_ids: Mapping[str, int | None],
    voters: Iterable[int],
) -> tuple[list[Finding], dict[str, Any]]:
    """`replicas_disagree` findings between copies, under COMMITTED_RULE.

    `copies`: log_dir -> {offset: (batch epoch, is_control, record bytes)} of valid segment rows.
    Returns the findings and a description of how the rule applied.
    """
    voter_set = set(voters)
    voter_dirs = [d for d in copies if node_ids.get(d) in voter_set]
    q = majority(voter_set) if voter_set else 1
    rule = "majority" if voter_set and len(voter_dirs) >= q else "common"
    if rule == "majority":
        counts: dict[int, int] = defaultdict(int)
        for d in voter_dirs:
            for offset in copies[d]:
                counts[offset] += 1
        committed = {o for o, n in counts.items() if n >= q}
    else:
        sets = [set(c) for c in copies.values()]
        committed = set.intersection(*sets) if sets else set()
    dirs = sorted(copies, key=lambda d: (node_ids.get(d) is None, node_ids.get(d) or 0, d))
    findings: list[Finding] = []
    for i, a in enumerate(dirs):
        for b in dirs[i + 1 :]:
            ca, cb = copies[a], copies[b]
            bad = sorted(o for o in committed if o in ca and o in cb and ca[o] != cb[o])
            if bad:
                findings.append(_disagree(a, b, node_ids, bad, len(bad)))
    info = {
        "rule": rule,
        "voters": sorted(voter_set),
        "majority": q,
        "voter_copies": sorted(n for d in voter_dirs if (n := node_ids.get(d)) is not None),
        "committed_offsets": len(committed),
        "committed_end_offset": (max(committed) + 1) if committed else 0,
    }
    return findings, info


def _disagree(a: str, b: str, node_ids: Mapping[str, int | None], offsets: list[int], count: int) -> Finding:
    la, lb = copy_label(node_ids.get(a), a), copy_label(node_ids.get(b), b)
    finding = Finding(
        "replicas_disagree",
        VIOLATION,
        f"{la} vs {lb}",
        f"{la} and {lb} hold different records at {count} committed offset{'s' if count != 1 else ''}",
        details={"log_dirs": [a, b]},
    )
    for o in offsets:
        finding.add_offset(o)
    finding.offset_count = count
    return finding


# --------------------------------------------------------------------------- epochs on the timeline


def epoch_step(prev: tuple[Any, ...] | None, row: tuple[Any, ...]) -> list[tuple[str, str, int, int, int]]:
    """The epoch check events of one partition timeline row given the partition's previous row."""
    if prev is None or row[5] != "PARTITION_CHANGE_RECORD" or prev[5] == "REMOVE_TOPIC":
        return []
    out = []
    subject = f"{row[7]}-{row[8]}"
    if row[16] != prev[16] + 1:
        out.append(("partition_epoch_not_plus_one", subject, row[2], prev[16] + 1, row[16]))
    expected = prev[15] + (1 if row[18] else 0)
    if row[15] != expected:
        out.append(("leader_epoch_not_plus_one", subject, row[2], expected, row[15]))
    return out


def epoch_events(rows: Iterable[tuple[Any, ...]]) -> list[tuple[str, str, int, int, int]]:
    """(check, subject, offset, expected, found) along one partition's timeline rows in offset order.

    `rows`: PARTITION_FIELDS tuples of one copy and one partition (the Spark replay applies
    `epoch_step` to each row as it emits it).
    """
    out: list[tuple[str, str, int, int, int]] = []
    prev: tuple[Any, ...] | None = None
    for row in rows:
        out.extend(epoch_step(prev, row))
        prev = row
    return out


def epoch_findings(
    log_dir: str | None, node_id: int | None, events: Iterable[tuple[str, str, int, int, int]]
) -> list[Finding]:
    """Group one copy's epoch events into one finding per (check, partition)."""
    by_key: dict[tuple[str, str], Finding] = {}
    for check, subject, offset, expected, found in events:
        finding = by_key.get((check, subject))
        if finding is None:
            what = "partition epoch" if check.startswith("partition") else "leader epoch"
            finding = by_key[(check, subject)] = Finding(
                check,
                VIOLATION,
                subject,
                f"{subject}: {what} {found} where {expected} was expected",
                log_dir=log_dir,
                node_id=node_id,
                details={"expected": expected, "found": found},
            )
        finding.add_offset(offset)
    return list(by_key.values())


# --------------------------------------------------------------------------- merging


def merge_shards(findings: Iterable[Finding]) -> list[Finding]:
    """Join the accumulated findings that shards of one copy's replay reported separately
    (same copy, check and subject): offsets united, the first one's message and details."""
    out: list[Finding] = []
    merged: dict[tuple[str | None, str, str], Finding] = {}
    for f in sorted(findings, key=lambda f: (f.offsets[:1], f.check, f.subject)):
        if not f.accumulated:
            out.append(f)
            continue
        key = (f.log_dir, f.check, f.subject)
        into = merged.get(key)
        if into is None:
            merged[key] = f
            out.append(f)
            continue
        union = sorted(set(into.offsets) | set(f.offsets))
        duplicates = len(into.offsets) + len(f.offsets) - len(union)
        into.offset_count = max(into.offset_count, len(into.offsets)) + max(f.offset_count, len(f.offsets)) - duplicates
        into.offsets = union[:MAX_OFFSETS]
    return out


def merge_findings(findings: Iterable[Finding], copy_order: Sequence[str]) -> list[dict[str, Any]]:
    """One entry per (check, subject, first offset) across copies, from the first copy in
    `copy_order` that has it, listing every copy (node) that reported it. Sorted by
    severity, check, subject."""
    rank = {d: i for i, d in enumerate(copy_order)}
    merged: dict[tuple[str, str, int | None], tuple[Finding, list[int | None], list[str]]] = {}
    for f in sorted(findings, key=lambda f: rank.get(f.log_dir or "", -1)):
        entry = merged.get(f.key)
        if entry is None:
            merged[f.key] = (f, [f.node_id], [f.log_dir] if f.log_dir else [])
        else:
            if f.node_id not in entry[1]:
                entry[1].append(f.node_id)
            if f.log_dir and f.log_dir not in entry[2]:
                entry[2].append(f.log_dir)
    order = {VIOLATION: 0, WARNING: 1, INFO: 2}
    out = []
    for f, nodes, dirs in merged.values():
        doc = f.as_dict()
        doc["nodes"] = [n for n in nodes if n is not None]
        doc["log_dirs"] = dirs
        out.append(doc)
    out.sort(key=lambda d: (order.get(d["severity"], 3), d["check"], d["subject"], d["offsets"][:1]))
    return out
