"""What a benchmark is: load samples, prompt an agent, name the parser, grade an answer, and
what the generic layers need to know about it (sandboxed or not, MLflow tags, where its data
comes from). ``BaseTask`` gives the defaults a benchmark module overrides."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from df_ray.core.types import Observation, ParseSpec

Split = Literal["test", "calibration"]


class DataSchemaError(ValueError):
    """A data row does not match the expected schema (names file, row and field)."""


class DataUnavailable(RuntimeError):
    """Data a benchmark needs is neither here nor fetchable (offline, say); the message says
    what to fetch or pass instead."""


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


class GradingUnavailable(RuntimeError):
    """A grader could not grade one answer (an environment fault, e.g. a sandbox that never
    started): no verdict on that answer. Scoring keeps every other answer's grade; only a
    final answer that cannot be graded makes the sample an error row."""


def problem_statement(task: Task, sample: Sample) -> str:
    """``task.problem_statement(sample)``; the bare question for a task that has none."""
    fn = getattr(task, "problem_statement", None)
    return fn(sample) if callable(fn) else sample.question


@runtime_checkable
class Task(Protocol):
    name: str
    kind: str  # the df_ray.core parser kind
    #: Its answers are programs graded by running them in the sandbox: the constructor takes
    #: ``isolation`` (the run config's ``sandbox.isolation``), a run whose isolation level is
    #: not available on this machine stops before engines start, and the level is a tag.
    sandboxed: bool

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

    def run_tags(self) -> dict[str, str]:
        """Tags of a configuration's MLflow run that this benchmark adds (HumanEval: the
        sandbox's isolation level and the layers this machine gives)."""
        ...

    def data_location(self, source: str | None) -> tuple[str, str]:
        """(where the data comes from: "local <path>" or the hub's description, what to
        fetch when it is missing), for ``source`` (None: the default)."""
        ...

    # What calibration and provenance need (``BaseTask`` has the defaults):
    #: The ``source`` of the hub's calibration split, for a test split read from a local file
    #: (None: the benchmark has none; its calibration split must come from elsewhere).
    hub_source: str | None
    #: The hub dataset behind ``hub_source`` (e.g. "TIGER-Lab/MMLU-Pro"), for messages.
    hub_name: str | None

    def held_out_pool(self, source: str) -> list[Sample]:
        """Every sample a local ``calibration_source`` holds, for calibration (test samples
        are removed from it afterwards)."""
        ...

    def data_provenance(self, source: str | None, revision: str | None) -> tuple[str, str]:
        """(the data's source, its revision) as a run records them, for the configuration's
        ``source`` and ``data_revision``."""
        ...


class OneSourceSplits:
    """A benchmark whose test and calibration splits are both cut from every sample of one
    source (its ``_all(source)``): a ``calibration_source``'s held-out pool is then every
    sample of that source (the run removes its test samples from them)."""

    def _all(self, source: str | None) -> list[Sample]:
        raise NotImplementedError

    def held_out_pool(self, source: str) -> list[Sample]:
        return self._all(source)


class BaseTask:
    """Defaults for a benchmark: not sandboxed, no extra tags, data from ``data_source``
    unless ``source`` names a local path. Subclass it and set ``name``, ``kind``,
    ``data_source`` and ``data_hint``; the six benchmarks do. The constructor's keyword
    arguments are a config's ``benchmark_args``, each described in its docstring's ``Args:``
    section (what ``df-ray list`` shows; a test refuses an argument without one)."""

    name: str = ""
    kind: str = ""
    sandboxed: bool = False
    #: Where the data comes from by default, and what to fetch when it is missing.
    data_source: str = "the benchmark's default source"
    data_hint: str = "see the benchmark's module for its data"
    #: ``source`` values that name a remote copy, not a local path.
    remote_sources: tuple[str, ...] = ("hf", "hub")

    def problem_statement(self, sample: Sample) -> str:
        return sample.question

    def run_tags(self) -> dict[str, str]:
        return {}

    def data_location(self, source: str | None) -> tuple[str, str]:
        if source is not None and source not in self.remote_sources:
            return f"local {source}", self.data_hint
        return self.data_source, self.data_hint

    hub_source: str | None = "hub"
    hub_name: str | None = None

    def held_out_pool(self, source: str) -> list[Sample]:
        """The test and calibration splits of ``source``, each sample once."""
        seen: set[str] = set()
        out: list[Sample] = []
        for split in ("calibration", "test"):
            for s in self.load(split, source=source, seed=0):
                if s.id not in seen:
                    seen.add(s.id)
                    out.append(s)
        return out

    def data_provenance(self, source: str | None, revision: str | None) -> tuple[str, str]:
        return source or "hub", revision or "default"
