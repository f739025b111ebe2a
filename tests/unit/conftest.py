"""Fixtures shared by the unit tests."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import uvloop


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Callable[[Coroutine[Any, Any, Any]], Any]:
    """Run a coroutine to completion on a fresh event loop: the standard library's, then
    uvloop's (the nodes run on uvloop; the two differ in transport and cancel timing)."""
    if request.param == "uvloop":
        return lambda coro: uvloop.run(coro)
    return lambda coro: asyncio.run(coro)
