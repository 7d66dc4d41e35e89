"""The method's vocabulary: what agents said, how it clusters, what we believe, what we decide.

All types are frozen dataclasses so that they can be hashed, cached and shipped between
processes without surprises.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

AnswerKind = str
"""The name of an answer kind: a key of ``df_ray.core.parsing.KINDS`` (math, choice, code,
finqa, label, or one a plugin registers)."""
DecisionSource = Literal["guardrail", "coordinator", "belief"]


class ParseSpec:
    """How to read one sample's answers: the answer kind and that kind's options, which its
    module declares (its ``Options``): ``n_options`` bounds multiple-choice letters (4 -> A-D),
    ``labels`` is the label set of a classification task, ``entry_point`` names the function a
    code answer must define, ``table`` is the FinQA table (rows of cells) that table_*
    operations read. ``ParseSpec("choice", n_options=4).n_options == 4``; an option a spec
    does not set reads None.

    Frozen and hashable (option values must be hashable: tuples, not lists).
    """

    __slots__ = ("kind", "options")
    kind: str
    options: tuple[tuple[str, Any], ...]

    def __init__(self, kind: AnswerKind, **options: Any) -> None:
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "options", tuple(sorted(options.items())))

    def __getattr__(self, name: str) -> Any:
        """An option's value; None for one this spec does not set (the kind's own default
        comes from its module's ``Options``, see ``df_ray.core.parsing.kinds.options_of``)."""
        if name.startswith("__"):
            raise AttributeError(name)
        for key, value in object.__getattribute__(self, "options"):
            if key == name:
                return value
        return None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("ParseSpec is frozen")

    def option_dict(self) -> dict[str, Any]:
        return dict(self.options)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, ParseSpec) and self.kind == other.kind
                and self.options == other.options)

    def __hash__(self) -> int:
        return hash((self.kind, self.options))

    def __repr__(self) -> str:
        args = "".join(f", {k}={v!r}" for k, v in self.options)
        return f"ParseSpec({self.kind!r}{args})"

    def __reduce__(self):
        return (_parse_spec, (self.kind, self.options))


def _parse_spec(kind: str, options: tuple[tuple[str, Any], ...]) -> ParseSpec:
    return ParseSpec(kind, **dict(options))


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
