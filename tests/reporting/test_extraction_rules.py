"""Which extraction rules fired, per agent, from the graded rows' detail."""

from __future__ import annotations

import json

import pandas as pd

from df_ray.core.parsing import parse
from df_ray.core.types import ParseSpec
from df_ray.evaluation.scoring import _obs_dict
from df_ray.reporting.runs import extraction_rules


def test_rules_per_agent_from_graded_rows() -> None:
    spec = ParseSpec("choice", n_options=4)
    outputs = [{"a": "The answer is (B).", "b": "Answer: c"},
               {"a": "The answer is: D", "b": "I am not sure."},
               {"a": "The answer is (A)", "b": "Answer: A"}]
    rows = [{"detail": json.dumps({"observations": [_obs_dict(parse(t, spec, agent))
                                                    for agent, t in out.items()]})}
            for out in outputs]
    table = extraction_rules(pd.DataFrame(rows))
    got = {(r.agent, r.rule, r.valid, r.reason): r.count for r in table.itertuples()}
    assert got == {("a", "answer_is", True, ""): 2, ("a", "marker", True, ""): 1,
                   ("b", "answer_colon", True, ""): 1, ("b", "marker", True, ""): 1,
                   ("b", "", False, "no answer found"): 1}
    assert abs(table[table.agent == "a"]["share"].sum() - 1.0) < 1e-9
