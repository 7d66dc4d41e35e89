"""Plain aggregators the baselines use: majority vote, weighted vote, ReConcile's recalibration.

Unlike the belief, votes count every valid observation, including several from the same agent
id (Self-Consistency draws k samples from one model). Invalid observations (``valid`` False or
``answer`` None) are ignored; with none left the vote is None.

Ties break as in the belief: larger support (weighted vote: larger total weight, then larger
support), then lower agent index (the smallest index among the answer's voters; index =
position in ``agent_order``, default sorted agent ids, unknown agents after known ones), then
the smaller answer key.

Self-Consistency's vote (:func:`first_sample_vote`) is a plurality over samples, not over
agents: its ties go to the answer sampled first (the observation order is the sampling
order), as a reader of the samples in order would break them; the paper defines no tie rule.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from df_ray.core.belief import agent_rank
from df_ray.core.types import Observation

__all__ = ["first_sample_vote", "majority_vote", "recalibrate_reconcile", "weighted_vote"]

_TIE_DECIMALS = 12


def _tally(
    observations: Sequence[Observation],
    weight_of,
    agent_order: Sequence[str] | None,
) -> str | None:
    valid = [o for o in observations if o.valid and o.answer is not None]
    if not valid:
        return None
    if agent_order is None:
        agent_order = sorted({o.agent for o in valid})
    rank = agent_rank(agent_order)
    n = len(rank)
    votes: dict[str, list[Observation]] = {}
    for o in valid:
        votes.setdefault(o.answer, []).append(o)  # type: ignore[arg-type]

    def key(answer: str) -> tuple:
        voters = votes[answer]
        # fsum over sorted weights: independent of input order
        weight = math.fsum(sorted(weight_of(o) for o in voters))
        first = min((rank.get(o.agent, n), o.agent if o.agent not in rank else "")
                    for o in voters)
        return (-round(weight, _TIE_DECIMALS), -len(voters), first, answer)

    return min(votes, key=key)


def majority_vote(observations: Sequence[Observation],
                  agent_order: Sequence[str] | None = None) -> str | None:
    """The most frequent valid answer key (ties: lower agent index, then smaller key)."""
    return _tally(observations, lambda o: 1.0, agent_order)


def first_sample_vote(observations: Sequence[Observation]) -> str | None:
    """The most frequent valid answer key; a tie goes to the tied answer whose first valid
    observation comes earliest in ``observations`` (Self-Consistency: the first sample)."""
    counts: dict[str, int] = {}
    first: dict[str, int] = {}
    for i, o in enumerate(observations):
        if not o.valid or o.answer is None:
            continue
        counts[o.answer] = counts.get(o.answer, 0) + 1
        first.setdefault(o.answer, i)
    if not counts:
        return None
    return min(counts, key=lambda a: (-counts[a], first[a]))


def weighted_vote(
    observations: Sequence[Observation],
    weights: Mapping[str, float],
    agent_order: Sequence[str] | None = None,
    *,
    default: float | None = None,
) -> str | None:
    """The valid answer key with the largest total agent weight (e.g. alpha_i, no R_pi).

    An agent missing from ``weights`` gets ``default``; with ``default=None`` that is a
    KeyError naming the agent.
    """
    def weight_of(o: Observation) -> float:
        if o.agent in weights:
            return float(weights[o.agent])
        if default is None:
            raise KeyError(f"weighted_vote: no weight for agent {o.agent!r} "
                           f"(weights given for {sorted(weights)})")
        return float(default)

    return _tally(observations, weight_of, agent_order)


def recalibrate_reconcile(conf: float) -> float:
    """ReConcile's confidence recalibration.

    1.0 -> 1.0; [0.9, 1) -> 0.8; [0.8, 0.9) -> 0.5; (0.6, 0.8) -> 0.3; <= 0.6 -> 0.1.
    Values above 1 count as 1; a non-finite confidence as <= 0.6.
    """
    c = float(conf)
    if not math.isfinite(c) or c <= 0.6:
        return 0.1
    if c < 0.8:
        return 0.3
    if c < 0.9:
        return 0.5
    if c < 1.0:
        return 0.8
    return 1.0
