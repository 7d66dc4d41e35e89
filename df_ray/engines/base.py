"""The one narrow interface every engine implements: chat requests in, texts and token counts out.

Requests are frozen values (model, revision, messages, sampling, seed); their content hash is
the generation cache key, so two configurations that ask the same thing share one call.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class Message:
    role: str  # "system" | "user" | "assistant"
    content: str


@dataclass(frozen=True, slots=True)
class SamplingParams:
    temperature: float = 0.7
    top_p: float = 1.0
    max_tokens: int = 512
    stop: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """One LLM call. ``model`` is the backbone name the engine serves (e.g. a HF id)."""

    model: str
    messages: tuple[Message, ...]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int = 0
    revision: str | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["messages"] = [{"role": m.role, "content": m.content} for m in self.messages]
        d["sampling"]["stop"] = list(self.sampling.stop)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> ChatRequest:
        s = dict(d.get("sampling") or {})
        s["stop"] = tuple(s.get("stop") or ())
        return cls(
            model=d["model"],
            messages=tuple(Message(m["role"], m["content"]) for m in d["messages"]),
            sampling=SamplingParams(**s),
            seed=int(d.get("seed", 0)),
            revision=d.get("revision"),
        )

    def key(self) -> str:
        """Content hash over everything that determines the output."""
        blob = json.dumps(self.to_dict(), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class Completion:
    """An engine's answer to one request. ``error`` is set (and text empty) when the call failed
    for a reason retrying will not fix (e.g. the prompt exceeds the context length)."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    error: str | None = None

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


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
