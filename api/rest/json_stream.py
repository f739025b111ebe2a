"""Concatenated JSON: the body of a streamed produce request, read as it arrives.

The REST Proxy's produce endpoint takes one JSON value or several written back to back
(optionally separated by whitespace), over a body that may be chunked. `JsonStream`
takes the body's bytes in whatever pieces they come and gives back each complete value.

Bounds: the text held for one value that is not complete yet is at most `max_value_bytes`
(UTF-8 bytes, roughly); past it `feed` raises `ValueTooLarge`. A syntax error raises
`JsonSyntaxError`: after either, the stream cannot be resynchronised and must end.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator
from typing import Any

_WHITESPACE = " \t\n\r"
_DECODER = json.JSONDecoder()


class JsonStreamError(ValueError):
    """The body cannot be read any further."""


class JsonSyntaxError(JsonStreamError):
    pass


class ValueTooLarge(JsonStreamError):
    pass


class JsonStream:
    def __init__(self, max_value_bytes: int) -> None:
        self.max_value_bytes = max_value_bytes
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="strict")
        self._text = ""
        self._pos = 0  # where the next value starts in `_text`
        self._incomplete = False  # `_text[_pos:]` failed to parse as a whole value

    def feed(self, data: bytes) -> Iterator[Any]:
        """The values completed by `data`, in order."""
        try:
            chunk = self._utf8.decode(data)
        except UnicodeDecodeError as exc:
            raise JsonSyntaxError(f"the body is not UTF-8 text: {exc.reason}") from None
        if not chunk:
            return
        if self._pos:
            self._text = self._text[self._pos :]
            self._pos = 0
        self._text += chunk
        # A record is an object: one that did not parse before can only complete with a
        # closing bracket, so the re-parse (linear in what is buffered) waits for one. Other
        # top-level values are read once such a bracket or the end of the body arrives.
        if self._incomplete and "}" not in chunk and "]" not in chunk:
            self._check_size()
            return
        yield from self._values(final=False)

    def close(self) -> Iterator[Any]:
        """The last value, at the end of the body; raises if the body ends inside one."""
        try:
            tail = self._utf8.decode(b"", final=True)
        except UnicodeDecodeError as exc:
            raise JsonSyntaxError(f"the body is not UTF-8 text: {exc.reason}") from None
        self._text = self._text[self._pos :] + tail
        self._pos = 0
        yield from self._values(final=True)

    def _values(self, *, final: bool) -> Iterator[Any]:
        text = self._text
        end = len(text)
        while True:
            pos = self._pos
            while pos < end and text[pos] in _WHITESPACE:
                pos += 1
            self._pos = pos
            if pos == end:
                self._incomplete = False
                return
            try:
                value, after = _DECODER.raw_decode(text, pos)
            except json.JSONDecodeError as exc:
                if final or not _may_complete(exc, text, end):
                    raise JsonSyntaxError(f"{exc.msg} (character {exc.pos - pos} of the value)") from None
                self._incomplete = True
                self._check_size()
                return
            if after == end and not final and _open_scalar(text, pos):
                # A bare number or literal at the very end may go on in the next chunk.
                self._incomplete = True
                return
            self._pos = after
            self._incomplete = False
            yield value

    def _check_size(self) -> None:
        if len(self._text) - self._pos > self.max_value_bytes:
            raise ValueTooLarge(f"a record is larger than {self.max_value_bytes} bytes of JSON")


# What may be left at the end of the text when a chunk boundary cuts a token: part of a
# number (the scanner stops before ".", "e" or a sign), of a literal, or of a \\uXXXX escape.
_PARTIAL_TOKEN = re.compile(
    r"-?\d*\.?\d*(?:[eE][-+]?\d*)?|n(?:ul?)?|t(?:ru?)?|f(?:a(?:ls?)?)?|Na?|-?I(?:n(?:f(?:i(?:n(?:it?)?)?)?)?)?"
    r"|u[0-9a-fA-F]{0,4}"
)


def _may_complete(exc: json.JSONDecodeError, text: str, end: int) -> bool:
    """Whether the error is the text running out (more may come) rather than bad syntax."""
    if exc.pos >= end:
        return True
    # The C scanner reports an unterminated string at its opening quote.
    if exc.msg.startswith("Unterminated string"):
        return True
    return _PARTIAL_TOKEN.fullmatch(text, exc.pos, end) is not None


def _open_scalar(text: str, pos: int) -> bool:
    return text[pos] not in '{["'
