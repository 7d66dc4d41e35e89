"""Scripted answers for the reliability tests, importable by Ray workers.

``logged_majority`` is the builtin ``majority`` responder that also appends one line per
request it serves to the file named by ``DF_RAY_CALL_LOG`` (when set), so a test can count
the LLM calls a subprocess run really made, across engine actors and even when the run is
SIGKILLed (a line is written when the call is answered, before it reaches the cache).
"""

from __future__ import annotations

import os
import time

from df_ray.engines.base import ChatRequest
from df_ray.engines.scripted import majority

CALL_LOG_ENV = "DF_RAY_CALL_LOG"


def logged_majority(request: ChatRequest) -> str:
    text = majority(request)
    path = os.environ.get(CALL_LOG_ENV)
    if path:
        # One short O_APPEND write per call: atomic across processes.
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{request.model} {request.key()}\n".encode())
        finally:
            os.close(fd)
    return text


def read_call_log(path: str | os.PathLike[str]) -> list[str]:
    try:
        with open(path, encoding="utf-8") as f:
            return [line.split()[1] for line in f if line.strip()]
    except FileNotFoundError:
        return []


def goa_huge_selection(request: ChatRequest) -> str:
    """Graph-of-Agents' meta-LLM answering sample q3's node selection with a 5,000-digit
    number (over Python's integer-string limit); every other call as ``majority``."""
    from df_ray.engines.scripted import last_user_content

    u = last_user_content(request)
    if u.startswith("Select ") and "models best suited" in u:
        return ("1" * 5000 + ",2,3") if "[q3]" in u else "1,2,3"
    if u.startswith("Rate the following"):
        return "[0.5, 0.5]"
    return majority(request)


def surrogate_on_q2(request: ChatRequest) -> str:
    """``majority``, with a lone UTF-16 surrogate (what ``json.loads`` makes of ``"\\ud800"``)
    in every answer about sample q2."""
    from df_ray.engines.scripted import last_user_content

    text = majority(request)
    return text + " \ud800" if "[q2]" in last_user_content(request) else text


#: A file whose existence holds the coordinator's calls of ``logged_majority_held`` back.
HOLD_ENV = "DF_RAY_HOLD_WHILE"


def logged_majority_held(request: ChatRequest) -> str:
    """``logged_majority``, held back while the file named by ``DF_RAY_HOLD_WHILE`` exists:
    a run's agents answer while its coordinator round cannot end."""
    path = os.environ.get(HOLD_ENV)
    while path and os.path.exists(path):
        time.sleep(0.05)
    return logged_majority(request)
