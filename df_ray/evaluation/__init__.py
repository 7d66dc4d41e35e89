"""Where a method meets a benchmark: the round driver, scoring and calibration records.

Between ``df_ray.methods`` (what to ask, what to conclude) and ``df_ray.pipeline`` (Ray
scheduling): the driver (``driver.Driver``) runs methods' rounds for a batch of samples
against any engine client, in this process or inside a Ray Data stage; scoring
(``scoring.score``) grades a finished sample into one ``ResultRow``; calibration
(``calibration``) finds, checks and fits the frozen files of methods that need one.
``evaluate`` runs all of it in-process.
"""

from df_ray.evaluation.api import EngineRouter, Evaluation, evaluate
from df_ray.evaluation.context import build_context
from df_ray.evaluation.driver import Driver, Member, PlannedCall, calibration_record
from df_ray.evaluation.metrics import MetricsAccumulator
from df_ray.evaluation.scoring import RESULT_COLUMNS, ResultRow, arrow_schema, score

__all__ = ["RESULT_COLUMNS", "Driver", "EngineRouter", "Evaluation", "Member",
           "MetricsAccumulator", "PlannedCall", "ResultRow", "arrow_schema", "build_context",
           "calibration_record", "evaluate", "score"]
