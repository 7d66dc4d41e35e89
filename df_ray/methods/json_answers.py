"""Answers written as a JSON object ``{"reasoning": ..., "answer": ..., "confidence_level": ...}``:
the first-answer format of Graph-of-Agents and every answer of ReConcile.

Two readers, as the two reference implementations read them:

- :func:`goa_json` (UNITES-Lab/GoA ``utils.py``, ``parse_confidence_response``): lenient. The
  object is the whole reply, else a fenced ```` ```json ```` block, else the first ``{...}``
  holding ``"answer"``, else the first balanced ``{...}``. Without an object (or without an
  ``answer`` in it) the answer is read from the free text by the task's own parser, and the
  confidence by a ``confidence_level: x`` / ``confidence: x`` pattern. A confidence outside
  [0, 1] or unreadable is *missing* (the reference's -1), which GoA's low-confidence
  replacement treats like a low one.
- :func:`reconcile_json` (dinobby/ReConcile ``utils.py``, ``parse_json`` and
  ``clean_output``): strict. Line breaks become spaces, the span from the first ``{`` to the
  last ``}`` must be a Python/JSON literal dict (``ast.literal_eval``, as the reference; JSON's
  ``true``/``false``/``null`` are read too), and its ``answer`` must be a valid answer of the
  task. Anything else is invalid: the caller substitutes :func:`fallback_answer`.
  A confidence written as a percentage (``"90%"``) is divided by 100; a missing or
  unreadable one is 0.0 (the reference's ``clean_output``).

Both return an :class:`Observation` whose ``answer`` is the task's canonical key (the same
keys as every other parser's) and whose ``extracted`` is the answer as written; ``rule`` is
``json`` when the object gave the answer.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import replace
from typing import Any

from df_ray.core.parsing import answer_words, canonicalize, parse
from df_ray.core.parsing._text import brace_matches
from df_ray.core.types import Observation, ParseSpec

_FENCE_RE = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.DOTALL)
_ANSWER_OBJ_RE = re.compile(r"\{[^{}]*\"answer\"[^{}]*\}", re.DOTALL)
_CONF_JSON_RE = re.compile(r"\"confidence_level\"\s*:\s*\"?([\d.]+)\"?")
_CONF_TEXT_RE = re.compile(r"confidence[:\s]+([01]\.?\d*)", re.IGNORECASE)


def _loads(text: str) -> dict | None:
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def _first_balanced(text: str) -> dict | None:
    start = text.find("{")
    end = brace_matches(text).get(start) if start >= 0 else None
    return _loads(text[start:end + 1]) if end is not None else None


def find_json_lenient(text: str) -> dict | None:
    """GoA's four strategies, in its order (see the module docstring)."""
    obj = _loads(text.strip())
    if obj is None:
        m = _FENCE_RE.search(text)
        obj = _loads(m.group(1)) if m else None
    if obj is None:
        m = _ANSWER_OBJ_RE.search(text)
        obj = _loads(m.group(0)) if m else None
    if obj is None:
        obj = _first_balanced(text)
    return obj


def find_json_strict(text: str) -> dict | None:
    """ReConcile's reader: the first-``{``-to-last-``}`` span of the reply (line breaks as
    spaces) as a literal dict, else None."""
    flat = text.replace("\n", " ")
    m = re.search(r"(\{.+\})", flat)
    if not m:
        return None
    span = m.group(0)
    obj = _loads(span)
    if obj is None:
        # the reference escapes apostrophes inside words before ast.literal_eval
        py = re.sub(r"(\w)'(\w|\s)", r"\1\\'\2", span)
        try:
            obj = ast.literal_eval(py)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return None
    return obj if isinstance(obj, dict) else None


def _float01(v: Any) -> float | None:
    try:
        x = float(str(v).strip())
    except (TypeError, ValueError):
        return None
    return x if 0.0 <= x <= 1.0 else None


def answer_key(raw: Any, spec: ParseSpec) -> str | None:
    """The canonical key of a JSON ``answer`` field for the task (None: not a valid answer),
    read as the answer kind reads one (``AnswerWords.read_json``; multiple choice: the first
    capital letter in it, GoA's reading)."""
    if raw is None or isinstance(raw, (dict, list)):
        return None
    text = str(raw).strip()
    if not text:
        return None
    read = answer_words(spec).read_json  # the kind's reading (multiple choice: a letter)
    if read is not None:
        text = read(text)
        if text is None:
            return None
    return canonicalize(text, spec)


def goa_json(text: str, spec: ParseSpec, agent: str = "") -> tuple[Observation, float | None]:
    """A GoA first answer: (observation, confidence or None when missing)."""
    text = text if isinstance(text, str) else ""
    obj = find_json_lenient(text) if text else None
    conf: float | None = None
    obs: Observation | None = None
    if obj is not None:
        raw = obj.get("answer")
        key = answer_key(raw, spec)
        if key is not None:
            obs = Observation(agent=agent, answer=key, confidence=0.5, valid=True, quality=1.0,
                              raw=text, extracted=str(raw).strip(), rule="json")
        c = obj.get("confidence_level", obj.get("confidence"))
        if c is not None:
            conf = _float01(c)
    if obs is None:  # the reference's fallback: the free text, read by the task's parser
        obs = parse(text, spec, agent=agent)
    if conf is None:
        m = _CONF_JSON_RE.search(text) or _CONF_TEXT_RE.search(text)
        conf = _float01(m.group(1)) if m else None
    return replace(obs, confidence=0.5 if conf is None else conf), conf


def _reconcile_confidence(v: Any) -> float:
    if v is None or v == "" or v is False:
        return 0.0
    if isinstance(v, str) and "%" in v:
        try:
            return max(0.0, min(1.0, float(v.replace("%", "").strip()) / 100))
        except ValueError:
            return 0.0
    try:
        return max(0.0, min(1.0, float(v)))
    except (TypeError, ValueError):
        return 0.0


def reconcile_json(text: str, spec: ParseSpec, agent: str = "") -> tuple[Observation, str]:
    """A ReConcile answer, strictly: (observation, its reasoning). Invalid when the reply holds
    no literal dict or its ``answer`` is not a valid answer of the task."""
    text = text if isinstance(text, str) else ""
    obj = find_json_strict(text) if text else None
    if obj is None:
        return Observation.invalid(agent, raw=text, confidence=0.0, reason="no JSON object"), ""
    reasoning = obj.get("reasoning", "")
    if isinstance(reasoning, list):
        reasoning = " ".join(str(r) for r in reasoning)
    reasoning = str(reasoning or "")
    conf = _reconcile_confidence(obj.get("confidence_level"))
    raw = obj.get("answer")
    key = answer_key(raw, spec)
    if key is None:
        return Observation.invalid(agent, raw=text, confidence=0.0, extracted=None, rule="json",
                                   reason="JSON answer is not a valid answer"), reasoning
    return Observation(agent=agent, answer=key, confidence=conf, valid=True, quality=1.0,
                       raw=text, extracted=str(raw).strip(), rule="json"), reasoning


def fallback_answer(spec: ParseSpec, seed: int, agent: str = "") -> Observation | None:
    """ReConcile's ``invalid_result``: a random valid answer with confidence 0, drawn
    deterministically from ``seed`` (the request's seed), as the answer kind offers one
    (``AnswerWords.random_answer``): multiple choice one of the options, labels one of the
    labels, math and FinQA ``0`` (the reference's rule for numeric answers); code, or a kind
    that offers none: None (no program is a valid answer by chance)."""
    value = answer_words(spec).random_answer(seed, "reconcile-fallback")
    if value is None:
        return None
    key = canonicalize(value, spec)
    if key is None:
        return None
    return Observation(agent=agent, answer=key, confidence=0.0, valid=True, quality=0.0,
                       raw="", extracted=value, rule="fallback",
                       reason="invalid output replaced by a random valid answer")
