"""Where accuracy is won and lost, per sample and per configuration, on a scripted run that
hits every category by construction; and truncation that cannot undercount: a call without
a recorded finish_reason that used all of max_tokens is truncated (the committed
HumanEval cache has 50 such calls of qwen-a, 9 of them at exactly 384 tokens)."""

from __future__ import annotations

import glob
import math
import re
import shutil

import pyarrow.parquet as pq
import pytest

from df_ray.engines.base import Completion
from df_ray.engines.scripted import ScriptedEngine, last_user_content, whitespace_tokens
from df_ray.evaluation import Driver, Member, MetricsAccumulator, build_context
from df_ray.evaluation.scoring import _accounting, truncation_by_agent
from df_ray.evaluation.stop_reasons import stop_reason
from df_ray.methods import get_method, method_class
from df_ray.methods.base import CallRecord
from df_ray.methods.result_columns import FAILURES, won_and_lost
from df_ray.pipeline.cache import GenerationCache
from tests.helpers import FIXTURES, answer, driver_config, make_sample

#: Per sample (gold B): the three agents' answers, the coordinator's, and what that makes
#: of it under DarkForest's default guardrail (k 2, tau_p 0.66, tau_m 0.30), uncalibrated:
#: one answer each is untrusted and z* is a1's (the tie goes to the lowest agent index);
#: three alike are trusted (posterior 1, margin 1).
CASES = {
    "kept":      (("B", "A", "C"), "B"),   # z* B right, the coordinator keeps it
    "lost":      (("B", "A", "C"), "A"),   # z* B right, the coordinator loses it
    "found":     (("A", "B", "C"), "B"),   # z* A wrong, the coordinator finds B
    "unreach":   (("A", "C", "D"), "A"),   # nobody right
    "missed":    (("A", "B", "C"), "C"),   # a2 right, z* A wrong, the coordinator too
    "g_saved":   (("B", "B", "B"), "A"),   # trusted B over a wrong coordinator
    "g_lost":    (("A", "A", "A"), "B"),   # trusted A over a right coordinator
}
AGENT_INDEX = {"m1": 0, "m2": 1, "m3": 2}


def _responder(request):
    sid = re.search(r"\[(\w+)\]", last_user_content(request)).group(1)
    agents, coord = CASES[sid]
    if request.model == "mc":
        return answer(coord)
    return answer(agents[AGENT_INDEX[request.model]])


def _rows(method: str, method_args=None):
    cfg = driver_config(method=method, method_args=method_args,
                        coordinator=method == "darkforest")
    m = get_method(method, **dict(cfg.method_args))
    ctx = build_context(cfg, None, lambda agent, text: whitespace_tokens(text))
    driver = Driver([Member(m, ctx)], ScriptedEngine("scripted", _responder))
    rows = driver.run([make_sample(sid) for sid in CASES])
    out = {r.sample_id: r.to_dict() for _, r in driver.finish(rows)}
    acc = MetricsAccumulator(method_class(method).metrics)
    for r in out.values():
        acc.add(r)
    return out, acc.result()


def test_darkforest_won_and_lost_hits_every_category():
    rows, m = _rows("darkforest")
    tags = {sid: r["failure"] for sid, r in rows.items()}
    assert tags == {"kept": None, "lost": "coordinator_lost", "found": None,
                    "unreach": "unreachable", "missed": "selection_missed",
                    "g_saved": None, "g_lost": "guardrail_lost"}
    flags = {sid: tuple(k for k in ("kept", "lost", "found") if r[k]) for sid, r in rows.items()}
    assert flags == {"kept": ("kept",), "lost": ("lost",), "found": ("found",),
                     "unreach": (), "missed": (), "g_saved": ("kept",), "g_lost": ()}
    assert [sid for sid, r in rows.items() if r["guardrail_saved"]] == ["g_saved"]
    assert [sid for sid, r in rows.items() if r["guardrail_lost"]] == ["g_lost"]
    assert {sid: r["selected_correct"] for sid, r in rows.items()} == {
        "kept": True, "lost": True, "found": False, "unreach": False, "missed": False,
        "g_saved": True, "g_lost": False}
    assert rows["g_saved"]["top_posterior"] == pytest.approx(1.0)
    assert rows["kept"]["top_posterior"] == pytest.approx(1 / 3)
    assert not rows["g_lost"]["any_agent_correct"]  # a loss of the guardrail's, first
    # per configuration: the columns sum to the accuracy (3 of 7 right)
    n = len(CASES)
    assert m["accuracy"] == pytest.approx(3 / n)
    assert m["kept_rate"] + m["found_rate"] == pytest.approx(m["accuracy"])
    assert m["kept_rate"] + m["lost_rate"] == pytest.approx(m["selected_accuracy"])
    assert (m["kept_rate"], m["lost_rate"], m["found_rate"]) == pytest.approx(
        (2 / n, 1 / n, 1 / n))
    assert m["correct_override_rate"] == pytest.approx(1 / n)  # the guardrail's save
    assert m["wrong_override_rate"] == pytest.approx(1 / n)  # and its loss
    for tag in FAILURES:
        want = sum(t == tag for t in tags.values()) / n
        assert m[f"failure_rate.{tag}"] == pytest.approx(want), tag
    assert m["accuracy"] + sum(m[f"failure_rate.{t}"] for t in FAILURES) == pytest.approx(1)
    # the configuration's intervals and its belief's calibration, logged beside them
    from statsmodels.stats.proportion import proportion_confint

    assert (m["accuracy_ci_lo"], m["accuracy_ci_hi"]) == pytest.approx(
        proportion_confint(3, n, method="beta"))
    assert (m["accuracy_wilson_lo"], m["accuracy_wilson_hi"]) == pytest.approx(
        proportion_confint(3, n, method="wilson"))
    # P(z*|O) 1/3 on five samples (z* right on two), 1 on two (right on one): by hand,
    # ECE = 5/7 |2/5 - 1/3| + 2/7 |1/2 - 1|; Brier = (2 (2/3)^2 + 3 (1/3)^2 + 0 + 1) / 7
    assert m["belief_ece"] == pytest.approx(5 / 7 * (2 / 5 - 1 / 3) + 2 / 7 * 0.5)
    assert m["belief_brier"] == pytest.approx((2 * 4 / 9 + 3 / 9 + 1) / 7)
    assert math.isnan(m["accuracy_se_clustered"])  # MMLU-Pro declares no clusters


def test_a_vote_is_its_own_selection():
    rows, m = _rows("weighted_vote", {"majority": True})
    for r in rows.values():
        assert r["selected_correct"] == r["correct"] and not r["lost"] and not r["found"]
        assert r["guardrail_saved"] is None and r["guardrail_lost"] is None
    assert m["kept_rate"] == pytest.approx(m["accuracy"]) and m["lost_rate"] == 0
    assert math.isnan(m["belief_ece"]) and math.isnan(m["belief_brier"])  # no belief
    # B, A, C: the first agent's B wins the tie; B, B, B: B
    assert [sid for sid, r in rows.items() if r["correct"]] == ["kept", "lost", "g_saved"]
    assert rows["found"]["failure"] == "selection_missed"
    assert rows["unreach"]["failure"] == "unreachable"


def test_an_error_row_is_tagged():
    out = won_and_lost(correct=False, reachable=False, selected_correct=None, error=True)
    assert out["failure"] == "sample_error" and not (out["kept"] or out["found"])


# ----------------------------------------------------------------------------- truncation


def test_stop_reason_rule():
    assert stop_reason("stop", 384, 384) == "stop"  # a recorded reason stands
    assert stop_reason("length", 10, 384) == "length"
    assert stop_reason(None, 384, 384) == "length"
    assert stop_reason(None, 383, 384) == "unknown"
    assert stop_reason(None, 384, None) == "unknown"  # budget unknown: no inference


def test_a_cached_call_without_finish_reason_at_max_tokens_counts_truncated(tmp_path):
    """A run whose calls all come from a cache written before finish_reason was kept."""
    cfg = driver_config(method="darkforest",
                        agents=("a1", "a2", "a3"))
    budget = cfg.agent("a1").max_tokens
    m = get_method("darkforest", **dict(cfg.method_args))
    ctx = build_context(cfg, None, lambda agent, text: whitespace_tokens(text))
    sample = make_sample("q1")
    plan = Driver([Member(m, ctx)], ScriptedEngine("scripted", lambda r: answer("B")),
                  keep_plan=True)
    plan.run([sample])
    requests = {p.call.agent: p.call.request for p in plan.planned}
    cache = GenerationCache(str(tmp_path / "cache"))
    words = answer("B").split()
    cache.put_many([
        # every token of its budget used, no reason recorded: truncated
        (requests["a1"], Completion(" ".join(words + ["x"] * (budget - len(words))), 50,
                                    budget, finish_reason=None)),
        # short of the budget, no reason recorded: unknown
        (requests["a2"], Completion(answer("B"), 50, len(words), finish_reason=None)),
        (requests["a3"], Completion(answer("B"), 50, len(words), finish_reason="stop")),
        (requests["coord"], Completion(answer("B"), 50, len(words), finish_reason="stop")),
    ])
    never = ScriptedEngine("scripted", lambda r: pytest.fail("a fresh call was made"))
    driver = Driver([Member(m, ctx)], never, cache=GenerationCache(str(tmp_path / "cache")))
    (_, row), = driver.finish(driver.run([sample]))
    assert row.n_fresh_calls == 0
    assert (row.n_truncated, row.n_no_finish_reason, row.n_stop_unknown) == (1, 2, 1)
    acc = MetricsAccumulator(method_class("darkforest").metrics)
    acc.add(row.to_dict())
    out = acc.result()
    assert out["truncated_calls"] == 1 and out["truncation_rate"] == pytest.approx(1 / 4)
    assert out["truncation_rate.a1"] == 1.0 and out["truncation_rate.a2"] == 0.0
    assert (out["no_finish_reason_calls"], out["stop_unknown_calls"]) == (2, 1)


def test_the_committed_cache_calls_without_a_reason(tmp_path):
    """The 50 calls of qwen-a (max_tokens 384) the HumanEval cache kept without a reason:
    9 used all 384 tokens and count truncated; the other 41 are unknown."""
    src = FIXTURES / "cpu_humaneval" / "generations"
    shutil.copytree(src, tmp_path / "gen")
    table = pq.read_table(glob.glob(str(tmp_path / "gen" / "*.parquet"))).to_pandas()
    keys = table[table["finish_reason"].isna()]["key"].tolist()
    assert len(keys) == 50
    cache = GenerationCache(str(tmp_path / "gen"))
    calls = []
    for k in keys:
        c = cache.get(k)
        assert c is not None and c.finish_reason is None
        calls.append(CallRecord(round=0, role="agent", agent="qwen-a", key=k, text=c.text,
                                prompt_tokens=c.prompt_tokens,
                                completion_tokens=c.completion_tokens, cached=True,
                                finish_reason=c.finish_reason))
    budget = {"qwen-a": 384}.get
    acc = _accounting(calls, budget)
    assert (acc["n_truncated"], acc["n_no_finish_reason"], acc["n_stop_unknown"]) == (9, 50, 41)
    assert truncation_by_agent(calls, budget) == {"qwen-a": [50, 9]}
    # without the budget nothing is inferred: the undercount the rule removes
    assert truncation_by_agent(calls) == {"qwen-a": [50, 0]}


def test_benchmarks_declare_their_clusters():
    from df_ray.evaluation.scoring import sample_cluster
    from df_ray.tasks.base import Sample
    from df_ray.tasks.finqa import FinQATask
    from df_ray.tasks.legalbench import LegalBenchTask

    fin = Sample(id="finqa/ADI/2009/page_49.pdf-1", task="finqa", question="", gold="1")
    legal = Sample(id="legalbench/abercrombie/3", task="legalbench", question="", gold="x",
                   meta={"legalbench_task": "abercrombie"})
    assert FinQATask().cluster(fin) == "finqa/ADI/2009/page_49.pdf"
    assert LegalBenchTask().cluster(legal) == "abercrombie"

    class Ctx:
        task = object()  # a benchmark without clusters

    assert sample_cluster(Ctx(), fin) is None
    rows, _ = _rows("darkforest")
    assert {r["cluster"] for r in rows.values()} == {None}  # MMLU-Pro declares none
