"""Exact LLM calls per sample for every method and setting, and the declared upper bounds."""

from __future__ import annotations

import pytest

from df_ray.config import METHODS
from df_ray.evaluation import build_context
from df_ray.methods import REGISTRY, get_method
from df_ray.methods.prompt_templates import RECONCILE_JSON_FORMAT
from tests.helpers import AGENTS, Script, answer, driver_config, json_answer


def _discussion(letter: str):
    """A discussion answer in the protocol's format: JSON when the prompt asks for it."""
    def respond(request) -> str:
        u = request.messages[-1].content
        return json_answer(letter, 0.7) if RECONCILE_JSON_FORMAT in u else answer(letter, 0.7)
    return respond


# Agents that never agree and critiques that never approve: every method runs to its maximum.
DISAGREE = {
    **{(a, "independent"): answer(x) for a, x in zip(AGENTS, "ABC", strict=True)},
    **{(a, "goa_initial"): json_answer(x) for a, x in zip(AGENTS, "ABC", strict=True)},
    **{(a, "reconcile"): json_answer(x) for a, x in zip(AGENTS, "ABC", strict=True)},
    **{(a, "debate"): answer(x) for a, x in zip(AGENTS, "ABC", strict=True)},
    **{(a, "discussion"): _discussion(x) for a, x in zip(AGENTS, "ABC", strict=True)},
    ("coord", "select"): "0,1,2",
    ("a1", "fewshot_feedback"): "# wrong! Step 2.\n\nOkay! Here is the rewrite:\n\nAnswer: B",
    ("a1", "score"): "[0.6, 0.4]",  # scores a2, a3
    ("a2", "score"): "[0.7, 0.3]",  # scores a1, a3
    ("a3", "score"): "[0.5, 0.5]",  # scores a1, a2
    ("a1", "feedback"): "Step 2 is wrong.\nVerdict: INCORRECT",
}

CASES = [
    ("darkforest", {}, 4),
    ("single", {}, 1),
    ("single", {"agent": "a3"}, 1),
    ("self_consistency", {}, 9),
    ("self_consistency", {"samples": 2}, 6),
    ("self_consistency", {"samples": 5, "agent": "a2"}, 5),
    ("weighted_vote", {}, 3),
    ("weighted_vote", {"majority": True}, 3),
    ("debate", {}, 6),
    ("debate", {"rounds": 3}, 9),
    ("debate", {"rounds": 1}, 3),
    ("reconcile", {}, 9),  # 2 discussion rounds (the reference's run.py)
    ("reconcile", {"rounds": 3}, 12),
    ("reconcile", {"rounds": 0}, 3),
    ("reconcile", {"protocol": "df_ray"}, 9),
    ("moa", {}, 4),  # the proposers + the aggregator (the reference's evaluation)
    ("moa", {"layers": 3}, 7),
    ("goa_max", {}, 10),
    ("goa_mean", {}, 12),
    ("goa_max", {"rounds": 2}, 13),
    ("goa_mean", {"rounds": 2}, 16),
    ("self_refine", {}, 5),  # the first answer + up to 4 feedback-and-fix calls
    ("self_refine", {"iterations": 3}, 4),
    ("self_refine", {"iterations": 0}, 1),
    ("self_refine", {"protocol": "df_ray"}, 9),  # 4 x (critique + refine)
    ("self_refine", {"protocol": "df_ray", "iterations": 3}, 7),
]
#: Methods whose calls depend on the replies beyond the cases' (GoA's retries and
#: replacements): their declared bound is above the count here.
CONDITIONAL = {"goa_max", "goa_mean"}


def test_every_config_method_is_registered():
    assert set(METHODS) == set(REGISTRY)
    for name in METHODS:
        assert get_method(name).name == name


@pytest.mark.parametrize(("name", "args", "expected"), CASES,
                         ids=[f"{n}-{a}" for n, a, _ in CASES])
def test_calls_per_sample(run_method, name, args, expected):
    run = run_method(name, Script(DISAGREE, default=answer("D", 0.5)), args)
    assert run.n_calls() == expected
    assert len(run.state.calls) == expected
    method = get_method(name, **args)
    bound = method.max_calls_per_sample(build_context(driver_config(method=name)))
    assert bound >= expected if name in CONDITIONAL else bound == expected
    # Every method reports the independent first answers of the agents it asked.
    assert run.outcome.agent_observations
    assert {o.agent for o in run.outcome.agent_observations} <= set(AGENTS)


def test_moa_aggregator_defaults_to_first_agent_without_coordinator(run_method):
    cfg = driver_config(method="moa", coordinator=False)
    run = run_method("moa", Script(DISAGREE), {"layers": 2}, cfg=cfg)
    agg = run.calls(role="aggregator")
    assert [c.agent for c in agg] == ["a1"]
    assert run.n_calls() == 4


def test_goa_counts_with_four_agents(run_method):
    table = {**DISAGREE, ("a4", "goa_initial"): json_answer("D"),
             **{(a, "score"): "[0.4, 0.3, 0.3]" for a in ("a1", "a2", "a3", "a4")}}
    # top_k null: every agent a node, no selection call
    for name, expected, bound in (("goa_max", 4 + 4 + 4, 4 + 4 + 3 * 4 + 4 + 1),
                                  ("goa_mean", 4 + 4 + 6 + 1, 4 + 4 + 3 * 4 + 6 + 1)):
        cfg = driver_config(method=name, agents=("a1", "a2", "a3", "a4"))
        run = run_method(name, Script(table), {"top_k": None}, cfg=cfg)
        assert run.n_calls() == expected, name
        assert not run.calls(role="selector")
        assert get_method(name, top_k=None).max_calls_per_sample(build_context(cfg)) == bound


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_unknown_method_args_are_refused(name):
    with pytest.raises(ValueError, match="unknown method_args"):
        get_method(name, no_such_knob=1)


@pytest.mark.parametrize(("name", "args"), [
    ("self_consistency", {"samples": 0}),
    ("self_consistency", {"samples": 1.5}),
    ("debate", {"rounds": 0}),
    ("reconcile", {"rounds": -1}),
    ("moa", {"layers": 1}),
    ("goa_max", {"rounds": 0}),
    ("goa_mean", {"threshold": 1.5}),
    ("goa_mean", {"top_k": True}),
    ("self_refine", {"iterations": "2"}),
    ("weighted_vote", {"majority": "yes"}),
    ("single", {"agent": 3}),
])
def test_bad_method_args_are_refused(name, args):
    with pytest.raises(ValueError, match="method_args"):
        get_method(name, **args)


def test_unknown_agent_is_refused(run_method):
    with pytest.raises(ValueError, match="not one of the run's agents"):
        run_method("single", Script(DISAGREE), {"agent": "zz"})
