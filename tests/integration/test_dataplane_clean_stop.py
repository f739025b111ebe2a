"""A clean stop of a broker hosting thousands of partitions (issue 19): SIGTERM, and the
broker fsyncs only its dirty logs (off its event loop, `num.recovery.threads.per.data.dir`
threads), writes the checkpoints and the clean-shutdown marker and exits; its next start is
clean (no segment recovered) and serves every acknowledged record; a second stop with
nothing written since costs no flush at all.

One controller and one broker (RF 1: the broker's own logs are the whole story), Kafka's
broker session timings; one topic of PARTITIONS partitions, one acks=all record each.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator

import pytest
from dataplane_support import bootstrap, confluent_consume_all, log_dir
from metadata_cluster import MetadataCluster, start_cluster, wait_until

from broker.log.checkpoints import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_FILE, read_offsets

pytestmark = pytest.mark.integration

PARTITIONS = 2_000
TOPIC = "stop-many"
STOP_S = 30  # a clean stop of PARTITIONS dirty logs, controlled shutdown included (6 s at load 16)
# The log manager's lines: the start's load, and the stop's close.
LOADED = re.compile(r"loaded (\d+) partitions, \d+ segments after (a clean|an unclean) shutdown in \d+ ms; "
                    r"recovered (\d+) segments of (\d+) partitions")  # fmt: skip
CLOSED = re.compile(r"closed (\d+) partition logs, (\d+) of them flushed")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MetadataCluster]:
    c = start_cluster(
        tmp_path_factory.mktemp("clean-stop"),
        controllers=1,
        brokers=1,
        properties={"broker.session.timeout.ms": "9000", "broker.heartbeat.interval.ms": "2000"},
    )
    try:
        yield c
    except BaseException:
        print(c.diagnostics())
        raise
    finally:
        c.close()


def stop(cluster: MetadataCluster, b: int) -> tuple[float, re.Match[str]]:
    """SIGTERM the broker; (seconds until it exited, its close line)."""
    logged = len(cluster.node_log(b))
    t0 = time.monotonic()
    code = cluster.terminate(b, timeout=STOP_S * 4)
    took = time.monotonic() - t0
    assert code == 0, f"exit status {code}"
    closed = CLOSED.search(cluster.node_log(b)[logged:])
    assert closed is not None, "no close line logged"
    return took, closed


def start(cluster: MetadataCluster, b: int) -> re.Match[str]:
    """Start the broker again; its load line once it logged it."""
    logged = len(cluster.node_log(b))
    cluster.restart(b)
    found: re.Match[str] = wait_until(
        f"broker {b} loaded its logs", lambda: LOADED.search(cluster.node_log(b)[logged:]), 120, 0.2
    )
    return found


def test_a_broker_with_thousands_of_partitions_stops_cleanly_and_starts_clean(cluster: MetadataCluster) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    b = cluster.broker_ids[0]
    brokers = bootstrap(cluster)
    root = log_dir(cluster, b)
    admin = AdminClient({"bootstrap.servers": brokers})
    admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1)], request_timeout=60)[
        TOPIC
    ].result(90)

    def hosted() -> int:
        return sum(1 for d in root.iterdir() if d.name.startswith(f"{TOPIC}-"))

    wait_until(f"broker {b} hosts {PARTITIONS} partitions", lambda: hosted() == PARTITIONS, 120, 0.5)
    acked: list[int] = []
    producer = Producer(
        {"bootstrap.servers": brokers, "acks": "all", "linger.ms": 100, "batch.num.messages": 100_000,
         "enable.idempotence": False, "message.timeout.ms": 60_000}
    )  # fmt: skip
    for p in range(PARTITIONS):
        producer.produce(TOPIC, value=b"%d" % p, partition=p, on_delivery=lambda e, _m: acked.append(e is None))
    assert producer.flush(90) == 0 and acked.count(True) == PARTITIONS
    del producer, admin

    # Every log is dirty (one record past its recovery point): each is flushed at the stop.
    took, closed = stop(cluster, b)
    print(f"clean stop of {PARTITIONS} dirty logs: {took:.1f} s ({closed[0]}); load {os.getloadavg()[0]:.1f}")
    assert int(closed[1]) == int(closed[2]) >= PARTITIONS, closed[0]
    assert took < STOP_S, f"the clean stop took {took:.1f} s"
    assert (root / CLEAN_SHUTDOWN_FILE).exists()
    points = read_offsets(root / RECOVERY_POINT_FILE)
    assert all(points[(TOPIC, p)] == 1 for p in range(PARTITIONS)), "the recovery points name every record"

    loaded = start(cluster, b)
    assert loaded[2] == "a clean" and int(loaded[3]) == int(loaded[4]) == 0, loaded[0]
    assert int(loaded[1]) >= PARTITIONS, loaded[0]
    values = {
        m.value() for m in confluent_consume_all(bootstrap(cluster), TOPIC, range(PARTITIONS), expected=PARTITIONS)
    }
    assert values == {b"%d" % p for p in range(PARTITIONS)}, "every acknowledged record is served after the restart"

    # Nothing written since the start: the next stop flushes no log at all.
    took, closed = stop(cluster, b)
    print(f"clean stop with nothing written: {took:.1f} s ({closed[0]})")
    assert int(closed[1]) >= PARTITIONS and int(closed[2]) == 0, closed[0]
    loaded = start(cluster, b)
    assert loaded[2] == "a clean" and int(loaded[3]) == 0, loaded[0]
