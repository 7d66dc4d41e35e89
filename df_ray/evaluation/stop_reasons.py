"""Why a call's completion ended, including for calls whose engine never said.

Engines report a ``finish_reason`` (``stop``, ``length``...), and the generation cache keeps
it; calls cached before it was recorded have None. Such a call cannot be taken as whole: a
completion that used all of its ``max_tokens`` was cut off whatever the engine would have
said (an engine stops at max_tokens or earlier, never later), so it counts as truncated;
one that stopped short of it is ``unknown`` (it ended on its own or on a stop string, the
record cannot tell), and is counted as such.

    stop_reason("stop", 120, 384)  -> "stop"
    stop_reason(None, 384, 384)    -> "length"   (no reason recorded, every token used)
    stop_reason(None, 120, 384)    -> "unknown"
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: The stop reason of a call with no recorded reason that stopped short of max_tokens.
UNKNOWN = "unknown"
LENGTH = "length"


def stop_reason(finish_reason: str | None, completion_tokens: int,
                max_tokens: int | None) -> str:
    """The recorded reason; for a call without one, ``length`` when the completion used all
    of ``max_tokens``, else :data:`UNKNOWN` (also when the budget is not known)."""
    if finish_reason is not None:
        return str(finish_reason)
    if max_tokens is not None and max_tokens > 0 and int(completion_tokens) >= int(max_tokens):
        return LENGTH
    return UNKNOWN


def call_stop_reason(call: Any, max_tokens: Callable[[str], int | None]) -> str:
    """:func:`stop_reason` of an answered call record (``finish_reason``,
    ``completion_tokens``, ``agent``), its budget looked up by agent id."""
    if call.finish_reason is not None:
        return str(call.finish_reason)
    return stop_reason(None, call.completion_tokens, max_tokens(call.agent))


def budgets(ctx: Any) -> Callable[[str], int | None]:
    """Agent id -> its ``max_tokens`` in a method context (every request of an agent is
    sampled with its own budget; None for an id the context does not know)."""
    def of(agent: str) -> int | None:
        try:
            return int(ctx.agent(agent).sampling.max_tokens)
        except (KeyError, AttributeError, TypeError, ValueError):
            return None

    return of


def no_budget(agent: str) -> None:
    """For callers without a context: no call is inferred truncated."""
    return None
