"""Every question a finished sweep's generation cache can answer with no new LLM call:
compute-matched frontiers, agent subsets, the guardrail's thresholds, early stopping.

    from df_ray.analysis import analyze

    a = analyze("jobs/configs/cpu_humaneval.yaml")
    print(a.to_markdown())
    a.write("reports/cpu_humaneval/analysis")

``df-ray analyze --config <sweep.yaml>`` is the same from the command line.
"""

from typing import Any

__all__ = ["Analysis", "AnalysisError", "BenchmarkAnalysis", "analyze"]


def __getattr__(name: str) -> Any:
    # imported on first use: the command line loads this package for every command
    if name in __all__:
        from df_ray.analysis import api

        return getattr(api, name)
    raise AttributeError(name)
