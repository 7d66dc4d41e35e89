"""Scripted answers for the pipeline tests, importable by Ray workers.

Each sample's question carries a marker like "[S1]"; each backbone answers from a table, so
every metric of a run can be computed by hand (see test_pipeline_ray.py).
"""

from __future__ import annotations

import re

from df_ray.engines.base import ChatRequest

# (sample, model) -> response text. "m1".."m3" are the agents' backbones, "mc" the coordinator's.
TABLE = {
    ("S1", "m1"): "A is right because of reason one.\nAnswer: (A)\nConfidence: 0.9",
    ("S1", "m2"): "Reasoning two.\nAnswer: (A)\nConfidence: 0.9",
    ("S1", "m3"): "Reasoning three.\nAnswer: (B)\nConfidence: 0.5",
    ("S1", "mc"): "Answer: (B)\nConfidence: 0.6",
    ("S2", "m1"): "Answer: (C)\nConfidence: 0.8",
    ("S2", "m2"): "Answer: (D)\nConfidence: 0.8",
    ("S2", "m3"): "Answer: (C)\nConfidence: 0.2",
    ("S2", "mc"): "Answer: (D)\nConfidence: 0.7",
    ("S3", "m1"): "Answer: (B)\nConfidence: 0.5",
    ("S3", "m2"): "I am not sure, maybe something.",
    ("S3", "m3"): "Answer: (B)\nConfidence: 0.5",
    ("S3", "mc"): "Answer: (C)\nConfidence: 0.9",
    ("S4", "m1"): "",
    ("S4", "m2"): "no idea",
    ("S4", "m3"): "???",
    ("S4", "mc"): "Answer: (A)\nConfidence: 0.5",
    ("S5", "m1"): "Answer: (D)\nConfidence: 0.5",
    ("S5", "m2"): "Answer: (A)\nConfidence: 0.5",
    ("S5", "m3"): "Answer: (C)\nConfidence: 0.5",
    ("S5", "mc"): "Answer: (D)\nConfidence: 0.5",
}


def table(request: ChatRequest) -> str:
    text = "\n".join(m.content for m in request.messages)
    m = re.search(r"\[(S\d+)\]", text)
    if not m:
        return ""
    return TABLE.get((m.group(1), request.model), "")
