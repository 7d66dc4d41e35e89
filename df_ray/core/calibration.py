"""Offline, closed-form calibration (docs/method.md §4, §7): alpha_i, R_pi and kappa_ij from held-out samples.

Counting, per held-out sample (a :class:`CalibrationRecord`), over its valid observations (at
most one per agent, chosen as in :func:`df_ray.core.belief.select_observations`):

- agent i: ``n_valid_i`` += 1 for a valid observation, ``n_correct_i`` += 1 when it is right;
  alpha_i = (n_correct_i + 1) / (n_valid_i + 2).
- pattern pi: one cluster per distinct valid answer; pi = the sorted tuple of its supporting
  agent ids; ``n_pi`` += 1 and ``n_correct_pi`` += 1 when its answer is right;
  R_pi = (n_correct_pi + 1) / (n_pi + 2).
- pair {i, j}: when both are valid and both wrong, ``n_both_wrong_ij`` += 1, and
  ``n_same_wrong_ij`` += 1 when they gave the same wrong answer;
  kappa_ij = (n_same_wrong_ij + 1) / (n_both_wrong_ij + 2). kappa is symmetric, so pairs are
  unordered and stored once, as ``"i|j"`` with i < j.
- delta_i(gamma) = 1 - gamma * max_{j != i} kappa_ij over the calibration's agents (1 for a
  single agent).

An answer key is right when ``record.correct[key]`` says so (code, where correctness comes from
running the program); keys missing from ``correct`` (or all keys, when ``correct`` is None) are
compared with ``record.gold``. Anything never counted gets the Laplace prior 1/2.

The frozen result is a versioned, human-readable JSON file (see ``calibration/README.md``).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from df_ray.core.belief import LAPLACE_PRIOR, cluster_observations
from df_ray.core.types import Observation

__all__ = [
    "SCHEMA_VERSION",
    "AgentStats",
    "Calibration",
    "CalibrationMismatchError",
    "CalibrationRecord",
    "CalibrationTooSmallError",
    "PairStats",
    "PatternStats",
    "fit_calibration",
    "load_calibration",
]

SCHEMA_VERSION = 1
_SEP = "|"
#: The candidate keying of a file that names none (every file fitted before keyings existed).
DEFAULT_KEYING = "text"


class CalibrationMismatchError(ValueError):
    """A calibration file that does not belong to this run (agents, benchmark or schema)."""


class CalibrationTooSmallError(ValueError):
    """A calibration fitted (or to be fitted) on fewer held-out samples than required: its
    alpha, R_pi and kappa would be little more than the Laplace prior."""


def _laplace(hits: int, n: int) -> float:
    return (hits + 1) / (n + 2)


@dataclass(frozen=True, slots=True)
class AgentStats:
    n_valid: int = 0
    n_correct: int = 0

    @property
    def alpha(self) -> float:
        return _laplace(self.n_correct, self.n_valid)


@dataclass(frozen=True, slots=True)
class PatternStats:
    n: int = 0
    n_correct: int = 0

    @property
    def reliability(self) -> float:
        return _laplace(self.n_correct, self.n)


@dataclass(frozen=True, slots=True)
class PairStats:
    n_both_wrong: int = 0
    n_same_wrong: int = 0

    @property
    def kappa(self) -> float:
        return _laplace(self.n_same_wrong, self.n_both_wrong)


@dataclass(frozen=True, slots=True)
class CalibrationRecord:
    """One held-out sample: the agents' observations and how to tell a right answer."""

    sample_id: str
    observations: tuple[Observation, ...]
    gold: str | None = None
    correct: Mapping[str, bool] | None = None

    def is_correct(self, key: str) -> bool:
        if self.correct is not None and key in self.correct:
            return bool(self.correct[key])
        return self.gold is not None and key == self.gold


def _pair(i: str, j: str) -> tuple[str, str]:
    return (i, j) if i <= j else (j, i)


def _check_agent_ids(agents: Sequence[str]) -> None:
    for a in agents:
        if not isinstance(a, str) or not a or _SEP in a:
            raise ValueError(f"agent ids must be non-empty strings without {_SEP!r}, got {a!r}")
    if len(set(agents)) != len(agents):
        raise ValueError(f"agent ids must be unique, got {list(agents)}")


@dataclass(frozen=True)
class Calibration:
    """Frozen calibration statistics for one benchmark and one set of agents.

    ``agent_stats`` maps every agent to its counts; ``pattern_stats`` maps patterns (sorted
    tuples of agent ids) to counts; ``pair_stats`` maps unordered pairs (sorted 2-tuples) to
    counts. Derived values (alpha, R, kappa, delta) are computed from the counts.
    """

    benchmark: str
    agents: tuple[str, ...]
    n_samples: int
    fitted_at: str
    gamma: float = 0.5
    agent_stats: Mapping[str, AgentStats] = field(default_factory=dict)
    pattern_stats: Mapping[tuple[str, ...], PatternStats] = field(default_factory=dict)
    pair_stats: Mapping[tuple[str, str], PairStats] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION
    #: What each agent was when fitted (backbone model, revision, sampling, prompt...), as the
    #: caller describes it; empty when unknown. A run whose agents differ is refused.
    identities: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: Where the held-out samples came from (the caller's description: data set, split, what
    #: was removed from it); empty when unknown.
    data_source: str = ""
    #: Fingerprint of the held-out samples (the caller's hash of their ids and contents).
    data_fingerprint: str = ""
    #: What the fit cost: LLM calls and their tokens (prompt + completion) over all held-out
    #: samples, as the caller counted them; 0 when unknown.
    fit_calls: int = 0
    fit_tokens: int = 0
    #: How answers were keyed into candidates when the held-out records were counted
    #: (``text``: canonical answer text, the paper's; ``behaviour``: HumanEval programs by
    #: their outputs). R_pi and kappa count clusters, so a file serves only runs keyed alike.
    keying: str = DEFAULT_KEYING
    #: The guardrail thresholds fitted on the same held-out samples with the coordinator run
    #: there too (``df_ray.core.guardrail_fit.FitResult.to_dict()`` plus what it was fitted
    #: for, under ``"spec"``); None when the file holds no such fit.
    guardrail_fit: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "agents", tuple(self.agents))
        _check_agent_ids(self.agents)
        if not isinstance(self.keying, str) or not self.keying:
            raise ValueError(f"calibration keying must be a non-empty string, got "
                             f"{self.keying!r}")
        if not (0.0 <= float(self.gamma) <= 1.0):
            raise ValueError(f"calibration gamma must be in [0, 1], got {self.gamma!r}")
        known = set(self.agents)
        for a in self.agent_stats:
            if a not in known:
                raise ValueError(f"agent_stats names {a!r}, not one of {list(self.agents)}")
        for p in self.pattern_stats:
            if not p or any(a not in known for a in p) or tuple(sorted(p)) != tuple(p):
                raise ValueError(f"bad pattern {p!r}: must be a sorted tuple of {list(self.agents)}")
        for p in self.pair_stats:
            if len(p) != 2 or p[0] >= p[1] or any(a not in known for a in p):
                raise ValueError(f"bad pair {p!r}: must be a sorted pair of distinct agents")
        problem = self.count_problem()
        if problem is not None:
            raise ValueError(problem)

    def count_problem(self) -> str | None:
        """Why these counts cannot come from any fit (a negative or fractional count, more
        right answers than valid ones, more valid answers than samples), or None."""
        def bad(where: str, v: Any) -> str | None:
            if isinstance(v, bool) or not isinstance(v, int):
                return f"field {where!r} is {v!r}: counts must be whole numbers"
            if v < 0:
                return f"field {where!r} is {v}: counts cannot be negative"
            return None

        checks: list[tuple[str, Any]] = [("n_samples", self.n_samples),
                                         ("fit_calls", self.fit_calls),
                                         ("fit_tokens", self.fit_tokens)]
        for a, st in self.agent_stats.items():
            checks += [(f"agent_stats.{a}.n_valid", st.n_valid),
                       (f"agent_stats.{a}.n_correct", st.n_correct)]
        for p, ps in self.pattern_stats.items():
            k = _SEP.join(p)
            checks += [(f"patterns.{k}.n", ps.n), (f"patterns.{k}.n_correct", ps.n_correct)]
        for p, qs in self.pair_stats.items():
            k = _SEP.join(p)
            checks += [(f"pairs.{k}.n_both_wrong", qs.n_both_wrong),
                       (f"pairs.{k}.n_same_wrong", qs.n_same_wrong)]
        for where, v in checks:
            msg = bad(where, v)
            if msg is not None:
                return msg
        ordered: list[tuple[str, int, str, int]] = []
        for a, st in self.agent_stats.items():
            ordered += [(f"agent_stats.{a}.n_correct", st.n_correct,
                         f"agent_stats.{a}.n_valid", st.n_valid),
                        (f"agent_stats.{a}.n_valid", st.n_valid, "n_samples", self.n_samples)]
        for p, ps in self.pattern_stats.items():
            k = _SEP.join(p)
            ordered += [(f"patterns.{k}.n_correct", ps.n_correct, f"patterns.{k}.n", ps.n),
                        (f"patterns.{k}.n", ps.n, "n_samples", self.n_samples)]
        for p, qs in self.pair_stats.items():
            k = _SEP.join(p)
            ordered += [(f"pairs.{k}.n_same_wrong", qs.n_same_wrong,
                         f"pairs.{k}.n_both_wrong", qs.n_both_wrong),
                        (f"pairs.{k}.n_both_wrong", qs.n_both_wrong, "n_samples",
                         self.n_samples)]
        for small, a, big, b in ordered:
            if a > b:
                return f"field {small!r} is {a}, more than {big!r} ({b}): no fit counts that"
        return None

    def __hash__(self) -> int:  # the mappings are dicts: hash their sorted items instead
        return hash((self.schema_version, self.benchmark, self.agents, self.n_samples,
                     self.fitted_at, self.gamma, self.keying,
                     tuple(sorted(self.agent_stats.items())),
                     tuple(sorted(self.pattern_stats.items())),
                     tuple(sorted(self.pair_stats.items()))))

    # -- lookups ---------------------------------------------------------------------------

    def alpha(self, agent: str) -> float:
        """alpha_i; 1/2 for an agent without calibration data."""
        stats = self.agent_stats.get(agent)
        return stats.alpha if stats is not None else LAPLACE_PRIOR

    def pattern_reliability(self, pattern: Sequence[str]) -> float:
        """R_pi; 1/2 for a pattern never seen in calibration. ``pattern`` may be unsorted."""
        stats = self.pattern_stats.get(tuple(sorted(pattern)))
        return stats.reliability if stats is not None else LAPLACE_PRIOR

    def kappa(self, i: str, j: str) -> float:
        """kappa_ij (symmetric); 1/2 for a pair never both wrong in calibration."""
        if i == j:
            raise ValueError(f"kappa needs two distinct agents, got {i!r} twice")
        stats = self.pair_stats.get(_pair(i, j))
        return stats.kappa if stats is not None else LAPLACE_PRIOR

    def delta(self, agent: str, gamma: float | None = None) -> float:
        """delta_i = 1 - gamma * max_{j != i} kappa_ij over this calibration's agents.

        ``gamma`` defaults to the one stored at fit time; 1.0 when there is no other agent.
        """
        g = self.gamma if gamma is None else float(gamma)
        if not (0.0 <= g <= 1.0):
            raise ValueError(f"gamma must be in [0, 1], got {gamma!r}")
        others = [j for j in self.agents if j != agent]
        if not others:
            return 1.0
        return 1.0 - g * max(self.kappa(agent, j) for j in others)

    # -- serialisation ---------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; derived values are included for readers and ignored on load."""
        agents = {
            a: {"n_valid": s.n_valid, "n_correct": s.n_correct, "alpha": s.alpha,
                "delta": self.delta(a)}
            for a, s in ((a, self.agent_stats.get(a, AgentStats())) for a in self.agents)
        }
        patterns = {
            _SEP.join(p): {"n": s.n, "n_correct": s.n_correct, "R": s.reliability}
            for p, s in self.pattern_stats.items()
        }
        pairs = {
            _SEP.join(p): {"n_both_wrong": s.n_both_wrong, "n_same_wrong": s.n_same_wrong,
                           "kappa": s.kappa}
            for p, s in self.pair_stats.items()
        }
        out = {
            "schema_version": self.schema_version,
            "benchmark": self.benchmark,
            "agents": list(self.agents),
            "n_samples": self.n_samples,
            "fitted_at": self.fitted_at,
            "gamma": self.gamma,
            "agent_stats": agents,
            "patterns": patterns,
            "pairs": pairs,
        }
        if self.identities:
            out["agent_identities"] = {a: dict(v) for a, v in self.identities.items()}
        if self.data_source:
            out["data_source"] = self.data_source
        if self.data_fingerprint:
            out["data_fingerprint"] = self.data_fingerprint
        if self.fit_calls or self.fit_tokens:
            out["fit_calls"] = self.fit_calls
            out["fit_tokens"] = self.fit_tokens
        # at their defaults they are left out: a text-keyed file reads (and hashes) as
        # before either existed
        if self.keying != DEFAULT_KEYING:
            out["keying"] = self.keying
        if self.guardrail_fit is not None:
            out["guardrail_fit"] = json.loads(json.dumps(self.guardrail_fit))
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, source: str = "<dict>") -> Calibration:
        for name, kind in (("agents", list), ("agent_stats", dict), ("patterns", dict),
                           ("pairs", dict), ("agent_identities", dict),
                           ("guardrail_fit", dict)):
            if name in d and not isinstance(d[name], kind):
                raise ValueError(
                    f"calibration {source} is malformed: field {name!r} must be a JSON "
                    f"{'list' if kind is list else 'object'}, not {type(d[name]).__name__}; "
                    "refit it (delete the file, or set calibration.auto_fit)")
        version = d.get("schema_version")
        if version != SCHEMA_VERSION:
            raise CalibrationMismatchError(
                f"calibration {source} has schema_version {version!r}; this df_ray reads "
                f"version {SCHEMA_VERSION}. Refit it (see calibration/README.md).")
        try:
            agents = tuple(d["agents"])
            gamma = d["gamma"]
            if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not (
                    math.isfinite(gamma)):
                raise ValueError(f"field 'gamma' is {gamma!r}: it must be a finite number "
                                 "in [0, 1]")
            return cls(
                schema_version=SCHEMA_VERSION,
                benchmark=str(d["benchmark"]),
                agents=agents,
                n_samples=_count(d, "n_samples"),
                fitted_at=str(d["fitted_at"]),
                gamma=float(gamma),
                agent_stats={
                    a: AgentStats(_count(s, "n_valid", f"agent_stats.{a}."),
                                  _count(s, "n_correct", f"agent_stats.{a}."))
                    for a, s in d.get("agent_stats", {}).items()
                },
                pattern_stats={
                    tuple(k.split(_SEP)): PatternStats(_count(s, "n", f"patterns.{k}."),
                                                       _count(s, "n_correct", f"patterns.{k}."))
                    for k, s in d.get("patterns", {}).items()
                },
                pair_stats={
                    tuple(k.split(_SEP)): PairStats(_count(s, "n_both_wrong", f"pairs.{k}."),
                                                    _count(s, "n_same_wrong", f"pairs.{k}."))
                    for k, s in d.get("pairs", {}).items()
                },
                identities={a: dict(v) for a, v in d.get("agent_identities", {}).items()},
                data_source=str(d.get("data_source") or ""),
                data_fingerprint=str(d.get("data_fingerprint") or ""),
                fit_calls=_count(d, "fit_calls", default=0),
                fit_tokens=_count(d, "fit_tokens", default=0),
                keying=str(d.get("keying") or DEFAULT_KEYING),
                guardrail_fit=_guardrail_fit(d.get("guardrail_fit")),
            )
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            what = f"field {exc.args[0]!r} is missing" if isinstance(exc, KeyError) else str(exc)
            raise ValueError(f"calibration {source} is malformed: {what}; refit it (delete the "
                             "file, or set calibration.auto_fit)") from exc

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"

    def save(self, path: str | Path) -> Path:
        """Write the calibration as sorted, indented JSON with its ``content_sha256``
        (verified by :func:`load_calibration`); creates parent directories. The file is
        written under a temporary name and renamed, so a reader never sees half of it."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        d = self.to_dict()
        d[CHECKSUM_FIELD] = content_checksum(d)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(d, indent=2, sort_keys=True, ensure_ascii=False) + "\n",
                       encoding="utf-8")
        os.replace(tmp, path)
        return path

    def matches(self, *, agents: Sequence[str] | None = None, benchmark: str | None = None,
                identities: Mapping[str, Mapping[str, Any]] | None = None,
                keying: str | None = None) -> bool:
        """Whether this calibration belongs to a run with these agents (as a set), benchmark,
        agent identities (compared only when both sides know them) and candidate keying."""
        if agents is not None and set(agents) != set(self.agents):
            return False
        if keying is not None and keying != self.keying:
            return False
        if identities is not None and self.identity_differences(identities):
            return False
        return benchmark is None or benchmark == self.benchmark

    def identity_differences(self, identities: Mapping[str, Mapping[str, Any]]) -> list[str]:
        """``"agent: field fitted -> now"`` for every agent whose identity changed."""
        out = []
        for a in self.agents:
            was, now = self.identities.get(a), identities.get(a)
            if not was or not now or dict(was) == dict(now):
                continue
            fields = sorted(set(was) | set(now))
            diff = ", ".join(f"{k} {was.get(k)!r} -> {now.get(k)!r}" for k in fields
                             if was.get(k) != now.get(k))
            out.append(f"{a}: {diff}")
        return out


# -- fitting -------------------------------------------------------------------------------


class _FitCounts:
    """What a fit counts over held-out records: per agent its valid and correct answers, per
    support pattern its clusters and right ones, per pair of agents the records where both
    were wrong and where they gave the same wrong answer."""

    def __init__(self, agents: tuple[str, ...]) -> None:
        self.agents, self.known = agents, set(agents)
        self.a_valid = dict.fromkeys(agents, 0)
        self.a_correct = dict.fromkeys(agents, 0)
        self.p_n: dict[tuple[str, ...], int] = {}
        self.p_correct: dict[tuple[str, ...], int] = {}
        self.pairs = [_pair(i, j) for k, i in enumerate(agents) for j in agents[k + 1:]]
        self.both_wrong = dict.fromkeys(self.pairs, 0)
        self.same_wrong = dict.fromkeys(self.pairs, 0)
        self.n_samples = 0

    def add(self, rec: CalibrationRecord) -> None:
        self.n_samples += 1
        if rec.gold is None and rec.correct is None:
            raise ValueError(f"calibration record {rec.sample_id!r} has neither gold nor correct")
        for obs in rec.observations:
            if obs.agent not in self.known:
                raise ValueError(f"calibration record {rec.sample_id!r} has an observation from "
                                 f"{obs.agent!r}, not one of the agents {list(self.agents)}")
        answer_of: dict[str, str] = {}
        for answer, members in cluster_observations(rec.observations).items():
            right = rec.is_correct(answer)
            pattern = tuple(sorted(o.agent for o in members))
            self.p_n[pattern] = self.p_n.get(pattern, 0) + 1
            self.p_correct[pattern] = self.p_correct.get(pattern, 0) + int(right)
            for o in members:
                answer_of[o.agent] = answer
                self.a_valid[o.agent] += 1
                self.a_correct[o.agent] += int(right)
        for i, j in self.pairs:
            zi, zj = answer_of.get(i), answer_of.get(j)
            if zi is None or zj is None or rec.is_correct(zi) or rec.is_correct(zj):
                continue
            self.both_wrong[(i, j)] += 1
            self.same_wrong[(i, j)] += int(zi == zj)


def fit_calibration(
    records: Iterable[CalibrationRecord],
    *,
    agents: Sequence[str],
    benchmark: str,
    gamma: float = 0.5,
    fitted_at: str | None = None,
    identities: Mapping[str, Mapping[str, Any]] | None = None,
    min_samples: int | None = None,
    data_source: str = "",
    data_fingerprint: str = "",
    fit_calls: int = 0,
    fit_tokens: int = 0,
    keying: str = DEFAULT_KEYING,
) -> Calibration:
    """Count alpha, R_pi and kappa over held-out records (see the module docstring).

    Raises ValueError for an observation from an agent outside ``agents`` or a record with
    neither ``gold`` nor ``correct``; :class:`CalibrationTooSmallError` for fewer than
    ``min_samples`` records (None: no lower bound). ``data_source`` and ``data_fingerprint``
    describe where the records came from, ``fit_calls`` and ``fit_tokens`` what they cost;
    all four are stored in the file. ``keying``: how the records' answers were keyed into
    candidates (the caller keyed them; stored, and matched at load).
    """
    agents = tuple(agents)
    _check_agent_ids(agents)
    counts = _FitCounts(agents)
    for rec in records:
        counts.add(rec)
    n_samples = counts.n_samples
    if min_samples is not None and n_samples < min_samples:
        raise CalibrationTooSmallError(
            f"calibration for {benchmark!r}: {n_samples} held-out sample(s) "
            f"{'from ' + data_source + ' ' if data_source else ''}is fewer than the "
            f"{min_samples} required; every alpha, R_pi and kappa would be close to the "
            "Laplace prior 1/2")
    return Calibration(
        benchmark=benchmark,
        agents=agents,
        n_samples=n_samples,
        fitted_at=fitted_at or datetime.now(UTC).isoformat(timespec="seconds"),
        gamma=float(gamma),
        agent_stats={a: AgentStats(counts.a_valid[a], counts.a_correct[a]) for a in agents},
        pattern_stats={p: PatternStats(counts.p_n[p], counts.p_correct[p])
                       for p in sorted(counts.p_n)},
        pair_stats={p: PairStats(counts.both_wrong[p], counts.same_wrong[p])
                    for p in counts.pairs},
        identities={a: dict(v) for a, v in (identities or {}).items() if a in agents},
        data_source=data_source,
        data_fingerprint=data_fingerprint,
        fit_calls=int(fit_calls),
        fit_tokens=int(fit_tokens),
        keying=keying,
    )


# -- files ---------------------------------------------------------------------------------

#: The field a saved calibration file carries its own checksum in (files without one, fitted
#: before it existed, are read unchecked).
CHECKSUM_FIELD = "content_sha256"


def _count(d: Mapping[str, Any], key: str, where: str = "", default: int | None = None) -> int:
    """``d[key]`` as a count: a whole, finite, non-negative JSON number (``5.0`` is 5); a
    ValueError naming the field (``where`` + ``key``) for anything else."""
    if key not in d or d[key] is None:
        if default is not None:
            return default
        raise KeyError(where + key)
    v = d[key]
    if isinstance(v, float) and math.isfinite(v) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"field {where + key!r} is {v!r}: counts must be whole, finite numbers")
    if v < 0:
        raise ValueError(f"field {where + key!r} is {v}: counts cannot be negative")
    return v


def _guardrail_fit(d: Any) -> Mapping[str, Any] | None:
    """A file's ``guardrail_fit`` section, checked to name its chosen setting and bound."""
    if d is None:
        return None
    from df_ray.core.guardrail_fit import fit_from_dict

    try:
        setting, bound = fit_from_dict(d)
        setting.config()
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"field 'guardrail_fit' does not name its chosen setting and bound "
                         f"({type(exc).__name__}: {exc})") from None
    if not (0.0 <= bound <= 1.0):
        raise ValueError(f"field 'guardrail_fit.bound' is {bound!r}: a rate in [0, 1]")
    return d


class CalibrationChecksumError(ValueError):
    """A calibration file whose content does not match its recorded checksum."""


def content_checksum(d: Mapping[str, Any]) -> str:
    """SHA-256 over a calibration's canonical JSON (sorted keys, without the checksum)."""
    body = {k: v for k, v in d.items() if k != CHECKSUM_FIELD}
    blob = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()



def load_calibration(
    path: str | Path,
    *,
    agents: Sequence[str] | None = None,
    benchmark: str | None = None,
    identities: Mapping[str, Mapping[str, Any]] | None = None,
    min_samples: int | None = None,
    keying: str | None = None,
) -> Calibration:
    """Read a calibration file, refusing one that does not belong to this run.

    Agent lists are compared as sets (every statistic is keyed by agent id). Raises
    :class:`CalibrationMismatchError` for other agents, another benchmark or an unknown
    schema_version; :class:`CalibrationTooSmallError` for a file fitted on fewer than
    ``min_samples`` held-out samples (None: no lower bound); ValueError for a file that is
    not a calibration.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"calibration file {path} does not exist") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"calibration file {path} is not valid JSON ({exc}): truncated or "
                         "damaged; refit it (delete the file, or set calibration.auto_fit)"
                         ) from exc
    if not isinstance(data, dict):
        raise ValueError(f"calibration file {path} does not hold a JSON object")
    if CHECKSUM_FIELD in data:
        recorded = data.pop(CHECKSUM_FIELD)
        if recorded != content_checksum(data):
            raise CalibrationChecksumError(
                f"calibration file {path} does not match its {CHECKSUM_FIELD}: it was changed "
                "or damaged after it was fitted; refit it (delete the file, or set "
                "calibration.auto_fit) or restore it")
    cal = Calibration.from_dict(data, source=str(path))
    if agents is not None and set(agents) != set(cal.agents):
        raise CalibrationMismatchError(
            f"calibration file {path} was fitted for agents {list(cal.agents)}, but this run "
            f"uses agents {list(agents)}. Refit the calibration for these agents, or pass the "
            f"calibration file fitted for them.")
    if benchmark is not None and benchmark != cal.benchmark:
        raise CalibrationMismatchError(
            f"calibration file {path} was fitted on benchmark {cal.benchmark!r}, but this run "
            f"evaluates {benchmark!r}. Refit the calibration on {benchmark!r}, or pass the "
            f"calibration file fitted on it.")
    if keying is not None and keying != cal.keying:
        raise CalibrationMismatchError(
            f"calibration file {path} counts candidates keyed by {cal.keying}, but this run "
            f"keys them by {keying}: its R_pi and kappa count other clusters. Refit the "
            f"calibration with this keying (let the run fit one), or pass a file fitted so.")
    diffs = cal.identity_differences(identities) if identities is not None else []
    if diffs:
        raise CalibrationMismatchError(
            f"calibration file {path} was fitted for agents that differ from this run's: "
            f"{'; '.join(diffs)}. Refit the calibration for these agents (delete the file, or "
            f"set calibration.auto_fit), or pass the calibration file fitted for them.")
    if min_samples is not None and cal.n_samples < min_samples:
        raise CalibrationTooSmallError(
            f"calibration file {path} was fitted on {cal.n_samples} held-out sample(s), fewer "
            f"than the {min_samples} required (calibration.min_samples); refit it on more "
            "held-out data (delete the file and let the run fit one), or pass a file fitted "
            "on enough")
    return cal
