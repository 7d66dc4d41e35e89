"""Every paper experiment config validates, expands to the expected number of configurations,
shares one engine per backbone name, and names methods with valid method_args."""

from __future__ import annotations

from pathlib import Path

import pytest

from df_ray.config import load_config
from df_ray.methods import get_method
from df_ray.pipeline.runner import shared_backbones

CONFIGS = Path(__file__).resolve().parents[2] / "jobs" / "configs"

EXPECTED = {
    # 12 = darkforest + 3 single (one per agent) + self_consistency + weighted_vote + debate
    #      + reconcile + moa + goa_mean + goa_max + self_refine
    # (GPQA and HumanEval: each at run seeds 0, 1, 2)
    "table1_math": 12, "table1_humaneval": 36, "table1_mmlu_pro": 12, "table1_gpqa": 36,
    "table1_finqa": 12, "table1_legalbench": 12,
    "table2_decision": 8,  # 4 decision mechanisms x (MATH, LegalBench)
    "table6_voting": 6,  # majority, weighted, full x (MMLU-Pro, LegalBench)
    "table8_disclosure": 12,  # strict, moderate, permissive, adaptive on GPQA, x 3 seeds
    "table9_thresholds": 108,  # 3 k x 3 tau_p x 3 tau_m x (MATH, LegalBench x 3 seeds)
    "table10_finqa_scaling": 3,  # 3, 4, 5 backbones
    "figure7_calibration": 10,  # 5 ablations x (MATH, LegalBench)
    "figure9_coordinator": 6,  # each of the six pool backbones as FinQA's coordinator
}


def test_every_paper_config_exists():
    assert set(EXPECTED) <= {p.stem for p in CONFIGS.glob("*.yaml")}


@pytest.mark.parametrize("stem", sorted(EXPECTED))
def test_config_validates_and_expands(stem):
    sweep = load_config(CONFIGS / f"{stem}.yaml")
    configs = sweep.expand()
    assert len(configs) == EXPECTED[stem]
    assert len({c.fingerprint() for c in configs}) == len(configs)  # no duplicate runs
    assert len({c.name for c in configs}) == len(configs)
    backbones = shared_backbones(configs)  # one name = one engine across the sweep
    for spec in backbones.values():
        assert spec.kind == "vllm" and spec.dtype == "bfloat16"
        assert spec.resolved_num_gpus == 1.0
    for c in configs:
        get_method(c.method, **c.method_args)  # method_args accepted by the method
        assert c.tracking.experiment == stem
        assert c.benchmark in c.name or stem.startswith(("table1_", "table8", "table10",
                                                         "figure9"))


def test_sweeps_share_engines_across_files():
    """The same backbone name means the same engine in every file (shared cache entries)."""
    seen = {}
    for stem in sorted(EXPECTED):
        path = CONFIGS / f"{stem}.yaml"
        for c in load_config(path).expand():
            for name, spec in c.backbones.items():
                assert seen.setdefault(name, spec) == spec, (path.name, name)


def test_decision_encodings():
    configs = {c.name: c for c in load_config(CONFIGS / "table2_decision.yaml").expand()}
    args = {name: c.build_method().args for name, c in configs.items()}
    assert args["math belief only"].belief_only is True
    assert args["math coordinator only"].guardrail.enabled is False
    assert args["math lazy coordinator"].lazy is True
    default = args["math coordinator+guardrail"]
    assert (default.guardrail.k, default.guardrail.tau_p, default.guardrail.tau_m) == (2, 0.66, 0.3)
    assert configs["legalbench belief only"].benchmark == "legalbench"


def test_scaling_and_voting_encodings():
    scaling = load_config(CONFIGS / "table10_finqa_scaling.yaml").expand()
    assert [len(c.agents) for c in scaling] == [3, 4, 5]
    assert len({a.backbone for a in scaling[-1].agents}) == 5
    voting = {c.name: c for c in load_config(CONFIGS / "table6_voting.yaml").expand()}
    assert voting["mmlu_pro majority"].method == "weighted_vote"
    assert voting["mmlu_pro majority"].method_args == {"majority": True, "tie_rule": "first"}
    assert voting["legalbench weighted"].method_args == {  # every field kept
        "majority": False, "tie_rule": "first"}
    assert voting["mmlu_pro full"].method == "darkforest"
