"""`ServedEngine`: the engine interface over a backbone of the shared service, in process.

``make_engine({kind: serve, model: ..., app: ...})`` returns one: an in-process driver
(``df_ray.evaluate``, a notebook) on a machine joined to the cluster then calls the deployed
backbone through its DeploymentHandle like any engine. A job's pipeline does not build one: its
stages call the service directly (:mod:`df_ray.serving.client`), with the same retries.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field, field_validator

from df_ray.engines.base import ChatRequest, Completion
from df_ray.engines.spec import ENGINE_KINDS, EngineSpec, one_of, spec_class
from df_ray.errors import ConfigError


class ServeSpec(EngineSpec):
    """A backbone deployed with ``df-ray serve``: the service's replicas hold its GPUs and
    CPUs, so a job reserves nothing for it and passes it no engine arguments."""

    served = True
    pool_provider = "df_ray.serving.client"

    app: str | None = Field(None, description="the Ray Serve application of the backbone "
                                              "(None: the backbone's own name in the config)")
    engine: str | None = Field(
        None, description="the engine kind behind the service (None: not checked); "
                          "calibration files match agents by engine kind and model, so a "
                          "served vllm backbone with engine: vllm finds the files fitted "
                          "with job-owned vLLM engines")

    @field_validator("engine")
    @classmethod
    def _an_engine_kind(cls, v: str | None) -> str | None:
        if v is None:
            return v
        kinds = [k for k in ENGINE_KINDS if not _is_served(k)]
        if v not in kinds:
            raise ValueError(f"engine must be one of {one_of(kinds)}, not {v!r}")
        return v

    @property
    def identity_kind(self) -> str:
        return self.engine or self.kind

    @classmethod
    def accepted_engine_args(cls) -> set[str] | None:
        return set()


def _is_served(kind: str) -> bool:
    try:
        return spec_class(kind).served
    except Exception:  # a kind whose module does not import cannot be behind a service
        return True


class ServedEngine:
    """Requests to one served backbone (``spec.app``, or an application serving
    ``spec.model``)."""

    concurrent_tokenize = True
    Spec = ServeSpec

    def __init__(self, spec: ServeSpec, retries: int = 2) -> None:
        from df_ray.serving.client import ServeClient, resolve_served

        self.spec = spec
        self.model = spec.model
        name = spec.app or _app_serving(spec.model)
        self.backbone = name
        self._client = ServeClient({name: resolve_served(name, spec)}, {name: spec},
                                   retries=retries)

    def generate(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        return self._client.generate([self.backbone] * len(requests), list(requests))

    def count_tokens(self, text: str) -> int:
        return self._client.count_tokens(self.backbone, [text])[0]


def _app_serving(model: str) -> str:
    """The df_ray application that serves ``model`` (when the spec names no ``app``)."""
    from df_ray.serving.apps import status

    found = sorted(name for name, e in status().items() if e.get("model") == model)
    if len(found) != 1:
        raise ConfigError(f"serve backbone for model {model!r}: {len(found)} applications serve "
                          f"it ({found}); name one with app:")
    return found[0]
