"""KIP-853's upgrade of a static quorum on real processes: three controllers formatted with
`controller.quorum.voters` (kraft.version 0) and a broker; while an admin client creates
topics through the broker, `pykraft features upgrade --feature kraft.version=1` (UpdateFeatures
to a follower, relayed to the leader) moves the quorum to kraft.version 1 (the voters with
their directory ids in a VotersRecord); a downgrade is refused; then a 4th controller
(`controller.quorum.bootstrap.servers`, formatted --no-initial-controllers) is added with
`quorum add-controller` and a static follower removed with `quorum remove-controller`. Every
topic whose creation was acknowledged is in the final metadata."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from quorum_cluster import exchange, wait_until
from voter_change_cluster import PlannedCluster, TopicLoad, close_clusters, pykraft_cli

from quorum.node.meta_properties import uuid_string
from quorum.raft.errors import ErrorCode
from quorum.wire import features_codec
from quorum.wire.features_codec import FeatureUpdate, UpdateFeatures

STATIC, NEW, BROKER = (1, 2, 3), 4, 5


def _cli(*args: str) -> tuple[int, str]:
    """`pykraft ARGS` in this process (the console script's code): (exit code, stdout + stderr)."""
    code, out, err = pykraft_cli(*args)
    return code, out + err


class StaticCluster(PlannedCluster):
    """Controllers 1..3 with controller.quorum.voters (kraft.version 0), and a 4th (planned with
    them for the ports) with controller.quorum.bootstrap.servers, to be added later; a broker."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, 4, 1)

    def configure(self) -> None:
        static = ",".join(f"{i}@127.0.0.1:{self.port(i)}" for i in STATIC)
        for plan in self.plans.values():
            plan.properties["controller.quorum.voters"] = static
        new = self.plans[NEW].properties
        del new["controller.quorum.voters"]
        new["controller.quorum.bootstrap.servers"] = self.bootstrap(*STATIC)


@pytest.fixture
def static_cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[StaticCluster]:
    c = StaticCluster(tmp_path)
    try:
        yield c
    finally:
        close_clusters([c], request)


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
