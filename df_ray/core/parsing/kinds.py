"""What an answer kind is: one module with ``Options``, ``parse`` and ``canonicalize``.

A kind module (``math_kind``, ``choice_kind``, ``code_kind``, ``finqa_kind``, ``label_kind``,
or a plugin's own) provides

- ``Options``: a frozen dataclass of the options a ``ParseSpec`` of this kind may carry, each
  with its default (``ParseSpec("choice", n_options=4)`` -> ``choice_kind.Options(4)``);
- ``parse(text, spec) -> Found | Invalid``: the answer found in a (non-empty, bounded) output;
- ``canonicalize(answer, spec) -> str | None``: the key of a bare answer (a gold answer);
- ``words(spec) -> AnswerWords`` (optional): what methods say about the kind's answers (the
  answer a JSON field holds, the valid answers a random one is drawn from, what a critique
  checks); a kind without it gets wording that names no kind (``AnswerWords()``);
- ``example(spec, seed) -> str`` (optional): an output the kind reads as a valid answer,
  varied by ``seed``, which ``df-ray show``'s stand-in engines answer with
  (``df_ray.core.parsing.example_output``; without it, one of ``words``' answers in a usual
  form, where the kind reads one).

and is listed in ``df_ray.core.parsing.KINDS`` (name -> module): one module, one line.
``df_ray.core.parsing.parse`` adds what every kind shares (the confidence line, the empty and
oversized outputs, never raising).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
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


def option(default: Any, description: str) -> Any:
    """A field of a kind's ``Options`` with its description (what ``df-ray list`` shows):
    ``labels: tuple[str, ...] | None = option(None, "the task's label set")``."""
    return field(default=default, metadata={"description": description})


def options_of(spec: ParseSpec, options_cls: type) -> Any:
    """``spec``'s options as the kind's ``Options`` (cached per spec)."""
    return _options(options_cls, spec)


@dataclass(frozen=True)
class AnswerWords:
    """What methods say about one kind's answers (a kind module's ``words(spec)``), so that no
    method branches on a kind's name. The defaults name no kind: a kind that says nothing
    is asked for "the final answer" and gets no random answer."""

    #: The answer a JSON ``answer`` field holds, as a noun phrase (GoA's first answer:
    #: ``"answer": "<noun>"``).
    noun: str = "the final answer, written as the question asks"
    #: The sentence that says what the JSON ``answer`` field may hold (ReConcile's
    #: per-dataset line); empty: ``Only place <noun> in the "answer" field.``
    field_rule: str = ""
    #: Every valid answer, when there are few (options, labels): ReConcile's invalid-answer
    #: rule draws a random one from them.
    options: tuple[str, ...] | None = None
    #: The answer that rule gives when there are no ``options`` (math: "0"); None: none (no
    #: answer of the kind is valid by chance, e.g. a program).
    default_answer: str | None = None
    #: What a critique of an answer checks (Self-Refine's feedback), one or two sentences.
    critique_focus: str = ""
    #: How a JSON ``answer`` field's text is read before it is canonicalized (multiple
    #: choice: its first capital letter); None: as it is.
    read_json: Callable[[str], str | None] | None = None
    #: The letters an answer is written as, when the kind's answers are option letters
    #: (multiple choice): GoA's last resort for an unreadable final answer looks for the last
    #: of them in the text; None: the kind has no such rule.
    letters: tuple[str, ...] | None = None
    #: Few-shot examples of a critique and fix (Self-Refine's feedback prompt), as
    #: (question, solution, [(step, verdict), ...], fixed solution or None) tuples.
    feedback_examples: tuple[tuple[Any, ...], ...] = ()

    @property
    def answer_field_rule(self) -> str:
        return self.field_rule or f'Only place {self.noun} in the "answer" field.'

    def random_answer(self, seed: int, salt: str) -> str | None:
        """A valid answer drawn deterministically from ``seed`` (and the caller's ``salt``):
        one of ``options``, else ``default_answer``."""
        if self.options:
            import hashlib

            h = hashlib.sha256(f"{salt}\x00{seed}".encode()).digest()
            return self.options[int.from_bytes(h[:4], "big") % len(self.options)]
        return self.default_answer
