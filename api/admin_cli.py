"""`pykraft topics ...` and `pykraft brokers list`: the REST API from the shell.

The commands and their output follow kafka-topics.sh where it has an
equivalent (`--describe` prints its `Topic: ... Partition: ... Leader: ...`
lines). They talk to any node's REST listener (`--rest-url`, default
$PYKRAFT_REST_URL or http://127.0.0.1:18081).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from broker.log.dump import RecordParser

DEFAULT_REST_URL = "http://127.0.0.1:18081"


class AdminCliError(Exception):
    """A failed admin command; `topic_command` errors print as kafka-topics.sh prints them."""

    def __init__(self, message: str, *, topic_command: bool = False) -> None:
        super().__init__(message)
        self.topic_command = topic_command


class RestClient:
    def __init__(self, base_url: str, timeout_s: float = 60.0) -> None:
        self.base = base_url.rstrip("/")
        self.http = httpx.Client(timeout=timeout_s)
        self._cluster: str | None = None

    def _check(self, response: httpx.Response) -> Any:
        if response.status_code >= 400:
            try:
                body = response.json()
                message = body.get("message") or body
                code = body.get("error_code", response.status_code)
            except ValueError:
                message, code = response.text, response.status_code
            raise AdminCliError(f"{message} (error {code})")
        return response.json() if response.content else None

    def cluster_id(self) -> str:
        if self._cluster is None:
            data = self._check(self.http.get(f"{self.base}/v3/clusters"))
            clusters = data.get("data", [])
            if not clusters:
                raise AdminCliError("the node reports no cluster")
            self._cluster = str(clusters[0]["cluster_id"])
        return self._cluster

    def url(self, path: str) -> str:
        return f"{self.base}/v3/clusters/{self.cluster_id()}{path}"

    def get(self, path: str) -> Any:
        return self._check(self.http.get(self.url(path)))

    def post(self, path: str, body: dict[str, Any]) -> Any:
        return self._check(self.http.post(self.url(path), json=body))

    def patch(self, path: str, body: dict[str, Any]) -> Any:
        return self._check(self.http.patch(self.url(path), json=body))

    def delete(self, path: str) -> Any:
        return self._check(self.http.delete(self.url(path)))


def _configs(items: list[str] | None) -> list[dict[str, str]]:
    out = []
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise AdminCliError(f"bad --config {item!r}: expected name=value")
        out.append({"name": key, "value": value})
    return out


def _assignment(text: str) -> list[dict[str, Any]]:
    """kafka-topics.sh --replica-assignment: partitions by ',' and brokers by ':'."""
    out = []
    for partition, replicas in enumerate(text.split(",")):
        try:
            ids = [int(x) for x in replicas.split(":")]
        except ValueError:
            raise AdminCliError(f"bad --replica-assignment {text!r}") from None
        out.append({"partition_id": partition, "broker_ids": ids})
    return out


def _missing_topic(exc: AdminCliError) -> bool:
    return "(error 40403)" in str(exc) or "(error 404)" in str(exc)


def _ensure_topic(client: RestClient, name: str, if_exists: bool) -> bool:
    """kafka-topics.sh's check before --alter, --delete and --describe of one topic: False (and nothing
    printed) for a missing topic with --if-exists, else a missing topic is an error in Kafka's words."""
    try:
        client.get(f"/topics/{name}")
    except AdminCliError as exc:
        if not _missing_topic(exc):
            raise
        if if_exists:
            return False
        raise AdminCliError(f"Topic '{name}' does not exist as expected", topic_command=True) from None
    return True


def _exists_as_requested(client: RestClient, name: str, body: dict[str, Any]) -> bool:
    """Does topic `name` exist with what the create `body` asked for (partitions, replication
    factor or assignment, configs)? The REST twin of quorum.controller.create_outcome."""
    topic = client.get(f"/topics/{name}")
    parts = {p["partition_id"]: p for p in client.get(f"/topics/{name}/partitions")["data"]}
    assignment = body.get("replicas_assignments")
    if assignment is not None:
        for item in assignment:
            replicas = client.get(f"/topics/{name}/partitions/{item['partition_id']}/replicas")["data"]
            if sorted(r["broker_id"] for r in replicas) != sorted(item["broker_ids"]):
                return False
        if len(parts) != len(assignment):
            return False
    else:
        if "partitions_count" in body and topic["partitions_count"] != body["partitions_count"]:
            return False
        if "replication_factor" in body and topic["replication_factor"] != body["replication_factor"]:
            return False
    if body.get("configs"):
        actual = {c["name"]: c["value"] for c in client.get(f"/topics/{name}/configs")["data"]}
        if any(actual.get(c["name"]) != c["value"] for c in body["configs"]):
            return False
    return True


def topics(args: argparse.Namespace) -> int:
    client = RestClient(args.rest_url)
    cmd = args.topics_command
    if cmd in ("alter", "delete") or (cmd == "describe" and args.topic):
        if not _ensure_topic(client, args.topic, args.if_exists):
            return 0
    if cmd == "list":
        data = client.get("/topics")["data"]
        for t in sorted(data, key=lambda t: t["topic_name"]):
            print(t["topic_name"])
        return 0
    if cmd == "create":
        body: dict[str, Any] = {"topic_name": args.topic, "configs": _configs(args.config)}
        if args.replica_assignment:
            body["replicas_assignments"] = _assignment(args.replica_assignment)
        else:
            if args.partitions is not None:
                body["partitions_count"] = args.partitions
            if args.replication_factor is not None:
                body["replication_factor"] = args.replication_factor
        if args.validate_only:
            body["validate_only"] = True
        resent = False
        try:
            try:
                client.post("/topics", body)
            except (httpx.ConnectError, httpx.ConnectTimeout):
                raise
            except httpx.TransportError as exc:
                # The request may have been delivered (and the topic created) before the
                # connection broke: send it again and judge an "already exists" below.
                print(f"connection broken during the create ({exc!r}); resending", file=sys.stderr)
                resent = True
                client.post("/topics", body)
        except AdminCliError as exc:
            if "already exists" not in str(exc):
                raise
            if resent and not args.validate_only and _exists_as_requested(client, args.topic, body):
                print(
                    f"Created topic {args.topic}. (The first attempt's connection broke; the topic now exists "
                    "exactly as requested, so that attempt created it.)"
                )
                return 0
            if args.if_not_exists:
                return 0
            raise
        print(f"Created topic {args.topic}." if not args.validate_only else f"Topic {args.topic} is valid.")
        return 0
    if cmd == "delete":
        client.delete(f"/topics/{args.topic}")
        print(f"Deleted topic {args.topic}.")
        return 0
    if cmd == "alter":
        if args.partitions is not None:
            client.patch(f"/topics/{args.topic}", {"partitions_count": args.partitions})
        ops = [{"name": c["name"], "value": c["value"]} for c in _configs(args.config)]
        ops += [{"name": name, "operation": "DELETE"} for name in args.delete_config or []]
        if ops:
            client.post(f"/topics/{args.topic}/configs:alter", {"data": ops})
        print(f"Altered topic {args.topic}.")
        return 0
    if cmd == "describe":
        names = [args.topic] if args.topic else sorted(t["topic_name"] for t in client.get("/topics")["data"])
        only = (
            "under-replicated"
            if getattr(args, "under_replicated_partitions", False)
            else "under-min-isr"
            if getattr(args, "under_min_isr_partitions", False)
            else "unavailable"
            if getattr(args, "unavailable_partitions", False)
            else None
        )
        for name in names:
            describe_topic(client, name, as_json=args.json, only=only)
        return 0
    raise AdminCliError(f"unknown topics command {cmd}")


def _non_default(config: dict[str, Any]) -> bool:
    """What kafka-topics.sh --describe lists on its Configs: line: every config not at its built-in
    default (a topic override, or a broker's dynamic or static value that differs from the default)."""
    source = config.get("source")
    if source in (None, "DEFAULT_CONFIG", "UNKNOWN"):
        return source == "UNKNOWN" and config.get("value") is not None
    if source == "DYNAMIC_TOPIC_CONFIG":
        return True
    builtin = [s["value"] for s in config.get("synonyms") or [] if s.get("source") == "DEFAULT_CONFIG"]
    return not builtin or builtin[0] != config.get("value")


def describe_topic(client: RestClient, name: str, *, as_json: bool, only: str | None = None) -> None:
    """kafka-topics.sh --describe: the topic line and one line per partition, from live state.
    `only` (--under-replicated-partitions, --under-min-isr-partitions,
    --unavailable-partitions) prints just the partition lines that match, as Kafka does."""
    topic = client.get(f"/topics/{name}")
    partitions = client.get(f"/topics/{name}/partitions")["data"]
    configs = client.get(f"/topics/{name}/configs")["data"]
    explicit = [c for c in configs if _non_default(c)]
    if as_json:
        print(json.dumps({"topic": topic, "partitions": partitions, "configs": explicit}))
        return
    min_isr = next((int(c["value"]) for c in configs if c["name"] == "min.insync.replicas" and c.get("value")), 1)
    if only is None:
        config_text = ",".join(f"{c['name']}={c['value']}" for c in explicit)
        print(
            f"Topic: {name}\tTopicId: {topic.get('topic_id', '')}\tPartitionCount: {topic.get('partitions_count')}\t"
            f"ReplicationFactor: {topic.get('replication_factor')}\tConfigs: {config_text}"
        )
    for p in sorted(partitions, key=lambda p: p["partition_id"]):
        replicas = client.get(f"/topics/{name}/partitions/{p['partition_id']}/replicas")["data"]
        leader = p.get("leader_id", next((r["broker_id"] for r in replicas if r.get("is_leader")), -1))
        reps = ",".join(str(r["broker_id"]) for r in replicas)
        isr = p.get("isr") or [r["broker_id"] for r in replicas if r.get("is_in_sync")]
        if only == "under-replicated" and len(isr) >= len(replicas):
            continue
        if only == "under-min-isr" and len(isr) >= min_isr:
            continue
        if only == "unavailable" and leader not in (None, -1):
            continue
        print(
            f"\tTopic: {name}\tPartition: {p['partition_id']}\tLeader: {leader if leader is not None else -1}"
            f"\tReplicas: {reps}\tIsr: {','.join(str(x) for x in isr)}"
        )


def brokers(args: argparse.Namespace) -> int:
    client = RestClient(args.rest_url)
    data = client.get("/brokers")["data"]
    if args.json:
        print(json.dumps(data))
        return 0
    print(f"{'ID':<6}{'HOST':<18}{'PORT':<7}{'RACK':<10}STATE")
    for b in sorted(data, key=lambda b: b["broker_id"]):
        state = "fenced" if b.get("fenced") else "shutting-down" if b.get("in_controlled_shutdown") else "active"
        print(f"{b['broker_id']:<6}{b.get('host') or '':<18}{b.get('port') or '':<7}{b.get('rack') or '':<10}{state}")
    return 0


def _offsets_decoder() -> RecordParser:
    from broker.group.offsets_dump import parse_offsets_record

    return parse_offsets_record


def log_dump(args: argparse.Namespace) -> int:
    from pathlib import Path

    from broker.log.dump import dump_partition_file, is_partition_file
    from quorum.metadata.dump import dump_file

    paths = [Path(p) for p in (args.files or []) + ([args.path] if args.path else [])]
    if not paths:
        raise AdminCliError("give a file to dump (PATH or --files)")
    for path in paths:
        if not path.is_file():
            raise AdminCliError(f"{path} does not exist or is not a file")
        if is_partition_file(path):
            lines = dump_partition_file(
                path,
                deep_iteration=args.deep_iteration,
                print_data_log=args.print_data_log,
                verify_index_only=args.verify_index_only,
                parser=_offsets_decoder() if args.offsets_decoder else None,
            )
        else:
            lines = dump_file(path)
        for line in lines:
            print(line)
    return 0


def add_commands(commands: Any, non_negative: Any) -> None:
    """Add `topics`, `brokers` and `log` to the top-level parser's subcommands."""
    rest_default = os.environ.get("PYKRAFT_REST_URL", DEFAULT_REST_URL)
    t = commands.add_parser("topics", help="create, list, describe, alter and delete topics (over REST)")
    t_cmds = t.add_subparsers(dest="topics_command", metavar="SUBCOMMAND", required=True)
    for name in ("create", "list", "describe", "alter", "delete"):
        sub = t_cmds.add_parser(name, help=f"{name} topics")
        sub.add_argument("--rest-url", default=rest_default, help=f"a node's REST URL (default {rest_default})")
        if name in ("create", "alter", "delete"):
            sub.add_argument("--topic", required=True)
        if name == "describe":
            sub.add_argument("--topic")
            sub.add_argument("--json", action="store_true")
            only = sub.add_mutually_exclusive_group()
            only.add_argument("--under-replicated-partitions", action="store_true", help="ISR smaller than replicas")
            only.add_argument("--under-min-isr-partitions", action="store_true", help="ISR below min.insync.replicas")
            only.add_argument("--unavailable-partitions", action="store_true", help="partitions without a leader")
        if name in ("alter", "delete", "describe"):
            sub.add_argument("--if-exists", action="store_true", help="do nothing if the topic does not exist")
        if name in ("create", "alter"):
            sub.add_argument("--partitions", type=non_negative)
            sub.add_argument("--config", action="append", metavar="NAME=VALUE")
        if name == "create":
            sub.add_argument("--replication-factor", type=non_negative)
            sub.add_argument("--replica-assignment", metavar="B:B,B:B", help="as kafka-topics.sh")
            sub.add_argument("--if-not-exists", action="store_true")
            sub.add_argument("--validate-only", action="store_true")
        if name == "alter":
            sub.add_argument("--delete-config", action="append", metavar="NAME")
        sub.set_defaults(handler=_guard(topics))
    b = commands.add_parser("brokers", help="list brokers (over REST)")
    b_cmds = b.add_subparsers(dest="brokers_command", metavar="SUBCOMMAND", required=True)
    bl = b_cmds.add_parser("list", help="list registered brokers")
    bl.add_argument("--rest-url", default=rest_default)
    bl.add_argument("--json", action="store_true")
    bl.set_defaults(handler=_guard(brokers))
    lg = commands.add_parser("log", help="inspect log files (kafka-dump-log.sh)")
    lg_cmds = lg.add_subparsers(dest="log_command", metavar="SUBCOMMAND", required=True)
    dump = lg_cmds.add_parser(
        "dump", help="print a log segment or index (partition or metadata log), snapshot or quorum-state, decoded"
    )
    dump.add_argument("path", nargs="?", help="a .log segment, .index/.timeindex, .checkpoint snapshot or quorum-state")
    dump.add_argument("--files", action="append", help="as kafka-dump-log.sh: the file(s) to dump")
    dump.add_argument("--print-data-log", action="store_true", help="print the records' keys and payloads")
    dump.add_argument("--deep-iteration", action="store_true", help="print every record, not only batches")
    dump.add_argument("--verify-index-only", action="store_true", help="check an index against its segment")
    dump.add_argument(
        "--offsets-decoder",
        action="store_true",
        help="decode the records of a __consumer_offsets segment (group metadata and committed offsets)",
    )
    dump.set_defaults(handler=_guard(log_dump))


def _guard(func: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        try:
            result: int = func(args)
        except AdminCliError as exc:
            if exc.topic_command:
                print(f"Error while executing topic command : {exc}", file=sys.stderr)
            else:
                print(f"error: {exc}", file=sys.stderr)
            return 1
        except httpx.HTTPError as exc:
            print(
                f"error: {exc} (is a node serving REST at {args.rest_url}? set --rest-url or PYKRAFT_REST_URL)",
                file=sys.stderr,
            )
            return 1
        return result

    return run
