"""Engine configuration: one validated value that says which backbone to run and how.

A YAML config names an engine per backbone. :class:`EngineSpec` holds what every kind
shares (model, replicas, timeouts, ...); each engine declares its kind's own fields,
validation, Ray resources and capacity in a subclass, its ``Spec`` (``VLLMSpec`` beside the
vLLM engine, ``LlamaCppSpec`` beside the embedded one, ...). A backbone mapping is validated
with the ``Spec`` of the engine its ``kind`` names in :data:`ENGINE_KINDS` (a discriminated
union on ``kind``, open to kinds registered at run time), and
:func:`df_ray.engines.make_engine` turns the spec into a live engine.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from df_ray.targets import import_target

#: Engine kinds: name -> "module:Class" of the engine (it takes its kind's spec; heavy
#: backends are imported only when an engine starts). The class's ``Spec`` is the kind's
#: spec (``EngineSpec`` itself when it has no settings of its own). Adding a kind: one
#: module, one line.
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

EngineKind = str

#: The largest batch handed to an engine that answers whole batches, by default.
STATIC_BATCH_SIZE = 32

#: Fields of the one flat spec that preceded the per-kind specs, at their defaults. A
#: configuration's fingerprint hashes every backbone with these beside its own fields
#: (:meth:`EngineSpec.fingerprint_fields`), so configurations keep the fingerprint they had
#: (finished runs are recognised by it).
FLAT_SPEC_DEFAULTS: dict[str, Any] = {
    "dtype": "auto", "max_model_len": None, "tensor_parallel_size": 1,
    "gpu_memory_utilization": 0.9, "base_url": None, "api_key_env": "OPENAI_API_KEY",
    "app": None, "engine": None, "n_threads": None, "n_ctx": 2048, "script": None,
}


def one_of(names: Iterable[str]) -> str:
    """``'a', 'b' or 'c'``: registered names as validation messages list them."""
    names = [repr(n) for n in names]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def register_engine_kind(kind: str, target: str, *, replace: bool = False) -> None:
    """Register an engine kind ("module:Class" of its engine) under ``kind`` (a plugin's one
    line); a taken kind is refused (``df_ray.errors.RegistryError``) unless ``replace``."""
    from df_ray.errors import register_name

    register_name(ENGINE_KINDS, kind, target, "engine kind", replace=replace)


def engine_target(kind: str) -> str:
    """The ``"module:Class"`` registered for ``kind``: read in the driver, where a run plan
    keeps it (``RunPlan.engines``) for the workers that build the engine."""
    if kind not in ENGINE_KINDS:
        raise ValueError(f"unknown engine kind {kind!r}; allowed: {one_of(ENGINE_KINDS)}")
    return ENGINE_KINDS[kind]


def engine_targets(specs: Iterable[EngineSpec], known: Mapping[str, str] | None = None
                   ) -> dict[str, str]:
    """Each engine kind of ``specs`` -> its ``"module:Class"``: ``known``'s (a run plan's)
    where it names the kind, else the registry's, read here in the driver. Workers (a job's
    engine actors, a Serve deployment's replicas) build from these, never from a registry."""
    known = known or {}
    return {s.kind: known.get(s.kind) or engine_target(s.kind) for s in specs}


def engine_class(kind: str, target: str | None = None) -> type:
    """The engine class of ``kind``: ``target``'s (a plan's, in a worker) or the one
    registered (its module imported; the module imports its heavy backend only when an
    engine is built)."""
    return import_target(target or engine_target(kind))


def spec_class(kind: str, target: str | None = None) -> type[EngineSpec]:
    """The spec class of an engine kind (of ``target``'s class when given): its engine's
    ``Spec``, else :class:`EngineSpec`."""
    spec = getattr(engine_class(kind, target), "Spec", EngineSpec)
    if not (isinstance(spec, type) and issubclass(spec, EngineSpec)):
        raise TypeError(f"engine kind {kind!r}: its Spec must subclass EngineSpec, not {spec!r}")
    return spec


#: The engine class a spec being validated belongs to (:func:`validate_spec`).
_TARGET: ContextVar[str | None] = ContextVar("engine_target", default=None)


def validate_spec(data: Any, target: str | None = None) -> EngineSpec:
    """``data`` validated into the spec of its kind: of the engine class ``target`` names
    (``"module:Class"``: a run plan's, in a worker, which reads no registry), else of the
    kind's registry line."""
    token = _TARGET.set(target)
    try:
        return EngineSpec.model_validate(data)
    finally:
        _TARGET.reset(token)


def make_spec(**fields: Any) -> EngineSpec:
    """The spec of ``fields['kind']``, validated: ``make_spec(kind="vllm", model=...)``
    (the same as ``EngineSpec.model_validate({...})``)."""
    return EngineSpec.model_validate(fields)


def _kinds_with(field: str) -> list[str]:
    """The registered kinds that have ``field`` (kinds whose module fails to import are
    left out: this only improves a message)."""
    out = []
    for kind in ENGINE_KINDS:
        try:
            if field in spec_class(kind).model_fields:
                out.append(kind)
        except Exception:
            continue
    return out


class EngineSpec(BaseModel):
    """How to run one backbone: the settings every engine kind has.

    A kind's own settings live in its subclass; a setting of another kind is refused,
    naming the kinds that have it. Validating a mapping (``EngineSpec.model_validate``, a
    config's ``backbones``) gives the instance of the kind's class; so does
    :func:`make_spec`. The methods below are what the pipeline and the serving layer ask a
    spec (resources, capacity, identity), each kind answering for itself.
    """

    model_config = ConfigDict(extra="forbid")

    #: Served from outside the job (a deployed service): ``df-ray serve`` refuses to deploy
    #: such a backbone again, and the job passes it no engine arguments.
    served: ClassVar[bool] = False
    #: Deployed by ``df-ray serve`` through ``ray.serve.llm`` (an OpenAI-compatible vLLM
    #: app, from the spec's ``engine_kwargs()``) instead of df_ray's own EngineServer.
    serve_llm: ClassVar[bool] = False
    #: The module that builds the engine pool and the stages' clients of a job with a
    #: backbone of this kind (its ``make_pool(backbones)`` and ``make_client(handles, specs,
    #: retries)``), for kinds served from outside the job; None: the job's own
    #: `df_ray.pipeline.engine_pool`. The shared service plugs in here.
    pool_provider: ClassVar[str | None] = None
    #: The ``engine_args`` name that sets how many requests an engine of this kind runs at
    #: once (vllm: ``max_num_seqs``), and that figure when neither it nor ``max_batch_size``
    #: is given; None: the kind's engine answers whole batches of ``batch_size_cap``.
    capacity_arg: ClassVar[str | None] = None
    default_capacity: ClassVar[int] = STATIC_BATCH_SIZE

    kind: EngineKind = Field(description="the engine kind: one of `df-ray list`'s engine kinds "
                                         "(embedded, vllm, openai, scripted, simulated, serve, "
                                         "or one a plugin registers)")
    model: str = Field(
        min_length=1,
        description="the model: an HF id (vllm, openai), a served model name (openai), a "
                    "packaged name (embedded) or any label (scripted); for serve, the model "
                    "the deployed backbone serves (part of every request's cache key, so "
                    "served and job-owned engines of one model share the cache)")
    revision: str | None = Field(None, description="the model's revision (an HF branch, tag "
                                                   "or commit); None: the default branch")
    engine_args: dict[str, Any] = Field(
        default_factory=dict,
        description="extra keyword arguments for the backend's constructor (vllm.LLM, "
                    "llama_cpp.Llama, or the simulated engine's settings)")
    prompt_format: Literal["chat", "completion"] | None = Field(
        None, description="how messages become a prompt; None: chat if the model has a chat "
                          "template, else completion (a plain Question: ... Answer: rendering)")
    replicas: int = Field(
        default=1, ge=1, le=1024,
        description="engine replicas (actors) of this backbone (at most 1024: a larger count "
                    "is a typo, and Ray would keep starting actors for it)")
    num_gpus: float | None = Field(
        default=None, ge=0.0,
        description="GPUs per replica; None: the kind's own figure (vllm: "
                    "tensor_parallel_size, else 0)")
    max_batch_size: int | None = Field(
        default=None, ge=1, le=1_000_000,
        description="the most requests one replica works on at once: for vllm its max_num_seqs "
                    "(None: vLLM's default), for embedded its n_parallel (None: 8), engine_args "
                    "naming them win; for an engine that answers whole batches (scripted, "
                    "openai) the largest batch (None: 32)")
    request_timeout_s: float = Field(
        default=600.0, gt=0.0,
        description="seconds one request may take: its engine cancels it then (one "
                    "failed call, never retried; its batch-mates are unaffected)")
    max_restarts: int = Field(
        default=3, ge=0,
        description="restarts of a replica within restart_window_s after which it is "
                    "crash-looping and the job stops with the cause")
    restart_window_s: float = Field(default=600.0, gt=0.0,
                                    description="the window, in seconds, max_restarts counts in")

    def __init__(self, /, **data: Any) -> None:
        if type(self) is EngineSpec:
            raise TypeError("EngineSpec holds the settings every engine kind shares; build a "
                            "backbone's spec with make_spec(kind=..., ...) or "
                            "EngineSpec.model_validate({...})")
        super().__init__(**data)

    @model_validator(mode="wrap")
    @classmethod
    def _of_its_kind(cls, data: Any, handler: Any) -> Any:
        """A mapping is validated by its kind's class, which must have every key (the class
        of :func:`validate_spec`'s target, else of the kind's registry line)."""
        if not isinstance(data, dict) or "kind" not in data:
            return handler(data)
        kind = data["kind"]
        if not isinstance(kind, str):
            raise ValueError(f"kind must be a string naming an engine kind "
                             f"({one_of(ENGINE_KINDS)}), not {kind!r}")
        own = spec_class(kind, _TARGET.get())
        if cls is EngineSpec and own is not EngineSpec:
            return own.model_validate(data)
        if not issubclass(own, cls):
            raise ValueError(f"kind {kind!r} is validated by {own.__name__}, not {cls.__name__}")
        for key in data:
            if key not in own.model_fields:
                others = [k for k in _kinds_with(key) if k != kind]
                where = (f"it is a setting of kind {one_of(others)}" if others
                         else "no engine kind has it")
                mine = [f for f in own.model_fields if f not in EngineSpec.model_fields]
                has = (f"has {one_of(mine).replace(' or ', ' and ')} of its own" if mine
                       else "has no settings of its own")
                raise ValueError(f"{key} is not a setting of kind {kind!r} ({where}); kind "
                                 f"{kind!r} {has}, besides those every kind has")
        return handler(data)

    # -- what the pipeline and the serving layer ask a spec

    @property
    def identity_kind(self) -> str:
        """The engine kind that produced the outputs (a served backbone: the one behind it).
        Calibration files match agents by it."""
        return self.kind

    def default_num_gpus(self) -> float:
        """GPUs one replica needs when ``num_gpus`` is not given."""
        return 0.0

    @property
    def resolved_num_gpus(self) -> float:
        """GPUs one replica needs (the Ray actor's ``num_gpus``)."""
        return self.num_gpus if self.num_gpus is not None else self.default_num_gpus()

    @property
    def resolved_num_cpus(self) -> float:
        """CPUs one replica computes with: what a Serve deployment of it reserves."""
        return 1.0

    def ray_resources(self) -> dict[str, float]:
        """Ray resources of one job-owned replica (its actor's options). An engine that
        waits on a GPU or a server reserves no CPU; one that computes on CPU threads says so."""
        return {"num_gpus": self.resolved_num_gpus, "num_cpus": 0.0}

    @property
    def batch_size_cap(self) -> int:
        """The largest batch a replica hands an engine that answers whole batches."""
        return self.max_batch_size or STATIC_BATCH_SIZE

    @property
    def capacity(self) -> int:
        """Requests one replica works on at once, as far as the spec says (a running replica
        reports the engine's own figure: ``EnginePool.capacities``): the kind's
        ``capacity_arg`` in ``engine_args``, else ``max_batch_size``, else the kind's
        ``default_capacity``."""
        own = self.engine_args.get(self.capacity_arg) if self.capacity_arg else None
        return int(own or self.max_batch_size or self.default_capacity)

    @classmethod
    def accepted_engine_args(cls) -> set[str] | None:
        """The ``engine_args`` names the kind accepts; None when they cannot be known here
        (the engine's package is not installed on this machine, or the kind does not say)."""
        return None

    def fingerprint_fields(self) -> dict[str, Any]:
        """What a configuration's fingerprint hashes of this backbone: its settings (how
        failures are policed changes no result), over :data:`FLAT_SPEC_DEFAULTS`."""
        own = self.model_dump(mode="json", exclude={"max_restarts", "restart_window_s"})
        return {**FLAT_SPEC_DEFAULTS, **own}


def signature_params(fn: Callable) -> set[str] | None:
    """The keyword parameters of ``fn``; None when it takes any (``**kwargs``) or has no
    signature to read."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values()):
        return None  # takes anything
    return {n for n, p in sig.parameters.items()
            if n != "self" and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                          inspect.Parameter.KEYWORD_ONLY)}
