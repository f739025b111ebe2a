"""``meta.properties``: the identity of a formatted log directory, as ``kafka-storage.sh`` writes it.

Each log directory (and the metadata log directory) of a node holds a ``meta.properties``::

    version=1
    cluster.id=<22-char base64url uuid>
    node.id=<int>
    directory.id=<22-char base64url uuid, different for every directory>

``format_storage`` writes them (``pykraft storage format``); ``check_storage`` is what a node
runs at start-up: every directory must be formatted, for this node, and for one cluster.
"""

from __future__ import annotations

import base64
import re
import uuid
from dataclasses import dataclass
from pathlib import Path

from quorum.node.config import NodeConfig, format_properties, parse_properties
from quorum.storage.durable import atomic_write

__all__ = [
    "FormatResult",
    "InconsistentClusterIdError",
    "META_PROPERTIES",
    "MetaProperties",
    "StorageError",
    "check_storage",
    "decode_uuid",
    "directory_uuid",
    "format_storage",
    "random_uuid",
    "read_meta_properties",
    "uuid_string",
    "write_meta_properties",
]

META_PROPERTIES = "meta.properties"
META_VERSION = 1

# Kafka reserves the all-zero uuid and the uuid 0...01 (the metadata topic's id).
_RESERVED = frozenset({bytes(16), bytes(15) + b"\x01"})
_BASE64URL = re.compile(r"[A-Za-z0-9_-]{22}")


class StorageError(Exception):
    """A log directory is missing, unformatted, formatted differently, or unwritable."""


class InconsistentClusterIdError(StorageError):
    """The stored cluster id is not the one this node expects (Kafka's InconsistentClusterIdException)."""

    def __init__(self, expected: str, stored: str, where: str | Path | None = None) -> None:
        self.expected = expected
        self.stored = stored
        self.where = None if where is None else str(where)
        message = (
            f"The Cluster ID {expected} doesn't match stored clusterId {stored} in meta.properties. "
            "The broker is trying to join the wrong cluster."
        )
        if where is not None:
            message += f" ({where})"
        super().__init__(message)


# ----------------------------------------------------------------------------- uuids


def _encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def uuid_string(value: uuid.UUID) -> str:
    """Kafka's string form of a uuid (Uuid.toString: base64url, no padding, 22 characters)."""
    return _encode(value.bytes)


def random_uuid() -> str:
    """A random uuid in Kafka's string form (``kafka-storage.sh random-uuid``).

    16 random bytes (a version 4 UUID), base64url without padding: 22 characters. Like Kafka,
    never a reserved id and never a string starting with ``-`` (it would look like a CLI flag).
    """
    while True:
        raw = uuid.uuid4().bytes
        text = _encode(raw)
        if raw not in _RESERVED and not text.startswith("-"):
            return text


def decode_uuid(text: str, *, what: str = "Cluster ID") -> bytes:
    """Decode a Kafka uuid string to its 16 bytes, or raise ``StorageError`` saying why."""
    if len(text) != 22:
        raise StorageError(
            f"{what} string {text!r} does not appear to be a valid UUID: expected 22 base64url characters "
            f"(for example from `pykraft storage random-uuid`), got {len(text)}"
        )
    if _BASE64URL.fullmatch(text) is None:
        raise StorageError(f"{what} string {text!r} does not appear to be a valid UUID: not base64url")
    raw = base64.urlsafe_b64decode(text + "==")
    if len(raw) != 16 or _encode(raw) != text:
        raise StorageError(f"{what} string {text!r} does not appear to be a valid UUID")
    if raw in _RESERVED:
        raise StorageError(f"{what} string {text!r} is a reserved UUID")
    return raw


def directory_uuid(meta: MetaProperties) -> uuid.UUID:
    """The directory id of a formatted directory as a uuid (KIP-853's replica directory id);
    the zero uuid when meta.properties has none (written by an older format)."""
    if meta.directory_id is None:
        return uuid.UUID(int=0)
    return uuid.UUID(bytes=decode_uuid(meta.directory_id, what="directory.id"))


# ----------------------------------------------------------------------------- the file


@dataclass(frozen=True, slots=True)
class MetaProperties:
    cluster_id: str
    node_id: int
    directory_id: str | None = None
    version: int = META_VERSION

    def to_properties(self) -> dict[str, str]:
        props = {"version": str(self.version), "cluster.id": self.cluster_id, "node.id": str(self.node_id)}
        if self.directory_id is not None:
            props["directory.id"] = self.directory_id
        return props


def write_meta_properties(directory: str | Path, meta: MetaProperties) -> Path:
    """Write ``directory/meta.properties`` atomically: temp file, fsync, rename, fsync the directory."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    target = d / META_PROPERTIES
    text = format_properties(meta.to_properties(), header="Written by pykraft storage format")
    atomic_write(target, text.encode("utf-8"))
    return target


def read_meta_properties(directory: str | Path) -> MetaProperties | None:
    """Read ``directory/meta.properties``; ``None`` if there is none. Malformed files raise ``StorageError``."""
    path = Path(directory) / META_PROPERTIES
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise StorageError(f"cannot read {path}: {exc}") from None
    props = parse_properties(text)
    version_text = props.get("version", "").strip()
    if version_text != str(META_VERSION):
        raise StorageError(
            f"{path}: unsupported meta.properties version {version_text or '(missing)'}; "
            f"pykraft reads version {META_VERSION} (KRaft)"
        )
    cluster_id = props.get("cluster.id", "").strip()
    if not cluster_id:
        raise StorageError(f"{path}: cluster.id is missing")
    node_text = props.get("node.id", "").strip()
    try:
        node_id = int(node_text)
    except ValueError:
        raise StorageError(f"{path}: node.id {node_text or '(missing)'!r} is not an integer") from None
    directory_id = props.get("directory.id", "").strip() or None
    return MetaProperties(cluster_id=cluster_id, node_id=node_id, directory_id=directory_id, version=META_VERSION)


# ----------------------------------------------------------------------------- format and check


@dataclass(frozen=True, slots=True)
class FormatResult:
    formatted: tuple[tuple[str, MetaProperties], ...]  # (directory, what was written)
    skipped: tuple[str, ...]  # already formatted, left alone (--ignore-formatted)


def format_storage(
    config: NodeConfig,
    cluster_id: str,
    *,
    ignore_formatted: bool = False,
    metadata_directory_id: str | None = None,
) -> FormatResult:
    """Format every log dir and the metadata log dir of ``config`` for ``cluster_id``.

    Nothing is written unless every directory can be formatted: an already formatted one is
    an error, or with ``ignore_formatted`` is skipped. ``metadata_directory_id``: the
    metadata log dir's directory.id (KIP-853: the one its voter entry names), else random.
    """
    decode_uuid(cluster_id)
    if config.cluster_id is not None and config.cluster_id != cluster_id:
        raise StorageError(
            f"--cluster-id {cluster_id} differs from cluster.id={config.cluster_id} in the node's configuration"
        )
    to_format: list[str] = []
    skipped: list[str] = []
    for directory in config.all_log_dirs:
        if (Path(directory) / META_PROPERTIES).exists():
            if not ignore_formatted:
                raise StorageError(
                    f"Log directory {directory} is already formatted. "
                    "Use --ignore-formatted to ignore this directory and format the others."
                )
            skipped.append(directory)
        elif Path(directory).exists() and not Path(directory).is_dir():
            raise StorageError(f"Log directory {directory} exists and is not a directory")
        else:
            to_format.append(directory)
    formatted: list[tuple[str, MetaProperties]] = []
    for directory in to_format:
        directory_id = random_uuid()
        if directory == config.metadata_log_dir and metadata_directory_id is not None:
            directory_id = metadata_directory_id
        meta = MetaProperties(cluster_id=cluster_id, node_id=config.node_id, directory_id=directory_id)
        try:
            write_meta_properties(directory, meta)
        except OSError as exc:
            raise StorageError(f"cannot format log directory {directory}: {exc}") from None
        formatted.append((directory, meta))
    return FormatResult(formatted=tuple(formatted), skipped=tuple(skipped))


def check_storage(config: NodeConfig, expected_cluster_id: str | None = None) -> MetaProperties:
    """Check a node's directories before it starts; return the metadata log dir's ``MetaProperties``.

    Every directory must hold a ``meta.properties`` for ``config.node_id``, all with one cluster
    id, equal to ``expected_cluster_id`` (or the config's ``cluster.id``) when one is given.
    """
    expected = expected_cluster_id if expected_cluster_id is not None else config.cluster_id
    seen: tuple[str, str] | None = None  # (cluster id, directory it came from)
    metadata_meta: MetaProperties | None = None
    for directory in config.all_log_dirs:
        meta = read_meta_properties(directory)
        if meta is None:
            raise StorageError(f"No meta.properties found in {directory} (have you run `pykraft storage format`?)")
        path = Path(directory) / META_PROPERTIES
        if meta.node_id != config.node_id:
            raise StorageError(
                f"Stored node.id {meta.node_id} in {path} doesn't match the configured node.id {config.node_id}. "
                "If the data was moved, configure the node.id it was formatted for; for a new node, "
                "empty its log directories and format them again."
            )
        if expected is not None and meta.cluster_id != expected:
            raise InconsistentClusterIdError(expected, meta.cluster_id, path)
        if seen is not None and meta.cluster_id != seen[0]:
            raise InconsistentClusterIdError(seen[0], meta.cluster_id, f"{path}; {seen[1]} has {seen[0]}")
        if seen is None:
            seen = (meta.cluster_id, str(Path(directory) / META_PROPERTIES))
        if directory == config.metadata_log_dir:
            metadata_meta = meta
    assert metadata_meta is not None  # all_log_dirs always contains metadata_log_dir
    return metadata_meta
