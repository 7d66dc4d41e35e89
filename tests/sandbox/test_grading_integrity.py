"""A verdict no answer can forge: through the real grading path (parse, then
``HumanEvalTask.grade`` at strict isolation, then ``score_outcome``), an answer that tries to
turn its own grade into a sandbox error (sandbox-like text on stderr, memory held where no
process owns it so the memory limit's killer looks for a victim, a lowered OOM priority)
is a failed answer, and the sample keeps its final grade and every other agent's grade."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from df_ray.core.parsing import parse
from df_ray.evaluation.scoring import score, score_outcome
from df_ray.methods.base import MethodContext, Outcome, SampleState
from df_ray.sandbox import plan, run_tests
from df_ray.tasks.base import GradingUnavailable
from df_ray.tasks.humaneval import HumanEvalTask

pytestmark = pytest.mark.skipif(plan("strict").error is not None,
                                reason="strict sandbox unavailable: " + str(plan("strict").error))

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
MB = 1024 * 1024
LIMIT_MB = 160

CORRECT = "def add(a, b):\n    return a + b\n"

#: Writes what a sandbox failure would print, holds memory in the sandbox's IPC namespace
#: (no process's, so killing the program frees none of it), tries to lower its own OOM
#: priority and to become dumpable again, then keeps allocating until the limit strikes.
SABOTAGE = f"""
import ctypes, os, sys
sys.stderr.write("bwrap: Can't mount proc on /newroot/proc: Operation not permitted\\n")
sys.stderr.write("sandbox setup error: OSError('forged')\\n")
sys.stderr.flush()
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE 1
for v in ("0", "-1000"):
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write(v)
    except OSError:
        pass
libc.shmat.restype = ctypes.c_void_p
size = {(LIMIT_MB - 24) * MB}
sid = libc.shmget(0, ctypes.c_size_t(size), 0o1000 | 0o600)
addr = libc.shmat(sid, None, 0)
ctypes.memset(addr, 1, size)
libc.shmdt(ctypes.c_void_p(addr))
hold = []
while True:
    hold.append(bytearray(4 * {MB}))
def add(a, b):
    return a + b
"""


#: Takes every process slot of the sandbox at once (a launcher that forked the tests' process
#: after the program started could not), writing sandbox-like text; its ``add`` is right.
FORK_EXHAUSTION = """
import os, sys, time
sys.stderr.write("bwrap: clone: Resource temporarily unavailable\\n")
sys.stderr.flush()
for _ in range(1000):
    try:
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
    except OSError:
        break
def add(a, b):
    return a + b
"""


def _sample(task: HumanEvalTask):
    return next(s for s in task.load("test", source=str(FIXTURES / "humaneval.jsonl"))
                + task.load("calibration", source=str(FIXTURES / "humaneval.jsonl"))
                if s.meta["entry_point"] == "add")


def _obs(task, sample, agent: str, code: str):
    o = parse(f"```python\n{code}```\nConfidence: 0.9", task.parse_spec(sample), agent)
    assert o.valid, o
    return o


def test_a_sabotaging_answer_fails_and_the_sample_keeps_its_grades():
    task = HumanEvalTask(isolation="strict", memory_mb=LIMIT_MB, timeout_s=30)
    sample = _sample(task)
    good = _obs(task, sample, "good", CORRECT)
    bad = _obs(task, sample, "saboteur", SABOTAGE)
    grade = task.grade(sample, bad)  # raises GradingUnavailable if it became an error
    assert not grade.correct
    assert grade.detail.startswith(("failed", "timeout")), grade
    assert "memory limit" in grade.detail, grade  # the effect: the limit struck
    ctx = MethodContext(task=task, agents=[], coordinator=None, settings=None)
    row = score(SampleState(sample), _Fixed(Outcome(final=good,
                                                    agent_observations=[good, bad])), ctx)
    detail = json.loads(row.detail)
    assert "sample_error" not in detail["extra"], detail
    assert row.correct and row.n_errors == 0
    assert detail["agent_correct"] == {"good": True, "saboteur": False}


def test_forged_sandbox_text_is_no_error_and_control_characters_are_stripped():
    program = ("import sys\n"
               "sys.stderr.write('bwrap: execvp: No such file\\n\\x1b[2J\\x1b]0;owned\\x07\\r')\n"
               "sys.stdout.write('\\x1b[31mred\\x9b\\u202e')\n"
               "import os\nos._exit(70)\n")
    res = run_tests(program, tests="def check(c):\n    assert c(1) == 1\n", entry_point="f")
    assert res.status == "failed", res
    for text in (res.stdout, res.stderr, res.detail):
        assert not any(c in text for c in "\x1b\x07\r\x9b\u202e"), repr(text)
    assert "bwrap: execvp" in res.stderr  # kept, as text


def test_a_sandbox_that_never_started_is_still_an_error(monkeypatch):
    # the launcher's own start report is what counts: no start, no verdict
    from df_ray.sandbox import policy

    monkeypatch.setenv("DF_RAY_SANDBOX_NO_CGROUP", "1")
    policy.reset_cache()
    try:
        res = run_tests(CORRECT, tests="def check(c):\n    assert c(1, 2) == 3\n",
                        entry_point="add")
    finally:
        monkeypatch.delenv("DF_RAY_SANDBOX_NO_CGROUP")
        policy.reset_cache()
    assert res.status == "error", res


class _Fixed:
    """A method whose outcome is given (the logic under test is scoring's, above it)."""

    result_columns: dict | None = None

    def __init__(self, outcome: Outcome):
        self.outcome = outcome

    def finish(self, state, ctx):
        return self.outcome


class _OneUngradable:
    """The real task, with an environment fault for one program (as a sandbox that could
    not start would raise)."""

    def __init__(self, task: HumanEvalTask, broken: str):
        self.task, self.broken = task, broken

    def __getattr__(self, name):
        return getattr(self.task, name)

    def grade(self, sample, answer):
        if answer is not None and answer.extracted == self.broken:
            raise GradingUnavailable("the sandbox could not start")
        return self.task.grade(sample, answer)


def test_an_answer_that_cannot_be_graded_removes_no_other_grade():
    task = HumanEvalTask(isolation="strict")
    sample = _sample(task)
    good = _obs(task, sample, "good", CORRECT)
    other = _obs(task, sample, "other", "def add(a, b):\n    return a - b\n")
    ctx = MethodContext(task=_OneUngradable(task, other.extracted), agents=[],
                        coordinator=None, settings=None)
    row = score_outcome(SampleState(sample), Outcome(final=good,
                                                     agent_observations=[good, other]), ctx)
    detail = json.loads(row.detail)
    assert row.correct
    assert detail["agent_correct"] == {"good": True}  # no verdict on the other: not "wrong"
    assert "could not start" in detail["agent_grade_detail"]["other"]
    assert detail["ungraded"]
    # the final answer itself ungradable: then (only then) the sample is an error row
    ctx = MethodContext(task=_OneUngradable(task, good.extracted), agents=[],
                        coordinator=None, settings=None)
    row = score(SampleState(sample), _Fixed(Outcome(final=good,
                                                    agent_observations=[good, other])), ctx)
    assert "sample_error" in json.loads(row.detail)["extra"]


def test_taking_every_process_slot_is_no_error():
    task = HumanEvalTask(isolation="strict", timeout_s=30)
    sample = _sample(task)
    grade = task.grade(sample, _obs(task, sample, "a", FORK_EXHAUSTION))
    assert grade.detail.startswith(("passed", "failed", "timeout")), grade
