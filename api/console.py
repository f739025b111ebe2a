"""`pykraft console-producer` / `console-consumer`: kafka-console-producer.sh and
kafka-console-consumer.sh with the flags people use, over librdkafka (confluent-kafka).

console-producer reads lines from stdin, one record each (`--property parse.key=true` with
`key.separator`, default a tab, splits key and value), and waits for every acknowledgement
(`acks=all` unless `--producer-property acks=...`). console-consumer prints each record's
value (`--property print.key=true` prints `key<separator>value`), from the end or, with
`--from-beginning`, from the start of every partition, until `--max-messages` records or
`--timeout-ms` without a record.

With `--group G` the consumer is a member of group G, as kafka-console-consumer.sh's is: it
subscribes to the topic (or, with `--partition`, reads that partition) and starts where the
group's committed offsets are (`--from-beginning` only decides where a partition without one
starts); it commits the offset after each record it printed (librdkafka's auto commit, and
once more when it stops), so the next run with the same group goes on where this one stopped.
Without `--group` it reads every partition with nothing committed.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from api.tool_clients import TOOL_CLIENT_CONF


def _properties(items: list[str] | None) -> dict[str, str]:
    out = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"error: --property {item!r} is not NAME=VALUE")
        out[name.strip()] = value
    return out


def _unescape(text: str) -> str:
    return text.encode().decode("unicode_escape")


def console_producer(args: argparse.Namespace) -> int:
    from confluent_kafka import Producer

    props = _properties(args.property)
    conf: dict[str, Any] = {"bootstrap.servers": args.bootstrap_server, "acks": "all", "linger.ms": 5}
    conf.update(_properties(args.producer_property))
    parse_key = props.get("parse.key", "false").lower() == "true"
    separator = _unescape(props.get("key.separator", "\\t"))
    failures: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    producer = Producer({**TOOL_CLIENT_CONF, **conf})
    for line in sys.stdin:
        line = line.rstrip("\n")
        key: str | None = None
        if parse_key:
            if separator not in line:
                print(f"error: no key separator {separator!r} in line {line!r}", file=sys.stderr)
                continue
            key, line = line.split(separator, 1)
        while True:
            try:
                producer.produce(args.topic, value=line.encode(), key=None if key is None else key.encode(),
                                 on_delivery=on_delivery)  # fmt: skip
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    left = producer.flush(30)
    for failure in failures[:10]:
        print(f"error: {failure}", file=sys.stderr)
    return 1 if failures or left else 0


def console_consumer(args: argparse.Namespace) -> int:
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, TopicPartition

    props = _properties(args.property)
    print_key = props.get("print.key", "false").lower() == "true"
    separator = _unescape(props.get("key.separator", "\\t"))
    grouped = args.group is not None
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap_server,
            "group.id": args.group if grouped else "pykraft-console-consumer",
            # In a group: commit what was printed (an offset is stored once its record is out).
            "enable.auto.commit": grouped,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest" if args.from_beginning else "latest",
            **TOOL_CLIENT_CONF,
        }
    )
    count = 0
    try:
        metadata = consumer.list_topics(args.topic, timeout=10).topics.get(args.topic)
        if metadata is None or metadata.error is not None or not metadata.partitions:
            print(f"error: topic {args.topic} not found", file=sys.stderr)
            return 1
        if grouped and args.partition is None:
            consumer.subscribe([args.topic])
        else:
            # Without a group, from the start or the end; with one, from its committed offset.
            start = OFFSET_BEGINNING if args.from_beginning else OFFSET_END
            partitions = sorted(metadata.partitions) if args.partition is None else [args.partition]
            consumer.assign([TopicPartition(args.topic, p, -1001 if grouped else start) for p in partitions])
        last = time.monotonic()
        while args.max_messages is None or count < args.max_messages:
            msg = consumer.poll(0.2)
            if msg is None:
                if args.timeout_ms is not None and (time.monotonic() - last) * 1000 >= args.timeout_ms:
                    break
                continue
            if msg.error() is not None:
                continue
            last = time.monotonic()
            value = (msg.value() or b"").decode(errors="replace")
            if print_key:
                key = msg.key()
                print(f"{'null' if key is None else key.decode(errors='replace')}{separator}{value}", flush=True)
            else:
                print(value, flush=True)
            if grouped:
                consumer.store_offsets(msg)
            count += 1
        if grouped and count:
            _commit(consumer)
        print(f"Processed a total of {count} messages", file=sys.stderr)
        return 0
    finally:
        consumer.close()


def _commit(consumer: Any) -> None:
    """Commit the stored offsets now (nothing to commit is not an error)."""
    from confluent_kafka import KafkaError, KafkaException

    try:
        consumer.commit(asynchronous=False)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError._NO_OFFSET:
            print(f"error: committing the group's offsets failed: {exc}", file=sys.stderr)


def add_commands(commands: Any) -> None:
    p = commands.add_parser("console-producer", help="kafka-console-producer.sh: stdin lines to a topic")
    p.add_argument("--bootstrap-server", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--property", action="append", metavar="NAME=VALUE", help="parse.key, key.separator")
    p.add_argument("--producer-property", action="append", metavar="NAME=VALUE", help="a librdkafka setting")
    p.set_defaults(handler=console_producer)
    c = commands.add_parser("console-consumer", help="kafka-console-consumer.sh: print a topic's records")
    c.add_argument("--bootstrap-server", required=True)
    c.add_argument("--topic", required=True)
    c.add_argument("--from-beginning", action="store_true")
    c.add_argument("--property", action="append", metavar="NAME=VALUE", help="print.key, key.separator")
    c.add_argument("--group")
    c.add_argument("--partition", type=int)
    c.add_argument("--max-messages", type=int)
    c.add_argument("--timeout-ms", type=int)
    c.set_defaults(handler=console_consumer)
    add_log_dirs_command(commands)


def log_dirs(args: argparse.Namespace) -> int:
    """kafka-log-dirs.sh --describe: every broker's log dirs and partitions as Kafka's JSON."""
    import json

    from kafka import KafkaAdminClient

    if not args.describe:
        print("error: only --describe is supported", file=sys.stderr)
        return 2
    wanted = set(args.topic_list.split(",")) if args.topic_list else None
    admin = KafkaAdminClient(bootstrap_servers=args.bootstrap_server, client_id="pykraft-log-dirs")
    try:
        print("Querying brokers for log directories information")
        answers = admin.describe_log_dirs()
    finally:
        admin.close()
    brokers = []
    for answer in sorted(answers, key=lambda a: a["broker"]):
        dirs = []
        for d in answer["log_dirs"]:
            parts = [
                {
                    "partition": f"{t['name']}-{p['partition_index']}",
                    "size": p["partition_size"],
                    "offsetLag": p["offset_lag"],
                    "isFuture": p["is_future_key"],
                }
                for t in d["topics"]
                if wanted is None or t["name"] in wanted
                for p in t["partitions"]
            ]
            error = None if d["error_code"] == 0 else str(d["error_code"])
            dirs.append({"partitions": parts, "error": error, "logDir": d["log_dir"]})
        brokers.append({"broker": answer["broker"], "logDirs": dirs})
    print(f"Received log directory information from brokers {','.join(str(b['broker']) for b in brokers)}")
    print(json.dumps({"brokers": brokers, "version": 1}, separators=(",", ":")))
    return 0


def add_log_dirs_command(commands: Any) -> None:
    ld = commands.add_parser("log-dirs", help="kafka-log-dirs.sh: the brokers' log dirs and partition sizes")
    ld.add_argument("--bootstrap-server", required=True)
    ld.add_argument("--describe", action="store_true")
    ld.add_argument("--topic-list", help="comma-separated topics (default: all)")
    ld.set_defaults(handler=log_dirs)
