"""The guardrail's thresholds from cached coordinator answers: every (k, tau_p, tau_m) of a
grid (the paper's Table 9 grid by default, with "never trust" and "always trust z*"), on the
test split and on the held-out split, and the setting Learn-then-Test chooses on held-out
data with its certified wrong-override bound (``df_ray.core.guardrail_fit``: the same
procedure, not a second one).

Test split: per setting, DarkForest's decision (``decide``) over the pool's belief and its
coordinator's cached answer, with the method's own metrics: accuracy, trusted rate,
override rate, correct- and wrong-override rates (an override where z* was wrong and the
coordinator right). A setting that leaves a sample to the coordinator whose call is not
cached is not computed; a trusted sample whose coordinator was not called (a lazy run)
cannot show an override.

Held-out split: the pool's belief on each calibration sample (its frozen calibration) and
the coordinator's answer there: DarkForest's coordinator request made with the calibration
pass's context (run seed 0, as every calibration call). Those calls exist only where a run
asked the coordinator on held-out data; without them the held-out columns and the choice
are left out, with one line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from df_ray.analysis.cached import Missing, lookup, parse_records
from df_ray.analysis.decisions import belief_of, darkforest_final
from df_ray.analysis.subsets import SubsetEvaluator
from df_ray.core.guardrail import is_trusted
from df_ray.core.guardrail_fit import GuardrailSetting, HeldOutRecord, default_grid, fit_guardrail
from df_ray.methods.base import SampleState
from df_ray.methods.common import independent_calls

#: The paper's Table 9 grid (jobs/configs/table9_thresholds.yaml).
TABLE9_K = (1, 2, 3)
TABLE9_TAU_P = (0.5, 0.66, 0.8)
TABLE9_TAU_M = (0.1, 0.3, 0.5)


def table9_grid() -> list[GuardrailSetting]:
    """"never", the 27 settings of Table 9 from strictest to loosest, then "always"."""
    return default_grid(TABLE9_K, TABLE9_TAU_P, TABLE9_TAU_M)


@dataclass
class ThresholdSection:
    table: pd.DataFrame
    chosen: dict[str, Any] | None
    lines: list[str] = field(default_factory=list)


def _test_rows(ev: SubsetEvaluator, settings: Sequence[GuardrailSetting]) -> list[dict]:
    pool = ev.pool
    full = tuple(pool.agents)
    beliefs = ev.beliefs(full)
    test = pool.test
    coords = [ev.coordinator_answer(full, i, b) for i, b in enumerate(beliefs)]
    rows = []
    for s in settings:
        cfg = s.config()
        n = len(test.samples)
        acc = trusted = over = wrong = right = 0
        lacking = 0
        for i, (sample, o, b) in enumerate(zip(test.samples, test.obs, beliefs, strict=True)):
            obs = [o[a] for a in full]
            got = coords[i]
            t = is_trusted(b, cfg)
            if got is None and not t:
                lacking += 1
                continue
            coord = got[0] if got is not None else None
            decision, final = darkforest_final(obs, b, coord, cfg)
            ok = pool.grader.correct(sample, final)
            acc += ok
            trusted += decision.trusted
            if decision.overridden:
                over += 1
                coord_ok = pool.grader.correct(sample, coord)
                wrong += (not ok) and coord_ok
                right += ok and not coord_ok
        row = {"setting": s.name, "k": s.k if s.mode == "thresholds" else None,
               "tau_p": s.tau_p if s.mode == "thresholds" else None,
               "tau_m": s.tau_m if s.mode == "thresholds" else None}
        if lacking:
            row.update(test_accuracy=float("nan"), test_trusted_rate=float("nan"),
                       test_override_rate=float("nan"), test_wrong_override_rate=float("nan"),
                       test_correct_override_rate=float("nan"), test_missing=lacking)
        else:
            row.update(test_accuracy=acc / n, test_trusted_rate=trusted / n,
                       test_override_rate=over / n, test_wrong_override_rate=wrong / n,
                       test_correct_override_rate=right / n, test_missing=0)
        rows.append(row)
    return rows


def held_out_records(ev: SubsetEvaluator, missing: Missing) -> list[HeldOutRecord] | None:
    """The fit's records on the calibration split: None when a coordinator call there is
    not cached (counted in ``missing``)."""
    pool = ev.pool
    full = tuple(pool.agents)
    cal = ev.calibration(full)
    ctx = pool.ctx(full, cal, calibration_pass=True)
    method = ev._method()
    out = []
    ok = True
    for sample, o, complete in zip(pool.held_out.samples, pool.held_out.obs,
                                   pool.held_out.complete, strict=True):
        if not complete:
            continue
        obs = [o[a] for a in full]
        belief = belief_of(obs, cal, ev.belief_cfg, full)
        st = SampleState(sample)
        # the coordinator's request needs the round-0 records; rebuilt from the cache
        recs0 = lookup(pool.cache, independent_calls(ctx, ctx.agents, st), 0, Missing(),
                       "calibration", sample)
        st.calls.extend(recs0 or [])
        recs = lookup(pool.cache, method.plan(1, st, ctx), 1, missing,
                      "coordinator (calibration split)", sample)
        if recs is None:
            ok = False
            continue
        coords = parse_records(recs, ctx, sample)
        coord = coords[0] if coords else None
        top = belief.top
        _, final_z = darkforest_final(obs, belief, None, ev.guard)  # no coordinator: z*
        out.append(HeldOutRecord(
            top_correct=bool(top is not None and pool.grader.correct(sample, final_z)),
            support=len(top.support) if top is not None else 0,
            posterior=min(1.0, top.posterior) if top is not None else 0.0,
            margin=min(1.0, max(0.0, belief.margin)),
            coordinator_correct=(pool.grader.correct(sample, coord)
                                 if coord is not None and coord.valid else None)))
    return out if ok else None


def threshold_section(ev: SubsetEvaluator, *, grid: Sequence[GuardrailSetting] | None = None,
                      max_wrong_override: float = 0.05, delta: float = 0.1
                      ) -> ThresholdSection:
    settings = list(grid) if grid is not None else table9_grid()
    lines: list[str] = []
    if ev.coordinator_id is None:
        return ThresholdSection(pd.DataFrame(), None,
                                ["thresholds: the pool has no coordinator: not computed"])
    if ev._method().args.disclosure == "adaptive":
        return ThresholdSection(pd.DataFrame(), None, [
            "thresholds: the pool's disclosure is adaptive (the coordinator's evidence "
            "depends on the thresholds): not computed"])
    table = pd.DataFrame(_test_rows(ev, settings))
    lacking = int(table["test_missing"].max()) if not table.empty else 0
    if lacking:
        lines.append(f"thresholds, test split: {int((table['test_missing'] > 0).sum())} "
                     f"setting(s) not computed: {ev.coordinator_missing.line('coordinator')}")
    missing = Missing()
    records = held_out_records(ev, missing)
    chosen = None
    if records is None or not records:
        what = "coordinator (calibration split)"
        lines.append("thresholds, held-out split: not computed (no setting chosen): "
                     + (missing.line(what) if missing.count(what) else
                        "no complete held-out sample")
                     + "; they exist where the coordinator was run on held-out data")
    else:
        fit = fit_guardrail(records, settings, max_wrong_override=max_wrong_override,
                            delta=delta)
        by_name = {r.setting.name: r for r in fit.results}
        for col, attr in (("held_out_accuracy", "accuracy"),
                          ("held_out_trusted_rate", "trusted_rate"),
                          ("held_out_wrong_override_rate", "wrong_override_rate"),
                          ("p_value", "p_value"), ("certified", "certified"),
                          ("bound", "bound")):
            table[col] = [getattr(by_name[n], attr) if n in by_name else None
                          for n in table["setting"]]
        chosen = {"setting": fit.chosen.setting.name, "bound": fit.bound, "n": fit.n,
                  "max_wrong_override": fit.max_wrong_override, "delta": fit.delta,
                  "testing": fit.testing,
                  "held_out_accuracy": fit.chosen.accuracy,
                  "test": table.loc[table["setting"] == fit.chosen.setting.name]
                  .iloc[0].to_dict()}
    return ThresholdSection(table, chosen, lines)
