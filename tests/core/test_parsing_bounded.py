"""Every math parse is bounded in time on any thread; a timed-out answer is invalid, with why."""

from __future__ import annotations

import threading
import time

import pytest

from df_ray.core.parsing import _bounded, math_kind, parse
from df_ray.core.parsing._bounded import ParseTimeout, call_bounded
from df_ray.core.types import ParseSpec


def _in_thread(fn, *args, **kwargs):
    out: dict = {}

    def run() -> None:
        t0 = time.monotonic()
        try:
            out["value"] = fn(*args, **kwargs)
        except BaseException as e:
            out["error"] = e
        out["seconds"] = time.monotonic() - t0

    t = threading.Thread(target=run)
    t.start()
    t.join(120)
    assert not t.is_alive(), "the bounded call did not return"
    return out


def test_main_thread_uses_an_alarm() -> None:
    t0 = time.monotonic()
    with pytest.raises(ParseTimeout):
        call_bounded(time.sleep, 5, timeout_s=0.2)
    assert time.monotonic() - t0 < 2


@pytest.mark.slow  # waits out a helper process's time limit
def test_worker_thread_kills_an_overrunning_helper() -> None:
    call_bounded_warm = _in_thread(call_bounded, abs, -3, timeout_s=60)  # starts a helper
    assert call_bounded_warm.get("value") == 3, call_bounded_warm
    out = _in_thread(lambda: call_bounded(time.sleep, 30, timeout_s=0.5))
    assert isinstance(out.get("error"), ParseTimeout), out
    assert out["seconds"] < 5
    # the helper that overran is gone; the next call gets a fresh one and works
    assert _in_thread(call_bounded, abs, -4, timeout_s=60).get("value") == 4


def test_worker_thread_propagates_errors() -> None:
    out = _in_thread(call_bounded, int, "not a number", timeout_s=60)
    assert isinstance(out.get("error"), ValueError), out


@pytest.mark.slow  # waits out math-verify's time limit
def test_timed_out_math_answer_is_invalid_with_reason(monkeypatch) -> None:
    monkeypatch.setattr(math_kind, "SYMPY_TIMEOUT_S", 1e-4)
    math_kind.math_key.cache_clear()
    try:
        text = "So \\boxed{\\frac{x^{3}-1}{x-1}+\\sqrt{18}}"
        for where in ("main", "thread"):
            obs = parse(text, ParseSpec("math")) if where == "main" else \
                _in_thread(parse, text, ParseSpec("math"))["value"]
            assert not obs.valid, (where, obs)
            assert obs.reason.startswith("timeout"), (where, obs.reason)
            assert obs.rule == "boxed" and obs.extracted
            math_kind.math_key.cache_clear()
    finally:
        math_kind.math_key.cache_clear()


@pytest.mark.parametrize("answer", [
    "2^{2^{2^{2^{2^{2}}}}}",
    "\\frac{" * 60 + "1" + "}{2}" * 60,
    "(" * 300 + "x" + ")" * 300,
    "10^{10^{10}} + x^{99999}",
    "\\sqrt{" * 80 + "2" + "}" * 80,
])
@pytest.mark.slow  # each answer waits out its helper process's time limit
def test_heavy_answers_are_bounded_off_the_main_thread(answer: str) -> None:
    math_kind.math_key.cache_clear()
    out = _in_thread(parse, f"The final answer is $\\boxed{{{answer}}}$", ParseSpec("math"))
    assert "value" in out, out
    # helper start-up is not counted in the bound; the call itself is
    assert out["seconds"] < math_kind.SYMPY_TIMEOUT_S + _bounded.STARTUP_TIMEOUT_S
    obs = out["value"]
    assert obs.valid or obs.reason


@pytest.mark.slow  # helper processes for many threads at once
def test_many_threads_at_once() -> None:
    answers = [f"\\boxed{{\\frac{{{i}}}{{{i + 1}}} + \\sqrt{{{i}}}}}" for i in range(2, 10)]
    results: list = [None] * len(answers)

    def work(i: int) -> None:
        results[i] = parse(answers[i], ParseSpec("math"))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(answers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert all(r is not None and r.valid for r in results), results
