"""Run metrics, accumulated row by row (``ResultRow`` columns) so the driver's memory does not
grow with the run.

Definitions (per sample, averaged over samples unless noted):
- accuracy: the benchmark's headline metric; ``accuracy_se`` = sqrt(p(1-p)/n);
  ``accuracy_ci_lo`` / ``accuracy_ci_hi`` its exact (Clopper-Pearson) 95% interval and
  ``accuracy_wilson_lo`` / ``accuracy_wilson_hi`` the Wilson one; for a benchmark that
  declares clusters (the rows' ``cluster``: LegalBench tasks, FinQA reports)
  ``accuracy_se_clustered`` clustered by them and ``clusters`` their number (NaN for one
  that declares none; df_ray.statistics).
- belief_ece, belief_brier: for rows with a posterior of their selection (DarkForest's
  ``top_posterior``), the expected calibration error (10 equal-width bins) and Brier score
  of P(z*|O) against whether z* was right (NaN for a method without one).
- tokens_*: prompt + completion tokens of every call an engine answered (a failed or refused
  call counts 0), split by role; ``t_cross`` the evidence
  tokens DarkForest shows its coordinator (coordinator tokenizer).
- llm_calls_per_sample: calls issued per sample (cached or not); llm_calls: the calls
  issued (total, counted); fresh_calls: calls an engine served in this run (total);
  failed_calls: calls that failed (total, counted); refused_calls:
  of those, calls the engine refused for their prompt's length (total; they spend 0 tokens).
- truncation_rate: share of the calls an engine answered that were cut off at max_tokens
  (finish_reason ``length``; a call without a recorded reason, as the generation cache kept
  calls made before it recorded them, when it used all of its max_tokens): over all calls,
  and per agent id (``truncation_rate.<agent>``, the coordinator's too); truncated_calls:
  their number (total). no_finish_reason_calls: answered calls without a recorded reason
  (total); stop_unknown_calls: of them, those short of max_tokens, whose stop reason is
  unknown (total; df_ray.evaluation.stop_reasons).
- repaired_surrogates: lone UTF-16 surrogates the engine boundary replaced by U+FFFD in the
  texts engines returned in this run (total; a call served from the cache was repaired when
  it was made).
- reachability: share of samples where at least one agent's independent answer was right.
- where accuracy is won and lost (df_ray.methods.result_columns.won_and_lost), shares of all
  samples: selected_accuracy (the selection among the independent answers was right:
  DarkForest's z*, a vote's winner, else their plurality vote), kept_rate (it was right and
  so is the final answer), lost_rate (right, and the final answer wrong), found_rate (wrong,
  and the final answer right): accuracy = kept_rate + found_rate, selected_accuracy =
  kept_rate + lost_rate. ``failure_rate.<tag>``: the share of samples with each failure tag
  (``FAILURES``). A guardrail's saves and losses are DarkForest's correct_override_rate and
  wrong_override_rate (its rows' guardrail_saved / guardrail_lost).

A method's own metrics (``Method.metrics``, e.g. DarkForest's trusted and override rates in
``df_ray.methods.darkforest``) are computed over its rows beside these.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from df_ray.evaluation.scoring import SUMMED
from df_ray.methods.result_columns import FAILURES, RowMean, RowMeans

#: Distinct call errors a configuration keeps for its failure message.
FIRST_ERRORS = 3


@dataclass
class MetricsAccumulator:
    """The run metrics of rows added one by one (the generic ones and a method's
    ``metrics``); also the calls counted and the first distinct call errors
    (``first_errors``, each with the agent that got it)."""

    metrics: Mapping[str, RowMean] = field(default_factory=dict)
    n: int = 0
    correct: int = 0
    score_sums: dict[str, float] = field(default_factory=dict)
    sums: dict[str, float] = field(default_factory=dict)
    reach: int = 0
    errors_samples: int = 0
    #: agent id -> [answered calls, truncated calls]
    truncation: dict[str, list[int]] = field(default_factory=dict)
    calls: int = 0
    failed_calls: int = 0
    first_errors: list[str] = field(default_factory=list)
    #: kept, lost, found, selected_correct and failure tags: their counts over rows
    won_lost: dict[str, int] = field(default_factory=dict)
    #: per row: its benchmark cluster and grade (when it has a cluster)
    clustered: list[tuple[str, bool]] = field(default_factory=list)
    #: per row with a posterior of its selection: (P(z*|O), z* right)
    beliefs: list[tuple[float, bool]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.own = RowMeans(self.metrics)

    def add(self, row: Mapping[str, Any]) -> None:
        self.n += 1
        self.correct += bool(row["correct"])
        scores = row["scores"]
        if isinstance(scores, str):
            scores = json.loads(scores)
        for k, v in (scores or {}).items():
            self.score_sums[k] = self.score_sums.get(k, 0.0) + float(v)
        for k in SUMMED:
            self.sums[k] = self.sums.get(k, 0.0) + float(row.get(k) or 0)  # older files lack some
        trunc = row.get("truncation")
        for agent, (answered, cut) in (json.loads(trunc) if trunc else {}).items():
            t = self.truncation.setdefault(agent, [0, 0])
            t[0] += int(answered)
            t[1] += int(cut)
        self.reach += bool(row["any_agent_correct"])
        for k in ("selected_correct", "kept", "lost", "found"):
            self.won_lost[k] = self.won_lost.get(k, 0) + bool(row.get(k))
        if row.get("cluster") is not None:
            self.clustered.append((str(row["cluster"]), bool(row["correct"])))
        if row.get("top_posterior") is not None and row.get("selected_correct") is not None:
            self.beliefs.append((float(row["top_posterior"]), bool(row["selected_correct"])))
        tag = row.get("failure")
        if tag:
            self.won_lost[f"failure.{tag}"] = self.won_lost.get(f"failure.{tag}", 0) + 1
        self.calls += int(row["n_calls"] or 0)
        if row["n_errors"]:
            self.errors_samples += 1
            self.failed_calls += int(row["n_errors"])
            if len(self.first_errors) < FIRST_ERRORS:
                self._keep_errors(row["detail"])
        self.own.add(row)

    def _keep_errors(self, detail: Any) -> None:
        if isinstance(detail, str):
            detail = json.loads(detail)
        for c in (detail or {}).get("calls", []):
            err = c.get("error")
            if not err:
                continue
            text = f"{c.get('agent')}: {err[:200]}"
            if text not in self.first_errors:
                self.first_errors.append(text)
            if len(self.first_errors) >= FIRST_ERRORS:
                return

    def result(self) -> dict[str, float]:
        n = max(self.n, 1)
        p = self.correct / n
        out = {
            "n_samples": float(self.n),
            "accuracy": p,
            "accuracy_se": math.sqrt(p * (1 - p) / n) if self.n else 0.0,
            "tokens_per_sample": self.sums.get("total_tokens", 0.0) / n,
            "agent_tokens_per_sample": self.sums.get("agent_tokens", 0.0) / n,
            "coordinator_tokens_per_sample": self.sums.get("coordinator_tokens", 0.0) / n,
            "other_tokens_per_sample": self.sums.get("other_tokens", 0.0) / n,
            "t_cross_per_sample": self.sums.get("t_cross", 0.0) / n,
            "llm_calls_per_sample": self.sums.get("n_calls", 0.0) / n,
            "llm_calls": float(self.calls),
            "fresh_calls": self.sums.get("n_fresh_calls", 0.0),
            "failed_calls": float(self.failed_calls),
            "refused_calls": self.sums.get("n_refused", 0.0),
            "samples_with_errors": float(self.errors_samples),
            "reachability": self.reach / n,
            "selected_accuracy": self.won_lost.get("selected_correct", 0) / n,
            "kept_rate": self.won_lost.get("kept", 0) / n,
            "lost_rate": self.won_lost.get("lost", 0) / n,
            "found_rate": self.won_lost.get("found", 0) / n,
            **{f"failure_rate.{t}": self.won_lost.get(f"failure.{t}", 0) / n for t in FAILURES},
        }
        out.update(self._intervals())
        own = self.own.result()
        clash = sorted(set(own) & set(out))
        if clash:
            raise ValueError(f"method metrics {clash} are generic metrics; name them otherwise")
        out.update(own)
        for k, v in self.score_sums.items():
            out[k] = v / n
        answered = sum(a for a, _ in self.truncation.values())
        out["truncated_calls"] = self.sums.get("n_truncated", 0.0)
        out["repaired_surrogates"] = self.sums.get("n_repaired", 0.0)
        out["no_finish_reason_calls"] = self.sums.get("n_no_finish_reason", 0.0)
        out["stop_unknown_calls"] = self.sums.get("n_stop_unknown", 0.0)
        out["truncation_rate"] = (self.sums.get("n_truncated", 0.0) / answered
                                  if answered else 0.0)
        for agent, (a, cut) in sorted(self.truncation.items()):
            out[f"truncation_rate.{agent}"] = cut / a if a else 0.0
        return out

    def _intervals(self) -> dict[str, float]:
        """The accuracy's intervals, its clustered standard error, the belief's calibration."""
        from df_ray.statistics import brier, clustered_mean, ece, proportion_interval

        # every key in every run (NaN where it has no value), so that a sweep's runs carry
        # the same metric names
        nan = math.nan
        out: dict[str, float] = dict.fromkeys(
            ("accuracy_ci_lo", "accuracy_ci_hi", "accuracy_wilson_lo", "accuracy_wilson_hi",
             "accuracy_se_clustered", "clusters", "belief_ece", "belief_brier"), nan)
        if self.n:
            out["accuracy_ci_lo"], out["accuracy_ci_hi"] = proportion_interval(
                self.correct, self.n, "beta")
            out["accuracy_wilson_lo"], out["accuracy_wilson_hi"] = proportion_interval(
                self.correct, self.n, "wilson")
        if self.clustered:
            labels, ok = zip(*self.clustered, strict=True)
            cm = clustered_mean(np.asarray(ok, dtype=float), labels)
            out["accuracy_se_clustered"] = cm.se
            out["clusters"] = float(cm.clusters)
        if self.beliefs:
            p, y = (np.asarray(v, dtype=float) for v in zip(*self.beliefs, strict=True))
            out["belief_ece"] = ece(p, y)
            out["belief_brier"] = brier(p, y)
        return out


def failure_reason(max_error_rate: float, metrics: Mapping[str, float],
                   errors: Sequence[str] = ()) -> str | None:
    """Why a configuration with these run metrics FAILED (its share of failed calls, sample
    errors counted, above ``max_error_rate``), or None when it did not: the one verdict of
    the Ray path (``df_ray.pipeline.outcome.judge``) and of ``df_ray.evaluate``."""
    calls, failed = int(metrics.get("llm_calls", 0.0)), int(metrics.get("failed_calls", 0.0))
    if calls == 0 or failed == 0:
        return None
    rate = failed / calls
    if rate <= max_error_rate:
        return None
    reason = (f"{failed} of {calls} LLM calls failed ({100 * rate:.0f}%, above max_error_rate "
              f"{100 * max_error_rate:g}%)")
    if errors:
        reason += "; first errors: " + " | ".join(errors)
    return reason
