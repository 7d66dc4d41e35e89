"""The embedded llama.cpp engine's tokens/s through df_ray against llama_cpp.Llama called
directly: same model file, same threads, same prompts, same sampling (greedy, so both produce
the same tokens).

Three paths, interleaved round by round (the machine is shared and noisy: ratios are taken
within a run, per round, and the median reported):
  raw    : llama_cpp.Llama(...).create_chat_completion(messages, ...), one request at a time;
  engine : df_ray.engines.llama_cpp.EmbeddedEngine.generate(batch) in this process;
  actor  : the same engine inside the pipeline's EngineActor (Ray), through EngineClient.
Target: engine/raw and actor/raw >= 0.9.

    .venv/bin/python jobs/perf/embedded_engine.py                 # ~2 min on 2 cores
    .venv/bin/python jobs/perf/embedded_engine.py --no-ray --rounds 2
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from jobs.perf.common import header, start_ray

PROMPTS = [
    "What is 17 times 23? Explain briefly.",
    "Name three prime numbers larger than 50 and say why they are prime.",
    "Which is larger, 2/3 or 0.65? Answer with a short reason.",
    "Write one sentence about the ocean.",
    "If a train travels 60 km in 45 minutes, what is its speed in km/h?",
    "List two uses of a spreadsheet.",
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-ray", action="store_true", help="skip the EngineActor path")
    args = ap.parse_args(argv)
    header("embedded engine: tokens/s through df_ray vs llama_cpp.Llama directly")
    from llama_cpp import Llama

    from df_ray.engines.base import ChatRequest, Message, SamplingParams
    from df_ray.engines.llama_cpp import NEUTRAL_SAMPLING, EmbeddedEngine
    from df_ray.engines.spec import EngineSpec

    spec = EngineSpec(kind="embedded", model=args.model, n_threads=args.threads, n_ctx=2048)
    engine = EmbeddedEngine(spec)
    raw = Llama(model_path=str(engine.model_file), n_ctx=2048, n_threads=args.threads,
                n_threads_batch=args.threads, seed=0, verbose=False, n_gpu_layers=0)
    sampling = SamplingParams(temperature=0.0, top_p=1.0, max_tokens=args.max_tokens)
    reqs = [ChatRequest(args.model, (Message("user", p),), sampling, seed=i)
            for i, p in enumerate(PROMPTS)]

    def run_raw() -> int:
        n = 0
        for r in reqs:
            raw.reset()
            out = raw.create_chat_completion(
                messages=[{"role": m.role, "content": m.content} for m in r.messages],
                temperature=0.0, top_p=1.0, max_tokens=args.max_tokens, seed=r.seed,
                **NEUTRAL_SAMPLING)
            n += out["usage"]["completion_tokens"]
        return n

    def run_engine() -> int:
        return sum(c.completion_tokens for c in engine.generate(reqs))

    paths = {"raw": run_raw, "engine": run_engine}
    if not args.no_ray:
        start_ray()
        from df_ray.pipeline.engine_pool import EnginePool

        pool = EnginePool({"e": spec})
        pool.wait_ready()
        client = pool.client()
        paths["actor"] = lambda: sum(c.completion_tokens for c in client.generate(reqs))
    for fn in paths.values():  # warm-up (model pages, first-call costs)
        fn()
    rates: dict[str, list[float]] = {k: [] for k in paths}
    toks: dict[str, int] = {}
    print(f"# model {args.model}, {args.threads} thread(s), {len(reqs)} prompts x "
          f"max_tokens {args.max_tokens}, greedy; {args.rounds} interleaved rounds")
    for rnd in range(args.rounds):
        for name, fn in paths.items():
            t = time.perf_counter()
            n = fn()
            dt = time.perf_counter() - t
            rates[name].append(n / dt)
            toks[name] = n
        print(f"round {rnd}: " + ", ".join(f"{k} {v[-1]:.1f} tok/s" for k, v in rates.items()),
              flush=True)
    print(f"# completion tokens per round: {toks}")
    for name in paths:
        if name == "raw":
            continue
        ratios = [a / b for a, b in zip(rates[name], rates["raw"], strict=True)]
        print(f"# {name}/raw tokens/s: median {statistics.median(ratios):.3f} "
              f"(rounds: {', '.join(f'{r:.2f}' for r in ratios)}; target >= 0.9)")
    if not args.no_ray:
        pool.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
