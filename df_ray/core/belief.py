"""The calibrated belief (docs/method.md §3-4): observations -> clusters -> posterior.

    s(z)   = R_{pi_z} * sum_{i in S_z} alpha_i * rho_i * delta_i * phi(c_i)
    P(z|O) = max(0, s(z)) / sum_z' max(0, s(z'))

- alpha_i = (n_correct_i + 1) / (n_valid_i + 2), looked up in the frozen calibration.
- R_pi = (n_correct_pi + 1) / (n_pi + 2); a pattern never seen in calibration gets 1/2.
- rho_i = q_i, the observation's parse quality.
- delta_i = 1 - gamma * max_{j != i} kappa_ij, with gamma from :class:`BeliefConfig` (not the
  gamma the calibration was fitted with) and kappa from the calibration.
- phi(c) = 0.5 + c.

Decisions where docs/method.md is silent (each one is tested):

- **No calibration / unknown agent.** Without a calibration every agent gets the Laplace prior
  alpha = 1/2, every pattern R = 1/2 and every pair kappa = 1/2, so delta = 1 - gamma/2 for
  every agent of a pool of two or more (1 for a pool of one). These are uniform factors: the
  posterior is then the quality- and confidence-weighted vote. An agent the calibration does
  not know gets the same priors.
- **Agent pool for delta.** ``j`` ranges over the calibration's agents (the run's agents); with
  no calibration over ``agent_order`` if given, else over the agents in the observations.
- **Out-of-range inputs.** c is clamped to [0, 1] (so phi stays in [0.5, 1.5], the bounded
  modulation docs/method.md names) and q to [0, 1]; a non-finite c counts as 0.5, a non-finite q as 0.
- **An agent observed twice.** Each agent contributes at most one observation (S_z is a set of
  agents, and calibration patterns are disjoint): the agent's best valid observation is kept,
  best = highest parse quality, then highest confidence, then smallest answer key. The choice
  does not depend on the order of the input, and neither does anything else here: per-cluster
  sums run in agent order and the normaliser in answer-key order.
- **All scores zero** (every valid observation has q = 0): the posterior is uniform over the
  clusters.
- **Ties.** Clusters sort by posterior (rounded to 12 decimals, so that mathematically equal
  scores computed along different float paths tie), then a positive posterior before a zero
  one (a cluster with no evidence at all, e.g. every supporter's q = 0, never ranks above one
  with some, however little: 1.5e-202 before 0.0), then larger support, then lower agent
  index (the smallest index among the cluster's supporters), then answer key. Agent index =
  position in ``agent_order``; default the calibration's agent list, else the sorted agent
  ids; agents missing from the order come after the known ones, sorted by id.
- **Margin** = P(z*) - P(z_(2)), with P(z_(2)) = 0 when there is one cluster; an empty belief
  (no valid observation) has no clusters, top = runner_up = None and margin 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol

from df_ray.core.types import Belief, Cluster, Observation


class Reliabilities(Protocol):
    """What the belief looks up in a frozen calibration (``df_ray.core.Calibration``)."""

    @property
    def agents(self) -> Sequence[str]: ...

    def alpha(self, agent: str) -> float: ...

    def delta(self, agent: str, gamma: float) -> float: ...

    def pattern_reliability(self, pattern: tuple[str, ...]) -> float: ...

__all__ = [
    "LAPLACE_PRIOR",
    "BeliefConfig",
    "Reliabilities",
    "agent_rank",
    "build_belief",
    "cluster_observations",
    "phi",
    "select_observations",
]

LAPLACE_PRIOR = 0.5
"""alpha, R_pi and kappa with no calibration data: (0 + 1) / (0 + 2)."""

_TIE_DECIMALS = 12


@dataclass(frozen=True, slots=True)
class BeliefConfig:
    """How the belief is scored: gamma of the independence discount plus ablation switches.

    Switching a factor off sets it to 1: ``use_alpha`` (alpha_i), ``use_pattern`` (R_pi),
    ``use_independence`` (delta_i), ``use_confidence`` (phi(c_i)). rho_i (parse quality) is
    always on.
    """

    gamma: float = 0.5
    use_alpha: bool = True
    use_pattern: bool = True
    use_independence: bool = True
    use_confidence: bool = True

    ABLATIONS: ClassVar[tuple[str, ...]] = (
        "full", "no_calibration", "agent_only", "no_independence", "no_confidence",
    )

    def __post_init__(self) -> None:
        if isinstance(self.gamma, bool) or not isinstance(self.gamma, int | float):
            raise ValueError(f"BeliefConfig.gamma must be a number in [0, 1], got {self.gamma!r}")
        if not (0.0 <= float(self.gamma) <= 1.0):
            raise ValueError(f"BeliefConfig.gamma must be in [0, 1], got {self.gamma!r}")

    @classmethod
    def ablation(cls, name: str, *, gamma: float = 0.5) -> BeliefConfig:
        """The preset of an ablation row.

        ``full`` (everything on), ``no_calibration`` (alpha = R = delta = 1), ``agent_only``
        (R = 1: agent-level calibration only), ``no_independence`` (delta = 1),
        ``no_confidence`` (phi = 1).
        """
        presets = {
            "full": {},
            "no_calibration": {"use_alpha": False, "use_pattern": False,
                               "use_independence": False},
            "agent_only": {"use_pattern": False},
            "no_independence": {"use_independence": False},
            "no_confidence": {"use_confidence": False},
        }
        if name not in presets:
            raise ValueError(
                f"unknown belief ablation {name!r}; expected one of {', '.join(cls.ABLATIONS)}")
        return cls(gamma=gamma, **presets[name])


def phi(c: float) -> float:
    """phi(c) = 0.5 + c, with c clamped to [0, 1] (non-finite c counts as 0.5)."""
    return 0.5 + _clamp01(c, default=0.5)


def _clamp01(x: float, *, default: float) -> float:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return default
    if not math.isfinite(x):
        return default
    return min(1.0, max(0.0, x))


def _preference(obs: Observation) -> tuple:
    # Smaller is better: highest quality, highest confidence, smallest key, then the rest so
    # that the choice is a total order over distinct observations.
    return (-_clamp01(obs.quality, default=0.0), -_clamp01(obs.confidence, default=0.5),
            obs.answer or "", obs.extracted or "", obs.raw)


def select_observations(observations: Sequence[Observation]) -> tuple[Observation, ...]:
    """The observations the belief uses: valid ones, at most one per agent, sorted by agent id.

    An observation is valid when ``valid`` is set and ``answer`` is not None. An agent with
    several valid observations keeps its best one (highest quality, then highest confidence,
    then smallest answer key), so the result does not depend on input order.
    """
    best: dict[str, Observation] = {}
    for obs in observations:
        if not obs.valid or obs.answer is None:
            continue
        cur = best.get(obs.agent)
        if cur is None or _preference(obs) < _preference(cur):
            best[obs.agent] = obs
    return tuple(best[a] for a in sorted(best))


def cluster_observations(observations: Sequence[Observation]) -> dict[str, tuple[Observation, ...]]:
    """Valid observations (one per agent, see :func:`select_observations`) grouped by answer key.

    Keys are in sorted order; each group is sorted by agent id.
    """
    groups: dict[str, list[Observation]] = {}
    for obs in select_observations(observations):
        groups.setdefault(obs.answer, []).append(obs)  # type: ignore[arg-type]
    return {k: tuple(groups[k]) for k in sorted(groups)}


def agent_rank(order: Sequence[str]) -> Mapping[str, int]:
    """Agent id -> index in ``order`` (first occurrence wins)."""
    rank: dict[str, int] = {}
    for i, a in enumerate(order):
        rank.setdefault(a, i)
    return rank


def _sort_agents(agents: Sequence[str], rank: Mapping[str, int]) -> tuple[str, ...]:
    # Known agents by their index, unknown ones after them by id.
    n = len(rank)
    return tuple(sorted(agents, key=lambda a: (rank.get(a, n), a)))


@dataclass(frozen=True)
class _Factors:
    """The belief's factors for one sample: alpha_i, delta_i and R_pi from the calibration
    (the Laplace prior 1/2 without one), 1 where the config switches a factor off."""

    calibration: Reliabilities | None
    config: BeliefConfig
    pool: tuple[str, ...]

    def alpha(self, agent: str) -> float:
        if not self.config.use_alpha:
            return 1.0
        cal = self.calibration
        return cal.alpha(agent) if cal is not None else LAPLACE_PRIOR

    def delta(self, agent: str) -> float:
        if not self.config.use_independence:
            return 1.0
        if self.calibration is not None:
            return self.calibration.delta(agent, self.config.gamma)
        others = [j for j in self.pool if j != agent]
        return 1.0 - self.config.gamma * LAPLACE_PRIOR if others else 1.0

    def reliability(self, pattern: tuple[str, ...]) -> float:
        if not self.config.use_pattern:
            return 1.0
        if self.calibration is not None:
            return self.calibration.pattern_reliability(pattern)
        return LAPLACE_PRIOR


def build_belief(
    observations: Sequence[Observation],
    calibration: Reliabilities | None = None,
    config: BeliefConfig = BeliefConfig(),
    agent_order: Sequence[str] | None = None,
) -> Belief:
    """Turn one sample's observations into the calibrated belief B (see the module docstring)."""
    groups = cluster_observations(observations)
    if not groups:
        return Belief(clusters=(), top=None, runner_up=None, margin=0.0)

    if agent_order is None:
        agent_order = (calibration.agents if calibration is not None
                       else sorted({o.agent for o in observations}))
    rank = agent_rank(agent_order)
    n_known = len(rank)

    if calibration is not None:
        pool: tuple[str, ...] = tuple(calibration.agents)
    else:
        pool = tuple(dict.fromkeys([*agent_order, *sorted({o.agent for o in observations})]))

    f = _Factors(calibration, config, pool)
    alpha, delta, reliability = f.alpha, f.delta, f.reliability
    scored: list[tuple[str, tuple[str, ...], tuple[str, ...], float]] = []
    for answer, members in groups.items():
        by_agent = {o.agent: o for o in members}
        support = _sort_agents(list(by_agent), rank)
        pattern = tuple(sorted(by_agent))
        total = 0.0
        for agent in support:  # fixed summation order: results independent of input order
            obs = by_agent[agent]
            rho = _clamp01(obs.quality, default=0.0)
            conf = phi(obs.confidence) if config.use_confidence else 1.0
            total += alpha(agent) * rho * delta(agent) * conf
        scored.append((answer, support, pattern, reliability(pattern) * total))

    positive = [max(0.0, s) for _, _, _, s in scored]  # in answer-key order
    norm = math.fsum(positive)
    if norm > 0.0:
        posteriors = [p / norm for p in positive]
    else:
        posteriors = [1.0 / len(scored)] * len(scored)

    clusters = [
        Cluster(answer=a, support=sup, pattern=pat, score=s, posterior=p)
        for (a, sup, pat, s), p in zip(scored, posteriors, strict=True)
    ]

    def sort_key(c: Cluster) -> tuple:
        first = min(rank.get(a, n_known) for a in c.support)
        first_unknown = min(c.support) if first == n_known else ""
        return (-round(c.posterior, _TIE_DECIMALS), c.posterior <= 0.0, -len(c.support), first,
                first_unknown, c.answer)

    clusters.sort(key=sort_key)
    top = clusters[0]
    runner_up = clusters[1] if len(clusters) > 1 else None
    margin = top.posterior - (runner_up.posterior if runner_up is not None else 0.0)
    return Belief(clusters=tuple(clusters), top=top, runner_up=runner_up, margin=margin)
