"""The vLLM engine renders and tokenizes a prompt once for repeated messages (the agents of a
sample, Self-Consistency's samples, retries), keeping the most recent prompts. The engine's
own path is in the vLLM tier (tests/engines/test_vllm_cpu.py: the same prompt and seed give
the same text, first rendered and then from this cache); here, the cache's bookkeeping."""

from __future__ import annotations

from collections import OrderedDict

from df_ray.engines import vllm as vllm_engine
from df_ray.engines.base import ChatRequest, Message


class CountingTokenizer:
    """Encodes text as its characters' code points and counts the encodes."""

    def __init__(self) -> None:
        self.encodes = 0

    def apply_chat_template(self, conversation, add_generation_prompt, tokenize):
        return "".join(f"<{m['role']}>{m['content']}" for m in conversation) + "<assistant>"

    def encode(self, text, add_special_tokens=True):
        self.encodes += 1
        return [ord(c) for c in text]


def engine():
    e = object.__new__(vllm_engine.VLLMEngine)  # the cache's methods, no model behind them
    e.tokenizer, e.prompt_format, e._ids = CountingTokenizer(), "chat", OrderedDict()
    return e


def request(text: str, seed: int = 0) -> ChatRequest:
    return ChatRequest(model="m", messages=(Message("user", text),), seed=seed)


def test_repeated_messages_are_tokenized_once_and_the_oldest_go_first(monkeypatch):
    monkeypatch.setattr(vllm_engine, "PROMPT_IDS_CACHED", 2)
    e = engine()
    first = e._prompt_ids(request("a"))
    assert e._prompt_ids(request("a", seed=5)) == first  # another seed, same messages
    assert e.tokenizer.encodes == 1
    first.append(0)  # a caller's copy: the cached ids stay as they were
    assert e._prompt_ids(request("a")) == [ord(c) for c in "<user>a<assistant>"]
    e._prompt_ids(request("b"))
    e._prompt_ids(request("a"))  # a is now the most recent
    e._prompt_ids(request("c"))  # b, the least recent, goes
    assert e.tokenizer.encodes == 3
    assert list(e._ids) == [(request("a").messages, None), (request("c").messages, None)]
    e._prompt_ids(request("b"))
    assert e.tokenizer.encodes == 4


def test_a_request_for_chatml_is_its_own_prompt_on_a_model_without_a_template():
    from dataclasses import replace

    from df_ray.engines.completion_prompt import render_chatml, render_completion_prompt

    e = engine()
    e.prompt_format = "completion"
    r = request("a")
    cm = replace(r, no_template="chatml")
    assert e._prompt_ids(r) == [ord(c) for c in render_completion_prompt(r.messages)]
    assert e._prompt_ids(cm) == [ord(c) for c in render_chatml(r.messages)]
    assert e.tokenizer.encodes == 2  # the two renderings are two entries
