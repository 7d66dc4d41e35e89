"""Scripted agents of unequal skill for the analysis tests, importable by engines.

Each model answers a GoA-style MMLU-Pro question (``tests.helpers.write_mmlu_goa``: the gold
letter of item ``[q<i>]`` / ``[c<i>]`` is ``ABCD[(7 i) % 4]``) right with its own probability,
else mostly the same wrong letter (correlated errors), sometimes another, and 5% of the time
with no answer at all; a seeded hash of the request decides, so every call is reproducible
and the run seed and slot change it.
"""

from __future__ import annotations

import hashlib
import json
import re

from df_ray.engines.base import ChatRequest
from df_ray.engines.scripted import last_user_content

LETTERS = "ABCD"
SKILL = {"m1": 0.7, "m2": 0.6, "m3": 0.5, "m4": 0.45, "m5": 0.4, "mc": 0.55}


def gold_of(text: str) -> str:
    m = re.search(r"\[[a-z]+(\d+)\]", text)
    return LETTERS[(int(m.group(1)) * 7) % 4] if m else "A"


def skilled(request: ChatRequest) -> str:
    u = last_user_content(request)
    gold = gold_of(u)
    blob = json.dumps([request.model, request.to_dict()["messages"], request.seed])
    h = int.from_bytes(hashlib.sha256(blob.encode()).digest()[:8], "big")
    r = (h % 1000) / 1000
    if r >= 0.95:
        return "I cannot tell which option is right."
    wrong = [x for x in LETTERS if x != gold]
    if r < SKILL.get(request.model, 0.5):
        letter = gold
    else:
        letter = wrong[0] if (h >> 12) % 3 else wrong[1 + (h >> 16) % 2]
    conf = 0.5 + ((h >> 20) % 50) / 100
    return f"Some reasoning about the options.\nAnswer: {letter}\nConfidence: {conf:.2f}"
