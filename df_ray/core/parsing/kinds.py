"""What an answer kind is: one module with ``Options``, ``parse`` and ``canonicalize``.

A kind module (``math_kind``, ``choice_kind``, ``code_kind``, ``finqa_kind``, ``label_kind``,
or a plugin's own) provides

- ``Options``: a frozen dataclass of the options a ``ParseSpec`` of this kind may carry, each
  with its default (``ParseSpec("choice", n_options=4)`` -> ``choice_kind.Options(4)``);
- ``parse(text, spec) -> Found | Invalid``: the answer found in a (non-empty, bounded) output;
- ``canonicalize(answer, spec) -> str | None``: the key of a bare answer (a gold answer).

and is listed in ``df_ray.core.parsing.KINDS`` (name -> module): one module, one line.
``df_ray.core.parsing.parse`` adds what every kind shares (the confidence line, the empty and
oversized outputs, never raising).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple, Protocol

from df_ray.core.types import ParseSpec


class Found(NamedTuple):
    """An answer: its canonical key, the extraction's quality in [0, 1], the answer as
    written, and the rule that found it."""

    key: str
    quality: float
    extracted: str
    rule: str


class Invalid(NamedTuple):
    """No usable answer, and why (the rule and text that came closest, when any)."""

    reason: str
    rule: str = ""
    extracted: str | None = None


class AnswerKindModule(Protocol):
    Options: type

    def parse(self, text: str, spec: ParseSpec) -> Found | Invalid: ...

    def canonicalize(self, answer: str, spec: ParseSpec) -> str | None: ...


class ParseSpecError(ValueError):
    """A ParseSpec carries an option its kind does not declare."""


@functools.lru_cache(maxsize=4096)
def _options(options_cls: type, spec: ParseSpec) -> Any:
    try:
        return options_cls(**spec.option_dict())
    except TypeError as e:
        raise ParseSpecError(f"answer kind {spec.kind!r}: {e} (its options: "
                             f"{options_cls.__module__}.{options_cls.__qualname__})") from None


def options_of(spec: ParseSpec, options_cls: type) -> Any:
    """``spec``'s options as the kind's ``Options`` (cached per spec)."""
    return _options(options_cls, spec)
