"""KIP-853 directory ids at the node: meta.properties' directory.id as the replica's uuid,
and `quorum describe --replication`'s DirectoryId column (Kafka's uuid strings)."""

from __future__ import annotations

import uuid

from quorum.node.meta_properties import MetaProperties, directory_uuid, random_uuid, uuid_string
from quorum.node.quorum_cli import replication_rows
from quorum.raft.describe import QuorumDescription, ReplicaDescription

DIR = uuid.UUID("5b7c0f4e-7a1d-4c55-9a0e-1f2d3c4b5a69")


def test_directory_id_of_meta_properties() -> None:
    text = random_uuid()
    assert uuid_string(directory_uuid(MetaProperties("c" * 22, 1, text))) == text
    assert directory_uuid(MetaProperties("c" * 22, 1, None)) == uuid.UUID(int=0)


def test_replication_rows_show_directory_ids() -> None:
    d = QuorumDescription(1, 5, 100, (ReplicaDescription(1, 100, 10, 10, DIR),), (ReplicaDescription(4, 90),))
    rows = replication_rows(d, human=False)
    assert [r["DirectoryId"] for r in rows] == ["W3wPTnodTFWaDh8tPEtaaQ", "AAAAAAAAAAAAAAAAAAAAAA"]
    assert list(rows[0])[:3] == ["NodeId", "DirectoryId", "LogEndOffset"]  # Kafka 3.9's order
