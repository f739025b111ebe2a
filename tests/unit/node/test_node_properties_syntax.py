"""The java.util.Properties text format: comments, separators, continuations, escapes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quorum.node.config import ConfigError, format_properties, parse_properties


def test_comments_and_blank_lines_are_skipped() -> None:
    text = "# a comment\n! another comment\n\n   \n  # indented comment\na=1\n"
    assert parse_properties(text) == {"a": "1"}


@pytest.mark.parametrize(
    "line",
    ["key=value", "key = value", "key:value", "key : value", "key value", "key\tvalue", "  key=value", "key   value"],
)
def test_separators(line: str) -> None:
    assert parse_properties(line) == {"key": "value"}


def test_only_the_first_separator_splits() -> None:
    assert parse_properties("a=b=c\nx:y:z\nurl http://h:1/p") == {"a": "b=c", "x": "y:z", "url": "http://h:1/p"}


def test_key_without_value() -> None:
    assert parse_properties("lonely\nempty=\n") == {"lonely": "", "empty": ""}


def test_whitespace_then_separator_then_whitespace() -> None:
    # "key  =  value": the whitespace and one '=' are all separator.
    assert parse_properties("key  =  value") == {"key": "value"}
    # A second separator is part of the value.
    assert parse_properties("key = = value") == {"key": "= value"}


def test_trailing_whitespace_is_kept_in_value() -> None:
    assert parse_properties("k=v  ") == {"k": "v  "}


def test_line_continuation() -> None:
    text = "voters=1@h:1,\\\n        2@h:2,\\\n   3@h:3\nnext=x\n"
    assert parse_properties(text) == {"voters": "1@h:1,2@h:2,3@h:3", "next": "x"}


def test_continuation_line_starting_with_hash_is_not_a_comment() -> None:
    assert parse_properties("a=1\\\n  #2\n") == {"a": "1#2"}


def test_comment_lines_do_not_continue() -> None:
    assert parse_properties("# comment \\\nb=2\n") == {"b": "2"}


def test_even_backslashes_do_not_continue() -> None:
    assert parse_properties("path=C:\\\\\nb=2\n") == {"path": "C:\\", "b": "2"}


def test_continuation_at_end_of_file() -> None:
    assert parse_properties("a=1\\") == {"a": "1"}


def test_crlf_and_cr_line_ends() -> None:
    assert parse_properties("a=1\r\nb=2\rc=3") == {"a": "1", "b": "2", "c": "3"}


def test_escapes() -> None:
    text = "tab=a\\tb\nnl=a\\nb\nuni=\\u00e9t\\u00E9\nsep\\=key\\:x=v\nsp\\ ace=1\nother=\\q\\#\\!\n"
    assert parse_properties(text) == {
        "tab": "a\tb",
        "nl": "a\nb",
        "uni": "été",
        "sep=key:x": "v",
        "sp ace": "1",
        "other": "q#!",
    }


def test_malformed_unicode_escape() -> None:
    with pytest.raises(ConfigError, match="line 2.*malformed"):
        parse_properties("ok=1\nbad=\\u12x4\n")


def test_later_duplicates_win() -> None:
    assert parse_properties("a=1\na=2\n") == {"a": "2"}


_text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=20)


@given(st.dictionaries(_text.filter(bool), _text, max_size=8))
def test_format_then_parse_round_trips(props: dict[str, str]) -> None:
    assert parse_properties(format_properties(props, header="header\nsecond line")) == props


def test_only_cr_and_lf_end_lines() -> None:
    # str.splitlines() would also split at these; Java's Properties does not.
    text = "a=1\x0b2\x1c3\x854\u20285\u20296\x0c7\n"
    assert parse_properties(text) == {"a": "1\x0b2\x1c3\x854\u20285\u20296\x0c7"}
    assert parse_properties(format_properties({"k\u2028": "v\x0b\u2029"})) == {"k\u2028": "v\x0b\u2029"}
