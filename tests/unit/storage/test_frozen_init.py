"""`fast_frozen_init`: the faster `__init__` builds the same frozen instances as the one
`dataclass` generates (positional, keyword, defaults, keyword-only), refuses classes it
cannot build, and every hot class that carries it still matches its generated twin."""

from __future__ import annotations

import dataclasses
import enum
import typing
from dataclasses import FrozenInstanceError, dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.log.partition_log import AppendInfo
from broker.replica.requests import FetchPartition, FetchPartitionResult, ProducePartitionResult
from broker.replica.state import FollowerPlan, LeaderAnswer
from quorum.frozen_init import fast_constructor, fast_frozen_init
from quorum.storage.record_batch import BatchFrame


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class Fast:
    a: int
    b: str
    c: tuple[int, ...] = (1, 2)
    d: int | None = None


@dataclass(frozen=True, slots=True)
class Plain:
    a: int
    b: str
    c: tuple[int, ...] = (1, 2)
    d: int | None = None


@fast_frozen_init
@dataclass(frozen=True, slots=True, kw_only=True)
class KeywordOnly:
    x: int
    y: int = 7


def as_tuple(obj: Any) -> tuple[Any, ...]:
    return tuple(getattr(obj, f.name) for f in dataclasses.fields(obj))


@given(st.integers(), st.text(max_size=5), st.lists(st.integers(), max_size=3).map(tuple), st.none() | st.integers())
def test_same_fields_as_the_generated_init(a: int, b: str, c: tuple[int, ...], d: int | None) -> None:
    for args, kwargs in (
        ((a, b), {}),
        ((a, b, c), {}),
        ((a,), {"b": b, "d": d}),
        ((), {"a": a, "b": b, "c": c, "d": d}),
    ):
        assert as_tuple(Fast(*args, **kwargs)) == as_tuple(Plain(*args, **kwargs))
    fast = Fast(a, b, c, d)
    assert fast == Fast(a, b, c, d) and hash(fast) == hash(Fast(a, b, c, d))
    assert repr(fast) == repr(Plain(a, b, c, d)).replace("Plain", "Fast")
    assert dataclasses.replace(fast, a=a + 1).a == a + 1


def test_instances_stay_frozen_and_arguments_are_checked() -> None:
    fast = Fast(1, "x")
    with pytest.raises(FrozenInstanceError):
        fast.a = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        Fast(1)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Fast(1, "x", (), None, 5)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        KeywordOnly(1)  # type: ignore[misc]
    assert as_tuple(KeywordOnly(x=3)) == (3, 7)


def test_classes_it_cannot_build_are_refused() -> None:
    with pytest.raises(TypeError, match="frozen, slotted"):

        @fast_frozen_init
        @dataclass(slots=True)
        class Mutable:
            a: int

    with pytest.raises(TypeError, match="plain init fields"):

        @fast_frozen_init
        @dataclass(frozen=True, slots=True)
        class Factory:
            a: list[int] = dataclasses.field(default_factory=list)

    with pytest.raises(TypeError, match="__post_init__"):

        @fast_frozen_init
        @dataclass(frozen=True, slots=True)
        class Post:
            a: int

            def __post_init__(self) -> None:
                pass


@pytest.mark.parametrize(
    "cls", [BatchFrame, FetchPartition, FetchPartitionResult, ProducePartitionResult, AppendInfo, LeaderAnswer,
            FollowerPlan],
)  # fmt: skip
def test_hot_classes_match_their_generated_twin(cls: type[Any]) -> None:
    """Built from every field by keyword, and from the required ones alone (defaults). The
    values have the fields' types: a class compiled by mypyc checks them."""
    fields = dataclasses.fields(cls)
    twin = dataclasses.make_dataclass(
        f"{cls.__name__}Twin",
        [(f.name, f.type, dataclasses.field(default=f.default, kw_only=f.kw_only)) for f in fields],
        frozen=True,
    )
    hints = typing.get_type_hints(cls)
    values = {
        f.name: (_sample(hints[f.name], i) if f.default is dataclasses.MISSING else f.default)
        for i, f in enumerate(fields)
    }
    required = {f.name: values[f.name] for f in fields if f.default is dataclasses.MISSING}
    assert as_tuple(cls(**values)) == as_tuple(twin(**values))
    assert as_tuple(cls(**required)) == as_tuple(twin(**required))
    with pytest.raises(FrozenInstanceError):
        setattr(cls(**values), fields[0].name, 0)


def _sample(annotation: Any, i: int) -> Any:
    """A value of `annotation`'s type, distinct per field (`i`), for the types the hot classes use."""
    if annotation is bool:
        return bool(i % 2)
    if annotation is str:
        return f"s{i}"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        members = list(annotation)
        return members[i % len(members)]
    return i


def test_fast_constructor_builds_what_init_builds_from_every_field() -> None:
    build = fast_constructor(Plain)
    made = build(1, "x", (3,), None)
    assert type(made) is Plain and made == Plain(1, "x", (3,), None)
    with pytest.raises(FrozenInstanceError):
        made.a = 2  # type: ignore[misc]
