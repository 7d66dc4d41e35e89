"""How DarkForest reached one sample's answer, in words: the belief's candidates (who
supports each, its posterior, whether it was right), what the guardrail decided, what the
coordinator chose and whether the guardrail overruled it. The table of answers that a small
run prints (the demo) shows these lines under each sample."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def decision(row: Mapping[str, Any], detail: Mapping[str, Any]) -> dict[str, Any] | None:
    """A sample's decision from its result columns and detail (None: no belief recorded)."""
    belief = (detail.get("extra") or {}).get("belief")
    if not belief:
        return None
    right = detail.get("agent_correct", {})
    candidates = []
    for c in belief.get("clusters", []):
        support = list(c.get("support") or [])
        candidates.append({"support": support, "posterior": float(c.get("posterior", 0.0)),
                           "right": any(right.get(a) for a in support),
                           "answer": c.get("answer")})
    by_answer = {c["answer"]: c for c in candidates}
    coord = row.get("coordinator_answer")
    called = bool(row.get("coordinator_called"))
    if not called:
        chose = None
    elif coord is None:
        chose = "no valid answer"
    elif coord in by_answer:
        chose = "the candidate of " + ", ".join(by_answer[coord]["support"])
    else:
        chose = "an answer of its own"
    return {"candidates": candidates, "margin": belief.get("margin"),
            "top": belief.get("top"), "trusted": bool(row.get("trusted")),
            "source": row.get("decision_source"), "coordinator_called": called,
            "coordinator_chose": chose, "coordinator_correct": row.get("coordinator_correct"),
            "overruled": bool(row.get("overridden"))}


def decision_lines(d: Mapping[str, Any]) -> list[str]:
    """The belief's candidates and what the guardrail and the coordinator decided."""
    cands = "; ".join(
        f"{'+'.join(c['support'])} P={c['posterior']:.2f} ({'right' if c['right'] else 'wrong'})"
        for c in sorted(d["candidates"], key=lambda c: -c["posterior"]))
    margin = d.get("margin")
    lines = [f"belief: {cands or 'no valid candidate'}"
             + (f"; margin {margin:.2f}" if isinstance(margin, int | float) else "")]
    if d["trusted"]:
        guard = "guardrail: top candidate trusted, it is the answer"
    else:
        guard = "guardrail: not trusted, the coordinator decides"
    if d["coordinator_called"]:
        verdict = {True: "right", False: "wrong"}.get(d["coordinator_correct"], "-")
        coord = f"coordinator chose {d['coordinator_chose']} ({verdict})"
        if d["overruled"]:
            coord += ", OVERRULED by the guardrail"
        elif d["trusted"]:
            coord += ", agreeing with the guardrail"
    else:
        coord = "coordinator not called"
    return [*lines, guard, coord]


def explain(row: Mapping[str, Any], detail: Mapping[str, Any]) -> list[str]:
    d = decision(row, detail)
    return decision_lines(d) if d is not None else []
