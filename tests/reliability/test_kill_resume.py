"""Kill and resume: SIGKILL a `df-ray run` (driver, Ray and engines: its whole process
group) mid-configuration and between configurations, rerun the same command, and check that
the resumed sweep equals an uninterrupted one without repeating any finished LLM call.

The main test runs the sweep one configuration at a time (``fuse: false``), which is what
makes "between configurations" a kill point; ``test_sigkill_a_fused_sweep`` kills the default
fused pipeline (both configurations in one) once mid-run.

One sweep of two configurations over 20 MMLU-Pro samples (scripted engines, 0.2 s per call):
``tau066`` (strict disclosure) and ``tau080`` (tau_p 0.8, moderate disclosure: its
coordinator prompts differ, so it makes fresh calls of its own). The chain is

1. run, SIGKILLed mid ``tau066`` once cache parts exist              (kill point a)
2. rerun, SIGKILLed after ``tau066`` is FINISHED in MLflow, mid ``tau080`` (kill point b)
3. rerun to the end,

next to an uninterrupted reference run of the same sweep in another folder. Every call an
engine serves is appended to a log (tests/reliability/responders.py), so "repeated" is
checked exactly: no rerun makes a call whose result was already in the cache when it started.
"""

from __future__ import annotations

import time
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest

from df_ray.pipeline.cache import GenerationCache
from tests.helpers import (
    base_config,
    configuration_runs,
    kill_group,
    run_to_end,
    start_and_wait,
    start_cli,
    write_mmlu_goa,
    write_sweep,
)
from tests.reliability.responders import read_call_log

pytestmark = pytest.mark.slow

N = 20
RUNS = [{"name": "tau066"},
        {"name": "tau080", "method_args.guardrail.tau_p": 0.8,
         "method_args.disclosure": "moderate"}]
METRICS = ("n_samples", "accuracy", "tokens_per_sample", "trusted_rate", "override_rate",
           "correct_override_rate", "wrong_override_rate", "reachability",
           "llm_calls_per_sample", "t_cross_per_sample")
STARTUP_S = 420  # a loaded 2-core CI box can take minutes to start Ray


def _sweep(root: Path, src: Path, latency_s: float, fuse: bool = False) -> Path:
    root.mkdir()
    base = base_config(root, src, latency_s=latency_s, batch_size=2)
    return write_sweep(root / "sweep.yaml", base, RUNS, fuse=fuse)


def _cache_keys(root: Path) -> set[str]:
    c = GenerationCache(str(root))
    return set(c._entries)


def _cached(root: Path) -> int:
    """Answers in the cache: its parts' and its engines' journals'."""
    return len(_cache_keys(root)) if root.exists() else 0


def _kill_and_check_no_strays(proc) -> None:
    """SIGKILL the process group; every process the driver had started must be gone."""
    driver = psutil.Process(proc.pid)
    tree = [driver, *driver.children(recursive=True)]
    assert len(tree) > 3, "the driver had not started Ray yet"
    kill_group(proc)
    # A Ray worker that was still starting when its raylet died only gives up after Ray's
    # worker registration timeout (60 s by default): wait past it.
    deadline = time.monotonic() + 150
    alive = tree
    while time.monotonic() < deadline:
        alive = []
        for p in tree:
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
            except psutil.NoSuchProcess:
                pass
        if not alive:
            return
        time.sleep(0.5)
    names = [(p.pid, " ".join(p.cmdline())[:120]) for p in alive]
    for p in alive:  # do not leave them behind for the next test
        p.kill()
    raise AssertionError(f"processes outlived the killed driver: {names}")


def _results(root: Path) -> dict[str, list[dict]]:
    out = {}
    for f in sorted((root / "results").glob("*/*/samples.parquet")):
        name = f.parent.name.rsplit("-", 1)[0]
        out[name] = pq.read_table(f).to_pylist()
    return out


def _finished_metrics(root: Path) -> dict[str, dict[str, float]]:
    runs = configuration_runs(f"sqlite:///{root}/mlflow.db")
    bad = [(r.info.run_name, r.info.status, r.info.lifecycle_stage) for r in runs
           if r.info.status != "FINISHED" or r.info.lifecycle_stage != "active"]
    assert not bad, f"configuration runs that are not FINISHED: {bad}"
    names = [r.info.run_name for r in runs]
    assert sorted(names) == sorted(set(names)), f"a configuration was logged twice: {names}"
    return {r.info.run_name: r.data.metrics for r in runs}


def _finish_reference(ref, ref_args: list[str], ref_root: Path) -> set[str]:
    """Wait for the uninterrupted reference run; the cache keys of its calls."""
    rc = run_to_end(ref_args, ref_root / "run.log", ref_root / "calls.log", STARTUP_S + 300,
                    proc=ref)
    assert rc == 0, (ref_root / "run.log").read_text()[-3000:]
    ref_keys = _cache_keys(ref_root / "cache")
    # every reference call was made once (sanity check of the call log)
    assert sorted(read_call_log(ref_root / "calls.log")) == sorted(ref_keys)
    assert len(ref_keys) == 4 * N + N  # 3 agents + coordinator, then tau080's coordinator
    return ref_keys


def _assert_same_outcomes(root: Path, ref_root: Path) -> None:
    # No sample lost or counted twice; the same per-sample outcomes.
    got, want = _results(root), _results(ref_root)
    assert sorted(got) == sorted(want) == ["tau066", "tau080"]
    for name in want:
        ids = [r["sample_id"] for r in got[name]]
        assert len(ids) == N and len(set(ids)) == N, name
        key = lambda r: (r["sample_id"], r["final_answer"], r["correct"], r["trusted"],  # noqa: E731
                         r["overridden"], r["total_tokens"])
        assert sorted(map(key, got[name])) == sorted(map(key, want[name])), name

    # Exactly one FINISHED MLflow run per configuration, with the reference's metrics.
    m_got, m_want = _finished_metrics(root), _finished_metrics(ref_root)
    assert sorted(m_got) == sorted(m_want) == ["tau066", "tau080"]
    for name in m_want:
        for k in METRICS:
            assert m_got[name][k] == pytest.approx(m_want[name][k]), (name, k)


def test_sigkill_then_rerun_equals_uninterrupted(tmp_path):
    src = write_mmlu_goa(tmp_path / "mmlu_goa.json", N)
    ref_root, root = tmp_path / "reference", tmp_path / "killed"
    ref_sweep = _sweep(ref_root, src, latency_s=0.0)
    sweep = _sweep(root, src, latency_s=0.2)
    args = ["run", "--config", str(sweep)]

    # The uninterrupted reference runs alongside the kills.
    ref_args = ["run", "--config", str(ref_sweep)]
    ref = start_cli(ref_args, ref_root / "run.log", call_log=ref_root / "calls.log")

    # 1. kill point (a): mid first configuration, once some answers are in the cache (its
    # parts or the engines' journals).
    log1 = root / "run1.log"
    p1 = start_and_wait(args, log1, root / "calls1.log",
                        lambda: _cached(root / "cache") >= 8, STARTUP_S,
                        "cached answers of the first configuration")
    assert "tau080: darkforest" not in log1.read_text()
    _kill_and_check_no_strays(p1)
    assert configuration_runs(f"sqlite:///{root}/mlflow.db") == []
    done_a = _cache_keys(root / "cache")
    assert 0 < len(done_a) < 4 * N

    # 2. kill point (b): tau066 is FINISHED in MLflow (the runner logs it before it announces
    # tau080), tau080 has started but not finished.
    log2 = root / "run2.log"
    p2 = start_and_wait(args, log2, root / "calls2.log",
                        lambda: "tau080: darkforest on" in log2.read_text(errors="replace"),
                        STARTUP_S, "the second configuration to start")
    _kill_and_check_no_strays(p2)
    runs = configuration_runs(f"sqlite:///{root}/mlflow.db")
    assert [(r.info.run_name, r.info.status) for r in runs] == [("tau066", "FINISHED")]
    calls2 = read_call_log(root / "calls2.log")
    assert not set(calls2) & done_a, "the rerun repeated calls that were already cached"
    assert len(calls2) == len(set(calls2))
    done_b = _cache_keys(root / "cache")

    # 3. rerun to the end.
    log3 = root / "run3.log"
    rc = run_to_end(args, log3, root / "calls3.log", STARTUP_S + 300)
    assert rc == 0, log3.read_text(errors="replace")[-3000:]
    assert "tau066 (skipped: done)" in log3.read_text()
    calls3 = read_call_log(root / "calls3.log")
    assert not set(calls3) & done_b, "the rerun repeated calls that were already cached"
    assert len(calls3) == len(set(calls3))

    ref_keys = _finish_reference(ref, ref_args, ref_root)

    # Zero repeated calls for finished work, and nothing missing.
    assert len(done_b) + len(calls3) == len(ref_keys)
    assert _cache_keys(root / "cache") == ref_keys

    _assert_same_outcomes(root, ref_root)


def test_sigkill_a_fused_sweep_then_rerun_equals_uninterrupted(tmp_path):
    src = write_mmlu_goa(tmp_path / "mmlu_goa.json", N)
    ref_root, root = tmp_path / "reference", tmp_path / "killed"
    ref_sweep = _sweep(ref_root, src, latency_s=0.0, fuse=True)
    sweep = _sweep(root, src, latency_s=0.2, fuse=True)
    args, ref_args = ["run", "--config", str(sweep)], ["run", "--config", str(ref_sweep)]
    ref = start_cli(ref_args, ref_root / "run.log", call_log=ref_root / "calls.log")

    # Both configurations run in one pipeline: kill it once some answers are cached.
    log1 = root / "run1.log"
    p1 = start_and_wait(args, log1, root / "calls1.log",
                        lambda: _cached(root / "cache") >= 8, STARTUP_S,
                        "cached answers of the fused pipeline")
    _kill_and_check_no_strays(p1)
    assert configuration_runs(f"sqlite:///{root}/mlflow.db") == []
    done_a = _cache_keys(root / "cache")
    assert 0 < len(done_a) < 5 * N

    log2 = root / "run2.log"
    rc = run_to_end(args, log2, root / "calls2.log", STARTUP_S + 300)
    assert rc == 0, log2.read_text(errors="replace")[-3000:]
    calls2 = read_call_log(root / "calls2.log")
    assert not set(calls2) & done_a, "the rerun repeated calls that were already cached"
    assert len(calls2) == len(set(calls2))

    ref_keys = _finish_reference(ref, ref_args, ref_root)
    assert len(done_a) + len(calls2) == len(ref_keys)
    assert _cache_keys(root / "cache") == ref_keys

    _assert_same_outcomes(root, ref_root)
