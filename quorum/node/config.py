"""Node configuration: Kafka-style ``.properties`` files with Kafka's key names and defaults.

``parse_properties`` reads the ``java.util.Properties`` text format (comments starting
with ``#`` or ``!``, ``key=value`` / ``key: value`` / ``key value``, backslash line
continuations and escapes). ``load_config`` turns a file into a validated, typed
``NodeConfig``. Every problem is a ``ConfigError`` whose message names the key.

Keys pykraft does not interpret are kept, unparsed, in ``NodeConfig.extra``; ``load_config``
logs Kafka's warning for those that are not Kafka keys either (``quorum.node.config_keys``).
"""

from __future__ import annotations

import ipaddress
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from quorum.node.config_keys import misspelled_listener_keys, unknown_key_message, unknown_keys

__all__ = [
    "ConfigError",
    "HostPort",
    "Listener",
    "NodeConfig",
    "ROLE_BROKER",
    "ROLE_CONTROLLER",
    "load_config",
    "parse_listeners",
    "parse_properties",
    "parse_voters",
]

_log = logging.getLogger("pykraft.config")

ROLE_CONTROLLER = "controller"
ROLE_BROKER = "broker"
_ROLES = (ROLE_BROKER, ROLE_CONTROLLER)

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB


class ConfigError(ValueError):
    """A configuration file or value is invalid; the message names the key."""


class HostPort(NamedTuple):
    host: str
    port: int

    def __str__(self) -> str:
        return f"{_format_host(self.host)}:{self.port}"


class Listener(NamedTuple):
    """One entry of ``listeners``: ``NAME://host:port`` (an empty host binds every interface)."""

    name: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.name}://{_format_host(self.host)}:{self.port}"

    @property
    def address(self) -> HostPort:
        return HostPort(self.host, self.port)


def _format_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


# ----------------------------------------------------------------------------- properties syntax

_WHITESPACE = " \t\f"
_LINE_BREAK = re.compile(r"\r\n|\r|\n")  # Java's only line terminators (not str.splitlines')
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Join natural lines into logical lines (Java's LineReader); comments and blank lines are dropped.

    Returns ``(line number of the first natural line, logical line)`` pairs. The backslash of a
    continuation stays in the logical line only when escaped (an even number of backslashes).
    """
    out: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(_LINE_BREAK.split(text), start=1):
        line = raw.lstrip(_WHITESPACE)
        if not pending:
            if not line or line[0] in "#!":
                continue  # blank line or comment: a comment never continues
            start = number
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending.append(line[:-1])
            continue
        pending.append(line)
        out.append((start, "".join(pending)))
        pending = []
    if pending:
        out.append((start, "".join(pending)))
    return out


def _unescape(text: str, lineno: int) -> str:
    out: list[str] = []
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        if i + 1 >= n:
            i += 1  # a lone trailing backslash disappears
            continue
        nxt = text[i + 1]
        if nxt == "u":
            digits = text[i + 2 : i + 6]
            if len(digits) != 4 or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise ConfigError(f"line {lineno}: malformed \\uXXXX escape {text[i : i + 6]!r}")
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


def _split_key_value(line: str) -> tuple[str, str]:
    """Split a logical line at the first unescaped ``=``, ``:`` or whitespace (Java's rules)."""
    i = 0
    n = len(line)
    while i < n:
        ch = line[i]
        if ch == "\\":
            i += 2
            continue
        if ch in "=:" or ch in _WHITESPACE:
            break
        i += 1
    key = line[:i]
    j = i
    while j < n and line[j] in _WHITESPACE:
        j += 1
    if j < n and line[j] in "=:":
        j += 1
        while j < n and line[j] in _WHITESPACE:
            j += 1
    return key, line[j:]


def parse_properties(text: str) -> dict[str, str]:
    """Parse ``java.util.Properties`` text. Later duplicates win, as in Java.

    Values keep trailing whitespace (as Java does); the typed accessors strip it.
    """
    props: dict[str, str] = {}
    for lineno, line in _logical_lines(text):
        raw_key, raw_value = _split_key_value(line)
        props[_unescape(raw_key, lineno)] = _unescape(raw_value, lineno)
    return props


def format_properties(props: Mapping[str, str], *, header: str | None = None) -> str:
    """Write properties text that ``parse_properties`` reads back to the same mapping."""

    def esc(text: str, *, is_key: bool) -> str:
        out: list[str] = []
        for idx, ch in enumerate(text):
            if ch == "\\":
                out.append("\\\\")
            elif ch in "\t\n\r\f":
                out.append("\\" + {"\t": "t", "\n": "n", "\r": "r", "\f": "f"}[ch])
            elif ch in "=:#!":
                out.append("\\" + ch)
            elif ch == " " and (is_key or idx == 0):
                out.append("\\ ")
            else:
                out.append(ch)
        return "".join(out)

    lines = [f"#{line}" for line in header.splitlines()] if header else []
    lines += [f"{esc(k, is_key=True)}={esc(v, is_key=False)}" for k, v in props.items()]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- value parsers


def _parse_host_port(text: str, key: str, *, allow_empty_host: bool) -> HostPort:
    text = text.strip()
    if text.startswith("["):
        end = text.find("]")
        if end < 0 or not text[end + 1 :].startswith(":"):
            raise ConfigError(f"{key}: expected [ipv6]:port, got {text!r}")
        host, port_text = text[1:end], text[end + 2 :]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ConfigError(f"{key}: {host!r} is not an IPv6 address") from None
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            raise ConfigError(f"{key}: expected host:port, got {text!r}")
        if ":" in host:
            raise ConfigError(f"{key}: IPv6 hosts must be in brackets, got {text!r}")
    if not host and not allow_empty_host:
        raise ConfigError(f"{key}: missing host in {text!r}")
    if any(c in _WHITESPACE or c in "/@," for c in host):
        raise ConfigError(f"{key}: invalid host {host!r}")
    try:
        port = int(port_text)
    except ValueError:
        raise ConfigError(f"{key}: port {port_text!r} is not an integer") from None
    if not 0 <= port <= 65535:
        raise ConfigError(f"{key}: port {port} out of range (0-65535)")
    return HostPort(host, port)


def parse_voters(text: str, key: str = "controller.quorum.voters") -> dict[int, HostPort]:
    """Parse ``1@host:port,2@host:port,...`` into ``{node id: (host, port)}``."""
    voters: dict[int, HostPort] = {}
    entries = [e.strip() for e in text.split(",")]
    if not any(entries):
        raise ConfigError(f"{key} is empty; expected id@host:port,...")
    for entry in entries:
        if not entry:
            raise ConfigError(f"{key}: empty entry in {text.strip()!r}")
        id_text, at, address = entry.partition("@")
        if not at:
            raise ConfigError(f"{key}: entry {entry!r} is not of the form id@host:port")
        try:
            node_id = int(id_text)
        except ValueError:
            raise ConfigError(f"{key}: voter id {id_text!r} in {entry!r} is not an integer") from None
        if node_id < 0:
            raise ConfigError(f"{key}: voter id {node_id} is negative")
        if node_id in voters:
            raise ConfigError(f"{key}: voter id {node_id} appears more than once")
        hp = _parse_host_port(address, key, allow_empty_host=False)
        if hp.port == 0:
            raise ConfigError(f"{key}: voter {node_id} has port 0; voters need a fixed port")
        voters[node_id] = hp
    return voters


def parse_bootstrap_servers(text: str, key: str = "controller.quorum.bootstrap.servers") -> tuple[HostPort, ...]:
    """Parse ``host:port,host:port,...`` (KIP-853's controller.quorum.bootstrap.servers)."""
    entries = [e.strip() for e in text.split(",")]
    if not all(entries):
        raise ConfigError(f"{key}: empty entry in {text.strip()!r}; expected host:port,...")
    servers = tuple(_parse_host_port(e, key, allow_empty_host=False) for e in entries)
    for hp in servers:
        if hp.port == 0:
            raise ConfigError(f"{key}: {hp.host}:0 has port 0; bootstrap servers need a fixed port")
    return servers


def parse_listeners(text: str, key: str = "listeners") -> tuple[Listener, ...]:
    """Parse ``NAME://host:port,...``; listener names are upper-cased as Kafka does."""
    listeners: list[Listener] = []
    seen: set[str] = set()
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        name, sep, rest = entry.partition("://")
        if not sep or not name:
            raise ConfigError(f"{key}: entry {entry!r} is not of the form NAME://host:port")
        name = name.upper()
        if not all(c.isalnum() or c in "_-" for c in name):
            raise ConfigError(f"{key}: invalid listener name {name!r}")
        if name in seen:
            raise ConfigError(f"{key}: listener name {name} appears more than once")
        seen.add(name)
        hp = _parse_host_port(rest, key, allow_empty_host=True)
        listeners.append(Listener(name, hp.host, hp.port))
    return tuple(listeners)


def _parse_int(key: str, text: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise ConfigError(f"{key}: {text.strip()!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise ConfigError(f"{key}: {value} is below the minimum {minimum}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{key}: {value} is above the maximum {maximum}")
    return value


def _parse_bool(key: str, text: str) -> bool:
    value = text.strip().lower()
    if value == "true":
        return True
    if value == "false":
        return False
    raise ConfigError(f"{key}: {text.strip()!r} is not a boolean (true or false)")


def _parse_list(text: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in text.split(",") if item.strip())


def _parse_protocol_map(key: str, text: str) -> dict[str, str]:
    mapping: dict[str, str] = {}
    for item in _parse_list(text):
        name, sep, protocol = item.partition(":")
        if not sep or not name.strip() or not protocol.strip():
            raise ConfigError(f"{key}: entry {item!r} is not of the form LISTENER_NAME:PROTOCOL")
        mapping[name.strip().upper()] = protocol.strip().upper()
    return mapping


# ----------------------------------------------------------------------------- the config


DEFAULT_LISTENER_SECURITY_PROTOCOL_MAP = (
    "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
)
SUPPORTED_SECURITY_PROTOCOLS = frozenset({"PLAINTEXT"})


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """A node's validated configuration. Field names are Kafka's keys with ``_`` for ``.``."""

    process_roles: frozenset[str]
    node_id: int
    controller_quorum_voters: Mapping[int, HostPort]
    listeners: tuple[Listener, ...] = (Listener("PLAINTEXT", "", 9092),)
    # KIP-853: controllers to ask for the leader when the voters are not configured statically
    # (controller.quorum.voters empty): the voter set is then in the metadata log.
    controller_quorum_bootstrap_servers: tuple[HostPort, ...] = ()
    advertised_listeners: tuple[Listener, ...] = ()  # defaults to listeners
    controller_listener_names: tuple[str, ...] = ("CONTROLLER",)
    listener_security_protocol_map: Mapping[str, str] = field(
        default_factory=lambda: _parse_protocol_map("", DEFAULT_LISTENER_SECURITY_PROTOCOL_MAP)
    )
    inter_broker_listener_name: str = "PLAINTEXT"
    log_dirs: tuple[str, ...] = ("/tmp/kafka-logs",)  # noqa: S108 - Kafka's default log.dir
    metadata_log_dir: str = ""  # defaults to log_dirs[0]
    # Quorum (KIP-595) timing.
    controller_quorum_election_timeout_ms: int = 1000
    controller_quorum_fetch_timeout_ms: int = 2000
    controller_quorum_election_backoff_max_ms: int = 1000
    controller_quorum_request_timeout_ms: int = 2000
    controller_quorum_retry_backoff_ms: int = 20
    controller_quorum_append_linger_ms: int = 25
    # Metadata log and snapshots.
    metadata_log_segment_bytes: int = GIB
    metadata_log_max_record_bytes_between_snapshots: int = 20 * MIB
    metadata_log_max_snapshot_interval_ms: int = 3_600_000
    metadata_max_retention_bytes: int = 100 * MIB
    metadata_max_idle_interval_ms: int = 500
    # Brokers.
    broker_heartbeat_interval_ms: int = 2000
    broker_session_timeout_ms: int = 9000
    initial_broker_registration_timeout_ms: int = 60_000
    broker_rack: str | None = None
    replica_lag_time_max_ms: int = 30_000
    # The data plane: replica fetchers (Kafka's ReplicaFetcherThread settings), checkpoints, logs.
    replica_fetch_max_bytes: int = MIB  # per partition, at least one batch
    replica_fetch_response_max_bytes: int = 10 * MIB  # per fetch response
    replica_fetch_wait_max_ms: int = 500  # a follower's long poll; keep below replica.lag.time.max.ms
    replica_fetch_min_bytes: int = 1
    replica_fetch_backoff_ms: int = 1000  # after a failed fetch
    replica_socket_timeout_ms: int = 30_000
    num_replica_fetchers: int = 1  # fetcher connections per source broker
    replica_high_watermark_checkpoint_interval_ms: int = 5000
    replica_selector_class: str | None = None  # KIP-392: ...RackAwareReplicaSelector enables follower reads
    log_retention_check_interval_ms: int = 300_000
    log_flush_offset_checkpoint_interval_ms: int = 60_000
    log_flush_start_offset_checkpoint_interval_ms: int = 60_000
    # The log cleaner (compacted topics): Kafka's names and defaults.
    log_cleaner_enable: bool = True
    log_cleaner_threads: int = 1
    log_cleaner_backoff_ms: int = 15_000  # between passes over the compacted logs
    log_cleaner_dedupe_buffer_size: int = 128 * MIB  # the offset maps of all cleaner threads (bytes)
    fetch_max_bytes: int = 55 * MIB  # broker cap on one consumer fetch response
    auto_create_topics_enable: bool = True
    # Topic defaults.
    num_partitions: int = 1
    default_replication_factor: int = 1
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    log_retention_ms: int = 7 * 24 * 3600 * 1000
    log_retention_bytes: int = -1
    log_segment_bytes: int = GIB
    # Leader balance.
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    leader_imbalance_per_broker_percentage: int = 10
    # The group coordinator and __consumer_offsets (Kafka's GroupCoordinatorConfig names and
    # defaults; the list defaults are Kafka 4.0's, where KIP-848 is generally available).
    offsets_topic_num_partitions: int = 50
    offsets_topic_replication_factor: int = 3  # capped by the live brokers when the topic is created
    offsets_topic_segment_bytes: int = 100 * MIB
    offsets_retention_minutes: int = 7 * 24 * 60  # offsets of empty groups expire after this
    offsets_retention_check_interval_ms: int = 600_000
    offsets_commit_timeout_ms: int = 5000  # an offset commit waits this long for the replicas
    offsets_load_buffer_size: int = 5 * MIB  # bytes read at a time when a coordinator loads a partition
    group_initial_rebalance_delay_ms: int = 3000  # wait for more members before a new group's first rebalance
    group_min_session_timeout_ms: int = 6000  # classic members' session.timeout.ms must lie in [min, max]
    group_max_session_timeout_ms: int = 1_800_000
    group_max_size: int = 2**31 - 1  # members of one classic group
    group_consumer_heartbeat_interval_ms: int = 5000  # KIP-848 members
    group_consumer_session_timeout_ms: int = 45_000
    group_consumer_assignors: tuple[str, ...] = ("uniform", "range")  # the first is the default
    group_coordinator_rebalance_protocols: tuple[str, ...] = ("classic", "consumer")
    # The transaction coordinator and __transaction_state (Kafka's TransactionLogConfig and
    # TransactionStateManagerConfig names and defaults).
    transaction_state_log_num_partitions: int = 50
    transaction_state_log_replication_factor: int = 3  # capped by the live brokers when the topic is created
    transaction_state_log_min_isr: int = 2
    transaction_state_log_segment_bytes: int = 100 * MIB
    transaction_max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = 7 * 24 * 3600 * 1000
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    # KIP-890 part 1: a partition leader asks the coordinator before a transaction's first write.
    transaction_partition_verification_enable: bool = True
    # Listener resource limits (Kafka's socket server keys; see quorum.wire.limits).
    socket_request_max_bytes: int = 100 * MIB
    # Kafka's default is -1 (unbounded); pykraft bounds what all connections buffer by default.
    queued_max_request_bytes: int = 200 * MIB
    max_connections: int = 2**31 - 1
    max_connections_per_ip: int = 2**31 - 1
    connections_max_idle_ms: int = 600_000
    # SO_RCVBUF / SO_SNDBUF of the listeners' sockets (bytes; -1: the OS default, autotuned;
    # Kafka's default is 102,400: see quorum.wire.limits.DEFAULT_SOCKET_BUFFER_BYTES).
    socket_receive_buffer_bytes: int = -1
    socket_send_buffer_bytes: int = -1
    # pykraft's own keys.
    rest_listener: str | None = None  # e.g. http://127.0.0.1:18081
    # Close a REST connection after this long without a byte while no answer is pending
    # (Confluent REST Proxy's idle.timeout.ms default).
    rest_idle_timeout_ms: int = 30_000
    cluster_id: str | None = None  # cluster.id: if set, storage format and startup must agree with it
    # Keys pykraft does not interpret, as written.
    extra: Mapping[str, str] = field(default_factory=dict)

    @property
    def is_controller(self) -> bool:
        return ROLE_CONTROLLER in self.process_roles

    @property
    def is_broker(self) -> bool:
        return ROLE_BROKER in self.process_roles

    @property
    def all_log_dirs(self) -> tuple[str, ...]:
        """Every directory the node stores data in: the log dirs plus the metadata log dir, once each."""
        dirs = list(self.log_dirs)
        if self.metadata_log_dir not in dirs:
            dirs.append(self.metadata_log_dir)
        return tuple(dirs)

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * 60_000

    @property
    def effective_advertised_listeners(self) -> tuple[Listener, ...]:
        return self.advertised_listeners or self.listeners

    @property
    def controller_listeners(self) -> tuple[Listener, ...]:
        return tuple(lst for lst in self.listeners if lst.name in self.controller_listener_names)

    @property
    def rest_address(self) -> HostPort | None:
        if self.rest_listener is None:
            return None
        parts = urlsplit(self.rest_listener)
        assert parts.hostname is not None and parts.port is not None  # checked by load
        return HostPort(parts.hostname, parts.port)


_INT32_MAX = 2**31 - 1
# Integer keys -> (minimum, maximum); the field is the key with "_" for ".".
_IntSpec = tuple[int | None, int | None]
_INT_KEYS: dict[str, _IntSpec] = {
    "controller.quorum.election.timeout.ms": (1, None),
    "controller.quorum.fetch.timeout.ms": (1, None),
    "controller.quorum.election.backoff.max.ms": (1, None),
    "controller.quorum.request.timeout.ms": (1, None),
    "controller.quorum.retry.backoff.ms": (0, None),
    "controller.quorum.append.linger.ms": (0, None),
    "metadata.log.segment.bytes": (1, None),
    "metadata.log.max.record.bytes.between.snapshots": (1, None),
    "metadata.log.max.snapshot.interval.ms": (0, None),
    "metadata.max.retention.bytes": (-1, None),
    "metadata.max.idle.interval.ms": (0, None),
    "broker.heartbeat.interval.ms": (1, None),
    "broker.session.timeout.ms": (1, None),
    "initial.broker.registration.timeout.ms": (1, None),
    "replica.lag.time.max.ms": (1, None),
    "replica.fetch.max.bytes": (0, None),
    "replica.fetch.response.max.bytes": (0, None),
    "replica.fetch.wait.max.ms": (0, None),
    "replica.fetch.min.bytes": (1, None),
    "replica.fetch.backoff.ms": (0, None),
    "replica.socket.timeout.ms": (1, None),
    "num.replica.fetchers": (1, None),
    "replica.high.watermark.checkpoint.interval.ms": (1, None),
    "log.retention.check.interval.ms": (1, None),
    "log.flush.offset.checkpoint.interval.ms": (0, None),
    "log.flush.start.offset.checkpoint.interval.ms": (0, None),
    "log.cleaner.threads": (0, None),
    "log.cleaner.backoff.ms": (0, None),
    "log.cleaner.dedupe.buffer.size": (0, None),
    "fetch.max.bytes": (1024, None),
    "num.partitions": (1, None),
    "default.replication.factor": (1, None),
    "min.insync.replicas": (1, None),
    "log.retention.bytes": (-1, None),
    "log.segment.bytes": (14, None),
    "leader.imbalance.check.interval.seconds": (1, None),
    "leader.imbalance.per.broker.percentage": (0, 100),
    "socket.request.max.bytes": (1, None),
    "queued.max.request.bytes": (-1, None),
    "max.connections": (0, None),
    "max.connections.per.ip": (0, None),
    "connections.max.idle.ms": (-1, None),
    "socket.receive.buffer.bytes": (-1, None),
    "socket.send.buffer.bytes": (-1, None),
    "rest.idle.timeout.ms": (1, None),
    # The group coordinator: Kafka's validators, and the range of each key's Java type
    # (INT, or SHORT for the replication factor).
    "offsets.topic.num.partitions": (1, _INT32_MAX),
    "offsets.topic.replication.factor": (1, 32767),
    "offsets.topic.segment.bytes": (1, _INT32_MAX),
    "offsets.retention.minutes": (1, _INT32_MAX),
    "offsets.retention.check.interval.ms": (1, None),
    "offsets.commit.timeout.ms": (1, _INT32_MAX),
    "offsets.load.buffer.size": (1, _INT32_MAX),
    "group.initial.rebalance.delay.ms": (0, _INT32_MAX),
    "group.min.session.timeout.ms": (0, _INT32_MAX),
    "group.max.session.timeout.ms": (0, _INT32_MAX),
    "group.max.size": (1, _INT32_MAX),
    "group.consumer.heartbeat.interval.ms": (1, _INT32_MAX),
    "group.consumer.session.timeout.ms": (1, _INT32_MAX),
    # The transaction coordinator (Kafka's validators and Java types).
    "transaction.state.log.num.partitions": (1, _INT32_MAX),
    "transaction.state.log.replication.factor": (1, 32767),
    "transaction.state.log.min.isr": (1, _INT32_MAX),
    "transaction.state.log.segment.bytes": (1, _INT32_MAX),
    "transaction.max.timeout.ms": (1, _INT32_MAX),
    "transactional.id.expiration.ms": (1, _INT32_MAX),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (1, _INT32_MAX),
    "transaction.remove.expired.transaction.cleanup.interval.ms": (1, _INT32_MAX),
}
_BOOL_KEYS = (
    "unclean.leader.election.enable",
    "auto.leader.rebalance.enable",
    "auto.create.topics.enable",
    "log.cleaner.enable",
    "transaction.partition.verification.enable",
)
_OTHER_KEYS = frozenset(
    {
        "process.roles",
        "node.id",
        "controller.quorum.voters",
        "controller.quorum.bootstrap.servers",
        "listeners",
        "advertised.listeners",
        "controller.listener.names",
        "listener.security.protocol.map",
        "inter.broker.listener.name",
        "log.dirs",
        "log.dir",
        "metadata.log.dir",
        "log.retention.ms",
        "log.retention.minutes",
        "log.retention.hours",
        "broker.rack",
        "rest.listener",
        "cluster.id",
        "replica.selector.class",
        "group.consumer.assignors",
        "group.coordinator.rebalance.protocols",
    }
)

# group.consumer.assignors: the server-side assignors pykraft has, by name, and Kafka's class
# names for them (accepted and read as the name).
GROUP_CONSUMER_ASSIGNORS = {
    "uniform": "uniform",
    "range": "range",
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}
GROUP_REBALANCE_PROTOCOLS = ("classic", "consumer")


def _interpreted_keys() -> frozenset[str]:
    """Every key `config_from_properties` reads."""
    return _OTHER_KEYS | _INT_KEYS.keys() | frozenset(_BOOL_KEYS)


def _field(key: str) -> str:
    return key.replace(".", "_")


def _validate_rest_listener(text: str) -> str:
    key = "rest.listener"
    value = text.strip()
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https"):
        raise ConfigError(f"{key}: expected http://host:port, got {value!r}")
    try:
        port = parts.port
    except ValueError:
        raise ConfigError(f"{key}: invalid or out-of-range port in {value!r}") from None
    if not parts.hostname or port is None:
        raise ConfigError(f"{key}: expected http://host:port, got {value!r}")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ConfigError(f"{key}: must not have a path, got {value!r}")
    return value.rstrip("/")


def _parse_assignors(text: str) -> tuple[str, ...]:
    key = "group.consumer.assignors"
    names = _parse_list(text)
    if not names:
        raise ConfigError(f"{key} must not be empty")
    out: list[str] = []
    for name in names:
        assignor = GROUP_CONSUMER_ASSIGNORS.get(name)
        if assignor is None:
            raise ConfigError(f"{key}: unknown assignor {name!r} (expected uniform and/or range)")
        if assignor in out:
            raise ConfigError(f"{key}: {assignor} appears more than once")
        out.append(assignor)
    return tuple(out)


def _parse_rebalance_protocols(text: str) -> tuple[str, ...]:
    key = "group.coordinator.rebalance.protocols"
    protocols: list[str] = []
    for name in _parse_list(text):
        protocol = name.lower()
        if protocol not in GROUP_REBALANCE_PROTOCOLS:
            raise ConfigError(f"{key}: unknown protocol {name!r} (expected classic and/or consumer)")
        if protocol not in protocols:
            protocols.append(protocol)
    if "classic" not in protocols:  # Kafka: "Disabling the 'classic' protocol is not supported."
        raise ConfigError(f"{key}: disabling the 'classic' protocol is not supported")
    return tuple(protocols)


def _check_group_timeouts(values: Mapping[str, Any]) -> None:
    """The cross-key rules of the group configs (`values`: the parsed int keys by field)."""
    lo = values.get("group_min_session_timeout_ms", 6000)
    hi = values.get("group_max_session_timeout_ms", 1_800_000)
    if lo > hi:
        raise ConfigError(f"group.min.session.timeout.ms: {lo} must be at most group.max.session.timeout.ms ({hi})")
    heartbeat = values.get("group_consumer_heartbeat_interval_ms", 5000)
    session = values.get("group_consumer_session_timeout_ms", 45_000)
    if heartbeat >= session:
        raise ConfigError(
            f"group.consumer.heartbeat.interval.ms: {heartbeat} must be less than "
            f"group.consumer.session.timeout.ms ({session})"
        )


def _retention_ms(props: Mapping[str, str]) -> int:
    # Kafka: log.retention.ms wins over log.retention.minutes, which wins over log.retention.hours.
    for key, factor in (("log.retention.ms", 1), ("log.retention.minutes", 60_000), ("log.retention.hours", 3_600_000)):
        if key in props:
            value = _parse_int(key, props[key], minimum=-1)
            return value if value < 0 else value * factor
    return 7 * 24 * 3_600_000


def config_from_properties(props: Mapping[str, str]) -> NodeConfig:
    """Build and validate a ``NodeConfig`` from parsed properties."""
    values: dict[str, Any] = {}

    def get(key: str) -> str | None:
        raw = props.get(key)
        return None if raw is None else raw.strip()

    # process.roles
    roles_text = get("process.roles")
    if roles_text is None or not _parse_list(roles_text):
        raise ConfigError("process.roles is required (controller, broker, or broker,controller)")
    roles_list = [r.lower() for r in _parse_list(roles_text)]
    for role in roles_list:
        if role not in _ROLES:
            raise ConfigError(f"process.roles: unknown role {role!r} (expected controller and/or broker)")
    if len(set(roles_list)) != len(roles_list):
        raise ConfigError(f"process.roles: duplicate role in {roles_text!r}")
    roles = frozenset(roles_list)

    # node.id
    node_id_text = get("node.id")
    if node_id_text is None or node_id_text == "":
        raise ConfigError("node.id is required")
    node_id = _parse_int("node.id", node_id_text, minimum=0)

    # controller.quorum.voters
    voters_text = get("controller.quorum.voters")
    bootstrap_text = get("controller.quorum.bootstrap.servers")
    bootstrap_servers = parse_bootstrap_servers(bootstrap_text) if bootstrap_text else ()
    if voters_text:
        voters = parse_voters(voters_text)
    elif bootstrap_servers:
        voters = {}  # KIP-853: the voter set is in the metadata log (storage format --standalone ...)
    else:
        raise ConfigError(
            "controller.quorum.voters is required (id@host:port,...), or controller.quorum.bootstrap.servers "
            "(host:port,...) for a dynamic quorum (KIP-853)"
        )

    # listeners
    listeners_text = get("listeners")
    if listeners_text is None and get("advertised.listeners") is None:
        misspelled = misspelled_listener_keys(props, _interpreted_keys())
        if misspelled:
            raise ConfigError(
                f"listeners is not set and {', '.join(repr(k) for k in misspelled)} isn't a known config; "
                "refusing to fall back to the default listener PLAINTEXT://:9092"
            )
    listeners = parse_listeners(listeners_text) if listeners_text is not None else (Listener("PLAINTEXT", "", 9092),)
    if not listeners:
        raise ConfigError("listeners is empty")
    advertised_text = get("advertised.listeners")
    advertised = parse_listeners(advertised_text, "advertised.listeners") if advertised_text else ()
    for lst in advertised:
        if lst.port == 0:
            raise ConfigError(f"advertised.listeners: {lst} has port 0")
        if lst.host == "":
            raise ConfigError(f"advertised.listeners: {lst} has no host")

    cln_text = get("controller.listener.names")
    cln_text = cln_text if cln_text is not None else "CONTROLLER"
    controller_listener_names = tuple(n.upper() for n in _parse_list(cln_text))
    if not controller_listener_names:
        raise ConfigError("controller.listener.names must not be empty")

    map_text = get("listener.security.protocol.map")
    protocol_map = _parse_protocol_map(
        "listener.security.protocol.map",
        map_text if map_text is not None else DEFAULT_LISTENER_SECURITY_PROTOCOL_MAP,
    )
    for lst in (*listeners, *advertised):
        protocol = protocol_map.get(lst.name)
        if protocol is None:
            raise ConfigError(f"listener.security.protocol.map: no security protocol for listener name {lst.name}")
        if protocol not in SUPPORTED_SECURITY_PROTOCOLS:
            raise ConfigError(
                f"listener.security.protocol.map: listener {lst.name} uses {protocol}; pykraft supports only PLAINTEXT"
            )
    inter_broker = (get("inter.broker.listener.name") or "PLAINTEXT").upper()

    controller_names_in_listeners = [lst for lst in listeners if lst.name in controller_listener_names]
    if ROLE_CONTROLLER in roles:
        if voters and node_id not in voters:
            raise ConfigError(
                f"controller.quorum.voters: node.id {node_id} has the controller role "
                f"but is not one of the voters {sorted(voters)}"
            )
        if not controller_names_in_listeners:
            raise ConfigError(
                f"listeners: a controller needs a listener named in controller.listener.names "
                f"({','.join(controller_listener_names)}); got {','.join(str(x) for x in listeners)}"
            )
    else:
        if node_id in voters:
            raise ConfigError(
                f"controller.quorum.voters: node.id {node_id} is a voter but process.roles has no controller role"
            )
        if controller_names_in_listeners:
            raise ConfigError(
                f"listeners: {controller_names_in_listeners[0]} is a controller listener "
                "but process.roles has no controller role"
            )
    if ROLE_BROKER in roles:
        broker_listeners = [lst for lst in listeners if lst.name not in controller_listener_names]
        if not broker_listeners:
            raise ConfigError("listeners: a broker needs at least one listener that is not a controller listener")
        if inter_broker not in {lst.name for lst in broker_listeners}:
            raise ConfigError(
                f"inter.broker.listener.name: {inter_broker} is not one of the broker listeners "
                f"{','.join(lst.name for lst in broker_listeners)}"
            )

    # log dirs
    dirs_text = get("log.dirs")
    if dirs_text is None:
        dirs_text = get("log.dir")
        dirs_key = "log.dir"
    else:
        dirs_key = "log.dirs"
    log_dirs = _parse_list(dirs_text) if dirs_text is not None else ("/tmp/kafka-logs",)  # noqa: S108
    if not log_dirs:
        raise ConfigError(f"{dirs_key} is empty")
    if len(set(log_dirs)) != len(log_dirs):
        raise ConfigError(f"{dirs_key}: a directory appears more than once")
    metadata_log_dir = get("metadata.log.dir") or log_dirs[0]

    for key, (lo, hi) in _INT_KEYS.items():
        text = props.get(key)
        if text is not None:
            values[_field(key)] = _parse_int(key, text, minimum=lo, maximum=hi)
    for key in _BOOL_KEYS:
        text = props.get(key)
        if text is not None:
            values[_field(key)] = _parse_bool(key, text)

    rest_text = get("rest.listener")
    rest_listener = _validate_rest_listener(rest_text) if rest_text else None
    rack = get("broker.rack") or None
    cluster_id = get("cluster.id") or None
    replica_selector_class = get("replica.selector.class") or None

    known = _interpreted_keys()
    extra = {k: v for k, v in props.items() if k not in known}

    queued = values.get("queued_max_request_bytes", 200 * MIB)
    request_max = values.get("socket_request_max_bytes", 100 * MIB)
    if queued != -1 and queued < request_max:
        raise ConfigError(
            f"queued.max.request.bytes: {queued} must be -1 or at least socket.request.max.bytes ({request_max})"
        )
    if values.get("connections_max_idle_ms") == 0:
        raise ConfigError("connections.max.idle.ms: must be -1 (never) or > 0")
    for key in ("socket.receive.buffer.bytes", "socket.send.buffer.bytes"):
        if values.get(key.replace(".", "_")) == 0:
            raise ConfigError(f"{key}: must be -1 (the OS default) or > 0")
    _check_group_timeouts(values)
    assignors_text = props.get("group.consumer.assignors")
    if assignors_text is not None:
        values["group_consumer_assignors"] = _parse_assignors(assignors_text)
    protocols_text = props.get("group.coordinator.rebalance.protocols")
    if protocols_text is not None:
        values["group_coordinator_rebalance_protocols"] = _parse_rebalance_protocols(protocols_text)

    config = NodeConfig(
        process_roles=roles,
        node_id=node_id,
        controller_quorum_voters=voters,
        controller_quorum_bootstrap_servers=bootstrap_servers,
        listeners=listeners,
        advertised_listeners=advertised,
        controller_listener_names=controller_listener_names,
        listener_security_protocol_map=protocol_map,
        inter_broker_listener_name=inter_broker,
        log_dirs=log_dirs,
        metadata_log_dir=metadata_log_dir,
        log_retention_ms=_retention_ms(props),
        broker_rack=rack,
        rest_listener=rest_listener,
        cluster_id=cluster_id,
        replica_selector_class=replica_selector_class,
        extra=extra,
        **values,
    )
    return config


def load_config(
    path: str | Path, *, overrides: Mapping[str, str] | None = None, warn_unknown: bool = True
) -> NodeConfig:
    """Read and validate a ``.properties`` file (UTF-8). ``overrides`` win over the file's keys.

    With `warn_unknown`, logs Kafka's warning (WARNING, logger ``pykraft.config``) for each unknown key.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file {p} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config file {p}: {exc}") from None
    props = parse_properties(text)
    if overrides:
        props.update(overrides)
    try:
        config = config_from_properties(props)
    except ConfigError as exc:
        raise ConfigError(f"{p}: {exc}") from None
    for key in unknown_keys(props, _interpreted_keys()) if warn_unknown else ():
        _log.warning("%s", unknown_key_message(key, _interpreted_keys()))
    return config
