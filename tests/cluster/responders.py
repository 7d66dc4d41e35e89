"""Scripted answers for the shared-service test, importable by Serve replicas.

``logged_majority_slow`` is the builtin ``majority`` responder that logs every call it answers
(``DF_RAY_CALL_LOG``, see tests/reliability/responders.py) and sleeps when the request's
system prompt asks for it with ``[latency <seconds>]``: a sweep can be made slow enough to
kill a node under it without redeploying the service.
"""

from __future__ import annotations

import re
import time

from df_ray.engines.base import ChatRequest
from tests.reliability.responders import logged_majority

_LATENCY = re.compile(r"\[latency ([0-9.]+)\]")


def logged_majority_slow(request: ChatRequest) -> str:
    for m in request.messages:
        if m.role == "system":
            hit = _LATENCY.search(m.content)
            if hit:
                time.sleep(float(hit.group(1)))
    return logged_majority(request)
