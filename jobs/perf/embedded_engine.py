"""The embedded llama.cpp engine's tokens/s through df_ray against llama_cpp.Llama called
directly: same model file, same threads, same prompts, same sampling (greedy, so both produce
the same tokens).

Three paths, interleaved round by round (the machine is shared and noisy: ratios are taken
within a run, per round, and the median reported):
  raw    : llama_cpp.Llama(...).create_chat_completion(messages, ...), one request at a time;
  engine : df_ray.engines.llama_cpp.EmbeddedEngine.generate(batch) in this process;
  actor  : the same engine inside the pipeline's EngineActor (Ray), through EngineClient.
Target: engine/raw and actor/raw >= 0.9. (engine runs with n_parallel 1 here, the
one-request-at-a-time path that raw is; --batched measures the batched path.)

--batched: the batched engine against llama.cpp's own batched decoding, at batch 1, 4, 8, 16:
  reference  : llama-batched-bench built from the llama.cpp sources llama-cpp-python vendors,
               with the installed build's CMake flags (jobs/perf/build_llama_reference.sh),
               same model file and threads, -fa off (llama-cpp-python's default), n_batch and
               n_ubatch 512 (its defaults), a KV stream of n_ctx per sequence (not unified, as
               the engine); B sequences of PP random prompt tokens, TG decode steps each;
  batched    : EmbeddedEngine(n_parallel=B).generate(B requests), greedy, max_tokens TG, with
               prompts of about PP tokens that the model answers at length;
  sequential : the same requests through EmbeddedEngine(n_parallel=1), today's engine.
  Figure: generated tokens / wall, prompt processing included (the reference's pl*tg/t).
  Targets: batched >= 0.9 x reference at every B; batched >= 2 x sequential at B = 8.

    .venv/bin/python jobs/perf/embedded_engine.py                 # ~2 min on 2 cores
    .venv/bin/python jobs/perf/embedded_engine.py --no-ray --rounds 2
    .venv/bin/python jobs/perf/embedded_engine.py --batched --rounds 2   # ~5 min on 2 cores
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
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
    ap.add_argument("--batched", action="store_true",
                    help="batched engine vs llama-batched-bench vs the sequential engine")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 4, 8, 16])
    ap.add_argument("--reference", help="llama-batched-bench binary (default: build it with "
                    "jobs/perf/build_llama_reference.sh)")
    ap.add_argument("--flash-attn", choices=["on", "off"], default="off",
                    help="--batched: llama.cpp's flash attention in every engine and the reference "
                    "(engine_args: {flash_attn: true}); off is llama-cpp-python's default")
    ap.add_argument("--no-reference", action="store_true",
                    help="--batched without llama-batched-bench: batched vs sequential only")
    args = ap.parse_args(argv)
    if args.batched:
        return batched(args)
    header("embedded engine: tokens/s through df_ray vs llama_cpp.Llama directly")
    from df_ray.engines.llama_build import select_llama_library

    select_llama_library()  # the build df_ray's engine loads, for both sides
    from llama_cpp import Llama

    from df_ray.engines.base import ChatRequest, Message, SamplingParams
    from df_ray.engines.llama_cpp import NEUTRAL_SAMPLING, EmbeddedEngine
    from df_ray.engines.spec import make_spec

    spec = make_spec(kind="embedded", model=args.model, n_threads=args.threads, n_ctx=2048,
                     engine_args={"n_parallel": 1})
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


#: Questions SmolLM2-135M answers at length (greedy), so every sequence runs to max_tokens, as
#: llama-batched-bench's do (a sequence that ends early leaves its slot idle for the rest).
LONG_PROMPTS = [
    "Count from 1 to 300, separated by commas.",
    "Write the multiplication table of 7, from 7 x 1 up to 7 x 40, one line each.",
    "List the first 100 even numbers, separated by commas.",
    "Write the numbers from 1 to 100, one per line.",
    "Write the numbers from 1 to 200 in words, one per line.",
    "List the squares of the numbers from 1 to 60, separated by commas.",
    "Count from 1 to 500, separated by commas.",
    "List the multiples of 3 from 3 to 600, separated by commas.",
]


def run_reference(binary: str, model: str, threads: int, pp: int, tg: int, sizes: list[int],
                  n_ctx: int, flash_attn: str = "off") -> dict[int, dict]:
    cmd = [binary, "-m", model, "-t", str(threads), "-tb", str(threads),
           "-c", str(n_ctx * max(sizes)), "-b", "512", "-ub", "512", "-fa", flash_attn,
           "-npp", str(pp), "-ntg", str(tg), "-npl", ",".join(map(str, sizes)),
           "--output-format", "jsonl"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    rows = {}
    for line in (out.stdout + "\n" + out.stderr).splitlines():
        line = line.strip()
        if line.startswith("{") and '"speed_tg"' in line:
            d = json.loads(line)
            rows[int(d["pl"])] = d
    if not rows:
        raise RuntimeError(f"llama-batched-bench failed ({out.returncode}):\n"
                           f"{' '.join(cmd)}\n{out.stderr[-2000:]}")
    return rows


def batched(args) -> int:
    header("embedded engine, batched: df_ray vs llama.cpp's llama-batched-bench vs sequential")
    from df_ray.engines.base import ChatRequest, Message, SamplingParams
    from df_ray.engines.llama_cpp import EmbeddedEngine
    from df_ray.engines.spec import EngineSpec, make_spec

    binary = args.reference
    if binary is None and not args.no_reference:
        script = Path(__file__).with_name("build_llama_reference.sh")
        binary = subprocess.run([str(script), sys.executable], capture_output=True, text=True,
                                check=True).stdout.strip().splitlines()[-1]
    sizes = sorted(args.batch_sizes)
    tg = args.max_tokens

    def spec(n_parallel: int) -> EngineSpec:
        return make_spec(kind="embedded", model=args.model, n_threads=args.threads, n_ctx=2048,
                         engine_args={"n_parallel": n_parallel,
                                      "flash_attn": args.flash_attn == "on"})

    seq_engine = EmbeddedEngine(spec(1))
    engines = {b: EmbeddedEngine(spec(b)) for b in sizes}
    sampling = SamplingParams(temperature=0.0, top_p=1.0, max_tokens=tg)

    def reqs(b: int) -> list[ChatRequest]:
        return [ChatRequest(args.model, (Message("user", LONG_PROMPTS[i % len(LONG_PROMPTS)]),),
                            sampling, seed=i) for i in range(b)]

    pp = round(statistics.mean(seq_engine.prompt_tokens(r) for r in reqs(len(LONG_PROMPTS))))
    print(f"# model {args.model} ({seq_engine.model_file.name}), {args.threads} thread(s); "
          f"B requests of ~{pp} prompt tokens, greedy, max_tokens {tg}; reference {binary} "
          f"-npp {pp} -ntg {tg} -fa {args.flash_attn}; {args.rounds} round(s)", flush=True)
    seq_b = 8 if 8 in sizes else sizes[len(sizes) // 2]
    res: dict[str, dict[int, list[float]]] = {"reference": {}, "batched": {}, "sequential": {}}
    pp_speed: list[float] = []  # the reference's prompt processing at the largest B
    short: list[str] = []

    def timed(engine, rs) -> float:
        t = time.perf_counter()
        out = engine.generate(rs)
        wall = time.perf_counter() - t
        n = sum(c.completion_tokens for c in out)
        if n < len(rs) * tg:
            short.append(f"B={len(rs)}: {n} of {len(rs) * tg} tokens")
        return n / wall

    engines[sizes[0]].generate(reqs(1))  # warm-up (model pages)
    seq_engine.generate(reqs(1))
    for rnd in range(args.rounds):
        ref = {} if binary is None else run_reference(
            binary, str(seq_engine.model_file), args.threads, pp, tg, sizes, 2048,
            args.flash_attn)
        if ref:
            pp_speed.append(float(ref[max(ref)]["speed_pp"]))
        for b in sizes:
            if b in ref:
                res["reference"].setdefault(b, []).append(b * tg / ref[b]["t"])
            else:
                res["reference"].setdefault(b, []).append(float("nan"))
            res["batched"].setdefault(b, []).append(timed(engines[b], reqs(b)))
        res["sequential"].setdefault(seq_b, []).append(timed(seq_engine, reqs(seq_b)))
        print(f"round {rnd}: " + "; ".join(
            f"B={b} ref {res['reference'][b][-1]:.1f} batched {res['batched'][b][-1]:.1f}"
            for b in sizes) + f"; sequential (B={seq_b}) {res['sequential'][seq_b][-1]:.1f} tok/s",
            flush=True)
    if short:
        print("# note: some sequences ended before max_tokens: " + "; ".join(short[:4]))
    seq = statistics.median(res["sequential"][seq_b])
    print(f"{'B':>3} {'reference tok/s':>16} {'batched tok/s':>14} {'batched/ref':>11} "
          f"{'batched/sequential':>18}")
    for b in sizes:
        ratios = [a / r for a, r in zip(res["batched"][b], res["reference"][b], strict=True)]
        print(f"{b:>3} {statistics.median(res['reference'][b]):>16.1f} "
              f"{statistics.median(res['batched'][b]):>14.1f} {statistics.median(ratios):>11.2f} "
              f"{statistics.median(res['batched'][b]) / seq:>18.2f}")
    print(f"# sequential engine (n_parallel 1, B={seq_b}): {seq:.1f} tok/s. Targets: "
          "batched/ref >= 0.9 at every B; batched/sequential >= 2 at B=8")
    if pp_speed:
        # A decode step over B sequences is the same matrix products as prompt processing over
        # B tokens, so prompt processing's tokens/s bounds it. Each sequence first processes its
        # pp prompt tokens, then decodes tg: at best B*(pp+tg) tokens at that rate.
        ceil_pp = statistics.median(pp_speed)
        best = tg * ceil_pp / (pp + tg)
        print(f"# compute ceiling: the reference processes prompts at {ceil_pp:.1f} tokens/s "
              f"(B={max(sizes)}); no batch can generate faster than {best:.1f} tokens/s with "
              f"{pp}-token prompts, {best / seq:.2f}x the sequential engine")
    return 0


if __name__ == "__main__":
    sys.exit(main())
