"""One sample's final answer as the methods choose it, from observations already parsed.

These are the methods' own rules (``df_ray.methods.weighted_vote`` with ``majority``,
``df_ray.methods.darkforest``), called on the core functions the methods call
(``majority_vote``, ``build_belief``, ``decide``), so an analysis over cached answers
picks the answer a real run of the same agents would have graded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from df_ray.core import BeliefConfig, GuardrailConfig, build_belief, majority_vote
from df_ray.core.types import Belief, Decision, Observation
from df_ray.methods.common import representative
from df_ray.methods.darkforest import decision_and_final


def vote_final(obs: Sequence[Observation], order: Sequence[str]) -> Observation | None:
    """The majority vote's graded observation (``WeightedVote(majority=True)``): the
    plurality answer's best-parsed supporter; ``order``: the agents in config order (the
    tie-break), the coordinator after them."""
    return representative(obs, majority_vote(obs, agent_order=list(order)))


def belief_of(obs: Sequence[Observation], calibration: Any, config: BeliefConfig,
              agents: Sequence[str]) -> Belief:
    """DarkForest's belief (``DarkForest._belief``) over ``obs`` of the agents ``agents``."""
    return build_belief(obs, calibration, config, agent_order=list(agents))


def darkforest_final(obs: Sequence[Observation], belief: Belief,
                     coordinator: Observation | None, guard: GuardrailConfig
                     ) -> tuple[Decision, Observation | None]:
    """DarkForest's decision and graded observation (``DarkForest.finish``): ``coordinator``
    is the coordinator's parsed answer (None: not called; belief-only passes None)."""
    return decision_and_final(obs, belief, coordinator, guard)
