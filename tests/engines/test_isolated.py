"""A native crash in an engine under test fails that test, with the signal, and the next
test gets a fresh engine process (`tests.engines.isolated.IsolatedEngine`)."""

from __future__ import annotations

import pytest

from df_ray.engines import ChatRequest, Message, make_spec
from tests.engines.isolated import EngineProcessDied, IsolatedEngine


def ask(text: str) -> ChatRequest:
    return ChatRequest(model="m", messages=(Message("user", text),))


@pytest.mark.parametrize("sig, words", [("SIGILL", "Illegal instruction"),
                                        ("SIGSEGV", "Segmentation fault")])
def test_a_signal_in_the_engine_fails_the_call_with_its_name(sig, words):
    eng = IsolatedEngine(make_spec(kind="scripted", model="m", script="echo",
                                   engine_args={"signal_on_call": 2, "signal_name": sig}))
    try:
        assert eng.generate([ask("hello there")])[0].text == "hello there"
        assert eng.prompt_tokens(ask("one two three")) == 3
        with pytest.raises(EngineProcessDied, match=rf"killed by {sig} \({words}\) in "
                                                    r"scripted\.py:\d+ in _one"):
            eng.generate([ask("this one crashes")])
        # The next call starts a fresh process (its call counter starts again).
        assert eng.generate([ask("again")])[0].text == "again"
        assert eng.model == "m" and eng.n_calls == 1
    finally:
        eng.close()


def test_start_errors_come_back_as_themselves():
    with pytest.raises(KeyError, match="SIGNOPE"):
        IsolatedEngine(make_spec(kind="scripted", model="m", engine_args={
            "signal_name": "SIGNOPE"}))
