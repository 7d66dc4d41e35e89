"""The method's vocabulary: what agents said, how it clusters, what we believe, what we decide.

All types are frozen dataclasses so that they can be hashed, cached and shipped between
processes without surprises.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

AnswerKind = Literal["math", "choice", "code", "finqa", "label"]
DecisionSource = Literal["guardrail", "coordinator", "belief"]


@dataclass(frozen=True, slots=True)
class ParseSpec:
    """How to read one sample's answers: the answer kind plus what bounds validity.

    ``n_options`` bounds multiple-choice letters (4 -> A-D); ``labels`` is the label set of a
    classification task (None = any label); ``entry_point`` names the function a code answer
    must define; ``table`` is the FinQA table (rows of cells) that table_* operations read.
    """

    kind: AnswerKind
    n_options: int | None = None
    labels: tuple[str, ...] | None = None
    entry_point: str | None = None
    table: tuple[tuple[str, ...], ...] | None = None


@dataclass(frozen=True, slots=True)
class Observation:
    """One agent's parsed output o_i = (a_i, z_i, c_i, v_i, q_i) plus its raw text.

    ``answer`` is the canonical key z_i (equal answers have equal keys), or None when the
    output is invalid. ``extracted`` is the answer as the agent wrote it (the code, the FinQA
    program, the LaTeX), used for display and for graders that need more than the key.
    ``rule`` names the extraction rule that fired (``boxed``, ``answer_is``, ``last_number``,
    ...; see each parser's module docstring) and ``reason`` says why an invalid output is
    invalid (``no answer found``, ``timeout: ...``, ``program error: ...``); both are empty
    when not applicable.
    """

    agent: str
    answer: str | None
    confidence: float = 0.5
    valid: bool = True
    quality: float = 1.0
    raw: str = ""
    extracted: str | None = None
    rule: str = ""
    reason: str = ""

    @classmethod
    def invalid(cls, agent: str, raw: str = "", confidence: float = 0.5, *,
                extracted: str | None = None, rule: str = "",
                reason: str = "") -> Observation:
        return cls(agent=agent, answer=None, confidence=confidence, valid=False, quality=0.0,
                   raw=raw, extracted=extracted, rule=rule, reason=reason)


@dataclass(frozen=True, slots=True)
class Cluster:
    """C_z = (z, S_z, pi_z) with its unnormalised score s(z) and posterior P(z|O).

    ``support`` lists the supporting agents in agent order; ``pattern`` is the sorted tuple of
    their ids (the key of R_pi).
    """

    answer: str
    support: tuple[str, ...]
    pattern: tuple[str, ...]
    score: float
    posterior: float


@dataclass(frozen=True, slots=True)
class Belief:
    """Clusters ordered by posterior (ties broken deterministically), z*, z_(2) and the margin."""

    clusters: tuple[Cluster, ...]
    top: Cluster | None
    runner_up: Cluster | None
    margin: float

    @property
    def empty(self) -> bool:
        return self.top is None


@dataclass(frozen=True, slots=True)
class Decision:
    """The final answer key and why: the guardrail, the coordinator, or the belief alone."""

    final: str | None
    source: DecisionSource
    trusted: bool
    overridden: bool
    coordinator_answer: str | None = field(default=None)
