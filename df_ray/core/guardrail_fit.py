"""Fitting the guardrail's thresholds on held-out data, with a certified wrong-override rate.

The paper fixes (k, tau_p, tau_m) = (2, 0.66, 0.30) by hand. Here they are chosen on the
calibration split, where the coordinator was run too, by Learn-then-Test:

    A. N. Angelopoulos, S. Bates, E. J. Candès, M. I. Jordan, L. Lei. "Learn then Test:
    Calibrating Predictive Algorithms to Achieve Risk Control" (2021), arXiv:2110.01052.

Each candidate setting lambda of a grid (thresholds, plus "always trust z*" = the belief-only
decision, plus "never trust" = the coordinator decides) has a risk: its **wrong-override
rate** R(lambda), the share of samples where the guardrail trusts z*, z* is wrong and the
coordinator was right (the harm an override can do; docs/method.md §6). For each setting the
null hypothesis H_lambda: R(lambda) > alpha (``max_wrong_override``) is tested with the exact
binomial p-value of its held-out count x out of n samples,

    p(lambda) = P(Binomial(n, alpha) <= x),

which is valid because the per-sample loss is 0/1 (LTT §3, the binomial tail bound). The
family-wise error over the grid is controlled at ``delta`` by Bonferroni (reject when
p <= delta / m, m the settings tested) or by fixed-sequence testing (test the settings in the
grid's given order, each at level delta, stop at the first that is not rejected; the order
must not depend on the held-out data; ``default_grid`` goes from strictest to loosest).
Fixed-sequence is the default: Bonferroni over the 60 tested settings of the default grid
needs at least 125 held-out samples without a single wrong override to certify 5% at
delta 0.1 ((1 - 0.05)^n <= 0.1 / 60), fixed-sequence 45. The rejected nulls are the **certified** settings:
with probability at least 1 - delta every one of them has R <= alpha simultaneously.
"Never trust" can override nothing (R = 0 by construction), so it is always certified and
not counted in m; the fit can therefore always fall back on it.

What a certificate says: with probability at least 1 - delta, the wrong-override rate of
*each* certified setting is at most alpha; the fit counts how many settings were tested (a
fixed sequence stops at its first non-rejection) and how many were certified. The chosen
setting's one-sided Clopper-Pearson bound at level delta is a post-hoc figure for a setting
chosen after seeing the data, not a certificate; ``simultaneous_bound`` is its bound at
delta / m over the whole grid, which holds whichever setting is chosen.

The test is only valid when its records' scores (the belief's posterior and margin) do not
depend on them: the belief's parameters must be fitted on other samples.
``split_held_out`` divides the held-out samples into a fitting part and a certifying part by
a fixed hash of their ids, so that the caller fits alpha, R and kappa on one and runs the
coordinator and the test on the other. The certificate also assumes that the test samples
are exchangeable with the certifying ones.

Among the certified settings the fit chooses the most accurate on the held-out samples;
ties go to the setting that trusts least, then to the earlier in the grid. It reports every
setting's held-out accuracy, trusted rate and wrong-override rate, and for each the one-sided
Clopper-Pearson upper bound on R at the level the test used (delta / m for Bonferroni, delta
for fixed-sequence): the smallest alpha the test would have certified.

Plain Python plus scipy (``scipy.stats.binom``, ``scipy.stats.beta``) imported when a fit
runs; no Ray, engine or MLflow. Typical use::

    from df_ray.core.guardrail_fit import HeldOutRecord, fit_guardrail

    records = [HeldOutRecord(top_correct=True, support=2, posterior=0.8, margin=0.6,
                             coordinator_correct=False), ...]
    fit = fit_guardrail(records, max_wrong_override=0.05, delta=0.1)
    fit.chosen.setting.config()   # a GuardrailConfig for decide()
    fit.to_dict()                 # what the frozen calibration file records
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from df_ray.core.guardrail import EPSILON, GuardrailConfig

__all__ = [
    "DEFAULT_K",
    "DEFAULT_TAU_M",
    "DEFAULT_TAU_P",
    "FitResult",
    "GuardrailSetting",
    "HeldOutRecord",
    "SettingResult",
    "binomial_p_value",
    "default_grid",
    "fit_from_dict",
    "fit_guardrail",
    "split_held_out",
    "upper_bound",
]

Testing = Literal["bonferroni", "fixed_sequence"]
TrustMode = Literal["thresholds", "always", "never"]

#: The default grid's values; with "never" and "always" (which replaces (1, 0, 0)) it has
#: 3 * 5 * 4 + 1 = 61 settings and includes the paper's (2, 0.66, 0.30).
DEFAULT_K: tuple[int, ...] = (1, 2, 3)
DEFAULT_TAU_P: tuple[float, ...] = (0.0, 0.5, 0.66, 0.8, 0.9)
DEFAULT_TAU_M: tuple[float, ...] = (0.0, 0.1, 0.3, 0.5)


@dataclass(frozen=True, slots=True)
class HeldOutRecord:
    """One held-out sample, as the fit needs it.

    ``top_correct``: the belief's z* is right (False when the belief is empty: ``support`` 0).
    ``support``, ``posterior``, ``margin``: |S_z*|, P(z*|O) and Delta of that belief.
    ``coordinator_correct``: the coordinator's answer is right; None when it gave no valid
    answer (then an untrusted sample falls back on z*, as ``decide`` does).
    """

    top_correct: bool
    support: int
    posterior: float
    margin: float
    coordinator_correct: bool | None

    def __post_init__(self) -> None:
        if isinstance(self.support, bool) or not isinstance(self.support, int) \
                or self.support < 0:
            raise ValueError(f"HeldOutRecord.support must be an integer >= 0, "
                             f"got {self.support!r}")
        for name in ("posterior", "margin"):
            v = getattr(self, name)
            if not isinstance(v, int | float) or not (0.0 <= v <= 1.0 + EPSILON):
                raise ValueError(f"HeldOutRecord.{name} must be a number in [0, 1], got {v!r}")
        if self.support == 0 and self.top_correct:
            raise ValueError("HeldOutRecord: an empty belief (support 0) has no correct z*")


@dataclass(frozen=True, slots=True)
class GuardrailSetting:
    """One point of the grid: thresholds, or "always trust z*", or "never trust"."""

    mode: TrustMode = "thresholds"
    k: int = 2
    tau_p: float = 0.66
    tau_m: float = 0.30

    @classmethod
    def always(cls) -> GuardrailSetting:
        """Trust z* whenever there is a belief: the belief-only decision."""
        return cls("always", 1, 0.0, 0.0)

    @classmethod
    def never(cls) -> GuardrailSetting:
        """Never trust: the coordinator decides (the no-guardrail ablation)."""
        return cls("never", 1, 0.0, 0.0)

    @property
    def name(self) -> str:
        if self.mode != "thresholds":
            return self.mode
        return f"k={self.k},tau_p={self.tau_p:g},tau_m={self.tau_m:g}"

    def trusts(self, r: HeldOutRecord) -> bool:
        """Trusted(z*) under this setting, as ``guardrail.certain`` computes it."""
        if self.mode == "never" or r.support == 0:
            return False
        if self.mode == "always":
            return True
        return (r.support >= self.k and r.posterior >= self.tau_p - EPSILON
                and r.margin >= self.tau_m - EPSILON)

    def config(self) -> GuardrailConfig:
        """The GuardrailConfig that ``decide`` applies for this setting."""
        if self.mode == "never":
            return GuardrailConfig(enabled=False)
        return GuardrailConfig(k=self.k, tau_p=float(self.tau_p), tau_m=float(self.tau_m))

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "k": self.k, "tau_p": self.tau_p, "tau_m": self.tau_m}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GuardrailSetting:
        return cls(str(d["mode"]), int(d["k"]), float(d["tau_p"]), float(d["tau_m"]))  # type: ignore[arg-type]


def default_grid(k: Iterable[int] = DEFAULT_K, tau_p: Iterable[float] = DEFAULT_TAU_P,
                 tau_m: Iterable[float] = DEFAULT_TAU_M) -> list[GuardrailSetting]:
    """"never", the threshold settings from strictest to loosest, then "always".

    The order is fixed before any data is seen, as fixed-sequence testing needs, and puts a
    setting after every setting that trusts a subset of what it trusts (larger k, tau_p and
    tau_m): settings are sorted by the sum of their three values' ranks (each value's
    position among its axis's values, strictest 0, scaled to [0, 1]), ties by k, tau_p,
    tau_m descending. So the sequence loosens all three thresholds together instead of
    exhausting one axis first (where one failure at k=3 would stop every k=2 setting)."""
    ks, tps, tms = (sorted(set(v), reverse=True) for v in (k, tau_p, tau_m))

    def rank(values: list, v: Any) -> float:
        return values.index(v) / max(len(values) - 1, 1)

    # (1, 0, 0) trusts whatever "always" trusts: it is left out for "always" itself
    settings = [GuardrailSetting("thresholds", int(kk), float(tp), float(tm))
                for kk in ks for tp in tps for tm in tms if (kk, tp, tm) != (1, 0.0, 0.0)]
    settings.sort(key=lambda s: (rank(ks, s.k) + rank(tps, s.tau_p) + rank(tms, s.tau_m),
                                 -s.k, -s.tau_p, -s.tau_m))
    return [GuardrailSetting.never(), *settings, GuardrailSetting.always()]


def binomial_p_value(x: int, n: int, alpha: float) -> float:
    """The exact p-value of H: risk > alpha after x losses in n samples: P(Bin(n, alpha) <= x).
    With alpha 0 a loss-free record cannot reject (p 1)."""
    from scipy.stats import binom

    if n <= 0:
        return 1.0
    return float(binom.cdf(x, n, alpha))


def upper_bound(x: int, n: int, level: float) -> float:
    """The one-sided Clopper-Pearson upper confidence bound on the risk at error ``level``:
    the largest alpha with P(Bin(n, alpha) <= x) >= level (1.0 when x == n or n == 0)."""
    from scipy.stats import beta

    if n <= 0 or x >= n:
        return 1.0
    return float(beta.ppf(1.0 - level, x + 1, n - x))


@dataclass(frozen=True, slots=True)
class SettingResult:
    """One setting's held-out figures and its test."""

    setting: GuardrailSetting
    accuracy: float
    trusted_rate: float
    wrong_override_rate: float
    wrong_overrides: int
    p_value: float
    certified: bool
    bound: float

    def to_dict(self) -> dict[str, Any]:
        return {"setting": self.setting.to_dict(), "name": self.setting.name,
                "accuracy": self.accuracy, "trusted_rate": self.trusted_rate,
                "wrong_override_rate": self.wrong_override_rate,
                "wrong_overrides": self.wrong_overrides, "p_value": self.p_value,
                "certified": self.certified, "bound": self.bound}


@dataclass(frozen=True, slots=True)
class FitResult:
    """The chosen setting and every setting's result, with how they were tested."""

    chosen: SettingResult
    results: tuple[SettingResult, ...]
    n: int
    max_wrong_override: float
    delta: float
    testing: Testing
    #: settings whose null was tested (fixed sequence: up to its first non-rejection)
    tested: int = field(default=0)
    #: settings of the grid that could be tested ("never" not counted)
    grid_size: int = field(default=0)

    @property
    def bound(self) -> float:
        """The chosen setting's one-sided Clopper-Pearson bound at the test's level: a
        post-hoc figure for a setting chosen after seeing the data, not its certificate."""
        return self.chosen.bound

    @property
    def certified(self) -> int:
        """How many tested settings were certified ("never" not counted)."""
        return sum(1 for r in self.results if r.certified and r.setting.mode != "never")

    @property
    def simultaneous_bound(self) -> float:
        """The chosen setting's Clopper-Pearson bound at delta / grid_size: it holds
        simultaneously over the grid, so whichever setting the data chose."""
        return upper_bound(self.chosen.wrong_overrides, self.n,
                           self.delta / max(self.grid_size, 1))

    def to_dict(self) -> dict[str, Any]:
        return {"method": "learn_then_test", "testing": self.testing, "n": self.n,
                "max_wrong_override": self.max_wrong_override, "delta": self.delta,
                "tested": self.tested, "certified": self.certified,
                "grid_size": self.grid_size, "chosen": self.chosen.to_dict(),
                "bound": self.bound, "simultaneous_bound": self.simultaneous_bound,
                "settings": [r.to_dict() for r in self.results]}


def _evaluate(setting: GuardrailSetting, records: Sequence[HeldOutRecord]
              ) -> tuple[float, float, int]:
    n = len(records)
    correct = trusted = wrong = 0
    for r in records:
        if setting.trusts(r):
            trusted += 1
            correct += r.top_correct
            wrong += (not r.top_correct) and r.coordinator_correct is True
        elif r.coordinator_correct is None:
            correct += r.top_correct
        else:
            correct += r.coordinator_correct
    return correct / n, trusted / n, wrong


def fit_guardrail(records: Sequence[HeldOutRecord],
                  grid: Sequence[GuardrailSetting] | None = None, *,
                  max_wrong_override: float = 0.05, delta: float = 0.1,
                  testing: Testing = "fixed_sequence") -> FitResult:
    """Choose the most accurate setting of ``grid`` (default: ``default_grid()``) whose
    wrong-override rate is certified <= ``max_wrong_override`` with probability
    1 - ``delta`` on ``records`` (Learn-then-Test; see the module docstring). "never" is
    added to the grid when it is missing, so some setting is always certified."""
    if not records:
        raise ValueError("fit_guardrail: no held-out records to fit on")
    if not (0.0 <= max_wrong_override <= 1.0):
        raise ValueError(f"fit_guardrail: max_wrong_override must be in [0, 1], "
                         f"got {max_wrong_override!r}")
    if not (0.0 < delta < 1.0):
        raise ValueError(f"fit_guardrail: delta must be in (0, 1), got {delta!r}")
    if testing not in ("bonferroni", "fixed_sequence"):
        raise ValueError(f"fit_guardrail: testing must be 'bonferroni' or 'fixed_sequence', "
                         f"got {testing!r}")
    settings = list(default_grid() if grid is None else grid)
    if GuardrailSetting.never() not in settings:
        settings.insert(0, GuardrailSetting.never())
    n = len(records)
    m = sum(1 for s in settings if s.mode != "never")
    level = delta / max(m, 1) if testing == "bonferroni" else delta
    results: list[SettingResult] = []
    sequence_open = True
    tested = 0
    for s in settings:
        acc, trusted, wrong = _evaluate(s, records)
        if s.mode == "never":
            results.append(SettingResult(s, acc, trusted, 0.0, 0, 0.0, True, 0.0))
            continue
        p = binomial_p_value(wrong, n, max_wrong_override)
        tested += sequence_open
        certified = p <= level and sequence_open
        if testing == "fixed_sequence" and not certified:
            sequence_open = False
        results.append(SettingResult(s, acc, trusted, wrong / n, wrong, p, certified,
                                     upper_bound(wrong, n, level)))
    order = {id(r): i for i, r in enumerate(results)}
    chosen = max((r for r in results if r.certified),
                 key=lambda r: (round(r.accuracy, 12), -round(r.trusted_rate, 12),
                                -order[id(r)]))
    return FitResult(chosen, tuple(results), n, float(max_wrong_override), float(delta),
                     testing, tested, m)


def split_held_out(sample_ids: Sequence[str], fit_share: float = 0.5
                   ) -> tuple[list[str], list[str]]:
    """The held-out samples divided into a fitting part (alpha, R, kappa) and a certifying
    part (the coordinator's calls and the test), ``fit_share`` of them (rounded) to fitting:
    ordered by the SHA-256 of their ids, so the division is fixed before any data is seen
    and the same on every machine. Each part keeps the given order."""
    import hashlib

    if not 0.0 < fit_share < 1.0:
        raise ValueError(f"split_held_out: fit_share must be in (0, 1), got {fit_share!r}")
    ids = list(dict.fromkeys(sample_ids))
    if len(ids) < 2:
        raise ValueError(f"split_held_out: {len(ids)} held-out samples cannot be divided")
    ranked = sorted(ids, key=lambda i: hashlib.sha256(str(i).encode()).hexdigest())
    n_fit = min(max(1, round(len(ids) * fit_share)), len(ids) - 1)
    fit = set(ranked[:n_fit])
    return [i for i in ids if i in fit], [i for i in ids if i not in fit]


def fit_from_dict(d: dict[str, Any]) -> tuple[GuardrailSetting, float]:
    """The chosen setting and its bound from ``FitResult.to_dict()`` (a frozen file)."""
    return GuardrailSetting.from_dict(d["chosen"]["setting"]), float(d["bound"])
