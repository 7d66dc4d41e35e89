"""A request's key and JSON form are those cached generations were written under: the keys
below were computed by the implementation before the key was memoised and ``to_dict`` built
by hand (``dataclasses.asdict``), so every cache written before still replays."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from df_ray.engines import ChatRequest, Message, SamplingParams

REQUESTS = {
    "plain": ChatRequest(model="m", messages=(Message("user", "hi"),)),
    "full": ChatRequest(
        model="org/m-7b",
        messages=(Message("system", "Be brief."), Message("user", "2+2? é ✓"),
                  Message("assistant", "4"), Message("user", "sure?")),
        sampling=SamplingParams(temperature=0.0, top_p=0.9, max_tokens=64,
                                stop=("\n\n", "END")),
        seed=11, revision="abc123", backbone="b2", no_template="chatml"),
    "eos": ChatRequest(model="m", messages=(Message("user", "x"),),
                       sampling=SamplingParams(ignore_eos=True, max_tokens=5), backbone="b1"),
    "surrogate": ChatRequest(model="m", messages=(Message("user", "quote: \ud800"),), seed=2),
}

KEYS = {
    "plain": "9b9935ce35c86ab8bbae93c467ac92555abec2576fb4a5258218d49c9908cc10",
    "full": "a3468e512d811a638fb73203a0487a20db100f27951eeb286ff6d272e0519a34",
    "eos": "b4c3b598243be4dbf933dbf901dec2266054f4b43e1205700c8753e473de63b8",
    "surrogate": "3766a73046fad17ea92a778e51aa1711cdba4004e8afde46e80348dfe4855f5e",
}


@pytest.mark.parametrize("name", sorted(REQUESTS))
def test_keys_are_those_written_before(name):
    r = REQUESTS[name]
    assert r.key() == KEYS[name]
    assert r.key() == KEYS[name]  # the memoised key is the same
    assert ChatRequest.from_dict(r.to_dict()).key() == KEYS[name]


def test_to_dict_is_the_former_json_form():
    d = REQUESTS["full"].to_dict()
    assert list(d) == ["model", "messages", "sampling", "seed", "revision", "backbone",
                       "no_template"]
    assert d["messages"][1] == {"role": "user", "content": "2+2? é ✓"}
    assert d["sampling"] == {"temperature": 0.0, "top_p": 0.9, "max_tokens": 64,
                             "stop": ["\n\n", "END"]}
    assert list(REQUESTS["plain"].to_dict()) == ["model", "messages", "sampling", "seed",
                                                 "revision"]


def test_the_memo_is_not_content():
    a, b = REQUESTS["plain"], ChatRequest(model="m", messages=(Message("user", "hi"),))
    a.key()
    assert a == b and hash(a) == hash(b)
    assert "_key" not in a.to_dict() and "_key" not in repr(a)
    other = dataclasses.replace(a, seed=5)  # a changed request is keyed again
    assert other.key() != a.key()
    assert pickle.loads(pickle.dumps(a)).key() == KEYS["plain"]
