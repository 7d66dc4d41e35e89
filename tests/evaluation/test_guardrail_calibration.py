"""The fitted guardrail end to end on scripted engines: the calibration pass runs the
coordinator on the held-out samples, the fit chooses belief-only when the coordinator is
always wrong and never-trust when it is always right, the frozen file round-trips and
serves a rerun without a second fit, and the evaluation uses the fitted setting.

The held-out set is built so that the choice is forced: 90 MMLU-Pro samples, on the even
ones all three agents give the gold answer (support 3, posterior 1); on the odd ones each
agent gives a different answer and exactly one of them is right, in turn (a1, a2, a3), so
only "always trust z*" trusts those (each candidate has support 1), and z* is right on
some of them. The fit counts the belief on half of the held-out samples and runs the
coordinator and the test on the other 45 (the fewest that can certify 5% at delta 0.1).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import df_ray
from df_ray.config import ConfigError, RunConfig
from df_ray.core.calibration import load_calibration
from df_ray.core.guardrail_fit import GuardrailSetting, fit_from_dict, split_held_out
from df_ray.engines.base import ChatRequest
from df_ray.engines.scripted import last_user_content
from df_ray.evaluation.calibration_files import check_calibration, find_calibration
from df_ray.evaluation.guardrail_calibration import guardrail_spec, least_held_out
from df_ray.methods.darkforest import DarkForest
from tests.helpers import LETTERS, answer, write_mmlu_goa

SCRIPT = "tests.evaluation.test_guardrail_calibration:respond"
N_HELD_OUT = 90
CERTIFY = N_HELD_OUT // 2
#: The model of every request ``respond`` answered, in order (the engines run in-process).
CALLS: list[str] = []
#: The held-out item of every coordinator request, in order.
COORDINATED: list[int] = []


def _gold(i: int) -> str:
    return LETTERS[(i * 7) % 4]  # write_mmlu_goa's gold letters


def respond(request: ChatRequest) -> str:
    """Agents m1..m3 as the module docstring says; coordinator ``mc-right`` answers the gold
    letter, ``mc-wrong`` another one."""
    CALLS.append(request.model)
    text = last_user_content(request)
    i = int(re.search(r"\[[ht](\d+)\]", text).group(1))
    gold = _gold(i)
    wrong = [c for c in LETTERS if c != gold]
    if request.model.startswith("mc"):
        if "[h" in text:
            COORDINATED.append(i)
        return answer(gold if request.model == "mc-right" else wrong[0])
    agent = int(request.model[1:]) - 1  # m1 -> 0
    if i % 2 == 0:
        return answer(gold)
    right = (i // 2) % 3
    if agent == right:
        return answer(gold)
    others = [a for a in range(3) if a != right]
    return answer(wrong[others.index(agent)])


def _cfg(tmp_path: Path, coordinator: str, **method_args) -> RunConfig:
    held = write_mmlu_goa(tmp_path / "held_out.json", N_HELD_OUT, tag="h")
    test = write_mmlu_goa(tmp_path / "test.json", 6, tag="t")
    return RunConfig.model_validate({
        "name": "fit", "benchmark": "mmlu_pro", "source": str(test),
        "calibration_source": str(held),
        "backbones": {f"b{i}": {"kind": "scripted", "model": f"m{i}", "script": SCRIPT}
                      for i in (1, 2, 3)}
                     | {"bc": {"kind": "scripted", "model": coordinator, "script": SCRIPT}},
        "agents": [{"id": f"a{i}", "backbone": f"b{i}"} for i in (1, 2, 3)],
        "coordinator": {"id": "coord", "backbone": "bc"},
        "method_args": {"guardrail": {"fit": True, "max_wrong_override": 0.05,
                                      "delta": 0.1}, **method_args},
        "calibration": {"dir": str(tmp_path / "cal")},
        "cache_root": str(tmp_path / "cache"),
        "results_dir": str(tmp_path / "results"),
        "tracking": {"uri": f"sqlite:///{tmp_path}/mlflow.db", "experiment": "fit"},
    })


def _file(tmp_path: Path) -> tuple[Path, dict]:
    (path,) = (tmp_path / "cal").glob("*.json")
    return path, json.loads(path.read_text())


def test_an_always_wrong_coordinator_makes_the_fit_choose_belief_only(tmp_path):
    cfg = _cfg(tmp_path, "mc-wrong")
    seen = len(COORDINATED)
    ev = df_ray.evaluate(cfg)
    path, data = _file(tmp_path)
    fit = data["guardrail_fit"]
    assert path.name.endswith(f"-guardrail-{path.stem.rsplit('-', 1)[1]}.json")
    # the belief is counted on one half, the coordinator and the test run on the other
    split = fit["split"]
    assert len(split["fit"]) == len(split["certify"]) == CERTIFY == fit["n"]
    assert not set(split["fit"]) & set(split["certify"])
    assert split_held_out(split["fit"] + split["certify"]) == (split["fit"],
                                                               split["certify"])
    items = COORDINATED[seen:]
    assert len(items) == len(set(items)) == CERTIFY  # one coordinator call per certifying one
    assert fit["chosen"]["setting"]["mode"] == "always"
    assert fit["n"] == CERTIFY and fit["spec"] == guardrail_spec(cfg)
    by_name = {s["name"]: s for s in fit["settings"]}
    assert by_name["never"]["accuracy"] == 0.0  # the coordinator alone: always wrong
    evens = sum(1 for i in items if i % 2 == 0)  # unanimous: the only ones k=2 trusts
    assert by_name["k=2,tau_p=0.66,tau_m=0.3"]["accuracy"] == pytest.approx(evens / CERTIFY)
    assert fit["chosen"]["accuracy"] >= evens / CERTIFY
    assert all(s["wrong_overrides"] == 0 and s["certified"] for s in fit["settings"])
    assert fit["tested"] == fit["certified"] == fit["grid_size"] == len(fit["settings"]) - 1
    # Clopper-Pearson at delta 0.1 with no wrong override in 45: 1 - 0.1 ** (1 / 45); over
    # the grid (delta / 60): 1 - (0.1 / 60) ** (1 / 45)
    assert fit["bound"] == pytest.approx(1 - 0.1 ** (1 / CERTIFY))
    assert fit["simultaneous_bound"] == pytest.approx(
        1 - (0.1 / fit["grid_size"]) ** (1 / CERTIFY))
    # the coordinator's 45 held-out calls count in the calibration's cost
    assert data["fit_calls"] == 3 * N_HELD_OUT + CERTIFY == fit["calls"] + 3 * N_HELD_OUT
    assert fit["tokens"] > 0 and data["fit_tokens"] > fit["tokens"]
    # the evaluation trusts z* on every test sample, as belief-only does
    assert ev.metrics["trusted_rate"] == 1.0
    assert {r.method_columns["decision_source"] for r in ev.rows} == {"guardrail"}


def test_an_always_right_coordinator_makes_the_fit_choose_never_trust(tmp_path):
    cfg = _cfg(tmp_path, "mc-right")
    ev = df_ray.evaluate(cfg)
    _, data = _file(tmp_path)
    fit = data["guardrail_fit"]
    assert fit["chosen"]["setting"]["mode"] == "never"
    assert fit["chosen"]["accuracy"] == 1.0 and fit["bound"] == 0.0
    by_name = {s["name"]: s for s in fit["settings"]}
    assert by_name["always"]["wrong_overrides"] > 3 and not by_name["always"]["certified"]
    assert ev.metrics["trusted_rate"] == 0.0 and ev.metrics["accuracy"] == 1.0


def test_the_frozen_fit_round_trips_and_a_rerun_fits_nothing(tmp_path):
    cfg = _cfg(tmp_path, "mc-wrong")
    df_ray.evaluate(cfg)
    path, data = _file(tmp_path)
    cal = load_calibration(path, agents=cfg.agent_ids(), benchmark="mmlu_pro")
    assert cal.guardrail_fit == data["guardrail_fit"]
    setting, bound = fit_from_dict(cal.guardrail_fit)
    assert setting == GuardrailSetting.always() and bound == data["guardrail_fit"]["bound"]
    assert cal.to_dict()["guardrail_fit"] == data["guardrail_fit"]
    assert find_calibration(tmp_path / "cal", "mmlu_pro", cfg.agent_ids(),
                            cfg.agent_identities(), guardrail=guardrail_spec(cfg)) == path
    before = path.read_text()
    again = df_ray.evaluate(cfg)
    assert [p.name for p in (tmp_path / "cal").glob("*.json")] == [path.name]
    assert path.read_text() == before
    assert again.metrics["trusted_rate"] == 1.0
    # another certificate is another fit: this file does not serve it
    other = _cfg(tmp_path, "mc-wrong", guardrail={"fit": True, "max_wrong_override": 0.1})
    assert find_calibration(tmp_path / "cal", "mmlu_pro", other.agent_ids(),
                            other.agent_identities(), guardrail=guardrail_spec(other)) is None
    # ... while a configuration with fixed thresholds may use its counts
    fixed = _cfg(tmp_path, "mc-wrong", guardrail={"fit": False})
    assert guardrail_spec(fixed) is None
    assert find_calibration(tmp_path / "cal", "mmlu_pro", fixed.agent_ids(),
                            fixed.agent_identities()) == path


def test_fixed_thresholds_stay_the_default_and_hash_as_before():
    d = DarkForest.Args().guardrail
    assert (d.fit, d.k, d.tau_p, d.tau_m) == (False, 2, 0.66, 0.30)
    args = {"guardrail": {"k": 2, "tau_p": 0.66, "tau_m": 0.3, "enabled": True, "fit": False,
                          "max_wrong_override": 0.05, "delta": 0.1,
                          "testing": "fixed_sequence"}, "lazy": False}
    assert DarkForest.hashed_args(args) == {
        "guardrail": {"k": 2, "tau_p": 0.66, "tau_m": 0.3, "enabled": True}, "lazy": False}
    on = {"guardrail": {**args["guardrail"], "fit": True}}
    assert DarkForest.hashed_args(on)["guardrail"]["fit"] is True


@pytest.mark.parametrize(("args", "needle"), [
    ({"ablation": "no_calibration"}, "ablation no_calibration"),
    ({"belief_only": True}, "belief_only never calls the coordinator"),
    ({"guardrail": {"fit": True, "enabled": False}}, "guardrail.enabled is false"),
])
def test_a_fit_without_a_calibration_pass_is_refused_at_validation(tmp_path, args, needle):
    with pytest.raises(ValueError, match=needle) as e:
        _cfg(tmp_path, "mc-wrong", **args)
    line = [m for m in str(e.value).splitlines() if needle in m]
    assert len(line) == 1 and "method_args.guardrail.fit" in line[0]


def test_a_split_too_small_to_certify_anything_is_refused_before_any_engine(tmp_path):
    assert least_held_out(0.05, 0.1, "fixed_sequence") == 45  # (0.95)^45 <= 0.1 < 0.95^44
    cfg = _cfg(tmp_path, "mc-wrong")
    small = cfg.model_copy(update={"calibration": cfg.calibration.model_copy(
        update={"limit": 88, "min_samples": 10})})  # 44 of them certify
    with pytest.raises(ConfigError, match="needs at least 45 certifying samples") as e:
        check_calibration(small)
    assert "has 88" in str(e.value) and "\n" not in str(e.value)
    zero = _cfg(tmp_path, "mc-wrong", guardrail={"fit": True, "max_wrong_override": 0.0})
    with pytest.raises(ConfigError, match="can never be certified"):
        check_calibration(zero)
    off = small.model_copy(update={"calibration": small.calibration.model_copy(
        update={"auto_fit": False})})
    with pytest.raises(ConfigError, match="a guardrail fit"):
        check_calibration(off)


def test_a_fit_on_frozen_counts_keeps_them_and_repeats_no_agent_call(tmp_path):
    """A file fitted on the same held-out samples for fixed thresholds is extended: its
    counts are kept (the belief is the fixed configuration's), the second pass runs alone
    (45 coordinator calls on the certifying half, no agent call again) and the test split
    replays the fixed configuration's coordinator calls."""
    from df_ray.pipeline.cache import GenerationCache

    cache = GenerationCache(str(tmp_path / "cache"))
    fixed = _cfg(tmp_path, "mc-wrong", guardrail={"fit": False})
    df_ray.evaluate(fixed, cache=cache)
    (base_path,) = (tmp_path / "cal").glob("*.json")
    base = json.loads(base_path.read_text())
    assert "guardrail_fit" not in base and base["fit_calls"] == 3 * N_HELD_OUT
    seen = len(CALLS)
    ev = df_ray.evaluate(_cfg(tmp_path, "mc-wrong"), cache=cache)
    assert len(CALLS) - seen == CERTIFY  # the certifying coordinator calls, nothing else
    assert {m for m in CALLS[seen:]} == {"mc-wrong"}
    assert sum(r.n_fresh_calls for r in ev.rows) == 0  # the fixed run's calls, replayed
    (fitted,) = [p for p in (tmp_path / "cal").glob("*.json") if p != base_path]
    data = json.loads(fitted.read_text())
    for key in ("patterns", "pairs", "agent_stats", "data_fingerprint", "n_samples"):
        assert data[key] == base[key], key
    assert data["fit_calls"] == base["fit_calls"] + CERTIFY
    assert data["guardrail_fit"]["chosen"]["setting"]["mode"] == "always"
    assert json.loads(base_path.read_text()) == base  # the frozen file is left as it was
