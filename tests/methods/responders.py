"""A scripted responder for the method sweep on Ray (importable by Ray workers): every agent
answers B (in JSON where the protocol asks for it), scorers split evenly, critiques never
approve."""

from __future__ import annotations

from df_ray.engines.base import ChatRequest
from tests.helpers import phase

ANSWERS = {
    "select": "0,1,2",
    "score": "[0.5, 0.5]",
    "feedback": "Step 1 could be clearer.\nVerdict: INCORRECT",
    "fewshot_feedback": "# wrong! Step 1 could be clearer.\n\nOkay! Here is the rewrite:\n\n"
                        "Reasoning.\nAnswer: B",
    "goa_initial": '{"reasoning": "r", "answer": "B", "confidence_level": 0.8}',
    "reconcile": '{"reasoning": "r", "answer": "B", "confidence_level": 0.8}',
}


def respond(request: ChatRequest) -> str:
    return ANSWERS.get(phase(request), "Reasoning.\nAnswer: B\nConfidence: 0.8")
