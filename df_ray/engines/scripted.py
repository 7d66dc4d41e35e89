"""A deterministic engine for tests of everything above the engine.

``ScriptedEngine`` answers with a *responder* (a function of the request, or a mapping), counts
tokens with a whitespace tokenizer, records every request it served in ``calls``, and can inject
faults (raise / hang / kill the process on the Nth request; an ``error`` completion when the
prompt exceeds a context length) for reliability tests.

Builtin responders, selectable by name from a YAML config (``ScriptedSpec.script``):

``echo``
    the last user message, verbatim.
``majority``
    a reasoned answer ``... \\boxed{X} ... Confidence: c`` where ``X`` is drawn by a seeded hash
    of (model, prompt, seed) among a few candidates (the first one most often), so several
    models/seeds disagree realistically while every call is reproducible. Multiple-choice
    prompts (options ``(A)``, ``B)``, ...) get letters; others get numbers derived from the prompt.
``constant:<text>``
    always ``<text>``.
``from_file:<path.jsonl>``
    looks the request up in a JSONL file of ``{"key": <ChatRequest.key()>, "response": ...}``
    or ``{"prompt": <last user message>, "response": ...}`` rows.
``package.module:callable``
    any importable ``Callable[[ChatRequest], str]`` (or a zero-argument factory returning one,
    when the callable is a class).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from pydantic import Field, field_validator

from df_ray.engines.base import (
    CONTEXT_LENGTH_ERROR,
    ChatRequest,
    Completion,
    unsupported_sampling,
)
from df_ray.engines.spec import EngineSpec
from df_ray.targets import import_target

Responder = Callable[[ChatRequest], str]


class InjectedFault(RuntimeError):
    """Raised by a ScriptedEngine on a request chosen by ``raise_on_call``."""


def whitespace_tokens(text: str) -> int:
    """The scripted engine's tokenizer: whitespace-separated words."""
    return len(text.split())


def last_user_content(request: ChatRequest) -> str:
    for m in reversed(request.messages):
        if m.role == "user":
            return m.content
    return request.messages[-1].content if request.messages else ""


def _as_set(x: int | Iterable[int] | None) -> frozenset[int]:
    if x is None:
        return frozenset()
    if isinstance(x, int):
        return frozenset({x})
    return frozenset(int(i) for i in x)


def _stable_hash(*parts: object) -> int:
    blob = json.dumps([str(p) for p in parts], ensure_ascii=False).encode("utf-8")
    return int.from_bytes(hashlib.sha256(blob).digest()[:8], "big")


# --------------------------------------------------------------------------- responders


def echo(request: ChatRequest) -> str:
    return last_user_content(request)


_CHOICE_RE = re.compile(r"(?:^|\s|\()([A-J])[\).:]\s", re.MULTILINE)


def majority(request: ChatRequest) -> str:
    """A seeded, plausible answer with realistic disagreement (see module docstring)."""
    prompt = last_user_content(request)
    letters = sorted(set(_CHOICE_RE.findall(prompt)))
    if len(letters) >= 2:
        base = _stable_hash("choices", prompt) % len(letters)
        candidates = [letters[(base + i) % len(letters)] for i in range(min(3, len(letters)))]
    else:
        base = _stable_hash("numbers", prompt) % 90 + 10
        candidates = [str(base), str(base + 1), str(base * 2)]
    h = _stable_hash(request.model, request.to_dict()["messages"], request.seed)
    # 60% first candidate, 25% second, 15% third.
    r = h % 100
    idx = 0 if r < 60 else (1 if r < 85 else 2)
    answer = candidates[min(idx, len(candidates) - 1)]  # two options: the third is the second
    confidence = 0.5 + ((h >> 16) % 50) / 100.0
    return (
        "Let me work through this step by step.\n"
        f"After checking the details, the result is {answer}.\n"
        f"The final answer is \\boxed{{{answer}}}.\n"
        f"Confidence: {confidence:.2f}"
    )


def constant(text: str) -> Responder:
    def respond(_request: ChatRequest) -> str:
        return text

    return respond


def from_file(path: str | Path) -> Responder:
    by_key: dict[str, str] = {}
    by_prompt: dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            if "response" not in row or not ("key" in row or "prompt" in row):
                raise ValueError(
                    f"{path}:{lineno}: each row needs 'response' and one of 'key' or 'prompt'"
                )
            if "key" in row:
                by_key[row["key"]] = row["response"]
            else:
                by_prompt[row["prompt"]] = row["response"]

    def respond(request: ChatRequest) -> str:
        k = request.key()
        if k in by_key:
            return by_key[k]
        p = last_user_content(request)
        if p in by_prompt:
            return by_prompt[p]
        raise KeyError(f"{path}: no scripted response for request {k[:12]} (prompt {p[:60]!r})")

    return respond


BUILTIN_RESPONDERS: dict[str, Responder] = {"echo": echo, "majority": majority}


def resolve_responder(name: str) -> Responder:
    """A responder from its config name (see the module docstring for the forms)."""
    if name in BUILTIN_RESPONDERS:
        return BUILTIN_RESPONDERS[name]
    if name.startswith("constant:"):
        return constant(name.removeprefix("constant:"))
    if name.startswith("from_file:"):
        return from_file(name.removeprefix("from_file:"))
    if ":" in name:
        try:
            obj = import_target(name)
        except (ImportError, AttributeError) as e:
            raise ValueError(f"cannot load scripted responder {name!r}: {e}") from e
        if isinstance(obj, type):
            obj = obj()
        if not callable(obj):
            raise ValueError(f"scripted responder {name!r} is not callable")
        return obj
    raise ValueError(
        f"unknown scripted responder {name!r}; builtins: {', '.join(sorted(BUILTIN_RESPONDERS))}, "
        "'constant:<text>', 'from_file:<path.jsonl>' or 'package.module:callable'"
    )


# --------------------------------------------------------------------------- engine


class ScriptedSpec(EngineSpec):
    """A scripted backbone: a responder instead of a model."""

    script: str | None = Field(
        None, description="a builtin responder (echo, majority, from_file:<path.jsonl>, ...) "
                          "or package.module:callable (a Callable[[ChatRequest], str]); "
                          "None: echo")
    max_model_len: int | None = Field(
        default=None, ge=1, description="the context length: a longer prompt is answered with "
                                        "a context-length error (None: no limit)")

    @field_validator("script")
    @classmethod
    def _named(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            raise ValueError("scripted engine: script must be a non-empty responder name")
        return v

    @classmethod
    def accepted_engine_args(cls) -> set[str] | None:
        """The engine's constructor parameters, but the two the spec gives."""
        from df_ray.engines.spec import signature_params

        names = signature_params(ScriptedEngine.__init__)
        return None if names is None else names - {"model", "responder"}


class ScriptedEngine:
    """Deterministic engine. Faults are keyed by the 1-based index of the request over the
    engine's lifetime (``len(calls)`` after it is recorded).

    Parameters
    ----------
    responder:
        ``Callable[[ChatRequest], str]``, a name (see :func:`resolve_responder`), or a mapping
        from ``ChatRequest.key()`` or the last user message to the response text.
    default:
        for a mapping responder: the text for requests it lacks (None = raise KeyError).
    raise_on_call / hang_on_call / exit_on_call / signal_on_call:
        request indices on which to raise :class:`InjectedFault`, sleep ``hang_s`` seconds
        before answering, ``os._exit(exit_code)`` (simulates a crashed worker), or kill the
        process with the signal ``signal_name`` (default SIGILL: simulates native code that
        faults, such as an instruction the CPU lacks).
    signal_on_start / raise_on_start:
        kill the process with ``signal_name`` in the start-up smoke test, or raise
        :class:`InjectedFault` with this message from the constructor.
    fault_marker:
        a file path; when given, the faults fire only while the file does not exist and the
        engine creates it on firing, so a restarted worker (fresh counters) does not fault again.
    count_fault:
        ``"raise"``: ``count_tokens`` raises :class:`InjectedFault`; ``"exit"``: it exits the
        process (a replica that dies while counting tokens).
    max_prompt_tokens:
        prompts with more (whitespace) tokens get ``Completion(error="context_length_exceeded
        ...")`` instead of an answer.
    latency_s:
        sleep this long per request (throughput / timeout tests).
    """

    #: count_tokens may run while generate() is in progress (a pure function / an HTTP call).
    concurrent_tokenize = True

    def __init__(
        self,
        model: str = "scripted",
        responder: Responder | Mapping[str, str] | str = echo,
        *,
        default: str | None = None,
        raise_on_call: int | Iterable[int] | None = None,
        hang_on_call: int | Iterable[int] | None = None,
        hang_s: float = 3600.0,
        exit_on_call: int | Iterable[int] | None = None,
        exit_code: int = 17,
        signal_on_call: int | Iterable[int] | None = None,
        signal_on_start: bool = False,
        signal_name: str = "SIGILL",
        raise_on_start: str | None = None,
        fault_marker: str | Path | None = None,
        count_fault: str | None = None,
        max_prompt_tokens: int | None = None,
        latency_s: float = 0.0,
    ) -> None:
        self.model = model
        if isinstance(responder, str):
            responder = resolve_responder(responder)
        if isinstance(responder, Mapping):
            table = dict(responder)

            def respond(request: ChatRequest) -> str:
                for k in (request.key(), last_user_content(request)):
                    if k in table:
                        return table[k]
                if default is not None:
                    return default
                raise KeyError(
                    f"no scripted response for prompt {last_user_content(request)[:80]!r}"
                )

            self.responder: Responder = respond
        else:
            self.responder = responder
        self.raise_on_call = _as_set(raise_on_call)
        self.hang_on_call = _as_set(hang_on_call)
        self.hang_s = float(hang_s)
        self.exit_on_call = _as_set(exit_on_call)
        self.exit_code = int(exit_code)
        self.signal_on_call = _as_set(signal_on_call)
        self.signal_on_start = bool(signal_on_start)
        self.signal = signal.Signals[signal_name]  # KeyError names a bad signal at once
        self.fault_marker = Path(fault_marker) if fault_marker is not None else None
        if count_fault not in (None, "raise", "exit"):
            raise ValueError(f"count_fault must be 'raise' or 'exit', not {count_fault!r}")
        self.count_fault = count_fault
        self.max_prompt_tokens = max_prompt_tokens
        self.latency_s = float(latency_s)
        self.calls: list[ChatRequest] = []
        self.batches: list[int] = []  # size of every generate() batch
        self._lock = threading.Lock()
        if raise_on_start is not None and self._fault_armed():
            raise InjectedFault(raise_on_start)

    Spec = ScriptedSpec

    @classmethod
    def from_spec(cls, spec: ScriptedSpec) -> ScriptedEngine:
        """The engine of an EngineSpec of kind ``scripted``."""
        kwargs = dict(spec.engine_args)
        if spec.max_model_len is not None:
            kwargs.setdefault("max_prompt_tokens", spec.max_model_len)
        return cls(spec.model, spec.script or "echo", **kwargs)

    # -- Engine protocol

    def smoke_test(self) -> None:
        """The start-up check engine replicas make (no responder call, not in ``calls``)."""
        if self.signal_on_start and self._fault_armed():
            signal.raise_signal(self.signal)

    def count_tokens(self, text: str) -> int:
        if self.count_fault == "raise":
            raise InjectedFault("injected failure counting tokens")
        if self.count_fault == "exit":
            os._exit(self.exit_code)
        return whitespace_tokens(text)

    def prompt_tokens(self, request: ChatRequest) -> int:
        return sum(whitespace_tokens(m.content) for m in request.messages)

    def generate(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        with self._lock:
            self.batches.append(len(requests))
        return [self._one(r) for r in requests]

    # -- helpers

    @property
    def n_calls(self) -> int:
        return len(self.calls)

    def prompts(self) -> list[str]:
        """The last user message of every served request, in order."""
        return [last_user_content(r) for r in self.calls]

    def reset(self) -> None:
        with self._lock:
            self.calls.clear()
            self.batches.clear()

    def _fault_armed(self) -> bool:
        if self.fault_marker is None:
            return True
        if self.fault_marker.exists():
            return False
        self.fault_marker.parent.mkdir(parents=True, exist_ok=True)
        self.fault_marker.touch()
        return True

    def _one(self, request: ChatRequest) -> Completion:
        with self._lock:
            self.calls.append(request)
            n = len(self.calls)
        if n in self.exit_on_call and self._fault_armed():
            os._exit(self.exit_code)
        if n in self.signal_on_call and self._fault_armed():
            signal.raise_signal(self.signal)  # as native code would: SIGILL, SIGSEGV, ...
        if n in self.raise_on_call and self._fault_armed():
            raise InjectedFault(f"injected failure on call {n}")
        if n in self.hang_on_call and self._fault_armed():
            time.sleep(self.hang_s)
        if self.latency_s:
            time.sleep(self.latency_s)
        refused = unsupported_sampling(request, "scripted")
        if refused is not None:
            return refused
        n_prompt = self.prompt_tokens(request)
        if self.max_prompt_tokens is not None and n_prompt > self.max_prompt_tokens:
            return Completion(
                text="",
                prompt_tokens=n_prompt,
                completion_tokens=0,
                error=f"{CONTEXT_LENGTH_ERROR}: prompt has {n_prompt} tokens, "
                f"limit {self.max_prompt_tokens}",
            )
        text = self.responder(request)
        text = _apply_stop(text, request.sampling.stop)
        words = text.split()
        finish = "stop"
        if len(words) > request.sampling.max_tokens:
            # Truncate at the max_tokens-th word, keeping the original spacing before it.
            text = _first_words(text, request.sampling.max_tokens)
            finish = "length"
        return Completion(
            text=text, prompt_tokens=n_prompt, completion_tokens=whitespace_tokens(text),
            finish_reason=finish,
        )


def _apply_stop(text: str, stop: Sequence[str]) -> str:
    cut = len(text)
    for s in stop:
        if s:
            i = text.find(s)
            if i != -1:
                cut = min(cut, i)
    return text[:cut]


def _first_words(text: str, n: int) -> str:
    if n <= 0:
        return ""
    matches = list(re.finditer(r"\S+", text))
    return text[: matches[n - 1].end()]
