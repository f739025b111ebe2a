"""`pykraft transactions` (kafka-transactions.sh's `list`, `describe`, `describe-producers` and
`find-hanging`): the transactions the brokers coordinate and the producers the partition
leaders keep, in the tool's columns.

- `--list`: ListTransactions (66) to every broker; columns TransactionalId, Coordinator,
  ProducerId, TransactionState.
- `--describe --transactional-id ID`: FindCoordinator (key type 1) then DescribeTransactions
  (65) at the coordinator; columns CoordinatorId, TransactionalId, ProducerId, ProducerEpoch,
  TransactionState, TransactionTimeoutMs, CurrentTransactionStartTimeMs,
  TransactionDurationMs, TopicPartitions (None where no transaction is open).
- `describe-producers --topic T --partition P [--broker-id B]`: DescribeProducers (61) to
  the partition's leader (or broker B); columns ProducerId, ProducerEpoch,
  LatestCoordinatorEpoch, LastSequence, LastTimestamp, CurrentTransactionStartOffset (None:
  no transaction open).
- `find-hanging --broker-id B | --topic T [--partition P] [--max-transaction-timeout MIN]`:
  the transactions open in the partitions (of B's replicas, or of T) for longer than the
  largest transaction timeout (minutes, 15 by default: transaction.max.timeout.ms) whose
  coordinator does not know them: no transactional id lists the producer id
  (ListTransactions), the id is not found (DescribeTransactions), or its transaction does not
  hold the partition. Columns Topic, Partition, ProducerId, ProducerEpoch, CoordinatorEpoch,
  StartOffset, LastTimestamp, Duration(min). A broker here describes the producers of the
  partitions it leads only (others answer NOT_LEADER_OR_FOLLOWER), so the search asks each
  partition's leader.

Tables are Kafka's `ToolsUtils.prettyPrintTable`: every column left-aligned to its widest
cell, columns separated by a tab. The requests are written and read with kio's schemas over
a plain socket (the brokers are found with librdkafka's metadata).
"""

from __future__ import annotations

import argparse
import io
import socket
import struct
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from api.tool_clients import TOOL_CLIENT_CONF
from broker.kafka.wire import Reader

__all__ = ["add_commands", "pretty_table", "transactions"]

DEFAULT_TIMEOUT_MS: Final = 5000
_FIND_COORDINATOR, _DESCRIBE_PRODUCERS, _DESCRIBE, _LIST = 10, 61, 65, 66
MAX_TRANSACTION_TIMEOUT_MIN: Final = 15  # transaction.max.timeout.ms (900000), find-hanging's default
_NO_TXN: Final = -1
_TRANSACTION_KEY: Final = 1
_LIST_HEADERS: Final = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
_DESCRIBE_HEADERS: Final = (
    "CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState", "TransactionTimeoutMs",
    "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions",
)  # fmt: skip
_PRODUCERS_HEADERS: Final = (
    "ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
    "CurrentTransactionStartOffset",
)  # fmt: skip
_HANGING_HEADERS: Final = (
    "Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset", "LastTimestamp",
    "Duration(min)",
)  # fmt: skip


class TransactionsError(Exception):
    pass


class UsageError(Exception):
    """Arguments that do not fit the command (exit status 2)."""


def pretty_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(r[i])) for r in (headers, *rows)) for i in range(len(headers))]
    lines = ["\t".join(f"{str(c):<{w}}" for c, w in zip(row, widths, strict=True)) for row in (headers, *rows)]
    return "".join(line + "\n" for line in lines)


def _call(
    address: tuple[str, int], api_key: int, version: int, timeout_s: float, *, raw: bool = False, **fields: Any
) -> Any:
    """One request (kio) and its answer (kio; `raw`: the response frame) over a fresh connection."""
    req_cls: Any = load_request_schema(api_key, version)
    header_cls: Any = req_cls.__header_schema__
    buf = io.BytesIO()
    entity_writer(header_cls)(buf, header_cls(request_api_key=api_key, request_api_version=version,
                                              correlation_id=1, client_id="pykraft-transactions"))  # fmt: skip
    entity_writer(req_cls)(buf, req_cls(**fields))
    body = buf.getvalue()
    with socket.create_connection(address, timeout=timeout_s) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        (size,) = struct.unpack(">i", _read(s, 4))
        frame = _read(s, size)
    if raw:
        return frame
    resp_cls = load_response_schema(api_key, version)
    _, pos = entity_reader(resp_cls.__header_schema__)(frame, 0)
    answer, _ = entity_reader(resp_cls)(frame, pos)
    return answer


def _read(s: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise TransactionsError("the broker closed the connection")
        data += chunk
    return data


@dataclass(frozen=True, slots=True)
class _Description:
    error_code: int
    transactional_id: str
    state: str
    timeout_ms: int
    start_ms: int  # -1: no transaction open
    producer_id: int
    producer_epoch: int
    topics: tuple[tuple[str, tuple[int, ...]], ...]


def _describe_states(frame: bytes) -> list[_Description]:
    """DescribeTransactions v0's answer (flexible; read here because kio's reader refuses the
    -1 start time Kafka answers for a transactional id with no open transaction)."""
    r = Reader(memoryview(frame))
    r.i32()  # correlation id
    r.skip_tags()
    r.i32()  # throttle time

    def topic() -> tuple[str, tuple[int, ...]]:
        name = r.nonnull_string(True)
        partitions = tuple(r.array(True, r.i32))
        r.skip_tags()
        return name, partitions

    def state() -> _Description:
        d = _Description(r.i16(), r.nonnull_string(True), r.nonnull_string(True), r.i32(), r.i64(), r.i64(),
                         r.i16(), tuple(r.array(True, topic)))  # fmt: skip
        r.skip_tags()
        return d

    return r.array(True, state)


def _metadata(bootstrap: str, timeout_s: float, topic: str | None = None) -> Any:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "pykraft-transactions", **TOOL_CLIENT_CONF})
    return admin.list_topics(topic, timeout=timeout_s)


def _brokers(bootstrap: str, timeout_s: float) -> dict[int, tuple[str, int]]:
    md = _metadata(bootstrap, timeout_s)
    return {int(b.id): (str(b.host), int(b.port)) for b in md.brokers.values()}


def _error_name(code: int) -> str:
    from quorum.kafka_errors import ErrorCode

    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


def list_transactions(bootstrap: str, timeout_s: float) -> str:
    rows: list[tuple[str, str, str, str]] = []
    for broker, address in sorted(_brokers(bootstrap, timeout_s).items()):
        answer = _call(address, _LIST, 0, timeout_s, state_filters=(), producer_id_filters=())
        if int(answer.error_code) != 0:
            raise TransactionsError(f"broker {broker} answered ListTransactions with {_error_name(answer.error_code)}")
        rows += [(t.transactional_id, str(broker), str(t.producer_id), t.transaction_state)
                 for t in answer.transaction_states]  # fmt: skip
    return pretty_table(_LIST_HEADERS, sorted(rows))


def describe_transaction(bootstrap: str, transactional_id: str, timeout_s: float) -> str:
    brokers = _brokers(bootstrap, timeout_s)
    any_broker = next(iter(sorted(brokers.items())))[1]
    found = _call(any_broker, _FIND_COORDINATOR, 3, timeout_s, key=transactional_id, key_type=_TRANSACTION_KEY)
    if int(found.error_code) != 0:
        raise TransactionsError(f"no coordinator for `{transactional_id}`: {_error_name(found.error_code)}")
    frame = _call((found.host, found.port), _DESCRIBE, 0, timeout_s, raw=True,
                  transactional_ids=(transactional_id,))  # fmt: skip
    (d,) = _describe_states(frame)
    if d.error_code != 0:
        raise TransactionsError(
            f"Failed to describe transaction state of transactional-id `{transactional_id}`: "
            f"{_error_name(d.error_code)}"
        )
    started = d.start_ms >= 0
    row = (
        str(found.node_id), d.transactional_id, str(d.producer_id), str(d.producer_epoch), d.state,
        str(d.timeout_ms), str(d.start_ms) if started else "None",
        str(int(time.time() * 1000) - d.start_ms) if started else "None",
        ",".join(f"{t}-{p}" for t, ps in d.topics for p in ps),
    )  # fmt: skip
    return pretty_table(_DESCRIBE_HEADERS, [row])


@dataclass(frozen=True, slots=True)
class ProducerState:
    """One active producer of a partition, as DescribeProducers answers it."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    last_sequence: int
    last_timestamp: int  # ms
    txn_start_offset: int  # -1: no transaction open


def _describe_producers(
    address: tuple[str, int], partitions: Sequence[tuple[str, int]], timeout_s: float
) -> dict[tuple[str, int], tuple[int, list[ProducerState]]]:
    """DescribeProducers v0 at `address`: per partition, its error code and its producers."""
    req_cls: Any = load_request_schema(_DESCRIBE_PRODUCERS, 0)
    topic_cls = sys.modules[req_cls.__module__].TopicRequest
    by_topic: dict[str, list[int]] = {}
    for t, p in partitions:
        by_topic.setdefault(t, []).append(p)
    topics = tuple(topic_cls(name=t, partition_indexes=tuple(ps)) for t, ps in by_topic.items())
    answer = _call(address, _DESCRIBE_PRODUCERS, 0, timeout_s, topics=topics)
    out: dict[tuple[str, int], tuple[int, list[ProducerState]]] = {}
    for t in answer.topics:
        for p in t.partitions:
            states = [
                ProducerState(t.name, int(p.partition_index), int(s.producer_id), int(s.producer_epoch),
                              int(s.coordinator_epoch), int(s.last_sequence), int(s.last_timestamp),
                              int(s.current_txn_start_offset))
                for s in p.active_producers
            ]  # fmt: skip
            out[(t.name, int(p.partition_index))] = (int(p.error_code), states)
    return out


def _leaders(md: Any) -> dict[tuple[str, int], int]:
    return {(str(t.topic), int(p.id)): int(p.leader) for t in md.topics.values() for p in t.partitions.values()}


def describe_producers(bootstrap: str, topic: str, partition: int, broker_id: int | None, timeout_s: float) -> str:
    md = _metadata(bootstrap, timeout_s, topic)
    brokers = {int(b.id): (str(b.host), int(b.port)) for b in md.brokers.values()}
    where = f"broker {broker_id}" if broker_id is not None else "leader"
    target = broker_id if broker_id is not None else _leaders(md).get((topic, partition), -1)
    if target not in brokers:
        raise TransactionsError(f"Failed to describe producers for partition {topic}-{partition} on {where}: "
                                f"{'no such broker' if broker_id is not None else 'no leader known'}")  # fmt: skip
    code, states = _describe_producers(brokers[target], [(topic, partition)], timeout_s)[(topic, partition)]
    if code != 0:
        raise TransactionsError(
            f"Failed to describe producers for partition {topic}-{partition} on {where}: {_error_name(code)}"
        )
    rows = [
        (str(s.producer_id), str(s.producer_epoch), str(s.coordinator_epoch), str(s.last_sequence),
         str(s.last_timestamp), str(s.txn_start_offset) if s.txn_start_offset != _NO_TXN else "None")
        for s in states
    ]  # fmt: skip
    return pretty_table(_PRODUCERS_HEADERS, rows)


def _transactional_ids(brokers: dict[int, tuple[str, int]], producer_ids: set[int], timeout_s: float) -> dict[int, str]:
    """Producer id -> transactional id, from every broker's ListTransactions (filtered by id)."""
    ids: dict[int, str] = {}
    for broker, address in sorted(brokers.items()):
        answer = _call(address, _LIST, 0, timeout_s, state_filters=(), producer_id_filters=tuple(sorted(producer_ids)))
        if int(answer.error_code) != 0:
            raise TransactionsError(f"broker {broker} answered ListTransactions with {_error_name(answer.error_code)}")
        ids.update({int(t.producer_id): str(t.transactional_id) for t in answer.transaction_states})
    return ids


def _coordinator_view(
    brokers: dict[int, tuple[str, int]], transactional_id: str, timeout_s: float
) -> set[tuple[str, int]] | None:
    """The partitions of `transactional_id`'s transaction as its coordinator describes them;
    None when the coordinator does not know the id."""
    any_broker = next(iter(sorted(brokers.items())))[1]
    found = _call(any_broker, _FIND_COORDINATOR, 3, timeout_s, key=transactional_id, key_type=_TRANSACTION_KEY)
    if int(found.error_code) != 0:
        raise TransactionsError(f"no coordinator for `{transactional_id}`: {_error_name(found.error_code)}")
    frame = _call((found.host, found.port), _DESCRIBE, 0, timeout_s, raw=True, transactional_ids=(transactional_id,))
    (d,) = _describe_states(frame)
    if d.error_code == _error_code("TRANSACTIONAL_ID_NOT_FOUND"):
        return None
    if d.error_code != 0:
        raise TransactionsError(f"Failed to describe transaction `{transactional_id}`: {_error_name(d.error_code)}")
    return {(t, p) for t, ps in d.topics for p in ps}


def _error_code(name: str) -> int:
    from quorum.kafka_errors import ErrorCode

    return int(ErrorCode[name])


def find_hanging(
    bootstrap: str, broker_id: int | None, topic: str | None, partition: int | None, max_timeout_min: int,
    timeout_s: float, now_ms: int | None = None,
) -> str:  # fmt: skip
    """kafka-transactions.sh find-hanging (see the module docstring)."""
    md = _metadata(bootstrap, timeout_s, topic)
    brokers = {int(b.id): (str(b.host), int(b.port)) for b in md.brokers.values()}
    wanted: dict[int, list[tuple[str, int]]] = {}  # leader -> partitions to ask it about
    for t in md.topics.values():
        for p in t.partitions.values():
            tp = (str(t.topic), int(p.id))
            if (topic is not None and tp[0] != topic) or (partition is not None and tp[1] != partition):
                continue
            if broker_id is not None and broker_id not in [int(r) for r in p.replicas]:
                continue
            wanted.setdefault(int(p.leader), []).append(tp)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    max_timeout_ms = max_timeout_min * 60_000
    candidates: list[ProducerState] = []
    for leader, partitions in sorted(wanted.items()):
        if leader not in brokers:
            raise TransactionsError(f"no leader known for {len(partitions)} partitions (broker {leader})")
        for tp, (code, states) in sorted(_describe_producers(brokers[leader], partitions, timeout_s).items()):
            if code != 0:
                raise TransactionsError(f"Failed to describe producers for partition {tp[0]}-{tp[1]}: "
                                        f"{_error_name(code)}")  # fmt: skip
            candidates += [s for s in states if s.txn_start_offset != _NO_TXN and
                           now - s.last_timestamp >= max_timeout_ms]  # fmt: skip
    hanging: list[ProducerState] = []
    if candidates:
        ids = _transactional_ids(brokers, {s.producer_id for s in candidates}, timeout_s)
        views = {tid: _coordinator_view(brokers, tid, timeout_s) for tid in set(ids.values())}
        for s in candidates:
            tid = ids.get(s.producer_id)
            view = None if tid is None else views[tid]
            if view is None or (s.topic, s.partition) not in view:
                hanging.append(s)
    rows = [
        (s.topic, str(s.partition), str(s.producer_id), str(s.producer_epoch), str(s.coordinator_epoch),
         str(s.txn_start_offset), str(s.last_timestamp), str((now - s.last_timestamp) // 60_000))
        for s in hanging
    ]  # fmt: skip
    return pretty_table(_HANGING_HEADERS, rows)


def _subcommand(args: argparse.Namespace) -> str:
    """`describe-producers` or `find-hanging` (after validating its arguments); UsageError."""
    if args.list or args.describe:
        raise UsageError(f"{args.command} takes none of --list, --describe")
    if args.command == "describe-producers":
        if args.topic is None or args.partition is None:
            raise UsageError("describe-producers needs --topic and --partition")
        return describe_producers(args.bootstrap_server, args.topic, args.partition, args.broker_id,
                                  args.timeout / 1000)  # fmt: skip
    if args.topic is None and args.broker_id is None:
        raise UsageError("The `find-hanging` command requires either --topic or --broker-id to limit the scope of "
                         "the search")  # fmt: skip
    if args.partition is not None and args.topic is None:
        raise UsageError("The --partition argument requires --topic to be provided")
    return find_hanging(args.bootstrap_server, args.broker_id, args.topic, args.partition,
                        args.max_transaction_timeout, args.timeout / 1000)  # fmt: skip


def transactions(args: argparse.Namespace) -> int:
    timeout_s = args.timeout / 1000
    try:
        if args.command is not None:
            sys.stdout.write(_subcommand(args))
        elif not (args.list or args.describe):
            print("error: one of --list, --describe, describe-producers, find-hanging is required", file=sys.stderr)
            return 2
        elif args.list:
            sys.stdout.write(list_transactions(args.bootstrap_server, timeout_s))
        else:
            if not args.transactional_id:
                print("error: --describe needs --transactional-id", file=sys.stderr)
                return 2
            sys.stdout.write(describe_transaction(args.bootstrap_server, args.transactional_id, timeout_s))
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (TransactionsError, OSError) as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    return 0


def add_commands(commands: Any) -> None:
    p = commands.add_parser(
        "transactions", help="kafka-transactions.sh: list and describe transactions, describe producers, find hanging"
    )
    p.add_argument(
        "command",
        nargs="?",
        choices=("describe-producers", "find-hanging"),
        help="describe-producers: a partition's active producers; find-hanging: hanging transactions",
    )
    p.add_argument("--bootstrap-server", required=True, help="host:port[,host:port...] of brokers")
    action = p.add_mutually_exclusive_group()
    action.add_argument("--list", action="store_true", help="list the transactions of every broker")
    action.add_argument("--describe", action="store_true", help="describe one transactional id")
    p.add_argument("--transactional-id", metavar="ID", help="describe: the transactional id")
    p.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_MS, metavar="MS",
                   help="how long each request may take (default 5000)")  # fmt: skip
    p.add_argument("--topic", help="describe-producers, find-hanging: the topic")
    p.add_argument("--partition", type=int, help="describe-producers, find-hanging: the partition")
    p.add_argument(
        "--broker-id",
        type=int,
        metavar="B",
        help="describe-producers: ask this replica; find-hanging: the partitions with a replica on B",
    )
    p.add_argument(
        "--max-transaction-timeout",
        type=int,
        default=MAX_TRANSACTION_TIMEOUT_MIN,
        metavar="MIN",
        help="find-hanging: the largest transaction timeout, minutes (default 15)",
    )
    p.set_defaults(handler=transactions)
