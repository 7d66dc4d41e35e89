"""The embedded engine with the REAL packaged GGUF models (SmolLM2-135M-Instruct, Gemma 3 270M).

Needs llama-cpp-python and the model packages (``.ci/install-embedded.sh``); skipped only when
llama_cpp itself is not importable. Each engine runs in its own process (`IsolatedEngine`):
a native crash fails the test that hit it, with the signal, not the whole session.
"""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip(
    "llama_cpp", reason="llama-cpp-python is not installed (see .ci/install-embedded.sh)"
)

from df_ray.engines import ChatRequest, Engine, EngineSpec, Message, SamplingParams, make_spec
from df_ray.engines.completion_prompt import render_chatml, render_completion_prompt
from df_ray.engines.llama_cpp import model_path
from tests.engines.isolated import IsolatedEngine

pytestmark = [pytest.mark.embedded, pytest.mark.slow]

SMOL = "smollm2-135m-instruct"
GEMMA = "gemma3-270m"


def ask(
    model: str, prompt: str, *, seed: int = 0, temperature: float = 0.7, max_tokens=24, stop=()
):
    return ChatRequest(
        model=model,
        messages=(Message("system", "You are a concise assistant."), Message("user", prompt)),
        sampling=SamplingParams(temperature=temperature, max_tokens=max_tokens, stop=tuple(stop)),
        seed=seed,
    )


def make_engine(spec: EngineSpec) -> IsolatedEngine:
    return IsolatedEngine(spec)


@pytest.fixture(scope="module")
def smol():
    eng = make_engine(make_spec(kind="embedded", model=SMOL, n_threads=1))
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def gemma():
    eng = make_engine(make_spec(kind="embedded", model=GEMMA, n_threads=1))
    yield eng
    eng.close()


def test_model_files_are_located():
    p = model_path(SMOL)
    assert p.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and p.stat().st_size > 50_000_000
    g = model_path(GEMMA)
    assert g.name == "gemma-3-270m-q4_k_m.gguf" and g.stat().st_size > 200_000_000
    assert model_path(GEMMA) == g  # cached, not re-assembled


def test_smollm2_chat_answers(smol):
    assert isinstance(smol, Engine)
    assert smol.prompt_format == "chat"
    out = smol.generate([ask(SMOL, "What is the capital of France?", temperature=0.0)])
    c = out[0]
    assert c.error is None
    assert "Paris" in c.text
    assert 0 < c.completion_tokens <= 24
    assert c.prompt_tokens > 10


def test_gemma_completion_answers(gemma):
    assert gemma.prompt_format == "completion"
    c = gemma.generate([ask(GEMMA, "What is the capital of France?", temperature=0.0)])[0]
    assert c.error is None
    assert "Paris" in c.text
    assert "Question:" not in c.text
    assert 0 < c.completion_tokens <= 24


def test_token_counts_match_the_model_tokenizer(smol, gemma):
    text = "The quick brown fox jumps over the lazy dog."
    assert smol.count_tokens(text) == len(smol.llm.tokenize(text.encode(), add_bos=False))
    assert gemma.count_tokens(text) == len(gemma.llm.tokenize(text.encode(), add_bos=False))
    assert smol.count_tokens("") == 0
    # Completion mode: the prompt tokens are exactly the rendered prompt's tokens (with BOS).
    r = ask(GEMMA, "Name a colour.", temperature=0.0, max_tokens=8)
    c = gemma.generate([r])[0]
    prompt = render_completion_prompt(r.messages)
    assert c.prompt_tokens == len(gemma.llm.tokenize(prompt.encode(), add_bos=True, special=True))
    # A request asking for ChatML (GoA's calls) gets it on the model without a template: its
    # prompt tokens are the ChatML text's, and the answer ends at the end of the turn.
    cm = dataclasses.replace(r, no_template="chatml")
    c = gemma.generate([cm])[0]
    chatml = render_chatml(cm.messages)
    assert chatml.startswith("<|im_start|>system\n")  # the request's own system turn
    assert c.prompt_tokens == len(gemma.llm.tokenize(chatml.encode(), add_bos=True, special=True))
    assert c.prompt_tokens != len(gemma.llm.tokenize(prompt.encode(), add_bos=True, special=True))
    assert "<|im_end|>" not in c.text and "<|im_start|>" not in c.text
    # ... and the model with a chat template ignores it.
    sr = ask(SMOL, "Name a colour.", temperature=0.0, max_tokens=8)
    assert smol.prompt_tokens(sr) == smol.prompt_tokens(dataclasses.replace(sr, no_template="chatml"))
    # Generated tokens re-tokenize to (nearly) the same count.
    for eng, model in ((smol, SMOL), (gemma, GEMMA)):
        c = eng.generate([ask(model, "Say hello.", temperature=0.0, max_tokens=12)])[0]
        # usage counts every generated token, including an end-of-turn token or a trimmed
        # stop sequence, so it may exceed the re-tokenized text by a few.
        assert eng.count_tokens(c.text) - 1 <= c.completion_tokens <= 12
        assert c.prompt_tokens == eng.prompt_tokens(ask(model, "Say hello.", temperature=0.0))


def test_seed_determinism(smol):
    q = "Write one short sentence about the sea."
    a = smol.generate([ask(SMOL, q, seed=11, temperature=1.0, max_tokens=12)])[0].text
    # The same request later, after another request, gives the same text.
    others = smol.generate(
        [
            ask(SMOL, "Count to three.", seed=5, max_tokens=4),
            ask(SMOL, q, seed=11, temperature=1.0, max_tokens=12),
        ]
    )
    assert others[1].text == a
    texts = {
        smol.generate([ask(SMOL, q, seed=s, temperature=1.0, max_tokens=12)])[0].text
        for s in range(3)
    }
    assert len(texts | {a}) >= 2  # seeds matter


def test_stop_and_max_tokens(smol):
    c = smol.generate([ask(SMOL, "List the numbers from 1 to 20.", temperature=0.0, max_tokens=6)])[
        0
    ]
    assert c.completion_tokens <= 6
    assert c.finish_reason == "length"  # llama.cpp's own reason: cut off at max_tokens
    c = smol.generate(
        [ask(SMOL, "What is the capital of France?", temperature=0.0, stop=["Paris"])]
    )[0]
    assert "Paris" not in c.text


def test_context_length_is_an_error_completion():
    eng = make_engine(make_spec(kind="embedded", model=SMOL, n_ctx=64, n_threads=1))
    assert eng.n_ctx == 256  # llama.cpp pads the context to a multiple of 256
    long = ask(SMOL, "word " * 400, max_tokens=8)
    ok, bad = eng.generate([ask(SMOL, "Hi", max_tokens=4), long])
    assert ok.error is None
    assert bad.error is not None and bad.error.startswith("context_length_exceeded")
    assert bad.text == "" and bad.prompt_tokens > 256


def test_chat_format_requires_a_template():
    with pytest.raises(ValueError, match="no chat template"):
        make_engine(make_spec(kind="embedded", model=GEMMA, prompt_format="chat", n_threads=1))
