"""A scripted responder for the method sweep on Ray (importable by Ray workers): every agent
answers B, scorers split evenly, critiques never approve."""

from __future__ import annotations

from df_ray.engines.base import ChatRequest
from tests.methods.conftest import phase

ANSWERS = {
    "select": "0, 1, 2",
    "score": "[0.5, 0.5]",
    "feedback": "Step 1 could be clearer.\nVerdict: INCORRECT",
}


def respond(request: ChatRequest) -> str:
    return ANSWERS.get(phase(request), "Reasoning.\nAnswer: B\nConfidence: 0.8")
