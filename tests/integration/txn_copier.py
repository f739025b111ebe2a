"""A consume-transform-produce loop with confluent-kafka transactions, in its own process, for
the exactly-once tests (tests/integration/test_transactions.py), so that a test can kill it.

    python txn_copier.py --bootstrap B --group G --input IN --output OUT --txn-id T
        [--batch N] [--pause-ms MS] [--abort-every N]

It reads IN as member of group G (read_committed, no auto-commit) and, per batch of at most
N records, in one transaction: writes each record to OUT (same key, value "copy:" + value,
same partition number) and commits the group's offsets with `send_offsets_to_transaction`.
With --abort-every N, every Nth transaction is aborted on purpose after its records and
offsets were sent (then the consumer rewinds), so that the output holds aborted records.
This is the loop of confluent-kafka's own exactly-once example, with its error rules: an
abortable error aborts and rewinds to the committed offsets; a retriable one retries the
commit; a fatal one (fenced) ends the process with exit code 3.

It prints one JSON object per line on stdout, flushed at once:
- {"event": "ready"} once the transactional producer is initialised;
- {"event": "committed", "records": N} after each committed transaction;
- {"event": "aborted", "error": "..."} after each abort (error "on purpose" for --abort-every);
- {"event": "fatal", "error": "..."} before exiting on a fatal error;
- {"event": "stalled", "seconds": S} before exiting with code 4 when one transaction has been
  under way for --stall-s seconds (default 25): librdkafka's `send_offsets_to_transaction`
  can wait forever once the group coordinator's broker was dropped from the metadata and
  came back (librdkafka issue #5511, open in 2.x: the cached coordinator's broker thread was
  decommissioned, so nothing wakes the request; its API timeout does not fire either). Kafka
  answers that metadata the same way (a fenced broker is not listed), so the application must
  restart the producer; with the same transactional.id nothing is lost or written twice.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from typing import Any


def emit(**event: Any) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def rewind(consumer: Any) -> None:
    """Seek every assigned partition back to the group's committed offset (or its start)."""
    from confluent_kafka import OFFSET_BEGINNING

    assigned = consumer.assignment()
    if not assigned:
        return
    for tp in consumer.committed(assigned, timeout=30):
        if tp.offset < 0:
            tp.offset = OFFSET_BEGINNING
        consumer.seek(tp)


def main() -> int:
    from confluent_kafka import Consumer, KafkaException, Producer

    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--txn-id", required=True)
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--pause-ms", type=int, default=0)
    ap.add_argument("--abort-every", type=int, default=0)
    ap.add_argument("--stall-s", type=float, default=25.0)
    args = ap.parse_args()
    stop = [False]
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))

    debug = {"debug": os.environ["TXN_COPIER_DEBUG"]} if os.environ.get("TXN_COPIER_DEBUG") else {}
    consumer = Consumer(
        {
            **debug,
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 10_000,
            "heartbeat.interval.ms": 1_000,
        }
    )
    producer = Producer(
        {
            **debug,
            "bootstrap.servers": args.bootstrap,
            "transactional.id": args.txn_id,
            "transaction.timeout.ms": 20_000,
            "message.timeout.ms": 20_000,
        }
    )
    producer.init_transactions(60)
    emit(event="ready")
    consumer.subscribe([args.input])
    busy_since = [0.0]  # monotonic start of the transaction under way; 0: none

    def watchdog() -> None:
        while True:
            time.sleep(1)
            started = busy_since[0]
            if started and time.monotonic() - started > args.stall_s:
                emit(event="stalled", seconds=round(time.monotonic() - started, 1))
                os._exit(4)

    threading.Thread(target=watchdog, daemon=True).start()
    transactions = 0
    try:
        while not stop[0]:
            msgs = [m for m in consumer.consume(num_messages=args.batch, timeout=0.5) if m.error() is None]
            if not msgs:
                continue
            busy_since[0] = time.monotonic()
            try:
                producer.begin_transaction()
                for m in msgs:
                    value = b"copy:" + (m.value() or b"")
                    producer.produce(args.output, key=m.key(), value=value, partition=m.partition())
                producer.send_offsets_to_transaction(
                    consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30
                )
                transactions += 1
                if args.abort_every and transactions % args.abort_every == 0:
                    producer.flush(30)  # written first (an abort purges what was not sent yet)
                    producer.abort_transaction(30)
                    emit(event="aborted", error="on purpose")
                    rewind(consumer)
                    busy_since[0] = 0.0
                    continue
                while True:
                    try:
                        producer.commit_transaction(30)
                        break
                    except KafkaException as e:
                        if not e.args[0].retriable():
                            raise
                        emit(event="retrying_commit", error=str(e.args[0]))
                emit(event="committed", records=len(msgs))
            except KafkaException as e:
                err = e.args[0]
                if err.fatal() or not err.txn_requires_abort():
                    emit(event="fatal", error=str(err))
                    return 3
                producer.abort_transaction(30)
                emit(event="aborted", error=str(err))
                rewind(consumer)
            busy_since[0] = 0.0
            if args.pause_ms:
                time.sleep(args.pause_ms / 1000)
    finally:
        consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
