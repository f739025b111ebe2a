"""`pykraft cluster up` on a directory started before: it waits for this start's brokers.

A node's event log (`events.jsonl`) is appended to across starts, so an "unfenced" written by
an earlier start of the same directory is already in it. `cluster up` used to return on that
line at once, while the restarted brokers were still loading their logs and not yet listening
(librdkafka's own tests, run right after such a `cluster up`, met "Connection refused").
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from quorum.node.cluster import ClusterError, NodePlan, events_ends, wait_for_unfenced


def broker(tmp_path: Path, node_id: int = 4) -> NodePlan:
    directory = tmp_path / f"broker-{node_id}"
    directory.mkdir()
    return NodePlan(node_id, "broker", directory, {"process.roles": "broker"})


def event(plan: NodePlan, state: str) -> None:
    with plan.events_file.open("a", encoding="utf-8") as f:
        f.write(json.dumps({"node": plan.node_id, "state": state}) + "\n")


def test_an_unfenced_of_the_start_before_does_not_count(tmp_path: Path) -> None:
    plan = broker(tmp_path)
    event(plan, "registered")
    event(plan, "unfenced")  # the previous start's
    since = events_ends([plan])
    assert since == {plan.node_id: plan.events_file.stat().st_size}
    with pytest.raises(ClusterError, match=r"brokers \[4\] were not unfenced"):
        wait_for_unfenced([plan], timeout_s=0.3, since=since)


def test_this_starts_unfenced_ends_the_wait(tmp_path: Path) -> None:
    plan = broker(tmp_path)
    event(plan, "unfenced")
    since = events_ends([plan])

    def later() -> None:
        time.sleep(0.3)
        event(plan, "registered")
        event(plan, "unfenced")

    writer = threading.Thread(target=later)
    writer.start()
    t0 = time.monotonic()
    wait_for_unfenced([plan], timeout_s=10, since=since)
    writer.join()
    assert time.monotonic() - t0 >= 0.25  # it waited for the new line


def test_a_first_start_and_a_replaced_log_are_read_whole(tmp_path: Path) -> None:
    fresh, replaced = broker(tmp_path, 4), broker(tmp_path, 5)
    since = events_ends([fresh, replaced])
    assert since == {4: 0, 5: 0}
    event(fresh, "unfenced")
    event(replaced, "unfenced")
    # A log shorter than where the wait starts was replaced since: all of it is this start's.
    wait_for_unfenced([fresh, replaced], timeout_s=2, since={4: 0, 5: 10_000})
