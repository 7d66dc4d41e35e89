"""`ServedEngine`: the engine interface over a backbone of the shared service, in process.

``make_engine({kind: serve, model: ..., app: ...})`` returns one: an in-process driver
(``df_ray.evaluate``, a notebook) on a machine joined to the cluster then calls the deployed
backbone through its DeploymentHandle like any engine. A job's pipeline does not build one: its
stages call the service directly (:mod:`df_ray.serving.client`), with the same retries.
"""

from __future__ import annotations

from collections.abc import Sequence

from df_ray.config import ConfigError
from df_ray.engines.base import ChatRequest, Completion
from df_ray.engines.spec import EngineSpec


class ServedEngine:
    """Requests to one served backbone (``spec.app``, or an application serving
    ``spec.model``)."""

    concurrent_tokenize = True

    def __init__(self, spec: EngineSpec, retries: int = 2) -> None:
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
