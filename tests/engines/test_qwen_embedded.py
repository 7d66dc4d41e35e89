"""The real Qwen2.5-Coder-0.5B-Instruct through the embedded engine: a smoke test.

Only the 0.5B is loaded by the unit suite (the 1.5B is exercised by the demo and the
laptop-scale sweep, never here). The engine runs in its own process (`IsolatedEngine`).
"""

from __future__ import annotations

import pytest

pytest.importorskip(
    "llama_cpp", reason="llama-cpp-python is not installed (see scripts/setup.sh)"
)

from df_ray.engines import ChatRequest, Message, SamplingParams, make_spec
from tests.engines.isolated import IsolatedEngine

pytestmark = [pytest.mark.embedded]

QWEN05 = "qwen25-coder-0.5b-instruct"


def test_qwen_05b_answers_a_chat_request():
    eng = IsolatedEngine(make_spec(kind="embedded", model=QWEN05, n_threads=1, n_ctx=512))
    try:
        assert eng.prompt_format == "chat"  # the GGUF's own chat template
        req = ChatRequest(
            model=QWEN05,
            messages=(Message("system", "You are a concise assistant."),
                      Message("user", "What is the capital of France? Answer in one word.")),
            sampling=SamplingParams(temperature=0.0, max_tokens=16),
        )
        c = eng.generate([req])[0]
    finally:
        eng.close()
    assert c.error is None
    assert "Paris" in c.text
    assert "<|im_end|>" not in c.text and "<|im_start|>" not in c.text
    assert 0 < c.completion_tokens < 16  # stopped at the end of its turn, not at the cap
    assert c.prompt_tokens > 10
