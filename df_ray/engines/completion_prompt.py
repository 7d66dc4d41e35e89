"""Rendering chat messages as a plain prompt, for models without a chat template (shared by
the embedded and vLLM engines): df_ray's "Question: ... Answer:" completion prompt, or, where
a request asks for it (``ChatRequest.no_template``), ChatML as Graph-of-Agents renders one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from df_ray.engines.base import Message


def render_completion_prompt(messages: Sequence[Message]) -> str:
    """Messages as a plain completion prompt for base models::

    <system text>

    Question: <user 1>
    Answer: <assistant 1>

    Question: <user 2>
    Answer:
    """
    parts: list[str] = []
    for m in messages:
        if m.role == "system":
            parts.append(m.content.strip() + "\n\n")
        elif m.role == "user":
            parts.append(f"Question: {m.content.strip()}\nAnswer:")
        else:  # assistant
            parts.append(f" {m.content.strip()}\n\n")
    if not messages or messages[-1].role != "user":
        parts.append("Answer:")
    return "".join(parts)


#: Extra stops in completion mode, so a base model does not write the next question itself.
COMPLETION_STOPS: tuple[str, ...] = ("\nQuestion:",)

#: Graph-of-Agents' system message for a model without a chat template (``generate_vllm`` in
#: UNITES-Lab/GoA ``utils.py``: finance-Llama3-8B gets ChatML with it).
CHATML_SYSTEM = "You are a helpful assistant."

#: ChatML's end of a turn: the model's answer ends there.
CHATML_STOPS: tuple[str, ...] = ("<|im_end|>",)

NoTemplate = Literal["completion", "chatml"]


def render_chatml(messages: Sequence[Message]) -> str:
    """Messages as ChatML, as GoA's ``generate_vllm`` writes it for a model without a chat
    template::

    <|im_start|>system
    You are a helpful assistant.<|im_end|>
    <|im_start|>user
    <user 1><|im_end|>
    <|im_start|>assistant

    The system turn is the request's own when it has one, else :data:`CHATML_SYSTEM` (GoA's
    single-prompt path). An assistant turn is written as one (GoA's message lists have none).
    """
    parts: list[str] = []
    if not any(m.role == "system" for m in messages):
        parts.append(f"<|im_start|>system\n{CHATML_SYSTEM}<|im_end|>\n")
    for m in messages:
        parts.append(f"<|im_start|>{m.role}\n{m.content}<|im_end|>\n")
    parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def without_template_stops(no_template: NoTemplate | None = None) -> tuple[str, ...]:
    """The extra stop strings of a request to a model rendered without a chat template."""
    if no_template == "chatml":
        return CHATML_STOPS
    if no_template not in (None, "completion"):
        raise ValueError(f"no_template must be 'completion' or 'chatml', not {no_template!r}")
    return COMPLETION_STOPS


def render_without_template(messages: Sequence[Message], no_template: NoTemplate | None = None
                            ) -> tuple[str, tuple[str, ...]]:
    """The prompt and the extra stop strings of a request to a model rendered without a chat
    template: ChatML where ``no_template`` is "chatml", else the completion prompt."""
    stops = without_template_stops(no_template)
    render = render_chatml if no_template == "chatml" else render_completion_prompt
    return render(messages), stops
