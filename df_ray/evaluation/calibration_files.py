"""Calibration as the evaluation layer sees it: which configurations need one, where its
frozen file is found, and how a missing one is fitted from a method's held-out records.

The core (``df_ray.core.calibration``) counts and looks up; this module holds the file
policy: ``<calibration.dir>/<benchmark>-<hash of the agent ids>.json`` matched by content
(benchmark, agent set, agent identities, candidate keying and, for a fitted guardrail, the
fit's spec), an explicit ``calibration.path``, or a fit on the benchmark's calibration split
when ``calibration.auto_fit`` allows it. Text keying and no guardrail fit keep the names of
files fitted before either existed; otherwise the name says which
(``humaneval-behaviour-<hash>.json``, ``...-guardrail-<spec hash>.json``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from df_ray.core.calibration import (
    DEFAULT_KEYING,
    Calibration,
    CalibrationChecksumError,
    CalibrationMismatchError,
    CalibrationRecord,
    CalibrationTooSmallError,
    fit_calibration,
    load_calibration,
)

log = logging.getLogger(__name__)


def calibration_filename(benchmark: str, agents: Sequence[str], keying: str = DEFAULT_KEYING,
                         guardrail_tag: str | None = None) -> str:
    """``<benchmark>-<8 hex of sha256 over the sorted agent ids>.json``; order-insensitive.
    Another keying than text goes after the benchmark (``humaneval-behaviour-...``), a
    guardrail fit's spec tag at the end (``...-guardrail-<tag>.json``)."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", benchmark).strip("_") or "benchmark"
    if keying != DEFAULT_KEYING:
        slug += "-" + (re.sub(r"[^A-Za-z0-9._-]+", "_", keying).strip("_") or "keyed")
    digest = hashlib.sha256("\n".join(sorted(agents)).encode("utf-8")).hexdigest()[:8]
    tail = f"-guardrail-{guardrail_tag}" if guardrail_tag else ""
    return f"{slug}-{digest}{tail}.json"


def candidate_keying(cfg: Any) -> str:
    """How the configuration's benchmark keys answers into candidates (``behaviour`` for
    HumanEval's ``benchmark_args.candidates: behaviour``, else ``text``)."""
    task = cfg.build_task() if hasattr(cfg, "build_task") else None
    return "behaviour" if getattr(task, "behaviour_keys", False) else DEFAULT_KEYING


def _guardrail_spec(cfg: Any) -> dict[str, Any] | None:
    from df_ray.evaluation.guardrail_calibration import guardrail_spec

    return guardrail_spec(cfg)


def _fits(cal: Calibration, spec: Mapping[str, Any] | None) -> bool:
    """Whether the calibration serves a configuration whose guardrail fit is ``spec``
    (None: it fits none, and any file serves)."""
    return spec is None or (cal.guardrail_fit is not None
                            and cal.guardrail_fit.get("spec") == spec)



def find_calibration(directory: str | Path, benchmark: str, agents: Sequence[str],
                     identities: Mapping[str, Mapping[str, Any]] | None = None, *,
                     keying: str = DEFAULT_KEYING,
                     guardrail: Mapping[str, Any] | None = None) -> Path | None:
    """The calibration file in ``directory`` fitted for this benchmark and agent set, with
    this candidate ``keying`` and (when ``guardrail`` is a fit's spec) a guardrail fit for
    it, or None.

    Files are matched by content, not by name: the canonical name
    (:func:`calibration_filename`) is tried first, then the others newest ``fitted_at`` first
    (ties by file name). Unreadable or foreign JSON files are skipped.
    """
    directory = Path(directory)
    if not directory.is_dir():
        return None
    tag = None
    if guardrail is not None:
        from df_ray.evaluation.guardrail_calibration import spec_tag

        tag = spec_tag(guardrail)
    canonical = directory / calibration_filename(benchmark, agents, keying, tag)
    candidates: list[tuple[int, str, str, Path]] = []
    for path in directory.glob("*.json"):
        try:
            cal = load_calibration(path)
        except (OSError, ValueError) as e:
            # never used (a fit, with calibration.auto_fit, takes its place); said, not silent
            if isinstance(e, CalibrationChecksumError) or _looks_like_calibration(path):
                log.warning("calibration: skipping %s", e)
            continue
        if (cal.matches(agents=agents, benchmark=benchmark, identities=identities,
                        keying=keying) and _fits(cal, guardrail)):
            first = 0 if path.name == canonical.name else 1
            # newest first: invert the ISO timestamp's ordering via a negated sort later
            candidates.append((first, cal.fitted_at, path.name, path))
    if not candidates:
        return None
    candidates.sort(key=lambda c: c[2])              # ties: file name ascending
    candidates.sort(key=lambda c: c[1], reverse=True)  # newest fitted_at first
    candidates.sort(key=lambda c: c[0])              # canonical name first
    return candidates[0][3]


def _looks_like_calibration(path: Path) -> bool:
    return re.fullmatch(r".+-[0-9a-f]{8}(?:-guardrail-[0-9a-f]{8})?(?:-[0-9a-f]+)?\.json",
                        path.name) is not None


def needs_calibration(cfg: Any) -> bool:
    """Whether the configuration's method (with its args) uses a frozen calibration."""
    return cfg.build_method().needs_calibration


def _load(cfg: Any, path: str | Path) -> Calibration:
    cal = load_calibration(path, agents=cfg.agent_ids(), benchmark=cfg.benchmark,
                           identities=cfg.agent_identities(),
                           min_samples=cfg.calibration.min_samples,
                           keying=candidate_keying(cfg))
    if not _fits(cal, _guardrail_spec(cfg)):
        raise CalibrationMismatchError(
            f"calibration file {path} holds no guardrail fit for this configuration's "
            "method_args.guardrail (certificate, coordinator, disclosure); drop "
            "calibration.path and let the run fit one (calibration.auto_fit)")
    return cal


def _find(cfg: Any) -> Path | None:
    return find_calibration(cfg.calibration.dir, cfg.benchmark, cfg.agent_ids(),
                            cfg.agent_identities(), keying=candidate_keying(cfg),
                            guardrail=_guardrail_spec(cfg))


def check_calibration(cfg: Any, held_out: Callable[[Any], Any] | None = None
                      ) -> Calibration | None:
    """Fail before any engine starts when the configuration's calibration cannot be had: an
    explicit or matching file that does not belong to it or was fitted on fewer than
    ``calibration.min_samples`` samples; no matching file with auto_fit off; or, when a fit
    is due, a calibration split smaller than ``calibration.min_samples`` (or unavailable).
    ``held_out(cfg)``: how to load the calibration split (default
    ``df_ray.evaluation.context.load_calibration_samples``; a caller checking many
    configurations passes a memoised one). Returns the calibration file it loaded (the run
    uses it without looking again), None when there is none yet (a fit is due) or none is
    needed."""
    from df_ray.config import ConfigError
    from df_ray.evaluation.context import check_held_out, load_calibration_samples
    from df_ray.evaluation.guardrail_calibration import check_fit_possible

    if not needs_calibration(cfg):
        return None
    fitted = _guardrail_spec(cfg) is not None
    if fitted:
        check_fit_possible(cfg)
    if cfg.calibration.path:
        try:
            return _load(cfg, cfg.calibration.path)
        except (CalibrationMismatchError, CalibrationTooSmallError):
            raise
        except (OSError, ValueError) as e:
            raise ConfigError(f"{cfg.name}: calibration.path: {e}") from None
    found = _find(cfg)
    if found is not None:
        return _load(cfg, found)
    if not cfg.calibration.auto_fit:
        keyed = "" if candidate_keying(cfg) == DEFAULT_KEYING else \
            f", candidates keyed by {candidate_keying(cfg)}"
        raise ConfigError(
            f"{cfg.name}: no calibration file for {cfg.benchmark} with agents "
            f"{cfg.agent_ids()} as configured (backbone models, sampling, prompts{keyed}"
            f"{', a guardrail fit' if fitted else ''}) in "
            f"{cfg.calibration.dir!r}, and calibration.auto_fit is off; "
            "set calibration.auto_fit: true or calibration.path")
    split = (held_out or load_calibration_samples)(cfg)
    check_held_out(cfg, split)
    if fitted:
        check_fit_possible(cfg, len(split.samples))
    return None


def resolve_calibration(cfg: Any, fit: Callable[[Any], Calibration]) -> Calibration | None:
    """The configuration's calibration: None when its method needs none, else the explicit
    file, else a matching file in ``calibration.dir``, else ``fit(cfg)`` when auto_fit.
    A file fitted on fewer than ``calibration.min_samples`` samples is refused."""
    from df_ray.config import ConfigError

    if not needs_calibration(cfg):
        return None
    agents = cfg.agent_ids()
    if cfg.calibration.path:
        return _load(cfg, cfg.calibration.path)
    found = _find(cfg)
    if found is not None:
        try:
            return _load(cfg, found)
        except CalibrationMismatchError:
            pass
    if not cfg.calibration.auto_fit:
        raise ConfigError(f"no calibration for {cfg.benchmark} / {agents}")
    return fit(cfg)


def fit_and_save(cfg: Any, records: Iterable[CalibrationRecord],
                 say: Callable[[str], None] = lambda m: None, *,
                 held_out: Any = None, tokens: int = 0, calls: int = 0,
                 run_held_out: Any = None) -> Calibration:
    """Fit a calibration for the configuration's agents from held-out records and freeze it
    under ``calibration.dir`` (a name that holds other agents' file gets an identity tag).
    Fewer than ``calibration.min_samples`` records are refused (CalibrationTooSmallError);
    ``held_out`` (``df_ray.evaluation.context.HeldOut``) names their source in the file,
    ``tokens`` and ``calls`` what the fit cost. With ``guardrail.fit`` the guardrail is
    fitted too before the file is frozen: ``run_held_out(cfg, calibration, samples)`` runs
    the second pass over ``held_out.samples`` and yields its result rows
    (``df_ray.evaluation.guardrail_calibration``); its coordinator calls count in the
    file's calls and tokens."""
    identities = cfg.agent_identities()
    records = list(records)
    # the independence discount's strength the file records: the method's, where it has one
    gamma = {"gamma": cfg.method_args["gamma"]} if "gamma" in cfg.method_args else {}
    cal = fit_calibration(records, agents=cfg.agent_ids(), benchmark=cfg.benchmark,
                          identities=identities,
                          min_samples=cfg.calibration.min_samples,
                          data_source=getattr(held_out, "origin", "") or "",
                          data_fingerprint=getattr(held_out, "fingerprint", "") or "",
                          fit_calls=calls, fit_tokens=tokens, keying=candidate_keying(cfg),
                          **gamma)
    spec = _guardrail_spec(cfg)
    tag = None
    if spec is not None:
        from df_ray.evaluation.guardrail_calibration import fit_on_held_out, spec_tag

        if run_held_out is None or held_out is None:
            raise ValueError(f"{cfg.name}: a guardrail fit needs the held-out samples and a "
                             "way to run the coordinator on them")
        fit, g_tokens, g_calls = fit_on_held_out(cfg, cal, held_out.samples, run_held_out,
                                                 records, say)
        cal = dataclasses.replace(cal, guardrail_fit=fit, fit_tokens=cal.fit_tokens + g_tokens,
                                  fit_calls=cal.fit_calls + g_calls)
        tag = spec_tag(spec)
    return _save(cfg, cal, tag, say)


def extend_with_guardrail_fit(cfg: Any, held_out: Any, run_held_out: Any,
                              held_out_records: Callable[[], Sequence[CalibrationRecord]],
                              say: Callable[[str], None] = lambda m: None
                              ) -> Calibration | None:
    """With ``guardrail.fit``: the frozen file the configuration would use with fixed
    thresholds, when it was fitted on exactly these held-out samples (its
    ``data_fingerprint``), extended by the guardrail fit and saved as the configuration's own
    file; None when there is no such file (the caller then fits from scratch). The counts
    stay the frozen ones, so the belief is the one the fixed-threshold configurations use
    (only the guardrail differs between their rows), and no agent call or grading is
    repeated: the second pass runs alone (``fit_and_save``'s ``run_held_out``).
    ``held_out_records()``: the held-out samples' calibration records (from the cached
    agent calls), whose fitting part the second pass's belief is counted on."""
    spec = _guardrail_spec(cfg)
    if spec is None:
        return None
    from df_ray.evaluation.guardrail_calibration import fit_on_held_out, spec_tag

    found = find_calibration(cfg.calibration.dir, cfg.benchmark, cfg.agent_ids(),
                             cfg.agent_identities(), keying=candidate_keying(cfg))
    if found is None:
        return None
    try:
        base = load_calibration(found, agents=cfg.agent_ids(), benchmark=cfg.benchmark,
                                identities=cfg.agent_identities(),
                                min_samples=cfg.calibration.min_samples,
                                keying=candidate_keying(cfg))
    except (OSError, ValueError):
        return None
    if not base.data_fingerprint or base.data_fingerprint != held_out.fingerprint:
        return None
    say(f"guardrail fit: on the counts of {found} (fitted on these {base.n_samples} "
        "held-out samples)")
    fit, g_tokens, g_calls = fit_on_held_out(cfg, base, held_out.samples, run_held_out,
                                             held_out_records(), say)
    from datetime import UTC, datetime

    cal = dataclasses.replace(base, guardrail_fit=fit, fit_tokens=base.fit_tokens + g_tokens,
                              fit_calls=base.fit_calls + g_calls,
                              fitted_at=datetime.now(UTC).isoformat(timespec="seconds"))
    return _save(cfg, cal, spec_tag(spec), say)


def _save(cfg: Any, cal: Calibration, tag: str | None, say: Callable[[str], None]
          ) -> Calibration:
    identities = cfg.agent_identities()
    out = Path(cfg.calibration.dir) / calibration_filename(cfg.benchmark, cfg.agent_ids(),
                                                           cal.keying, tag)
    if out.exists():
        # That name holds the calibration of other agents with these ids (another model,
        # other sampling): keep it, and name this one by its identities too.
        tag = hashlib.sha256(json.dumps(identities, sort_keys=True).encode()).hexdigest()[:8]
        out = out.with_name(f"{out.stem}-{tag}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    cal.save(out)
    say(f"calibration saved to {out}")
    return cal
