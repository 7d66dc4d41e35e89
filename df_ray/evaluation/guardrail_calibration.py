"""The fitted guardrail's half of a calibration pass (``guardrail: {fit: true}``).

A configuration whose DarkForest asks for ``guardrail.fit`` fits its calibration in two
passes over the held-out samples: the agents' independent answers give alpha, R_pi and
kappa (as for every calibration, on all of them: the counts the run's belief uses); then
the held-out samples are divided (``df_ray.core.guardrail_fit.split_held_out``, half and
half by a hash of their ids): alpha, R_pi and kappa are counted again on the fitting half
alone, and DarkForest runs on the certifying half with those counts, its coordinator called
on every sample (the guardrail off, not lazy); each certifying sample's belief and
coordinator answer become a :class:`HeldOutRecord` for
``df_ray.core.guardrail_fit.fit_guardrail`` (Learn-then-Test). So the test's scores do not
depend on the samples it certifies on, as LTT requires. The agents' calls of the second
pass are the first pass's, answered from the cache; the coordinator's are new and counted
in the file's calibration calls and tokens. The division is recorded with the fit.

The fit is frozen with the counts, in the same file, under ``guardrail_fit``: the chosen
setting, every setting's held-out accuracy, trusted and wrong-override rates and its
certified bound, and ``spec``: what the fit depends on (the certificate asked for, the
coordinator's identity, the disclosure and belief settings). A configuration uses a file's
fit only when its own spec is the file's.

This module holds that policy for the evaluation layer; the fit itself is plain Python in
``df_ray.core.guardrail_fit``.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from df_ray.core.guardrail_fit import HeldOutRecord, default_grid, fit_guardrail, split_held_out

__all__ = ["RunHeldOut", "check_fit_possible", "fit_metrics", "fit_on_held_out", "fit_params",
           "fit_requested", "guardrail_spec", "held_out_config", "held_out_record",
           "least_held_out", "run_in_process", "spec_tag"]

#: The share of the held-out samples whose records fit the belief the test is run with.
FIT_SHARE = 0.5

#: Runs a configuration over samples with a calibration and yields its result rows (dicts:
#: the generic columns and the method's, or the method's as one JSON ``method_columns``).
RunHeldOut = Callable[[Any, Any, Sequence[Any]], Iterable[Mapping[str, Any]]]


def _guardrail_args(cfg: Any) -> Any:
    return getattr(cfg.build_method().args, "guardrail", None)


def fit_requested(cfg: Any) -> bool:
    """Whether the configuration's method asks for a fitted guardrail."""
    return bool(getattr(_guardrail_args(cfg), "fit", False))


def coordinator_identity(cfg: Any) -> dict[str, Any] | None:
    """What the coordinator is, as ``RunConfig.agent_identities`` describes an agent."""
    c = cfg.coordinator
    if c is None:
        return None
    spec = cfg.backbones[c.backbone]
    return {"id": c.id, "engine": spec.identity_kind, "model": spec.model,
            "revision": spec.revision, "prompt_format": spec.prompt_format,
            "temperature": c.temperature, "top_p": c.top_p, "max_tokens": c.max_tokens,
            "system_prompt": c.system_prompt}


def guardrail_spec(cfg: Any) -> dict[str, Any] | None:
    """What a fit for this configuration depends on (None: it asks for none): the
    certificate (max_wrong_override, delta, testing, the grid), the coordinator, and what
    decides its evidence and the belief (disclosure, the configured thresholds where the
    adaptive disclosure reads them, the ablation, gamma)."""
    if not fit_requested(cfg):
        return None
    args = cfg.build_method().args
    g = args.guardrail
    spec: dict[str, Any] = {
        "max_wrong_override": float(g.max_wrong_override), "delta": float(g.delta),
        "testing": g.testing, "grid": "default", "disclosure": args.disclosure,
        "ablation": args.ablation, "gamma": float(args.gamma),
        "coordinator": coordinator_identity(cfg),
        "split": {"fit_share": FIT_SHARE, "order": "sha256 of sample id"}}
    if args.disclosure == "adaptive":
        spec["certain_at"] = {"k": g.k, "tau_p": float(g.tau_p), "tau_m": float(g.tau_m)}
    return json.loads(json.dumps(spec))  # as a file holds it


def spec_tag(spec: Mapping[str, Any]) -> str:
    """8 hex digits of the spec's hash (a fitted file's name carries it)."""
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:8]


def least_held_out(max_wrong_override: float, delta: float, testing: str) -> int | None:
    """The fewest held-out samples on which the default grid's first tested setting can be
    certified at all (no wrong override among them: (1 - alpha)^n <= level); None when no
    number can (alpha 0). Fewer, and the fit can only choose "never trust"."""
    if max_wrong_override <= 0.0:
        return None
    if max_wrong_override >= 1.0:
        return 1
    m = sum(1 for s in default_grid() if s.mode != "never")
    level = delta / m if testing == "bonferroni" else delta
    return max(1, math.ceil(math.log(level) / math.log1p(-max_wrong_override) - 1e-9))


def certifying_share(n_held_out: int) -> int:
    """How many of ``n_held_out`` samples the certifying part holds."""
    return n_held_out - min(max(1, round(n_held_out * FIT_SHARE)), n_held_out - 1)


def check_fit_possible(cfg: Any, n_held_out: int | None = None) -> None:
    """Refuse, with one line, a fit that its calibration split cannot certify anything on
    (``n_held_out`` samples; None: not known yet)."""
    from df_ray.config import ConfigError

    g = _guardrail_args(cfg)
    need = least_held_out(g.max_wrong_override, g.delta, g.testing)
    if need is None:
        raise ConfigError(f"{cfg.name}: method_args.guardrail.max_wrong_override 0 can never "
                          "be certified on finitely many held-out samples; give a rate above 0")
    if n_held_out is not None and (n_held_out < 2 or certifying_share(n_held_out) < need):
        raise ConfigError(
            f"{cfg.name}: method_args.guardrail.fit needs at least {need} certifying samples to "
            f"certify a wrong-override rate of {g.max_wrong_override:g} at delta {g.delta:g} "
            f"({g.testing}), and the calibration split has {n_held_out} (half of them fit the "
            "belief, half certify); raise calibration.limit, max_wrong_override or delta")


def held_out_config(cfg: Any) -> Any:
    """The configuration the second pass runs: the same DarkForest with its coordinator
    called on every sample (guardrail off, not lazy, not belief-only) at the calibration
    run seed (a frozen file belongs to no run seed)."""
    from df_ray.evaluation.context import CALIBRATION_RUN_SEED

    args = dict(cfg.method_args)
    args["guardrail"] = {**args["guardrail"], "enabled": False, "fit": False}
    args.update(lazy=False, belief_only=False)
    return cfg.model_copy(update={"method_args": args, "seed": CALIBRATION_RUN_SEED,
                                  "name": f"{cfg.name} (guardrail fit)"})


def held_out_record(row: Mapping[str, Any]) -> HeldOutRecord | None:
    """A second-pass result row as the fit reads it (None: an error row, left out)."""
    mc = row.get("method_columns")
    if isinstance(mc, str):
        row = {**row, **json.loads(mc)}
    if row.get("failure") == "sample_error" or row.get("top_support") is None:
        return None
    support = int(row["top_support"])
    called_valid = row.get("coordinator_answer") is not None
    return HeldOutRecord(
        top_correct=bool(row.get("selected_correct")) if support else False,
        support=support,
        posterior=float(row.get("top_posterior") or 0.0) if support else 0.0,
        margin=float(row.get("top_margin") or 0.0) if support else 0.0,
        coordinator_correct=bool(row.get("coordinator_correct")) if called_valid else None)


def fitting_calibration(calibration: Any, records: Sequence[Any]) -> Any:
    """alpha, R_pi and kappa counted on ``records`` alone, as ``calibration`` was fitted
    (its agents, benchmark, gamma, keying and identities)."""
    from df_ray.core.calibration import fit_calibration

    return fit_calibration(records, agents=calibration.agents,
                           benchmark=calibration.benchmark, gamma=calibration.gamma,
                           identities=calibration.identities, keying=calibration.keying,
                           fitted_at=calibration.fitted_at,
                           data_source=f"{calibration.data_source}, the fitting part")


def fit_on_held_out(cfg: Any, calibration: Any, samples: Sequence[Any], run: RunHeldOut,
                    records: Sequence[Any], say: Callable[[str], None] = lambda m: None
                    ) -> tuple[dict[str, Any], int, int]:
    """The guardrail fit of ``cfg`` on the held-out ``samples``: ``records`` (their
    calibration records) are divided by :func:`split_held_out`; the fitting part's counts
    give the belief that ``run`` (:func:`held_out_config`) runs the certifying part with,
    and the test runs on the certifying part. Returns the file's ``guardrail_fit`` section
    (with the division), and the coordinator's tokens and calls it took. ``calibration``
    (all held-out samples' counts) is the run's and is only checked against the records."""
    g = _guardrail_args(cfg)
    by_id = {str(r.sample_id): r for r in records}
    missing = [str(s.id) for s in samples if str(s.id) not in by_id]
    if missing:
        raise ValueError(f"{cfg.name}: guardrail fit: no calibration record for held-out "
                         f"sample {missing[0]!r} ({len(missing)} missing)")
    fit_ids, certify_ids = split_held_out([str(s.id) for s in samples], FIT_SHARE)
    fitting = fitting_calibration(calibration, [by_id[i] for i in fit_ids])
    certify = set(certify_ids)
    part = [s for s in samples if str(s.id) in certify]
    held: list[HeldOutRecord] = []
    tokens = calls = 0
    say(f"guardrail fit: belief counted on {len(fit_ids)} held-out samples, the coordinator "
        f"on the other {len(part)}")
    for row in run(held_out_config(cfg), fitting, part):
        tokens += int(row.get("coordinator_tokens") or 0)
        rec = held_out_record(row)
        if rec is not None:
            held.append(rec)
            mc = row.get("method_columns")
            cols = json.loads(mc) if isinstance(mc, str) else row
            calls += int(bool(cols.get("coordinator_called")))
    fit = fit_guardrail(held, max_wrong_override=g.max_wrong_override, delta=g.delta,
                        testing=g.testing)
    out = {**fit.to_dict(), "spec": guardrail_spec(cfg), "calls": calls, "tokens": tokens,
           "split": {"fit_share": FIT_SHARE, "order": "sha256 of sample id",
                     "fit": fit_ids, "certify": certify_ids}}
    c = fit.chosen
    say(f"guardrail fit: {c.setting.name} chosen on {fit.n} certifying samples (accuracy "
        f"{c.accuracy:.1%}, trusted {c.trusted_rate:.1%}); {fit.certified} of {fit.tested} "
        f"tested settings certified: wrong-override rate <= {fit.max_wrong_override:g} w.p. "
        f"{1 - fit.delta:g} for each")
    return out, tokens, calls


def fit_metrics(cfg: Any, calibration: Any) -> dict[str, float]:
    """What a configuration's fitted guardrail chose, for MLflow: the chosen thresholds
    (``guardrail_k``, ``guardrail_tau_p``, ``guardrail_tau_m``; "always trust" is
    k 1, tau 0; "never trust" NaN), the certified bound on the wrong-override rate
    (``guardrail_bound``) and the held-out accuracy of the choice. NaN for a configuration
    without a fit (every configuration carries the same metric names)."""
    from df_ray.core.guardrail_fit import fit_from_dict

    names = ("guardrail_k", "guardrail_tau_p", "guardrail_tau_m", "guardrail_bound",
             "guardrail_heldout_accuracy")
    fit = getattr(calibration, "guardrail_fit", None)
    if not fit_requested(cfg) or not fit:
        return dict.fromkeys(names, float("nan"))
    setting, bound = fit_from_dict(fit)
    never = setting.mode == "never"
    nan = float("nan")
    return {"guardrail_k": nan if never else float(setting.k),
            "guardrail_tau_p": nan if never else float(setting.tau_p),
            "guardrail_tau_m": nan if never else float(setting.tau_m),
            "guardrail_bound": float(bound),
            "guardrail_heldout_accuracy": float(fit["chosen"]["accuracy"])}


def fit_params(cfg: Any, calibration: Any) -> dict[str, str]:
    """The fitted guardrail's MLflow params: the chosen setting by name, its mode, and the
    certificate asked for (empty without a fit)."""
    fit = getattr(calibration, "guardrail_fit", None)
    if not fit_requested(cfg) or not fit:
        return {}
    return {"guardrail.fit.chosen": str(fit["chosen"]["name"]),
            "guardrail.fit.mode": str(fit["chosen"]["setting"]["mode"]),
            "guardrail.fit.n": str(fit["n"]),
            "guardrail.fit.testing": str(fit["testing"])}


def run_in_process(engine: Any, cache: Any = None,
                   count_tokens: Callable[[str, str], int] | None = None) -> RunHeldOut:
    """The second pass through the evaluation driver in this process (``df_ray.evaluate``
    and the tests): every round of the configuration's method, graded."""
    def run(cfg: Any, calibration: Any, samples: Sequence[Any]) -> list[dict[str, Any]]:
        from df_ray.evaluation.driver import Driver, Member

        driver = Driver([Member.from_config(cfg, calibration, count_tokens)], engine, cache)
        return [r.to_dict() for _, r in driver.finish(driver.run(list(samples)))]

    return run
