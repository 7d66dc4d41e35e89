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

**Tie rules.** A tie is two or more answers level on what the vote counts (total weight and
support; Self-Consistency: support). Where every answer is distinct, the tie rule alone
decides, so each vote takes one of :data:`TIE_RULES`:

- ``first``: the order above (the run-time default, so cached runs replay as they ran). It is
  the order of the reference code: lm-evaluation-harness's majority filter
  (``Counter.most_common``) and llm_multiagent_debate's ``most_frequent`` (a strict ``>``
  over the answers in agent order) both keep the first answer seen, i.e. the first agent's or
  the first sample's.
- ``random``: uniform among the tied answers, seeded by the run seed and the sample id
  (:func:`random_pick`), so it is reproducible and independent of any order. A run takes it
  as ``method_args.tie_rule`` (``RUN_TIE_RULES``); DarkForest's z* through
  :func:`break_belief_tie`.
- ``expected``: the exact expectation of ``random``: a tie among m answers counts 1/m for
  each correct one (:func:`tie_credit`). It is a score, not an answer: the report's tables
  use it by default for every vote, so that no configuration order can decide a row.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

from df_ray.core.belief import agent_rank
from df_ray.core.types import Belief, Cluster, Observation

__all__ = ["RUN_TIE_RULES", "TIE_RULES", "TieRule", "belief_tied", "break_belief_tie",
           "check_tie_rule", "first_sample_vote", "majority_vote", "random_pick",
           "recalibrate_reconcile", "tie_credit", "tied_answers", "vote_credit",
           "weighted_vote"]

_TIE_DECIMALS = 12

TieRule = Literal["first", "random", "expected"]
#: The named tie rules every vote takes (see the module docstring).
TIE_RULES: tuple[str, ...] = ("first", "random", "expected")
#: The rules a run can break its ties by (``expected`` is a score, not an answer).
RUN_TIE_RULES: tuple[str, ...] = ("first", "random")


def check_tie_rule(rule: str, answer: bool = False) -> None:
    """Refuse an unknown rule, or ``expected`` where one answer is needed (``answer``)."""
    if rule not in TIE_RULES:
        raise ValueError(f"unknown tie rule {rule!r}; one of {', '.join(TIE_RULES)}")
    if answer and rule == "expected":
        raise ValueError("the 'expected' tie rule is a score, not an answer: use vote_credit "
                         "or tie_credit, or the 'first' or 'random' rule")


def random_pick(tied: Sequence[str], run_seed: int = 0, sample_id: str = "") -> str:
    """One of ``tied``, uniformly, by a generator seeded with the run seed and the sample id
    (the same pick on every machine and in every order of ``tied``)."""
    if not tied:
        raise ValueError("random_pick: no tied answers to pick from")
    digest = hashlib.sha256(f"tie\n{int(run_seed)}\n{sample_id}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big")).choice(sorted(tied))


def tie_credit(tied: Sequence[str], correct: Mapping[str, bool]) -> float:
    """The expected correctness of a uniform pick among ``tied`` (0 when there is none)."""
    if not tied:
        return 0.0
    return sum(bool(correct.get(a, False)) for a in tied) / len(tied)


def _votes(observations: Sequence[Observation]) -> dict[str, list[Observation]]:
    votes: dict[str, list[Observation]] = {}
    for o in observations:
        if o.valid and o.answer is not None:
            votes.setdefault(o.answer, []).append(o)
    return votes


def tied_answers(observations: Sequence[Observation],
                 weights: Mapping[str, float] | None = None, *,
                 default: float | None = None) -> list[str]:
    """The answers level at the top of the vote (total weight, then support; ``weights``
    None: a plain count), in first-seen order; one answer when nothing is tied, none when
    there is no valid observation."""
    votes = _votes(observations)
    weight_of = _weight_of(weights, default) if weights is not None else (lambda o: 1.0)

    def score(a: str) -> tuple[float, int]:
        return (round(math.fsum(sorted(weight_of(o) for o in votes[a])), _TIE_DECIMALS),
                len(votes[a]))

    if not votes:
        return []
    best = max(score(a) for a in votes)
    return [a for a in votes if score(a) == best]


def vote_credit(observations: Sequence[Observation], correct: Mapping[str, bool],
                rule: str = "expected", *, weights: Mapping[str, float] | None = None,
                first: str | None = None, run_seed: int = 0, sample_id: str = "",
                default: float | None = None) -> float:
    """How right the vote over ``observations`` is under a tie rule: 0 or 1 for ``first``
    (``first``: the answer the run chose, else :func:`majority_vote`'s /
    :func:`weighted_vote`'s) and ``random``; the share of correct tied answers for
    ``expected``. ``weights`` as :func:`weighted_vote` takes them (None: a plain count)."""
    check_tie_rule(rule)
    tied = tied_answers(observations, weights, default=default)
    if not tied:
        return 0.0
    if rule == "expected":
        return tie_credit(tied, correct)
    if rule == "random":
        return float(bool(correct.get(random_pick(tied, run_seed, sample_id), False)))
    if first is None:
        first = (majority_vote(observations) if weights is None
                 else weighted_vote(observations, weights, default=default))
    return float(bool(correct.get(first or "", False)))


def _weight_of(weights: Mapping[str, float], default: float | None
               ) -> Callable[[Observation], float]:
    def weight_of(o: Observation) -> float:
        if o.agent in weights:
            return float(weights[o.agent])
        if default is None:
            raise KeyError(f"weighted_vote: no weight for agent {o.agent!r} "
                           f"(weights given for {sorted(weights)})")
        return float(default)

    return weight_of


def _tally(
    observations: Sequence[Observation],
    weight_of,
    agent_order: Sequence[str] | None,
) -> str | None:
    votes = _votes(observations)
    if not votes:
        return None
    if agent_order is None:
        agent_order = sorted({o.agent for v in votes.values() for o in v})
    rank = agent_rank(agent_order)
    n = len(rank)

    def key(answer: str) -> tuple:
        voters = votes[answer]
        # fsum over sorted weights: independent of input order
        weight = math.fsum(sorted(weight_of(o) for o in voters))
        first = min((rank.get(o.agent, n), o.agent if o.agent not in rank else "")
                    for o in voters)
        return (-round(weight, _TIE_DECIMALS), -len(voters), first, answer)

    return min(votes, key=key)


def majority_vote(observations: Sequence[Observation],
                  agent_order: Sequence[str] | None = None, *, ties: str = "first",
                  run_seed: int = 0, sample_id: str = "") -> str | None:
    """The most frequent valid answer key. Ties (``ties``): ``first``, lower agent index,
    then smaller key; ``random``, :func:`random_pick` with ``run_seed`` and ``sample_id``."""
    check_tie_rule(ties, answer=True)
    if ties == "random":
        tied = tied_answers(observations)
        return random_pick(tied, run_seed, sample_id) if tied else None
    return _tally(observations, lambda o: 1.0, agent_order)


def first_sample_vote(observations: Sequence[Observation], *, ties: str = "first",
                      run_seed: int = 0, sample_id: str = "") -> str | None:
    """The most frequent valid answer key; a tie goes to the tied answer whose first valid
    observation comes earliest in ``observations`` (Self-Consistency: the first sample), or
    with ``ties="random"`` to :func:`random_pick`'s."""
    check_tie_rule(ties, answer=True)
    if ties == "random":
        tied = tied_answers(observations)
        return random_pick(tied, run_seed, sample_id) if tied else None
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
    ties: str = "first",
    run_seed: int = 0,
    sample_id: str = "",
) -> str | None:
    """The valid answer key with the largest total agent weight (e.g. alpha_i, no R_pi).

    An agent missing from ``weights`` gets ``default``; with ``default=None`` that is a
    KeyError naming the agent. Ties as :func:`majority_vote`'s.
    """
    check_tie_rule(ties, answer=True)
    if ties == "random":
        tied = tied_answers(observations, weights, default=default)
        return random_pick(tied, run_seed, sample_id) if tied else None
    return _tally(observations, _weight_of(weights, default), agent_order)


def _belief_rank(c: Cluster) -> tuple[float, bool, int]:
    # what the belief ranks on before its order's tie-break (df_ray.core.belief)
    return (round(c.posterior, _TIE_DECIMALS), c.posterior > 0.0, len(c.support))


def belief_tied(belief: Belief) -> list[str]:
    """The belief's candidates level with z* on what it ranks (posterior, a positive
    posterior before a zero one, support), in its order; none for an empty belief."""
    if not belief.clusters:
        return []
    best = _belief_rank(belief.clusters[0])
    return [c.answer for c in belief.clusters if _belief_rank(c) == best]


def break_belief_tie(belief: Belief, rule: str = "first", run_seed: int = 0,
                     sample_id: str = "") -> Belief:
    """The belief with z* chosen among the candidates tied with it by ``rule``: ``first``
    keeps the belief's own order (lower agent index, then smaller key); ``random`` puts
    :func:`random_pick`'s candidate first (the others keep their order), with runner-up and
    margin recomputed (0 for a tie)."""
    check_tie_rule(rule, answer=True)
    tied = belief_tied(belief)
    if rule == "first" or len(tied) < 2:
        return belief
    pick = random_pick(tied, run_seed, sample_id)
    clusters = tuple(sorted(belief.clusters, key=lambda c: c.answer != pick))  # stable
    top, runner_up = clusters[0], clusters[1]
    return Belief(clusters=clusters, top=top, runner_up=runner_up,
                  margin=top.posterior - runner_up.posterior)


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
