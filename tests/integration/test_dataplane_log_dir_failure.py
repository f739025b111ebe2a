"""A full log dir on one broker of three (issue 19, bug 8), on real processes and a real
tmpfs: broker 4's `log.dirs` is a 32 MiB tmpfs mounted for the test (its metadata log
stays elsewhere), nearly filled by a file before an acks=all numbered producer writes to
a 6-partition RF 3 topic.

Within a few seconds of the first ENOSPC no partition is led by broker 4 and it is in no
ISR; acks=all writes go on on every partition; broker 4 exits with status 1 after saying
which dir failed, with which error, and what it does; every acknowledged record is read
back at its acknowledged offset; with the space freed, the restarted broker rejoins every
ISR. Needs root (mount); a refused mount fails the test with the reason.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dataplane_support import DATAPLANE_TIMINGS, bootstrap, create_topic, partition_state
from metadata_cluster import MetadataCluster, wait_until
from test_dataplane_faults import NumberedProducer, check_read_back

pytestmark = pytest.mark.integration

TOPIC = "full-disk"
PARTITIONS = 6
FAILING = 4  # the broker whose log dir fills up
OBSERVER = 5  # a broker whose REST API the test reads the partition states from
TMPFS_SIZE = "32m"
FREE_WHEN_PRODUCING = 3 * 1024 * 1024  # what the filler file leaves of the tmpfs
VALUE_PAD = 2000  # bytes per record value: fills the rest of the disk within seconds
STEP_OUT_S = 10.0  # "within a few seconds", with room for this 2-core machine's load


def mount_tmpfs(target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs", str(target)],  # noqa: S607
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(
            f"this test needs a tmpfs of {TMPFS_SIZE} (run as root): `mount -t tmpfs {target}` failed: "
            f"{proc.stderr.strip() or proc.returncode}"
        )


def umount(target: Path) -> None:
    subprocess.run(["umount", "-l", str(target)], capture_output=True, check=False)  # noqa: S607


class PaddedProducer(NumberedProducer):
    """NumberedProducer whose values are "<n>" padded with spaces (int() still reads them)."""

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            try:
                value = str(n).encode().ljust(VALUE_PAD)
                self._producer.produce(
                    self.topic, value=value, partition=n % self.partitions, on_delivery=self._on_delivery
                )
                n += 1
                self.sent = n
            except BufferError:
                pass
            self._producer.poll(self._interval)
        self._producer.flush(30)


@pytest.fixture
def full_disk_cluster(tmp_path: Path) -> Iterator[tuple[MetadataCluster, Path]]:
    c = MetadataCluster(tmp_path / "cluster", properties=dict(DATAPLANE_TIMINGS))
    mount = tmp_path / "broker-4-logs"
    mount_tmpfs(mount)
    try:
        plan = c.nodes[FAILING].plan
        plan.properties["log.dirs"] = str(mount)
        plan.properties["metadata.log.dir"] = str(plan.directory / "metadata")
        c.start_all()
        dead = c.wait_started(timeout=60)
        assert not dead, f"nodes {dead} exited at start:\n{c.diagnostics()}"
        c.wait_ready(timeout=60)
        yield c, mount
    except BaseException:
        print(c.diagnostics())
        raise
    finally:
        c.close()
        umount(mount)


def led_by(states: dict[int, dict[str, Any]], broker: int) -> list[int]:
    return [p for p, s in states.items() if s["leader"] == str(broker)]


def in_isr_of(states: dict[int, dict[str, Any]], broker: int) -> list[int]:
    return [p for p, s in states.items() if broker in s["isr"]]


def test_full_log_dir_moves_leaders_and_isrs_away_and_loses_nothing(
    full_disk_cluster: tuple[MetadataCluster, Path],
) -> None:
    cluster, mount = full_disk_cluster
    create_topic(cluster, TOPIC, partitions=PARTITIONS, rf=3)
    states = partition_state(cluster, TOPIC, OBSERVER)
    assert led_by(states, FAILING), f"broker {FAILING} leads no partition of {TOPIC}: {states}"
    filler = mount / "filler"
    with filler.open("wb") as f:
        f.write(b"\0" * max(os.statvfs(mount).f_bavail * os.statvfs(mount).f_frsize - FREE_WHEN_PRODUCING, 0))
    brokers = bootstrap(cluster)
    producer = PaddedProducer(brokers, TOPIC, PARTITIONS, rate_per_s=400).start()
    try:

        def stepped_out() -> dict[int, dict[str, Any]] | None:
            s = partition_state(cluster, TOPIC, OBSERVER)
            return s if not led_by(s, FAILING) and not in_isr_of(s, FAILING) else None

        # The disk fills within seconds of the first writes.
        states = wait_until(f"broker {FAILING} out of every leadership and ISR", stepped_out, 45, interval=0.1)
        failed = next((e for e in cluster.events(FAILING) if e.get("event") == "log_dir_failure"), None)
        assert failed is not None and "ENOSPC" in failed["error"], failed
        took_s = time.time() - failed["t"] / 1000
        print(f"broker {FAILING} out of every leadership and ISR {took_s:.2f} s after its log dir failed")
        assert took_s <= STEP_OUT_S, f"took {took_s:.1f} s"
        assert all(len(s["isr"]) == 2 for s in states.values()), states

        # acks=all writes go on, on every partition, with broker 4 out.
        mark = producer.sent
        wait_until(
            "acks=all writes acknowledged on every partition after the failure",
            lambda: {p for n, (p, _) in producer.acked_items() if n >= mark} == set(range(PARTITIONS)),
            30,
        )
        node = cluster.nodes[FAILING]
        assert node.proc is not None
        assert node.proc.wait(45) == 1
    finally:
        producer.stop()
    text = cluster.node_log(FAILING)
    assert f"log dir {mount} is offline" in text and "No space left on device" in text, text[-3000:]
    assert "fenced by the controller after the failure of log dir" in text, text[-3000:]
    print(f"sent {producer.sent}, acknowledged {len(producer.acked)}, errors {producer.errors_by_name}")
    check_read_back(brokers, producer)

    # Space back, broker restarted: it recovers its log dir, catches up and rejoins every ISR.
    filler.unlink()
    cluster.restart(FAILING)
    wait_until(
        f"broker {FAILING} back in every ISR",
        lambda: len(in_isr_of(partition_state(cluster, TOPIC, OBSERVER), FAILING)) == PARTITIONS,
        90,
        interval=0.2,
    )
