"""The paper's experiments as the paper ran them: every sweep file expands to exactly the
configurations the experiment table (``df_ray.reporting.paper.EXPERIMENTS``, rendered as
docs/experiments.md) promises, on the pool's backbones; ``df-ray validate`` passes for every
sweep file with local fixture sources and says what to fetch without them."""

from __future__ import annotations

from pathlib import Path

import pytest

from df_ray.cli import main
from df_ray.config import ConfigError, RunConfig, load_config
from df_ray.experiments import COMPOSITIONS, FINQA_GROWTH, GENERAL, NAMED, POOL
from df_ray.experiments.budgets import MAX_TOKENS
from df_ray.reporting.paper import EXPERIMENTS, experiments_markdown, planned_run

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "jobs" / "configs"
FIXTURES = ROOT / "tests" / "fixtures"
#: Sweep files that are not an experiment of the paper: a cluster example, and the
#: laptop-scale run of Table 1's HumanEval protocol with small real models.
NOT_PAPER = {"cluster_example", "cpu_humaneval", "cpu_parser_probe"}

FIXTURE_SOURCES = {"math": "math500.jsonl", "humaneval": "humaneval.jsonl",
                   "mmlu_pro": "mmlu_pro.json", "gpqa": ".", "finqa": "finqa",
                   "legalbench": "legalbench.jsonl"}


def _get(d: dict, dotted: str):
    for part in dotted.split("."):
        d = d[part]
    return d


def _flat(knobs: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in knobs.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def test_every_sweep_file_is_an_experiment_of_the_table():
    stems = {p.stem for p in CONFIGS.glob("*.yaml")} - NOT_PAPER
    assert stems == set(EXPERIMENTS)


@pytest.mark.parametrize("name", sorted(EXPERIMENTS))
def test_sweep_expands_to_the_tables_configurations(name):
    exp = EXPERIMENTS[name]
    configs = load_config(ROOT / exp.sweep).expand()
    planned = exp.configurations()
    assert [c.name for c in configs] == [n for n, _ in planned]
    for cfg, (_, row) in zip(configs, planned, strict=True):
        if row.seeds is not None:  # every seed of the row, in the row's order
            assert f"seed={cfg.seed}" in cfg.name and cfg.seed in row.seeds, cfg.name
        else:
            assert cfg.seed == 0, cfg.name
        assert cfg.benchmark == row.benchmark, cfg.name
        assert cfg.method == row.method, cfg.name
        assert cfg.composition == row.agents, cfg.name
        assert [a.backbone for a in cfg.agents] == list(NAMED[row.agents]), cfg.name
        assert cfg.coordinator is not None and cfg.coordinator.backbone == row.coordinator
        dumped = cfg.model_dump(mode="json")
        for key, value in _flat(row.knobs).items():
            assert _get(dumped, key) == value, (cfg.name, key)
        # method_args holds every Args field: what the table does not name is the default
        defaults = cfg.build_method().Args().model_dump(mode="json")
        for key, default in _flat(defaults, "method_args.").items():
            if key not in _flat(row.knobs):
                assert _get(dumped, key) == default, (cfg.name, key)
        if cfg.method == "darkforest":  # the paper's DarkForest defaults
            for key, default in (("guardrail.k", 2), ("guardrail.tau_p", 0.66),
                                 ("guardrail.tau_m", 0.30), ("guardrail.enabled", True),
                                 ("disclosure", "strict"), ("ablation", "full"),
                                 ("lazy", False), ("belief_only", False), ("gamma", 0.5)):
                if f"method_args.{key}" not in _flat(row.knobs):
                    assert _get(dumped["method_args"], key) == default, (cfg.name, key)
        assert cfg.tracking.experiment == name
        assert planned_run(name, cfg.name) is row


def test_every_backbone_is_a_pool_model_with_a_card():
    for exp in EXPERIMENTS.values():
        for cfg in load_config(ROOT / exp.sweep).expand():
            for bname, spec in cfg.backbones.items():
                assert bname in POOL and spec.model == POOL[bname].model
                assert spec.kind == "vllm" and spec.dtype == "bfloat16"
            for a in cfg.agents:
                assert a.description == POOL[a.backbone].card
                assert a.id == a.backbone and a.seed == POOL[a.backbone].seed
                # GoA's temperature; the benchmark's budget (df_ray/experiments/budgets.py)
                assert (a.temperature, a.max_tokens) == (0.7, MAX_TOKENS[cfg.benchmark][0])
            assert cfg.coordinator.max_tokens == MAX_TOKENS[cfg.benchmark][0]


def test_compositions_are_three_pool_agents_with_the_general_coordinator():
    assert len(POOL) == 6 and GENERAL == "qwen25-7b"
    assert POOL[GENERAL].model == "Qwen/Qwen2.5-7B-Instruct"
    for bench, agents in COMPOSITIONS.items():
        assert len(agents) == len(set(agents)) == 3 and set(agents) <= set(POOL), bench
    assert COMPOSITIONS["legalbench"][0] == "saul-7b"
    assert COMPOSITIONS["finqa"][0] == "finance-llama3-8b"
    assert COMPOSITIONS["math"][0] == "mathstral-7b"
    assert COMPOSITIONS["humaneval"][0] == "qwen25-coder-7b"


def test_finqa_grows_in_the_stated_order():
    assert NAMED["finqa-4"] == COMPOSITIONS["finqa"] + FINQA_GROWTH[:1]
    assert NAMED["finqa-5"] == COMPOSITIONS["finqa"] + FINQA_GROWTH
    assert not set(FINQA_GROWTH) & set(COMPOSITIONS["finqa"])
    scaling = load_config(CONFIGS / "table10_finqa_scaling.yaml").expand()
    ids = [[a.id for a in c.agents] for c in scaling]
    assert ids[1][:3] == ids[0] and ids[2][:4] == ids[1]  # each one grows the previous


def test_revisions_can_be_pinned_in_the_config():
    cfg = RunConfig.model_validate({
        "benchmark": "finqa", "composition": "finqa", "data_revision": "v1.0",
        "backbones": {"saul-7b": "saul-7b",
                      "qwen25-7b": {"pool": "qwen25-7b", "revision": "a" * 40}}})
    assert cfg.backbones["qwen25-7b"].revision == "a" * 40
    assert cfg.backbones["qwen25-7b"].model == "Qwen/Qwen2.5-7B-Instruct"
    assert cfg.backbones["finance-llama3-8b"].revision is None
    assert cfg.agent_identities()["qwen25-7b"]["revision"] == "a" * 40
    assert cfg.data_revision == "v1.0"
    # From the command line: a field under a pool name overrides that entry.
    from df_ray.cli import load_with_overrides

    sweep = load_with_overrides(str(CONFIGS / "table2_decision.yaml"),
                                ["backbones.mathstral-7b.revision=" + "b" * 40], None)
    for c in sweep.expand():
        if "mathstral-7b" in c.backbones:
            assert c.backbones["mathstral-7b"].revision == "b" * 40
            assert c.backbones["mathstral-7b"].model == "mistralai/Mathstral-7B-v0.1"
    # A served endpoint for a pool model keeps its model id.
    served = RunConfig.model_validate({
        "benchmark": "math", "composition": "math",
        "backbones": {"qwen25-7b": {"pool": "qwen25-7b", "kind": "openai",
                                    "base_url": "http://serve:8000/v1"}}})
    assert served.backbones["qwen25-7b"].kind == "openai"
    assert served.backbones["qwen25-7b"].model == "Qwen/Qwen2.5-7B-Instruct"


def test_unknown_pool_names_are_refused():
    with pytest.raises(ValueError, match=r"composition.*known"):
        RunConfig.model_validate({"benchmark": "math", "composition": "nope"})
    with pytest.raises(ValueError, match="not a pool backbone"):
        RunConfig.model_validate({"benchmark": "math", "composition": "math",
                                  "backbones": {"x": "no-such-model"}})


def test_the_document_is_the_table():
    doc = ROOT / "docs" / "experiments.md"
    assert doc.read_text() == experiments_markdown(), (
        "docs/experiments.md is stale: python -m df_ray.reporting.paper > docs/experiments.md")
    assert "docs/experiments.md" in (ROOT / "README.md").read_text()


@pytest.mark.parametrize("stem", sorted(p.stem for p in CONFIGS.glob("*.yaml")))
def test_validate_passes_with_local_fixture_sources(stem, capsys, monkeypatch):
    # the weights check (gated models need a token; offline, weights must be cached): a
    # token, and a hub that is online but never reached (a closed port)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    # MMLU-Pro's official prompt: its validation examples from the fixture copy
    monkeypatch.setenv("DF_RAY_MMLU_PRO_VALIDATION", str(FIXTURES / "mmlu_pro_validation.json"))
    args = ["validate", "--config", str(CONFIGS / f"{stem}.yaml"), "--data"]
    for bench, src in FIXTURE_SOURCES.items():
        args += ["--source", f"{bench}={FIXTURES / src}"]
    assert main(args) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "valid" in out and "samples" in out


@pytest.mark.parametrize("stem", ["table1_finqa", "table10_finqa_scaling",
                                  "figure9_coordinator"])
def test_validate_says_what_to_fetch_without_the_data(stem, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("DF_RAY_HOME", str(tmp_path))
    assert main(["validate", "--config", str(CONFIGS / f"{stem}.yaml")]) == 2
    err = capsys.readouterr().err
    assert "data/finqa" in err and "github.com/czyssrs/FinQA" in err


def test_validate_source_option_is_checked():
    with pytest.raises(ConfigError, match="BENCHMARK=PATH"):
        from df_ray.cli import parse_sources

        parse_sources(["finqa"])


def test_the_shared_serve_pool_serves_the_backbone_pool():
    """`df-ray serve --config cluster/serve_pool.yaml` deploys exactly the pool, with the
    engine specs the sweeps use, so `--served` finds every sweep backbone by name."""
    from df_ray.serving.apps import load_pool

    served, _ = load_pool(ROOT / "cluster" / "serve_pool.yaml")
    assert set(served) == set(POOL)
    for exp in EXPERIMENTS.values():
        for cfg in load_config(ROOT / exp.sweep).expand():
            for name, spec in cfg.backbones.items():
                assert served[name] == spec, (exp.name, name)
