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

from df_ray.core.parsing._text import MAX_TEXT_CHARS, extract_confidence
from df_ray.core.parsing.choice import extract_choice, letter_from_answer, valid_letter
from df_ray.core.parsing.code_kind import defines, extract_code, normalize_code
from df_ray.core.parsing.finqa import (
    ProgramError,
    execute_program,
    extract_finqa,
    number_key,
    program_key,
    programs_equivalent,
)
from df_ray.core.parsing.label import extract_label, match_label
from df_ray.core.parsing.math_kind import canonical_math, extract_math
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


def _parse_kind(text: str, spec: ParseSpec) -> tuple[str, float, str] | None:
    """``(key, quality, extracted)`` or None when the output holds no valid answer."""
    kind = spec.kind
    if kind == "math":
        found = extract_math(text)
        if found is None:
            return None
        ans, q = found
        key = canonical_math(ans)
        return None if key is None else (key, q, ans.strip())
    if kind == "choice":
        found = extract_choice(text)
        if found is None:
            return None
        letter, q = found
        return (letter, q, letter) if valid_letter(letter, spec.n_options) else None
    if kind == "code":
        found = extract_code(text, spec.entry_point)
        if found is None:
            return None
        code, q = found
        key = normalize_code(code)
        if key is None or (spec.entry_point and not defines(code, spec.entry_point)):
            return None
        return key, q, code
    if kind == "finqa":
        found = extract_finqa(text)
        if found is None:
            return None
        what, extracted, q = found
        if what == "program":
            try:
                return program_key(execute_program(extracted, spec.table)), q, extracted
            except ProgramError:
                return None
        key = number_key(extracted)
        return None if key is None else (key, q, extracted)
    if kind == "label":
        found = extract_label(text, spec.labels)
        if found is None:
            return None
        ans, q = found
        key = match_label(ans, spec.labels)
        return None if key is None else (key, q, ans.strip())
    return None


def parse(text: str, spec: ParseSpec, agent: str = "") -> Observation:
    """Parse one agent output into an Observation; never raises (invalid on any failure)."""
    try:
        if not isinstance(text, str):
            text = "" if text is None else str(text)
        confidence = extract_confidence(text)
        if not text.strip() or len(text) > MAX_TEXT_CHARS:
            return Observation.invalid(agent, raw=text, confidence=confidence)
        found = _parse_kind(text, spec)
    except RecursionError:
        return Observation.invalid(agent, raw=text if isinstance(text, str) else "")
    except Exception:  # a parser bug must not take a batch down: log it, mark invalid
        logger.debug("parse failed for agent %r", agent, exc_info=True)
        return Observation.invalid(agent, raw=text if isinstance(text, str) else "")
    if found is None:
        return Observation.invalid(agent, raw=text, confidence=confidence)
    key, quality, extracted = found
    return Observation(agent=agent, answer=key, confidence=confidence, valid=True,
                       quality=float(max(0.0, min(1.0, quality))), raw=text, extracted=extracted)


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
