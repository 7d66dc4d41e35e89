"""Answer parsers: turn an agent's raw output into an observation o_i = (a_i, z_i, c_i, v_i, q_i).

``parse(text, spec, agent)`` reads the self-reported confidence, then hands the output to the
module of ``spec.kind`` (``KINDS``), which extracts the final answer, canonicalizes it into a
key (equal answers, equal keys) and grades the extraction (quality 1.0 for an explicit
marker, lower for a fallback). It never raises: anything it cannot read is an invalid
observation. ``canonicalize(answer, spec)`` keys a bare answer (a gold answer) the same way.

An answer kind is one module (see ``df_ray.core.parsing.kinds``: ``Options``, ``parse``,
``canonicalize``) and one line in ``KINDS``; ``register_kind`` is that line for a plugin.

Plain Python; math-verify/sympy are imported lazily, on the first math answer.
"""

from __future__ import annotations

import importlib
import logging
import sys
from types import ModuleType

from df_ray.core.parsing._text import MAX_TEXT_CHARS, extract_confidence
from df_ray.core.parsing.kinds import AnswerWords, Found, Invalid, ParseSpecError
from df_ray.core.types import Observation, ParseSpec
from df_ray.errors import UnknownNameError

__all__ = [
    "KINDS",
    "MAX_TEXT_CHARS",
    "AnswerWords",
    "Found",
    "Invalid",
    "ParseSpecError",
    "UnknownKindError",
    "answer_words",
    "canonicalize",
    "example_output",
    "extract_confidence",
    "kind_module",
    "parse",
    "register_kind",
    "warm",
]

logger = logging.getLogger(__name__)

#: Answer kind -> its module (imported on first use). Adding a kind: one module, one line.
KINDS: dict[str, str] = {
    "math": "df_ray.core.parsing.math_kind",
    "choice": "df_ray.core.parsing.choice_kind",
    "code": "df_ray.core.parsing.code_kind",
    "finqa": "df_ray.core.parsing.finqa_kind",
    "label": "df_ray.core.parsing.label_kind",
}


class UnknownKindError(UnknownNameError):
    """No answer kind of that name; the message lists the registered ones."""


def register_kind(name: str, module: str, *, replace: bool = False) -> None:
    """Register an answer kind's module (a plugin's one line); a taken name is refused
    (``df_ray.errors.RegistryError``) unless ``replace``."""
    from df_ray.errors import register_name

    register_name(KINDS, name, module, "answer kind", replace=replace)


def kind_module(kind: str) -> ModuleType:
    """The module of answer kind ``kind``."""
    try:
        target = KINDS[kind]
    except (KeyError, TypeError):
        raise UnknownKindError(f"unknown answer kind {kind!r}; registered: "
                               f"{', '.join(KINDS)}") from None
    # every answer is parsed through here: the imported module itself, not import_module
    return sys.modules.get(target) or importlib.import_module(target)


def answer_words(spec: ParseSpec | str) -> AnswerWords:
    """What methods say about the answers of ``spec``'s kind (a ``ParseSpec``, or a kind
    name for what needs no options): its module's ``words(spec)``, or ``AnswerWords()`` (no
    kind named) for a kind module without one. An unknown kind raises UnknownKindError."""
    spec = spec if isinstance(spec, ParseSpec) else ParseSpec(spec)
    fn = getattr(kind_module(spec.kind), "words", None)
    return fn(spec) if callable(fn) else AnswerWords()


#: How an answer drawn from a kind's words is written when the kind gives no ``example``:
#: the first of these it reads as valid.
_EXAMPLE_FORMS = ("The final answer is \\boxed{{{}}}.", "Answer: {}", "{}")


def example_output(spec: ParseSpec, seed: int = 0) -> str | None:
    """An output the kind of ``spec`` reads as a valid answer (a stand-in engine's answer,
    ``df-ray show``'s), varied by ``seed``: its module's ``example(spec, seed)``, else an
    answer its ``words`` draw (``random_answer``) in the first usual form it parses; None
    when neither gives one."""
    fn = getattr(kind_module(spec.kind), "example", None)
    if callable(fn):
        return fn(spec, seed)
    answer = answer_words(spec).random_answer(seed, "example")
    if answer is None:
        return None
    return next((text for text in (f.format(answer) for f in _EXAMPLE_FORMS)
                 if parse(text, spec).valid), None)


def warm(kind: str) -> None:
    """Pay an answer kind's first-use cost now (its module's ``warm()``, when it has one:
    math-verify's and sympy's imports take seconds), not on the first answer it parses."""
    fn = getattr(kind_module(kind), "warm", None)
    if callable(fn):
        fn()


def parse(text: str, spec: ParseSpec, agent: str = "") -> Observation:
    """Parse one agent output into an Observation; never raises (invalid on any failure).

    ``rule`` on the result names the extraction rule that fired; an invalid observation says
    why in ``reason`` (no answer, unbalanced braces, timeout, program error, ...).
    """
    try:
        if not isinstance(text, str):
            text = "" if text is None else str(text)
        confidence = extract_confidence(text)
        if not text.strip():
            return Observation.invalid(agent, raw=text, confidence=confidence,
                                       reason="empty output")
        if len(text) > MAX_TEXT_CHARS:
            return Observation.invalid(agent, raw=text, confidence=confidence,
                                       reason=f"output longer than {MAX_TEXT_CHARS} characters")
        try:
            module = kind_module(spec.kind)
        except UnknownKindError as e:
            return Observation.invalid(agent, raw=text, confidence=confidence, reason=str(e))
        found = module.parse(text, spec)
    except RecursionError:
        return Observation.invalid(agent, raw=text if isinstance(text, str) else "",
                                   reason="parser recursion limit")
    except Exception as e:  # a parser bug must not take a batch down: log it, mark invalid
        logger.debug("parse failed for agent %r", agent, exc_info=True)
        return Observation.invalid(agent, raw=text if isinstance(text, str) else "",
                                   reason=f"parser error: {type(e).__name__}")
    if isinstance(found, Invalid):
        return Observation.invalid(agent, raw=text, confidence=confidence,
                                   extracted=found.extracted, rule=found.rule,
                                   reason=found.reason)
    return Observation(agent=agent, answer=found.key, confidence=confidence, valid=True,
                       quality=float(max(0.0, min(1.0, found.quality))), raw=text,
                       extracted=found.extracted, rule=found.rule)


def canonicalize(answer: str, spec: ParseSpec) -> str | None:
    """Canonical key of a bare answer (e.g. a gold answer); None when it has none.

    ``canonicalize("\\\\frac{1}{2}", ParseSpec("math")) == parse("\\\\boxed{0.5}", ...).answer``.
    """
    try:
        if not isinstance(answer, str):
            answer = "" if answer is None else str(answer)
        if not answer.strip() or len(answer) > MAX_TEXT_CHARS:
            return None
        return kind_module(spec.kind).canonicalize(answer, spec)
    except Exception:
        logger.debug("canonicalize failed", exc_info=True)
        return None
