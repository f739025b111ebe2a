"""Errors of the metadata plane: undecodable records and impossible replays."""

from __future__ import annotations

__all__ = ["MetadataReplayError", "RecordDecodeError"]


class RecordDecodeError(ValueError):
    """Bytes that are not a valid KIP-631 metadata record (bad frame, unknown type or
    version, truncated or trailing bytes, bad lengths, invalid UTF-8, ...)."""


class MetadataReplayError(ValueError):
    """A well-formed record that cannot apply to the current metadata: a partition of an
    unknown topic, a change to an unknown partition, a duplicate topic, a broker change
    with a stale epoch, ... A correct log never contains one, so this signals a bug
    (in the controller that wrote it, or in the replay) and must not be ignored.

    `offset` is the log offset of the offending record when the caller passed it.
    """

    def __init__(self, message: str, offset: int | None = None) -> None:
        super().__init__(message if offset is None else f"{message} (record at offset {offset})")
        self.offset = offset
