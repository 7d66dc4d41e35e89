"""What the driver plans and answers in a round: the planned calls, a row's states and the
answers by planned call (``df_ray.evaluation.driver``, ``df_ray.evaluation.rolling``)."""

from __future__ import annotations

from dataclasses import dataclass

from df_ray.engines.base import Completion
from df_ray.methods.base import Call, SampleState


@dataclass(frozen=True, slots=True)
class PlannedCall:
    round: int
    row: int
    member: int
    call: Call


#: One sample's states, one per member (configuration).
Row = list[SampleState]


class Answered:
    """A round's answers, by planned call: the completion, whether it cost nothing (the row,
    the cache, or a duplicate in the batch answered it) and the surrogates repaired in it."""

    def __init__(self, n: int) -> None:
        self.results: list[Completion | None] = [None] * n
        self.cached = [False] * n
        self.repaired = [0] * n
