"""Resources built from the node's metadata image (and the quorum description).

`Links` makes every URL from the request's base URL and the cluster id, so ``metadata.self``
and the ``related`` links point back at the node that answered, through whatever host and
port the client used. Resource names are CRNs as the REST Proxy writes them
(``crn:///kafka=<cluster>/topic=<name>/partition=<p>``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast, get_args
from urllib.parse import quote

from api.rest import models as m
from quorum.controller.config_entry import ConfigEntry, ConfigSource
from quorum.controller.topic_configs import describe_config, topic_config_names
from quorum.controller.topic_rules import is_internal
from quorum.metadata.image import BrokerRegistration, ConfigResource, MetadataImage, PartitionRegistration, TopicImage
from quorum.metadata.records import LeaderRecoveryState, kafka_uuid_string
from quorum.raft.describe import QuorumDescription, ReplicaDescription


def _seg(value: str) -> str:
    return quote(value, safe="")


class Links:
    """URLs and resource names under ``/v3/clusters/{cluster_id}``."""

    def __init__(self, base_url: str, cluster_id: str) -> None:
        self.base = base_url.rstrip("/")
        self.cluster_id = cluster_id
        self.cluster = f"{self.base}/v3/clusters/{_seg(cluster_id)}"
        self.crn = f"crn:///kafka={cluster_id}"

    def clusters(self) -> str:
        return f"{self.base}/v3/clusters"

    def brokers(self) -> str:
        return f"{self.cluster}/brokers"

    def broker(self, broker_id: int) -> str:
        return f"{self.cluster}/brokers/{broker_id}"

    def topics(self) -> str:
        return f"{self.cluster}/topics"

    def topic(self, name: str) -> str:
        return f"{self.cluster}/topics/{_seg(name)}"

    def configs(self, topic: str) -> str:
        return f"{self.topic(topic)}/configs"

    def config(self, topic: str, name: str) -> str:
        return f"{self.configs(topic)}/{_seg(name)}"

    def partitions(self, topic: str) -> str:
        return f"{self.topic(topic)}/partitions"

    def partition(self, topic: str, partition_id: int) -> str:
        return f"{self.partitions(topic)}/{partition_id}"

    def replicas(self, topic: str, partition_id: int) -> str:
        return f"{self.partition(topic, partition_id)}/replicas"

    def replica(self, topic: str, partition_id: int, broker_id: int) -> str:
        return f"{self.replicas(topic, partition_id)}/{broker_id}"

    def reassignment(self, topic: str, partition_id: int) -> str:
        return f"{self.partition(topic, partition_id)}/reassignment"

    def topic_reassignments(self, topic: str) -> str:
        return f"{self.partitions(topic)}/-/reassignment"

    def all_reassignments(self) -> str:
        return f"{self.cluster}/topics/-/partitions/-/reassignment"

    def consumer_groups(self) -> str:
        return f"{self.cluster}/consumer-groups"

    def consumer_group(self, group: str) -> str:
        return f"{self.consumer_groups()}/{_seg(group)}"

    def consumers(self, group: str) -> str:
        return f"{self.consumer_group(group)}/consumers"

    def consumer(self, group: str, consumer: str) -> str:
        return f"{self.consumers(group)}/{_seg(consumer)}"

    def assignments(self, group: str, consumer: str) -> str:
        return f"{self.consumer(group, consumer)}/assignments"

    def assignment(self, group: str, consumer: str, topic: str, partition_id: int) -> str:
        return f"{self.assignments(group, consumer)}/{_seg(topic)}/partitions/{partition_id}"

    def lags(self, group: str) -> str:
        return f"{self.consumer_group(group)}/lags"

    def lag(self, group: str, topic: str, partition_id: int) -> str:
        return f"{self.lags(group)}/{_seg(topic)}/partitions/{partition_id}"

    def crn_group(self, group: str) -> str:
        return f"{self.crn}/consumer-group={group}"

    def crn_topic(self, topic: str) -> str:
        return f"{self.crn}/topic={topic}"

    def crn_partition(self, topic: str, partition_id: int) -> str:
        return f"{self.crn_topic(topic)}/partition={partition_id}"

    @staticmethod
    def rel(url: str) -> m.Relationship:
        return m.Relationship(related=url)

    @staticmethod
    def meta(url: str, resource_name: str | None) -> m.ResourceMetadata:
        return m.ResourceMetadata.model_validate({"self": url, "resource_name": resource_name})

    @staticmethod
    def list_meta(url: str) -> m.CollectionMetadata:
        return m.CollectionMetadata.model_validate({"self": url, "next": None})


# ---------------------------------------------------------------- cluster and brokers


def cluster_data(links: Links) -> m.ClusterData:
    return m.ClusterData(
        metadata=links.meta(links.cluster, links.crn),
        cluster_id=links.cluster_id,
        controller=links.rel(f"{links.cluster}/quorum/status"),
        brokers=links.rel(links.brokers()),
        topics=links.rel(links.topics()),
        partition_reassignments=links.rel(links.all_reassignments()),
        consumer_groups=links.rel(links.consumer_groups()),
        quorum_replication=links.rel(f"{links.cluster}/quorum/replication"),
    )


def broker_data(links: Links, broker: BrokerRegistration) -> m.BrokerData:
    first = broker.listeners[0] if broker.listeners else None
    return m.BrokerData(
        metadata=links.meta(links.broker(broker.id), f"{links.crn}/broker={broker.id}"),
        cluster_id=links.cluster_id,
        broker_id=broker.id,
        host=first.host if first is not None else None,
        port=first.port if first is not None else None,
        rack=broker.rack,
        partition_replicas=links.rel(f"{links.broker(broker.id)}/partition-replicas"),
        fenced=broker.fenced,
        in_controlled_shutdown=broker.in_controlled_shutdown,
        epoch=broker.epoch,
        listeners=[
            m.BrokerListener(name=ep.name, host=ep.host, port=ep.port, security_protocol=ep.security_protocol)
            for ep in broker.listeners
        ],
    )


# ---------------------------------------------------------------- topics, partitions, replicas


def topic_data(
    links: Links, name: str, partitions_count: int, replication_factor: int, topic_id: str | None
) -> m.TopicData:
    return m.TopicData(
        metadata=links.meta(links.topic(name), links.crn_topic(name)),
        cluster_id=links.cluster_id,
        topic_name=name,
        is_internal=is_internal(name),
        replication_factor=replication_factor,
        partitions_count=partitions_count,
        partitions=links.rel(links.partitions(name)),
        configs=links.rel(links.configs(name)),
        partition_reassignments=links.rel(links.topic_reassignments(name)),
        topic_id=topic_id,
    )


def topic_from_image(links: Links, topic: TopicImage) -> m.TopicData:
    return topic_data(links, topic.name, len(topic.partitions), topic.replication_factor, kafka_uuid_string(topic.id))


def partition_data(links: Links, topic: str, partition_id: int, reg: PartitionRegistration) -> m.PartitionData:
    leader = reg.leader if reg.leader >= 0 else None
    return m.PartitionData(
        metadata=links.meta(links.partition(topic, partition_id), links.crn_partition(topic, partition_id)),
        cluster_id=links.cluster_id,
        topic_name=topic,
        partition_id=partition_id,
        leader=links.rel(links.replica(topic, partition_id, leader)) if leader is not None else None,
        replicas=links.rel(links.replicas(topic, partition_id)),
        reassignment=links.rel(links.reassignment(topic, partition_id)),
        leader_id=leader,
        replica_ids=list(reg.replicas),
        isr=list(reg.isr),
        leader_epoch=reg.leader_epoch,
        partition_epoch=reg.partition_epoch,
        leader_recovery_state=(
            "RECOVERING" if reg.leader_recovery_state == LeaderRecoveryState.RECOVERING else "RECOVERED"
        ),
    )


def replica_data(
    links: Links, topic: str, partition_id: int, reg: PartitionRegistration, broker_id: int
) -> m.ReplicaData:
    return m.ReplicaData(
        metadata=links.meta(
            links.replica(topic, partition_id, broker_id),
            f"{links.crn_partition(topic, partition_id)}/replica={broker_id}",
        ),
        cluster_id=links.cluster_id,
        topic_name=topic,
        partition_id=partition_id,
        broker_id=broker_id,
        is_leader=reg.leader == broker_id,
        is_in_sync=broker_id in reg.isr,
        broker=links.rel(links.broker(broker_id)),
    )


def has_reassignment(reg: PartitionRegistration) -> bool:
    return bool(reg.adding_replicas or reg.removing_replicas)


def reassignment_data(links: Links, topic: str, partition_id: int, reg: PartitionRegistration) -> m.ReassignmentData:
    return m.ReassignmentData(
        metadata=links.meta(
            links.reassignment(topic, partition_id), f"{links.crn_partition(topic, partition_id)}/reassignment"
        ),
        cluster_id=links.cluster_id,
        topic_name=topic,
        partition_id=partition_id,
        adding_replicas=list(reg.adding_replicas),
        removing_replicas=list(reg.removing_replicas),
        replicas=links.rel(links.replicas(topic, partition_id)),
    )


# ---------------------------------------------------------------- configs


def source_name(source: ConfigSource) -> m.ConfigSourceName:
    """The Admin API's name of a config source, as the REST API shows it."""
    name = source.name
    if name in get_args(m.ConfigSourceName):
        return cast(m.ConfigSourceName, name)
    return "UNKNOWN"


class ConfigView:
    """Describes a topic's configs the way this node's DescribeConfigs would."""

    def __init__(self, image: MetadataImage, node_id: int, broker_defaults: Mapping[str, str]) -> None:
        self.broker_defaults = broker_defaults
        self.dynamic_default = image.config(ConfigResource.broker(""))
        self.dynamic_broker = image.config(ConfigResource.broker(node_id))

    def entry(self, name: str, explicit: Mapping[str, str]) -> ConfigEntry | None:
        """The described config, or None if a stored or broker value cannot be parsed."""
        try:
            return describe_config(
                name,
                explicit,
                self.broker_defaults,
                dynamic_default_broker=self.dynamic_default,
                dynamic_broker=self.dynamic_broker,
            )
        except Exception:  # a malformed broker or stored value: show it rather than fail the read
            return None

    def data(self, links: Links, topic: str, name: str, explicit: Mapping[str, str]) -> m.TopicConfigData:
        entry = self.entry(name, explicit)
        meta = links.meta(links.config(topic, name), f"{links.crn_topic(topic)}/config={name}")
        if entry is None:
            return m.TopicConfigData(
                metadata=meta,
                cluster_id=links.cluster_id,
                topic_name=topic,
                name=name,
                value=explicit.get(name),
                is_default=False,
                is_read_only=False,
                is_sensitive=False,
                source="DYNAMIC_TOPIC_CONFIG" if name in explicit else "UNKNOWN",
                synonyms=[],
            )
        return m.TopicConfigData(
            metadata=meta,
            cluster_id=links.cluster_id,
            topic_name=topic,
            name=name,
            value=entry.value,
            is_default=entry.is_default,
            is_read_only=entry.is_read_only,
            is_sensitive=entry.is_sensitive,
            source=source_name(entry.source),
            synonyms=[
                m.ConfigSynonymData(name=s.name, value=s.value, source=source_name(s.source)) for s in entry.synonyms
            ],
        )

    def all(self, links: Links, topic: str, explicit: Mapping[str, str]) -> list[m.TopicConfigData]:
        return [self.data(links, topic, name, explicit) for name in sorted(topic_config_names())]


# ---------------------------------------------------------------- the quorum


def _leader_row(d: QuorumDescription) -> ReplicaDescription | None:
    return next((v for v in d.voters if v.replica_id == d.leader_id), None)


def quorum_status(links: Links, d: QuorumDescription) -> m.QuorumStatusData:
    """``describe --status``: the lag of the voter furthest behind the leader, and for how long."""
    leader = _leader_row(d)
    max_lag, max_lag_time = 0, -1
    if leader is not None and d.voters:
        laggard = min(d.voters, key=lambda v: v.log_end_offset)
        max_lag = max(0, leader.log_end_offset - laggard.log_end_offset)
        if laggard.replica_id == d.leader_id:
            max_lag_time = 0
        elif laggard.last_caught_up_ms >= 0 and leader.last_caught_up_ms >= 0:
            max_lag_time = max(0, leader.last_caught_up_ms - laggard.last_caught_up_ms)
    return m.QuorumStatusData(
        metadata=links.meta(f"{links.cluster}/quorum/status", f"{links.crn}/quorum=metadata"),
        cluster_id=links.cluster_id,
        leader_id=d.leader_id,
        leader_epoch=d.leader_epoch,
        high_watermark=d.high_watermark,
        max_follower_lag=max_lag,
        max_follower_lag_time_ms=max_lag_time,
        voters=[v.replica_id for v in d.voters],
        observers=[o.replica_id for o in d.observers],
        replication=links.rel(f"{links.cluster}/quorum/replication"),
    )


def quorum_replication(links: Links, d: QuorumDescription) -> m.QuorumReplicaDataList:
    """``describe --replication``: the leader, then the other voters, then the observers."""
    leader = _leader_row(d)
    leader_end = leader.log_end_offset if leader is not None else 0

    def row(r: ReplicaDescription, status: str) -> m.QuorumReplicaData:
        lag = max(0, leader_end - r.log_end_offset) if r.log_end_offset >= 0 else leader_end
        return m.QuorumReplicaData.model_validate(
            {
                "node_id": r.replica_id,
                "log_end_offset": r.log_end_offset,
                "lag": lag,
                "last_fetch_timestamp": r.last_fetch_ms,
                "last_caught_up_timestamp": r.last_caught_up_ms,
                "status": status,
            }
        )

    rows = [row(v, "Leader") for v in d.voters if v.replica_id == d.leader_id]
    rows += [row(v, "Follower") for v in d.voters if v.replica_id != d.leader_id]
    rows += [row(o, "Observer") for o in d.observers]
    return m.QuorumReplicaDataList(
        metadata=links.list_meta(f"{links.cluster}/quorum/replication"),
        cluster_id=links.cluster_id,
        leader_id=d.leader_id,
        leader_epoch=d.leader_epoch,
        data=rows,
    )
