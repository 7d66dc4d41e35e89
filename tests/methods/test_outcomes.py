"""Votes, tie-breaking, early stopping and final answers on hand-made answers."""

from __future__ import annotations

import pytest

from df_ray.core.calibration import AgentStats, Calibration
from df_ray.methods.self_refine import feedback_says_correct
from tests.methods.conftest import AGENTS, Script, answer

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


def test_reconcile_stops_at_once_when_all_agents_agree(run_method):
    run = run_method("reconcile", Script(indep("B", "B", "B")))
    assert run.n_calls() == 3
    assert run.state.done and run.state.data["stopped_after_round"] == 0
    assert final(run) == "B" and run.outcome.extra["consensus"]


def test_reconcile_stops_after_the_round_that_reaches_consensus(run_method):
    table = {**indep("A", "B", "C"), **{(a, "discussion"): answer("B", 0.9) for a in AGENTS}}
    run = run_method("reconcile", Script(table), {"rounds": 3})
    assert run.n_calls() == 6
    assert run.state.data["stopped_after_round"] == 1
    assert final(run) == "B"


def test_reconcile_invalid_answers_block_consensus(run_method):
    table = {**indep("A", "A", None), **{(a, "discussion"): answer("A", 0.9) for a in AGENTS}}
    run = run_method("reconcile", Script(table))
    assert run.n_calls() == 6 and final(run) == "A"


def test_reconcile_weights_recalibrated_confidence(run_method):
    table = {**indep("A", "B", "C"),
             ("a1", "discussion"): answer("A", 1.0),   # weight 1.0
             ("a2", "discussion"): answer("B", 0.75),  # 0.3
             ("a3", "discussion"): answer("B", 0.85)}  # 0.5
    run = run_method("reconcile", Script(table), {"rounds": 1})
    assert final(run) == "A"
    assert run.outcome.extra["weights"] == {"a1": 1.0, "a2": 0.3, "a3": 0.5}
    table[("a3", "discussion")] = answer("B", 0.95)  # 0.8: B = 1.1 > 1.0
    assert final(run_method("reconcile", Script(table), {"rounds": 1})) == "B"


# ----------------------------------------------------------------------------- MoA


def test_moa_final_is_the_aggregator_answer(run_method):
    table = {**indep("A", "A", "B"), ("coord", "moa"): answer("B")}
    assert final(run_method("moa", Script(table), {"layers": 2})) == "B"
    table[("coord", "moa")] = BAD
    assert final(run_method("moa", Script(table), {"layers": 2})) is None


# ----------------------------------------------------------------------------- GoA

GOA_SCORES = {("a1", "score"): "[0.5, 0.5]",   # a2, a3
              ("a2", "score"): "[1.0, 0.0]",   # a1, a3
              ("a3", "score"): "[1.0, 0.0]"}   # a1, a2 -> a1 2/3, a2 1/6, a3 1/6


@pytest.mark.parametrize("name", ["goa_max", "goa_mean"])
def test_goa_single_survivor_keeps_its_initial_answer(run_method, name):
    run = run_method(name, Script({**indep("C", "B", "B"), **GOA_SCORES}), {"threshold": 0.2})
    assert run.n_calls() == 1 + 3 + 3
    assert run.outcome.extra["graph"]["ranked"] == ["a1"]
    assert final(run) == "C"


@pytest.mark.parametrize("name", ["goa_max", "goa_mean"])
def test_goa_without_valid_scores_pools_the_initial_answers(run_method, name):
    table = {**indep("C", "B", "B"), **{(a, "score"): "no idea" for a in AGENTS},
             ("coord", "pool"): answer("B")}
    run = run_method(name, Script(table))
    assert run.n_calls() == 1 + 3 + 3 + 1
    assert run.outcome.extra["fallback"] == "pool_initial"
    assert sorted(run.outcome.extra["graph"]["dropped_judges"]) == list(AGENTS)
    assert final(run) == "B"


def test_goa_top_k_uses_the_selection(run_method):
    table = {**indep("A", "B", "C"), ("coord", "select"): "2, 0",
             ("a1", "score"): "[1.0]", ("a3", "score"): "[1.0]"}
    run = run_method("goa_max", Script(table, default=answer("C")), {"top_k": 2})
    assert run.outcome.extra["nodes"] == ["a1", "a3"]
    assert {c.agent for c in run.calls(role="agent")} == {"a1", "a3"}
    assert run.n_calls() == 1 + 2 + 2 + 2
    # a1 and a3 tie at 1/2 each: config order makes a1 the top node (max-pooled)
    assert run.outcome.extra["graph"]["top"] == "a1"
    assert [c.agent for c in run.calls(role="target_to_source")] == ["a1"]
    table[("coord", "select")] = "no numbers here"
    run = run_method("goa_max", Script(table, default=answer("C")), {"top_k": 2})
    assert run.outcome.extra["nodes"] == ["a1", "a2"]
    assert run.state.data["selection_fallback"] is True


def test_goa_one_node_answers_alone(run_method):
    table = {**indep("A", "B", "C"), ("coord", "select"): "1"}
    run = run_method("goa_mean", Script(table), {"top_k": 1})
    assert run.n_calls() == 2 and final(run) == "B"


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


def test_self_refine_stops_when_the_feedback_approves(run_method):
    table = {("a1", "independent"): answer("B"), ("a1", "feedback"): "Fine.\nVerdict: CORRECT"}
    run = run_method("self_refine", Script(table))
    assert run.n_calls() == 2 and run.state.done
    assert final(run) == "B" and run.outcome.extra["stopped_early"]
    table = {("a1", "independent"): answer("A"),
             ("a1", "feedback"): ["Wrong.\nVerdict: INCORRECT", "Good.\nVerdict: CORRECT"],
             ("a1", "refine"): answer("B")}
    run = run_method("self_refine", Script(table), {"iterations": 3})
    assert run.n_calls() == 4
    assert final(run) == "B"


def test_self_refine_keeps_the_last_valid_attempt(run_method):
    table = {("a1", "independent"): answer("A"), ("a1", "feedback"): "Verdict: INCORRECT",
             ("a1", "refine"): [answer("C"), BAD]}
    run = run_method("self_refine", Script(table), {"iterations": 2})
    assert run.n_calls() == 5
    assert run.outcome.extra["attempt_answers"] == ["A", "C", None]
    assert final(run) == "C"
