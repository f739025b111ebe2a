"""KIP-853's upgrade of a static quorum on real processes: three controllers formatted with
`controller.quorum.voters` (kraft.version 0) and a broker; while an admin client creates
topics through the broker, `pykraft features upgrade --feature kraft.version=1` (UpdateFeatures
to a follower, relayed to the leader) moves the quorum to kraft.version 1 (the voters with
their directory ids in a VotersRecord); a downgrade is refused; then a 4th controller
(`controller.quorum.bootstrap.servers`, formatted --no-initial-controllers) is added with
`quorum add-controller` and a static follower removed with `quorum remove-controller`. Every
topic whose creation was acknowledged is in the final metadata."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from quorum_cluster import describe_one, exchange, wait_until
from test_quorum_dynamic_voters import FAST, TopicLoad

from api import cli
from quorum.node.cluster import NodePlan, free_cluster_base, launch, plan_cluster
from quorum.node.config import format_properties
from quorum.node.meta_properties import random_uuid, read_meta_properties, uuid_string
from quorum.raft.describe import QuorumDescription
from quorum.raft.errors import ErrorCode
from quorum.wire import features_codec
from quorum.wire.features_codec import FeatureUpdate, UpdateFeatures

STATIC, NEW, BROKER = (1, 2, 3), 4, 5


def _cli(*args: str) -> tuple[int, str]:
    """`pykraft ARGS` in this process (the console script's code): (exit code, stdout + stderr)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = cli.main(list(args))
    return code, out.getvalue()


class StaticCluster:
    def __init__(self, root: Path) -> None:
        self.cluster_id = random_uuid()
        # Planned as 4 controllers + 1 broker for the ports; 4 is then taken out of the static voters.
        base = free_cluster_base(4, 1)
        self.plans: dict[int, NodePlan] = {p.node_id: p for p in plan_cluster(root, 4, base, 1)}
        static = ",".join(f"{i}@127.0.0.1:{self.port(i)}" for i in STATIC)
        for plan in self.plans.values():
            plan.properties["controller.quorum.voters"] = static
            plan.properties.update(FAST)
        new = self.plans[NEW].properties
        del new["controller.quorum.voters"]
        new["controller.quorum.bootstrap.servers"] = self.bootstrap(*STATIC)
        for plan in self.plans.values():
            plan.directory.mkdir(parents=True, exist_ok=True)
            plan.config_path.write_text(format_properties(plan.properties, header=f"pykraft {plan.role}"))
        self.procs: list[subprocess.Popen[bytes]] = []

    def port(self, node_id: int) -> int:
        return int(self.plans[node_id].properties["listeners"].rsplit(":", 1)[1])

    def bootstrap(self, *node_ids: int) -> str:
        return ",".join(f"127.0.0.1:{self.port(i)}" for i in node_ids)

    def config(self, node_id: int) -> str:
        return str(self.plans[node_id].config_path)

    def directory_id(self, node_id: int) -> str:
        meta = read_meta_properties(self.plans[node_id].properties["metadata.log.dir"])
        assert meta is not None and meta.directory_id is not None
        return meta.directory_id

    def format(self, node_id: int, *flags: str) -> None:
        code, out = _cli("storage", "format", "--config", self.config(node_id), "--cluster-id", self.cluster_id, *flags)
        assert code == 0, out

    def start(self, node_id: int) -> None:
        plan = self.plans[node_id]
        self.procs.append(launch(plan.role, plan.config_path, plan.events_file, plan.log_file))

    def describe(self) -> QuorumDescription | None:
        for node_id in (*STATIC, NEW):
            answer = describe_one("127.0.0.1", self.port(node_id), 1.0)
            if isinstance(answer, QuorumDescription) and answer.leader_id >= 0:
                return answer
        return None

    def wait_voters(self, expected: list[int], timeout: float = 30.0) -> QuorumDescription:
        def ok() -> QuorumDescription | None:
            d = self.describe()
            return d if d is not None and sorted(v.replica_id for v in d.voters) == expected else None

        found: QuorumDescription = wait_until(f"voters {expected}", ok, timeout)
        return found

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)

    def diagnostics(self) -> str:
        return "\n".join(
            f"--- node {i} log tail\n{p.log_file.read_text()[-3000:]}"
            for i, p in sorted(self.plans.items())
            if p.log_file.exists()
        )


@pytest.fixture
def static_cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[StaticCluster]:
    c = StaticCluster(tmp_path)
    try:
        yield c
    finally:
        rep = getattr(request.node, "rep_call", None)
        if rep is None or rep.failed:
            print(c.diagnostics())
        c.close()


def test_upgrade_a_static_quorum_then_add_and_remove_controllers_under_topic_creations(
    static_cluster: StaticCluster,
) -> None:
    c = static_cluster
    for i in (*STATIC, BROKER):
        c.format(i)
    c.format(NEW, "--no-initial-controllers")
    for i in (*STATIC, BROKER):
        c.start(i)
    d = c.wait_voters(list(STATIC))
    follower = next(i for i in STATIC if i != d.leader_id)
    load = TopicLoad(c.bootstrap(BROKER))
    load.start()
    try:
        load.wait_for(3, timeout=60)
        # A static quorum refuses voter changes (kraft.version 0).
        c.start(NEW)
        code, out = _cli("quorum", "add-controller", "--config", c.config(NEW), "--timeout-ms", "5000")
        assert code == 1 and "UNSUPPORTED_VERSION" in out, out

        assert (
            "Feature: kraft.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\tFinalizedVersionLevel: 0"
            in (_cli("features", "describe", "--bootstrap-controller", c.bootstrap(follower))[1])
        )
        # Bad input: a truncated UpdateFeatures is answered INVALID_REQUEST, another feature
        # INVALID_UPDATE_VERSION; the controller keeps serving (the upgrade below goes through it).
        frame, _ = features_codec.encode_request(
            UpdateFeatures((FeatureUpdate("kraft.version", 1),)), correlation_id=5, client_id="t"
        )
        body = frame[4:-3]
        raw = exchange("127.0.0.1", c.port(follower), len(body).to_bytes(4, "big") + body)
        assert features_codec.decode_response(1, raw).error == ErrorCode.INVALID_REQUEST
        code, out = _cli(
            "features", "upgrade", "--feature", "metadata.version=21", "--bootstrap-controller", c.bootstrap(follower)
        )
        assert code == 1 and "INVALID_UPDATE_VERSION" in out, out

        code, out = _cli(
            "features", "upgrade", "--feature", "kraft.version=1", "--bootstrap-controller", c.bootstrap(follower)
        )
        assert code == 0 and "kraft.version was upgraded to 1." in out, out
        wait_until(
            "kraft.version 1 committed on the follower",
            lambda: (
                "FinalizedVersionLevel: 1"
                in _cli("features", "describe", "--bootstrap-controller", c.bootstrap(follower))[1]
            ),
            10,
        )
        # The voters keep their ids and now carry their directory ids (DescribeQuorum v2).
        d = c.wait_voters(list(STATIC))
        assert {v.replica_id: uuid_string(v.directory_id) for v in d.voters} == {i: c.directory_id(i) for i in STATIC}
        code, out = _cli(
            "features", "upgrade", "--feature", "kraft.version=0", "--bootstrap-controller", c.bootstrap(*STATIC)
        )
        assert code == 1 and "INVALID_UPDATE_VERSION" in out and "downgrade" in out, out
        load.wait_for(3)

        # Dynamic now: add the 4th controller (an observer that caught up), remove a static follower.
        code, out = _cli("quorum", "add-controller", "--config", c.config(NEW), "--timeout-ms", "30000")
        assert code == 0 and f"Added controller {NEW} with directory id {c.directory_id(NEW)}" in out, out
        c.wait_voters([*STATIC, NEW])
        load.wait_for(3)
        d = c.wait_voters([*STATIC, NEW])
        gone = next(i for i in STATIC if i != d.leader_id)
        code, out = _cli(
            "quorum",
            "remove-controller",
            "--controller-id",
            str(gone),
            "--controller-directory-id",
            c.directory_id(gone),
            "--bootstrap-controller",
            c.bootstrap(NEW),
        )
        assert code == 0, out
        final = sorted({*STATIC, NEW} - {gone})
        c.wait_voters(final)
        load.wait_for(3)
    finally:
        load.stop()
    topics = wait_until(
        "the acknowledged topics in the metadata", lambda: (t := load.topics()) >= set(load.acknowledged) and t, 30
    )
    assert set(load.acknowledged) <= topics and len(load.acknowledged) >= 12
    load.close()
    assert sorted(v.replica_id for v in (c.describe() or d).voters) == final
