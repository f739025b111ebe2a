"""Topic names: Kafka's legal-name rules and messages, the '.'/'_' collision, reserved names."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quorum.controller.errors import ErrorCode, InvalidRequestError, InvalidTopicError
from quorum.controller.topic_rules import (
    CLUSTER_METADATA_TOPIC_NAME,
    MAX_NAME_LENGTH,
    check_collision,
    check_reserved_for_create,
    collides,
    collision_message,
    has_collision,
    has_collision_chars,
    invalid_topic_reason,
    is_internal,
    is_valid_topic_name,
    unify_collision_chars,
    validate_topic_name,
)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "Topic name is invalid: the empty string is not allowed"),
        (".", "Topic name is invalid: '.' is not allowed"),
        ("..", "Topic name is invalid: '..' is not allowed"),
        ("a" * 250, f"Topic name is invalid: the length of '{'a' * 250}' is longer than the max allowed length 249"),
        (
            "my topic",
            "Topic name is invalid: 'my topic' contains one or more characters other than "
            "ASCII alphanumerics, '.', '_' and '-'",
        ),
        (
            "tópico",
            "Topic name is invalid: 'tópico' contains one or more characters other than "
            "ASCII alphanumerics, '.', '_' and '-'",
        ),
        (
            "a/b",
            "Topic name is invalid: 'a/b' contains one or more characters other than "
            "ASCII alphanumerics, '.', '_' and '-'",
        ),
    ],
)
def test_invalid_names_with_kafkas_messages(name, message):
    with pytest.raises(InvalidTopicError) as e:
        validate_topic_name(name)
    assert e.value.message == message
    assert e.value.code == ErrorCode.INVALID_TOPIC_EXCEPTION == 17
    assert not is_valid_topic_name(name)


@pytest.mark.parametrize("name", ["a", "...", "a.b", "A-Z_0-9", "a" * MAX_NAME_LENGTH, "-", "_", "__consumer_offsets"])
def test_valid_names(name):
    validate_topic_name(name)
    assert invalid_topic_reason(name) is None
    assert is_valid_topic_name(name)


def test_length_is_counted_in_utf16_units_like_java():
    # 125 astral characters are 250 UTF-16 code units: Java reports the length first.
    name = "\U0001f600" * 125
    assert invalid_topic_reason(name) is not None
    assert "longer than the max allowed length 249" in str(invalid_topic_reason(name))
    # 124 of them (248 units) pass the length check and fail on the characters.
    assert "contains one or more characters" in str(invalid_topic_reason("\U0001f600" * 124))


@given(st.text(alphabet="abcXYZ019._-", min_size=1, max_size=MAX_NAME_LENGTH))
def test_property_legal_alphabet_is_valid_except_dot_names(name):
    assert is_valid_topic_name(name) == (name not in (".", ".."))


def test_collision_chars():
    assert has_collision_chars("a.b") and has_collision_chars("a_b")
    assert not has_collision_chars("a-b")
    assert unify_collision_chars("a.b_c.") == "a_b_c_"
    assert has_collision("foo.bar", "foo_bar")
    assert not has_collision("foo.bar", "foo-bar")


def test_collides_reports_the_existing_topic():
    assert collides("a.b", ["x", "a_b"]) == "a_b"
    assert collides("a_b", ["a.b"]) == "a.b"
    assert collides("a.b", ["a.c", "ab"]) is None
    assert collides("ab", ["ab"]) is None  # no collision chars at all
    # The same name is TOPIC_ALREADY_EXISTS, not a collision.
    assert collides("a.b", ["a.b"]) is None
    # Grandfathered pairs: the first colliding existing topic is named.
    assert collides("a.b", ["a.b", "a_b"]) == "a_b"


def test_check_collision_message():
    with pytest.raises(InvalidTopicError) as e:
        check_collision("a.b", ["a_b"])
    assert e.value.message == "Topic 'a.b' collides with existing topic: a_b"
    assert collision_message("x.y", "x_y") == "Topic 'x.y' collides with existing topic: x_y"
    check_collision("a.b", ["c"])


def test_internal_topics():
    assert is_internal("__consumer_offsets")
    assert is_internal("__transaction_state")
    assert is_internal("__share_group_state")
    assert not is_internal(CLUSTER_METADATA_TOPIC_NAME)
    assert not is_internal("orders")


def test_cluster_metadata_can_never_be_created():
    with pytest.raises(InvalidRequestError) as e:
        check_reserved_for_create("__cluster_metadata")
    assert e.value.message == "Creation of internal topic __cluster_metadata is prohibited."
    assert e.value.code == ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize("name", ["__consumer_offsets", "__transaction_state", "__share_group_state"])
def test_the_other_internal_topics_may_be_created_as_in_kafka(name):
    check_reserved_for_create(name)  # the brokers create them on first use, with a CreateTopics


def test_ordinary_names_are_not_reserved():
    check_reserved_for_create("orders")
    check_reserved_for_create("__my_private_topic")
