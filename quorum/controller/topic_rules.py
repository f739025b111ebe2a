"""Kafka's topic name rules: legal names, the '.'/'_' collision rule, internal topics.

The rules and messages are those of Kafka's ``org.apache.kafka.common.internals.Topic`` and
of the KRaft controller's CreateTopics handling (``ReplicationControlManager``,
``ControllerApis``).
"""

from __future__ import annotations

from collections.abc import Iterable

from quorum.controller.errors import InvalidRequestError, InvalidTopicError

MAX_NAME_LENGTH = 249
"""Kafka's longest legal topic name (in UTF-16 code units, as Java counts)."""

GROUP_METADATA_TOPIC_NAME = "__consumer_offsets"
TRANSACTION_STATE_TOPIC_NAME = "__transaction_state"
SHARE_GROUP_STATE_TOPIC_NAME = "__share_group_state"
CLUSTER_METADATA_TOPIC_NAME = "__cluster_metadata"

INTERNAL_TOPICS: frozenset[str] = frozenset(
    {GROUP_METADATA_TOPIC_NAME, TRANSACTION_STATE_TOPIC_NAME, SHARE_GROUP_STATE_TOPIC_NAME}
)
"""Topics Kafka reports as internal (``Topic.isInternal``); the brokers create them on demand."""

RESERVED_FOR_CREATE: frozenset[str] = INTERNAL_TOPICS | {CLUSTER_METADATA_TOPIC_NAME}

_LEGAL = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def _java_length(name: str) -> int:
    """The length Java's ``String.length()`` reports: UTF-16 code units."""
    return len(name) + sum(1 for c in name if ord(c) > 0xFFFF)


def invalid_topic_reason(name: str) -> str | None:
    """Why ``name`` is not a legal topic name (Kafka's wording, checks in Kafka's order), or None."""
    if name == "":
        return "the empty string is not allowed"
    if name == ".":
        return "'.' is not allowed"
    if name == "..":
        return "'..' is not allowed"
    if _java_length(name) > MAX_NAME_LENGTH:
        return f"the length of '{name}' is longer than the max allowed length {MAX_NAME_LENGTH}"
    if any(c not in _LEGAL for c in name):
        return f"'{name}' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"
    return None


def is_valid_topic_name(name: str) -> bool:
    return invalid_topic_reason(name) is None


def validate_topic_name(name: str) -> None:
    """Raise InvalidTopicError ("Topic name is invalid: ...") unless ``name`` is a legal topic name."""
    reason = invalid_topic_reason(name)
    if reason is not None:
        raise InvalidTopicError(f"Topic name is invalid: {reason}")


def is_internal(name: str) -> bool:
    """Kafka's ``Topic.isInternal``: the consumer-offsets, transaction and share-group state topics."""
    return name in INTERNAL_TOPICS


def has_collision_chars(name: str) -> bool:
    """True if the name contains '.' or '_', the two characters metric names cannot tell apart."""
    return "_" in name or "." in name


def unify_collision_chars(name: str) -> str:
    """The name with every '.' replaced by '_': two topics collide when these are equal."""
    return name.replace(".", "_")


def has_collision(a: str, b: str) -> bool:
    return unify_collision_chars(a) == unify_collision_chars(b)


def collides(name: str, existing_names: Iterable[str]) -> str | None:
    """The first existing topic that ``name`` collides with through '.'/'_', or None.

    An existing topic with exactly this name is not a collision: that case is
    TOPIC_ALREADY_EXISTS, which Kafka reports instead. Pre-existing collisions among
    ``existing_names`` are tolerated ("grandfathered"), as in Kafka.
    """
    if not has_collision_chars(name):
        return None
    unified = unify_collision_chars(name)
    for other in existing_names:
        if other != name and unify_collision_chars(other) == unified:
            return other
    return None


def collision_message(name: str, existing: str) -> str:
    return f"Topic '{name}' collides with existing topic: {existing}"


def check_collision(name: str, existing_names: Iterable[str]) -> None:
    """Raise InvalidTopicError with Kafka's message if ``name`` collides with an existing topic."""
    other = collides(name, existing_names)
    if other is not None:
        raise InvalidTopicError(collision_message(name, other))


def check_reserved_for_create(name: str) -> None:
    """Reject a CreateTopics for a reserved name.

    ``__cluster_metadata`` can never be created: Kafka answers INVALID_REQUEST, "Creation of
    internal topic __cluster_metadata is prohibited." (``ControllerApis.createTopics``). The
    other internal topics (``__consumer_offsets``, ``__transaction_state``,
    ``__share_group_state``) may be created, as in Kafka: the brokers create them with a
    CreateTopics of their own when they are first needed (a group coordinator's first
    FindCoordinator), and so may an operator who wants other settings.
    """
    if name == CLUSTER_METADATA_TOPIC_NAME:
        raise InvalidRequestError(f"Creation of internal topic {CLUSTER_METADATA_TOPIC_NAME} is prohibited.")
