"""The embedded engine's batched decoding (parallel sequences in one llama.cpp context) against
its one-request-at-a-time path (``engine_args: {n_parallel: 1}``), with the real packaged
models. Needs llama-cpp-python and the model packages; skipped when llama_cpp is missing. Each
engine runs in its own process (`IsolatedEngine`), as in test_embedded.py.
"""

from __future__ import annotations

import pytest

pytest.importorskip(
    "llama_cpp", reason="llama-cpp-python is not installed (see .ci/install-embedded.sh)"
)

import time

from df_ray.engines import ChatRequest, Message, SamplingParams, make_spec
from tests.engines.isolated import IsolatedEngine

pytestmark = [pytest.mark.embedded, pytest.mark.slow]

SMOL = "smollm2-135m-instruct"
GEMMA = "gemma3-270m"

PROMPTS = [
    "What is the capital of France?",
    "List the numbers from 1 to 20.",
    "Write one sentence about the ocean.",
    "What is 17 times 23? Explain briefly.",
    "Name three prime numbers larger than 50 and say why they are prime. Be thorough and "
    "careful, and show how you checked each of them.",
    "Hi",
    "Which is larger, 2/3 or 0.65?",
    "Translate 'good morning' into French, Spanish and German.",
    "If a train travels 60 km in 45 minutes, what is its speed in km/h?",
    "Say hello.",
]


def ask(model, prompt, *, seed=0, temperature=0.0, max_tokens=24, stop=()):
    return ChatRequest(
        model=model,
        messages=(Message("system", "You are a concise assistant."), Message("user", prompt)),
        sampling=SamplingParams(temperature=temperature, max_tokens=max_tokens, stop=tuple(stop)),
        seed=seed,
    )


def engine(model, n_parallel, **kw) -> IsolatedEngine:
    return IsolatedEngine(
        make_spec(
            kind="embedded", model=model, n_threads=1, engine_args={"n_parallel": n_parallel}, **kw
        ),
        timeout_s=1800,  # one generate call on a loaded 2-core machine
    )


@pytest.fixture(scope="module")
def smol_seq():
    eng = engine(SMOL, 1)
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def smol_batched():
    eng = engine(SMOL, 4)
    yield eng
    eng.close()


def fields(cs):
    return [(c.text, c.prompt_tokens, c.completion_tokens, c.error) for c in cs]


def test_greedy_batched_equals_sequential_mixed_prompts_and_lengths(smol_seq, smol_batched):
    # 10 requests through 4 slots: sequences finish at different steps and waiting requests
    # are admitted while others are mid-generation.
    reqs = [ask(SMOL, p, max_tokens=4 + 4 * (i % 5)) for i, p in enumerate(PROMPTS)]
    want = smol_seq.generate(reqs)
    got = smol_batched.generate(reqs)
    assert fields(got) == fields(want)
    assert all(c.error is None and c.completion_tokens > 0 for c in got)
    assert len({c.completion_tokens for c in got}) > 2  # really mixed lengths


def test_gemma_completion_format_batched_equals_sequential():
    reqs = [ask(GEMMA, p, max_tokens=4 + 4 * (i % 3)) for i, p in enumerate(PROMPTS[:5])]
    seq, bat = engine(GEMMA, 1), engine(GEMMA, 3)
    try:
        assert bat.prompt_format == "completion"
        assert fields(bat.generate(reqs)) == fields(seq.generate(reqs))
    finally:
        seq.close()
        bat.close()


def test_sampled_output_does_not_depend_on_the_batch(smol_seq, smol_batched):
    q = ask(SMOL, "Write one short sentence about the sea.", seed=11, temperature=1.0)
    alone = smol_batched.generate([q])[0]
    mixed = smol_batched.generate(
        [ask(SMOL, "Count to three.", seed=5, temperature=0.7, max_tokens=4), q,
         ask(SMOL, "Say hello.", seed=2, temperature=0.9)]
    )[1]
    assert alone == mixed
    assert alone == smol_seq.generate([q])[0]  # same sampler chain and seed as sequential
    texts = {
        c.text
        for c in smol_batched.generate(
            [ask(SMOL, q.messages[1].content, seed=s, temperature=1.0) for s in range(3)]
        )
    }
    assert len(texts) >= 2  # seeds matter


def test_stop_strings_and_max_tokens_per_sequence(smol_seq, smol_batched):
    reqs = [
        ask(SMOL, "What is the capital of France?", stop=["Paris"]),
        ask(SMOL, "List the numbers from 1 to 20.", max_tokens=5),
        ask(SMOL, "List the numbers from 1 to 20.", max_tokens=40, stop=["7"]),
        ask(SMOL, "What is the capital of France?", max_tokens=30),
        ask(SMOL, "List the numbers from 1 to 20.", max_tokens=3),
    ]
    got = smol_batched.generate(reqs)
    seq = smol_seq.generate(reqs)
    assert fields(got) == fields(seq)
    assert "Paris" not in got[0].text
    assert got[1].completion_tokens == 5
    assert "7" not in got[2].text and got[2].completion_tokens < 40
    assert "Paris" in got[3].text
    assert got[4].completion_tokens == 3
    # why each ended, as llama.cpp's create_completion says it (the sequential engine)
    assert [c.finish_reason for c in got] == [c.finish_reason for c in seq]
    assert [got[i].finish_reason for i in (0, 1, 2, 4)] == ["stop", "length", "stop", "length"]


def test_an_over_long_prompt_fails_alone():
    seq, bat = engine(SMOL, 1, n_ctx=256), engine(SMOL, 3, n_ctx=256)
    assert bat.n_ctx == 256
    long = ask(SMOL, "word " * 400, max_tokens=8)
    reqs = [ask(SMOL, "Hi", max_tokens=6), long, ask(SMOL, "Say hello.", max_tokens=6),
            ask(SMOL, "What is the capital of France?", max_tokens=240)]
    try:
        got = bat.generate(reqs)
        assert fields(got) == fields(seq.generate(reqs))
    finally:
        seq.close()
        bat.close()
    assert got[1].error is not None and got[1].error.startswith("context_length_exceeded")
    assert got[1].text == "" and got[1].prompt_tokens > 256 and got[1].completion_tokens == 0
    for c in (got[0], got[2], got[3]):
        assert c.error is None and c.text
    # max_tokens is cut to what the context leaves, as in the sequential engine.
    assert got[3].prompt_tokens + got[3].completion_tokens <= 256


def _long_then_short(engine, long, short):
    """In the engine's process: submit ``long``, and ``short`` once ``long`` is decoding."""
    start = engine.steps  # (the engine has run earlier tests' steps)
    f_long = engine.submit(long)
    while engine.steps < start + 3:
        time.sleep(0.001)
    f_short = engine.submit(short)
    return f_short.result(), f_long.result(), list(engine.trace)


def test_a_request_queued_during_a_long_generation_is_admitted_before_it_ends(smol_batched):
    """Continuous batching: a request submitted while another is being decoded takes a free
    sequence slot at the next step, not after the running generation (shown by the engine's
    admission and finish steps, and by which finishes first)."""
    long = ask(SMOL, "Write a long story about a dragon who learns to read.", max_tokens=200)
    short = ask(SMOL, "Say hello.", max_tokens=4)
    s, lg, trace = smol_batched.run(_long_then_short, long, short)
    assert lg.completion_tokens > 20 and s.completion_tokens <= 4
    admits = {i: step for ev, i, step in trace if ev == "admit"}
    finishes = {i: step for ev, i, step in trace if ev == "finish"}
    long_id, short_id = sorted(admits)[-2:]
    assert admits[short_id] > admits[long_id] >= 0
    assert admits[short_id] < finishes[long_id]  # admitted while the long one ran
    assert finishes[short_id] < finishes[long_id]  # and finished first


def test_ignore_eos_is_honoured_batched_and_refused_alone(smol_seq, smol_batched):
    """The batched decode loop honours ignore_eos (it does not stop at an end-of-generation
    token for that request: it runs to max_tokens); llama.cpp's one-at-a-time call cannot,
    so there the request gets a final unsupported_sampling error. Either way its batch-mate
    gets its answer."""
    import dataclasses

    plain = ask(SMOL, "Say hello.", max_tokens=4)
    odd = dataclasses.replace(plain, sampling=dataclasses.replace(plain.sampling,
                                                                  ignore_eos=True))
    ok, refused = smol_seq.generate([plain, odd])
    assert ok.error is None and ok.completion_tokens >= 1
    assert refused.error.startswith("unsupported_sampling: the embedded engine")
    assert refused.completion_tokens == 0
    ok, long = smol_batched.generate([plain, odd])
    assert ok.error is None and ok.completion_tokens >= 1
    assert long.error is None and long.completion_tokens == 4
