"""The pipeline's rows: each carries its sample once, as JSON (the stage decodes it)."""

from __future__ import annotations

import json

from df_ray.tasks.base import Sample


def encode_sample(sample: Sample) -> str:
    return json.dumps({"id": sample.id, "task": sample.task, "question": sample.question,
                       "gold": sample.gold, "meta": sample.meta})


def decode_sample(sample: str) -> Sample:
    return Sample(**json.loads(sample))
