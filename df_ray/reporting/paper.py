"""The DarkForest paper's numbers (docs/method.md §8) as data, to print beside ours.

Accuracies are percentages, tokens are prompt + completion tokens per sample (all calls).
Method keys are df_ray method names. FinQA's headline accuracy is execution accuracy;
``prog_acc`` is program accuracy (our metric names: ``exec_acc`` / ``prog_acc``).
"""

from __future__ import annotations

#: benchmark -> method -> {"accuracy": %, "tokens": per sample, "prog_acc": % (FinQA)}
PAPER: dict[str, dict[str, dict[str, float]]] = {
    "math": {
        "darkforest": {"accuracy": 76.80, "tokens": 4700},
        "self_consistency": {"accuracy": 71.80, "tokens": 11800},
        "goa_mean": {"accuracy": 71.40, "tokens": 13800},
        "moa": {"accuracy": 67.00, "tokens": 8600},
        "debate": {"accuracy": 57.40},
        "reconcile": {"accuracy": 27.20},
        "goa_max": {"tokens": 7600},
    },
    "humaneval": {
        "darkforest": {"accuracy": 84.00, "tokens": 1500},
        "goa_max": {"accuracy": 86.00},
        "moa": {"accuracy": 84.00},
        "goa_mean": {"accuracy": 80.00},
        "self_refine": {"accuracy": 70.00},
    },
    "mmlu_pro": {
        "darkforest": {"accuracy": 58.38, "tokens": 5900},
        "debate": {"accuracy": 55.86},
        "moa": {"accuracy": 53.38},
        "self_consistency": {"accuracy": 53.00},
        "self_refine": {"accuracy": 52.62},
        "reconcile": {"accuracy": 45.71},
        "goa_mean": {"tokens": 24600},
    },
    "gpqa": {
        "darkforest": {"accuracy": 39.90, "tokens": 3200},
        "self_consistency": {"accuracy": 40.40},
        "moa": {"accuracy": 35.86},
        "debate": {"accuracy": 35.86},
        "goa_mean": {"accuracy": 34.85, "tokens": 13000},
    },
    "finqa": {
        "darkforest": {"accuracy": 15.67, "prog_acc": 11.33, "tokens": 4500},
        "goa_mean": {"accuracy": 16.00, "prog_acc": 8.67},
        "self_refine": {"accuracy": 8.67, "prog_acc": 3.33},
        "reconcile": {"accuracy": 4.33, "prog_acc": 1.33},
    },
    "legalbench": {
        "darkforest": {"accuracy": 68.00, "tokens": 1900},
        "reconcile": {"accuracy": 69.00},
        "self_consistency": {"accuracy": 65.00},
        "self_refine": {"accuracy": 60.80},
        "moa": {"accuracy": 53.80},
        "goa_mean": {"tokens": 8700},
    },
}

#: FinQA backbone scaling (Table 10): number of agents -> numbers. Tokens for 4 backbones are
#: not given.
PAPER_FINQA_SCALING: dict[int, dict[str, float]] = {
    3: {"accuracy": 15.67, "prog_acc": 11.33, "tokens": 4500},
    4: {"accuracy": 19.00, "prog_acc": 13.00},
    5: {"accuracy": 19.33, "prog_acc": 13.67, "tokens": 5400},
}

#: Ablation findings, in accuracy points (full DarkForest minus the ablated variant, unless
#: stated), and rates in percent.
PAPER_ABLATIONS: dict[str, dict[str, float | tuple[float, float]]] = {
    "guardrail_gain": {"math": 1.40, "legalbench": 2.40},  # guardrail vs coordinator only
    "calibration_gain": {"math": 5.6},  # full vs no_calibration
    "agent_only_gap": {"mmlu_pro": 2.0},  # full vs agent-level-only weighting
    "disclosure_cost": {"gpqa": 3.3},  # strict vs more disclosure
    "tau_p_0.80_cost": {"legalbench": 1.40},  # tau_p 0.66 -> 0.80
    "wrong_override_rate_pct": {"math": (3.0, 3.2), "legalbench": (0.4, 2.4)},
    "reachability_pct": {"math": 75.2},
}

#: The paper's DarkForest defaults: the row a paper number applies to.
DEFAULTS = {"guardrail.k": 2, "guardrail.tau_p": 0.66, "guardrail.tau_m": 0.30,
            "guardrail.enabled": True, "disclosure": "strict", "ablation": "full",
            "lazy_coordinator": False, "n_agents": 3}


def paper_numbers(benchmark: str, method: str, settings: dict | None = None) -> dict[str, float]:
    """The paper's numbers for a configuration, or {} when the paper has none for it.

    DarkForest numbers apply only to the paper's default settings (``DEFAULTS``; FinQA with 4
    or 5 agents gets the scaling numbers); a baseline's apply to any configuration of it.
    """
    settings = settings or {}
    if method == "darkforest":
        n = settings.get("n_agents", 3)
        for k, v in DEFAULTS.items():
            if k == "n_agents":
                continue
            if k in settings and settings[k] != v:
                return {}
        if benchmark == "finqa" and n in PAPER_FINQA_SCALING:
            return dict(PAPER_FINQA_SCALING[n])
        if n != 3:
            return {}
    return dict(PAPER.get(benchmark, {}).get(method, {}))
