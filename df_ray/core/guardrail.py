"""The deterministic guardrail (docs/method.md §6).

Trusted(z*) iff |S_{z*}| >= k and P(z*|O) >= tau_p and Delta >= tau_m (each inclusive; the
float comparisons allow 1e-12 so that a value computed to exactly the threshold passes).

Final answer:

- trusted -> z* (source ``"guardrail"``); ``overridden`` when the coordinator gave a valid
  answer other than z*. The coordinator answer is irrelevant to the outcome, which is why the
  ``lazy`` mode may skip the call (:func:`needs_coordinator`).
- not trusted -> the coordinator's answer when valid (source ``"coordinator"``), else z*
  (source ``"belief"``).
- no valid observation at all (empty belief) -> the coordinator alone: its answer, source
  ``"coordinator"``; when the coordinator is invalid too, ``final`` is None and the source is
  still ``"coordinator"`` (there is no belief to fall back on).

A disabled guardrail (the no-guardrail ablation) never trusts.
"""

from __future__ import annotations

from dataclasses import dataclass

from df_ray.core.types import Belief, Decision

__all__ = ["EPSILON", "GuardrailConfig", "decide", "is_trusted", "needs_coordinator"]

EPSILON = 1e-12


@dataclass(frozen=True, slots=True)
class GuardrailConfig:
    """Thresholds of Trusted(z*): support ``k``, posterior ``tau_p``, margin ``tau_m``."""

    k: int = 2
    tau_p: float = 0.66
    tau_m: float = 0.30
    enabled: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            raise ValueError(f"GuardrailConfig.k must be an integer >= 1, got {self.k!r}")
        for name in ("tau_p", "tau_m"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not (0.0 <= v <= 1.0):
                raise ValueError(f"GuardrailConfig.{name} must be a number in [0, 1], got {v!r}")
        if not isinstance(self.enabled, bool):
            raise ValueError(f"GuardrailConfig.enabled must be a bool, got {self.enabled!r}")


def certain(belief: Belief, cfg: GuardrailConfig) -> bool:
    """The three threshold conditions alone, ignoring ``cfg.enabled``.

    This is the belief's certainty (the opposite of Uncertain(O) in docs/method.md §5); the adaptive
    disclosure policy uses it even when the override itself is switched off.
    """
    top = belief.top
    if top is None:
        return False
    return (
        len(top.support) >= cfg.k
        and top.posterior >= cfg.tau_p - EPSILON
        and belief.margin >= cfg.tau_m - EPSILON
    )


def is_trusted(belief: Belief, cfg: GuardrailConfig = GuardrailConfig()) -> bool:
    """Trusted(z*): the guardrail is enabled and the belief meets all three thresholds."""
    return cfg.enabled and certain(belief, cfg)


def needs_coordinator(belief: Belief, cfg: GuardrailConfig = GuardrailConfig()) -> bool:
    """Whether a lazy coordinator must be called: False exactly when the guardrail decides."""
    return not is_trusted(belief, cfg)


def decide(
    belief: Belief,
    coordinator_answer: str | None,
    cfg: GuardrailConfig = GuardrailConfig(),
) -> Decision:
    """The final answer from the belief, the coordinator's parsed answer (None = invalid or not
    called) and the guardrail. See the module docstring for the rules."""
    if belief.top is None:
        return Decision(final=coordinator_answer, source="coordinator", trusted=False,
                        overridden=False, coordinator_answer=coordinator_answer)
    z_star = belief.top.answer
    if is_trusted(belief, cfg):
        overridden = coordinator_answer is not None and coordinator_answer != z_star
        return Decision(final=z_star, source="guardrail", trusted=True, overridden=overridden,
                        coordinator_answer=coordinator_answer)
    if coordinator_answer is not None:
        return Decision(final=coordinator_answer, source="coordinator", trusted=False,
                        overridden=False, coordinator_answer=coordinator_answer)
    return Decision(final=z_star, source="belief", trusted=False, overridden=False,
                    coordinator_answer=None)
