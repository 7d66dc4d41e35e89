"""The DarkForest method as plain Python: parse, belief, disclosure, guardrail, calibration.

Nothing here imports Ray, an engine, MLflow or a data-frame library: call it on your own
agents' outputs::

    from df_ray.core import Observation, build_belief, decide, disclose, GuardrailConfig

    obs = [Observation("a", "42"), Observation("b", "42"), Observation("c", "41")]
    belief = build_belief(obs)                   # calibration=None: Laplace priors
    evidence = disclose(belief, obs, "strict")   # what the coordinator sees
    decision = decide(belief, coordinator_answer="41", cfg=GuardrailConfig())
"""

from df_ray.core.belief import (
    BeliefConfig,
    build_belief,
    cluster_observations,
    select_observations,
)
from df_ray.core.calibration import (
    Calibration,
    CalibrationMismatchError,
    CalibrationRecord,
    CalibrationTooSmallError,
    fit_calibration,
    load_calibration,
)
from df_ray.core.disclosure import POLICIES, Evidence, approx_tokens, disclose
from df_ray.core.guardrail import GuardrailConfig, decide, is_trusted, needs_coordinator
from df_ray.core.parsing import canonicalize, extract_confidence, parse
from df_ray.core.types import (
    AnswerKind,
    Belief,
    Cluster,
    Decision,
    DecisionSource,
    Observation,
    ParseSpec,
)
from df_ray.core.voting import majority_vote, recalibrate_reconcile, weighted_vote

__all__ = [
    "POLICIES",
    "AnswerKind",
    "Belief",
    "BeliefConfig",
    "Calibration",
    "CalibrationMismatchError",
    "CalibrationRecord",
    "CalibrationTooSmallError",
    "Cluster",
    "Decision",
    "DecisionSource",
    "Evidence",
    "GuardrailConfig",
    "Observation",
    "ParseSpec",
    "approx_tokens",
    "build_belief",
    "canonicalize",
    "cluster_observations",
    "decide",
    "disclose",
    "extract_confidence",
    "fit_calibration",
    "is_trusted",
    "load_calibration",
    "majority_vote",
    "needs_coordinator",
    "parse",
    "recalibrate_reconcile",
    "select_observations",
    "weighted_vote",
]
