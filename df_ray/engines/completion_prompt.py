"""Rendering chat messages as a plain completion prompt, for base models without a chat
template (shared by the embedded and vLLM engines)."""

from __future__ import annotations

from collections.abc import Sequence

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
