"""What a small run prints per sample: which agent was right, the belief's candidates, what
the guardrail decided and whether it overruled the coordinator (the demo's table)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from df_ray.engines.scripted import ScriptedEngine
from df_ray.evaluation import Driver, Member, arrow_schema
from df_ray.methods.darkforest import DarkForest
from df_ray.pipeline.outcome import agent_answers
from tests.helpers import Script, answer, driver_config, make_sample


def results_file(tmp_path, script: Script, samples) -> str:
    driver = Driver([Member.from_config(driver_config())], ScriptedEngine("scripted", script))
    rows = [r for _, r in driver.finish(driver.run(samples))]
    schema = arrow_schema(DarkForest.result_columns)
    path = tmp_path / "samples.parquet"
    pq.write_table(pa.Table.from_pylist([r.to_dict() for r in rows], schema=schema), path)
    return str(path)


def test_the_guardrail_overruling_the_coordinator_is_shown(tmp_path):
    # a1 and a2 agree on B (right), a3 says C; the coordinator picks C: the guardrail trusts B
    # (2 of 3 agents, posterior 2/3 >= 0.66, margin 1/3 >= 0.30) and overrules it.
    script = Script({("a1", "independent"): answer("B"), ("a2", "independent"): answer("B"),
                     ("a3", "independent"): answer("C"), ("coord", "coordinator"): answer("C")})
    (s,) = agent_answers(results_file(tmp_path, script, [make_sample("q1")]), method=DarkForest)
    assert s["correct"] and s["final"] == "B"
    assert s["answers"] == {"a1": "B (right)", "a2": "B (right)", "a3": "C (wrong)"}
    lines = s["explanation"]
    assert lines == [
        "belief: a1+a2 P=0.67 (right); a3 P=0.33 (wrong); margin 0.33",
        "guardrail: top candidate trusted, it is the answer",
        "coordinator chose the candidate of a3 (wrong), OVERRULED by the guardrail",
    ]


def test_an_untrusted_belief_leaves_the_decision_to_the_coordinator(tmp_path):
    script = Script({("a1", "independent"): answer("B"), ("a2", "independent"): answer("C"),
                     ("a3", "independent"): answer("D"), ("coord", "coordinator"): answer("A")})
    (s,) = agent_answers(results_file(tmp_path, script, [make_sample("q1")]), method=DarkForest)
    assert not s["correct"] and s["final"] == "A"
    lines = s["explanation"]
    assert lines[1] == "guardrail: not trusted, the coordinator decides"
    assert lines[2] == "coordinator chose an answer of its own (wrong)"


def test_a_method_without_an_explanation_prints_only_the_answers(tmp_path):
    script = Script({("a1", "independent"): answer("B"), ("a2", "independent"): answer("B"),
                     ("a3", "independent"): answer("C"), ("coord", "coordinator"): answer("C")})
    path = results_file(tmp_path, script, [make_sample("q1")])
    (s,) = agent_answers(path, method=None)
    assert s["explanation"] == [] and s["answers"]["a3"] == "C (wrong)"


def test_the_printed_table_has_the_methods_own_explanation(tmp_path):
    from types import SimpleNamespace

    from df_ray.cli import format_answers
    script = Script({("a1", "independent"): answer("B"), ("a2", "independent"): answer("B"),
                     ("a3", "independent"): answer("C"), ("coord", "coordinator"): answer("C")})
    path = results_file(tmp_path, script, [make_sample("q1")])
    run = SimpleNamespace(samples_path=path, skipped=False, metrics={"n_samples": 1},
                          config=SimpleNamespace(name="df", method="darkforest"))
    text = format_answers([run])
    assert "df: what the agents answered" in text
    assert "    a3: C (wrong)" in text
    assert "OVERRULED by the guardrail" in text
    single = SimpleNamespace(samples_path=path, skipped=False, metrics={"n_samples": 1},
                             config=SimpleNamespace(name="one", method="single"))
    assert "guardrail" not in format_answers([single])


def test_the_printed_table_reads_a_runs_rows_in_memory_not_its_file(tmp_path):
    """A run's first rows (``RunResult.head``) are what the table shows: the file the run has
    just written is not read again (here it is gone)."""
    from pathlib import Path
    from types import SimpleNamespace

    from df_ray.cli import format_answers
    script = Script({("a1", "independent"): answer("B"), ("a2", "independent"): answer("B"),
                     ("a3", "independent"): answer("C"), ("coord", "coordinator"): answer("C")})
    path = results_file(tmp_path, script, [make_sample("q1")])
    head = pq.read_table(path)
    assert agent_answers(head, method=DarkForest) == agent_answers(path, method=DarkForest)
    Path(path).unlink()
    run = SimpleNamespace(samples_path=path, head=head, skipped=False,
                          metrics={"n_samples": 1},
                          config=SimpleNamespace(name="df", method="darkforest"))
    assert "    a3: C (wrong)" in format_answers([run])
