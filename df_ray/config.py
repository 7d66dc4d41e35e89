"""Run and sweep configuration, validated with pydantic before any engine starts.

A run names a benchmark, the backbones (engines), the agents that use them, a coordinator,
the method and its knobs, and where results go. Every validation error names the field and
the allowed values; `load_config` adds the file name.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SerializeAsAny,
    ValidationError,
    field_validator,
    model_validator,
)

from df_ray.engines.spec import EngineSpec, one_of
from df_ray.errors import ConfigError
from df_ray.experiments.compositions import UnknownCompositionError, composition
from df_ray.experiments.pool import POOL, UnknownBackboneError, card_of, engine_spec
from df_ray.methods import REGISTRY as METHOD_REGISTRY
from df_ray.methods import MethodArgsError, method_class
from df_ray.methods.base import Method, validate_args
from df_ray.tasks import REGISTRY as TASK_REGISTRY

#: The registered names (the registries are the one place a method or a benchmark is listed).
METHODS = tuple(METHOD_REGISTRY)
BENCHMARKS = tuple(TASK_REGISTRY)


def check_name(v: str, what: str = "name") -> str:
    """A configuration or sweep name becomes a folder under results_dir and an MLflow run
    name: refuse what cannot be one (NUL or other control characters, a path separator,
    ``.`` or ``..``, empty)."""
    if not isinstance(v, str) or not v.strip():
        raise ValueError(f"{what} must be a non-empty string")
    bad = sorted({repr(c) for c in v if ord(c) < 32 or c in "/\\\x7f"})
    if bad:
        raise ValueError(f"{what} {v!r} holds {', '.join(bad)}: a name may not hold a path "
                         "separator or a control character (it names a results folder)")
    if v.strip() in (".", ".."):
        raise ValueError(f"{what} {v!r} is not a usable folder name")
    if len(v) > 200:
        raise ValueError(f"{what} is {len(v)} characters long; at most 200")
    return v


#: The longest backbone name or agent id: MLflow keys are at most 250 characters, and these
#: names sit inside parameter and metric keys (``backbones.<name>.engine_args...``,
#: ``truncation_rate.<agent>``).
MAX_LOGGED_NAME = 100

_LOGGED_NAME = re.compile(r"[A-Za-z0-9_\-. :/]+")


def check_logged_name(v: str, what: str) -> str:
    """A name MLflow can log inside a parameter or metric key: letters, digits and
    ``_ - . : /`` or spaces, at most :data:`MAX_LOGGED_NAME` characters (refused at
    validation, naming the rule, not by MLflow after every call was made)."""
    if not _LOGGED_NAME.fullmatch(v):
        bad = sorted({c for c in v if not _LOGGED_NAME.fullmatch(c)})
        raise ValueError(f"{what} {v!r} holds {', '.join(map(repr, bad))}: MLflow logs it in "
                         "parameter names, which may hold only letters, digits, spaces and "
                         "_ - . : /")
    if len(v) > MAX_LOGGED_NAME:
        raise ValueError(f"{what} is {len(v)} characters long; at most {MAX_LOGGED_NAME} (it "
                         "sits inside MLflow parameter names, of at most 250)")
    return v


def moved_keys() -> dict[str, tuple[str, str]]:
    """Top-level config keys that registered methods moved into their method_args: key ->
    (method, Args field)."""
    out: dict[str, tuple[str, str]] = {}
    for name in METHOD_REGISTRY:
        for key, arg in method_class(name).moved_config_keys.items():
            out.setdefault(key, (name, arg))
    return out


def default_cache_root() -> str:
    """The user's own generation cache: ``$DF_RAY_HOME/users/<user>/generations`` (per user,
    df_ray.storage), else ``~/.cache/df_ray/generations``."""
    home = os.environ.get("DF_RAY_HOME")
    if home:
        from df_ray.user_names import current_user

        return os.path.join(home, "users", current_user(), "generations")
    return os.path.join(os.path.expanduser("~"), ".cache", "df_ray", "generations")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AgentConfig(_Strict):
    """One agent: a backbone plus how it is prompted and sampled."""

    id: str = Field(
        min_length=1, max_length=MAX_LOGGED_NAME, pattern=r"^[A-Za-z0-9_.:-]+$",
        description="the agent's id: letters, digits and _ . : - (it names its calibration entry "
                    "and its metrics)")
    backbone: str = Field(
        description="the backbone that answers for it: a name in backbones, or a pool backbone "
                    "(df_ray.experiments.pool)")
    temperature: float = Field(0.7, ge=0.0, le=2.0, description="sampling temperature")
    top_p: float = Field(
        1.0, gt=0.0, le=1.0,
        description="nucleus sampling: the probability mass sampled from")
    max_tokens: int = Field(
        512, ge=1, le=32768,
        description="the agent's completion budget per call (the configuration's max_tokens when "
                    "it sets none of its own)")
    ignore_eos: bool = Field(
        False,
        description="generate exactly max_tokens tokens, past the end of sequence (throughput "
                    "measurements: vllm and simulated backbones; other engines refuse such "
                    "calls)")
    seed: int = Field(
        0,
        description="the agent's own seed, mixed with the run seed into every request's seed")
    system_prompt: str | None = Field(
        None,
        description="a system message before every prompt of the agent (None: none)")
    description: str | None = Field(
        None,
        description="what the agent's backbone is good at (a model card): GoA's node sampling "
                    "shows it to its meta-LLM; filled from the pool for pool backbones; not part "
                    "of the agent's identity")


class CalibrationSettings(_Strict):
    """Where frozen calibration files live, whether the job may fit a missing one, and how
    many held-out samples a fit needs."""

    path: str | None = Field(
        None,
        description="an explicit calibration file; None: looked up in dir by benchmark and "
                    "agents")
    dir: str = Field("calibration", description="the folder of frozen calibration files")
    auto_fit: bool = Field(
        True,
        description="fit a missing calibration on the held-out split before the run (off: a "
                    "missing file stops the run before engines start)")
    limit: int | None = Field(100, ge=1, description="the most held-out samples a fit uses")
    min_samples: int = Field(
        50, ge=1,
        description="the fewest graded held-out samples a calibration may be fitted on (DESIGN: "
                    "50-150); a run that would fit on fewer stops before its test split, a file "
                    "fitted on fewer is refused at load; lower it only for smoke tests")


def default_tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or "sqlite:///mlflow.db"


class TrackingSettings(_Strict):
    """Where runs are logged: MLFLOW_TRACKING_URI when set, else a local sqlite store."""

    uri: str = Field(
        default_factory=default_tracking_uri,
        description="the MLflow tracking URI (default: MLFLOW_TRACKING_URI, else "
                    "sqlite:///mlflow.db)")
    experiment: str = Field("df_ray", description="the MLflow experiment")
    per_user: bool | None = Field(
        None,
        description="log to <user>/<experiment>; None: yes inside a Ray job or with a tracking "
                    "server (a shared store), no with a local store")


class SandboxSettings(_Strict):
    """How generated code is confined (HumanEval). ``strict`` refuses to run without every
    kernel layer (bubblewrap); ``best_effort`` must be chosen explicitly and is recorded in
    the run's MLflow tags (``df_ray.sandbox.isolation``)."""

    isolation: Literal["strict", "best_effort"] = Field(
        "strict",
        description="how generated code is confined: strict refuses to run without every kernel "
                    "layer (bubblewrap); best_effort must be chosen explicitly and is recorded "
                    "in the run's tags")


def _known(what: str, name: str, registry: Mapping[str, Any]) -> str:
    """``name`` if ``registry`` holds it, else the ValueError naming what is allowed."""
    if name not in registry:
        raise ValueError(f"unknown {what} {name!r}; allowed: {one_of(registry)}")
    return name


class RunConfig(_Strict):
    """One configuration: one MLflow run.

    Backbones come from the pool (``df_ray.experiments.pool``): an agent or coordinator whose
    ``backbone`` is a pool name needs no ``backbones`` entry; ``backbones[name]`` may be a
    pool name, or ``{pool: <name>, revision: <commit>, ...}`` to pin or re-route one.
    ``composition`` names a per-benchmark agent set (``df_ray.experiments.compositions``)
    and fills ``agents`` and ``coordinator`` where the configuration does not give them
    (a partial ``coordinator`` mapping, e.g. only ``backbone``, overrides the composition's).
    """

    name: str = Field(
        "run",
        description="the configuration's name: its results folder and MLflow run name")
    benchmark: str = Field(description="the benchmark (df-ray list shows them)")

    @field_validator("name")
    @classmethod
    def _check_name(cls, v: str) -> str:
        return check_name(v, "name")
    split: Literal["test", "calibration"] = Field("test", description="the split evaluated")
    source: str | None = Field(
        None,
        description="a local data file or folder (None: the benchmark's default source)")
    calibration_source: str | None = Field(
        None,
        description="where the calibration split's held-out samples come from when the test "
                    "split is a local file: a local file or folder in one of the benchmark's "
                    "schemas, every test sample removed from it; None: the hub's calibration "
                    "split")
    data_revision: str | None = Field(
        None,
        description="a revision (commit, tag or branch) of the benchmark's hub data set, to pin "
                    "it")
    composition: str | None = Field(
        None,
        description="a per-benchmark agent set (df_ray.experiments.compositions) that fills "
                    "agents and coordinator where the configuration does not give them")
    limit: int | None = Field(
        None, ge=1,
        description="the first N samples of the split (None: all); a test split in its "
                    "file's order (MATH's, GPQA's from a local file) reads only those rows")
    seed: int = Field(
        0,
        description="the run seed: it enters every request's seed, never which samples are in a "
                    "split")
    max_tokens: int | None = Field(
        None, ge=1, le=32768,
        description="the benchmark's completion budget: every agent's and the coordinator's "
                    "max_tokens where the agent does not give its own; None: each agent's own "
                    "(default 512)")
    method: str = Field(
        "darkforest",
        description="the coordination method (df-ray list shows them)")
    method_args: dict[str, Any] = Field(
        default_factory=dict, validate_default=True,
        description="the method's settings, checked against its Args (df-ray list METHOD shows "
                    "them)")
    backbones: dict[str, SerializeAsAny[EngineSpec]] = Field(
        default_factory=dict,
        description="backbone name -> engine spec of its kind (df-ray list KIND shows a kind's "
                    "fields), or a pool name")
    agents: list[AgentConfig] = Field(
        min_length=1,
        description="the agents, each bound to a backbone")
    coordinator: AgentConfig | None = Field(
        None,
        description="the coordinator agent (DarkForest's, GoA's meta-LLM, MoA's aggregator); "
                    "None: the method needs none")
    calibration: CalibrationSettings = Field(
        CalibrationSettings(),
        description="where frozen calibration files live, whether a missing one may be fitted, "
                    "how many held-out samples a fit needs")
    cache_root: str = Field(
        default_factory=default_cache_root,
        description="the generation cache's folder (default: the user's own, "
                    "DF_RAY_HOME/users/<user>/generations)")
    cache_read_from: list[str] = Field(
        default_factory=list,
        description="other writers whose cache entries this run may replay (opt-in; also "
                    "DF_RAY_CACHE_READ_FROM, comma-separated): a user name (their parts in "
                    "cache_root and their own root under DF_RAY_HOME), '*' (every writer's "
                    "parts in cache_root) or a root (a path or URI, read only); an entry "
                    "that differs from another copy of its key is refused")
    cache_user: str | None = Field(
        None,
        description="the name the generation cache's parts are written under, and whose "
                    "parts of cache_root are replayed without opt-in (default: the run's "
                    "user, DF_RAY_USER else USER; not authenticated)")

    @field_validator("cache_read_from")
    @classmethod
    def _check_read_from(cls, v: list[str]) -> list[str]:
        from df_ray.user_names import check_read_from

        return check_read_from(v)

    @field_validator("cache_user")
    @classmethod
    def _check_cache_user(cls, v: str | None) -> str | None:
        from df_ray.user_names import validate_user

        return validate_user(v, "cache_user") if v is not None else None
    cache_compact_parts: int = Field(
        100, ge=0, le=1_000_000,
        description="at a run's end, a cache root holding more than this many parts is compacted "
                    "into one (as df-ray cache compact does); 0: never")
    tracking: TrackingSettings = Field(
        TrackingSettings(),
        description="where runs are logged (MLflow)")
    batch_size: int = Field(
        8, ge=1, le=100_000,
        description="samples per pipeline batch (one stage call)")
    concurrency: int = Field(
        1, ge=1, le=1024,
        description="stage actors; each works on as many batches at once as keep every engine "
                    "replica full, so more actors add cores for parsing and grading, not "
                    "requests in flight")
    results_dir: str = Field(
        "results",
        description="the folder of results (samples.parquet per configuration)")
    max_request_retries: int = Field(
        2, ge=0, le=100,
        description="how many times a failed request is tried again on a replica before it is a "
                    "failed call")
    autoscaling: bool = Field(
        False,
        description="the Ray cluster adds nodes on demand: backbones no node can hold yet are "
                    "started anyway and waited for; off: such a sweep stops before any engine "
                    "starts")
    sandbox: SandboxSettings = Field(
        SandboxSettings(),
        description="how generated code is confined (HumanEval)")
    benchmark_args: dict[str, Any] = Field(
        default_factory=dict,
        description="options of the benchmark's constructor (HumanEval: candidates: behaviour "
                    "keys programs by their outputs on the prompt's examples; default text)")
    max_error_rate: float = Field(
        0.1, ge=0.0, le=1.0,
        description="the share of failed LLM calls (sample errors counted) above which the "
                    "configuration is FAILED: its MLflow run ends FAILED, a rerun runs it again, "
                    "the command exits non-zero")
    plugins: list[str] = Field(
        default_factory=list,
        description="modules imported before the configuration is validated, and by every Ray "
                    "worker before it builds from the plan: a plugin registers its benchmarks, "
                    "answer kinds, methods or engine kinds when imported (docs/running.md, "
                    "Plugins)")
    #: The method and the task, built once per configuration in a process (validation,
    #: preflight, the stage graph and the stage share them), keyed by what builds them.
    _built: dict[str, tuple[Any, Any]] = PrivateAttr(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _moved_knobs(cls, data: Any) -> Any:
        """A method's knobs live in its ``method_args``; a top-level key that a method has
        moved there (DarkForest's ``disclosure``, ``lazy_coordinator``, ...) is an error that
        says where it went."""
        if not isinstance(data, dict):
            return data
        stray = [k for k in data if k not in cls.model_fields]
        if not stray:
            return data
        moved = moved_keys()
        for key in stray:
            if key in moved:
                method, arg = moved[key]
                raise ValueError(
                    f"{key}: {method}'s knobs moved to method_args; write "
                    f"method_args.{arg} (in a sweep: method_args.{arg}: ...) instead of {key}")
        return data

    @field_validator("benchmark")
    @classmethod
    def _known_benchmark(cls, v: str) -> str:
        return _known("benchmark", v, TASK_REGISTRY)

    @field_validator("method")
    @classmethod
    def _known_method(cls, v: str) -> str:
        return _known("method", v, METHOD_REGISTRY)

    @field_validator("method_args")
    @classmethod
    def _method_args(cls, v: dict[str, Any], info: Any) -> dict[str, Any]:
        """Checked against the method's Args, and kept with every field (defaults included),
        so equal settings are equal configurations and every run logs them alike."""
        name = info.data.get("method")
        if name in METHOD_REGISTRY:
            try:
                args = validate_args(name, method_class(name).Args, v)
            except MethodArgsError as e:
                raise ValueError(str(e)) from None
            return args.model_dump(mode="json")
        return v

    @model_validator(mode="before")
    @classmethod
    def _resolve_pool(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        d = dict(data)
        budget = d.get("max_tokens")
        if d.get("composition") is not None:
            try:
                comp = composition(str(d["composition"]))
            except UnknownCompositionError as e:
                raise ValueError(f"composition: {e}") from None
            if budget is not None:  # the benchmark's budget, not the composition's default
                comp = {"agents": [{**a, "max_tokens": budget} for a in comp["agents"]],
                        "coordinator": {**comp["coordinator"], "max_tokens": budget}}
            if "agents" not in d:
                d["agents"] = comp["agents"]
            coord = d.get("coordinator", ...)
            if coord is ...:
                d["coordinator"] = comp["coordinator"]
            elif isinstance(coord, dict) and "id" not in coord:
                d["coordinator"] = {**comp["coordinator"], **coord}
        if budget is not None:
            if isinstance(d.get("agents"), list):
                d["agents"] = [{"max_tokens": budget, **a} if isinstance(a, dict) else a
                               for a in d["agents"]]
            if isinstance(d.get("coordinator"), dict):
                d["coordinator"] = {"max_tokens": budget, **d["coordinator"]}
        members = [a for a in [*(d.get("agents") or []), d.get("coordinator")]
                   if isinstance(a, dict)]
        backbones = dict(d.get("backbones") or {})
        for a in members:
            b = a.get("backbone")
            if isinstance(b, str) and b not in backbones and b in POOL:
                backbones[b] = None
        try:
            d["backbones"] = {n: engine_spec(v, n) for n, v in backbones.items()}
        except UnknownBackboneError as e:
            raise ValueError(f"backbones: {e}") from None
        described = []
        for a in d.get("agents") or []:
            if isinstance(a, dict) and a.get("description") is None:
                spec = d["backbones"].get(a.get("backbone"))
                model = spec.get("model") if isinstance(spec, dict) else getattr(spec, "model", None)
                card = card_of(model) if isinstance(model, str) else None
                if card is not None:
                    a = {**a, "description": card}
            described.append(a)
        if "agents" in d:
            d["agents"] = described
        return d

    @field_validator("backbones")
    @classmethod
    def _some_backbone(cls, v: dict[str, EngineSpec]) -> dict[str, EngineSpec]:
        if not v:
            raise ValueError("at least one backbone is required")
        for name in v:
            check_logged_name(name, "backbone name")
        return v

    @model_validator(mode="after")
    def _usable_paths(self) -> RunConfig:
        """A NUL byte makes a path no operating system call takes: refused here, naming the
        field, instead of a ValueError traceback where the path is first opened."""
        for field, v in (("results_dir", self.results_dir), ("cache_root", self.cache_root),
                         ("tracking.uri", self.tracking.uri), ("source", self.source),
                         ("calibration_source", self.calibration_source),
                         ("calibration.dir", self.calibration.dir),
                         ("calibration.path", self.calibration.path)):
            if isinstance(v, str) and "\x00" in v:
                raise ValueError(f"{field} {v!r} holds a NUL byte ('\\x00'), which no path "
                                 "may hold")
        return self

    @model_validator(mode="after")
    def _references(self) -> RunConfig:
        names = sorted(self.backbones)
        ids = [a.id for a in self.agents]
        if len(set(ids)) != len(ids):
            dup = sorted({i for i in ids if ids.count(i) > 1})
            raise ValueError(f"agents: agent ids must be unique, repeated: {dup}")
        for a in [*self.agents, *([self.coordinator] if self.coordinator else [])]:
            if a.backbone not in self.backbones:
                raise ValueError(
                    f"agent {a.id!r}: backbone {a.backbone!r} is not defined; "
                    f"defined backbones: {names}; pool backbones: {sorted(POOL)}"
                )
        if method_class(self.method).needs_coordinator and self.coordinator is None:
            raise ValueError(f"coordinator: the {self.method} method needs a coordinator agent")
        try:
            self.build_method().check_agents(
                [*ids, *([self.coordinator.id] if self.coordinator else [])])
        except MethodArgsError as e:
            raise ValueError(str(e)) from None
        if self.coordinator is not None and self.coordinator.id in ids:
            raise ValueError(
                f"coordinator: id {self.coordinator.id!r} collides with an agent id; give the "
                "coordinator its own id (it may share a backbone)"
            )
        return self

    # ------------------------------------------------------------------ helpers
    def build_method(self) -> Method:
        """The configured method, built from its validated Args (once: methods keep no
        per-sample state)."""
        key = (self.method, json.dumps(self.method_args, sort_keys=True))
        return self._once("method", key, lambda: method_class(self.method)(self.method_args))

    def build_task(self, cls: type | None = None) -> Any:
        """The configured benchmark with the options this configuration sets (once); ``cls``:
        its class as a resolved plan names it (else the benchmark registry's)."""
        from df_ray.tasks import task_for

        return self._once("task", (self.benchmark, self.sandbox.isolation, self.cache_root,
                                   json.dumps(self.benchmark_args, sort_keys=True)),
                          lambda: task_for(self, cls))

    def _once(self, what: str, key: Any, build: Callable[[], Any]) -> Any:
        # keyed, so a model_copy with other settings does not reuse the original's
        hit = self._built.get(what)
        if hit is None or hit[0] != key:
            hit = (key, build())
            self._built = {**self._built, what: hit}
        return hit[1]

    def __getstate__(self) -> dict[Any, Any]:
        # what was built stays in its process (a task may hold loaded data)
        state = super().__getstate__()
        private = state.get("__pydantic_private__")
        if private and private.get("_built"):
            state = {**state, "__pydantic_private__": {**private, "_built": {}}}
        return state

    def fingerprint(self) -> str:
        """Stable hash of everything that changes results (not where they are written);
        computed once per configuration object (it is frozen; a copy, whose fields may
        differ, computes its own)."""
        return self._once("fingerprint", id(self), self._fingerprint)

    def _fingerprint(self) -> str:
        d = self.model_dump(mode="json", exclude={"tracking", "cache_root", "results_dir", "name",
                                                  "batch_size", "concurrency", "sandbox",
                                                  "max_error_rate", "cache_compact_parts",
                                                  "cache_read_from", "cache_user", "plugins"})
        if not d.get("benchmark_args"):  # at its default it hashes as before it existed
            d.pop("benchmark_args", None)
        if self.method in METHOD_REGISTRY:  # method fields added later, likewise
            d["method_args"] = method_class(self.method).hashed_args(d["method_args"])
        for a in [*d["agents"], *([d["coordinator"]] if d.get("coordinator") else [])]:
            if not a.get("ignore_eos"):  # a field at its default hashes as before it existed
                a.pop("ignore_eos", None)
        d["backbones"] = {n: s.fingerprint_fields() for n, s in self.backbones.items()}
        # where files live changes no result: the same sweep from another DF_RAY_HOME (or
        # directory) is the same configuration; an explicit file counts by its name only
        cal = d.get("calibration") or {}
        cal.pop("dir", None)
        if cal.get("path"):
            cal["path"] = os.path.basename(str(cal["path"]))
        blob = json.dumps(d, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def agent_identities(self) -> dict[str, dict[str, Any]]:
        """What each agent is, for matching calibration files: its backbone's engine and
        model, and how it is prompted and sampled (not its seed, not execution knobs)."""
        out = {}
        for a in self.agents:
            spec = self.backbones[a.backbone]
            out[a.id] = {"engine": spec.identity_kind, "model": spec.model, "revision": spec.revision,
                         "prompt_format": spec.prompt_format, "temperature": a.temperature,
                         "top_p": a.top_p, "max_tokens": a.max_tokens,
                         "system_prompt": a.system_prompt}
            if a.ignore_eos:
                out[a.id]["ignore_eos"] = True
        return out

    def agent_ids(self) -> list[str]:
        return [a.id for a in self.agents]

    def agent(self, agent_id: str) -> AgentConfig:
        for a in [*self.agents, *([self.coordinator] if self.coordinator else [])]:
            if a.id == agent_id:
                return a
        raise KeyError(agent_id)


class SweepConfig(_Strict):
    """A list of configurations run in one job over shared engines and one cache.

    ``base`` is a RunConfig mapping; ``runs`` lists overrides (dotted keys allowed,
    e.g. ``method_args.guardrail.tau_p``) each naming one configuration; ``grid`` expands the cartesian
    product of its lists on top of every run.
    """

    name: str = Field(
        "sweep",
        description="the sweep's name: its MLflow parent run and results folder")
    base: dict[str, Any] = Field(description="a RunConfig mapping every configuration starts from")

    @field_validator("name")
    @classmethod
    def _check_name(cls, v: str) -> str:
        return check_name(v, "sweep name")
    runs: list[dict[str, Any]] = Field(
        default_factory=lambda: [{}],
        description="overrides (dotted keys allowed, e.g. method_args.guardrail.tau_p), each "
                    "naming one configuration")
    grid: dict[str, list[Any]] = Field(
        default_factory=dict,
        description="lists whose cartesian product expands on top of every run")
    seeds: list[int] | None = Field(
        None, min_length=1,
        description="run seeds: every configuration once per seed (named '... seed=<s>'); None: "
                    "each configuration's own seed")
    max_tokens: dict[str, int] = Field(
        default_factory=dict,
        description="per benchmark, the completion budget of every configuration on it that does "
                    "not set its own")
    fuse: bool = Field(
        True,
        description="run consecutive configurations over the same samples and cache root through "
                    "one pipeline (one start, each shared call made once); off: one pipeline per "
                    "configuration")
    plugins: list[str] = Field(
        default_factory=list,
        description="modules every configuration imports before it is validated (added to "
                    "each configuration's own plugins)")
    _configs: list[RunConfig] | None = PrivateAttr(default=None)

    def expand(self) -> list[RunConfig]:
        """The configurations, expanded and validated once (later calls return the same)."""
        if self._configs is None:
            self._configs = [self.validate_run(i, d) for i, d in self.run_mappings()]
        return list(self._configs)

    def with_configs(self, configs: list[RunConfig]) -> SweepConfig:
        """This sweep whose configurations are ``configs`` (validated elsewhere, e.g. with
        their storage resolved: ``df_ray.evaluation.plan.resolve``), not expanded again."""
        out = self.model_copy()
        out._configs = list(configs)
        return out

    @field_validator("max_tokens")
    @classmethod
    def _budget_benchmarks(cls, v: dict[str, int]) -> dict[str, int]:
        for bench, n in v.items():
            if bench not in TASK_REGISTRY:
                raise ValueError(f"max_tokens: unknown benchmark {bench!r}; allowed: "
                                 f"{one_of(TASK_REGISTRY)}")
            if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 32768:
                raise ValueError(f"max_tokens.{bench}: expected an integer in [1, 32768], "
                                 f"got {n!r}")
        return v

    @field_validator("seeds")
    @classmethod
    def _distinct_seeds(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and len(set(v)) != len(v):
            raise ValueError(f"seeds must be distinct, got {v}")
        return v

    def run_mappings(self) -> list[tuple[int, dict[str, Any]]]:
        """The configurations as mappings, not validated yet: (run index, mapping), every run
        of ``runs`` on every grid point, once per run seed of ``seeds``."""
        if self.seeds is not None and ("seed" in self.grid
                                       or any("seed" in r for r in self.runs)):
            raise ConfigError(f"sweep {self.name!r}: give run seeds either as `seeds` or as "
                              "`seed` in runs/grid, not both")
        check_grid_size({**self.grid, **({"seed": self.seeds} if self.seeds else {})},
                        len(self.runs))
        out = []
        for i, d in self._run_points():
            if self.plugins:
                d["plugins"] = list(dict.fromkeys([*self.plugins, *(d.get("plugins") or [])]))
            for s in self.seeds if self.seeds is not None else [None]:
                out.append((i, d if s is None else {**d, "seed": s,
                                                     "name": f"{d['name']} seed={s}"}))
        return out

    def _run_points(self) -> list[tuple[int, dict[str, Any]]]:
        keys = list(self.grid)
        combos = list(itertools.product(*(self.grid[k] for k in keys))) if keys else [()]
        out = []
        for i, override in enumerate(self.runs):
            for combo in combos:
                d = copy.deepcopy(self.base)
                for k, v in [*override.items(), *zip(keys, combo, strict=True)]:
                    _set_dotted(d, k, v)
                if d.get("max_tokens") is None and d.get("benchmark") in self.max_tokens:
                    d["max_tokens"] = self.max_tokens[d["benchmark"]]
                # a grid point's name: its keys without the method_args. prefix
                point = [f"{k.removeprefix('method_args.')}={v}"
                         for k, v in zip(keys, combo, strict=True)]
                if "name" not in override:
                    parts = [override.get("name") or d.get("name") or f"{self.name}-{i}"]
                    d["name"] = " ".join(str(p) for p in [*parts, *point])
                elif combo:
                    d["name"] = override["name"] + " " + " ".join(point)
                out.append((i, d))
        return out

    def validate_run(self, i: int, d: dict[str, Any]) -> RunConfig:
        """One configuration's mapping validated (a ConfigError naming the sweep and run)."""
        try:
            return RunConfig.model_validate(d)
        except ValidationError as e:
            raise ConfigError(f"sweep {self.name!r}, run {i} ({d.get('name')}):\n"
                              f"{format_validation_error(e)}") from None


def _set_dotted(d: dict, key: str, value: Any) -> None:
    parts = key.split(".")
    cur = d
    for p in parts[:-1]:
        cur = cur.setdefault(p, {})
    cur[parts[-1]] = value


def format_validation_error(e: ValidationError) -> str:
    lines = []
    for err in e.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "(config)"
        msg = err["msg"]
        ctx = err.get("ctx") or {}
        if "expected" in ctx:
            msg += f" (allowed: {ctx['expected']})"
        lines.append(f"  {loc}: {msg}")
    return "\n".join(lines)


#: Input bounds: a config file cannot take the process down.
MAX_CONFIG_BYTES = 1024 * 1024
MAX_CONFIG_DEPTH = 32
MAX_CONFIG_NODES = 200_000
MAX_METHOD_ARGS_DEPTH = 8
MAX_CONFIGURATIONS = 10_000


def check_grid_size(grid: dict[str, list[Any]], n_runs: int = 1) -> None:
    """Refuse a sweep whose expansion is larger than MAX_CONFIGURATIONS, before building it."""
    sizes = [len(v) for v in grid.values()]
    total = max(n_runs, 1)
    for s in sizes:
        total *= max(s, 1)
    if total > MAX_CONFIGURATIONS:
        factors = " x ".join(str(s) for s in ([n_runs] if n_runs > 1 else []) + sizes)
        raise ConfigError(f"the grid expands to {total} configurations ({factors}), more than "
                          f"the limit of {MAX_CONFIGURATIONS}")


def _check_shape(data: Any) -> None:
    """Bounded nesting (method_args more tightly) and node count (YAML aliases included)."""
    budget = [MAX_CONFIG_NODES]

    def walk(x: Any, depth: int, where: str, limit: int) -> None:
        budget[0] -= 1
        if budget[0] < 0:
            raise ConfigError(f"more than {MAX_CONFIG_NODES} values (YAML aliases expanding?)")
        if depth > limit:
            raise ConfigError(f"{where or 'the document'} is nested more than {limit} levels deep")
        if isinstance(x, dict):
            for k, v in x.items():
                sub = f"{where}.{k}" if where else str(k)
                lim = min(limit, depth + MAX_METHOD_ARGS_DEPTH) if k == "method_args" else limit
                walk(v, depth + 1, sub, lim)
        elif isinstance(x, list):
            for i, v in enumerate(x):
                walk(v, depth + 1, f"{where}[{i}]", limit)

    walk(data, 0, "", MAX_CONFIG_DEPTH)


def _read_yaml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{p}: is a directory; --config takes a YAML file")
    if not p.is_file():
        raise ConfigError(f"config file not found: {p}")
    try:
        size = p.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise ConfigError(f"{p}: {size} bytes, more than the limit of {MAX_CONFIG_BYTES}")
        with p.open("rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        raise ConfigError(f"{p}: cannot read: {e.strerror or e}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{p}: more than the limit of {MAX_CONFIG_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{p}: not UTF-8 text (invalid byte at offset {e.start})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        first = " ".join(str(e).split())
        raise ConfigError(f"{p}: not valid YAML: {first}") from None
    except RecursionError:
        raise ConfigError(f"{p}: nested too deeply (limit {MAX_CONFIG_DEPTH} levels)") from None
    except ValueError as e:  # e.g. an integer longer than Python converts
        msg = "an integer is too long" if "digits" in str(e) else " ".join(str(e).split())
        raise ConfigError(f"{p}: {msg}") from None
    try:
        _check_shape(data)
    except ConfigError as e:
        raise ConfigError(f"{p}: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: the top level must be a mapping of config fields")
    return data


def load_config(path: str | Path, *, expand: bool = True) -> SweepConfig:
    """Read a run or sweep YAML file; a plain run file becomes a one-run sweep. The plugins
    it names are imported first (``df_ray.plugins``). ``expand``: validate its
    configurations here (off: ``df_ray.evaluation.plan.resolve`` validates them, once)."""
    from df_ray.plugins import load_plugins, plugin_names

    data = _read_yaml(path)
    if "base" not in data:
        data = {"name": data.get("name", Path(path).stem), "base": data}
    load_plugins(plugin_names(data))
    try:
        sweep = SweepConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(f"{path}: invalid sweep config:\n{format_validation_error(e)}") from None
    if expand:
        try:
            sweep.expand()
        except ConfigError as e:
            raise ConfigError(f"{path}: {e}") from None
    return sweep


def check_engine_args_of(configs) -> None:
    """Every backbone's ``engine_args`` in these RunConfigs; raises ConfigError naming the
    configuration, the backbone and the argument."""
    from df_ray.engines.args import check_engine_args

    seen: set[str] = set()
    for cfg in configs:
        for name, spec in cfg.backbones.items():
            key = f"{name}:{spec.model_dump_json()}"
            if key in seen:
                continue
            seen.add(key)
            problem = check_engine_args(name, spec)
            if problem:
                raise ConfigError(f"{cfg.name}: {problem}")
