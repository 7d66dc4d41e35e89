"""How long `df-ray analyze` takes, and how much memory it holds, at scale.

A scripted MMLU-Pro sweep (agents of unequal skill, correlated errors, 5% unparseable
answers; a coordinator; Self-Consistency with 4 samples of the first agent) is run in
process into a fresh generation cache, then analysed from it:

    PYTHONPATH=$PWD .venv/bin/python jobs/perf/analyze_scale.py                 # 500 x 6
    PYTHONPATH=$PWD .venv/bin/python jobs/perf/analyze_scale.py --samples 10000 --agents 10 \\
        --memory-only

The first prints the analysis's wall and CPU time per section (target: the 63 subsets with
their calibration refits, the k-curves and the 27-point grid under 60 s on one core); the
second loads 10,000 samples x 10 agents from the cache and evaluates the full pool and its
leave-one-outs, and prints the peak resident memory (target: below 1 GB). Run it with
``taskset -c 0`` for one core.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from jobs.perf.common import header

LETTERS = "ABCD"


def skilled(request) -> str:
    """An agent right with its model's skill (m1 0.7 down to 0.35), else mostly one wrong
    letter; 5% no answer."""
    import re

    from df_ray.engines.scripted import last_user_content

    u = last_user_content(request)
    m = re.search(r"\[[a-z]+(\d+)\]", u)
    gold = LETTERS[(int(m.group(1)) * 7) % 4] if m else "A"
    h = int.from_bytes(hashlib.sha256(json.dumps(
        [request.model, request.to_dict()["messages"], request.seed]).encode()).digest()[:8],
        "big")
    r = (h % 1000) / 1000
    if r >= 0.95:
        return "I cannot tell."
    num = request.model[1:]
    skill = 0.55 if num == "c" else max(0.35, 0.75 - 0.04 * int(num))
    wrong = [x for x in LETTERS if x != gold]
    letter = gold if r < skill else (wrong[0] if (h >> 12) % 3 else wrong[1 + (h >> 16) % 2])
    return f"Reasoning.\nAnswer: {letter}\nConfidence: {0.5 + ((h >> 20) % 50) / 100:.2f}"


def write_items(path: Path, n: int, tag: str) -> None:
    rows = [{"question": f"[{tag}{i}] Which option fits item {tag}{i}? The options are: "
             + " ".join(f"({c}) {tag}{i}-{c.lower()}" for c in LETTERS) + ".",
             "gold_answer": LETTERS[(i * 7) % 4],
             # the loader's test split takes 150 rows per category
             "category": f"c{i // 150}"} for i in range(n)]
    path.write_text(json.dumps(rows))


def sweep(tmp: Path, n: int, n_agents: int, n_cal: int, with_sc: bool):
    from df_ray.config import SweepConfig

    write_items(tmp / "test.json", n, "q")
    write_items(tmp / "cal.json", n_cal, "c")
    script = "jobs.perf.analyze_scale:skilled"
    agents = [f"a{i}" for i in range(1, n_agents + 1)]
    base = {
        "name": "scale", "benchmark": "mmlu_pro", "source": str(tmp / "test.json"),
        "calibration_source": str(tmp / "cal.json"),
        "backbones": {**{f"b{a}": {"kind": "scripted", "model": f"m{a[1:]}", "script": script}
                         for a in agents},
                      "bc": {"kind": "scripted", "model": "mc", "script": script}},
        "agents": [{"id": a, "backbone": f"b{a}"} for a in agents],
        "coordinator": {"id": "coord", "backbone": "bc"},
        "calibration": {"dir": str(tmp / "calibration"), "limit": n_cal, "min_samples": 50},
        "cache_root": str(tmp / "cache"), "results_dir": str(tmp / "results"),
        "tracking": {"uri": f"sqlite:///{tmp}/mlflow.db", "experiment": "scale"},
    }
    runs = [{"name": "darkforest"}]
    if with_sc:
        runs += [{"name": "self_consistency", "method": "self_consistency",
                  "method_args": {"agent": "a1", "samples": 4}}]
    return SweepConfig.model_validate({"name": "scale", "base": base, "runs": runs})


def run(sw) -> float:
    import pyarrow as pa

    import df_ray
    from df_ray.pipeline.cache import GenerationCache
    from df_ray.pipeline.results import ResultsFile
    from df_ray.pipeline.rows import encode_results

    t = time.perf_counter()
    for cfg in sw.expand():
        ev = df_ray.evaluate(cfg, cache=GenerationCache(cfg.cache_root))
        out = ResultsFile(cfg, sw.name)
        out.add(pa.Table.from_pydict(encode_results([(0, r) for r in ev.rows])))
        out.close()
        out.commit()
    return time.perf_counter() - t


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--samples", type=int, default=500)
    p.add_argument("--agents", type=int, default=6)
    p.add_argument("--held-out", type=int, default=100)
    p.add_argument("--memory-only", action="store_true")
    args = p.parse_args()
    header(f"df-ray analyze at {args.samples} samples x {args.agents} agents")
    from df_ray.analysis.api import analyze_benchmark
    from df_ray.analysis.cached import load_pool
    from df_ray.analysis.subsets import SubsetEvaluator, SubsetSettings
    from df_ray.pipeline.cache import GenerationCache

    tmp = Path(tempfile.mkdtemp(prefix="analyze-scale-"))
    sw = sweep(tmp, args.samples, args.agents, args.held_out, not args.memory_only)
    print(f"sweep run in process into a fresh cache: {run(sw):.1f} s")
    cfg = sw.expand()[0]
    before = peak_mb()
    if args.memory_only:
        t = time.perf_counter()
        pool = load_pool(cfg, GenerationCache(cfg.cache_root))
        ev = SubsetEvaluator(pool, None, SubsetSettings(coordinator=False))
        full = tuple(pool.agents)
        ev.evaluate(full)
        for a in full:
            ev.evaluate(tuple(x for x in full if x != a))
        print(f"loaded {len(pool.test.samples)} x {len(full)} answers and evaluated the full "
              f"pool and its {len(full)} leave-one-outs: {time.perf_counter() - t:.1f} s")
        print(f"peak resident memory: {peak_mb():.0f} MB (after the sweep ran: {before:.0f} MB)")
        return
    cpu0, t0 = time.process_time(), time.perf_counter()
    cache = GenerationCache(cfg.cache_root)
    pool = load_pool(cfg, cache)
    t_load = time.perf_counter() - t0
    print(f"{len(pool.test.samples)} test samples x {len(pool.agents)} agents, "
          f"{len(pool.records)} held-out records")
    res = analyze_benchmark(sw.name, sw.expand(), pool=pool, cache=cache)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    n_subsets = len(res.subsets.table)
    print(f"load from the cache (parse, grade, calibration records): {t_load:.1f} s")
    print(f"analysis: {n_subsets} subsets with refit, "
          f"{len(res.frontier.curves)} curve points, {len(res.thresholds.table)} grid "
          f"settings, early stop: {wall:.1f} s wall, {cpu:.1f} s CPU (target < 60 s)")
    print(f"peak resident memory: {peak_mb():.0f} MB")


if __name__ == "__main__":
    main()
