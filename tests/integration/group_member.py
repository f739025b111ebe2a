"""One consumer-group member in its own process, for the group tests (so that a test can
kill it with SIGKILL, or stop it with SIGTERM for a clean LeaveGroup).

    python group_member.py --client kafka-python|confluent --bootstrap B --group G --topic T
        [--instance ID] [--protocol classic|consumer] [--session-ms N]

It prints one JSON object per line on stdout, flushed at once:
- {"event": "assigned", "partitions": [..]} whenever its assignment changes (from the client's
  rebalance callbacks);
- {"event": "record", "p": P, "o": O, "v": "..."} for each record it consumed;
- {"event": "committed", "p": P, "o": O} once a synchronous commit of offset O (the next
  record to read) on partition P succeeded;
- {"event": "commit_failed", "error": "..."} when a commit was refused.
On stderr: the client's own log of its group protocol (kafka-python's coordinator at DEBUG,
librdkafka's `cgrp` debug contexts), which a failed test prints for the members that stalled.

kafka-python 3.0.12 polls with a 5 s timeout here, not a short one, because of a client bug
that a short poll exposes: a group leader whose first assignment was made before the topic's
metadata arrived rejoins at once (its assignment snapshot differs from the metadata); if the
poll() that sent that JoinGroup times out before the SyncGroup answer, the next poll() finds
`need_rejoin()` false (the leader's new assignment updated the snapshot) and never awaits the
join that is still in flight, so the answer is dropped: the member never takes its partitions
and never heartbeats again, and the coordinator rightly expires it. With a 5 s poll the
rejoin, started at the beginning of a poll, has seconds to finish.
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
    from kafka import ConsumerRebalanceListener, KafkaConsumer, OffsetAndMetadata, TopicPartition
    from kafka.errors import KafkaError

    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(threadName)s %(name)s %(message)s")
    logging.getLogger("kafka.coordinator").setLevel(logging.DEBUG)
    logging.getLogger("kafka.coordinator.consumer").setLevel(logging.INFO)  # its DEBUG logs every poll
    held: set[int] = set()

    class Report(ConsumerRebalanceListener):
        """Runs on the client's IO thread: it only prints."""

        def on_partitions_revoked(self, revoked: Any) -> None:
            held.difference_update(tp.partition for tp in revoked)
            emit(event="assigned", partitions=sorted(held))

        def on_partitions_assigned(self, assigned: Any) -> None:
            held.update(tp.partition for tp in assigned)
            emit(event="assigned", partitions=sorted(held))

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
    consumer.subscribe([args.topic], listener=Report())
    try:
        while not stop[0]:
            batches = consumer.poll(timeout_ms=5000)  # see the module docstring
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
