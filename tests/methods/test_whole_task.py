"""The paper's decision rows and the baselines as their papers run them: belief-only and lazy
coordinators make no call, every later prompt carries the whole task (FinQA's table and
program language, LegalBench's instruction and labels, the options), and GoA's node sampling
picks top_k of the six-model pool from the model cards."""

from __future__ import annotations

import json
import re

import pytest

from df_ray.config import RunConfig
from df_ray.engines.scripted import last_user_content
from df_ray.experiments import POOL
from df_ray.methods import get_method
from df_ray.tasks.base import Sample
from df_ray.tasks.finqa import DSL_HELP
from tests.helpers import Script, answer, driver_config, make_sample

# ----------------------------------------------------------------------------- decision rows


def _agree(letter: str = "B") -> Script:
    return Script(default=answer(letter, 0.9))


def test_belief_only_makes_no_coordinator_call(run_method):
    cfg = driver_config(method_args={"belief_only": True})
    assert cfg.build_method().args.belief_only is True  # method_args reach the method
    run = run_method("darkforest", Script({("a1", "independent"): answer("B"),
                                           ("a2", "independent"): answer("C"),
                                           ("a3", "independent"): answer("D")}),
                     {"belief_only": True}, cfg=cfg)
    assert run.calls(role="coordinator") == []
    assert run.n_calls() == 3
    assert run.outcome.t_cross == 0
    assert run.outcome.columns["coordinator_called"] is False
    assert run.outcome.final is not None and run.outcome.final.answer == "B"  # z*: tie -> a1
    coordinator_tokens = sum(c.prompt_tokens + c.completion_tokens
                             for c in run.state.calls if c.role == "coordinator")
    assert coordinator_tokens == 0


def test_belief_only_with_no_valid_answer_answers_nothing(run_method):
    run = run_method("darkforest", Script(default="no idea"), {"belief_only": True},
                     cfg=driver_config(method_args={"belief_only": True}))
    assert run.calls(role="coordinator") == [] and run.outcome.final is None


def test_lazy_coordinator_skip_has_no_call_and_no_evidence(run_method):
    # Three agreeing agents: the guardrail trusts z*, so the lazy coordinator is skipped.
    lazy = run_method("darkforest", _agree(), {"lazy": True}, cfg=driver_config(method_args={"lazy": True}))
    assert lazy.calls(role="coordinator") == [] and lazy.n_calls() == 3
    assert lazy.outcome.t_cross == 0
    eager = run_method("darkforest", _agree(), cfg=driver_config())
    assert len(eager.calls(role="coordinator")) == 1 and eager.outcome.t_cross > 0
    assert lazy.outcome.final.answer == eager.outcome.final.answer


def test_lazy_coordinator_is_called_when_the_belief_is_uncertain(run_method):
    run = run_method("darkforest", Script({("a1", "independent"): answer("B"),
                                           ("a2", "independent"): answer("C"),
                                           ("a3", "independent"): answer("D"),
                                           ("coord", "coordinator"): answer("C")}),
                     {"lazy": True}, cfg=driver_config(method_args={"lazy": True}))
    assert len(run.calls(role="coordinator")) == 1 and run.outcome.t_cross > 0


# ----------------------------------------------------------------------------- whole task

FINQA = Sample(
    id="finqa/T-1", task="finqa",
    question=("Revenue grew.\n\nTable:\n| item | 2009 | 2008 |\n|---|---|---|\n"
              "| revenue | 5829 | 5735 |\n\nQuestion: what is the percentage change in revenue?"),
    gold="0.01639",
    meta={"program": "subtract(5829, 5735), divide(#0, 5735)", "exe_ans": 0.01639,
          "table": [["item", "2009", "2008"], ["revenue", "5829", "5735"]],
          "question_only": "what is the percentage change in revenue?"})
LEGAL = Sample(
    id="legalbench/hearsay/7", task="legalbench",
    question="Text: SYNTHETIC: a letter offered to prove its contents.", gold="Yes",
    meta={"legalbench_task": "hearsay", "labels": ["No", "Yes"],
          "instruction": "UNIQUE-INSTRUCTION: is the evidence hearsay?",
          "few_shot": [["Text: SYNTHETIC example", "No"]]})
MC = make_sample()


def _cfg(benchmark: str, method: str, n: int = 3) -> RunConfig:
    return driver_config(method=method, benchmark=benchmark, agents=("a1", "a2", "a3", "a4")[:n])


def _fin_answer(conf: float = 0.6):
    def reply(request):
        u = last_user_content(request)
        if u.startswith("Rate the following"):
            k = len(re.findall(r"^Response \d+ \(model", u, re.M))
            return "[" + ", ".join([f"{1 / k:.4f}"] * k) + "]"
        if u.startswith("Choose the "):
            return "0, 1, 2"
        return f"reasoning\nAnswer: subtract(5829, 5735), divide(#0, 5735)\nConfidence: {conf}"
    return reply


def _legal_answer(request):
    u = last_user_content(request)
    if u.startswith("Rate the following"):
        k = len(re.findall(r"^Response \d+ \(model", u, re.M))
        return "[" + ", ".join([f"{1 / k:.4f}"] * k) + "]"
    if u.startswith("Choose the "):
        return "0, 1, 2"
    return "reasoning\nAnswer: Yes\nConfidence: 0.4"


def _disagree(request):
    """Agents that disagree (so that discussion methods do not stop early) and critiques
    that find an error (so that Self-Refine refines)."""
    u = last_user_content(request)
    if "Proposed solution:" in u:
        return "The second step is wrong.\nVerdict: INCORRECT"
    if u.startswith("Rate the following"):
        k = len(re.findall(r"^Response \d+ \(model", u, re.M))
        return "[" + ", ".join([f"{1 / k:.4f}"] * k) + "]"
    if u.startswith("Choose the "):
        return "0, 1, 2"
    letter = {"m1": "A", "m2": "B", "m3": "C"}.get(request.model, "D")
    return answer(letter, 0.5)


INTERACTIVE = [("debate", {"rounds": 2}), ("reconcile", {"rounds": 1}), ("moa", {"layers": 2}),
               ("goa_mean", {}), ("goa_max", {}), ("self_refine", {"iterations": 1}),
               ("darkforest", {})]


def _later_prompts(run) -> list[str]:
    """Every request after the independent answers (what the coordinator and the baselines'
    later calls see), all its messages joined: a Debate turn carries the task in its
    conversation."""
    return ["\n".join(m.content for m in c.request.messages)
            for c in run.calls() if c.role != "agent"]


@pytest.mark.parametrize(("method", "args"), INTERACTIVE)
def test_finqa_table_and_dsl_reach_every_later_prompt(run_method, method, args):
    run = run_method(method, _disagree if method != "darkforest" else _fin_answer(), args,
                     samples=[FINQA], cfg=_cfg("finqa", method))
    prompts = _later_prompts(run)
    assert prompts, method
    for p in prompts:
        assert DSL_HELP in p, (method, p[:300])
        assert "| revenue | 5829 | 5735 |" in p, (method, p[:300])


@pytest.mark.parametrize(("method", "args"), INTERACTIVE)
def test_legalbench_instruction_and_labels_reach_every_later_prompt(run_method, method, args):
    run = run_method(method, _disagree if method != "darkforest" else _legal_answer, args,
                     samples=[LEGAL], cfg=_cfg("legalbench", method))
    prompts = _later_prompts(run)
    assert prompts
    for p in prompts:
        assert "Allowed labels: No, Yes" in p, (method, p[:300])
        assert "UNIQUE-INSTRUCTION" in p, (method, p[:300])


@pytest.mark.parametrize(("method", "args"), INTERACTIVE)
def test_options_reach_every_later_prompt(run_method, method, args):
    run = run_method(method, _disagree, args, samples=[MC], cfg=_cfg("mmlu_pro", method))
    for p in _later_prompts(run):
        assert "(B) 4" in p and "(D) 6" in p, (method, p[:300])


def test_self_refine_feedback_is_task_specific(run_method):
    from df_ray.core.parsing import answer_words

    run = run_method("self_refine", _disagree, {"iterations": 1, "protocol": "df_ray"},
                     samples=[FINQA], cfg=_cfg("finqa", "self_refine"))
    fb = [last_user_content(c.request) for c in run.calls(role="feedback")]
    assert fb and answer_words("finqa").critique_focus in fb[0]
    # the reference protocol's few-shot examples are the task kind's: FinQA programs
    run = run_method("self_refine", _disagree, {"iterations": 1}, samples=[FINQA],
                     cfg=_cfg("finqa", "self_refine"))
    (fb,) = [last_user_content(c.request) for c in run.calls(role="feedback")]
    assert "Answer: subtract(1200, 1000), divide(#0, 1000)" in fb
    assert "Which gas makes up most" not in fb


def test_baseline_defaults_follow_their_reference_code():
    sr = get_method("self_refine").args
    assert (sr.iterations, sr.protocol, sr.init_temperature, sr.feedback_temperature) == \
        (4, "few_shot", 0.0, 0.7)
    rc = get_method("reconcile").args
    assert (rc.rounds, rc.protocol) == (2, "json")
    moa = get_method("moa").args
    assert (moa.layers, moa.aggregator_temperature) == (2, 0.7)
    assert get_method("debate").rounds == 2
    goa = get_method("goa_mean")
    assert (goa.top_k, goa.threshold, goa.mp_rounds) == (3, 0.05, 1)
    a = goa.args
    assert (a.first_answer, a.allow_repeats, a.selection_attempts, a.scoring_attempts,
            a.replace_below, a.meta_temperature, a.t2s_reads) == \
        ("brief_json", True, 5, 3, 0.1, 0.7, "refined")  # _run_t_to_s at c9def00: final_response_dict


# ----------------------------------------------------------------------------- GoA nodes


def _pool_config(method: str) -> RunConfig:
    """The six pool backbones as scripted engines (same model ids, same cards)."""
    return RunConfig.model_validate({
        "benchmark": "mmlu_pro", "method": method, "composition": "pool",
        "backbones": {n: {"pool": n, "kind": "scripted"} for n in POOL}})


def test_goa_node_sampling_picks_top_k_of_the_six_pool_models(run_method):
    cfg = _pool_config("goa_mean")
    assert len(cfg.agents) == 6 and all(a.description for a in cfg.agents)
    seen = {}
    pool_cards = [m.card for m in POOL.values()]

    def meta_llm(request):
        u = last_user_content(request)
        if u.startswith("Select "):
            seen["prompt"] = u
            assert request.model == POOL["qwen25-7b"].model  # GoA's meta-LLM
            # The scripted meta-LLM reads the cards and picks the biomedical, the math and the
            # finance specialists.
            listing = json.loads(u.split("Available models:\n", 1)[1].split("\n", 1)[0])
            idx = {d["description"]: d["index"] for d in listing}
            return ",".join(str(idx[POOL[m].card]) for m in (
                "biomed-llama3-8b", "mathstral-7b", "finance-llama3-8b"))
        if u.startswith("Score the following"):
            return "[0.5, 0.5]"
        return answer("B", 0.7)

    run = run_method("goa_mean", meta_llm, samples=[MC], cfg=cfg)
    prompt = seen["prompt"]
    assert "Select 3 models best suited" in prompt
    listing = json.loads(prompt.split("Available models:\n", 1)[1].split("\n", 1)[0])
    # GoA's own cards, alone and in the pool's order (its endpoint.py's)
    assert [d["description"] for d in listing] == pool_cards
    nodes = run.outcome.extra["nodes"]
    assert nodes == ["biomed-llama3-8b", "mathstral-7b", "finance-llama3-8b"]  # reply order
    answered = [c.agent for c in run.calls(role="goa_initial")]
    assert answered == nodes
    assert run.outcome.final is not None and run.outcome.final.answer == "B"


def test_goa_unusable_selection_falls_back_to_the_first_top_k(run_method):
    cfg = _pool_config("goa_max")

    def meta_llm(request):
        u = last_user_content(request)
        if u.startswith("Select "):
            return "I cannot decide."
        if u.startswith("Score the following"):
            return "[0.5, 0.5]"
        return answer("B", 0.7)

    run = run_method("goa_max", meta_llm, samples=[MC], cfg=cfg)
    assert run.outcome.extra["nodes"] == list(POOL)[:3]


@pytest.mark.parametrize("args", [{}, {"lazy": True}, {"belief_only": True}])
def test_finish_uses_the_belief_its_plan_built(run_method, monkeypatch, args):
    import df_ray.methods.darkforest as darkforest

    counts = {"belief": 0, "parse": 0}
    build_belief, parse = darkforest.build_belief, darkforest.parse

    def counting_belief(*a, **k):
        counts["belief"] += 1
        return build_belief(*a, **k)

    def counting_parse(*a, **k):
        counts["parse"] += 1
        return parse(*a, **k)

    monkeypatch.setattr(darkforest, "build_belief", counting_belief)
    monkeypatch.setattr(darkforest, "parse", counting_parse)
    samples = [make_sample(f"q{i}") for i in range(3)]
    # a1 and a2 agree (a lazy coordinator is skipped), a3 does not
    script = Script({("a1", "independent"): answer("B"), ("a2", "independent"): answer("B"),
                     ("a3", "independent"): answer("C"), ("coord", "coordinator"): answer("B")})
    run = run_method("darkforest", script, args, samples=samples,
                     cfg=driver_config(method_args=args))
    assert [o.final.answer for o in run.outcomes] == ["B", "B", "B"]
    coordinator_calls = len(run.calls(role="coordinator"))
    assert coordinator_calls == (0 if args else 3)
    # one belief and one parse per agent output per sample, plus the coordinator's answer
    assert counts == {"belief": 3, "parse": 3 * 3 + coordinator_calls}
