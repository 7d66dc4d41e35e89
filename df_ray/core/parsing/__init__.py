"""Answer parsers: turn an agent's raw output into an observation o_i = (a_i, z_i, c_i, v_i, q_i).

``parse(text, spec, agent)`` dispatches on ``spec.kind`` (math, choice, code, finqa, label),
extracts the final answer, canonicalizes it into a key (equal answers, equal keys), reads the
self-reported confidence and grades the extraction (quality 1.0 for an explicit marker, lower
for a fallback). It never raises: anything it cannot read is an invalid observation.
``canonicalize(answer, spec)`` keys a bare answer (a gold answer) the same way.

Plain Python; math-verify/sympy are imported lazily, on the first math answer.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from df_ray.core.parsing._text import MAX_TEXT_CHARS, extract_confidence
from df_ray.core.parsing.choice import (
    extract_choice,
    extract_choice_rule,
    letter_from_answer,
    valid_letter,
)
from df_ray.core.parsing.code_kind import defines, extract_code, normalize_code
from df_ray.core.parsing.finqa import (
    ProgramError,
    execute_program,
    extract_finqa_rule,
    number_key,
    program_key,
    programs_equivalent,
)
from df_ray.core.parsing.label import extract_label, match_label
from df_ray.core.parsing.math_kind import (
    MathExtractError,
    canonical_math,
    extract_math_answer,
    math_key,
)
from df_ray.core.types import Observation, ParseSpec

__all__ = [
    "MAX_TEXT_CHARS",
    "ProgramError",
    "canonicalize",
    "execute_program",
    "extract_confidence",
    "parse",
    "program_key",
    "programs_equivalent",
]

logger = logging.getLogger(__name__)


class _Invalid(NamedTuple):
    reason: str
    rule: str = ""
    extracted: str | None = None


class _Found(NamedTuple):
    key: str
    quality: float
    extracted: str
    rule: str


def _parse_kind(text: str, spec: ParseSpec) -> _Found | _Invalid:
    """The answer found in ``text`` (key, quality, extracted text, rule), or why there is none."""
    kind = spec.kind
    if kind == "math":
        try:
            ans, q, rule = extract_math_answer(text)
        except MathExtractError as e:
            return _Invalid(str(e), e.rule, e.extracted)
        key, reason = math_key(ans)
        if key is None:
            return _Invalid(reason or "unreadable answer", rule, ans.strip())
        return _Found(key, q, ans.strip(), rule)
    if kind == "choice":
        found_c = extract_choice_rule(text)
        if found_c is None:
            return _Invalid("no answer found")
        letter, q, rule = found_c
        if not valid_letter(letter, spec.n_options):
            return _Invalid(f"letter {letter} is not one of the {spec.n_options or 10} options",
                            rule, letter)
        return _Found(letter, q, letter, rule)
    if kind == "code":
        found_code = extract_code(text, spec.entry_point)
        if found_code is None:
            return _Invalid("no code found")
        code, q = found_code
        key = normalize_code(code)
        if key is None:
            return _Invalid("code does not parse", "code", code)
        if spec.entry_point and not defines(code, spec.entry_point):
            return _Invalid(f"code does not define {spec.entry_point}", "code", code)
        return _Found(key, q, code, "code")
    if kind == "finqa":
        found_f = extract_finqa_rule(text)
        if found_f is None:
            return _Invalid("no answer found")
        what, extracted, q, rule = found_f
        if what == "program":
            try:
                return _Found(program_key(execute_program(extracted, spec.table)), q, extracted,
                              rule)
            except ProgramError as e:
                return _Invalid(f"program error: {e}", rule, extracted)
        key = number_key(extracted)
        if key is None:
            return _Invalid("not a number", rule, extracted)
        return _Found(key, q, extracted, rule)
    if kind == "label":
        found_l = extract_label(text, spec.labels)
        if found_l is None:
            return _Invalid("no answer found")
        ans, q = found_l
        key = match_label(ans, spec.labels)
        rule = "marker" if q >= 1.0 else "last_line" if q >= 0.6 else "label_line"
        if key is None:
            return _Invalid("not one of the labels", rule, ans.strip())
        return _Found(key, q, ans.strip(), rule)
    return _Invalid(f"unknown answer kind {kind!r}")


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
        found = _parse_kind(text, spec)
    except RecursionError:
        return Observation.invalid(agent, raw=text if isinstance(text, str) else "",
                                   reason="parser recursion limit")
    except Exception as e:  # a parser bug must not take a batch down: log it, mark invalid
        logger.debug("parse failed for agent %r", agent, exc_info=True)
        return Observation.invalid(agent, raw=text if isinstance(text, str) else "",
                                   reason=f"parser error: {type(e).__name__}")
    if isinstance(found, _Invalid):
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
        kind = spec.kind
        if kind == "math":
            return canonical_math(answer)
        if kind == "choice":
            letter = letter_from_answer(answer)
            if letter is None:
                found = extract_choice(answer)
                letter = found[0] if found else None
            return letter if letter and valid_letter(letter, spec.n_options) else None
        if kind == "code":
            if spec.entry_point and not defines(answer, spec.entry_point):
                found = extract_code(answer, spec.entry_point)
                if found is None or not defines(found[0], spec.entry_point):
                    return None
                answer = found[0]
            return normalize_code(answer)
        if kind == "finqa":
            key = number_key(answer)
            if key is not None:
                return key
            try:
                return program_key(execute_program(answer, spec.table))
            except ProgramError:
                return None
        if kind == "label":
            return match_label(answer, spec.labels)
    except Exception:
        logger.debug("canonicalize failed", exc_info=True)
        return None
    return None
