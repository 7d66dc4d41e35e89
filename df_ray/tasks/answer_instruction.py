"""The one builder of answer instructions: how every prompt that asks for a final answer ends.

A task's own prompt text lives in its module (``agent_prompt``: the question and how to
answer; ``answer_instructions``: the final-answer format alone, which methods append to their
own prompts, see ``df_ray.methods.prompt_templates``). Both end with :func:`answer_instruction`, so
every answer any method asks for carries the same confidence line and parses the same way.
"""

from __future__ import annotations

#: The self-reported confidence every answer ends with (``df_ray.core`` parses it).
CONFIDENCE_LINE = "Confidence: <a number from 0 to 1: how likely your final answer is correct>"
CONFIDENCE_INSTRUCTION = f"End with a final line '{CONFIDENCE_LINE}'."


def answer_instruction(answer: str, *, confidence: bool = True) -> str:
    """``answer`` (a sentence saying how to write the final answer), then, with
    ``confidence``, the confidence line."""
    answer = answer.strip()
    if not confidence:
        return answer
    return f"{answer}\n{CONFIDENCE_INSTRUCTION}" if answer else CONFIDENCE_INSTRUCTION


def asks_confidence(text: str) -> bool:
    """Whether an instruction already asks for the confidence line."""
    return CONFIDENCE_LINE in text
