"""Engine configuration: one validated value that says which backbone to run and how.

A YAML config names an engine per backbone; :func:`df_ray.engines.make_engine` turns the
:class:`EngineSpec` into a live :class:`~df_ray.engines.base.Engine`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

#: Engine kinds: name -> "module:Class" (the class takes an EngineSpec; heavy backends are
#: imported only when their kind is asked for). Adding a kind: one module, one line.
ENGINE_KINDS: dict[str, str] = {
    "embedded": "df_ray.engines.llama_cpp:EmbeddedEngine",
    "vllm": "df_ray.engines.vllm:VLLMEngine",
    "openai": "df_ray.engines.openai_http:OpenAIEngine",
    "scripted": "df_ray.engines.scripted:ScriptedEngine",
    # GPU-engine timing (continuous batching, variable completion lengths) on CPU, for
    # throughput studies.
    "simulated": "df_ray.engines.simulated:SimulatedEngine",
    # A backbone deployed as a shared Ray Serve application (`df-ray serve`), called through
    # its DeploymentHandle.
    "serve": "df_ray.serving.engine:ServedEngine",
}

#: Engine kinds whose backbones are served from outside the job (kind -> module). When a
#: job has such a backbone, the module's ``make_pool(backbones)`` and ``make_client(handles,
#: specs, retries)`` build its engine pool and its stages' clients (job-owned engines for the
#: other backbones, through `df_ray.pipeline.engine_pool`). The shared service plugs in here.
POOL_PROVIDERS: dict[str, str] = {"serve": "df_ray.serving.client"}

EngineKind = str


def one_of(names) -> str:
    """``'a', 'b' or 'c'``: registered names as validation messages list them."""
    names = [repr(n) for n in names]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"

#: Sequences vLLM schedules at once when nothing says otherwise (its default off H100/H200).
VLLM_DEFAULT_SEQS = 256
#: Sequences the embedded engine decodes together by default (``n_parallel``).
EMBEDDED_DEFAULT_PARALLEL = 8
#: Sequences the simulated continuous-batching engine runs at once by default.
SIMULATED_DEFAULT_CAPACITY = 64
#: The largest batch handed to an engine that answers whole batches, by default.
STATIC_BATCH_SIZE = 32

#: Models the embedded (llama.cpp) engine can run, each shipped in a PyPI package.
EMBEDDED_MODELS: tuple[str, ...] = (
    "smollm2-135m-instruct",
    "gemma3-270m",
    "qwen25-coder-0.5b-instruct",
    "qwen25-coder-1.5b-instruct",
)


class EngineSpec(BaseModel):
    """How to run one backbone.

    Fields that do not apply to a kind are ignored by it (e.g. ``base_url`` for ``vllm``),
    except where a validator says otherwise.
    """

    model_config = ConfigDict(extra="forbid")

    kind: EngineKind
    #: HF id (vllm/openai), a served model name (openai), a known embedded name, or any label
    #: (scripted). For ``serve``: the model the deployed backbone serves (checked at start;
    #: it is part of every request's cache key, so served and job-owned engines of one model
    #: share the generation cache).
    model: str = Field(min_length=1)
    revision: str | None = None
    dtype: str = "auto"
    max_model_len: int | None = Field(default=None, ge=1)
    tensor_parallel_size: int = Field(default=1, ge=1)
    gpu_memory_utilization: float = Field(default=0.9, gt=0.0, le=1.0)
    #: Extra keyword arguments passed to the backend's constructor (vllm.LLM, llama_cpp.Llama).
    engine_args: dict[str, Any] = Field(default_factory=dict)
    #: openai: base URL of an OpenAI-compatible server, e.g. http://host:8000/v1
    base_url: str | None = None
    #: openai: environment variable holding the API key (unset variable = no auth header).
    api_key_env: str = "OPENAI_API_KEY"
    #: serve: the Ray Serve application of a backbone deployed with ``df-ray serve`` (None =
    #: the backbone's own name in the config).
    app: str | None = None
    #: serve: the engine kind behind the service (None = not checked). Calibration files
    #: match agents by engine kind and model, so a served vllm backbone with ``engine: vllm``
    #: finds the files fitted with job-owned vLLM engines, and vice versa.
    engine: str | None = None
    #: embedded: llama.cpp threads (None = 1; reserve as many CPUs, see resolved_num_cpus).
    n_threads: int | None = Field(default=None, ge=1)
    #: embedded: context window in tokens.
    n_ctx: int = Field(default=2048, ge=16)
    #: How messages become a prompt. None = "chat" if the model has a chat template, else
    #: "completion" (a plain "Question: ...\nAnswer:" rendering).
    prompt_format: Literal["chat", "completion"] | None = None
    #: scripted: a builtin responder name ("echo", "majority", "from_file:<path.jsonl>", ...)
    #: or "package.module:callable" (a Callable[[ChatRequest], str]).
    script: str | None = None
    #: Engine replicas (actors) for this backbone in the pipeline (at most 1024:
    #: a larger count is a typo, and Ray would keep starting actors for it).
    replicas: int = Field(default=1, ge=1, le=1024)
    #: GPUs per replica. None -> 1 for vllm (times tensor_parallel_size), 0 otherwise.
    num_gpus: float | None = Field(default=None, ge=0.0)
    #: The most requests one replica works on at once. For an engine that batches
    #: continuously it is that engine's own setting, given only to change it: vLLM's
    #: ``max_num_seqs`` (None: vLLM's default, 1024 sequences on an H100/H200, 256 on other
    #: GPUs and on CPU) and the embedded engine's ``n_parallel`` (None: 8); ``engine_args``
    #: naming them win. For an engine that answers whole batches (scripted, openai) it is
    #: the largest batch (None: 32). It never caps a replica below what its engine schedules.
    max_batch_size: int | None = Field(default=None, ge=1, le=1_000_000)
    request_timeout_s: float = Field(default=600.0, gt=0.0)
    #: A replica that Ray restarts more often than this within ``restart_window_s`` seconds
    #: is crash-looping: the job stops with the cause instead of restarting it forever.
    max_restarts: int = Field(default=3, ge=0)
    restart_window_s: float = Field(default=600.0, gt=0.0)

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, v: str) -> str:
        if v not in ENGINE_KINDS:
            raise ValueError(f"unknown engine kind {v!r}; allowed: {one_of(ENGINE_KINDS)}")
        return v

    @model_validator(mode="after")
    def _check_kind(self) -> EngineSpec:
        if self.kind == "openai" and not self.base_url:
            raise ValueError(
                "engine kind 'openai' requires base_url (e.g. 'http://localhost:8000/v1')"
            )
        if (
            self.kind == "openai"
            and self.base_url
            and not self.base_url.startswith(("http://", "https://"))
        ):
            raise ValueError(f"base_url must start with http:// or https://, got {self.base_url!r}")
        if self.kind == "embedded" and self.model not in EMBEDDED_MODELS:
            raise ValueError(
                f"embedded model must be one of {', '.join(EMBEDDED_MODELS)}; got {self.model!r} "
                "(use kind 'vllm' or 'openai' for other models)"
            )
        if self.kind == "scripted" and self.script is not None and not self.script.strip():
            raise ValueError("scripted engine: script must be a non-empty responder name")
        if self.kind != "serve" and (self.app is not None or self.engine is not None):
            raise ValueError(f"app and engine are only valid for kind 'serve', not {self.kind!r}")
        if self.engine is not None and (self.engine not in ENGINE_KINDS or self.engine == "serve"):
            kinds = [k for k in ENGINE_KINDS if k != "serve"]
            raise ValueError(f"engine must be one of {one_of(kinds)}, not {self.engine!r}")
        if self.kind != "scripted" and self.script is not None:
            raise ValueError(f"script is only valid for kind 'scripted', not {self.kind!r}")
        if (
            self.kind == "vllm"
            and self.num_gpus is not None
            and self.num_gpus > 0
            and self.num_gpus < self.tensor_parallel_size
        ):
            raise ValueError(
                f"num_gpus={self.num_gpus} is less than tensor_parallel_size="
                f"{self.tensor_parallel_size}"
            )
        return self

    @property
    def identity_kind(self) -> str:
        """The engine kind that produced the outputs (a served backbone: the one behind it)."""
        return (self.engine or self.kind) if self.kind == "serve" else self.kind

    @property
    def resolved_num_gpus(self) -> float:
        """GPUs one replica needs (the Ray actor's ``num_gpus``)."""
        if self.num_gpus is not None:
            return self.num_gpus
        if self.kind == "serve":  # the service's replicas hold the GPUs, not the job
            return 0.0
        return float(self.tensor_parallel_size) if self.kind == "vllm" else 0.0

    @property
    def capacity(self) -> int:
        """Requests one replica works on at once, as far as the spec says (a running replica
        reports the engine's own figure: ``EnginePool.capacities``)."""
        if self.kind == "vllm":
            return int(self.engine_args.get("max_num_seqs") or self.max_batch_size
                       or VLLM_DEFAULT_SEQS)
        if self.kind == "embedded":
            return int(self.engine_args.get("n_parallel") or self.max_batch_size
                       or EMBEDDED_DEFAULT_PARALLEL)
        if self.kind == "simulated":
            return int(self.engine_args.get("capacity") or self.max_batch_size
                       or SIMULATED_DEFAULT_CAPACITY)
        return self.batch_size_cap

    @property
    def batch_size_cap(self) -> int:
        """The largest batch a replica hands an engine that answers whole batches."""
        return self.max_batch_size or STATIC_BATCH_SIZE

    @property
    def resolved_num_cpus(self) -> float:
        """CPUs one replica should reserve (the Ray actor's ``num_cpus``). The embedded engine
        needs one per llama.cpp thread: its threads spin-wait, and an oversubscribed CPU makes
        them crawl (observed: 10x slower and more with 2 threads under a load of 40 on 2 cores).
        """
        if self.kind == "embedded":
            return float(self.n_threads or 1)
        return 1.0
