"""What each call's prompt holds: who sees whose output, and the cache sharing of the
independent first answers."""

from __future__ import annotations

import pytest

from df_ray.methods.base import derive_seed
from df_ray.methods.common import INDEPENDENT_SLOT
from df_ray.methods.goa import without_confidence
from df_ray.methods.prompt_templates import RECONCILE_JSON_FORMAT, RECONCILE_REVIEW
from df_ray.tasks import get_task
from tests.helpers import AGENTS, MODELS, Script, answer, json_answer, make_sample

# Each agent's reasoning carries a marker no other text has, so leaks are easy to see.
REASON = {a: f"REASONING-OF-{a.upper()}-XYZ" for a in AGENTS}
INDEP = {(a, "independent"): answer(x, 0.8, REASON[a]) for a, x in zip(AGENTS, "ABA", strict=True)}


def user_texts(call) -> list[str]:
    return [m.content for m in call.request.messages if m.role == "user"]


def all_text(call) -> str:
    return "\n".join(m.content for m in call.request.messages)


def test_darkforest_agents_are_isolated_and_strict_coordinator_sees_no_reasoning(run_method):
    run = run_method("darkforest", Script(INDEP, default=answer("A", 0.5)))
    prompt = get_task("mmlu_pro").agent_prompt(make_sample())
    agents = run.calls(role="agent")
    assert len(agents) == 3
    for c in agents:
        assert [m.role for m in c.request.messages] == ["user"]
        assert c.request.messages[0].content == prompt
        assert "REASONING-OF" not in all_text(c)
    (coord,) = run.calls(role="coordinator")
    text = all_text(coord)
    assert "REASONING-OF" not in text  # strict: the belief summary only
    assert "A" in text and "B" in text  # but the candidates are there


def test_independent_answers_share_one_cache_entry_across_methods(run_method):
    script = Script(INDEP, default=answer("A", 0.5))
    df = {c.agent: c.request.key() for c in run_method("darkforest", script).calls(role="agent")}
    assert set(df) == set(AGENTS)
    sample = make_sample()
    expected_seed = derive_seed(0, sample.id, INDEPENDENT_SLOT)
    variants = [(n, {}) for n in ("single", "self_consistency", "weighted_vote", "debate",
                                  "moa")]
    variants += [("reconcile", {"protocol": "df_ray"}), ("self_refine", {"protocol": "df_ray"}),
                 ("goa_max", {"first_answer": "independent"}),
                 ("goa_mean", {"first_answer": "independent"})]
    for name, args in variants:
        run = run_method(name, script, args)
        first = run.calls(role="agent")
        assert first, name
        for c in first:
            assert c.request.key() == df[c.agent], name
            assert c.request.seed == expected_seed
    # The reference protocols of GoA, ReConcile and Self-Refine make their own first calls.
    for name, role in (("goa_max", "goa_initial"), ("reconcile", "reconcile_initial"),
                       ("self_refine", "refine_init")):
        run = run_method(name, script)
        own = run.calls(role=role)
        assert own and not run.calls(role="agent"), name
        assert not {c.request.key() for c in own} & set(df.values()), name
    # Self-Consistency: sample 0 is shared, the others differ only by seed.
    sc = run_method("self_consistency", script).calls(sample_id=sample.id)
    a1 = [c for c in sc if c.agent == "a1"]
    assert a1[0].request.key() == df["a1"]
    assert len({c.request.seed for c in a1}) == 3
    assert len({c.request.messages for c in a1}) == 1


def test_debate_round_two_reads_the_others_round_one_answers(run_method):
    table = {**INDEP, **{(a, "debate"): answer("A", None, f"UPDATED-{a}") for a in AGENTS}}
    run = run_method("debate", Script(table), {"rounds": 3})
    r2 = {c.agent: c for c in run.calls(round=1)}
    assert set(r2) == set(AGENTS)
    prompt = get_task("mmlu_pro").agent_prompt(make_sample())
    for a, c in r2.items():
        msgs = c.request.messages
        assert [m.role for m in msgs] == ["user", "assistant", "user"]
        assert msgs[0].content == prompt
        assert REASON[a] in msgs[1].content  # its own answer, as the assistant turn
        last = msgs[2].content
        assert "These are the solutions to the problem from other agents" in last
        assert "Using the reasoning from other agents as additional advice" in last
        assert REASON[a] not in last
        for b in AGENTS:
            if b != a:
                assert REASON[b] in last
        assert get_task("mmlu_pro").answer_instructions() in last
    # Round 3 continues the conversation with the round-2 answers of the others.
    r3 = {c.agent: c for c in run.calls(round=2)}
    msgs = r3["a1"].request.messages
    assert [m.role for m in msgs] == ["user", "assistant", "user", "assistant", "user"]
    assert "UPDATED-a1" in msgs[3].content
    assert "UPDATED-a2" in msgs[4].content and "UPDATED-a3" in msgs[4].content
    assert "UPDATED-a1" not in msgs[4].content


def test_moa_aggregator_reads_every_proposer_response(run_method):
    run = run_method("moa", Script(INDEP, default=answer("A")), {"layers": 2})
    (agg,) = run.calls(role="aggregator")
    assert agg.agent == "coord"
    text = user_texts(agg)[-1]
    assert text.startswith("You have been provided with a set of responses")
    for a in AGENTS:
        assert REASON[a] in text
    assert get_task("mmlu_pro").agent_prompt(make_sample()) in text


def test_moa_three_layers_each_layer_reads_the_previous_one(run_method):
    table = {**INDEP, **{(a, "moa"): answer("A", 0.8, f"LAYER2-{a}") for a in AGENTS}}
    run = run_method("moa", Script(table, default=answer("A")), {"layers": 3})
    layer2 = run.calls(role="proposer")
    assert sorted(c.agent for c in layer2) == list(AGENTS)
    for c in layer2:
        for a in AGENTS:
            assert REASON[a] in user_texts(c)[-1]
    (agg,) = run.calls(role="aggregator")
    text = user_texts(agg)[-1]
    for a in AGENTS:
        assert f"LAYER2-{a}" in text
        assert REASON[a] not in text


def test_reconcile_discussion_groups_answers_with_explanations_and_confidences(run_method):
    table = {("a1", "independent"): answer("A", 0.95, REASON["a1"]),
             ("a2", "independent"): answer("B", 0.7, REASON["a2"]),
             ("a3", "independent"): answer("A", 0.85, REASON["a3"])}
    run = run_method("reconcile", Script(table, default=answer("A", 0.9)),
                     {"rounds": 1, "protocol": "df_ray"})
    disc = run.calls(role="discussion")
    assert len(disc) == 3
    texts = {user_texts(c)[-1] for c in disc}
    assert len(texts) == 1  # every agent sees the same round table
    text = texts.pop()
    assert "2 of the 3 agents think the answer is A." in text
    assert "1 of the 3 agents thinks the answer is B." in text
    assert "confidence 0.95" in text and "confidence 0.70" in text and "confidence 0.85" in text
    for a in AGENTS:
        assert REASON[a] in text
    assert text.index(REASON["a1"]) < text.index(REASON["a3"]) < text.index(REASON["a2"])
    assert make_sample().question in text


def test_reconcile_json_peers_read_i_think_the_answer_is(run_method):
    table = {("a1", "reconcile"): json_answer("A", 0.95, REASON["a1"]),
             ("a2", "reconcile"): json_answer("B", "0.7", REASON["a2"]),
             ("a3", "reconcile"): json_answer("C", 0.85, REASON["a3"])}
    run = run_method("reconcile", Script(table, default=json_answer("A", 0.9)), {"rounds": 1})
    (p1,) = {user_texts(c)[-1] for c in run.calls(role="reconcile_initial")}
    assert p1.startswith("Q: ") and make_sample().question in p1
    assert RECONCILE_JSON_FORMAT in p1
    assert 'Only place A,B,C,D representing your choice in the "answer" field.' in p1
    disc = run.calls(role="discussion")
    texts = {user_texts(c)[-1] for c in disc}
    assert len(texts) == 1  # every agent reads the same round table
    text = texts.pop()
    assert text.startswith(p1)  # phase 1's prompt, then the discussion
    assert RECONCILE_REVIEW in text
    # the two most common answers (three ties of one: the first two seen)
    assert (f"There are 1 agents think the answer is A. One agent solution: I think the answer "
            f"is A because {REASON['a1']} My confidence level is 0.95.") in text
    assert f"I think the answer is B because {REASON['a2']} My confidence level is 0.7." in text
    assert REASON["a3"] not in text
    assert text.rstrip().endswith(RECONCILE_JSON_FORMAT)


GOA = {
    **{(a, "goa_initial"): json_answer(x, 0.8, REASON[a]) for a, x in zip(AGENTS, "ABA",
                                                                          strict=True)},
    ("coord", "select"): "0,1,2",
    ("a1", "score"): "[0.6, 0.4]",
    ("a2", "score"): "Scores: [0.7, 0.3]",
    ("a3", "score"): "0.5, 0.5",
    **{(a, "s2t"): answer("B", 0.8, f"S2T-{a}") for a in AGENTS},
    **{(a, "t2s"): answer("B", 0.9, f"T2S-{a}") for a in AGENTS},
    ("coord", "pool"): answer("B", 0.9, "POOLED"),
}


@pytest.mark.parametrize("name", ["goa_max", "goa_mean"])
def test_goa_message_passing_prompts(run_method, name):
    run = run_method(name, Script(GOA, default="0"))
    (sel,) = run.calls(role="selector")
    assert sel.agent == "coord"
    for a in AGENTS:  # the candidates' model ids (no card configured for m1..m3)
        assert f"{MODELS[a]} (no description)" in user_texts(sel)[-1]
    # GoA's instruction: the task's prompt without df_ray's confidence line
    instruction = without_confidence(get_task("mmlu_pro").agent_prompt(make_sample()))
    # scoring: each node sees the two others' answers, not its own
    for c in run.calls(role="scorer"):
        t = user_texts(c)[-1]
        assert t.startswith("Score the following 2 model responses to this question.")
        assert f"Question: {instruction}" in t
        assert REASON[c.agent] not in t
        assert all(REASON[b] in t for b in AGENTS if b != c.agent)
    graph = run.outcome.extra["graph"]
    # node 0 = (0.7+0.5)/2, node 1 = (0.6+0.5)/2, node 2 = (0.4+0.3)/2, normalised by 1.5
    assert graph["scores"] == pytest.approx([0.4, 0.55 / 1.5, 0.35 / 1.5])
    assert graph["ranked"] == [0, 1, 2] and graph["top"] == 0
    s2t = {c.agent: user_texts(c)[-1] for c in run.calls(role="source_to_target")}
    assert set(s2t) == {"a2", "a3"}
    assert "Model 0 (high relevance)" in s2t["a2"] and REASON["a1"] in s2t["a2"]
    assert REASON["a2"] in s2t["a2"]  # its own initial answer
    assert "Model 0 (moderate relevance)" in s2t["a3"]
    assert "Model 1 (moderate relevance)" in s2t["a3"]
    t2s = {c.agent: user_texts(c)[-1] for c in run.calls(role="target_to_source")}
    assert set(t2s) == ({"a1"} if name == "goa_max" else {"a1", "a2"})
    # target -> source shows the targets' refinements (the reference's code at c9def00)
    assert "S2T-a2" in t2s["a1"] and REASON["a2"] not in t2s["a1"]
    answer_format = without_confidence(get_task("mmlu_pro").answer_instructions())
    if name == "goa_max":
        assert answer_format in t2s["a1"]  # only the final node's call ends with it
        assert not run.calls(role="pooling")
        assert run.outcome.final.raw.startswith("T2S-a1")
    else:
        assert answer_format not in t2s["a1"]
        (pool,) = run.calls(role="pooling")
        text = user_texts(pool)[-1]
        assert "T2S-a1" in text and "T2S-a2" in text and "S2T-a3" in text
        assert answer_format in text
        assert pool.request.sampling.temperature == 0.7
        assert run.outcome.final.raw.startswith("POOLED")
    assert run.outcome.final.answer == "B"
    # df_ray's earlier reading (ablation): the targets' responses from before the round
    initial = run_method(name, Script(GOA, default="0"), {"t2s_reads": "initial"})
    t2s = {c.agent: user_texts(c)[-1] for c in initial.calls(role="target_to_source")}
    assert REASON["a2"] in t2s["a1"] and REASON["a3"] in t2s["a1"]
    assert "S2T-a2" not in t2s["a1"]


def test_self_refine_few_shot_feedback_reviews_the_current_solution(run_method):
    fix = "# wrong!\n\nOkay! Here is the rewrite:\n\n"
    table = {("a1", "independent"): answer("A", 0.6, "FIRST-ATTEMPT"),
             ("a1", "fewshot_feedback"): [fix + answer("B", 0.8, "SECOND-ATTEMPT"),
                                          fix + answer("B", 0.9, "THIRD-ATTEMPT")]}
    run = run_method("self_refine", Script(table), {"iterations": 2})
    fb = [user_texts(c)[-1] for c in run.calls(role="feedback")]
    assert len(fb) == 2
    for i, t in enumerate(fb):  # the task kind's examples (multiple choice), both verdicts
        assert "Which gas makes up most of Earth's atmosphere?" in t
        assert "Okay! Here is the rewrite:" in t and "It is correct!" in t
        assert t.count("### END ###") == 2 + i  # and every earlier round of this sample
        assert " ".join(get_task("mmlu_pro").answer_instructions().split()) in t
    assert "FIRST-ATTEMPT" in fb[0].split("### END ###")[-1]
    assert "SECOND-ATTEMPT" in fb[1].split("### END ###")[-1]
    assert "FIRST-ATTEMPT" not in fb[1].split("### END ###")[-1]  # the current solution only
    assert {c.agent for c in run.calls()} == {"a1"}
    assert run.outcome.final.answer == "B"


def test_self_refine_feedback_accumulates_the_earlier_attempts(run_method):
    """GSMFeedback.update_prompt appends each (solution, feedback, rewrite) to its prompt:
    the third feedback call reads the first two attempts and their feedback, in order, each
    closed by ### END ###; every feedback call has GSMFeedback's 600 tokens."""
    fix = "# wrong!\n\nOkay! Here is the rewrite:\n\n"
    table = {("a1", "independent"): answer("A", 0.6, "FIRST-ATTEMPT"),
             ("a1", "fewshot_feedback"): [fix.replace("wrong!", "wrong! FB-ONE")
                                          + answer("B", 0.8, "SECOND-ATTEMPT"),
                                          fix.replace("wrong!", "wrong! FB-TWO")
                                          + answer("C", 0.9, "THIRD-ATTEMPT"),
                                          fix + answer("C", 0.9, "FOURTH-ATTEMPT")]}
    run = run_method("self_refine", Script(table), {"iterations": 3})
    calls = run.calls(role="feedback")
    assert len(calls) == 3
    assert {c.request.sampling.max_tokens for c in calls} == {600}
    third = user_texts(calls[2])[-1]
    blocks = third.split("### END ###")
    assert len(blocks) == 5  # 2 examples, 2 earlier rounds, the current query
    assert "FIRST-ATTEMPT" in blocks[2] and "FB-ONE" in blocks[2] and "SECOND-ATTEMPT" in blocks[2]
    assert "FB-TWO" in blocks[3] and "THIRD-ATTEMPT" in blocks[3]
    assert "THIRD-ATTEMPT" in blocks[4] and "FIRST-ATTEMPT" not in blocks[4]
    assert third.index("FIRST-ATTEMPT") < third.index("SECOND-ATTEMPT") < third.index("FB-TWO")
    assert run.outcome.final.answer == "C"


def test_self_refine_df_ray_refinement_reads_the_attempt_and_its_feedback(run_method):
    table = {("a1", "independent"): answer("A", 0.6, "FIRST-ATTEMPT"),
             ("a1", "feedback"): ["CRITIQUE-ONE\nVerdict: INCORRECT",
                                  "CRITIQUE-TWO\nVerdict: INCORRECT"],
             ("a1", "refine"): [answer("B", 0.8, "SECOND-ATTEMPT"),
                                answer("B", 0.9, "THIRD-ATTEMPT")]}
    run = run_method("self_refine", Script(table), {"protocol": "df_ray"})
    fb = run.calls(role="feedback")
    assert "FIRST-ATTEMPT" in user_texts(fb[0])[-1]
    assert "SECOND-ATTEMPT" in user_texts(fb[1])[-1]
    ref = [user_texts(c)[-1] for c in run.calls(role="refine")]
    assert "FIRST-ATTEMPT" in ref[0] and "CRITIQUE-ONE" in ref[0]
    for s in ("FIRST-ATTEMPT", "CRITIQUE-ONE", "SECOND-ATTEMPT", "CRITIQUE-TWO"):
        assert s in ref[1]
    assert {c.agent for c in run.calls()} == {"a1"}
    assert run.outcome.final.raw.startswith("THIRD-ATTEMPT")
