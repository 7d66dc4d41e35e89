"""Generation that stops early, simulated on the cache: the agents are asked one at a time
in config order, and after each answer the belief over the answers so far (calibrated on
that prefix of agents, the subsets section's refit) is checked by the guardrail; as soon as
it trusts z*, generation stops and z* is the answer. A sample never trusted gets every
agent's answer and then either the belief's z* ("belief only") or DarkForest's decision
with its coordinator (the pool's cached coordinator answer; lazy: asked only there).

Tokens are the cached calls' prompt and completion tokens of the agents asked (and the
coordinator, where asked).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from df_ray.analysis.decisions import darkforest_final
from df_ray.analysis.subsets import SubsetEvaluator
from df_ray.core.guardrail import is_trusted


@dataclass
class EarlyStopSection:
    table: pd.DataFrame
    stops: pd.DataFrame
    lines: list[str] = field(default_factory=list)


def _strategies(ev: SubsetEvaluator, agents: tuple[str, ...], full_tokens: np.ndarray,
                stop_at: np.ndarray, belief: tuple[np.ndarray, np.ndarray],
                coord: tuple[np.ndarray, np.ndarray], coord_missing: int
                ) -> tuple[list[dict], list[str]]:
    """The table's rows (every agent against early stop, belief only and with the
    coordinator) from each sample's outcome and tokens; a line when the coordinator's row
    cannot be computed."""
    full = ev.evaluate(agents)
    rows = [
        {"strategy": "every agent, belief only", "accuracy": float(np.mean(full.belief_only)),
         "tokens_per_sample": float(np.mean(full_tokens)),
         "agent_calls_per_sample": float(len(agents))},
        {"strategy": "early stop, belief only", "accuracy": float(np.mean(belief[0])),
         "tokens_per_sample": float(np.mean(belief[1])),
         "agent_calls_per_sample": float(np.mean(stop_at))},
    ]
    lines = []
    if full.darkforest is not None:
        rows.append({"strategy": "every agent, DarkForest (lazy coordinator)",
                     "accuracy": float(np.mean(full.darkforest)),
                     "tokens_per_sample": float(np.mean(full.darkforest_tokens)),
                     "agent_calls_per_sample": float(len(agents))})
    if coord_missing == 0 and ev.coordinator_id:
        rows.append({"strategy": "early stop, DarkForest (coordinator when never trusted)",
                     "accuracy": float(np.mean(coord[0])),
                     "tokens_per_sample": float(np.mean(coord[1])),
                     "agent_calls_per_sample": float(np.mean(stop_at))})
    elif ev.coordinator_id:
        lines.append(f"early stop with the coordinator: not computed: {coord_missing} "
                     "coordinator call(s) of samples never trusted are not cached")
    return rows, lines


def early_stop_section(ev: SubsetEvaluator) -> EarlyStopSection:
    pool = ev.pool
    agents = tuple(pool.agents)
    test = pool.test
    n = len(test.samples)
    prefixes = [agents[:m] for m in range(1, len(agents) + 1)]
    beliefs = {p: ev.beliefs(p) for p in prefixes}
    stop_at = np.full(n, len(agents))
    stopped = np.zeros(n, bool)
    belief_only = np.zeros(n, bool)
    with_coord = np.zeros(n, bool)
    tok_belief = np.zeros(n)
    tok_coord = np.zeros(n)
    coord_missing = 0
    full_tokens = np.array([sum(t[a] for a in agents) for t in test.tokens], float)
    for i, (sample, o) in enumerate(zip(test.samples, test.obs, strict=True)):
        for p in prefixes:
            b = beliefs[p][i]
            if is_trusted(b, ev.guard):
                _, final = darkforest_final([o[a] for a in p], b, None, ev.guard)
                ok = pool.grader.correct(sample, final)
                stop_at[i], stopped[i] = len(p), True
                belief_only[i] = with_coord[i] = ok
                tok_belief[i] = tok_coord[i] = sum(test.tokens[i][a] for a in p)
                break
        else:
            b = beliefs[agents][i]
            obs = [o[a] for a in agents]
            _, final = darkforest_final(obs, b, None, ev.guard)
            belief_only[i] = pool.grader.correct(sample, final)
            tok_belief[i] = tok_coord[i] = full_tokens[i]
            got = ev.coordinator_answer(agents, i, b) if ev.coordinator_id else None
            if got is None:
                coord_missing += 1
                continue
            _, final = darkforest_final(obs, b, got[0], ev.guard)
            with_coord[i] = pool.grader.correct(sample, final)
            tok_coord[i] += got[1]
    rows, lines = _strategies(ev, agents, full_tokens, stop_at, (belief_only, tok_belief),
                              (with_coord, tok_coord), coord_missing)
    table = pd.DataFrame(rows)
    base = table.iloc[0]["tokens_per_sample"]
    table["token_saving"] = [base / t if t else float("nan") for t in table["tokens_per_sample"]]
    stops = pd.DataFrame({"agents_asked": np.arange(1, len(agents) + 1),
                          "samples": [int(np.sum(stopped & (stop_at == m)))
                                      for m in range(1, len(agents) + 1)]})
    stops.loc[len(stops) - 1, "samples"] += int(np.sum(~stopped))
    return EarlyStopSection(table, stops, lines)
