"""meta.properties: format, check, and Kafka's uuid strings."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from quorum.node.config import NodeConfig, config_from_properties, parse_properties
from quorum.node.meta_properties import (
    META_PROPERTIES,
    InconsistentClusterIdError,
    MetaProperties,
    StorageError,
    check_storage,
    decode_uuid,
    format_storage,
    random_uuid,
    read_meta_properties,
    write_meta_properties,
)

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"
OTHER = "fMCL8kv1SWm87L_Md-I2hg"


def make_config(
    tmp_path: Path,
    *,
    node_id: int = 1,
    dirs: tuple[str, ...] = ("logs",),
    meta: str | None = "meta",
    extra: dict[str, str] | None = None,
) -> NodeConfig:
    props = {
        "process.roles": "controller",
        "node.id": str(node_id),
        "controller.quorum.voters": f"{node_id}@127.0.0.1:19091",
        "listeners": "CONTROLLER://127.0.0.1:19091",
        "log.dirs": ",".join(str(tmp_path / d) for d in dirs),
    }
    if meta is not None:
        props["metadata.log.dir"] = str(tmp_path / meta)
    props.update(extra or {})
    return config_from_properties(props)


# ----------------------------------------------------------------------------- uuids


def test_random_uuid_shape() -> None:
    seen = set()
    for _ in range(500):
        u = random_uuid()
        assert len(u) == 22
        assert not u.startswith("-")
        assert "=" not in u
        assert set(u) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        raw = base64.urlsafe_b64decode(u + "==")
        assert len(raw) == 16
        assert raw[6] >> 4 == 4  # a version 4 UUID, like java.util.UUID.randomUUID
        assert decode_uuid(u) == raw
        seen.add(u)
    assert len(seen) == 500


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "22 base64url characters"),
        ("abc", "22 base64url characters"),
        ("MkU3OEVBNTcwNTJENDM2Qg==", "22 base64url characters"),
        ("MkU3OEVBNTcwNTJENDM2Q!", "not base64url"),
        ("MkU3OEVBNTcwNTJENDM2Q+", "not base64url"),
        ("MkU3OEVBNTcwNTJENDM2Qh", "does not appear to be a valid UUID"),  # non-canonical trailing bits
        ("AAAAAAAAAAAAAAAAAAAAAA", "reserved"),
        ("AAAAAAAAAAAAAAAAAAAAAQ", "reserved"),
    ],
)
def test_bad_cluster_ids(text: str, message: str) -> None:
    with pytest.raises(StorageError, match=message):
        decode_uuid(text)


def test_known_cluster_ids_decode() -> None:
    assert len(decode_uuid(CLUSTER)) == 16
    assert len(decode_uuid(OTHER)) == 16


# ----------------------------------------------------------------------------- the file


def test_write_and_read_meta_properties(tmp_path: Path) -> None:
    meta = MetaProperties(cluster_id=CLUSTER, node_id=3, directory_id=random_uuid())
    path = write_meta_properties(tmp_path / "d", meta)
    assert path == tmp_path / "d" / META_PROPERTIES
    props = parse_properties(path.read_text())
    assert props == {"version": "1", "cluster.id": CLUSTER, "node.id": "3", "directory.id": meta.directory_id}
    assert read_meta_properties(tmp_path / "d") == meta
    assert not (tmp_path / "d" / "meta.properties.tmp").exists()


def test_read_kafka_written_file(tmp_path: Path) -> None:
    # The shape kafka-storage.sh writes (java.util.Properties.store: a date comment, any key order).
    (tmp_path / META_PROPERTIES).write_text(
        "#\n#Tue Mar 05 10:00:00 UTC 2024\nnode.id=1\ndirectory.id=J8aAPcfLQt2bqs1JT_rMgQ\nversion=1\n"
        f"cluster.id={CLUSTER}\n"
    )
    assert read_meta_properties(tmp_path) == MetaProperties(CLUSTER, 1, "J8aAPcfLQt2bqs1JT_rMgQ", 1)


def test_read_missing_is_none(tmp_path: Path) -> None:
    assert read_meta_properties(tmp_path) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (f"version=0\ncluster.id={CLUSTER}\nnode.id=1\n", "unsupported meta.properties version 0"),
        (f"cluster.id={CLUSTER}\nnode.id=1\n", r"version \(missing\)"),
        ("version=1\nnode.id=1\n", "cluster.id is missing"),
        (f"version=1\ncluster.id={CLUSTER}\nnode.id=x\n", "node.id 'x' is not an integer"),
    ],
)
def test_read_malformed(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / META_PROPERTIES).write_text(text)
    with pytest.raises(StorageError, match=message):
        read_meta_properties(tmp_path)


# ----------------------------------------------------------------------------- format


def test_format_writes_every_dir_with_its_own_directory_id(tmp_path: Path) -> None:
    config = make_config(tmp_path, node_id=2, dirs=("a", "b"), meta="m")
    result = format_storage(config, CLUSTER)
    assert [d for d, _ in result.formatted] == [str(tmp_path / x) for x in ("a", "b", "m")]
    assert result.skipped == ()
    metas = [read_meta_properties(tmp_path / x) for x in ("a", "b", "m")]
    assert all(m is not None and m.cluster_id == CLUSTER and m.node_id == 2 for m in metas)
    directory_ids = {m.directory_id for m in metas if m is not None}
    assert len(directory_ids) == 3 and None not in directory_ids


def test_format_metadata_dir_shared_with_log_dir(tmp_path: Path) -> None:
    config = make_config(tmp_path, dirs=("a",), meta=None)
    result = format_storage(config, CLUSTER)
    assert [d for d, _ in result.formatted] == [str(tmp_path / "a")]


def test_format_refuses_formatted_dir_and_writes_nothing(tmp_path: Path) -> None:
    config = make_config(tmp_path, dirs=("a", "b"), meta="m")
    write_meta_properties(tmp_path / "b", MetaProperties(OTHER, 1, random_uuid()))
    with pytest.raises(StorageError) as info:
        format_storage(config, CLUSTER)
    assert str(info.value) == (
        f"Log directory {tmp_path / 'b'} is already formatted. "
        "Use --ignore-formatted to ignore this directory and format the others."
    )
    assert not (tmp_path / "a" / META_PROPERTIES).exists()
    assert not (tmp_path / "m" / META_PROPERTIES).exists()


def test_format_ignore_formatted(tmp_path: Path) -> None:
    config = make_config(tmp_path, dirs=("a", "b"), meta="m")
    before = write_meta_properties(tmp_path / "b", MetaProperties(CLUSTER, 1, random_uuid())).read_text()
    result = format_storage(config, CLUSTER, ignore_formatted=True)
    assert result.skipped == (str(tmp_path / "b"),)
    assert [d for d, _ in result.formatted] == [str(tmp_path / "a"), str(tmp_path / "m")]
    assert (tmp_path / "b" / META_PROPERTIES).read_text() == before
    again = format_storage(config, CLUSTER, ignore_formatted=True)
    assert again.formatted == () and len(again.skipped) == 3


def test_format_rejects_bad_cluster_id(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    with pytest.raises(StorageError, match="does not appear to be a valid UUID"):
        format_storage(config, "not-a-uuid")
    assert not (tmp_path / "logs").exists()


def test_format_rejects_cluster_id_that_differs_from_config(tmp_path: Path) -> None:
    config = make_config(tmp_path, extra={"cluster.id": OTHER})
    with pytest.raises(StorageError, match=f"--cluster-id {CLUSTER} differs from cluster.id={OTHER}"):
        format_storage(config, CLUSTER)
    format_storage(config, OTHER)


def test_format_dir_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "logs").write_text("not a dir")
    with pytest.raises(StorageError, match="is not a directory"):
        format_storage(make_config(tmp_path), CLUSTER)


def test_format_unwritable_dir(tmp_path: Path) -> None:
    # A log dir below a regular file cannot be created, even by root.
    (tmp_path / "file").write_text("x")
    with pytest.raises(StorageError, match="cannot format log directory"):
        format_storage(make_config(tmp_path, dirs=("file/logs",), meta=None), CLUSTER)


# ----------------------------------------------------------------------------- check


def test_check_returns_metadata_dir_meta(tmp_path: Path) -> None:
    config = make_config(tmp_path, dirs=("a", "b"), meta="m")
    format_storage(config, CLUSTER)
    meta = check_storage(config, CLUSTER)
    assert meta == read_meta_properties(tmp_path / "m")
    assert check_storage(config) == meta  # no expectation: only consistency


def test_check_missing_meta_properties(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    with pytest.raises(StorageError) as info:
        check_storage(config, CLUSTER)
    assert str(info.value) == (
        f"No meta.properties found in {tmp_path / 'logs'} (have you run `pykraft storage format`?)"
    )


def test_check_one_dir_unformatted(tmp_path: Path) -> None:
    config = make_config(tmp_path, dirs=("a",), meta="m")
    write_meta_properties(tmp_path / "a", MetaProperties(CLUSTER, 1, random_uuid()))
    with pytest.raises(StorageError, match=f"No meta.properties found in {tmp_path / 'm'}"):
        check_storage(config)


def test_check_cluster_id_mismatch_has_kafkas_message(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    format_storage(config, CLUSTER)
    with pytest.raises(InconsistentClusterIdError) as info:
        check_storage(config, OTHER)
    message = str(info.value)
    assert message.startswith(
        f"The Cluster ID {OTHER} doesn't match stored clusterId {CLUSTER} in meta.properties. "
        "The broker is trying to join the wrong cluster."
    )
    assert str(tmp_path / "logs") in message
    assert info.value.expected == OTHER and info.value.stored == CLUSTER
    assert isinstance(info.value, StorageError)


def test_check_uses_configured_cluster_id(tmp_path: Path) -> None:
    format_storage(make_config(tmp_path), CLUSTER)
    with pytest.raises(InconsistentClusterIdError, match=f"The Cluster ID {OTHER} doesn't match"):
        check_storage(make_config(tmp_path, extra={"cluster.id": OTHER}))
    # An explicit expectation wins over the config's.
    assert check_storage(make_config(tmp_path, extra={"cluster.id": OTHER}), CLUSTER).cluster_id == CLUSTER


def test_check_dirs_disagree_on_cluster_id(tmp_path: Path) -> None:
    config = make_config(tmp_path, dirs=("a",), meta="m")
    write_meta_properties(tmp_path / "a", MetaProperties(CLUSTER, 1, random_uuid()))
    write_meta_properties(tmp_path / "m", MetaProperties(OTHER, 1, random_uuid()))
    with pytest.raises(InconsistentClusterIdError) as info:
        check_storage(config)
    assert f"The Cluster ID {CLUSTER} doesn't match stored clusterId {OTHER} in meta.properties." in str(info.value)
    assert str(tmp_path / "m") in str(info.value)


def test_check_node_id_mismatch(tmp_path: Path) -> None:
    format_storage(make_config(tmp_path, node_id=1), CLUSTER)
    with pytest.raises(StorageError, match="Stored node.id 1 in .* doesn't match the configured node.id 2"):
        check_storage(make_config(tmp_path, node_id=2), CLUSTER)
