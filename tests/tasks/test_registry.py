from __future__ import annotations

import pytest

from df_ray.tasks import TASKS, get_task
from df_ray.tasks.base import Task


def test_all_tasks_build_and_follow_the_protocol():
    assert TASKS == ("math", "humaneval", "mmlu_pro", "gpqa", "finqa", "legalbench", "file")
    kinds = {}
    for name in TASKS:
        t = get_task(name)
        assert isinstance(t, Task)
        assert t.name == name
        kinds[name] = t.kind
        assert "Confidence" in t.answer_instructions()
    assert kinds == {"math": "math", "humaneval": "code", "mmlu_pro": "choice",
                     "gpqa": "choice", "finqa": "finqa", "legalbench": "label", "file": "choice"}


def test_unknown_task_lists_valid_names():
    with pytest.raises(KeyError) as e:
        get_task("mmlu")
    msg = str(e.value)
    for name in TASKS:
        assert name in msg


def test_options_reach_the_constructor():
    assert get_task("finqa", test_size=7).test_size == 7
    assert get_task("MMLU-Pro").name == "mmlu_pro"
