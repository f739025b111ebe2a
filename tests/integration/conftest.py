"""Fixtures for the integration tests: real controller processes on loopback ports.

`make_cluster()` plans a 3-controller cluster under `tmp_path` on free random ports (fast
quorum timeouts, synthetic load on every node) and, unless `start=False`, starts it;
`cluster` is one that is up with an elected leader. At teardown every process a cluster
started is killed (SIGKILL, by pid); when the test failed, each node's log tail and events
are printed (pytest shows them under "Captured stdout teardown").
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
from quorum_cluster import QuorumCluster


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


def _failed(request: pytest.FixtureRequest) -> bool:
    rep = getattr(request.node, "rep_call", None)
    return rep is None or rep.failed


@pytest.fixture
def make_cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[..., QuorumCluster]]:
    clusters: list[QuorumCluster] = []

    def make(*, start: bool = True, **kwargs: Any) -> QuorumCluster:
        for _attempt in range(3):
            c = QuorumCluster(tmp_path / f"cluster-{len(clusters) + 1}", **kwargs)
            clusters.append(c)
            if not start:
                return c
            c.start_all()
            dead = c.wait_started()
            if not dead:
                return c
            # Someone took one of our ports between the check and the bind: try other ports.
            if not all("Address already in use" in c.node_log(i) for i in dead):
                raise AssertionError(f"nodes {dead} exited at start:\n{c.diagnostics()}")
            c.close()
        raise AssertionError("could not start a cluster on free ports in 3 attempts")

    try:
        yield make
    finally:
        for c in clusters:
            if _failed(request):
                print(f"===== cluster {c.cluster_id} in {c.root} (base port {c.base_port})")
                try:
                    print(c.diagnostics())
                except Exception as exc:  # noqa: BLE001 - diagnostics must never mask the failure
                    print(f"(no diagnostics: {exc!r})")
            c.close()


@pytest.fixture
def cluster(make_cluster: Callable[..., QuorumCluster]) -> QuorumCluster:
    c = make_cluster()
    c.wait_for_leader(timeout=30)
    return c
