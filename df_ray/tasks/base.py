"""What a benchmark is: load samples, prompt an agent, name the parser, grade an answer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from df_ray.core.types import Observation, ParseSpec

Split = Literal["test", "calibration"]


class DataSchemaError(ValueError):
    """A data row does not match the expected schema (names file, row and field)."""


@dataclass(frozen=True, slots=True)
class Sample:
    """One benchmark item. ``id`` is stable across runs and machines (the cache relies on it).

    ``question`` is the text an agent sees (options, table etc. already rendered);
    ``gold`` the reference answer as the data set gives it; ``meta`` everything a grader needs
    (HumanEval tests and entry point, FinQA gold program, LegalBench task name, ...).
    Everything must be JSON-serialisable.
    """

    id: str
    task: str
    question: str
    gold: str
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Grade:
    """``correct`` is the benchmark's headline metric for this sample; ``scores`` holds every
    metric the benchmark reports (FinQA: exec and prog), ``detail`` why (e.g. sandbox status)."""

    correct: bool
    scores: dict[str, float] = field(default_factory=dict)
    detail: str = ""


def problem_statement(task: Task, sample: Sample) -> str:
    """``task.problem_statement(sample)``; the bare question for a task that has none."""
    fn = getattr(task, "problem_statement", None)
    return fn(sample) if callable(fn) else sample.question


@runtime_checkable
class Task(Protocol):
    name: str
    kind: str  # the df_ray.core parser kind

    def load(self, split: Split, *, source: str | None = None, limit: int | None = None,
             seed: int = 0) -> list[Sample]:
        """Deterministic for a given seed; calibration never overlaps test."""
        ...

    def parse_spec(self, sample: Sample) -> ParseSpec: ...

    def agent_prompt(self, sample: Sample) -> str:
        """The user message: the question, 'reason, then give the final answer in <marker>'
        and the confidence line (``df_ray.tasks.answer_instruction.answer_instruction``)."""
        ...

    def answer_instructions(self) -> str:
        """The final-answer format instruction alone (reused by coordinator/baseline prompts)."""
        ...

    def problem_statement(self, sample: Sample) -> str:
        """The whole task as every later call must see it (coordinator, discussion, critique,
        aggregation): the question with everything needed to answer it (options, FinQA's
        table and program language, LegalBench's instruction and allowed labels), without
        the agent prompt's "reason step by step" and answer-format lines."""
        ...

    def gold_key(self, sample: Sample) -> str | None:
        """Canonical key of the gold answer (same canonicalisation as the parser), or None
        when correctness can only be decided by running the answer (HumanEval)."""
        ...

    def grade(self, sample: Sample, answer: Observation | None) -> Grade:
        """Grade a final answer (None or invalid = wrong)."""
        ...
