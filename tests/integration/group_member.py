"""One consumer-group member in its own process, for the group tests (so that a test can
kill it with SIGKILL, or stop it with SIGTERM for a clean LeaveGroup).

    python group_member.py --client kafka-python|confluent --bootstrap B --group G --topic T
        [--instance ID] [--protocol classic|consumer] [--session-ms N]

It prints one JSON object per line on stdout, flushed at once:
- {"event": "assigned", "partitions": [..]} whenever its assignment changes;
- {"event": "record", "p": P, "o": O, "v": "..."} for each record it consumed;
- {"event": "committed", "p": P, "o": O} once a synchronous commit of offset O (the next
  record to read) on partition P succeeded;
- {"event": "commit_failed", "error": "..."} when a commit was refused.
On stderr: the client's own log of its group protocol (kafka-python's coordinator at DEBUG,
librdkafka's `cgrp` debug contexts), which a failed test prints for the members that stalled.
Commit policy: after each record, a synchronous commit of the offset after it. So a record
is read again by a later member only if its commit did not succeed.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import time
from typing import Any


def emit(**event: Any) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def run_kafka_python(args: argparse.Namespace, stop: list[bool]) -> None:
    from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition
    from kafka.errors import KafkaError

    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("kafka.coordinator").setLevel(logging.DEBUG)

    consumer = KafkaConsumer(
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        group_instance_id=args.instance,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=args.session_ms,
        heartbeat_interval_ms=min(1000, args.session_ms // 3),
        max_poll_interval_ms=60_000,
        client_id=args.client_id,
    )
    consumer.subscribe([args.topic])
    last: list[int] = []
    try:
        while not stop[0]:
            batches = consumer.poll(timeout_ms=200)
            now = sorted(tp.partition for tp in consumer.assignment())
            if now != last:
                last = now
                emit(event="assigned", partitions=now)
            for tp, records in batches.items():
                for r in records:
                    emit(event="record", p=tp.partition, o=r.offset, v=(r.value or b"").decode())
                    try:
                        consumer.commit(
                            {TopicPartition(args.topic, tp.partition): OffsetAndMetadata(r.offset + 1, "", -1)}
                        )
                        emit(event="committed", p=tp.partition, o=r.offset + 1)
                    except KafkaError as exc:
                        emit(event="commit_failed", error=repr(exc))
                        break
    finally:
        consumer.close()


def run_confluent(args: argparse.Namespace, stop: list[bool]) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    conf: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "client.id": args.client_id,
        "debug": "cgrp",  # on stderr: the group protocol's steps, for a failed test to print
    }
    if args.protocol == "consumer":
        conf["group.protocol"] = "consumer"
    else:
        conf["session.timeout.ms"] = args.session_ms
        conf["heartbeat.interval.ms"] = min(1000, args.session_ms // 3)
    if args.instance:
        conf["group.instance.id"] = args.instance
    consumer = Consumer(conf)
    assigned: list[int] = []

    def on_assign(_c: Any, parts: list[Any]) -> None:
        assigned[:] = sorted(set(assigned) | {p.partition for p in parts})
        emit(event="assigned", partitions=list(assigned))

    def on_revoke(_c: Any, parts: list[Any]) -> None:
        gone = {p.partition for p in parts}
        assigned[:] = [p for p in assigned if p not in gone]
        emit(event="assigned", partitions=list(assigned))

    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke)
    try:
        while not stop[0]:
            m = consumer.poll(0.2)
            if m is None or m.error() is not None:
                continue
            emit(event="record", p=m.partition(), o=m.offset(), v=(m.value() or b"").decode())
            try:
                consumer.commit(offsets=[TopicPartition(args.topic, m.partition(), m.offset() + 1)], asynchronous=False)
                emit(event="committed", p=m.partition(), o=m.offset() + 1)
            except KafkaException as exc:
                emit(event="commit_failed", error=str(exc))
    finally:
        consumer.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--client", choices=("kafka-python", "confluent"), required=True)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--instance")
    ap.add_argument("--client-id", default="group-member")
    ap.add_argument("--protocol", choices=("classic", "consumer"), default="classic")
    ap.add_argument("--session-ms", type=int, default=6000)
    args = ap.parse_args()
    stop = [False]

    def on_term(_sig: int, _frame: Any) -> None:
        stop[0] = True

    signal.signal(signal.SIGTERM, on_term)
    emit(event="started", at=time.time())
    if args.client == "kafka-python":
        run_kafka_python(args, stop)
    else:
        run_confluent(args, stop)
    emit(event="closed")


if __name__ == "__main__":
    main()
