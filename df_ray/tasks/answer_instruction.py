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


#: How an agent is told to write its final answer (``reasoned_prompt``'s ``final``): in a
#: box, or on an answer line with one of the allowed labels.
FINAL_BOXED = "as \\boxed{<answer>}."
FINAL_LABEL = "on a line of the form 'Answer: <label>' using exactly one of the allowed labels."


def final_choice(letters: list[str] | tuple[str, ...]) -> str:
    """On an answer line with one of the option ``letters``."""
    return f"on a line of the form 'Answer: X' where X is one of {', '.join(letters)}."


def reasoned_prompt(statement: str, final: str) -> str:
    """An agent prompt: ``statement`` (the whole problem), then 'Reason step by step. Then
    give your final answer <final>' and the confidence line."""
    return f"{statement}\n\n" + answer_instruction(
        f"Reason step by step. Then give your final answer {final}")


def asks_confidence(text: str) -> bool:
    """Whether an instruction already asks for the confidence line."""
    return CONFIDENCE_LINE in text
