"""``df-ray show``: the calls a configured method makes for one sample, before any model runs,
are the calls a run of it makes (same requests, same rounds), printed round by round."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import df_ray
from df_ray.cli import main
from df_ray.config import RunConfig
from df_ray.engines.scripted import ScriptedEngine
from df_ray.evaluation.context import load_samples
from df_ray.evaluation.preview import preview, render

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def config(tmp_path: Path, method: str = "debate", **over) -> dict:
    backbones = {f"b{i}": {"kind": "vllm", "model": f"org/model-{i}"} for i in (1, 2, 3)}
    cfg = {"name": f"{method}-math", "benchmark": "math",
           "source": str(FIXTURES / "math500.jsonl"), "method": method,
           "backbones": backbones,
           "agents": [{"id": f"a{i}", "backbone": f"b{i}", "seed": i} for i in (1, 2, 3)],
           "calibration": {"dir": str(tmp_path / "calibration"), "auto_fit": False},
           "results_dir": str(tmp_path / "results"),
           "tracking": {"uri": f"sqlite:///{tmp_path}/mlflow.db"}}
    cfg.update(over)
    return cfg


def first_id(cfg: RunConfig) -> str:
    return load_samples(cfg)[1].id


def test_the_preview_is_the_run_s_calls_round_by_round(tmp_path):
    cfg = RunConfig.model_validate(config(tmp_path, method_args={"rounds": 2}))
    sid = first_id(cfg)
    shown = preview(cfg, sid)
    assert [(c.round, c.planned.call.agent) for c in shown.calls] == [
        (0, "a1"), (0, "a2"), (0, "a3"), (1, "a1"), (1, "a2"), (1, "a3")]
    # a run of the same configuration on the same stand-ins makes exactly these requests
    engines = {b: ScriptedEngine(spec.model, "majority") for b, spec in cfg.backbones.items()}
    sample = next(s for s in load_samples(cfg) if s.id == sid)
    ev = df_ray.evaluate(cfg, [sample], engines=engines)
    made = sorted(r.key() for e in engines.values() for r in e.calls)
    assert sorted(c.planned.call.request.key() for c in shown.calls) == made
    assert shown.row.final_answer == ev.rows[0].final_answer
    text = "\n".join(render(cfg, shown))
    assert "Solve for $x$: $2x + 3 = 11$." in text and "round 1" in text
    # round 1 quotes what the other agents answered in round 0 (the stand-in's words)
    other = shown.calls[1].record.text.splitlines()[1]
    assert other in shown.calls[3].planned.call.request.messages[-1].content
    assert "stand-in answers (no model runs): scripted b1: majority" in text


def test_df_ray_show_prints_a_scripted_backbone_s_own_answers(tmp_path, capsys):
    cfg = config(tmp_path, method="darkforest", method_args={"ablation": "no_calibration"},
                 coordinator={"id": "coord", "backbone": "b1"})
    cfg["backbones"] = {f"b{i}": {"kind": "scripted", "model": f"m{i}",
                                  "script": "constant:The answer is \\boxed{4}."}
                        for i in (1, 2, 3)}
    path = tmp_path / "show.yaml"
    path.write_text(yaml.safe_dump(cfg))
    sid = first_id(RunConfig.model_validate(cfg))
    assert main(["show", "--config", str(path), "--sample", sid]) == 0
    out = capsys.readouterr().out
    # the agents' three calls, then the coordinator's (not lazy: called though trusted)
    assert out.count("--- call ") == 4 and "--- call 1/1: coordinator coord" in out
    assert "scripted b1: constant:The answer is \\boxed{4}." in out
    assert "final answer: '4' (gold '4'; correct with the stand-in answers)" in out
    assert "none (the method uses no calibration)" in out


@pytest.mark.parametrize("argv, says", [
    (["--sample", "math/nonesuch"], "no sample 'math/nonesuch' in math's test split"),
    (["--sample", "x", "--name", "other"], "no configuration named 'other'"),
])
def test_df_ray_show_of_an_unknown_sample_or_name_is_one_line(tmp_path, capsys, argv, says):
    path = tmp_path / "show.yaml"
    path.write_text(yaml.safe_dump(config(tmp_path)))
    assert main(["show", "--config", str(path), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err
