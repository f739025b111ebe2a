"""`pykraft transactions` (kafka-transactions.sh's `list` and `describe`): the transactions the
brokers coordinate, in the tool's columns.

- `--list`: ListTransactions (66) to every broker; columns TransactionalId, Coordinator,
  ProducerId, TransactionState.
- `--describe --transactional-id ID`: FindCoordinator (key type 1) then DescribeTransactions
  (65) at the coordinator; columns CoordinatorId, TransactionalId, ProducerId, ProducerEpoch,
  TransactionState, TransactionTimeoutMs, CurrentTransactionStartTimeMs,
  TransactionDurationMs, TopicPartitions (None where no transaction is open).

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

from broker.kafka.wire import Reader

__all__ = ["add_commands", "pretty_table", "transactions"]

DEFAULT_TIMEOUT_MS: Final = 5000
_FIND_COORDINATOR, _DESCRIBE, _LIST = 10, 65, 66
_TRANSACTION_KEY: Final = 1
_LIST_HEADERS: Final = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
_DESCRIBE_HEADERS: Final = (
    "CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState", "TransactionTimeoutMs",
    "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions",
)  # fmt: skip


class TransactionsError(Exception):
    pass


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


def _brokers(bootstrap: str, timeout_s: float) -> dict[int, tuple[str, int]]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "pykraft-transactions"})
    md = admin.list_topics(timeout=timeout_s)
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


def transactions(args: argparse.Namespace) -> int:
    timeout_s = args.timeout / 1000
    try:
        if args.list:
            sys.stdout.write(list_transactions(args.bootstrap_server, timeout_s))
        else:
            if not args.transactional_id:
                print("error: --describe needs --transactional-id", file=sys.stderr)
                return 2
            sys.stdout.write(describe_transaction(args.bootstrap_server, args.transactional_id, timeout_s))
    except (TransactionsError, OSError) as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    return 0


def add_commands(commands: Any) -> None:
    p = commands.add_parser("transactions", help="kafka-transactions.sh: list and describe transactions")
    p.add_argument("--bootstrap-server", required=True, help="host:port[,host:port...] of brokers")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="list the transactions of every broker")
    action.add_argument("--describe", action="store_true", help="describe one transactional id")
    p.add_argument("--transactional-id", metavar="ID", help="describe: the transactional id")
    p.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_MS, metavar="MS",
                   help="how long each request may take (default 5000)")  # fmt: skip
    p.set_defaults(handler=transactions)
