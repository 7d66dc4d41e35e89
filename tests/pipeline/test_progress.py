"""The progress line of a running pipeline (df_ray.pipeline.progress): what it shows on a
terminal and in a job's log."""

from __future__ import annotations

import io

from df_ray.pipeline.progress import GroupProgress


class Counters:
    """Engine replicas' counters as EnginePool.stats returns them, advanced by the test."""

    def __init__(self) -> None:
        self.rows = [{"served": 10, "failed": 0, "tokens": 1000},
                     {"served": 5, "failed": 1, "tokens": 500}]

    def __call__(self) -> list[dict]:
        return [dict(r) for r in self.rows]


def test_terminal_line_is_redrawn_in_place():
    stream, stats = io.StringIO(), Counters()
    logged = []
    p = GroupProgress("demo", 4, stats, live=True, stream=stream, interval_s=3600,
                      log_metrics=lambda figures, step: logged.append(figures)).start()
    stats.rows[0].update(served=16, tokens=1600)
    stats.rows[1].update(failed=2)
    p.graded(2, failed_calls=1)
    p.close()
    out = stream.getvalue()
    assert out.startswith("\r[df-ray] demo: ") and out.endswith("\n")
    last = out.rstrip("\n").split("\r")[-1]
    # Counters since the pipeline started: 6 served, 1 failed (the engines' count).
    assert "demo: 2/4 samples graded | calls 6 served, 1 failed | " in last
    assert "tok/s" in last and "ETA " in last and "dashboard off" in last
    assert logged[-1]["progress.samples_graded"] == 2
    assert logged[-1]["progress.calls_failed"] == 1


def test_log_lines_without_a_terminal():
    said = []
    p = GroupProgress("3 configurations", 9, None, say=said.append, live=False,
                      interval_s=3600).start()
    p.graded(9)
    p.close()
    assert said == [said[-1]] and said[-1].startswith("3 configurations: 9/9 samples graded")
