from __future__ import annotations

import pytest

from df_ray.cli import demo_config_path, load_with_overrides
from df_ray.config import ConfigError, load_config


def write(tmp_path, text: str):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


BASE = """
benchmark: gpqa
backbones:
  b1: {kind: scripted, model: m1}
agents:
  - {id: a1, backbone: b1}
  - {id: a2, backbone: b1, seed: 2}
coordinator: {id: c, backbone: b1}
"""


def test_demo_config_is_valid():
    sweep = load_config(demo_config_path())
    (cfg,) = sweep.expand()
    assert cfg.benchmark == "humaneval" and len(cfg.agents) == 3
    kinds = {s.kind for s in cfg.backbones.values()}
    assert kinds == {"embedded"}


@pytest.mark.parametrize("bad, needle", [
    ("benchmark: mathh", "benchmark"),
    ("method_args: {disclosure: secret}", "method_args.disclosure"),
    ("method_args: {guardrail: {tau_p: 1.5}}", "method_args.guardrail.tau_p"),
    ("disclosure: moderate", "disclosure: darkforest's knobs moved to method_args"),
    ("method: vote", "method"),
    ("agents: [{id: a1, backbone: nope}]", "'nope' is not defined"),
    ("agents: [{id: a1, backbone: b1}, {id: a1, backbone: b1}]", "unique"),
    ("colour: blue", "colour"),
])
def test_bad_fields_are_named(tmp_path, bad, needle):
    key = bad.split(":")[0]
    text = "\n".join(line for line in BASE.strip().splitlines()
                     if not line.startswith(key) and not (key == "agents" and line.startswith("  -")))
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, text + "\n" + bad + "\n"))
    assert needle in str(e.value)
    assert "c.yaml" in str(e.value)


def test_engine_spec_errors_are_named(tmp_path):
    text = BASE.replace("b1: {kind: scripted, model: m1}", "b1: {kind: openai, model: m1}")
    with pytest.raises(ConfigError, match="base_url"):
        load_config(write(tmp_path, text))


def test_sweep_expands_runs_and_grid(tmp_path):
    text = "name: s\nbase:\n" + "\n".join("  " + line for line in BASE.strip().splitlines())
    text += ("\nruns:\n  - {name: strict}\n"
             "  - {name: permissive, method_args.disclosure: permissive}\n")
    text += "grid:\n  method_args.guardrail.tau_p: [0.5, 0.66, 0.8]\n"
    configs = load_config(write(tmp_path, text)).expand()
    assert len(configs) == 6
    assert {c.method_args["guardrail"]["tau_p"] for c in configs} == {0.5, 0.66, 0.8}
    assert len({c.fingerprint() for c in configs}) == 6
    assert sum(c.method_args["disclosure"] == "permissive" for c in configs) == 3
    # a grid point is named by its keys without the method_args. prefix
    assert configs[0].name == "strict guardrail.tau_p=0.5"


def test_overrides_from_the_command_line(tmp_path):
    p = write(tmp_path, BASE)
    sweep = load_with_overrides(str(p), ["method_args.guardrail.tau_p=0.8",
                                         "method_args.lazy=true"], 7)
    (cfg,) = sweep.expand()
    args = cfg.build_method().args
    assert args.guardrail.tau_p == 0.8 and args.lazy and cfg.limit == 7
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        load_with_overrides(str(p), ["oops"], None)


def test_every_experiment_has_a_cpu_miniature():
    from df_ray.cli import experiments_dir

    names = sorted(p.stem for p in experiments_dir().glob("*.yaml"))
    assert "table9_thresholds" in names and "table1_math" in names
    for name in names:
        full = load_config(experiments_dir() / f"{name}.yaml").expand()
        mini = load_with_overrides(None, [], 2, name).expand()
        assert len(mini) == len(full), name
        for cfg in mini:
            assert cfg.limit == 2 and cfg.tracking.experiment == name
            assert {s.kind for s in cfg.backbones.values()} == {"embedded"}
            assert all(a.max_tokens <= 128 for a in cfg.agents)


def test_unknown_experiment_lists_the_known_ones():
    with pytest.raises(ConfigError, match="table9_thresholds"):
        load_with_overrides(None, [], None, "table99")
