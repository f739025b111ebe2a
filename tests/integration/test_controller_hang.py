"""A hung active controller (SIGSTOP) must not get live brokers fenced: the brokers' heartbeats
reach the newly elected controller in time, and writes stall at most about one election plus
one heartbeat interval."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from metadata_cluster import FAST_TIMINGS, MetadataCluster, start_cluster

pytestmark = pytest.mark.integration

STOP_S = 15.0


@pytest.fixture
def md(tmp_path: Path) -> Iterator[MetadataCluster]:
    c = start_cluster(tmp_path)
    try:
        yield c
    finally:
        c.close()


def fenced_events(md: MetadataCluster, broker: int) -> list[str]:
    return [s for s in md.lifecycle(broker) if s == "fenced" or s.startswith("registration lost")]


def test_sigstop_of_the_active_controller_fences_no_broker(md: MetadataCluster) -> None:
    leader = md.active_controller()
    entry = next(b for b in md.broker_ids)
    before = {b: fenced_events(md, b) for b in md.broker_ids}
    stalls: list[float] = []
    errors: list[str] = []
    stop = threading.Event()

    def write_loop() -> None:
        last_ok = time.monotonic()
        i = 0
        while not stop.is_set():
            try:
                r = md.post(
                    entry, "/topics", {"topic_name": f"hang-{i}", "partitions_count": 1, "replication_factor": 3}
                )
                ok = r.status_code in (200, 201)
                if not ok:
                    errors.append(f"{r.status_code} {r.text[:120]}")
            except Exception as exc:  # noqa: BLE001 - a timeout counts as a stall, not a failure
                ok = False
                errors.append(repr(exc)[:120])
            now = time.monotonic()
            if ok:
                stalls.append(now - last_ok)
                last_ok = now
                i += 1
            time.sleep(0.05)

    writer = threading.Thread(target=write_loop, daemon=True)
    writer.start()
    time.sleep(2.0)
    os.kill(md.nodes[leader].pid, signal.SIGSTOP)
    try:
        time.sleep(STOP_S)
    finally:
        os.kill(md.nodes[leader].pid, signal.SIGCONT)
    time.sleep(3.0)
    stop.set()
    writer.join(30)
    after = {b: fenced_events(md, b) for b in md.broker_ids}
    assert after == before, f"brokers fenced while controller {leader} was stopped: {after}"
    election_s = int(FAST_TIMINGS["controller.quorum.election.timeout.ms"]) / 1000
    fetch_s = int(FAST_TIMINGS["controller.quorum.fetch.timeout.ms"]) / 1000
    heartbeat_s = int(FAST_TIMINGS["broker.heartbeat.interval.ms"]) / 1000
    # Followers notice a silent leader after the fetch timeout, then elect (election timeout);
    # a broker's next heartbeat then reaches the new controller.
    bound = fetch_s + election_s + heartbeat_s + 1.0
    longest = max(stalls)
    print(f"writes: {len(stalls)}, longest stall {longest:.2f} s (bound {bound:.2f} s), errors {errors[:3]}")
    assert len(stalls) > 50
    assert longest < bound, f"longest write stall {longest:.2f} s exceeds {bound:.2f} s"
    # Nothing a broker saw was a fencing; all of them are unfenced now.
    brokers = md.brokers(md.active_controller())
    assert all(not brokers[b]["fenced"] for b in md.broker_ids), brokers


def register_as(md: MetadataCluster, controller: int, broker_id: int) -> tuple[int, str | None]:
    """Send a BrokerRegistration for `broker_id` with a fresh incarnation id to `controller`."""
    import asyncio
    import uuid

    from quorum.controller.requests import BrokerEndpoint, BrokerRegistrationRequest
    from quorum.wire.admin_codec import decode_admin_response, encode_admin_request
    from quorum.wire.transport import request

    req = BrokerRegistrationRequest(
        broker_id=broker_id,
        cluster_id=md.cluster_id,
        incarnation_id=uuid.uuid4(),
        listeners=(BrokerEndpoint("PLAINTEXT", "127.0.0.1", 1),),
        features={"metadata.version": (1, 1)},
    )
    frame, key, version = encode_admin_request(req, correlation_id=1, client_id="impostor")
    raw = asyncio.run(request("127.0.0.1", md.nodes[controller].port, frame, request_timeout_s=10))
    resp = decode_admin_response(key, version, raw, req)
    return int(resp.error_code), resp.message  # type: ignore[union-attr]


def test_impostor_registration_after_a_controller_failover_is_refused(md: MetadataCluster) -> None:
    old = md.active_controller()
    md.kill9(old)
    new = md.active_controller(timeout=20, not_id=old)
    victim = md.broker_ids[0]
    # The new active controller has no session history of its own, but the real broker 4 is
    # registered, unfenced and heartbeating: another incarnation claiming its id is refused.
    code, message = register_as(md, new, victim)
    assert code == 101, (code, message)  # DUPLICATE_BROKER_REGISTRATION (the response has no message field)
    assert "Another broker is registered with that broker id" in md.node_log(new)
    brokers = md.brokers(new)
    assert not brokers[victim]["fenced"]
