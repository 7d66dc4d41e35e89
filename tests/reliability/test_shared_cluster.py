"""A shared cluster: several jobs (and users) write to one generation cache, one MLflow store
and one results folder.

- Two concurrent `df-ray run` processes over overlapping samples write to ONE cache root:
  afterwards every part is readable, the union holds exactly the distinct calls, and calls
  both runs made have identical cached texts (the cache is append-only: new uniquely named
  parts, written under a temporary name and renamed).
- Runs don't collide on disk: per-sample results go to
  ``<results_dir>/<sweep>/<name>-<fingerprint>/``, where the fingerprint hashes every setting
  that changes results, so two configurations with the same name but different settings
  write to different folders.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from df_ray.config import RunConfig
from df_ray.pipeline.cache import SCHEMA, GenerationCache
from df_ray.pipeline.runner import RESULT_SCHEMA, Runner, shared_backbones
from df_ray.tasks.base import Sample
from tests.helpers import (
    base_config,
    cache_parts,
    run_to_end,
    start_cli,
    write_mmlu_goa,
    write_sweep,
)
from tests.reliability.responders import read_call_log

STARTUP_S = 420


@pytest.mark.slow
def test_two_concurrent_runs_share_one_cache(tmp_path):
    all_rows = json.loads(write_mmlu_goa(tmp_path / "all.json", 20).read_text())
    cache = tmp_path / "shared-cache"
    procs = []
    for name, rows in (("a", all_rows[:15]), ("b", all_rows[5:])):  # 10 samples in common
        root = tmp_path / name
        root.mkdir()
        src = root / "mmlu.json"
        src.write_text(json.dumps(rows))
        base = base_config(root, src, latency_s=0.05, batch_size=1, cache_root=cache)
        sweep = write_sweep(root / "sweep.yaml", base, [{"name": "df"}])
        args = ["run", "--config", str(sweep)]
        procs.append((root, args, start_cli(args, root / "run.log", root / "calls.log")))
    for root, args, p in procs:
        rc = run_to_end(args, root / "run.log", root / "calls.log", STARTUP_S + 300, proc=p)
        assert rc == 0, (root / "run.log").read_text()[-3000:]

    parts = cache_parts(cache)
    assert len(parts) >= 2  # both writers' (each run's engine journals folded at its end)
    assert not list(cache.glob(".tmp-*")), "a temporary part was left behind"
    texts: dict[str, str] = {}
    for part in parts:
        t = pq.read_table(part)  # every part is a complete Parquet file
        assert t.schema.equals(SCHEMA)
        for k, text in zip(t.column("key").to_pylist(), t.column("text").to_pylist(),
                           strict=True):
            assert texts.setdefault(k, text) == text, "one call, two different cached texts"
            assert text.rstrip().split("\n")[-1].startswith("Confidence: ")
    c = GenerationCache(str(cache))
    assert len(c) == len(texts) == 20 * 4
    made = [set(read_call_log(root / "calls.log")) for root, _, _ in procs]
    assert made[0] | made[1] == set(texts)
    # overlapping samples: the same outcome in both runs
    out = []
    for root, _, _ in procs:
        (f,) = (root / "results").glob("*/*/samples.parquet")
        rows = pq.read_table(f).to_pylist()
        assert len(rows) == 15 == len({r["sample_id"] for r in rows})
        out.append({r["sample_id"]: (r["final_answer"], r["correct"]) for r in rows})
    common = set(out[0]) & set(out[1])
    assert len(common) == 10
    assert all(out[0][s] == out[1][s] for s in common)


# --------------------------------------------------------------------------- results folders

def _samples(n: int = 6) -> list[Sample]:
    return [Sample(id=f"s{i}", task="mmlu_pro", question=f"q{i} (A) x (B) y", gold="A",
                   meta={"n_options": 2}) for i in range(n)]


def _row(sample_id: str) -> dict:
    row = {name: None for name in RESULT_SCHEMA.names}
    row.update(sample_id=sample_id, correct=True, scores=json.dumps({"acc": 1.0}),
               final_answer="A", any_agent_correct=True, detail="{}",
               method_columns=json.dumps({"decision_source": "guardrail", "trusted": True,
                                          "overridden": False, "coordinator_called": True}))
    for k in ("n_calls", "n_fresh_calls", "n_errors", "agent_tokens", "coordinator_tokens",
              "other_tokens", "total_tokens", "t_cross"):
        row[k] = 0
    return row


def _fake_stream(barrier: threading.Barrier | None = None):
    """Stands in for the Ray Data pipeline: yields graded batches of two rows."""
    def stream(self, members, samples, agents_only=False):
        for i in range(0, len(samples), 2):
            rows = [{**_row(s.id), "config": k} for s in samples[i:i + 2]
                    for k in range(len(members))]
            yield pa.Table.from_pylist(rows, schema=RESULT_SCHEMA.append(
                pa.field("method_columns", pa.string())).append(pa.field("config", pa.int64())))
            if barrier is not None:
                barrier.wait(timeout=30)
    return stream


def _cfg(tmp_path: Path, **over) -> RunConfig:
    return RunConfig.model_validate({**base_config(tmp_path, tmp_path / "unused.json"), **over})


@pytest.mark.slow  # the runner's whole configuration path, three times: minutes under load
def test_same_name_different_settings_write_different_folders(tmp_path, monkeypatch):
    monkeypatch.setattr(Runner, "_stream_batches", _fake_stream())
    a = _cfg(tmp_path)
    b = _cfg(tmp_path, method_args={"ablation": "no_calibration", "guardrail": {"tau_p": 0.8}})
    same_as_a = _cfg(tmp_path, batch_size=7, concurrency=3)  # execution knobs only
    assert a.name == b.name
    assert a.fingerprint() != b.fingerprint() and a.fingerprint() == same_as_a.fingerprint()
    runner = Runner(shared_backbones([a]), tracker=None, progress=lambda m: None)
    pa_, pb = (Path(runner.run(c, _samples()).samples_path) for c in (a, b))
    assert pa_.parent != pb.parent
    assert pa_.exists() and pb.exists()
    assert Path(runner.run(same_as_a, _samples()).samples_path) == pa_


@pytest.mark.slow  # two runners' whole configuration paths at once: minutes under load
def test_concurrent_identical_runs_into_one_results_dir(tmp_path, monkeypatch):
    barrier = threading.Barrier(2)
    monkeypatch.setattr(Runner, "_stream_batches", _fake_stream(barrier))
    cfg = _cfg(tmp_path)
    errors, paths = [], []

    def job():
        try:
            r = Runner(shared_backbones([cfg]), tracker=None, progress=lambda m: None)
            paths.append(r.run(cfg, _samples()).samples_path)
        except Exception as e:  # pragma: no cover - the bug under test
            errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=job) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    rows = pq.read_table(paths[0]).to_pylist()
    assert sorted(r["sample_id"] for r in rows) == [f"s{i}" for i in range(6)]
