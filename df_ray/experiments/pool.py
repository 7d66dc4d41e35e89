"""The backbone pool: Graph-of-Agents' six 7B/8B specialists, defined once.

The DarkForest paper aligns its setup with Graph-of-Agents (GoA; Yun et al., ICLR 2026,
github.com/UNITES-Lab/GoA), whose agent pool is these six open models, each served by vLLM in
bf16 on its own GPU. Every sweep in ``jobs/configs/`` names its backbones by the keys of
:data:`POOL`; a run's ``backbones`` needs to list only what it changes (a pinned
``revision``, another ``kind`` such as ``openai`` for a shared endpoint), see
:func:`engine_spec`.

Each entry carries a *model card*: two or three sentences on what the model is good at,
written for us (not copied from GoA), which GoA's node sampling shows to its meta-LLM
(:mod:`df_ray.methods.goa`) and which the agents' ``description`` carries into MLflow.

``seed`` is the entry's agent seed: an agent built on a pool model has the same id (the
pool key) and seed in every composition and every sweep, so its independent answers are one
generation-cache entry and one calibration identity wherever it appears.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class PoolModel:
    """One backbone of the pool: the Hugging Face model, how to serve it, its card."""

    name: str
    model: str
    card: str
    domain: str
    seed: int
    max_model_len: int = 8192
    #: A commit of the model repository, to pin it (None: the hub's current main).
    revision: str | None = None

    def engine(self) -> dict[str, Any]:
        """The EngineSpec mapping: vLLM, bf16, one GPU, as GoA and the paper serve it."""
        return {"kind": "vllm", "model": self.model, "revision": self.revision,
                "dtype": "bfloat16", "max_model_len": self.max_model_len}


POOL: dict[str, PoolModel] = {m.name: m for m in (
    PoolModel(
        name="qwen25-7b", model="Qwen/Qwen2.5-7B-Instruct", domain="general", seed=1,
        card=("A general-purpose instruction-tuned assistant with broad world knowledge and "
              "solid step-by-step reasoning in mathematics, science, coding and writing; the "
              "safest choice when a question belongs to no particular specialty.")),
    PoolModel(
        name="qwen25-coder-7b", model="Qwen/Qwen2.5-Coder-7B-Instruct", domain="code", seed=2,
        card=("A programming specialist: writes, completes and debugs code (Python above all) "
              "from a specification, and is good at turning a calculation into an exact "
              "program or formula.")),
    PoolModel(
        name="mathstral-7b", model="mistralai/Mathstral-7B-v0.1", domain="math", seed=3,
        card=("A mathematics and quantitative-science specialist: multi-step derivations, "
              "algebra, geometry, probability and competition-style problems, and the "
              "numerical side of physics, chemistry and engineering.")),
    PoolModel(
        name="biomed-llama3-8b", model="ContactDoctor/Bio-Medical-Llama-3-8B",
        domain="biomedical", seed=4,
        card=("A biomedical specialist tuned on medical and life-science question answering: "
              "anatomy, physiology, disease, pharmacology, genetics and molecular biology.")),
    PoolModel(
        name="finance-llama3-8b", model="instruction-pretrain/finance-Llama3-8B",
        domain="finance", seed=5,
        card=("A finance specialist trained on financial news, filings and exam material: "
              "reads company reports and tables, accounting quantities, ratios and "
              "percentage changes, markets and economics.")),
    PoolModel(
        name="saul-7b", model="Equall/Saul-7B-Instruct-v1", domain="legal", seed=6,
        card=("A legal specialist trained on statutes, case law and contracts: classifies "
              "legal text, interprets clauses and rules, and reasons about which doctrine "
              "applies to a set of facts.")),
)}

#: GoA's meta-LLM and the coordinator of every DarkForest composition.
GENERAL = "qwen25-7b"


class UnknownBackboneError(KeyError):
    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def pool_model(name: str) -> PoolModel:
    try:
        return POOL[name]
    except KeyError:
        raise UnknownBackboneError(f"{name!r} is not a pool backbone; the pool: "
                                   f"{', '.join(POOL)}") from None


def engine_spec(entry: Any, name: str) -> dict[str, Any]:
    """A run's ``backbones[name]`` as an EngineSpec mapping.

    ``entry`` may be the EngineSpec mapping itself (left as it is), a pool name (a string),
    ``None`` (the pool entry ``name``), or a mapping with ``pool: <pool name>`` plus fields
    that override the pool's (``revision``, ``kind``, ``base_url``, ``max_model_len``...).
    A mapping without ``kind`` under a pool name overrides that pool entry, so
    ``--set backbones.qwen25-7b.revision=<commit>`` pins one model for a whole sweep.
    """
    if isinstance(entry, dict) and "pool" not in entry and "kind" not in entry and name in POOL:
        entry = {"pool": name, **entry}
    if entry is None:
        return pool_model(name).engine()
    if isinstance(entry, str):
        return pool_model(entry).engine()
    if isinstance(entry, dict) and "pool" in entry:
        rest = {k: v for k, v in entry.items() if k != "pool"}
        base = pool_model(str(entry["pool"])).engine()
        if rest.get("kind", "vllm") != "vllm":  # a served endpoint: keep only model/revision
            base = {"model": base["model"], "revision": base["revision"]}
        return {**base, **rest}
    return entry


def card_of(model: str) -> str | None:
    """The pool card of a Hugging Face model id (None for a model outside the pool)."""
    for m in POOL.values():
        if m.model == model:
            return m.card
    return None
