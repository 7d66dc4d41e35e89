"""Backbone weights on the Hugging Face Hub: what preflight checks before any engine starts,
and the commit a run's weights resolve to.

A gated repository (Mathstral-7B, Meta's Llama repositories) serves its files only to an
account that accepted its licence, so an engine started without ``HF_TOKEN`` fails at load,
after the other engines have loaded; online, ``huggingface_hub`` asks the hub before it uses
its cache, so cached weights do not help then. Offline (``HF_HUB_OFFLINE``) every model must
be in the cache. :func:`weight_problems` finds all of this up front, one line per backbone.
Gated-ness: the pool's declaration and :data:`GATED`, plus the hub's own answer
(``HfApi.model_info(...).gated``) where the hub can be reached.

:func:`model_commit` is the commit a model id and revision resolve to: from the cache (the
commit the engines loaded, on a shared ``HF_HOME``), else from the hub, else ``unresolved``.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

#: Hugging Face repositories known to be gated, beyond those the pool declares.
GATED = frozenset({"mistralai/Mathstral-7B-v0.1", "mistralai/Mistral-7B-Instruct-v0.3",
                   "google/gemma-2-9b-it"})
#: Organisations whose every model repository is gated.
GATED_ORGS = ("meta-llama/",)

_COMMIT = re.compile(r"[0-9a-f]{40}")


def _offline() -> bool:
    """``huggingface_hub``'s offline mode (HF_DATASETS_OFFLINE concerns data sets only)."""
    return any(os.environ.get(v, "").strip().lower() in {"1", "true", "yes", "on"}
               for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _token() -> str | None:
    try:
        from huggingface_hub import get_token
    except ImportError:  # pragma: no cover - huggingface_hub < 0.21
        return os.environ.get("HF_TOKEN") or None
    return get_token()


def is_hub_id(model: str) -> bool:
    """Whether ``model`` names a hub repository (``org/name``), not a local folder."""
    return not Path(model).expanduser().exists() and model.count("/") == 1 \
        and not model.startswith((".", "/", "~"))


def declared_gated(model: str) -> bool:
    from df_ray.experiments.pool import POOL

    return (model in GATED or model.startswith(GATED_ORGS)
            or any(m.gated and m.model == model for m in POOL.values()))


@functools.lru_cache(maxsize=256)
def hub_gated(model: str) -> bool | None:
    """The hub's answer (None when it cannot be asked: offline, no network, no repo)."""
    if _offline():
        return None
    try:
        from huggingface_hub import HfApi
        from huggingface_hub.errors import GatedRepoError

        try:
            return bool(HfApi().model_info(model, timeout=10).gated)
        except GatedRepoError:
            return True
    except Exception:
        return None


def cached_snapshot(model: str, revision: str | None) -> Path | None:
    """The cached snapshot folder of ``model`` at ``revision`` holding its config and at
    least one weight file, or None."""
    from huggingface_hub import try_to_load_from_cache

    from df_ray.tasks.hub import hub_cache

    path = try_to_load_from_cache(model, "config.json", cache_dir=hub_cache(),
                                  revision=revision or "main")
    if not isinstance(path, str):
        return None
    folder = Path(path).parent
    weights = [p for p in folder.rglob("*") if p.suffix in (".safetensors", ".bin", ".pt")]
    return folder if weights else None


def weight_problem(name: str, model: str, revision: str | None) -> str | None:
    """One line saying why backbone ``name`` (``model`` at ``revision``) cannot load here,
    or None."""
    if not is_hub_id(model):
        return None
    if _offline():
        if cached_snapshot(model, revision) is None:
            from df_ray.tasks.hub import hub_cache

            rev = f" --revision {revision}" if revision else ""
            return (f"backbone {name!r}: {model} is not in the Hugging Face cache "
                    f"{hub_cache()} and the hub is offline (HF_HUB_OFFLINE); fill it where "
                    f"the hub is reachable: hf download {model}{rev}")
        return None
    if _token() is None and (declared_gated(model) or hub_gated(model)):
        return (f"backbone {name!r}: {model} is gated on the Hugging Face hub and no HF_TOKEN "
                f"is set; accept its licence on https://huggingface.co/{model} and export "
                "HF_TOKEN=<a read token> (on every node)")
    return None


def weight_problems(backbones: Mapping[str, Any]) -> list[str]:
    """One line per backbone whose hub weights cannot load here (``backbones``: name ->
    EngineSpec); only engines that load weights from the hub themselves (vLLM) count."""
    out = []
    for name, spec in sorted(backbones.items()):
        if getattr(spec, "kind", None) != "vllm":
            continue
        problem = weight_problem(name, spec.model, getattr(spec, "revision", None))
        if problem:
            out.append(problem)
    return out


@functools.lru_cache(maxsize=256)
def model_commit(model: str, revision: str | None) -> str:
    """The commit ``model`` at ``revision`` resolves to: the revision itself when it is a
    commit, the cache's (what a shared cache's engines loaded), the hub's; ``local`` for a
    folder, ``unresolved`` when neither knows."""
    if revision and _COMMIT.fullmatch(revision):
        return revision
    if not is_hub_id(model):
        return "local"
    try:
        folder = cached_snapshot(model, revision)
        if folder is not None and _COMMIT.fullmatch(folder.name):
            return folder.name
        if not _offline():
            from huggingface_hub import HfApi

            sha = HfApi().model_info(model, revision=revision, timeout=10).sha
            if sha:
                return sha
    except Exception:
        pass
    return "unresolved"


def model_commits(backbones: Iterable[tuple[str, Any]]) -> dict[str, str]:
    """``provenance.model_commit.<name>`` for each (name, EngineSpec) whose engine loads its
    weights from the hub itself (vLLM)."""
    return {f"provenance.model_commit.{name}": model_commit(spec.model,
                                                           getattr(spec, "revision", None))
            for name, spec in backbones if getattr(spec, "kind", None) == "vllm"}
