from __future__ import annotations

import json
import multiprocessing as mp
import re
import time

import pytest

from df_ray.engines import ChatRequest, Engine, Message, SamplingParams, make_engine, make_spec
from df_ray.engines.scripted import (
    InjectedFault,
    ScriptedEngine,
    echo,
    majority,
    resolve_responder,
)


def req(prompt: str, *, model: str = "m", seed: int = 0, **sampling) -> ChatRequest:
    return ChatRequest(
        model=model,
        messages=(Message("system", "be brief"), Message("user", prompt)),
        sampling=SamplingParams(**sampling),
        seed=seed,
    )


def test_protocol_and_echo_counts():
    eng = ScriptedEngine("m")
    assert isinstance(eng, Engine)
    out = eng.generate([req("one two three"), req("four")])
    assert [c.text for c in out] == ["one two three", "four"]
    assert out[0].prompt_tokens == 2 + 3  # "be brief" + prompt
    assert out[0].completion_tokens == 3
    assert out[1].total_tokens == 3 + 1
    assert eng.count_tokens("a  b\nc ") == 3
    assert eng.n_calls == 2
    assert eng.prompts() == ["one two three", "four"]
    assert eng.batches == [2]
    assert eng.calls[0] == req("one two three")


def test_max_tokens_and_stop_are_honoured():
    eng = ScriptedEngine("m", "constant:alpha beta  gamma delta\nEND more")
    out = eng.generate([req("x", max_tokens=2), req("x", stop=("\nEND",)), req("x", stop=("zz",))])
    assert out[0].text == "alpha beta"
    assert out[0].completion_tokens == 2
    assert out[1].text == "alpha beta  gamma delta"
    assert out[2].text == "alpha beta  gamma delta\nEND more"


def test_mapping_responder_by_prompt_and_key():
    r = req("what?")
    eng = ScriptedEngine("m", {"hello": "hi", r.key(): "by key"})
    assert eng.generate([req("hello"), r])[0].text == "hi"
    assert eng.generate([r])[0].text == "by key"
    with pytest.raises(KeyError):
        eng.generate([req("unknown")])
    assert ScriptedEngine("m", {}, default="dflt").generate([req("u")])[0].text == "dflt"


def test_majority_is_deterministic_and_disagrees():
    prompt = "What is 17 + 25? Reason, then give the final answer in \\boxed{}."
    a = [majority(req(prompt, seed=s)) for s in range(40)]
    b = [majority(req(prompt, seed=s)) for s in range(40)]
    assert a == b
    answers = [re.search(r"\\boxed\{(.*?)\}", t).group(1) for t in a]
    counts = {x: answers.count(x) for x in set(answers)}
    assert 2 <= len(counts) <= 3
    top = max(counts.values())
    assert top >= 16  # a clear majority candidate
    assert all(re.search(r"Confidence: 0\.\d\d$", t) for t in a)
    # Different models disagree on some seeds.
    other = [majority(req(prompt, model="other", seed=s)) for s in range(40)]
    assert other != a


def test_majority_multiple_choice_gives_letters():
    prompt = "Pick one.\n(A) red\n(B) green\n(C) blue\n(D) black\nAnswer with the letter."
    letters = {
        re.search(r"\\boxed\{(.*?)\}", majority(req(prompt, seed=s))).group(1) for s in range(30)
    }
    assert letters <= {"A", "B", "C", "D"}
    assert len(letters) >= 2


def test_majority_two_options_answers_one_of_them():
    """With two option letters the third candidate (15% of seeds) is the second option."""
    prompt = "True or false?\n(A) true\n(B) false\nAnswer with the letter."
    letters = [re.search(r"\\boxed\{(.*?)\}", majority(req(prompt, seed=s))).group(1)
               for s in range(60)]
    assert set(letters) == {"A", "B"}


def test_resolve_responder_forms(tmp_path):
    assert resolve_responder("echo") is echo
    assert resolve_responder("constant:ok")(req("x")) == "ok"
    assert resolve_responder("tests.engines.test_scripted:_custom")(req("x")) == "custom x"
    r = req("from file")
    f = tmp_path / "s.jsonl"
    f.write_text(
        json.dumps({"key": r.key(), "response": "keyed"})
        + "\n\n"
        + json.dumps({"prompt": "p2", "response": "prompted"})
        + "\n"
    )
    fr = resolve_responder(f"from_file:{f}")
    assert fr(r) == "keyed"
    assert fr(req("p2")) == "prompted"
    with pytest.raises(KeyError):
        fr(req("p3"))
    with pytest.raises(ValueError, match="unknown scripted responder"):
        resolve_responder("nope")
    with pytest.raises(ValueError, match="cannot load"):
        resolve_responder("no_such_module_xyz:f")


def _custom(request: ChatRequest) -> str:
    return "custom " + request.messages[-1].content


def test_raise_on_nth_call():
    eng = ScriptedEngine("m", raise_on_call=3)
    eng.generate([req("a"), req("b")])
    with pytest.raises(InjectedFault, match="call 3"):
        eng.generate([req("c")])
    assert eng.generate([req("d")])[0].text == "d"  # only the 3rd request fails


def test_fault_marker_fires_once(tmp_path):
    marker = tmp_path / "fired"
    eng = ScriptedEngine("m", raise_on_call=1, fault_marker=marker)
    with pytest.raises(InjectedFault):
        eng.generate([req("a")])
    assert marker.exists()
    again = ScriptedEngine("m", raise_on_call=1, fault_marker=marker)  # "restarted worker"
    assert again.generate([req("a")])[0].text == "a"


def test_hang_on_nth_call():
    eng = ScriptedEngine("m", hang_on_call=2, hang_s=0.3)
    t0 = time.monotonic()
    eng.generate([req("a")])
    assert time.monotonic() - t0 < 0.2
    t0 = time.monotonic()
    assert eng.generate([req("b")])[0].text == "b"
    assert time.monotonic() - t0 >= 0.3


def _exit_worker(path):
    eng = ScriptedEngine("m", exit_on_call=2, exit_code=23)
    with open(path, "a") as f:
        f.write(eng.generate([req("a")])[0].text + "\n")
    eng.generate([req("b")])
    with open(path, "a") as f:
        f.write("not reached\n")


def test_exit_on_nth_call_kills_the_process(tmp_path):
    out = tmp_path / "out.txt"
    p = mp.get_context("spawn").Process(target=_exit_worker, args=(str(out),))
    p.start()
    p.join(60)
    assert p.exitcode == 23
    assert out.read_text() == "a\n"


def test_context_length_error_completion():
    eng = ScriptedEngine("m", max_prompt_tokens=4)
    ok, bad = eng.generate([req("a b"), req("a b c d e")])
    assert ok.error is None and ok.text == "a b"
    assert bad.text == "" and bad.completion_tokens == 0
    assert bad.prompt_tokens == 7
    assert bad.error.startswith("context_length_exceeded")


def test_make_engine_scripted_from_spec(tmp_path):
    spec = make_spec(
        kind="scripted",
        model="agent-a",
        script="majority",
        max_model_len=50,
        engine_args={"raise_on_call": 2},
    )
    eng = make_engine(spec)
    assert isinstance(eng, ScriptedEngine)
    assert eng.model == "agent-a"
    assert eng.max_prompt_tokens == 50
    assert "\\boxed{" in eng.generate([req("q?")])[0].text
    with pytest.raises(InjectedFault):
        eng.generate([req("q?")])
    assert make_engine({"kind": "scripted", "model": "x"}).generate([req("hey")])[0].text == "hey"
