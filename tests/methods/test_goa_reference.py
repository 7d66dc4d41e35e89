"""Graph-of-Agents as its reference code runs it (UNITES-Lab/GoA), on scripted engines serving
the six-backbone pool (composition ``pool``: the six agents, the Qwen2.5-7B coordinator as
the meta-LLM): GoA's own first-answer prompt, the low-confidence replacement by the general
model, selections with repeats, and the retried malformed selection."""

from __future__ import annotations

import json

import pytest

from df_ray.config import RunConfig
from df_ray.engines.scripted import whitespace_tokens
from df_ray.evaluation.scoring import score
from df_ray.experiments import POOL
from df_ray.methods import get_method
from df_ray.methods.goa import goa_counted_tokens, parse_selection, without_confidence
from df_ray.methods.prompt_templates import goa_initial_prompt
from df_ray.tasks import get_task
from df_ray.tasks.answer_instruction import CONFIDENCE_LINE
from df_ray.tasks.base import Sample
from tests.helpers import Script, json_answer

QWEN, CODER, MATHSTRAL, SAUL = (POOL[n].model for n in ("qwen25-7b", "qwen25-coder-7b",
                                                        "mathstral-7b", "saul-7b"))
IDS = list(POOL)  # index order of the meta-LLM's model list


def pool_config(method: str, **over) -> RunConfig:
    return RunConfig.model_validate({
        "benchmark": "math", "method": method, "composition": "pool",
        "backbones": {n: {"kind": "scripted", "model": m.model} for n, m in POOL.items()},
        **over,
    })


def math_sample() -> Sample:
    return Sample(id="m1", task="math", question="What is $2+2$?", gold="4")


def first(letter_or_number: str, conf=0.9) -> str:
    return json_answer(letter_or_number, conf)


def script(selection, over: dict | None = None) -> Script:
    """Every pool model answers 4 with confidence 0.9 and scores evenly; refinements and the
    pooling answer \\boxed{4}."""
    table = {(QWEN, "select"): selection}
    for m in POOL.values():
        table[(m.model, "goa_initial")] = first("4")
        table[(m.model, "score")] = "[0.5, 0.5]"
        for ph in ("s2t", "t2s", "pool"):
            table[(m.model, ph)] = "Refined.\n\\boxed{4}"
    table.update(over or {})
    return Script(table)


def run(run_method, method: str, sc: Script, args: dict | None = None):
    return run_method(method, sc, args or {}, samples=[math_sample()],
                      cfg=pool_config(method))


def test_pool_config_has_six_agents_and_the_general_coordinator():
    cfg = pool_config("goa_mean")
    assert [a.id for a in cfg.agents] == IDS and len(IDS) == 6
    assert cfg.coordinator.backbone == "qwen25-7b" and cfg.coordinator.temperature == 0.2
    assert all(a.description for a in cfg.agents)  # the model cards the meta-LLM reads


@pytest.mark.parametrize("name", ["goa_mean", "goa_max"])
def test_first_round_uses_goas_prompt_in_its_own_calls(run_method, name):
    r = run(run_method, name, script("1,2,5"))
    (sel,) = r.calls(role="selector")
    assert sel.agent == "coordinator"
    text = sel.request.messages[-1].content
    assert text.startswith("Select 3 models best suited for this question.")
    assert "You may repeat an index if the model is highly relevant" in text
    assert json.dumps(POOL["saul-7b"].card) in text  # GoA's own card, as its listing has it
    assert sel.request.sampling.temperature == 0.7  # GoA's, not the coordinator's 0.2
    initial = r.calls(role="goa_initial")
    assert [c.agent for c in initial] == ["qwen25-coder-7b", "mathstral-7b", "saul-7b"]
    task = get_task("math")
    expected = goa_initial_prompt(without_confidence(task.agent_prompt(math_sample())),
                                  'a mathematical expression or number (e.g., "42" or "3/4")')
    for c in initial:
        assert c.request.messages[-1].content == expected
        assert "Provide brief reasoning (2-3 key sentences)" in expected
        assert '"confidence_level": "<a float between 0.0 and 1.0>"' in expected
    assert not r.calls(role="agent")  # not DarkForest's independent generations
    assert r.outcome.final.answer == "4"
    assert [o.confidence for o in r.outcome.agent_observations] == [0.9, 0.9, 0.9]


def test_low_confidence_nodes_are_replaced_by_the_general_model(run_method):
    sc = script("1,2,5", {(MATHSTRAL, "goa_initial"): first("5", 0.05),
                            (SAUL, "goa_initial"): json_answer("5", None),  # no confidence
                            (QWEN, "goa_initial"): first("4", 0.8)})
    r = run(run_method, "goa_mean", sc)
    reps = r.calls(role="goa_replacement")
    assert [c.agent for c in reps] == ["qwen25-7b", "qwen25-7b"]
    assert len({c.request.key() for c in reps}) == 2  # one sample each
    assert r.outcome.extra["nodes"] == ["qwen25-coder-7b", "qwen25-7b", "qwen25-7b"]
    assert r.outcome.extra["replaced"] == {"1": "mathstral-7b", "2": "saul-7b"}
    assert r.outcome.extra["confidences"] == [0.9, 0.05, None]
    # the replacements' answers are the nodes' first answers from then on
    assert [o.answer for o in r.outcome.agent_observations] == ["4", "4", "4"]
    # calls and tokens: 1 selection + 3 first answers + 2 replacements + 3 scoring
    # + 2 source-to-target + 2 target-to-source + 1 pooling; every call's tokens counted
    assert r.n_calls() == 14
    state = r.state
    recs = [c for c in state.calls if c.role == "goa_replacement"]
    for rec, call in zip(recs, reps, strict=True):
        prompt = sum(whitespace_tokens(m.content) for m in call.request.messages)
        assert rec.prompt_tokens == prompt
        assert rec.completion_tokens == whitespace_tokens(first("4", 0.8))
    cfg = pool_config("goa_mean")
    from df_ray.evaluation import build_context

    ctx = build_context(cfg, None, lambda agent, text: whitespace_tokens(text))
    row = score(state, get_method("goa_mean"), ctx)
    assert row.n_calls == 14
    assert row.total_tokens == sum(c.prompt_tokens + c.completion_tokens for c in state.calls)
    assert row.total_tokens > sum(c.prompt_tokens + c.completion_tokens
                                  for c in state.calls if c.role != "goa_replacement")


def test_a_general_node_with_low_confidence_keeps_its_answer(run_method):
    sc = script("0,1,2", {(QWEN, "goa_initial"): first("4", 0.01)})
    r = run(run_method, "goa_max", sc)
    assert not r.calls(role="goa_replacement")
    sc = script("0,1,2", {(QWEN, "goa_initial"): first("4", 0.01)})
    r = run(run_method, "goa_max", sc, {"replace_below": 0.0})
    assert not r.calls(role="goa_replacement")


def test_a_repeated_index_is_a_separate_node(run_method):
    r = run(run_method, "goa_mean", script("0,0,5"))
    initial = r.calls(role="goa_initial")
    assert [c.agent for c in initial] == ["qwen25-7b", "qwen25-7b", "saul-7b"]
    assert initial[0].request.model == initial[1].request.model == QWEN
    assert initial[0].request.seed != initial[1].request.seed  # its own sample
    assert len({c.request.key() for c in initial}) == 3
    assert r.outcome.extra["nodes"] == ["qwen25-7b", "qwen25-7b", "saul-7b"]
    assert len(r.calls(role="scorer")) == 3
    # with repeats dropped (ablation) the reply has 2 distinct indices: not 3, retried
    assert parse_selection("0,0,5", 6, 3, allow_repeats=False) is None
    assert parse_selection("0,0,5", 6, 3) == [0, 0, 5]


def test_a_malformed_selection_is_retried_with_feedback(run_method):
    sc = script(["I would pick the coder and the math model.", "1, 2, 5", "1,2,5"])
    r = run(run_method, "goa_max", sc)
    sels = r.calls(role="selector")
    assert len(sels) == 3
    assert "Previous invalid responses" not in sels[0].request.messages[-1].content
    assert ("(Previous invalid responses: ['I would pick the coder and the math model.', "
            "'1, 2, 5']. Fix this.)") in sels[2].request.messages[-1].content
    assert len({c.request.seed for c in sels}) == 3
    assert r.outcome.extra["nodes"] == ["qwen25-coder-7b", "mathstral-7b", "saul-7b"]
    assert r.outcome.extra["selection_attempts"] == 3


def test_five_malformed_selections_fall_back_to_the_first_models(run_method):
    r = run(run_method, "goa_max", script("no idea"))
    assert len(r.calls(role="selector")) == 5
    assert r.outcome.extra["selection_fallback"] is True
    assert r.outcome.extra["nodes"] == IDS[:3]


@pytest.mark.parametrize(("text", "expected"), [
    ("0,1,5", [0, 1, 5]),
    ("<think>math first</think> 2,2,0", [2, 2, 0]),
    ("Answer: 3", None),  # the reference reads one index here: not the 3 asked for
    ("1, 2, 5", None),  # spaces: the reference's pattern does not match
    ("0,1,6", None),  # out of range
    ("0,,1", None),
])
def test_selection_reads_as_the_reference_reads_it(text, expected):
    assert parse_selection(text, 6, 3) == expected


def test_scoring_retries_a_malformed_reply_then_drops_the_judge(run_method):
    sc = script("1,2,5", {(CODER, "score"): ["0.5 and 0.5", "[0.6, 0.4]"],
                            (SAUL, "score"): "no scores"})
    r = run(run_method, "goa_max", sc)
    scorers = r.calls(role="scorer")
    assert [c.agent for c in scorers].count("qwen25-coder-7b") == 2
    assert [c.agent for c in scorers].count("saul-7b") == 3
    assert any("(Previous invalid responses: ['0.5 and 0.5']. Must have exactly 2 scores "
               "summing to 1.0.)" in c.request.messages[-1].content for c in scorers)
    assert r.outcome.extra["graph"]["dropped_judges"] == [2]


@pytest.mark.parametrize(("text", "answer", "conf"), [
    ('{"reasoning": "r", "answer": "3/4", "confidence_level": "0.8"}', "3/4", 0.8),
    ('Sure.\n```json\n{"reasoning": "r", "answer": "0.75", "confidence_level": 0.6}\n```',
     "3/4", 0.6),
    ('Thinking ... {"answer": "\\\\frac{3}{4}", "confidence_level": 1.5}', "3/4", None),
    ("No JSON. The answer is \\boxed{3/4}. confidence: 0.3", "3/4", 0.3),
    ('{"reasoning": "r", "answer": "3/4"}', "3/4", None),
])
def test_goa_reads_first_answers_as_the_reference_does(text, answer, conf):
    from df_ray.core.parsing import canonicalize
    from df_ray.core.types import ParseSpec
    from df_ray.methods.json_answers import goa_json

    spec = ParseSpec("math")
    obs, c = goa_json(text, spec)
    assert obs.valid and obs.answer == canonicalize(answer, spec)
    assert c == conf  # None: missing (or outside [0, 1]): GoA replaces the node
    assert obs.confidence == (0.5 if conf is None else conf)
    choice, _ = goa_json('{"answer": "(c) Paris", "confidence_level": 0.9}',
                         ParseSpec("choice", n_options=4))
    assert choice.answer == "C"


@pytest.mark.parametrize(("text", "expected"), [
    ("[0.7, 0.3]", [0.7, 0.3]),
    ("Scores: [0.6,0.4] because ...", [0.6, 0.4]),
    ("'2': 0.3, '1': 0.7", [0.7, 0.3]),  # ordered by the node index
    ("* 1: 0.5\n* 4: 0.5", [0.5, 0.5]),
    ("0.5, 0.5", [0.5, 0.5]),
    ("0.5 and 0.5", None),
    ("[0.5, 0.6]", None),  # sums above 1
    ("[0.2, 0.2]", None),  # sums to 0.9 or less
    ("[1.0]", None),  # not 2 scores
])
def test_scores_read_as_the_reference_reads_them(text, expected):
    from df_ray.methods.goa import parse_scores

    assert parse_scores(text, 2) == (pytest.approx(expected) if expected else None)


# ----------------------------------------------------------------------------- GoA's settings


@pytest.mark.parametrize("name", ["goa_mean", "goa_max"])
def test_every_goa_call_is_sent_at_800_tokens_whatever_the_benchmark_budget(run_method, name):
    """main.py / run.sh: --max_tokens 800 for every call, the meta-LLM's included; the
    benchmark's budget (2048 for MATH) stays the other methods'."""
    cfg = pool_config(name, max_tokens=2048)
    assert {a.max_tokens for a in cfg.agents} == {2048} and cfg.coordinator.max_tokens == 2048
    sc = script("1,2,5", {(MATHSTRAL, "goa_initial"): first("5", 0.05)})  # a replacement too
    r = run_method(name, sc, {}, samples=[math_sample()], cfg=cfg)
    roles = {c.role for c in r.calls()}
    assert {"selector", "goa_initial", "goa_replacement", "scorer", "source_to_target",
            "target_to_source"} <= roles
    assert name == "goa_max" or "pooling" in roles
    assert {c.request.sampling.max_tokens for c in r.calls()} == {800}
    # the argument changes it; null gives each agent its own budget
    r2 = run_method(name, script("1,2,5"), {"max_tokens": None}, samples=[math_sample()],
                    cfg=cfg)
    assert {c.request.sampling.max_tokens for c in r2.calls()} == {2048}


def test_every_goa_call_asks_for_chatml_where_a_model_has_no_template(run_method):
    """utils.py generate_vllm: a model without a chat template (finance-Llama) gets ChatML;
    ``no_template: completion`` leaves df_ray's completion prompt (the field unset, so those
    requests keep the keys of every other method's)."""
    r = run_method("goa_mean", script("1,2,5"), {}, samples=[math_sample()])
    assert {c.request.no_template for c in r.calls()} == {"chatml"}
    r2 = run_method("goa_mean", script("1,2,5"), {"no_template": "completion"},
                    samples=[math_sample()])
    assert {c.request.no_template for c in r2.calls()} == {None}
    assert {c.request.key() for c in r.calls()}.isdisjoint(c.request.key() for c in r2.calls())


def test_goa_prompts_carry_no_confidence_line(run_method):
    r = run(run_method, "goa_max", script("1,2,5"))
    assert r.calls(role="goa_initial")
    for c in r.calls():
        assert CONFIDENCE_LINE not in c.request.messages[-1].content, c.role
    # the task's own prompt does carry it: it was taken out, not never there
    assert CONFIDENCE_LINE in get_task("math").agent_prompt(math_sample())


def test_target_to_source_reads_the_refined_answers(run_method):
    """c9def00 ``_run_t_to_s`` builds its references from ``final_response_dict``, which
    source-to-target has just filled: the targets' refined answers. ``t2s_reads: initial``
    (df_ray's earlier reading) shows their first answers instead."""
    over = {(CODER, "goa_initial"): first("4", 0.9), (MATHSTRAL, "goa_initial"): first("4", 0.8),
            (SAUL, "goa_initial"): first("4", 0.7),
            (CODER, "score"): "[0.6, 0.4]", (MATHSTRAL, "score"): "[0.6, 0.4]",
            (SAUL, "score"): "[0.6, 0.4]"}
    for m, tag in ((CODER, "coder"), (MATHSTRAL, "mathstral"), (SAUL, "saul")):
        over[(m, "s2t")] = f"REFINED-BY-{tag}\n\\boxed{{4}}"
    r = run(run_method, "goa_mean", script("1,2,5", over))
    t2s = r.calls(role="target_to_source")
    assert t2s
    s2t_agents = {c.agent for c in r.calls(role="source_to_target")}
    for c in t2s:
        text = c.request.messages[-1].content
        shown = text.split("Updated responses from other models:")[1]
        assert "REFINED-BY-" in shown
        # its own response is its pre-round one ("Your initial response")
        assert "REFINED-BY-" not in text.split("Updated responses")[0]
    assert s2t_agents  # the refinements it reads came from these calls
    old = run_method("goa_mean", script("1,2,5", over), {"t2s_reads": "initial"},
                     samples=[math_sample()], cfg=pool_config("goa_mean"))
    for c in old.calls(role="target_to_source"):
        assert "REFINED-BY-" not in c.request.messages[-1].content


def test_goa_counts_tokens_its_own_way(run_method):
    """GoA's process_fn adds every call's tokens but only edge sampling's last call."""
    sc = script("1,2,5", {(SAUL, "score"): ["not scores", "[0.5, 0.5]"]})  # a retry
    r = run(run_method, "goa_mean", sc)
    state = r.state
    scoring = [c for c in state.calls if c.role == "scorer"]
    assert len(scoring) == 4
    every = sum(c.prompt_tokens + c.completion_tokens for c in state.calls)
    last_judge = state.data["judges"][str(2)]["keys"][-1]
    (last,) = [c for c in scoring if c.key == last_judge]
    hand = every - sum(c.prompt_tokens + c.completion_tokens for c in scoring
                       if c is not last)
    assert goa_counted_tokens(state) == hand < every
    assert r.outcome.columns["goa_tokens"] == hand
