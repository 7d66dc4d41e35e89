"""The backbone pool: Graph-of-Agents' six 7B/8B specialists, defined once.

The DarkForest paper aligns its setup with Graph-of-Agents (GoA; Yun et al., ICLR 2026,
github.com/UNITES-Lab/GoA), whose agent pool is these six open models, each served by vLLM in
bf16 on its own GPU. Every sweep in ``jobs/configs/`` names its backbones by the keys of
:data:`POOL`; a run's ``backbones`` needs to list only what it changes (a pinned
``revision``, another ``kind`` such as ``openai`` for a shared endpoint), see
:func:`engine_spec`.

Each entry carries a *model card*: GoA's own, from its ``endpoint.py``
(``model_endpoint_dict[...]["model_card"]``, UNITES-Lab/GoA at commit c9def00, MIT licence,
copyright (c) the Graph-of-Agents authors; reproduced verbatim in :data:`GOA_CARDS`), which
GoA's node sampling shows its meta-LLM as it is (:mod:`df_ray.methods.goa`) and which the
agents' ``description`` carries into MLflow. The cards decide which nodes each question
gets, so they are the reference's, not ours. df_ray's earlier one-paragraph cards are kept
as :data:`DF_RAY_CARDS` (not used by any sweep).

Prompt format: every pool model has a chat template except finance-Llama3-8B, which df_ray
serves as a "Question:/Answer:" completion prompt (``df_ray.engines.completion_prompt``) in
every row but GoA's: GoA's calls ask for ChatML (``ChatRequest.no_template``), as GoA's
``generate_vllm`` writes it (a "You are a helpful assistant." system turn for a
plain-string message). See docs/experiments.md.

``seed`` is the entry's agent seed: an agent built on a pool model has the same id (the
pool key) and seed in every composition and every sweep, so its independent answers are one
generation-cache entry and one calibration identity wherever it appears.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from df_ray.errors import UnknownNameError

#: GoA's model cards (UNITES-Lab/GoA ``endpoint.py``, MIT licence, (c) the Graph-of-Agents
#: authors), by pool name, verbatim (trailing spaces included).
GOA_CARDS: dict[str, str] = {
    "qwen25-7b": (
        '- **Domain**: General-purpose\n'
        '- **Task Specialization**: \n'
        '  - Instruction following\n'
        '  - Text generation\n'
        '  - Long text generation (over 8K tokens)\n'
        '  - Understanding and generating structured data (e.g., tables, JSON)\n'
        '  - Code generation and mathematics\n'
        '  - Multilingual support (over 29 languages, including Chinese, English, '
        'French, Spanish, Portuguese, German, Italian, Russian, Japanese, Korean, '
        'Vietnamese, Thai, Arabic, etc.)\n'
        '- **Parameter Size**: 7.61B\n'
        '- **Special Features**: \n'
        '  - Fine-tuned for instruction-following tasks\n'
        '  - Enhanced capabilities in coding and mathematics\n'
        '  - Long-context support up to 128K tokens\n'
        '  - Support for generating up to 8K tokens\n'
        '  - Multilingual support across 29 languages\n'
        '  - Utilizes YaRN for handling long texts beyond the default context length'
    ),
    "qwen25-coder-7b": (
        '- **Domain**: Coding\n'
        '- **Task Specialization**: \n'
        '  - Code generation\n'
        '  - Code reasoning\n'
        '  - Code fixing\n'
        '- **Parameter Size**: 7.61B\n'
        '- **Special Features**: \n'
        '  - Instruction-tuned\n'
        '  - Fine-tuned on 5.5 trillion training tokens including source code, '
        'text-code grounding, Synthetic data, etc.\n'
        '  - Supports long-context up to 128K tokens\n'
        '  - Enhanced coding capabilities with performance comparable to GPT-4o\n'
        '  - Comprehensive foundation for real-world applications such as Code Agents'
    ),
    "mathstral-7b": (
        '- **Domain**: Math and Science\n'
        '- **Task Specialization**: \n'
        '  - Mathematical problem solving\n'
        '  - Scientific inquiry\n'
        '- **Parameter Size**: 7B (7 billion)\n'
        '- **Special Features**: \n'
        '  - Based on the Mistral 7B architecture\n'
        '  - Designed for mathematical and scientific tasks\n'
        '  - Includes a chat interface for interactive problem solving'
    ),
    "biomed-llama3-8b": (
        '- **Domain**: Biomedical\n'
        '- **Task Specialization**: \n'
        '  - Biomedical question answering\n'
        '  - Clinical decision support\n'
        '  - Educational resource for biomedical knowledge expansion\n'
        '- **Parameter Size**: 8 billion\n'
        '- **Special Features**: \n'
        '  - Fine-tuned from the meta-llama/Meta-Llama-3-8B-Instruct model\n'
        '  - Trained on a custom "BioMedData" dataset containing over 500,000 '
        'diverse entries, including both synthetic and manually curated data\n'
        '  - Designed to understand and generate text related to various biomedical fields'
    ),
    "finance-llama3-8b": (
        '- **Domain**: Finance\n'
        '- **Task Specialization**: \n'
        '  - Financial sentiment classification\n'
        '  - Financial fact-based question answering\n'
        '- **Parameter Size**: 8 billion parameters\n'
        '- **Special Features**: \n'
        '  - Pre-trained using the Instruction Pre-Training framework, which '
        'augments raw corpora with instruction-response pairs generated by an '
        'efficient instruction synthesizer\n'
        '  - Designed for domain-specific tasks, particularly in the finance domain\n'
        '  - Fine-tuned on domain-specific corpora with instruction-response pairs '
        'to enhance performance in finance-related tasks'
    ),
    "saul-7b": (
        '- **Domain**: Legal\n'
        '- **Task Specialization**: Legal use cases involving generation, such as '
        'generating legal documents or providing legal advice.\n'
        '- **Parameter Size**: 7B\n'
        '- **Special Features**: Built upon the Mistral-7B model and tailored for '
        'the legal domain.'
    ),
}

#: df_ray's earlier cards (ours), kept for comparison; no sweep uses them.
DF_RAY_CARDS: dict[str, str] = {
    "qwen25-7b": ("A general-purpose instruction-tuned assistant with broad world knowledge and "
                  "solid step-by-step reasoning in mathematics, science, coding and writing; "
                  "the safest choice when a question belongs to no particular specialty."),
    "qwen25-coder-7b": ("A programming specialist: writes, completes and debugs code (Python "
                        "above all) from a specification, and is good at turning a calculation "
                        "into an exact program or formula."),
    "mathstral-7b": ("A mathematics and quantitative-science specialist: multi-step "
                     "derivations, algebra, geometry, probability and competition-style "
                     "problems, and the numerical side of physics, chemistry and engineering."),
    "biomed-llama3-8b": ("A biomedical specialist tuned on medical and life-science question "
                         "answering: anatomy, physiology, disease, pharmacology, genetics and "
                         "molecular biology."),
    "finance-llama3-8b": ("A finance specialist trained on financial news, filings and exam "
                          "material: reads company reports and tables, accounting quantities, "
                          "ratios and percentage changes, markets and economics."),
    "saul-7b": ("A legal specialist trained on statutes, case law and contracts: classifies "
                "legal text, interprets clauses and rules, and reasons about which doctrine "
                "applies to a set of facts."),
}


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
    #: The repository is gated on the hub: its weights need an accepted licence and HF_TOKEN
    #: (preflight refuses a run without one: df_ray.engines.hub_models).
    gated: bool = False

    def engine(self) -> dict[str, Any]:
        """The EngineSpec mapping: vLLM, bf16, one GPU, as GoA and the paper serve it."""
        return {"kind": "vllm", "model": self.model, "revision": self.revision,
                "dtype": "bfloat16", "max_model_len": self.max_model_len}


POOL: dict[str, PoolModel] = {m.name: m for m in (
    PoolModel(
        name="qwen25-7b", model="Qwen/Qwen2.5-7B-Instruct", domain="general", seed=1,
        card=GOA_CARDS["qwen25-7b"]),
    PoolModel(
        name="qwen25-coder-7b", model="Qwen/Qwen2.5-Coder-7B-Instruct", domain="code", seed=2,
        card=GOA_CARDS["qwen25-coder-7b"]),
    PoolModel(
        name="mathstral-7b", model="mistralai/Mathstral-7B-v0.1", domain="math", seed=3,
        card=GOA_CARDS["mathstral-7b"], gated=True),
    PoolModel(
        name="biomed-llama3-8b", model="ContactDoctor/Bio-Medical-Llama-3-8B",
        domain="biomedical", seed=4,
        card=GOA_CARDS["biomed-llama3-8b"]),
    PoolModel(
        name="finance-llama3-8b", model="instruction-pretrain/finance-Llama3-8B",
        domain="finance", seed=5,
        card=GOA_CARDS["finance-llama3-8b"]),
    PoolModel(
        name="saul-7b", model="Equall/Saul-7B-Instruct-v1", domain="legal", seed=6,
        card=GOA_CARDS["saul-7b"]),
)}

#: GoA's meta-LLM and the coordinator of every DarkForest composition.
GENERAL = "qwen25-7b"


class UnknownBackboneError(UnknownNameError):
    """No pool model of that name; the message lists the pool."""


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
