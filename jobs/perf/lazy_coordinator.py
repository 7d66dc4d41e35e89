"""Tokens per sample the lazy coordinator saves against the always-on coordinator, on cached
real generations, with identical answers (asserted).

Agents through the embedded llama.cpp engine on a few real MMLU-Pro (or MATH) problems, read
at run time from GoA's split files (``--data``; by default ``shared/data/goa`` beside the
repository; never copied into it). ``--agents demo`` is df_ray/configs/demo.yaml's
heterogeneous team (SmolLM2-135M-Instruct and Gemma 3 270M), which almost never agrees, so the
guardrail never trusts and lazy saves nothing; ``--agents greedy`` is three SmolLM2 agents at
temperature 0.1 with different seeds, which agree often enough for the guardrail to trust:
  1. always-on coordinator through df_ray once: fills a temporary generation cache;
  2. always-on again and lazy, both from that cache (no engine call: asserted);
  3. per-sample final answers equal (asserted); tokens per sample compared.
Calibration: the ablation ``no_calibration`` (Laplace priors), so no held-out fitting run is
needed; the guardrail is the default (k 2, tau_p 0.66, tau_m 0.30).

    .venv/bin/python jobs/perf/lazy_coordinator.py                     # 8 MMLU-Pro problems
    .venv/bin/python jobs/perf/lazy_coordinator.py --benchmark math --limit 6
    .venv/bin/python jobs/perf/lazy_coordinator.py --agents greedy --limit 12
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from jobs.perf.common import header, start_ray

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "goa"
FILES = {"mmlu_pro": "MMLU_Pro_sampled_test.json", "math": "MATH_test.json"}


def agents(kind: str, max_tokens: int) -> list[dict]:
    if kind == "greedy":
        return [{"id": f"smollm2-{s}", "backbone": "smollm2", "temperature": 0.1, "seed": s,
                 "max_tokens": max_tokens} for s in (1, 2, 3)]
    return [
        {"id": "smollm2-a", "backbone": "smollm2", "temperature": 0.7, "seed": 1,
         "max_tokens": max_tokens},
        {"id": "gemma3-b", "backbone": "gemma3", "temperature": 0.8, "seed": 2,
         "max_tokens": max_tokens},
        {"id": "smollm2-c", "backbone": "smollm2", "temperature": 1.0, "seed": 3,
         "max_tokens": max_tokens,
         "system_prompt": "You are a careful assistant. Answer with the option letter."},
    ]


def config(tmp: str, benchmark: str, source: Path, limit: int, lazy: bool, max_tokens: int,
           team: str):
    from df_ray.config import RunConfig

    return RunConfig.model_validate({
        "name": "lazy" if lazy else "always-on",
        "benchmark": benchmark, "split": "test", "source": str(source),
        "limit": limit, "method": "darkforest",
        "backbones": {
            "smollm2": {"kind": "embedded", "model": "smollm2-135m-instruct", "n_ctx": 2048},
            "gemma3": {"kind": "embedded", "model": "gemma3-270m", "n_ctx": 2048,
                       "prompt_format": "completion"},
        },
        "agents": agents(team, max_tokens),
        "coordinator": {"id": "coordinator", "backbone": "smollm2", "temperature": 0.2,
                        "seed": 4, "max_tokens": max_tokens},
        "method_args": {"ablation": "no_calibration", "lazy": lazy},
        "cache_root": f"{tmp}/cache", "results_dir": f"{tmp}/results",
        "tracking": {"uri": f"sqlite:///{tmp}/mlflow.db", "experiment": "lazy"},
        "batch_size": 4, "concurrency": 1,
    })


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--benchmark", choices=sorted(FILES), default="mmlu_pro")
    ap.add_argument("--agents", choices=["demo", "greedy"], default="demo")
    ap.add_argument("--data", type=Path, default=DATA, help="folder with GoA's split files")
    ap.add_argument("--limit", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=128)
    args = ap.parse_args(argv)
    header("lazy coordinator: tokens per sample saved on cached real generations")
    source = args.data / FILES[args.benchmark]
    if not source.is_file():
        print(f"lazy_coordinator: {source} not found (pass --data DIR)", file=sys.stderr)
        return 3
    print(f"# agents: {args.agents}; {args.limit} {args.benchmark} problems from {source.name}")
    import pyarrow.parquet as pq

    from df_ray.pipeline.runner import Runner, load_samples, shared_backbones

    start_ray()
    with tempfile.TemporaryDirectory(prefix="dfperf-lazy-") as tmp:
        on = config(tmp, args.benchmark, source, args.limit, False, args.max_tokens, args.agents)
        lazy = config(tmp, args.benchmark, source, args.limit, True, args.max_tokens, args.agents)
        samples = load_samples(on)
        runner = Runner(shared_backbones([on, lazy]), tracker=None, progress=lambda m: None)
        try:
            t = time.perf_counter()
            fill = runner.run(on, samples, sweep="fill")
            print(f"# filled the cache: {len(samples)} {args.benchmark} samples, "
                  f"{fill.metrics['fresh_calls']:.0f} engine calls, {time.perf_counter() - t:.0f} s")
            res = {}
            for cfg in (on, lazy):
                r = runner.run(cfg, samples, sweep="replay")
                assert r.metrics["fresh_calls"] == 0, f"{cfg.name}: replay made engine calls"
                res[cfg.name] = r
        finally:
            runner.shutdown()
        answers = {}
        for name, r in res.items():
            tab = pq.read_table(r.samples_path, columns=["sample_id", "final_answer", "correct"])
            answers[name] = dict(zip(tab.column("sample_id").to_pylist(),
                                     zip(tab.column("final_answer").to_pylist(),
                                         tab.column("correct").to_pylist(), strict=True),
                                     strict=True))
        assert answers["always-on"] == answers["lazy"], "lazy changed an answer"
        a, b = res["always-on"].metrics, res["lazy"].metrics
        print(f"{'mode':10} {'tokens/sample':>13} {'coord tok/sample':>16} {'calls/sample':>12} "
              f"{'accuracy':>8} {'trusted':>7}")
        for name, m in (("always-on", a), ("lazy", b)):
            print(f"{name:10} {m['tokens_per_sample']:>13.1f} "
                  f"{m['coordinator_tokens_per_sample']:>16.1f} {m['llm_calls_per_sample']:>12.2f} "
                  f"{m['accuracy']:>8.3f} {m['trusted_rate']:>7.2f}")
        saved = a["tokens_per_sample"] - b["tokens_per_sample"]
        print(f"# lazy saves {saved:.1f} tokens per sample ({saved / a['tokens_per_sample']:.1%}); "
              f"answers identical on all {len(samples)} samples (asserted)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
