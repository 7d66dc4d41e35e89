"""OpenAI-compatible HTTP client engine (``vllm serve``, a Ray Serve deployment, any
``/v1/chat/completions`` server).

Each request is sent as it arrives (``submit``: a thread pool over one pooled ``httpx.Client``),
so a slow request holds up no other. Transport errors, 429 and 5xx are retried with exponential
backoff, or after the server's ``Retry-After`` (seconds or an HTTP date, at most
``max_retry_after_s``, default 60), a bounded number of times; after that the engine raises
:class:`EngineError` (an engine-level failure). Every request has one deadline,
``request_timeout_s`` from when it is sent, over all its attempts and over the whole answer: a
server that never answers, or trickles its answer a byte at a time, gets that request
cancelled alone (its connection closed) and answered with a ``request_timeout`` error, one
failed call. A 400/413/422 answer (the prompt is
over the context length, or the server otherwise rejects this one request) becomes a
``Completion(error=...)``: retrying would not fix it. Other 4xx (bad key, unknown model) raise.

Token counts come from the response's ``usage``; an impossible one (negative, not a whole
number, absurdly large) makes the answer a failed call (``invalid_token_counts``). ``count_tokens`` uses the server's
``POST /tokenize`` (vLLM serves it at the root, next to ``/v1``); when the server has none, it
falls back to an approximation of one token per 4 characters (``approximate_tokens``), and
``tokenize_available`` is False.

``engine_args`` options: ``max_retries`` (4), ``backoff_s`` (0.5, doubled per retry,
capped at 8 s), ``concurrency`` (``max_batch_size``), ``extra_body`` (merged into every request
body, e.g. ``{"top_k": 20}``), ``tokenize_url`` (override the tokenize endpoint).
"""

from __future__ import annotations

import email.utils
import json
import math
import os
import random
import re
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import httpx
from pydantic import Field, field_validator, model_validator

from df_ray.engines.base import (
    CONTEXT_LENGTH_ERROR,
    ChatRequest,
    Completion,
    checked_tokens,
    timed_out,
    unsupported_sampling,
)
from df_ray.engines.spec import EngineSpec

_CTX_WORDS = ("context length", "context_length", "maximum context", "too long", "max_model_len")
_PROMPT_TOKENS_RE = re.compile(r"(\d+) (?:tokens )?in the messages|prompt \(?(?:length )?(\d+)")

_ALLOWED_ARGS = {"max_retries", "backoff_s", "concurrency", "extra_body", "tokenize_url",
                 "max_retry_after_s"}

#: The most seconds a ``Retry-After`` is waited, unless ``max_retry_after_s`` says otherwise.
MAX_RETRY_AFTER_S = 60.0



class EngineError(RuntimeError):
    """The server could not be reached or kept failing after the retries."""


def approximate_tokens(text: str) -> int:
    """Fallback token count: one token per 4 characters (rounded up)."""
    return (len(text) + 3) // 4


class OpenAISpec(EngineSpec):
    """A backbone behind an OpenAI-compatible server."""

    base_url: str = Field(description="the server's base URL, e.g. http://host:8000/v1")
    api_key_env: str = Field("OPENAI_API_KEY",
                             description="the environment variable holding the API key (an "
                                         "unset variable: no auth header)")

    @model_validator(mode="before")
    @classmethod
    def _needs_url(cls, data: Any) -> Any:
        if isinstance(data, dict) and not data.get("base_url"):
            raise ValueError("engine kind 'openai' requires base_url (e.g. "
                             "'http://localhost:8000/v1')")
        return data

    @field_validator("base_url")
    @classmethod
    def _http(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {v!r}")
        return v

    @classmethod
    def accepted_engine_args(cls) -> set[str] | None:
        return set(_ALLOWED_ARGS)


class OpenAIEngine:
    """Client for an OpenAI-compatible chat completions server (see module docstring)."""

    Spec = OpenAISpec

    #: count_tokens may run while generate() is in progress (a pure function / an HTTP call).
    concurrent_tokenize = True

    def __init__(self, spec: OpenAISpec) -> None:
        if not spec.base_url:
            raise ValueError("OpenAIEngine needs spec.base_url")
        unknown = set(spec.engine_args) - _ALLOWED_ARGS
        if unknown:
            raise ValueError(
                f"unknown engine_args for kind 'openai': {sorted(unknown)}; "
                f"allowed: {sorted(_ALLOWED_ARGS)}"
            )
        args = spec.engine_args
        self.spec = spec
        self.model = spec.model
        self.base_url = spec.base_url.rstrip("/")
        self.max_retries = int(args.get("max_retries", 4))
        self.backoff_s = float(args.get("backoff_s", 0.5))
        self.max_retry_after_s = float(args.get("max_retry_after_s", MAX_RETRY_AFTER_S))
        self.timeout_s = float(spec.request_timeout_s)
        self.concurrency = int(args.get("concurrency", spec.batch_size_cap))
        self.extra_body: dict[str, Any] = dict(args.get("extra_body") or {})
        root = re.sub(r"/v1$", "", self.base_url)
        self.tokenize_url: str = args.get("tokenize_url") or f"{root}/tokenize"
        self.tokenize_available: bool | None = None  # unknown until the first count_tokens

        headers = {"Content-Type": "application/json"}
        key = os.environ.get(spec.api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self._client = httpx.Client(
            timeout=httpx.Timeout(
                spec.request_timeout_s, connect=min(30.0, spec.request_timeout_s)
            ),
            limits=httpx.Limits(
                max_connections=self.concurrency, max_keepalive_connections=self.concurrency
            ),
            headers=headers,
        )
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    # -- Engine protocol

    def submit(self, request: ChatRequest) -> Future:
        """Send one request now (on the engine's thread pool); the future gets its answer."""
        return self._executor().submit(self._one, request)

    def generate(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        if len(requests) <= 1:
            return [self._one(r) for r in requests]
        return list(self._executor().map(self._one, requests))

    def count_tokens(self, text: str) -> int:
        if not text:
            return 0
        if self.tokenize_available is not False:
            try:
                r = self._client.post(
                    self.tokenize_url,
                    json={"model": self.model, "prompt": text, "add_special_tokens": False},
                )
            except httpx.TransportError:
                r = None
            if r is not None and r.status_code == 200:
                body = r.json()
                self.tokenize_available = True
                if "count" in body:
                    return int(body["count"])
                return len(body["tokens"])
            if r is not None and r.status_code in (404, 405, 501):
                self.tokenize_available = False
        return approximate_tokens(text)

    # -- lifecycle

    def close(self) -> None:
        with self._pool_lock:
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)
                self._pool = None
        self._client.close()

    def __enter__(self) -> OpenAIEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals

    def _executor(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    max_workers=self.concurrency, thread_name_prefix="df-ray-openai"
                )
            return self._pool

    def _body(self, request: ChatRequest) -> dict[str, Any]:
        s = request.sampling
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": m.role, "content": m.content} for m in request.messages],
            "temperature": s.temperature,
            "top_p": s.top_p,
            "max_tokens": s.max_tokens,
            "seed": request.seed,
            "n": 1,
        }
        if s.stop:
            body["stop"] = list(s.stop)
        body.update(self.extra_body)
        return body

    def _one(self, request: ChatRequest) -> Completion:
        # Servers differ (OpenAI's API has no ignore_eos, some servers drop unknown fields):
        # a measurement that needs exact lengths must not get a silently shorter answer.
        refused = unsupported_sampling(request, "openai")
        if refused is not None:
            return refused
        url = f"{self.base_url}/chat/completions"
        body = self._body(request)
        deadline = time.monotonic() + self.timeout_s
        last: str = ""
        wait_s = 0.0  # before the next attempt
        for attempt in range(self.max_retries + 1):
            if attempt:
                left = deadline - time.monotonic()
                if wait_s >= left:
                    return timed_out(self.timeout_s, engine="the openai engine")
                time.sleep(wait_s)
            answer = self._post(url, body, deadline)
            if answer is None:
                return timed_out(self.timeout_s, engine="the openai engine")
            if isinstance(answer, str):  # a transport error
                last = answer
                wait_s = self._backoff(attempt)
                continue
            status, headers, data = answer
            if status == 200:
                try:
                    payload = json.loads(data)
                except ValueError as e:
                    raise EngineError(f"{url} answered HTTP 200 with a body that is not JSON "
                                      f"({e}): {data[:200]!r}") from None
                return self._parse(payload, request)
            text = data.decode("utf-8", "replace")
            if status == 429 or status >= 500:
                last = f"HTTP {status}: {text[:300]}"
                after = retry_after_s(headers.get("retry-after"))
                wait_s = (min(after, self.max_retry_after_s) if after is not None
                          else self._backoff(attempt))
                continue
            detail = _error_message(text)
            if status in (400, 413, 422):
                return self._rejected(status, detail)
            raise EngineError(f"{url} answered HTTP {status}: {detail}")
        raise EngineError(f"{url} failed after {self.max_retries + 1} attempts; last: {last}")

    def _backoff(self, attempt: int) -> float:
        """Seconds before attempt ``attempt + 1`` when the server did not say (jittered)."""
        delay = min(8.0, self.backoff_s * 2 ** attempt)
        return delay * (0.5 + random.random() / 2)

    def _post(self, url: str, body: dict[str, Any], deadline: float
              ) -> tuple[int, httpx.Headers, bytes] | str | None:
        """One attempt: ``(status, headers, body)``; a transport error's text; None when the
        deadline passed first (the connection is closed, so the server may stop the work)."""
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        timeout = httpx.Timeout(left, connect=min(30.0, left))
        try:
            with self._client.stream("POST", url, json=body, timeout=timeout) as r:
                chunks: list[bytes] = []
                for chunk in r.iter_bytes():  # each read as it comes
                    chunks.append(chunk)
                    if time.monotonic() >= deadline:
                        return None  # a trickling answer: leaving the block closes it
                return r.status_code, r.headers, b"".join(chunks)
        except httpx.TimeoutException as e:
            if time.monotonic() >= deadline - 0.05:
                return None
            return f"{type(e).__name__}: {e}"
        except httpx.TransportError as e:
            return f"{type(e).__name__}: {e}"

    def _parse(self, data: dict[str, Any], request: ChatRequest) -> Completion:
        choice = data["choices"][0]
        text = (choice.get("message") or {}).get("content") or choice.get("text") or ""
        usage = data.get("usage") or {}
        prompt_tokens = usage.get("prompt_tokens")
        completion_tokens = usage.get("completion_tokens")
        if prompt_tokens is None:
            prompt_tokens = sum(self.count_tokens(m.content) for m in request.messages)
        if completion_tokens is None:
            completion_tokens = self.count_tokens(text)
        return checked_tokens(Completion(
            text=text, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
            finish_reason=choice.get("finish_reason"),  # "stop" | "length" | ...
        ), f"the server at {self.base_url}")

    @staticmethod
    def _rejected(status: int, detail: str) -> Completion:
        low = detail.lower()
        kind = CONTEXT_LENGTH_ERROR if any(w in low for w in _CTX_WORDS) else "rejected"
        m = _PROMPT_TOKENS_RE.search(detail)
        n = int(next(g for g in m.groups() if g)) if m else 0
        return Completion(
            text="", prompt_tokens=n, completion_tokens=0, error=f"{kind}: HTTP {status}: {detail}"
        )


def retry_after_s(value: str | None) -> float | None:
    """The seconds a ``Retry-After`` header asks for (delay-seconds or an HTTP date), None when
    absent or unreadable; never negative."""
    if not value:
        return None
    value = value.strip()
    try:
        s = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when is None:
            return None
        s = when.timestamp() - time.time()
    return max(0.0, s) if math.isfinite(s) else None


def _error_message(text: str) -> str:
    try:
        data = json.loads(text)
    except ValueError:
        return text[:500]
    err = data.get("error") if isinstance(data, dict) else None
    if isinstance(err, dict) and err.get("message"):
        return str(err["message"])
    if isinstance(err, str):
        return err
    if isinstance(data, dict) and data.get("message"):
        return str(data["message"])
    if isinstance(data, dict) and data.get("detail"):
        return str(data["detail"])
    return text[:500]
