"""The one narrow interface every engine implements: chat requests in, texts and token counts out.

Requests are frozen values (model, revision, messages, sampling, seed); their content hash is
the generation cache key, so two configurations that ask the same thing share one call.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class Message:
    role: str  # "system" | "user" | "assistant"
    content: str


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How a request is sampled. ``ignore_eos``: generate exactly ``max_tokens`` tokens,
    past the end of sequence (throughput measurements); engines that cannot honour it
    answer with an ``unsupported_sampling`` error (see :func:`unsupported_sampling`)."""

    temperature: float = 0.7
    top_p: float = 1.0
    max_tokens: int = 512
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False

    def to_dict(self) -> dict:
        """The JSON form. A field added after the cache keys were first written is left out
        at its default, so the requests made before it keep their keys."""
        d: dict[str, Any] = {"temperature": self.temperature, "top_p": self.top_p,
                             "max_tokens": self.max_tokens, "stop": list(self.stop)}
        if self.ignore_eos:
            d["ignore_eos"] = True
        return d


#: ``json.dumps(..., sort_keys=True, ensure_ascii=False, separators=(",", ":"))``, the
#: encoder built once (json.dumps builds one per call when given options).
_KEY_JSON = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """One LLM call. ``model`` is the model the engine serves (e.g. a HF id); ``backbone``
    the configuration's backbone the call is bound to (the engine client sends the request
    there; several backbones may serve one model). The backbone is routing, not content: it
    is not part of the cache key, and two requests that differ only in it are equal."""

    model: str
    messages: tuple[Message, ...]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int = 0
    revision: str | None = None
    backbone: str | None = field(default=None, compare=False)
    #: How a model without a chat template gets this prompt: "completion" (df_ray's
    #: "Question: ... Answer:"), "chatml" (Graph-of-Agents' rendering); None: the engine's
    #: completion prompt. A model with a chat template ignores it. Part of the key when set.
    no_template: str | None = None
    #: The key, once computed (:meth:`key`): a request is keyed by the planner, the driver,
    #: the cache and the engine, and hashing its prompt is most of the stage's work per call.
    _key: str | None = field(default=None, init=False, repr=False, compare=False)

    def to_dict(self) -> dict:
        """The JSON form: the fields in order, ``backbone`` and ``no_template`` only when
        set (requests without them keep their keys)."""
        d: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": m.role, "content": m.content} for m in self.messages],
            "sampling": self.sampling.to_dict(), "seed": self.seed, "revision": self.revision}
        if self.backbone is not None:
            d["backbone"] = self.backbone
        if self.no_template is not None:
            d["no_template"] = self.no_template
        return d

    @classmethod
    def from_dict(cls, d: dict, key: str | None = None) -> ChatRequest:
        """The request of a JSON form; ``key``: its key as the sender computed it (so the
        receiver does not hash the prompt again)."""
        r = cls._from_dict(d)
        if key is not None:
            object.__setattr__(r, "_key", key)
        return r

    @classmethod
    def _from_dict(cls, d: dict) -> ChatRequest:
        s = dict(d.get("sampling") or {})
        s["stop"] = tuple(s.get("stop") or ())
        s["ignore_eos"] = bool(s.get("ignore_eos", False))
        return cls(
            model=d["model"],
            messages=tuple(Message(m["role"], m["content"]) for m in d["messages"]),
            sampling=SamplingParams(**s),
            seed=int(d.get("seed", 0)),
            revision=d.get("revision"),
            backbone=d.get("backbone"),
            no_template=d.get("no_template"),
        )

    def key(self) -> str:
        """Content hash over everything that determines the output (not the backbone);
        computed once per request object."""
        if self._key is None:
            d = self.to_dict()
            d.pop("backbone", None)
            blob = _KEY_JSON.encode(d)
            # surrogatepass: a prompt that quotes an unrepaired output still has one key
            object.__setattr__(self, "_key", hashlib.sha256(
                blob.encode("utf-8", "surrogatepass")).hexdigest())
        return self._key


#: The error every engine gives a request whose prompt exceeds its context length (the
#: engine refuses it without running it; such a call spends no tokens).
CONTEXT_LENGTH_ERROR = "context_length_exceeded"

#: The error an engine gives a request whose sampling it cannot honour (e.g. ``ignore_eos``
#: on an engine that always stops at the end of sequence): final, never retried.
UNSUPPORTED_SAMPLING_ERROR = "unsupported_sampling"


#: The error of a request its engine cancelled at its deadline (the backbone's
#: ``request_timeout_s``): one failed call, final (never retried); its batch-mates and its
#: replica are unaffected.
REQUEST_TIMEOUT_ERROR = "request_timeout"

#: The error of an answer whose token counts cannot be true (negative, not whole numbers,
#: or over :data:`MAX_CALL_TOKENS`): one failed call, so no token metric is ever wrong.
INVALID_TOKENS_ERROR = "invalid_token_counts"

#: The most tokens one call may report, prompt or completion (no model's context is near it).
MAX_CALL_TOKENS = 100_000_000


def timed_out(seconds: float, prompt_tokens: int = 0, completion_tokens: int = 0,
              engine: str = "the engine") -> Completion:
    """The answer of a request cancelled at its deadline (see :data:`REQUEST_TIMEOUT_ERROR`)."""
    return Completion(text="", prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                      error=f"{REQUEST_TIMEOUT_ERROR}: no answer within request_timeout_s "
                      f"{seconds:g} s; {engine} cancelled this request alone")


def token_count_problem(name: str, value: Any) -> str | None:
    """Why ``value`` cannot be a call's ``name`` token count, or None when it can."""
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer() and 0 <= value <= MAX_CALL_TOKENS:
            return None
        return f"{name} {value!r} is not a whole number"
    if value < 0:
        return f"{name} {value} is negative"
    if value > MAX_CALL_TOKENS:
        return f"{name} {value} is over {MAX_CALL_TOKENS:,} tokens"
    return None


def checked_tokens(comp: Completion, engine: str = "the engine") -> Completion:
    """``comp`` when its token counts can be true, else the failed call that says why (an
    impossible count is never recorded: a server's ``prompt_tokens: -50``, a NaN)."""
    problems = [p for p in (token_count_problem("prompt_tokens", comp.prompt_tokens),
                            token_count_problem("completion_tokens", comp.completion_tokens))
                if p is not None]
    if not problems:
        if type(comp.prompt_tokens) is int and type(comp.completion_tokens) is int:
            return comp
        return dataclasses.replace(comp, prompt_tokens=int(comp.prompt_tokens),
                                   completion_tokens=int(comp.completion_tokens))
    return Completion(text="", prompt_tokens=0, completion_tokens=0,
                      error=f"{INVALID_TOKENS_ERROR}: {engine} reported "
                      f"{'; '.join(problems)}", finish_reason=comp.finish_reason)


@dataclass(frozen=True, slots=True)
class Completion:
    """An engine's answer to one request. ``error`` is set (and text empty) when the call failed
    for a reason retrying will not fix (e.g. the prompt exceeds the context length).
    ``finish_reason`` is why the completion ended, as vLLM, llama.cpp and OpenAI-compatible
    servers name it: ``stop`` (end of sequence or a stop string), ``length`` (it hit
    ``max_tokens``: the answer is cut off), None when the engine did not say."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    error: str | None = None
    finish_reason: str | None = None

    @property
    def truncated(self) -> bool:
        """Whether the completion was cut off at ``max_tokens``."""
        return self.finish_reason == "length"

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def unsupported_sampling(request: ChatRequest, engine: str) -> Completion | None:
    """The refusal of a request asking for sampling that ``engine`` (its kind, for the
    message) cannot honour, or None when it asks for none."""
    if not request.sampling.ignore_eos:
        return None
    return Completion(text="", prompt_tokens=0, completion_tokens=0,
                      error=f"{UNSUPPORTED_SAMPLING_ERROR}: the {engine} engine cannot "
                      "ignore the end of sequence (ignore_eos); use a vllm or simulated "
                      "backbone")


def route(request: ChatRequest, backbones: Mapping[str, Any]) -> str:
    """The backbone a request goes to, of ``backbones`` (name -> anything with ``model`` and
    ``revision``, e.g. an EngineSpec): the one its call was bound to (``request.backbone``);
    for a request built without one, the only backbone serving its model and revision."""
    if request.backbone is not None:
        if request.backbone not in backbones:
            raise KeyError(f"no backbone {request.backbone!r} here; backbones: "
                           f"{sorted(backbones)}")
        return request.backbone
    serving = [n for n, s in backbones.items()
               if (s.model, getattr(s, "revision", None)) == (request.model, request.revision)]
    if len(serving) == 1:
        return serving[0]
    if not serving:
        raise KeyError(f"no backbone serves model {request.model!r}")
    raise KeyError(f"backbones {serving} all serve model {request.model!r}: the request must "
                   "name its backbone")


_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def repair_text(text: str) -> tuple[str, int]:
    """``(text as valid UTF-8, surrogates replaced)``: every lone UTF-16 surrogate (what
    ``json.loads`` makes of ``"\\ud800"`` from an OpenAI-compatible server) becomes U+FFFD."""
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    try:
        text.encode("utf-8")
        return text, 0
    except UnicodeEncodeError:
        return _SURROGATE_RE.subn("\ufffd", text)


def valid_text(text: str) -> str:
    """``text`` as valid UTF-8 (see :func:`repair_text`)."""
    return repair_text(text)[0]


def repair_completion(comp: Completion) -> tuple[Completion, int]:
    """The completion with its text made valid UTF-8 (and its token counts checked:
    :func:`checked_tokens`), and how many surrogates were replaced."""
    comp = checked_tokens(comp)
    text, n = repair_text(comp.text)
    err = comp.error
    n_err = 0
    if err is not None:
        err, n_err = repair_text(err)
    if n == 0 and n_err == 0:
        return comp, 0
    return dataclasses.replace(comp, text=text, error=err), n + n_err


@runtime_checkable
class Engine(Protocol):
    """A backbone that serves chat requests in batches."""

    model: str

    def generate(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        """Answer every request, in order. Raises only for engine-level failure (crash)."""
        ...

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` under this engine's own tokenizer."""
        ...
