"""`GroupAdmin`: what the consumer-group tools ask the brokers, over librdkafka's admin client
(confluent-kafka), as plain typed values.

The command line (`api.consumer_groups`) and the REST API (`api.rest.routes_groups`) both go
through this one class: ListGroups, DescribeGroups (with FindCoordinator), OffsetFetch,
OffsetCommit (altering a group's offsets), DeleteGroups, ListOffsets and Metadata. The one
request librdkafka's Python binding does not offer, OffsetDelete, goes through kafka-python's
admin client (`delete_offsets`), imported only when it runs.

Every call blocks until the brokers answer (at most ``timeout_s``); the REST API runs them in
a worker thread. librdkafka's admin client is thread-safe, so one instance serves many
threads. Failures raise `GroupAdminError` with Kafka's error code (or -1 when the client
failed locally: no broker reachable, timeout).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Final

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from api.tool_clients import TOOL_CLIENT_CONF
from quorum.kafka_errors import DEFAULT_MESSAGES

DEFAULT_TIMEOUT_S: Final = 30.0

# librdkafka's state names -> Kafka's (ConsumerGroupState.toString, what the tools print).
_STATES: Final = {
    "UNKNOWN": "Unknown",
    "PREPARING_REBALANCING": "PreparingRebalance",
    "COMPLETING_REBALANCING": "CompletingRebalance",
    "STABLE": "Stable",
    "DEAD": "Dead",
    "EMPTY": "Empty",
    "ASSIGNING": "Assigning",
    "RECONCILING": "Reconciling",
}
_STATE_ENUMS: Final = {kafka: lib for lib, kafka in _STATES.items()}


class GroupAdminError(Exception):
    """A group request failed: ``code`` is Kafka's error code, or -1 for a local failure."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True, order=True)
class TP:
    """A topic partition (ordered by topic, then partition)."""

    topic: str
    partition: int

    def __str__(self) -> str:  # Java's TopicPartition.toString
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class Coordinator:
    id: int
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class Member:
    member_id: str
    instance_id: str | None  # group.instance.id (KIP-345), None for a dynamic member
    client_id: str
    host: str  # as the coordinator saw it ("/127.0.0.1")
    assignment: tuple[TP, ...]  # the partitions its last SyncGroup gave it


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    state: str  # Kafka's name ("Stable", "Empty", ...)
    is_simple: bool


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str  # Kafka's name: Empty, PreparingRebalance, CompletingRebalance, Stable, Dead
    is_simple: bool  # no protocol type: offsets committed outside a group membership
    assignor: str  # the protocol the group chose ("range", "cooperative-sticky"), "" when none
    type: str  # "classic" or "consumer" (KIP-848)
    coordinator: Coordinator
    members: tuple[Member, ...]

    @property
    def exists(self) -> bool:
        """False for the placeholder Kafka answers for an unknown group (simple and Dead)."""
        return not (self.is_simple and self.state == "Dead")


def state_name(enum_value: Any) -> str:
    """Kafka's name for one of librdkafka's ConsumerGroupState values."""
    return _STATES.get(getattr(enum_value, "name", ""), "Unknown")


def kafka_error_message(code: int) -> str:
    return DEFAULT_MESSAGES.get(code) or f"Kafka error code {code}."


def _error(exc: BaseException) -> GroupAdminError:
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    if isinstance(err, KafkaError):
        code = err.code()
        if code > 0:
            return GroupAdminError(code, kafka_error_message(code))
        return GroupAdminError(-1, err.str())
    return GroupAdminError(-1, str(exc) or type(exc).__name__)


class GroupAdmin:
    """One librdkafka admin client for the group requests of a tool or a REST node."""

    def __init__(self, bootstrap: str, *, client_id: str = "pykraft-consumer-groups",
                 timeout_s: float = DEFAULT_TIMEOUT_S) -> None:  # fmt: skip
        self.bootstrap = bootstrap
        self.timeout_s = timeout_s
        self._client_id = client_id
        self._admin = AdminClient(
            {"bootstrap.servers": bootstrap, "client.id": client_id, "socket.nagle.disable": True, **TOOL_CLIENT_CONF}
        )

    def _result(self, future: Future[Any]) -> Any:
        try:
            return future.result(timeout=self.timeout_s + 5)
        except TimeoutError:
            raise GroupAdminError(-1, f"Timed out after {self.timeout_s:g} s waiting for the brokers.") from None
        except KafkaException as exc:
            raise _error(exc) from None

    # ------------------------------------------------------------ groups

    def list_groups(self, states: Iterable[str] = ()) -> list[GroupListing]:
        """Every group the brokers coordinate (ListGroups to each), optionally only in `states`
        (Kafka's names)."""
        from confluent_kafka import ConsumerGroupState

        kwargs: dict[str, Any] = {"request_timeout": self.timeout_s}
        wanted = {ConsumerGroupState[_STATE_ENUMS[s]] for s in states}
        if wanted:
            kwargs["states"] = wanted
        answer = self._result(self._admin.list_consumer_groups(**kwargs))
        if answer.errors and not answer.valid:
            raise _error(answer.errors[0])
        return sorted(
            (GroupListing(g.group_id, state_name(getattr(g, "state", None)), g.is_simple_consumer_group)
             for g in answer.valid),
            key=lambda g: g.group_id,
        )  # fmt: skip

    def describe(self, group_ids: Sequence[str]) -> dict[str, GroupDescription]:
        """DescribeGroups of each group at its coordinator; an unknown group comes back as
        Kafka's placeholder (`GroupDescription.exists` is False)."""
        futures = self._admin.describe_consumer_groups(list(group_ids), request_timeout=self.timeout_s)
        out: dict[str, GroupDescription] = {}
        for group_id, future in futures.items():
            d = self._result(future)
            node = d.coordinator
            out[group_id] = GroupDescription(
                group_id=d.group_id,
                state=state_name(d.state),
                is_simple=bool(d.is_simple_consumer_group),
                assignor=d.partition_assignor or "",
                type=getattr(getattr(d, "type", None), "name", "CLASSIC").lower(),
                coordinator=Coordinator(node.id, node.host, node.port),
                members=tuple(
                    Member(
                        member_id=m.member_id,
                        instance_id=m.group_instance_id or None,
                        client_id=m.client_id,
                        host=m.host,
                        assignment=tuple(
                            sorted(TP(tp.topic, tp.partition) for tp in (m.assignment.topic_partitions or ()))
                        ),
                    )
                    for m in d.members
                ),
            )
        return out

    def committed(self, group_id: str) -> dict[TP, int]:
        """The group's committed offsets (OffsetFetch of every partition it committed)."""
        request = [ConsumerGroupTopicPartitions(group_id)]
        futures = self._admin.list_consumer_group_offsets(request, request_timeout=self.timeout_s)
        answer = self._result(futures[group_id])
        out: dict[TP, int] = {}
        for tp in answer.topic_partitions or ():
            if tp.error is not None:
                raise _error(KafkaException(tp.error))
            if tp.offset >= 0:  # librdkafka reports "nothing committed" as a negative offset
                out[TP(tp.topic, tp.partition)] = tp.offset
        return out

    def alter_offsets(self, group_id: str, offsets: dict[TP, int]) -> None:
        """Commit `offsets` for the group (OffsetCommit with no member: the group must be empty)."""
        if not offsets:
            return
        partitions = [TopicPartition(tp.topic, tp.partition, offset) for tp, offset in sorted(offsets.items())]
        request = [ConsumerGroupTopicPartitions(group_id, partitions)]
        futures = self._admin.alter_consumer_group_offsets(request, request_timeout=self.timeout_s)
        answer = self._result(futures[group_id])
        for tp in answer.topic_partitions or ():
            if tp.error is not None:
                raise _error(KafkaException(tp.error))

    def delete_groups(self, group_ids: Sequence[str]) -> dict[str, GroupAdminError | None]:
        """DeleteGroups: each group's error, or None when it was deleted."""
        futures = self._admin.delete_consumer_groups(list(group_ids), request_timeout=self.timeout_s)
        out: dict[str, GroupAdminError | None] = {}
        for group_id, future in futures.items():
            try:
                self._result(future)
                out[group_id] = None
            except GroupAdminError as exc:
                out[group_id] = exc
        return out

    def delete_offsets(self, group_id: str, partitions: Iterable[TP]) -> dict[TP, GroupAdminError | None]:
        """OffsetDelete (kafka-python: librdkafka's binding lacks it). A group-level error
        (unknown group, a group with members) raises; partition errors are returned."""
        try:
            from kafka import KafkaAdminClient
            from kafka import TopicPartition as KafkaTopicPartition
            from kafka.errors import KafkaError as KafkaPythonError
        except ImportError:
            raise GroupAdminError(
                -1, "deleting offsets needs kafka-python (pip install kafka-python): librdkafka's binding lacks it"
            ) from None

        admin = KafkaAdminClient(
            bootstrap_servers=self.bootstrap.split(","),
            client_id=self._client_id,
            request_timeout_ms=int(self.timeout_s * 1000),
        )
        try:
            answer = admin.delete_group_offsets(
                group_id, [KafkaTopicPartition(tp.topic, tp.partition) for tp in partitions]
            )
        except KafkaPythonError as exc:
            code = int(getattr(exc, "errno", -1) or -1)
            raise GroupAdminError(code, kafka_error_message(code) if code > 0 else str(exc)) from None
        finally:
            admin.close()
        out: dict[TP, GroupAdminError | None] = {}
        for tp, error in answer.items():
            code = int(getattr(error, "errno", 0) or 0)
            out[TP(tp.topic, tp.partition)] = GroupAdminError(code, kafka_error_message(code)) if code else None
        return out

    # ------------------------------------------------------------ topics and log offsets

    def topic_partitions(self, topics: Sequence[str]) -> list[TP]:
        """Every partition of `topics` (Metadata; no topic is created by asking)."""
        from confluent_kafka import TopicCollection

        if not topics:
            return []
        futures = self._admin.describe_topics(TopicCollection(list(topics)), request_timeout=self.timeout_s)
        out: list[TP] = []
        for name, future in futures.items():
            description = self._result(future)
            out.extend(TP(name, p.id) for p in description.partitions)
        return sorted(out)

    def log_offsets(self, partitions: Iterable[TP], spec: str | int) -> dict[TP, int]:
        """ListOffsets of each partition at its leader: ``"earliest"`` (the log start),
        ``"latest"`` (the high watermark), or a timestamp in ms (the first offset whose
        timestamp is at or after it; -1 when there is none). A partition whose leader could
        not answer is left out."""
        wanted = sorted(set(partitions))
        if not wanted:
            return {}
        if spec == "earliest":
            offset_spec = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
        elif spec == "latest":
            offset_spec = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        else:
            offset_spec = OffsetSpec.for_timestamp(int(spec))
        request = {TopicPartition(tp.topic, tp.partition): offset_spec for tp in wanted}
        futures = self._admin.list_offsets(request, request_timeout=self.timeout_s)
        out: dict[TP, int] = {}
        for tp, future in futures.items():
            try:
                out[TP(tp.topic, tp.partition)] = int(self._result(future).offset)
            except GroupAdminError:
                continue
        return out
