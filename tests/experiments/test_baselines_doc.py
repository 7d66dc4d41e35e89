"""docs/experiments.md's baselines section lists every knob of every baseline with its origin,
and Table 1's sweeps run each baseline with the listed values' shape."""

from __future__ import annotations

import pytest

from df_ray.methods import REGISTRY, method_class
from df_ray.reporting.paper import BASELINES, EXPERIMENTS

BASELINE_METHODS = sorted(set(REGISTRY) - {"darkforest"})


def test_every_baseline_is_documented_once():
    documented = [m for b in BASELINES for m in b.methods]
    assert sorted(documented) == BASELINE_METHODS


@pytest.mark.parametrize("method", BASELINE_METHODS)
def test_every_knob_is_listed_with_its_origin(method):
    (b,) = [b for b in BASELINES if method in b.methods]
    listed = {k.name for k in b.knobs}
    assert set(method_class(method).Args.model_fields) == listed, method
    assert all(k.origin in ("reference", "paper", "ours") for k in b.knobs)
    assert b.reference


def _same(value, documented: str) -> bool:
    if isinstance(value, bool):
        return str(value).lower() == documented
    if isinstance(value, (int, float)):
        try:
            return float(documented) == float(value)
        except ValueError:
            return False
    return str(value) == documented


@pytest.mark.parametrize("bench", ["math", "humaneval", "mmlu_pro", "gpqa", "finqa",
                                   "legalbench"])
def test_table1_runs_each_baseline_with_the_documented_values(bench):
    """Every knob documented as the reference's (or the paper's) has that value in Table 1's
    configuration: set in the sweep, or the method's default."""
    runs = {r.name: r for r in EXPERIMENTS[f"table1_{bench}"].runs}
    assert runs["goa_mean"].composition == runs["goa_max"].composition == "pool"
    for b in BASELINES:
        for method in b.methods:
            if method not in runs:
                continue
            set_args = runs[method].knobs.get("method_args", {})
            args = method_class(method).Args(**set_args).model_dump()
            for k in b.knobs:
                if k.origin == "ours":
                    continue
                assert _same(args[k.name], k.value), (bench, method, k.name, args[k.name])
