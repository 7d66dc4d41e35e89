"""Votes, tie-breaking, early stopping and final answers on hand-made answers."""

from __future__ import annotations

import pytest

from df_ray.config import RunConfig
from df_ray.core.calibration import AgentStats, Calibration
from df_ray.methods.self_refine import feedback_says_correct
from tests.helpers import AGENTS, Script, answer, driver_config, json_answer

BAD = "I cannot decide."  # no answer marker: invalid


def indep(*letters: str | None, conf: float = 0.8) -> dict:
    return {(a, "independent"): (answer(x, conf) if x else BAD)
            for a, x in zip(AGENTS, letters, strict=True)}


def final(run) -> str | None:
    return run.outcome.final.answer if run.outcome.final is not None else None


# ----------------------------------------------------------------------------- single


def test_single_answers_with_the_chosen_agent(run_method):
    assert final(run_method("single", Script(indep("A", "B", "C")))) == "A"
    run = run_method("single", Script(indep("A", "B", "C")), {"agent": "a3"})
    assert final(run) == "C" and run.calls()[0].agent == "a3"
    assert final(run_method("single", Script(indep(None, "B", "C")))) is None


# ----------------------------------------------------------------------------- self-consistency


def test_self_consistency_majority_over_every_sample(run_method):
    table = {("a1", "independent"): [answer("A"), answer("B"), answer("B")],
             ("a2", "independent"): [answer("C"), answer("C"), answer("A")],
             ("a3", "independent"): [answer("B"), BAD, BAD]}
    run = run_method("self_consistency", Script(table))
    assert final(run) == "B"
    assert run.outcome.extra["votes"] == {"A": 2, "B": 3, "C": 2}
    # reachability is measured on sample 0 of each agent
    assert [o.answer for o in run.outcome.agent_observations] == ["A", "C", "B"]


def test_self_consistency_tie_goes_to_the_lower_index_agent(run_method):
    table = {("a1", "independent"): [answer("C"), answer("C"), BAD],
             ("a2", "independent"): [answer("A"), answer("A"), BAD],
             ("a3", "independent"): [BAD, BAD, BAD]}
    run = run_method("self_consistency", Script(table))
    assert run.outcome.extra["votes"] == {"A": 2, "C": 2}
    assert final(run) == "C"  # a1 supports C, a2 supports A


def test_self_consistency_tie_returns_the_first_sample_s_answer(run_method):
    """One agent, four samples B, A, A, B: a 2-2 tie; the first sample's B wins (the
    smaller key, df_ray's earlier rule, would have given A)."""
    table = {("a1", "independent"): [answer("B"), answer("A"), answer("A"), answer("B")]}
    run = run_method("self_consistency", Script(table), {"agent": "a1", "samples": 4})
    assert run.outcome.extra["votes"] == {"A": 2, "B": 2}
    assert final(run) == "B"
    # an invalid first sample does not vote: the first valid one breaks the tie
    table = {("a1", "independent"): [BAD, answer("A"), answer("B"), answer("B"), answer("A")]}
    run = run_method("self_consistency", Script(table), {"agent": "a1", "samples": 5})
    assert final(run) == "A"


def test_self_consistency_with_no_valid_sample_has_no_answer(run_method):
    assert final(run_method("self_consistency", Script({}, default=BAD))) is None


# ----------------------------------------------------------------------------- weighted vote


def calibration(**correct: int) -> Calibration:
    return Calibration(benchmark="mmlu_pro", agents=AGENTS, n_samples=10, fitted_at="test",
                       agent_stats={a: AgentStats(n_valid=10, n_correct=correct[a])
                                    for a in AGENTS})


def test_weighted_vote_uses_alpha_only(run_method):
    cal = calibration(a1=9, a2=1, a3=1)  # alpha 10/12, 2/12, 2/12
    script = Script(indep("A", "B", "B"))
    run = run_method("weighted_vote", script, calibration=cal)
    assert final(run) == "A"
    assert run.outcome.extra["weights"] == pytest.approx({"a1": 10 / 12, "a2": 2 / 12,
                                                          "a3": 2 / 12})
    assert final(run_method("weighted_vote", script, {"majority": True}, calibration=cal)) == "B"
    # without calibration every alpha is 1/2: a plain majority
    assert final(run_method("weighted_vote", script)) == "B"


def test_weighted_vote_ignores_confidence_and_breaks_ties_by_agent_order(run_method):
    script = Script({("a1", "independent"): answer("C", 0.1),
                     ("a2", "independent"): answer("A", 1.0),
                     ("a3", "independent"): BAD})
    assert final(run_method("weighted_vote", script)) == "C"


# ----------------------------------------------------------------------------- debate


def test_debate_votes_over_the_last_round(run_method):
    table = {**indep("A", "A", "A"),
             ("a1", "debate"): answer("C"), ("a2", "debate"): answer("C"),
             ("a3", "debate"): answer("A")}
    run = run_method("debate", Script(table))
    assert final(run) == "C"
    assert [o.answer for o in run.outcome.agent_observations] == ["A", "A", "A"]


def test_debate_unparseable_answers_do_not_vote(run_method):
    table = {**indep("A", "A", "A"),
             ("a1", "debate"): BAD, ("a2", "debate"): answer("D"), ("a3", "debate"): answer("C")}
    assert final(run_method("debate", Script(table))) == "D"  # tie C/D: a2 before a3
    nothing = {**indep("A", "A", "A"), **{(a, "debate"): BAD for a in AGENTS}}
    # Not the reference scorer's "unparseable counts as correct": no answer, graded wrong.
    assert final(run_method("debate", Script(nothing))) is None


# ----------------------------------------------------------------------------- ReConcile


DF = {"protocol": "df_ray"}  # df_ray's earlier ReConcile (ablation)


def test_reconcile_stops_at_once_when_all_agents_agree(run_method):
    run = run_method("reconcile", Script(indep("B", "B", "B")), DF)
    assert run.n_calls() == 3
    assert run.state.done and run.state.data["stopped_after_round"] == 0
    assert final(run) == "B" and run.outcome.extra["consensus"]


def test_reconcile_stops_after_the_round_that_reaches_consensus(run_method):
    table = {**indep("A", "B", "C"), **{(a, "discussion"): answer("B", 0.9) for a in AGENTS}}
    run = run_method("reconcile", Script(table), {"rounds": 3, **DF})
    assert run.n_calls() == 6
    assert run.state.data["stopped_after_round"] == 1
    assert final(run) == "B"


def test_reconcile_invalid_answers_block_consensus(run_method):
    table = {**indep("A", "A", None), **{(a, "discussion"): answer("A", 0.9) for a in AGENTS}}
    run = run_method("reconcile", Script(table), DF)
    assert run.n_calls() == 6 and final(run) == "A"


def test_reconcile_weights_recalibrated_confidence(run_method):
    table = {**indep("A", "B", "C"),
             ("a1", "discussion"): answer("A", 1.0),   # weight 1.0
             ("a2", "discussion"): answer("B", 0.75),  # 0.3
             ("a3", "discussion"): answer("B", 0.85)}  # 0.5
    run = run_method("reconcile", Script(table), {"rounds": 1, **DF})
    assert final(run) == "A"
    assert run.outcome.extra["weights"] == {"a1": 1.0, "a2": 0.3, "a3": 0.5}
    table[("a3", "discussion")] = answer("B", 0.95)  # 0.8: B = 1.1 > 1.0
    assert final(run_method("reconcile", Script(table), {"rounds": 1, **DF})) == "B"


def recon(*letters, conf=0.8) -> dict:
    """ReConcile's phase-1 JSON answers of a1..a3 (None: a reply that is not JSON)."""
    return {(a, "reconcile"): (json_answer(x, conf) if x else BAD)
            for a, x in zip(AGENTS, letters, strict=True)}


def test_reconcile_reads_json_answers_and_stops_on_consensus(run_method):
    run = run_method("reconcile", Script(recon("B", "B", "B")))
    assert run.n_calls() == 3 and run.state.data["stopped_after_round"] == 0
    assert final(run) == "B" and run.outcome.final.rule == "json"
    assert [o.confidence for o in run.outcome.agent_observations] == [0.8, 0.8, 0.8]
    assert not run.calls(role="agent")  # its own calls, not DarkForest's generations


def test_reconcile_invalid_json_becomes_a_random_valid_answer_with_confidence_0(run_method):
    table = {**recon("A", "A", None),
             ("a3", "discussion"): "Answer: A",  # the task's format, not JSON: invalid too
             **{(a, "discussion"): json_answer("A", 0.9) for a in ("a1", "a2")}}
    run = run_method("reconcile", Script(table), {"rounds": 1})
    first = run.outcome.agent_observations
    assert first[2].valid and first[2].rule == "fallback" and first[2].confidence == 0.0
    assert first[2].answer in "ABCD"
    # drawn from the request's seed: the same answer every run, and the same as a rerun
    again = run_method("reconcile", Script(table), {"rounds": 1})
    assert again.outcome.agent_observations[2].answer == first[2].answer
    from df_ray.core.types import ParseSpec
    from df_ray.methods.json_answers import fallback_answer

    (call,) = [c for c in run.calls(role="reconcile_initial") if c.agent == "a3"]
    assert first[2].answer == fallback_answer(ParseSpec("choice", n_options=4),
                                              call.request.seed).answer
    seeded = run_method("reconcile", Script(table), {"rounds": 1},
                        cfg=driver_config(method="reconcile", seed=3))  # another run seed
    (call,) = [c for c in seeded.calls(role="reconcile_initial") if c.agent == "a3"]
    assert seeded.outcome.agent_observations[2].answer == fallback_answer(
        ParseSpec("choice", n_options=4), call.request.seed).answer
    last = run.outcome.extra["last_round"]
    assert last[2]["confidence"] == 0.0 and last[2]["valid"]
    assert run.outcome.extra["weights"]["a3"] == 0.1  # confidence 0 -> 0.1
    assert run.outcome.extra["fallbacks"] == 1


def test_reconcile_fallback_for_math_is_0_and_a_missing_confidence_is_0():
    from df_ray.core.types import ParseSpec
    from df_ray.methods.json_answers import fallback_answer, reconcile_json

    o, reasoning = reconcile_json('{"reasoning": "r", "answer": "3/4"}', ParseSpec("math"))
    assert o.valid and o.confidence == 0.0 and reasoning == "r"
    o, _ = reconcile_json('{"reasoning": "r", "answer": "0.75", "confidence_level": "90%"}',
                          ParseSpec("math"))
    assert o.confidence == pytest.approx(0.9) and o.answer == reconcile_json(
        "{'answer': '3/4'}", ParseSpec("math"))[0].answer  # a Python literal is read too
    assert not reconcile_json("The answer is 3/4.", ParseSpec("math"))[0].valid
    assert not reconcile_json('{"answer": "E"}', ParseSpec("choice", n_options=4))[0].valid
    assert fallback_answer(ParseSpec("math"), 7).answer == "0"
    assert fallback_answer(ParseSpec("code"), 7) is None
    labels = ParseSpec("label", labels=("Yes", "No"))
    assert {fallback_answer(labels, s).extracted for s in range(20)} == {"Yes", "No"}


# ----------------------------------------------------------------------------- MoA


def test_moa_final_is_the_aggregator_answer(run_method):
    table = {**indep("A", "A", "B"), ("coord", "moa"): answer("B")}
    run = run_method("moa", Script(table))
    assert final(run) == "B"
    # the reference's shape: 3 proposer calls and 1 aggregator call, the aggregator at 0.7
    assert len(run.calls(role="agent")) == 3 and run.n_calls() == 4
    (agg,) = run.calls(role="aggregator")
    assert agg.request.sampling.temperature == 0.7
    d = driver_config(method="moa").model_dump()
    d["coordinator"]["temperature"] = 0.2
    run = run_method("moa", Script(table), {"aggregator_temperature": None},
                     cfg=RunConfig.model_validate(d))
    assert run.calls(role="aggregator")[0].request.sampling.temperature == 0.2
    table[("coord", "moa")] = BAD
    assert final(run_method("moa", Script(table), {"layers": 2})) is None


# ----------------------------------------------------------------------------- GoA

GOA_SCORES = {("a1", "score"): "[0.5, 0.5]",   # nodes 1, 2
              ("a2", "score"): "[1.0, 0.0]",   # nodes 0, 2
              ("a3", "score"): "[1.0, 0.0]"}   # nodes 0, 1 -> 0: 2/3, 1: 1/6, 2: 1/6


def goa_first(*letters: str, conf: float = 0.9) -> dict:
    """GoA's JSON first answers of a1..a3 and a selection of all three."""
    return {**{(a, "goa_initial"): json_answer(x, conf) for a, x in zip(AGENTS, letters,
                                                                        strict=True)},
            ("coord", "select"): "0,1,2"}


@pytest.mark.parametrize("name", ["goa_max", "goa_mean"])
def test_goa_single_survivor_keeps_its_initial_answer(run_method, name):
    run = run_method(name, Script({**goa_first("C", "B", "B"), **GOA_SCORES}),
                     {"threshold": 0.2})
    assert run.n_calls() == 1 + 3 + 3
    assert run.outcome.extra["graph"]["ranked"] == [0]
    assert final(run) == "C" and run.outcome.final.rule == "json"


@pytest.mark.parametrize("name", ["goa_max", "goa_mean"])
def test_goa_without_valid_scores_pools_the_initial_answers(run_method, name):
    table = {**goa_first("C", "B", "B"), **{(a, "score"): "no idea" for a in AGENTS},
             ("coord", "pool"): answer("B")}
    run = run_method(name, Script(table))
    assert run.n_calls() == 1 + 3 + 3 * 3 + 1  # each judge asked 3 times, then dropped
    assert run.outcome.extra["fallback"] == "pool_initial"
    assert run.outcome.extra["graph"]["dropped_judges"] == [0, 1, 2]
    assert final(run) == "B"
    run = run_method(name, Script(table), {"scoring_attempts": 1})
    assert run.n_calls() == 1 + 3 + 3 + 1


def test_goa_top_k_uses_the_selection(run_method):
    table = {**goa_first("A", "B", "C"), ("coord", "select"): "2,0",
             ("a1", "score"): "[1.0]", ("a3", "score"): "[1.0]"}
    run = run_method("goa_max", Script(table, default=answer("C")), {"top_k": 2})
    assert run.outcome.extra["nodes"] == ["a3", "a1"]  # the reply's order
    assert [c.agent for c in run.calls(role="goa_initial")] == ["a3", "a1"]
    assert run.n_calls() == 1 + 2 + 2 + 2
    # the two nodes tie at 1/2 each: node order makes node 0 (a3) the top node
    assert run.outcome.extra["graph"]["top"] == 0
    assert [c.agent for c in run.calls(role="target_to_source")] == ["a3"]


def test_goa_one_node_answers_alone(run_method):
    table = {**goa_first("A", "B", "C"), ("coord", "select"): "1"}
    run = run_method("goa_mean", Script(table), {"top_k": 1})
    assert run.n_calls() == 2 and final(run) == "B"


def test_goa_independent_first_answers_ablation(run_method):
    table = {**indep("A", "B", "C"), ("coord", "select"): "0,1,2", **GOA_SCORES}
    run = run_method("goa_max", Script(table), {"first_answer": "independent",
                                                "threshold": 0.2})
    assert [c.agent for c in run.calls(role="agent")] == list(AGENTS)  # DarkForest's calls
    assert not run.calls(role="goa_initial")
    assert final(run) == "A"


# ----------------------------------------------------------------------------- Self-Refine


@pytest.mark.parametrize(("text", "stop"), [
    ("All steps check out.\nVerdict: CORRECT", True),
    ("**Verdict:** correct", True),
    ("- Verdict: CORRECT.", True),
    ("Step 2 is wrong.\nVerdict: INCORRECT", False),
    ("Verdict: CORRECT\nOn second thought...\nVerdict: INCORRECT", False),
    ("Verdict: INCORRECT\nNo, it is fine.\nVerdict: CORRECT", True),
    ("The solution is CORRECT.", False),  # no verdict line: keep refining
    ("", False),
])
def test_self_refine_stop_rule(text, stop):
    assert feedback_says_correct(text) is stop


SR_DF = {"protocol": "df_ray"}  # df_ray's earlier zero-shot Self-Refine (ablation)


def test_self_refine_df_ray_stops_when_the_feedback_approves(run_method):
    table = {("a1", "independent"): answer("B"), ("a1", "feedback"): "Fine.\nVerdict: CORRECT"}
    run = run_method("self_refine", Script(table), SR_DF)
    assert run.n_calls() == 2 and run.state.done
    assert final(run) == "B" and run.outcome.extra["stopped_early"]
    table = {("a1", "independent"): answer("A"),
             ("a1", "feedback"): ["Wrong.\nVerdict: INCORRECT", "Good.\nVerdict: CORRECT"],
             ("a1", "refine"): answer("B")}
    run = run_method("self_refine", Script(table), {"iterations": 3, **SR_DF})
    assert run.n_calls() == 4
    assert final(run) == "B"


def test_self_refine_df_ray_keeps_the_last_valid_attempt(run_method):
    table = {("a1", "independent"): answer("A"), ("a1", "feedback"): "Verdict: INCORRECT",
             ("a1", "refine"): [answer("C"), BAD]}
    run = run_method("self_refine", Script(table), {"iterations": 2, **SR_DF})
    assert run.n_calls() == 5
    assert run.outcome.extra["attempt_answers"] == ["A", "C", None]
    assert final(run) == "C"


def fix(letter: str) -> str:
    return f"# wrong! The reasoning is off.\n\nOkay! Here is the rewrite:\n\nBetter.\nAnswer: {letter}"


def correct(letter: str) -> str:
    return ("# looks good\n\nThere is no error in the solution! It is correct! Here is the "
            f"rewrite (for the sake of completeness):\n\nSame.\nAnswer: {letter}")


def test_self_refine_stops_on_its_own_verdict(run_method):
    table = {("a1", "independent"): answer("A"),
             ("a1", "fewshot_feedback"): [fix("B"), correct("B"), fix("C")]}
    run = run_method("self_refine", Script(table))
    assert run.n_calls() == 3 and run.state.done  # first answer + 2 feedback calls
    assert run.outcome.extra["stopped_early"]
    assert run.outcome.extra["attempt_answers"] == ["A", "B", "B"]
    assert final(run) == "B"
    (init,) = run.calls(role="refine_init")
    assert init.request.sampling.temperature == 0.0  # the reference's first answer
    for c in run.calls(role="feedback"):
        assert c.request.sampling.temperature == 0.7
        assert c.request.sampling.stop == ("### END",)


def test_self_refine_makes_at_most_5_calls(run_method):
    table = {("a1", "independent"): answer("A"), ("a1", "fewshot_feedback"): fix("B")}
    run = run_method("self_refine", Script(table))
    assert run.n_calls() == 5 and not run.outcome.extra["stopped_early"]
    assert final(run) == "B"


def test_self_refine_final_is_the_last_rewrite_unless_it_lost_the_format(run_method):
    table = {("a1", "independent"): answer("A"),
             ("a1", "fewshot_feedback"): [fix("C"), "# wrong!\n\nOkay! Here is the rewrite:"
                                          "\n\nno answer here"]}
    run = run_method("self_refine", Script(table), {"iterations": 2})
    assert run.outcome.extra["attempt_answers"] == ["A", "C", None]
    assert final(run) == "C"
    # a feedback without a rewrite keeps the solution it reviewed
    table = {("a1", "independent"): answer("A"), ("a1", "fewshot_feedback"): "# hmm"}
    run = run_method("self_refine", Script(table), {"iterations": 1})
    assert run.outcome.extra["attempt_answers"] == ["A", "A"]


@pytest.mark.parametrize(("text", "stop"), [
    (correct("B"), True),
    (fix("B"), False),
    ("It is correct!", True),
    ("# wrong! It is correct that x = 2, but y is wrong.\nOkay! Here is the rewrite:\nAnswer: B",
     True),  # the reference's rule reads the phrase anywhere in the feedback
])
def test_self_refine_reference_stop_rule(text, stop):
    from df_ray.methods.self_refine_fewshot import says_correct, split_feedback

    assert says_correct(split_feedback(text)[0]) is stop


def test_goa_unreadable_choice_final_follows_the_reference(run_method):
    table = {**goa_first("A", "B", "C"), **{(a, "score"): "[0.5, 0.5]" for a in AGENTS},
             **{(a, "s2t"): answer("B") for a in AGENTS},
             ("a1", "t2s"): "no idea at all, sorry"}
    run = run_method("goa_max", Script(table))
    assert run.outcome.extra["final_fallback"] == "goa_random"
    assert run.outcome.final.answer in "ABCD" and run.outcome.final.confidence == 0.0
    again = run_method("goa_max", Script(table))
    assert again.outcome.final.answer == run.outcome.final.answer  # seeded, reproducible
    table[("a1", "t2s")] = "Between A) and the rest, hmm, maybe C) after all"
    run = run_method("goa_max", Script(table))
    assert run.outcome.final.answer == "C"
    assert run.outcome.extra["final_fallback"] in ("goa_letter", None)
    table[("a1", "t2s")] = "no idea at all, sorry"
    assert final(run_method("goa_max", Script(table), {"invalid_final": "wrong"})) is None


def test_goa_letter_rule_follows_the_kind_not_its_name():
    """GoA's last resort reads option letters only for a kind whose answers are letters
    (``AnswerWords.letters``): labels and math answers get none, whatever their options."""
    from df_ray.core.types import ParseSpec
    from df_ray.methods.goa import reference_choice

    got = reference_choice("maybe B) or D)", ParseSpec("choice", n_options=4), 0, "a1")
    assert (got.answer, got.rule) == ("D", "goa_letter")
    # E is not an option of a 4-option question: the random rule draws one of A-D
    got = reference_choice("E", ParseSpec("choice", n_options=4), 0, "a1")
    assert got.rule == "goa_random" and got.answer in "ABCD"
    assert reference_choice("A) yes", ParseSpec("label", labels=("Yes", "No")), 0, "a1") is None
    assert reference_choice("A)", ParseSpec("math"), 0, "a1") is None


def test_darkforest_belief_detail_is_asdict():
    """The belief in DarkForest's detail, built by hand, is what ``dataclasses.asdict`` gives."""
    from dataclasses import asdict

    from df_ray.core import build_belief, parse
    from df_ray.core.types import ParseSpec
    from df_ray.methods.darkforest import belief_to_dict

    spec = ParseSpec("choice", n_options=4)
    obs = [parse(answer(x, c), spec, agent=a)
           for a, x, c in zip(AGENTS, "ABA", (0.9, 0.6, 0.7), strict=True)]
    belief = build_belief(obs, None, agent_order=list(AGENTS))
    d = belief_to_dict(belief)
    assert len(d["clusters"]) == 2
    assert d["clusters"] == [asdict(c) for c in belief.clusters]
    assert [type(v) for v in d["clusters"][0].values()] == [
        type(v) for v in asdict(belief.clusters[0]).values()]
