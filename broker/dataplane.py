"""`DataPlane`: the parts of a broker that store, replicate and serve partitions, wired.

- `LogManager` opens every partition log under `log.dirs` at construction (recovering
  from the recovery points), before the first metadata record is applied;
- `ReplicaManager` follows the metadata image (leader/follower, create/delete logs);
- `FetcherManager` runs one replica fetcher per source broker;
- `IsrSender` sends the leader's ISR changes to the controller (AlterPartition);
- the Kafka client listener (`broker.kafka`) serves `LocalBrokerServices`;
- periodic tasks checkpoint high watermarks (`replica.high.watermark.checkpoint.interval.ms`),
  recovery points (`log.flush.offset.checkpoint.interval.ms`) and log start offsets
  (`log.flush.start.offset.checkpoint.interval.ms`), apply retention
  (`log.retention.check.interval.ms`) and the flush policy, and compare the descriptors
  the hosted segments need with RLIMIT_NOFILE (`broker.fd_limit`; a warning, at start and
  when the need grows past the limit). They only take snapshots and queue the disk work:
  the writes, fsyncs and unlinks run on each log dir's `DiskQueue` thread, so a slow disk
  never stalls heartbeats.

`stop()` closes the listener, stops fetching, flushes and checkpoints every log (a clean
shutdown: the next start needs no recovery; `LogManager.close_off_loop`: only dirty logs are
fsynced, in threads, so the loop keeps heartbeating meanwhile).

A storage error takes its log dir offline (`broker.log.dir_failure`): the replicas in it
stop at once (no fetching; acks=all writes waiting on them fail with KAFKA_STORAGE_ERROR,
and every later produce or fetch is answered so), and `on_log_dir_failure` tells the
process, which takes the broker out of every leadership and ISR (see `broker/node.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import resource
from collections.abc import Callable, Mapping
from pathlib import Path

from broker.coordinator.partition_host import ReplicaPartitionHost as CoordinatorHost
from broker.fd_limit import DescriptorBudget
from broker.group.replica_host import ReplicaPartitionHost
from broker.group.runtime import OFFSETS_TOPIC, GroupCoordinator
from broker.group.shard import CoordinatorConfig
from broker.isr import IsrSender
from broker.kafka.server import KafkaListeners, start_kafka_listener, stop_kafka_listener
from broker.log import LogManager
from broker.log.dir_failure import LogDirFailures
from broker.producer_ids import ProducerIdManager
from broker.replica.fetcher import FetcherManager
from broker.replica.manager import MIN_INSYNC_REPLICAS, HostedPartition, ReplicaManager, now_ms
from broker.serving import LocalBrokerServices
from broker.txn.coordinator import TxnConfig
from broker.txn.marker_sender import MarkerSender
from broker.txn.records import transaction_partition
from broker.txn.runtime import TRANSACTION_STATE_TOPIC, TxnRuntime
from broker.txn.verification import TxnVerifier
from quorum.controller.topic_configs import effective_config
from quorum.kafka_errors import ErrorCode
from quorum.metadata.delta import MetadataDelta
from quorum.metadata.image import EMPTY as EMPTY_IMAGE
from quorum.metadata.image import ConfigResource, MetadataImage
from quorum.metadata.records import ConfigResourceType
from quorum.node.config import NodeConfig
from quorum.node.controller_client import ControllerClient
from quorum.node.node_context import broker_defaults_of

log = logging.getLogger(__name__)

DESCRIPTOR_CHECK_INTERVAL_MS = 10_000  # how often the hosted segments are counted against RLIMIT_NOFILE


class DataPlane:
    def __init__(
        self,
        config: NodeConfig,
        cluster_id: str,
        *,
        image: Callable[[], MetadataImage],
        client: ControllerClient,
    ) -> None:
        self.config = config
        self.cluster_id = cluster_id
        self.image = image
        self.client = client
        self.broker_epoch: Callable[[], int] = lambda: -1
        self.broker_defaults = broker_defaults_of(config)
        self.dir_failures = LogDirFailures(config.node_id)
        self.dir_failures.add_listener(self._on_log_dir_failure)
        # Called once per failed dir, after its replicas stopped (set by the process).
        self.on_log_dir_failure: Callable[[Path, str], None] = lambda _dir, _why: None
        self.logs = LogManager([Path(d) for d in config.log_dirs], self.broker_defaults, self.dir_failures)
        self.logs.load()
        self.fd_budget = DescriptorBudget(config.node_id, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        self._check_descriptors()
        self._min_isr: dict[str, int] = {}  # topic -> its effective min.insync.replicas
        self._min_isr_default: int | None = None  # a topic's that does not set it
        self.replicas = ReplicaManager(
            config,
            self.logs,
            image=image,
            min_insync_replicas=self.min_insync_replicas,
            on_follow=self._follow,
            on_unfollow=self._unfollow,
            on_isr_change_wanted=self._isr_wanted,
        )
        self.fetchers = FetcherManager(self.replicas, config, self.endpoint)
        self.isr = IsrSender(self.replicas, client, image, lambda: self.broker_epoch())
        self.producer_ids = ProducerIdManager(client, config.node_id, lambda: self.broker_epoch())
        self.services = LocalBrokerServices(config.node_id, cluster_id, image, self.replicas, client, self.producer_ids)
        self.groups = GroupCoordinator(
            config.node_id,
            ReplicaPartitionHost(self.replicas, image),
            coordinator_config_from(config),
            commit_timeout_ms=int(getattr(config, "offsets_commit_timeout_ms", 5_000)),
            retention_check_interval_ms=int(getattr(config, "offsets_retention_check_interval_ms", 600_000)),
        )
        self.txns = TxnRuntime(
            config.node_id,
            CoordinatorHost(self.replicas, image, TRANSACTION_STATE_TOPIC),
            txn_config_from(config),
            self.producer_ids.take_nowait,
        )
        self.txn_markers = MarkerSender(config.node_id, self._leader_of, self.endpoint, self.txns)
        self.txns.markers = self.txn_markers
        # KIP-890 part 1: what a partition leader asks the coordinator before a transactional
        # append (`broker.replica.txn_verification`), unless turned off.
        self.txn_verifier = TxnVerifier(config.node_id, self._txn_coordinator_of, self.endpoint, self.txns.verify)
        if config.transaction_partition_verification_enable:
            self.replicas.txn_verify = self.txn_verifier.verify
            self.groups.txn_verify = functools.partial(self.replicas.verify_coordinator_write, OFFSETS_TOPIC)
        self.services.txn_marker_listener = self.groups  # markers on __consumer_offsets complete offsets
        self._server: KafkaListeners | None = None
        self._listen_task: asyncio.Task[None] | None = None
        self._caught_up = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._started = False
        self._published = False
        # Set by stop() before the logs close (in threads): metadata no longer reaches them.
        self._closing_logs = False

    # ------------------------------------------------------------------ wiring

    def endpoint(self, broker_id: int) -> tuple[str, int] | None:
        """The inter-broker listener of `broker_id` as registered in the metadata."""
        b = self.image().cluster.brokers.get(broker_id)
        if b is None:
            return None
        for ep in b.listeners:
            if ep.name == self.config.inter_broker_listener_name:
                return (ep.host, ep.port)
        return None

    def _follow(self, hosted: HostedPartition) -> None:
        if self.dir_failures.is_offline(hosted.log.log_dir):
            return  # an offline replica fetches nothing: every append would fail
        self.fetchers.follow(hosted)

    def _on_log_dir_failure(self, log_dir: Path, why: str) -> None:
        stopped = 0
        for hosted in list(self.replicas.partitions.values()):
            if hosted.log.log_dir != log_dir:
                continue
            stopped += 1
            self.fetchers.unfollow(hosted)
            # Nothing waiting here may be acknowledged by this replica any more.
            hosted.acks.fail_all(ErrorCode.KAFKA_STORAGE_ERROR)
            hosted.progress.notify()
        log.error("broker %d: stopped the %d replicas in offline log dir %s", self.config.node_id, stopped, log_dir)
        self.on_log_dir_failure(log_dir, why)

    def _unfollow(self, hosted: HostedPartition) -> None:
        self.fetchers.unfollow(hosted)

    def _isr_wanted(self) -> None:
        if self._started:
            self.isr.wake()

    def min_insync_replicas(self, topic: str) -> int:
        value = self._min_isr.get(topic)
        if value is None:
            explicit = self.image().topic_config(topic)
            if MIN_INSYNC_REPLICAS in explicit:
                value = self._effective_min_isr(explicit)
            else:  # the broker's value, shared by every topic that does not set its own
                value = self._min_isr_default
                if value is None:
                    value = self._min_isr_default = self._effective_min_isr({})
            self._min_isr[topic] = value
        return value

    def _effective_min_isr(self, explicit: Mapping[str, str]) -> int:
        image = self.image()
        # Kafka's order: the topic's own value, this broker's dynamic config, the cluster-wide
        # dynamic broker default, then the static server config.
        raw = effective_config(
            MIN_INSYNC_REPLICAS,
            explicit,
            self.broker_defaults,
            dynamic_default_broker=image.config(ConfigResource.broker("")),
            dynamic_broker=image.config(ConfigResource.broker(self.config.node_id)),
        )
        return int(raw) if isinstance(raw, int) else 1

    def on_metadata(self, delta: MetadataDelta | None, image: MetadataImage) -> None:
        if delta is not None and delta.changed_configs:
            changed = delta.changed_configs
            if any(r.type != ConfigResourceType.TOPIC for r in changed):
                self._min_isr.clear()  # a broker config: every topic's value may follow it
                self._min_isr_default = None
            else:
                for resource in changed:
                    if delta.config_key_changed(resource, MIN_INSYNC_REPLICAS):
                        self._min_isr.pop(resource.name, None)
        if self._closing_logs:
            return
        if not self._published:
            self._maybe_publish(image)
            return
        if self.dir_failures.offline and not self.logs.online_dirs():
            return  # no log dir left: the broker is stepping out and hosts nothing any more
        self.replicas.on_metadata(delta, image)
        self.groups.on_metadata()
        self.txns.on_metadata()
        self.txn_markers.on_metadata()

    def _maybe_publish(self, image: MetadataImage) -> None:
        """Partitions follow the metadata only once this broker's image has caught up with its
        own registration (Kafka's initial catch-up): a restarted broker must not act on the
        partition states of its previous life (e.g. lead with an ISR a pending change of
        that life altered). Then everything in the image is applied at once."""
        epoch = self.broker_epoch()
        if self._published or epoch < 0 or image.offset < epoch:
            return
        self._published = True
        self._caught_up.set()
        log.info("broker %d: metadata caught up at offset %d; hosting partitions", self.config.node_id, image.offset)
        self.replicas.on_metadata(MetadataDelta.diff(EMPTY_IMAGE, image), image)
        self.groups.on_metadata()
        self.txns.on_metadata()

    def _leader_of(self, topic: str, partition: int) -> tuple[int, int] | None:
        """(leader id or -1, leader epoch) of a partition in the metadata image; None: no such
        partition (its topic was deleted)."""
        t = self.image().topics.by_name.get(topic)
        reg = None if t is None else t.partitions.get(partition)
        return None if reg is None else (reg.leader, reg.leader_epoch)

    def _txn_coordinator_of(self, transactional_id: str) -> int | None:
        """The broker leading the transactional id's `__transaction_state` partition (None: none)."""
        t = self.image().topics.by_name.get(TRANSACTION_STATE_TOPIC)
        if t is None or not t.partitions:
            return None
        leader = self._leader_of(TRANSACTION_STATE_TOPIC, transaction_partition(transactional_id, len(t.partitions)))
        return None if leader is None or leader[0] < 0 else leader[0]

    # ------------------------------------------------------------------ lifecycle

    async def start(self, *, broker_epoch: Callable[[], int]) -> None:
        self.broker_epoch = broker_epoch
        self._started = True
        self.isr.start()
        self.txn_markers.start()
        c = self.config
        # The recovery points and log starts as loaded, at once (Kafka's first write waits
        # 30 s): a crash before the first interval then still recovers from these.
        self.logs.checkpoint_recovery_points()
        self.logs.checkpoint_log_start_offsets()
        if c.log_cleaner_enable and c.log_cleaner_threads > 0:
            self.logs.start_cleaner(c.log_cleaner_threads, c.log_cleaner_dedupe_buffer_size)
        self._tasks = [
            asyncio.create_task(self._every(c.replica_high_watermark_checkpoint_interval_ms, self._checkpoint)),
            asyncio.create_task(
                self._every(c.log_flush_offset_checkpoint_interval_ms, self.logs.checkpoint_recovery_points)
            ),
            asyncio.create_task(
                self._every(c.log_flush_start_offset_checkpoint_interval_ms, self.logs.checkpoint_log_start_offsets)
            ),
            asyncio.create_task(self._every(c.log_retention_check_interval_ms, self._retention)),
            *(
                [asyncio.create_task(self._every(max(c.log_cleaner_backoff_ms, 10), self._clean))]
                if c.log_cleaner_enable and c.log_cleaner_threads > 0
                else []
            ),
            asyncio.create_task(self._every(1000, self._flush_and_roll)),
            asyncio.create_task(self._every(DESCRIPTOR_CHECK_INTERVAL_MS, self._check_descriptors)),
        ]
        self._listen_task = asyncio.create_task(self._listen_when_caught_up())

    async def _listen_when_caught_up(self) -> None:
        """Host the partitions once the image has caught up with this broker's registration,
        then open the Kafka listener. As Kafka's broker does (its client listeners accept
        only after the initial catch-up), a restarted broker never answers from the image of
        an earlier offset: a Metadata answer that lists no brokers and no leaders makes
        librdkafka forget every broker it knew, and a transactional producer left with none
        waits forever."""
        while not self._published:
            self._maybe_publish(self.image())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.02):
                    await self._caught_up.wait()
        self._server = await start_kafka_listener(self.config, self.services, self.groups, self.txns)

    async def stop(self) -> None:
        if self._listen_task is not None:
            self._listen_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._listen_task
        if self._server is not None:
            await stop_kafka_listener(self._server)
        await self.groups.close()
        await self.txns.close()
        await self.txn_markers.stop()
        await self.txn_verifier.close()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        await self.isr.stop()
        await self.producer_ids.stop()
        await self.fetchers.stop()
        self._closing_logs = True
        self.replicas.close()
        try:
            await self.logs.close_off_loop(self.replicas.high_watermarks())
        except OSError as exc:
            log.error("broker %d: final flush/checkpoint failed: %s", self.config.node_id, exc)

    async def _every(self, interval_ms: int, work: Callable[[], None]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                work()
            except Exception:
                log.exception("broker %d: periodic %s failed", self.config.node_id, work.__name__)

    def _checkpoint(self) -> None:
        self.logs.checkpoint_high_watermarks(self.replicas.high_watermarks())

    def _retention(self) -> None:
        hws = self.replicas.high_watermarks()
        deleted = self.logs.retention_pass(now_ms(), lambda t, p: hws.get((t, p), 0))
        if deleted:
            log.info("broker %d: retention deleted %d segments", self.config.node_id, deleted)
            self.replicas.log_starts_may_have_moved()

    def _clean(self) -> None:
        """log.cleaner.backoff.ms: queue the compacted logs for the cleaner threads."""
        hws = self.replicas.high_watermarks()
        self.logs.cleaning_pass(lambda t, p: hws.get((t, p), 0))

    def _check_descriptors(self) -> None:
        warning = self.fd_budget.check(sum(len(plog.segments) for plog in self.logs.logs.values()))
        if warning is not None:
            log.warning("%s", warning)

    def _flush_and_roll(self) -> None:
        now = now_ms()
        self.logs.write_dirty_epochs()
        self.logs.flush_pass(now)
        self.logs.roll_pass(now)
        self.logs.purge_deleted()


def coordinator_config_from(config: NodeConfig) -> CoordinatorConfig:
    """The group coordinator's settings from the node config (Kafka's names; a setting the
    config does not carry keeps Kafka's default)."""
    d = CoordinatorConfig()

    def get(name: str, default: int) -> int:
        return int(getattr(config, name, default))

    retention_minutes = get("offsets_retention_minutes", d.offsets_retention_ms // 60_000)
    return CoordinatorConfig(
        group_min_session_timeout_ms=get("group_min_session_timeout_ms", d.group_min_session_timeout_ms),
        group_max_session_timeout_ms=get("group_max_session_timeout_ms", d.group_max_session_timeout_ms),
        group_initial_rebalance_delay_ms=get("group_initial_rebalance_delay_ms", d.group_initial_rebalance_delay_ms),
        group_max_size=get("group_max_size", d.group_max_size),
        offsets_retention_ms=retention_minutes * 60_000,
        offset_metadata_max_bytes=get("offset_metadata_max_bytes", d.offset_metadata_max_bytes),
        consumer_session_timeout_ms=get("group_consumer_session_timeout_ms", d.consumer_session_timeout_ms),
        consumer_heartbeat_interval_ms=get("group_consumer_heartbeat_interval_ms", d.consumer_heartbeat_interval_ms),
        consumer_assignors=tuple(getattr(config, "group_consumer_assignors", d.consumer_assignors)),
    )


def txn_config_from(config: NodeConfig) -> TxnConfig:
    """The transaction coordinator's settings from the node config (Kafka's names; a setting
    the config does not carry keeps Kafka's default)."""
    d = TxnConfig()

    def get(name: str, default: int) -> int:
        return int(getattr(config, name, default))

    return TxnConfig(
        transaction_max_timeout_ms=get("transaction_max_timeout_ms", d.transaction_max_timeout_ms),
        transactional_id_expiration_ms=get("transactional_id_expiration_ms", d.transactional_id_expiration_ms),
        abort_timed_out_transaction_cleanup_interval_ms=get(
            "transaction_abort_timed_out_transaction_cleanup_interval_ms",
            d.abort_timed_out_transaction_cleanup_interval_ms,
        ),
        remove_expired_transaction_cleanup_interval_ms=get(
            "transaction_remove_expired_transaction_cleanup_interval_ms",
            d.remove_expired_transaction_cleanup_interval_ms,
        ),
        offsets_topic_num_partitions=get("offsets_topic_num_partitions", d.offsets_topic_num_partitions),
    )
