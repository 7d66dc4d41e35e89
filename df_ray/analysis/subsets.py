"""Every agent subset of a finished sweep, from its cached answers: the majority vote's and
the belief-only decision's accuracy with the calibration refitted on the subset, DarkForest
with its coordinator where the subset's coordinator calls are cached, leave-one-out,
Shapley values and the best subset of each size.

A subset S is the configuration "the pool's configuration with only S's agents" (config
order kept): its vote is ``weighted_vote`` with ``majority``, scored with its ties broken
by ``SubsetSettings.tie_rule`` (``df_ray.core.voting``'s rules; default ``expected``: 1/m for
each correct answer of an m-way tie, so no config order decides a subset's vote or a Shapley
value; ``first``: the answer the method picks; ``random``: a pick seeded by the run seed and
the sample id), its belief-only decision
DarkForest with ``belief_only`` and the calibration fitted on S alone (``fit_calibration``
over the calibration split's cached records restricted to S: the file a real run of S
would fit). The full pool uses the sweep's frozen calibration file when one matches, as
its run did (its top candidates' ties scored by the same rule). DarkForest with a coordinator
is lazy: the coordinator is asked only where the subset's guardrail does not trust z*, and
counted when the call is cached. Each subset's per-problem outcomes are kept
(:func:`subset_outcomes`), with the paired difference against the full pool: the exact
McNemar p where both outcomes are 0/1, the clustered t p beside it.

Up to ``max_exact`` agents (10) every one of the 2^n - 1 subsets is evaluated and Shapley
values are exact; beyond, the subsets are the singletons, the leave-one-outs, the full
pool and ``n_sampled`` subsets drawn with ``seed``, and Shapley values are the mean
marginal contribution over ``n_permutations`` seeded random orders. A subset's value is
its accuracy; the empty subset's is 0 (no answer).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from df_ray.analysis.cached import CachedPool, Missing, lookup, parse_records
from df_ray.analysis.decisions import belief_of, darkforest_final, vote_final
from df_ray.core import BeliefConfig, CalibrationRecord, GuardrailConfig, fit_calibration
from df_ray.core.guardrail import is_trusted
from df_ray.core.voting import belief_tied, check_tie_rule, random_pick, tied_answers
from df_ray.methods.base import SampleState
from df_ray.methods.common import representative
from df_ray.statistics import bootstrap_ci, paired_difference

Subset = tuple[str, ...]

#: Subset analyses per metric (column of the subset table).
METRICS = ("vote", "belief_only", "darkforest")


@dataclass(frozen=True)
class SubsetSettings:
    max_exact: int = 10
    n_sampled: int = 256
    n_permutations: int = 200
    seed: int = 0
    #: Look subsets' coordinator calls up (DarkForest with a coordinator per subset).
    coordinator: bool = True
    #: How the votes' and belief-only decisions' ties are scored (``TIE_RULES``).
    tie_rule: str = "expected"

    def __post_init__(self) -> None:
        check_tie_rule(self.tie_rule)


@dataclass
class SubsetResult:
    agents: Subset
    vote: np.ndarray
    belief_only: np.ndarray
    tokens: np.ndarray
    trusted: np.ndarray
    darkforest: np.ndarray | None = None
    darkforest_tokens: np.ndarray | None = None
    coordinator_missing: int = 0


def belief_config(cfg: Any) -> BeliefConfig:
    args = cfg.build_method().args
    return BeliefConfig.ablation(getattr(args, "ablation", "full"),
                                 gamma=getattr(args, "gamma", 0.5))


def guardrail_config(cfg: Any) -> GuardrailConfig:
    m = cfg.build_method()
    return m.guardrail() if hasattr(m, "guardrail") else GuardrailConfig()


def restrict(rec: CalibrationRecord, agents: Sequence[str]) -> CalibrationRecord:
    keep = set(agents)
    return dataclasses.replace(rec, observations=tuple(o for o in rec.observations
                                                       if o.agent in keep))


def coordinator_method(cfg: Any) -> Any:
    """The pool's DarkForest with its coordinator always planned (the lookups decide where
    it is needed): its disclosure, gamma and ablation kept."""
    from df_ray.methods import get_method

    args = cfg.build_method().args.model_dump()
    args.update(lazy=False, belief_only=False)
    return get_method("darkforest", **args)


@dataclass
class SubsetEvaluator:
    """Evaluates subsets of a cached pool (memoised): calibration refits, answers, beliefs."""

    pool: CachedPool
    frozen: Any = None  # the full pool's frozen calibration, when one matches
    settings: SubsetSettings = SubsetSettings()
    results: dict[Subset, SubsetResult] = field(default_factory=dict)
    calibrations: dict[Subset, Any] = field(default_factory=dict)
    coordinator_missing: Missing = field(default_factory=Missing)
    #: ``FreshCalls`` (``--fresh``): make a subset's missing coordinator calls, else None
    fresh: Any = None

    def __post_init__(self) -> None:
        cfg = self.pool.cfg
        self.belief_cfg = belief_config(cfg)
        self.guard = guardrail_config(cfg)
        self.coordinator_id = cfg.coordinator.id if cfg.coordinator else None
        self.uses_calibration = self.belief_cfg != BeliefConfig.ablation(
            "no_calibration", gamma=self.belief_cfg.gamma)
        self._coord_obs: dict[tuple[Subset, int], Any] = {}

    def order(self, subset: Subset) -> list[str]:
        return [*subset, *([self.coordinator_id] if self.coordinator_id else [])]

    def calibration(self, subset: Subset) -> Any:
        if not self.uses_calibration:
            return None
        got = self.calibrations.get(subset)
        if got is None:
            if tuple(subset) == tuple(self.pool.agents) and self.frozen is not None:
                got = self.frozen
            else:
                cfg = self.pool.cfg
                gamma = cfg.method_args.get("gamma", 0.5)
                got = fit_calibration([restrict(r, subset) for r in self.pool.records],
                                      agents=subset, benchmark=cfg.benchmark, gamma=gamma,
                                      fitted_at="analysis")
            self.calibrations[subset] = got
        return got

    def beliefs(self, subset: Subset) -> list[Any]:
        cal = self.calibration(subset)
        return [belief_of([o[a] for a in subset], cal, self.belief_cfg, subset)
                for o in self.pool.test.obs]

    def evaluate(self, subset: Sequence[str]) -> SubsetResult:
        subset = tuple(a for a in self.pool.agents if a in set(subset))
        hit = self.results.get(subset)
        if hit is not None:
            return hit
        test = self.pool.test
        n = len(test.samples)
        vote = np.zeros(n, float)
        belief_only = np.zeros(n, float)
        trusted = np.zeros(n, bool)
        tokens = np.zeros(n, np.int64)
        beliefs = self.beliefs(subset)
        for i, (s, o, b) in enumerate(zip(test.samples, test.obs, beliefs, strict=True)):
            obs = [o[a] for a in subset]
            vote[i] = self._scored(s, obs, tied_answers(obs), vote_final(obs, self.order(subset)))
            decision, final = darkforest_final(obs, b, None, self.guard)
            trusted[i] = decision.trusted
            belief_only[i] = self._scored(s, obs, belief_tied(b), final)
            tokens[i] = sum(test.tokens[i][a] for a in subset)
        res = SubsetResult(subset, vote, belief_only, tokens, trusted)
        if self.settings.coordinator and self.coordinator_id is not None:
            self._with_coordinator(res, beliefs)
        self.results[subset] = res
        return res

    def _scored(self, sample: Any, obs: Sequence[Any], tied: Sequence[str], own: Any
                ) -> float:
        """A decision's outcome under the tie rule: ``own`` (the observation the method
        answers with) graded where nothing is tied or under ``first``; the seeded pick's
        under ``random``; :meth:`_credit` under ``expected``."""
        rule = self.settings.tie_rule
        if rule == "first" or len(tied) < 2:
            return float(self.pool.grader.correct(sample, own))
        if rule == "random":
            pick = random_pick(tied, self.pool.cfg.seed, sample.id)
            return float(self.pool.grader.correct(sample, representative(list(obs), pick)))
        return self._credit(sample, obs, tied)

    def _credit(self, sample: Any, obs: Sequence[Any], tied: Sequence[str]) -> float:
        """The expected correctness of a uniform pick among the ``tied`` answers of
        ``obs`` (each graded by its best-parsed supporter, as the vote's winner is)."""
        if not tied:
            return float(self.pool.grader.correct(sample, None))
        return sum(self.pool.grader.correct(sample, representative(list(obs), a))
                   for a in tied) / len(tied)

    def coordinator_answer(self, subset: Subset, i: int, belief: Any = None
                           ) -> tuple[Any, int] | None:
        """The subset's cached coordinator answer to test sample ``i`` (parsed) and its
        tokens; None when the call is not cached (counted)."""
        key = (subset, i)
        if key in self._coord_obs:
            return self._coord_obs[key]
        pool = self.pool
        sample = pool.test.samples[i]
        calls, ctx = self.coordinator_calls(subset, i, belief)
        recs = lookup(pool.cache, calls, 1, self.coordinator_missing,
                      "coordinator" if subset == tuple(pool.agents) else
                      f"coordinator of {'+'.join(subset)}", sample)
        if recs is None:
            got = None
        else:
            (coord,) = parse_records(recs, ctx, sample) or (None,)
            got = (coord, sum(0 if r.error else r.prompt_tokens + r.completion_tokens
                              for r in recs))
        self._coord_obs[key] = got
        return got

    def coordinator_calls(self, subset: Subset, i: int, belief: Any = None
                          ) -> tuple[list[Any], Any]:
        """The coordinator calls the method plans for ``subset`` on test sample ``i`` (the
        requests a real run of the subset makes), and the subset's context."""
        pool = self.pool
        ctx = pool.ctx(subset, self.calibration(subset))
        st = SampleState(pool.test.samples[i])
        st.calls.extend(c for c in pool.test.states[i].calls if c.agent in set(subset))
        if belief is not None and self._method().args.disclosure == "strict":
            # strict evidence reads no trace text, so the belief built here stands in
            st.memo["belief"] = ([pool.test.obs[i][a] for a in subset], belief)
        return self._method().plan(1, st, ctx), ctx

    def _make_missing(self, subset: Subset, beliefs: list[Any]) -> None:
        """``--fresh``: the subset's coordinator calls on the samples its guardrail does not
        trust, where the cache lacks them (``FreshCalls.make``: batch by batch)."""
        calls = []
        for i, b in enumerate(beliefs):
            if (subset, i) in self._coord_obs or is_trusted(b, self.guard):
                continue
            calls.extend(self.coordinator_calls(subset, i, b)[0])
        self.fresh.make(calls)

    def _method(self) -> Any:
        m = getattr(self, "_df_method", None)
        if m is None:
            m = self._df_method = coordinator_method(self.pool.cfg)
        return m

    def _with_coordinator(self, res: SubsetResult, beliefs: list[Any]) -> None:
        test, grader = self.pool.test, self.pool.grader
        n = len(test.samples)
        df = np.zeros(n, bool)
        df_tokens = res.tokens.copy()
        missing = 0
        if self.fresh is not None:
            self._make_missing(res.agents, beliefs)
        for i, (s, o, b) in enumerate(zip(test.samples, test.obs, beliefs, strict=True)):
            obs = [o[a] for a in res.agents]
            if is_trusted(b, self.guard):
                _, final = darkforest_final(obs, b, None, self.guard)
                df[i] = grader.correct(s, final)
                continue
            got = self.coordinator_answer(res.agents, i, b)
            if got is None:
                missing += 1
                if missing == 1 and res.agents != tuple(self.pool.agents):
                    break  # another subset's coordinator: one miss says it was never run
                continue
            coord, t = got
            _, final = darkforest_final(obs, b, coord, self.guard)
            df[i] = grader.correct(s, final)
            df_tokens[i] += t
        res.coordinator_missing = missing
        if missing == 0:
            res.darkforest, res.darkforest_tokens = df, df_tokens


# ----------------------------------------------------------------------------- subsets


def all_subsets(agents: Sequence[str]) -> list[Subset]:
    return [tuple(c) for r in range(1, len(agents) + 1)
            for c in itertools.combinations(agents, r)]


def sampled_subsets(agents: Sequence[str], n_sampled: int, seed: int) -> list[Subset]:
    """Singletons, leave-one-outs, the full pool and ``n_sampled`` distinct random subsets
    (each agent in with probability 1/2, empty ones redrawn), drawn with ``seed``."""
    n = len(agents)
    chosen: dict[Subset, None] = {}
    for a in agents:
        chosen[(a,)] = None
    for a in agents:
        chosen[tuple(x for x in agents if x != a)] = None
    chosen[tuple(agents)] = None
    rng = random.Random(seed)
    target = len(chosen) + min(n_sampled, 2 ** n - 1 - len(chosen))
    while len(chosen) < target:
        s = tuple(a for a in agents if rng.random() < 0.5)
        if s:
            chosen.setdefault(s, None)
    return sorted(chosen, key=lambda s: (len(s), [agents.index(a) for a in s]))


def shapley_exact(players: Sequence[str], value: Callable[[frozenset], float]
                  ) -> dict[str, float]:
    """phi_i = sum_{S without i} |S|! (n - |S| - 1)! / n! (v(S + i) - v(S))."""
    n = len(players)
    weights = [math.factorial(s) * math.factorial(n - s - 1) / math.factorial(n)
               for s in range(n)]
    out = {}
    for p in players:
        others = [q for q in players if q != p]
        total = 0.0
        for r in range(n):
            for c in itertools.combinations(others, r):
                s = frozenset(c)
                total += weights[r] * (value(s | {p}) - value(s))
        out[p] = total
    return out


def shapley_sampled(players: Sequence[str], value: Callable[[frozenset], float],
                    n_permutations: int, seed: int) -> dict[str, float]:
    """The mean marginal contribution over ``n_permutations`` orders drawn with ``seed``."""
    rng = random.Random(seed)
    out = dict.fromkeys(players, 0.0)
    for _ in range(n_permutations):
        order = list(players)
        rng.shuffle(order)
        s: frozenset = frozenset()
        before = value(s)
        for p in order:
            s = s | {p}
            after = value(s)
            out[p] += after - before
            before = after
    return {p: v / n_permutations for p, v in out.items()}


# ----------------------------------------------------------------------------- the section


@dataclass
class SubsetSection:
    table: pd.DataFrame
    leave_one_out: pd.DataFrame
    shapley: pd.DataFrame
    best: pd.DataFrame
    by_size: pd.DataFrame
    exact: bool
    note: str
    lines: list[str] = field(default_factory=list)
    #: every subset's per-problem outcomes (:func:`subset_outcomes`)
    outcomes: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: how the votes' ties were scored (``SubsetSettings.tie_rule``)
    tie_rule: str = "expected"


def _acc(x: np.ndarray | None) -> float:
    return float(np.mean(x)) if x is not None and len(x) else float("nan")


def _leave_one_out(ev: SubsetEvaluator, agents: Sequence[str], full: Any) -> list[dict]:
    """Per agent: each metric with the full pool, without the agent, and the change."""
    loo = []
    for a in agents:
        rest = tuple(x for x in agents if x != a)
        r = ev.evaluate(rest) if rest else None
        row: dict[str, Any] = {"left_out": a}
        for m in METRICS:
            v_full = _acc(getattr(full, m))
            v_rest = _acc(getattr(r, m)) if r is not None else 0.0
            row[m] = v_full
            row[f"{m}_without"] = v_rest
            row[f"{m}_change"] = v_full - v_rest
        loo.append(row)
    return loo


def _by_size(table: pd.DataFrame) -> tuple[list[dict], list[dict]]:
    """The best subset of each size per decision, and each size's mean accuracy and tokens."""
    best_rows, by_size = [], []
    for size, g in table.groupby("size"):
        for m in ("vote", "belief_only", "darkforest"):
            gm = g.dropna(subset=[m])
            if gm.empty:
                continue
            top = gm.loc[gm[m].idxmax()]
            best_rows.append({"size": int(size), "metric": m, "agents": top["agents"],
                              "accuracy": float(top[m]),
                              "tokens_per_sample": float(top["tokens_per_sample"])})
        by_size.append({"size": int(size), "subsets": len(g),
                        "vote_mean": float(g["vote"].mean()),
                        "belief_only_mean": float(g["belief_only"].mean()),
                        "tokens_per_sample_mean": float(g["tokens_per_sample"].mean())})
    return best_rows, by_size


def subset_section(ev: SubsetEvaluator) -> SubsetSection:
    agents = ev.pool.agents
    st = ev.settings
    exact = len(agents) <= st.max_exact
    subsets = all_subsets(agents) if exact else sampled_subsets(agents, st.n_sampled, st.seed)
    rows = []
    for s in subsets:
        r = ev.evaluate(s)
        lo, hi = bootstrap_ci(r.vote)
        blo, bhi = bootstrap_ci(r.belief_only)
        rows.append({"agents": "+".join(s), "size": len(s), "vote": _acc(r.vote),
                     "vote_lo": lo, "vote_hi": hi, "belief_only": _acc(r.belief_only),
                     "belief_only_lo": blo, "belief_only_hi": bhi,
                     "darkforest": _acc(r.darkforest),
                     "trusted_rate": _acc(r.trusted),
                     "tokens_per_sample": float(np.mean(r.tokens)) if len(r.tokens) else 0.0,
                     "darkforest_tokens_per_sample": (float(np.mean(r.darkforest_tokens))
                                                      if r.darkforest_tokens is not None
                                                      else float("nan"))})
    table = pd.DataFrame(rows)
    full = ev.evaluate(tuple(agents))
    table = _against_full(table, subsets, ev, full)
    loo = _leave_one_out(ev, agents, full)

    def value_of(metric: str) -> Callable[[frozenset], float]:
        def v(s: frozenset) -> float:
            return _acc(getattr(ev.evaluate(tuple(s)), metric)) if s else 0.0
        return v

    shap = {}
    for m in ("vote", "belief_only"):
        shap[m] = (shapley_exact(agents, value_of(m)) if exact else
                   shapley_sampled(agents, value_of(m), st.n_permutations, st.seed))
    shapley = pd.DataFrame({"agent": agents,
                            **{m: [shap[m][a] for a in agents] for m in shap}})
    best_rows, by_size = _by_size(table)
    note = (f"all {len(subsets)} subsets of {len(agents)} agents; Shapley values exact"
            if exact else
            f"{len(subsets)} of {2 ** len(agents) - 1} subsets (singletons, leave-one-outs, "
            f"the full pool and {st.n_sampled} drawn with seed {st.seed}); Shapley values "
            f"from {st.n_permutations} random orders (seed {st.seed})")
    lines = []
    if ev.coordinator_missing.count("coordinator"):
        lines.append("DarkForest with a coordinator, full pool: "
                     + ev.coordinator_missing.line("coordinator"))
    others = sorted(k for k in ev.coordinator_missing.calls if k != "coordinator")
    if others:
        lines.append(f"DarkForest with a coordinator: not cached for {len(others)} "
                     "subset(s) (their coordinator calls were never made; `--fresh` makes "
                     "them)")
    return SubsetSection(table, pd.DataFrame(loo), shapley, pd.DataFrame(best_rows),
                         pd.DataFrame(by_size), exact, note, lines,
                         subset_outcomes(ev, subsets), st.tie_rule)


def subset_outcomes(ev: SubsetEvaluator, subsets: Sequence[Subset]) -> pd.DataFrame:
    """Every subset's per-problem outcomes: one row per (subset, sample) with its vote's,
    belief-only decision's and DarkForest's outcome (credits in [0, 1] where a tie was
    scored 1/m; DarkForest NaN where its coordinator calls are not cached)."""
    ids = [s.id for s in ev.pool.test.samples]
    parts = []
    for s in subsets:
        r = ev.evaluate(s)
        parts.append(pd.DataFrame({
            "agents": "+".join(s), "sample_id": ids, "vote": r.vote,
            "belief_only": r.belief_only,
            "darkforest": (r.darkforest.astype(float) if r.darkforest is not None
                           else np.full(len(ids), np.nan))}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def _against_full(table: pd.DataFrame, subsets: Sequence[Subset], ev: SubsetEvaluator,
                  full: SubsetResult) -> pd.DataFrame:
    """``table`` with each metric's paired difference against the full pool over the test
    samples: ``<m>_vs_full`` (points as a share), the discordant pairs ``<m>_b`` (subset
    ahead) and ``<m>_c``, the exact McNemar p (NaN where an outcome is a tie's credit) and
    the paired t p."""
    ids = [s.id for s in ev.pool.test.samples]
    cols: dict[str, list] = {}
    for s in subsets:
        r = ev.evaluate(s)
        for m in METRICS:
            a, b = getattr(r, m), getattr(full, m)
            if a is None or b is None:
                vals = [math.nan] * 5
            else:
                d = paired_difference(np.asarray(a, float), np.asarray(b, float), ids)
                vals = [d.diff, d.b, d.c, d.p_mcnemar, d.p_clustered]
            for name, v in zip(("vs_full", "b", "c", "p_mcnemar", "p_t"), vals, strict=True):
                cols.setdefault(f"{m}_{name}", []).append(v)
    return table.assign(**cols)
