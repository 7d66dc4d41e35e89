"""The pipeline's rows: each input row carries its sample once, as JSON (the stage decodes
it); each output row is one graded (sample, configuration)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from df_ray.evaluation.scoring import RESULT_COLUMNS, ResultRow
from df_ray.tasks.base import Sample

#: The output column that carries a row's method columns (a JSON object).
METHOD_COLUMNS = "method_columns"


def encode_sample(sample: Sample) -> str:
    return json.dumps({"id": sample.id, "task": sample.task, "question": sample.question,
                       "gold": sample.gold, "meta": sample.meta})


def decode_sample(sample: str) -> Sample:
    return Sample(**json.loads(sample))


def output_schema():
    """The stage's output rows as Arrow types: the generic ``ResultRow`` columns,
    ``method_columns``, ``config`` and ``busy_s``. The stage builds its output table with it
    (Ray Data would infer each column's type from its Python values, most of the stage's CPU
    per batch after the method's own work, and an all-None column's type differently)."""
    import pyarrow as pa

    from df_ray.evaluation.scoring import arrow_schema

    return arrow_schema().append(pa.field(METHOD_COLUMNS, pa.string())).append(
        pa.field("config", pa.int64())).append(pa.field("busy_s", pa.float64()))


def encode_results(graded: Sequence[tuple[int, ResultRow]]) -> dict[str, list[Any]]:
    """(configuration index, graded row) pairs as output columns: the generic ``ResultRow``
    columns, ``method_columns`` and ``config``. Each configuration's method has columns of its
    own: they cross as JSON, one object per row, so that every batch has one schema whatever
    methods it carries (the configuration's results file gives them their Arrow types)."""
    cols: dict[str, list[Any]] = {k: [getattr(r, k) for _, r in graded] for k in RESULT_COLUMNS}
    cols[METHOD_COLUMNS] = [json.dumps(r.method_columns) for _, r in graded]
    cols["config"] = [m for m, _ in graded]
    return cols
