"""kraft.version 0 -> 1 in the Raft core: a static quorum (controller.quorum.voters) becomes a
dynamic one once the leader knows every voter's directory id; the upgrade is committed like a
voter change, survives a restart, and voter changes work afterwards."""

from __future__ import annotations

import uuid

from raft_helpers import Net, new_core  # type: ignore[import-not-found,unused-ignore]  # a sibling module on pytest's path

from quorum.raft.errors import ErrorCode
from quorum.raft.roles import Role
from quorum.raft.types import ControlType
from quorum.raft.voter_change import RemoveVoter, UpgradeKRaftVersion, VoterChangeResult
from quorum.raft.voter_set import Endpoint, ReplicaKey, VoterNode, VoterSet

DIRS = {i: uuid.UUID(int=0x2000 + i) for i in range(1, 5)}
# controller.quorum.voters=1@127.0.0.1:19091,2@...,3@...: ids and endpoints, no directory ids.
STATIC = VoterSet.of(VoterNode(ReplicaKey(i), (Endpoint("CONTROLLER", "127.0.0.1", 19090 + i),)) for i in (1, 2, 3))
UPGRADE = UpgradeKRaftVersion(1, STATIC)


def result(net: Net, nid: int, token: int) -> VoterChangeResult:
    found = [r for ready in net.readies[nid] for r in ready.voter_changes if r.token == token]
    assert len(found) == 1, found
    return found[0]


def submit(net: Net, nid: int, change: UpgradeKRaftVersion | RemoveVoter) -> int:
    token = net[nid].change_voters(change, net.now)
    net.flush(nid)
    return token


def static_net(among: tuple[int, ...] = (1, 2, 3)) -> Net:
    net = Net([1, 2, 3], directories=DIRS)
    net.elect(1, among)
    return net


def test_upgrade_waits_for_every_directory_id_then_commits_the_static_voters() -> None:
    net = static_net(among=(1, 2))
    # Only 2 has fetched in this epoch: 3's directory id is unknown, so the upgrade is refused.
    assert net[1].role is Role.LEADER and net[1].kraft_version == 0
    refused = result(net, 1, submit(net, 1, UPGRADE))
    assert refused.error == ErrorCode.INVALID_UPDATE_VERSION and "3" in refused.message
    assert net[1].kraft_version == 0 and net[1].voter_set == VoterSet.static([1, 2, 3])

    net.fire(3)  # 3 learns of the leader (it times out, is told the epoch) and fetches
    net.stabilize()
    token = submit(net, 1, UPGRADE)
    assert not [r for ready in net.readies[1] for r in ready.voter_changes if r.token == token]  # not yet committed
    net.stabilize()
    assert result(net, 1, token) == VoterChangeResult(token, ErrorCode.NONE)
    expected = VoterSet.of(
        VoterNode(ReplicaKey(i, DIRS[i]), (Endpoint("CONTROLLER", "127.0.0.1", 19090 + i),), 0, 1) for i in (1, 2, 3)
    )
    for i in (1, 2, 3):
        assert net[i].kraft_version == 1 and net[i].voter_set == expected
        kinds = [b.control_type for b in net[i].log.batches if b.control_type is not None]
        assert kinds[-2:] == [ControlType.KRAFT_VERSION, ControlType.KRAFT_VOTERS]
    assert net[1].high_watermark > net[1].log.batches[-1].base_offset  # committed

    # A restart (same static configuration) reads kraft.version 1 and the voter set back.
    old = net[2]
    restarted = new_core(2, [1, 2, 3], election=old.election_state, log=old.log, directory_id=DIRS[2])
    assert restarted.kraft_version == 1 and restarted.voter_set == expected

    # The quorum is dynamic now: voter changes are accepted (here: remove 3).
    removal = submit(net, 1, RemoveVoter(ReplicaKey(3, DIRS[3])))
    net.stabilize()
    assert result(net, 1, removal).error == ErrorCode.NONE and net[1].voters == {1, 2}


def test_downgrade_and_unknown_versions_are_refused_and_a_repeat_is_a_no_op() -> None:
    net = static_net()
    net.stabilize()
    assert result(net, 1, submit(net, 1, UpgradeKRaftVersion(2, STATIC))).error == ErrorCode.INVALID_UPDATE_VERSION
    token = submit(net, 1, UPGRADE)
    net.stabilize()
    assert result(net, 1, token).error == ErrorCode.NONE
    end = net[1].log.end_offset
    assert result(net, 1, submit(net, 1, UPGRADE)).error == ErrorCode.NONE  # already 1: nothing written
    assert net[1].log.end_offset == end
    down = result(net, 1, submit(net, 1, UpgradeKRaftVersion(0, STATIC)))
    assert down.error == ErrorCode.INVALID_UPDATE_VERSION and "downgrade" in down.message
    assert net[1].kraft_version == 1
    follower = result(net, 2, submit(net, 2, UPGRADE))
    assert follower.error == ErrorCode.NOT_LEADER_OR_FOLLOWER
