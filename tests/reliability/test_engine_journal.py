"""A run SIGKILLed after its engines answered its agents' calls and before its batch could
end (its coordinator's calls held back), so before its stage wrote those answers: the
engines' journals hold every answered call, the rerun makes none of them again (only the
coordinator's, never answered), and its end folds the journals into a part."""

from __future__ import annotations

import pytest

from df_ray.pipeline.cache import GenerationCache
from df_ray.pipeline.cache.journal import journal_paths
from tests.helpers import (
    base_config,
    kill_group,
    run_to_end,
    start_and_wait,
    write_mmlu_goa,
    write_sweep,
)
from tests.reliability.responders import HOLD_ENV, read_call_log

pytestmark = pytest.mark.slow

N = 4
STARTUP_S = 420  # a loaded 2-core CI box can take minutes to start Ray


def test_answers_the_engines_gave_are_not_made_again_after_a_kill(tmp_path, monkeypatch):
    src = write_mmlu_goa(tmp_path / "mmlu_goa.json", N)
    base = base_config(tmp_path, src, batch_size=N, concurrency=1)
    base["backbones"]["bc"]["script"] = "tests.reliability.responders:logged_majority_held"
    sweep = write_sweep(tmp_path / "sweep.yaml", base, [{"name": "df"}])
    cache = tmp_path / "cache"
    hold = tmp_path / "hold"
    hold.touch()
    monkeypatch.setenv(HOLD_ENV, str(hold))
    args = ["run", "--config", str(sweep)]

    def answered_are_on_disk() -> bool:
        made = set(read_call_log(tmp_path / "calls1.log"))
        return len(made) == 3 * N and made <= set(GenerationCache(str(cache)).keys())

    p1 = start_and_wait(args, tmp_path / "run1.log", tmp_path / "calls1.log",
                        answered_are_on_disk, STARTUP_S, "the agents' answers on disk")
    kill_group(p1)
    answered = set(read_call_log(tmp_path / "calls1.log"))
    assert journal_paths(str(cache)), "no engine journal was written"
    # Run 1's replicas can outlive its driver for a moment: they keep holding (their hold
    # file stays until the end), so none of them answers a coordinator call the rerun makes.
    monkeypatch.setenv(HOLD_ENV, str(tmp_path / "no-hold"))

    rc = run_to_end(args, tmp_path / "run2.log", tmp_path / "calls2.log", STARTUP_S + 300)
    assert rc == 0, (tmp_path / "run2.log").read_text(errors="replace")[-3000:]
    again = read_call_log(tmp_path / "calls2.log")
    assert not set(again) & answered, "the rerun made calls its engines had answered"
    assert len(again) == len(set(again)) == N  # the coordinator's calls, never answered
    assert journal_paths(str(cache)) == []  # folded at the run's end
    assert set(GenerationCache(str(cache)).keys()) == answered | set(again)
    hold.unlink()
