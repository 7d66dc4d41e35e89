"""Prompts for models without a chat template: df_ray's completion prompt, and ChatML as
Graph-of-Agents' ``generate_vllm`` writes it (UNITES-Lab/GoA ``utils.py``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from df_ray.engines.base import ChatRequest, Message
from df_ray.engines.completion_prompt import (
    CHATML_STOPS,
    COMPLETION_STOPS,
    render_chatml,
    render_without_template,
)


def test_chatml_of_a_plain_prompt_has_goas_system_turn():
    assert render_chatml((Message("user", "What is 2+2?"),)) == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
        "<|im_start|>assistant\n")


def test_chatml_keeps_a_requests_own_system_turn():
    msgs = (Message("system", "You select models."), Message("user", "Q"))
    assert render_chatml(msgs) == ("<|im_start|>system\nYou select models.<|im_end|>\n"
                                   "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n")


def test_the_rendering_and_its_stops_follow_the_request():
    msgs = (Message("user", "Q"),)
    assert render_without_template(msgs, "chatml") == (render_chatml(msgs), CHATML_STOPS)
    assert render_without_template(msgs)[1] == COMPLETION_STOPS
    assert render_without_template(msgs, "completion") == render_without_template(msgs)
    with pytest.raises(ValueError, match="no_template"):
        render_without_template(msgs, "llama2")


def test_a_request_without_it_keeps_its_key_and_one_with_it_is_another_call():
    r = ChatRequest(model="m", messages=(Message("user", "Q"),), seed=3)
    assert "no_template" not in r.to_dict()
    # the key of a request made before the field existed (sha256 over its dict as then)
    import hashlib
    import json

    old = {"messages": [{"content": "Q", "role": "user"}], "model": "m", "revision": None,
           "sampling": r.sampling.to_dict(), "seed": 3}
    blob = json.dumps(old, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    assert r.key() == hashlib.sha256(blob.encode()).hexdigest()
    cm = replace(r, no_template="chatml")
    assert cm.key() != r.key()
    assert ChatRequest.from_dict(cm.to_dict()) == cm
