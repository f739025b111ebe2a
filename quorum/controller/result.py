"""`ControllerResult`: what one controller decision produces.

A write op looks at the working image and returns the records to append and
the answer to give once they are committed. No records means nothing to wait
for (a refusal, or validate-only).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from quorum.frozen_init import fast_frozen_init
from quorum.metadata.records import MetadataRecord

T = TypeVar("T")


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class ControllerResult(Generic[T]):
    records: Sequence[MetadataRecord]
    response: T
