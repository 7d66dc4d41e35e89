"""Deploying, inspecting and removing the shared engine service (``df-ray serve``).

One Serve application per backbone, named after it, at route ``/<name>``:

- ``vllm`` backbones: ``ray.serve.llm.build_openai_app`` over one ``LLMConfig`` (the vLLM
  engine in an ``LLMServer`` deployment, one replica per GPU times the tensor-parallel size,
  autoscaling between ``replicas`` and ``max_replicas``; OpenAI routes at ``/<name>/v1``);
- ``embedded`` / ``scripted`` / ``openai`` backbones: :class:`EngineServer` replicas around
  df_ray's own engine (OpenAI chat route at ``/<name>/v1/chat/completions`` too).

What to serve comes from a run or sweep config (the union of its backbones) or a *pool file*:
a YAML file with ``backbones:`` (name -> engine spec, as in a config), optional ``serve:``
placement settings (:class:`ServeOptions`), global and per backbone, and optional
``plugins:`` (modules to import first, as a config's: ``df_ray.plugins``).

As with ``df-ray run``'s engine actors, the driver resolves each engine kind to its
``"module:Class"`` target once (``df_ray.engines.spec.engine_targets``) and hands every
:class:`EngineServer` replica its target and the driver's plugins: the replica imports the
plugins, then builds from the target, reading no registry of its own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from df_ray.config import ConfigError, SweepConfig, format_validation_error
from df_ray.engines.spec import EngineSpec
from df_ray.experiments.pool import UnknownBackboneError, engine_spec
from df_ray.pipeline.error_text import first_line
from df_ray.serving import ENGINE_DEPLOYMENT, LLM_DEPLOYMENT_PREFIX

log = logging.getLogger(__name__)


class ReplicaOptions(BaseModel):
    """Where and how big a backbone's replicas are (unset: derived from its engine spec)."""

    model_config = ConfigDict(extra="forbid")

    #: CPUs per replica (None: the engine's own need, e.g. an embedded model's threads).
    num_cpus: float | None = Field(default=None, ge=0.0)
    #: GPUs per replica (None: the spec's; a vLLM engine takes tensor_parallel_size GPUs).
    num_gpus: float | None = Field(default=None, ge=0.0)
    #: Custom Ray resources per replica, e.g. {"gpu_node": 1} to pin replicas to labelled nodes.
    resources: dict[str, float] | None = None
    #: Autoscaling upper bound (None: a fixed ``replicas`` count from the engine spec).
    max_replicas: int | None = Field(default=None, ge=1)
    #: Requests (chunks) a replica accepts at once; the engine merges them into its batches.
    max_ongoing_requests: int | None = Field(default=None, ge=1)
    #: vLLM: ``accelerator_type`` for Serve LLM placement (e.g. "H100"); None = any GPU.
    accelerator_type: str | None = None


class ServeOptions(ReplicaOptions):
    #: Per-backbone overrides of the settings above.
    backbones: dict[str, ReplicaOptions] = Field(default_factory=dict)

    def for_backbone(self, name: str) -> ReplicaOptions:
        base = self.model_dump(exclude={"backbones"})
        own = self.backbones.get(name)
        if own is not None:
            base.update({k: v for k, v in own.model_dump().items() if v is not None})
        return ReplicaOptions.model_validate(base)


def load_pool(path: str | Path, plugins: Iterable[str] = ()
              ) -> tuple[dict[str, EngineSpec], ServeOptions]:
    """Backbones and serve options from a pool file, or the backbones of a run/sweep config.
    ``plugins`` (``--plugin``) and those the file names are imported before anything is
    validated (a ``PluginError`` when one fails)."""
    from df_ray.plugins import load_plugins, plugin_names

    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"file not found: {p}")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: the top level must be a mapping")
    load_plugins([*plugins, *plugin_names(data)])
    opts_raw = data.get("serve") or {}
    try:
        opts = ServeOptions.model_validate(opts_raw)
    except ValidationError as e:
        raise ConfigError(f"{p}: serve:\n{format_validation_error(e)}") from None
    if "base" in data or "benchmark" in data:  # a run or sweep config
        cfg_data = {k: v for k, v in data.items() if k != "serve"}
        if "base" not in cfg_data:
            cfg_data = {"name": cfg_data.get("name", p.stem), "base": cfg_data}
        try:
            configs = SweepConfig.model_validate(cfg_data).expand()
        except ValidationError as e:
            raise ConfigError(f"{p}: invalid sweep config:\n{format_validation_error(e)}") from None
        except ConfigError as e:
            raise ConfigError(f"{p}: {e}") from None
        backbones = {}
        for cfg in configs:
            for name, spec in cfg.backbones.items():
                if backbones.setdefault(name, spec) != spec:
                    raise ConfigError(f"{p}: backbone {name!r} is defined differently in two "
                                      "configurations; one name must mean one engine")
    else:
        raw = data.get("backbones")
        if not isinstance(raw, dict) or not raw:
            raise ConfigError(f"{p}: a pool file needs a non-empty 'backbones:' mapping "
                              "(name -> engine spec), or give a run/sweep config")
        backbones = {}
        for name, spec in raw.items():
            try:  # a pool name (df_ray.experiments.pool) or a full engine spec
                backbones[str(name)] = EngineSpec.model_validate(engine_spec(spec, str(name)))
            except ValidationError as e:
                raise ConfigError(f"{p}: backbones.{name}:\n{format_validation_error(e)}") from None
            except UnknownBackboneError as e:
                raise ConfigError(f"{p}: backbones.{name}: {e}") from None
    unknown = sorted(set(opts.backbones) - set(backbones))
    if unknown:
        raise ConfigError(f"{p}: serve.backbones names unknown backbones {unknown}; "
                          f"defined: {sorted(backbones)}")
    served = sorted(n for n, s in backbones.items() if s.served)
    if served:
        raise ConfigError(f"{p}: backbones {served} are of kind 'serve' (already a deployed "
                          "service); df-ray serve deploys engines (vllm, embedded, scripted, "
                          "openai)")
    return backbones, opts


# --------------------------------------------------------------------------- building


def deployment_options(name: str, spec: EngineSpec, opts: ReplicaOptions) -> dict[str, Any]:
    """Serve options of an :class:`EngineServer` deployment for backbone ``name``."""
    cpus = opts.num_cpus if opts.num_cpus is not None else spec.resolved_num_cpus
    gpus = opts.num_gpus if opts.num_gpus is not None else spec.resolved_num_gpus
    actor: dict[str, Any] = {"num_cpus": cpus, "num_gpus": gpus}
    if opts.resources:
        actor["resources"] = dict(opts.resources)
    out: dict[str, Any] = {
        "name": ENGINE_DEPLOYMENT,
        "ray_actor_options": actor,
        # Requests from every job's stages wait here; the engine admits them as it can.
        "max_ongoing_requests": opts.max_ongoing_requests or max(64, 8 * spec.capacity),
        "health_check_period_s": 5.0,
        "health_check_timeout_s": 60.0,
        "graceful_shutdown_timeout_s": 5.0,
    }
    if opts.max_replicas and opts.max_replicas > spec.replicas:
        out["autoscaling_config"] = {
            "min_replicas": spec.replicas, "max_replicas": opts.max_replicas,
            "target_ongoing_requests": max(2, spec.capacity // 4)}
    else:
        out["num_replicas"] = spec.replicas
    return out


def engine_app(name: str, spec: EngineSpec, opts: ReplicaOptions,
               token_sha256: str | None = None, target: str | None = None,
               plugins: tuple = ((), ())):
    """An :class:`EngineServer` application: ``target`` and ``plugins`` as it takes them."""
    from ray import serve

    from df_ray.serving.deployment import EngineServer

    dep = serve.deployment(EngineServer, **deployment_options(name, spec, opts))
    return dep.bind(spec.model_dump(mode="json"), name, token_sha256, target, plugins)


#: Accelerators on which vLLM's own default is 1024 sequences at once (256 elsewhere).
LARGE_SEQ_ACCELERATORS = ("H100", "H200", "H20", "B200", "GB200")


def serve_capacity(spec: EngineSpec, opts: ReplicaOptions) -> int:
    """Sequences a served vLLM engine runs at once: the spec's ``max_num_seqs`` (or
    ``max_batch_size``), else vLLM's default on the placement's accelerator (1024 on an
    H100/H200-class GPU, 256 elsewhere: the job-owned engine reports the same)."""
    given = spec.engine_args.get("max_num_seqs") or spec.max_batch_size
    if given:
        return int(given)
    acc = (opts.accelerator_type or "").upper()
    return 1024 if acc and acc.startswith(LARGE_SEQ_ACCELERATORS) else spec.capacity


def llm_config_dict(name: str, spec: EngineSpec, opts: ReplicaOptions) -> dict[str, Any]:
    """The ``ray.serve.llm.LLMConfig`` fields of a vLLM backbone: the engine arguments of the
    job-owned vLLM engine, one replica per GPU (times tensor parallelism), autoscaling bounds."""
    if not spec.serve_llm:
        raise ValueError(f"backbone {name!r}: only vllm backbones go through ray.serve.llm")
    engine_kwargs: dict[str, Any] = spec.engine_kwargs()
    if spec.revision:
        engine_kwargs["revision"] = spec.revision
    # `sampling` holds the job-owned engine's per-request defaults, no engine argument:
    # vLLM refuses it (a served request carries its own sampling)
    engine_kwargs.update({k: v for k, v in spec.engine_args.items() if k != "sampling"})
    # the engine is told the sequences the deployment is sized for, so the two agree
    seqs = engine_kwargs.setdefault("max_num_seqs", serve_capacity(spec, opts))
    max_r = max(spec.replicas, opts.max_replicas or spec.replicas)
    deployment: dict[str, Any] = {
        "autoscaling_config": {"min_replicas": spec.replicas, "max_replicas": max_r,
                               "target_ongoing_requests": seqs},
        "max_ongoing_requests": opts.max_ongoing_requests or 4 * seqs,
    }
    if opts.resources or opts.num_cpus is not None:
        actor: dict[str, Any] = {}
        if opts.num_cpus is not None:
            actor["num_cpus"] = opts.num_cpus
        if opts.resources:
            actor["resources"] = dict(opts.resources)
        deployment["ray_actor_options"] = actor
    out: dict[str, Any] = {
        "model_loading_config": {"model_id": spec.model, "model_source": spec.model},
        "engine_kwargs": engine_kwargs,
        "deployment_config": deployment,
    }
    if opts.accelerator_type:
        out["accelerator_type"] = opts.accelerator_type
    return out


def vllm_app(name: str, spec: EngineSpec, opts: ReplicaOptions):
    from ray.serve.llm import LLMConfig, build_openai_app

    return build_openai_app({"llm_configs": [LLMConfig(**llm_config_dict(name, spec, opts))]})


def llm_deployment_name(model: str) -> str:
    """The name ``ray.serve.llm`` gives the LLMServer deployment of ``model``."""
    return LLM_DEPLOYMENT_PREFIX + model.replace("/", "--").replace(".", "_")


def build_app(name: str, spec: EngineSpec, opts: ReplicaOptions,
              token_sha256: str | None = None, target: str | None = None,
              plugins: tuple = ((), ())):
    return (vllm_app(name, spec, opts) if spec.serve_llm
            else engine_app(name, spec, opts, token_sha256, target, plugins))


# --------------------------------------------------------------------------- operating


def connect(address: str | None, *, local: bool = False) -> None:
    """Join the cluster the service lives on (never a silent new one, unless ``local``)."""
    import os

    import ray

    if ray.is_initialized():
        return
    if local:
        ray.init(address="local", include_dashboard=False)
        return
    address = address or os.environ.get("RAY_ADDRESS") or "auto"
    try:
        ray.init(address=address, log_to_driver=False)
    except ConnectionError as e:
        raise ConfigError(
            f"no Ray cluster at {address!r} ({e}); the service lives on a running cluster: "
            "start one (`ray start --head`) and pass --address or set RAY_ADDRESS, or use "
            "--local to serve from this process until Ctrl-C") from None


def deploy(backbones: dict[str, EngineSpec], opts: ServeOptions, *, http_host: str | None = None,
           http_port: int | None = None, proxy_location: str = "HeadOnly",
           token_sha256: str | None = None, vllm_http: bool = False,
           say=print) -> dict[str, str | None]:
    """Deploy every backbone as its own application (replacing one of the same name);
    returns name -> route prefix (None: no HTTP route) once all are running. Serve's
    cluster-wide settings (HTTP host and port, where proxies run) take effect when Serve
    first starts on the cluster.

    ``token_sha256``: the SHA-256 of the bearer token df_ray's HTTP route requires
    (:mod:`df_ray.serving.auth`; None: the route refuses every request). A vLLM backbone's
    ``ray.serve.llm`` app has no such check, so it gets no HTTP route (jobs call it through
    DeploymentHandles) unless ``vllm_http``.

    Each engine kind's target and the plugins this process imported are resolved here, once,
    and given to the replicas (see the module docstring)."""
    from ray import serve

    from df_ray.engines.spec import engine_targets
    from df_ray.plugins import worker_plugins

    http: dict[str, Any] = {}
    if http_host:
        http["host"] = http_host
    if http_port:
        http["port"] = http_port
    targets = engine_targets(backbones.values())
    plugins = worker_plugins()
    serve.start(proxy_location=proxy_location, http_options=http or None)
    routes = {}
    for name, spec in backbones.items():
        t = time.time()
        app = build_app(name, spec, opts.for_backbone(name), token_sha256,
                        targets[spec.kind], plugins)
        prefix = None if spec.serve_llm and not vllm_http else f"/{name}"
        try:
            serve.run(app, name=name, route_prefix=prefix, blocking=False)
        except RuntimeError as e:
            # Serve says only "Failed to update the deployments"; the replicas' own error is
            # in the deployment's status message.
            raise RuntimeError(f"{name}: {spec.kind} {spec.model} failed to start: "
                               f"{_start_failure(name) or e}") from e
        routes[name] = prefix
        say(f"{name}: {spec.kind} {spec.model} x{spec.replicas} running "
            f"({time.time() - t:.1f}s), "
            + (f"route {prefix}" if prefix else "no HTTP route (DeploymentHandles only)")
            + (" (no token check: ray.serve.llm's own route)" if prefix and spec.serve_llm
               else ""))
    return routes


def _start_failure(app: str) -> str | None:
    """The last line of the traceback a failed application's replicas reported, if any."""
    from ray import serve

    try:
        deps = serve.status().applications[app].deployments
    except Exception:  # the status only makes a better message
        return None
    for d in deps.values():
        lines = [ln.strip() for ln in (d.message or "").splitlines() if ln.strip()]
        causes = [ln for ln in lines if not ln.startswith(
            ("File ", "Traceback", "raise ", "For further information visit"))]
        if causes:
            return causes[-1]
    return None


def _replica_actors(app: str) -> list[dict[str, Any]]:
    """Every replica actor the application ever started (alive or dead), from Ray's state API."""
    try:
        import ray
        from ray.util.state import list_actors

        # The connected cluster's address: without it the state API looks for "the" local
        # cluster and fails where several Rays run on one machine.
        actors = list_actors(address=ray.get_runtime_context().gcs_address, limit=10_000,
                             detail=True, raise_on_missing_output=False)
    except Exception as e:
        log.warning("cannot list Serve replicas through Ray's state API: %s", e)
        return []
    prefix = f"ServeReplica:{app}:"
    out = []
    for a in actors:
        a = a if isinstance(a, dict) else a.__dict__
        if str(a.get("class_name", "")).startswith(prefix):
            out.append({"actor_id": a.get("actor_id"), "state": a.get("state"),
                        "node_id": a.get("node_id"), "pid": a.get("pid"),
                        "deployment": str(a["class_name"])[len(prefix):]})
    return out


def is_df_ray_app(deployments: Any) -> str | None:
    """'engine' (EngineServer), 'vllm' (ray.serve.llm) or None for someone else's app."""
    names = list(deployments)
    if ENGINE_DEPLOYMENT in names:
        return "engine"
    if any(n.startswith(LLM_DEPLOYMENT_PREFIX) for n in names):
        return "vllm"
    return None


def status(apps: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """Per df_ray application: status, protocol, model, replicas (configured, running,
    started over its lifetime) and where its live replicas run."""
    from ray import serve

    st = serve.status()
    out = {}
    for name, app in st.applications.items():
        if apps and name not in apps:
            continue
        kind = is_df_ray_app(app.deployments)
        if kind is None:
            continue
        deps = {}
        for dname, d in app.deployments.items():
            states = {str(getattr(k, "value", k)): v for k, v in (d.replica_states or {}).items()}
            deps[dname] = {"status": str(getattr(d.status, "value", d.status)),
                           "replicas": states, "message": d.message}
        engine_dep = ENGINE_DEPLOYMENT if kind == "engine" else next(
            n for n in app.deployments if n.startswith(LLM_DEPLOYMENT_PREFIX))
        actors = [a for a in _replica_actors(name) if a["deployment"] == engine_dep]
        entry: dict[str, Any] = {
            "status": str(getattr(app.status, "value", app.status)), "protocol": kind,
            "deployment": engine_dep, "deployments": deps,
            "running": deps[engine_dep]["replicas"].get("RUNNING", 0),
            "replicas_started": len(actors),
            "replica_nodes": sorted(a["node_id"] for a in actors if a["state"] == "ALIVE"),
        }
        if kind == "engine" and entry["status"] == "RUNNING":
            try:
                info = serve.get_deployment_handle(ENGINE_DEPLOYMENT, name).info.remote().result(
                    timeout_s=30)
                entry["model"] = info["spec"]["model"]
                entry["engine"] = info["spec"]["kind"]
            except Exception as e:  # a replica being replaced
                entry["model"] = None
                entry["error"] = first_line(e, limit=200)
        elif kind == "vllm":
            entry["engine"] = "vllm"
            entry["model"] = None
        out[name] = entry
    return out


def stop(apps: list[str] | None = None, say=print) -> list[str]:
    """Delete df_ray's applications (all of them, or those named)."""
    from ray import serve

    st = serve.status()
    gone = []
    for name, app in st.applications.items():
        if (apps and name not in apps) or (not apps and is_df_ray_app(app.deployments) is None):
            continue
        serve.delete(name)
        gone.append(name)
        say(f"{name}: deleted")
    missing = sorted(set(apps or []) - set(st.applications))
    if missing:
        say(f"no such application: {', '.join(missing)}")
    return gone
