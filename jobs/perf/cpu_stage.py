"""The CPU stage (parse + build_belief + disclose + decide) in samples per second per core,
against the engines' sample rate on a GPU; plain Python, no Ray. cProfile of the hot spots.

Outputs are realistic in shape: ~400-token reasoning traces (3 agents + 1 coordinator per
sample) that end with each kind's final-answer marker; every sample has its own answers, so
the canonicalization caches (lru_cache on canonical_math) start cold ("cold" rows); the
"warm" rows repeat the same samples (answers already canonicalized, as in a threshold sweep).

GPU assumption (stated, not measured here): a 7B model under vLLM on one H100 decodes about
2,500 output tokens/s per GPU in aggregate; DarkForest makes ~4 calls per sample of ~400
output tokens -> 2,500 / (4 * 400) ~ 1.6 samples/s per GPU. With 3 backbones on 3 GPUs a
DarkForest run produces ~1.5 samples/s per GPU x 3 GPUs / 3 backbones-per-sample... i.e. the
whole job ~1.6 samples/s per GPU used; the CPU stage must beat that by a wide margin per core.

    .venv/bin/python jobs/perf/cpu_stage.py                 # ~1 min
    .venv/bin/python jobs/perf/cpu_stage.py --samples 300 --profile math

``--stage``: the Ray Data stage's own work per engine request, in one process without Ray:
`df_ray.pipeline.stages.EvaluationStage` itself (prompts, keys, cache lookups and writes
through its `WriteBehind`, parsing, belief, disclosure, guardrail, grading, the Arrow output)
over the sweep `jobs/perf/cluster_scale.py` submits (DarkForest on MMLU-Pro rows in GoA's
schema, 3 agents + 1 coordinator, ``no_calibration``), every call answered at once by the
simulated engine's own answer (its responder and lengths) in this thread instead of through
Ray and the engine pump. Prints the stage thread's CPU-us per engine request (less the
simulated answers' own);
``--stage-profile`` a cProfile of it; ``--dump DIR`` the results rows and the cache's rows
(for comparing two checkouts).

    PYTHONPATH=$PWD .venv/bin/python jobs/perf/cpu_stage.py --stage 1000 --repeat 3
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import random
import sys
import time
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from jobs.perf.common import header

GPU_SAMPLES_PER_S = 2500 / (4 * 400)  # per GPU, see the module docstring

FILLER = ["We", "consider", "the", "quantities", "involved", "and", "check", "each", "step", "carefully", "before", "moving", "on", "so", "that", "no", "arithmetic", "slip", "survives", "into", "the", "final", "result"]


def reasoning(rng: random.Random, tokens: int = 380) -> str:
    words = [rng.choice(FILLER) for _ in range(tokens)]
    lines = [" ".join(words[i:i + 20]) + "." for i in range(0, len(words), 20)]
    return "Let me solve this step by step.\n" + "\n".join(lines)


def math_answer(i: int, variant: int) -> str:
    forms = [f"\\frac{{{i + 1}}}{{{i + 3}}}", f"{i + 1}/{i + 3}", f"\\sqrt{{{i + 2}}} + {i}",
             f"{i}\\pi", f"x^2 + {i}x + {i + 1}", f"{(i + 1) / (i + 3):.4f}", f"\\dfrac{{{2 * i + 2}}}{{{2 * i + 6}}}"]
    return forms[(i + variant) % len(forms)]


def make_outputs(kind: str, i: int, rng: random.Random) -> tuple[list[str], str]:
    """(3 agent outputs, coordinator output) for sample i."""
    conf = lambda: f"Confidence: {rng.uniform(0.3, 0.95):.2f}"  # noqa: E731
    if kind == "math":
        ans = [math_answer(i, v) for v in (0, 1 if i % 3 else 0, 2)]
        outs = [f"{reasoning(rng)}\nThe final answer is \\boxed{{{a}}}.\n{conf()}" for a in ans]
        coord = f"The evidence favours it.\nThe final answer is \\boxed{{{ans[0]}}}.\n{conf()}"
    elif kind == "choice":
        letters = "ABCDEFGHIJ"
        ans = [letters[(i + v) % 10] for v in (0, 0 if i % 3 else 1, 2)]
        outs = [f"{reasoning(rng)}\nAnswer: ({a})\n{conf()}" for a in ans]
        coord = f"Answer: ({ans[0]})\n{conf()}"
    elif kind == "code":
        bodies = [f"def f{i}(xs):\n    total = 0\n    for x in xs:\n        total += x * {i}\n    return total\n",
                  f"def f{i}(xs):\n    return sum(x * {i} for x in xs)\n",
                  f"def f{i}(xs):\n    # accumulate\n    total = 0\n    for x in xs:\n        total += x * {i}\n    return total\n"]
        outs = [f"{reasoning(rng, 200)}\n```python\n{b}```\n{conf()}" for b in bodies]
        coord = f"```python\n{bodies[0]}```\n{conf()}"
    elif kind == "finqa":
        a, b = 5000 + i, 4000 + 2 * i
        progs = [f"subtract({a}, {b}), divide(#0, {b})", f"subtract({a}, {b}), divide(#0, {b})",
                 f"divide({a}, {b})"]
        outs = [f"{reasoning(rng)}\nProgram: {p}\n{conf()}" for p in progs]
        coord = f"Program: {progs[0]}\n{conf()}"
    elif kind == "label":
        labels = ["yes", "no"]
        outs = [f"{reasoning(rng)}\nAnswer: {labels[(i + v) % 2]}\n{conf()}" for v in (0, 0, 1)]
        coord = f"Answer: {labels[i % 2]}\n{conf()}"
    else:
        raise ValueError(kind)
    return outs, coord


def spec_for(kind: str, i: int):
    from df_ray.core import ParseSpec

    return {"math": ParseSpec("math"), "choice": ParseSpec("choice", n_options=10),
            "code": ParseSpec("code", entry_point=f"f{i}"), "finqa": ParseSpec("finqa"),
            "label": ParseSpec("label", labels=("yes", "no"))}[kind]


def one_sample(kind, i, outs, coord, calibration):
    from df_ray.core import GuardrailConfig, build_belief, decide, disclose, parse

    spec = spec_for(kind, i)
    obs = [parse(t, spec, agent=f"a{j}") for j, t in enumerate(outs)]
    belief = build_belief(obs, calibration, agent_order=["a0", "a1", "a2"])
    guard = GuardrailConfig()
    disclose(belief, obs, "strict", count_tokens=lambda t: len(t.split()), guardrail=guard)
    c = parse(coord, spec, agent="coord")
    return decide(belief, c.answer if c.valid else None, guard)


def bench(kind: str, n: int, seed: int = 0, offset: int = 0) -> tuple[float, float]:
    rng = random.Random(seed)
    data = [make_outputs(kind, offset + i, rng) for i in range(n)]
    t = time.perf_counter()
    c = time.process_time()
    for i, (outs, coord) in enumerate(data):
        one_sample(kind, offset + i, outs, coord, None)
    return n / (time.perf_counter() - t), n / max(time.process_time() - c, 1e-9)


class LocalEngines:
    """Every request answered at once, in the caller's thread, with the simulated engine's
    own answer (`df_ray.engines.simulated`: its responder, its lengths and padding): the
    stage's engine client less Ray and the pump."""

    answers_as_they_come = True

    def __init__(self, backbones) -> None:
        from df_ray.engines.simulated import SimulatedEngine

        self.engines = {name: SimulatedEngine(spec) for name, spec in backbones.items()}
        self.requests = 0
        self.cpu = 0.0  # the engines' own CPU seconds (the answers), left out of the figure

    def generate(self, requests, on_answer=None):
        from df_ray.engines.simulated import SimulatedEngine

        out = []
        for i, r in enumerate(requests):
            t = time.thread_time()
            c = SimulatedEngine._answer(self.engines[r.backbone]._seq(r, None, None))
            self.cpu += time.thread_time() - t
            out.append(c)
            if on_answer is not None:
                on_answer(i, c)
        self.requests += len(requests)
        return out

    def generate_rolling(self, first, on_answer):
        """The stage's path (each sample on to its next round as its own calls are
        answered): every request answered in the order it came, the requests each answer
        leads to after those already waiting."""
        todo, out = list(first), []
        while len(out) < len(todo):
            (c,) = self.generate([todo[len(out)]])
            out.append(c)
            todo.extend(on_answer(len(out) - 1, c))
        return out

    def count_tokens(self, backbone: str, texts) -> list[int]:
        return [self.engines[backbone].count_tokens(t) for t in texts]


def stage_plans(tmp: Path, samples: int, batch_size: int, source: str | None):
    """The plans of cluster_scale.py's sweep (its own files), and its samples."""
    from df_ray.evaluation.context import load_samples
    from df_ray.evaluation.plan import resolve
    from jobs.perf.cluster_scale import write_source, write_sweep

    src = Path(source) if source else write_source(tmp / "mmlu_pro.json", samples)
    opts = argparse.Namespace(capacity=256, step_s=0.0, mean_tokens=70.0,
                              batch_size=batch_size, concurrency=1)
    plans = resolve(write_sweep(tmp, src, 4, samples, opts), storage=False)
    return plans, load_samples(plans[0].cfg)


def run_stage(samples: int, batch_size: int, source: str | None, profile: bool,
              dump: Path | None) -> tuple[float, int]:
    """(the stage thread's CPU seconds, engine requests) for one stage over the samples."""
    import tempfile

    import numpy as np
    import pyarrow as pa

    from df_ray.pipeline import stages
    from df_ray.pipeline.rows import encode_sample

    with tempfile.TemporaryDirectory(prefix="cpu-stage-") as d:
        plans, rows = stage_plans(Path(d), samples, batch_size, source)
        engines = LocalEngines(plans[0].cfg.backbones)
        # the stage's engine client is this process's answers (no handles, no Ray)
        with mock.patch.object(stages, "make_client", lambda *_a, **_k: engines):
            stage = stages.EvaluationStage(plans, {})
        batches = [{"sample": np.array([encode_sample(s) for s in rows[i:i + batch_size]],
                                       dtype=object)}
                   for i in range(0, len(rows), batch_size)]
        pr = cProfile.Profile() if profile else None
        out = []
        c = time.thread_time()
        if pr is not None:
            pr.enable()
        for b in batches:
            out.append(stage(b))
        if pr is not None:
            pr.disable()
        cpu = time.thread_time() - c - engines.cpu
        if pr is not None:
            s = io.StringIO()
            pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(30)
            print("# cProfile of the stage, top 30 by own time:")
            for line in s.getvalue().splitlines():
                if line.strip() and ("(" in line or "ncalls" in line):
                    print("#   " + line.rstrip()[:160])
        if dump is not None:
            _dump(pa.concat_tables(out), Path(d) / "cache", dump)
    return cpu, engines.requests


def _dump(results, cache_root: Path, to: Path) -> None:
    """The results rows (less ``busy_s``, a timing) and every cache row, each sorted."""
    import pyarrow.parquet as pq

    to.mkdir(parents=True, exist_ok=True)
    results = results.drop_columns(["busy_s"])
    pq.write_table(results.sort_by([("sample_id", "ascending"), ("config", "ascending")]),
                   to / "results.parquet")
    parts = sorted(cache_root.rglob("*.parquet"))
    import pyarrow as pa

    cache = pa.concat_tables([pq.read_table(p) for p in parts])
    pq.write_table(cache.sort_by(cache.column_names[0]), to / "cache.parquet")
    print(f"# dumped {results.num_rows} result rows, {cache.num_rows} cache rows "
          f"({len(parts)} parts) to {to}")


def stage_main(args: argparse.Namespace) -> int:
    header("The stage's own work per engine request, one process, no Ray "
           "(cluster_scale.py's sweep, simulated answers)")
    run_stage(min(args.stage, 2 * args.batch_size), args.batch_size, args.source, False,
              None)  # first-use imports and the answer kinds' warm-up out of the figure
    for k in range(args.repeat):
        last = k == args.repeat - 1
        cpu, n = run_stage(args.stage, args.batch_size, args.source,
                           args.stage_profile and last, args.dump if last else None)
        print(f"run {k + 1}: {n} engine requests, stage thread {cpu:.2f} CPU-s: "
              f"{cpu / n * 1e6:.0f} CPU-us per request", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stage", type=int, metavar="SAMPLES",
                    help="the stage's own work per engine request over this many samples")
    ap.add_argument("--batch-size", type=int, default=16, help="--stage: samples per batch")
    ap.add_argument("--source", help="--stage: an MMLU-Pro file in GoA's schema "
                    "(default: cluster_scale.py's synthetic rows)")
    ap.add_argument("--repeat", type=int, default=1, help="--stage: runs, each printed")
    ap.add_argument("--stage-profile", action="store_true", help="--stage: cProfile the last")
    ap.add_argument("--dump", type=Path, help="--stage: write the last run's rows here")
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--kinds", nargs="+", default=["math", "choice", "code", "finqa", "label"])
    ap.add_argument("--profile", nargs="*", default=["math"], help="kinds to cProfile")
    args = ap.parse_args(argv)
    if args.stage:
        return stage_main(args)
    header("CPU stage: parse + build_belief + disclose + decide, samples/s on one core")
    print(f"# assumption: GPU engines ~{GPU_SAMPLES_PER_S:.2f} samples/s per GPU "
          "(7B, vLLM, H100: 2,500 output tok/s; 4 calls x 400 tokens per sample)")
    # Warm imports (sympy / math-verify load lazily on the first math answer).
    one_sample("math", 10**6, *make_outputs("math", 10**6, random.Random(1)), None)
    print(f"{'kind':8} {'cold/s(cpu)':>12} {'cold/s(wall)':>12} {'warm/s(cpu)':>12} "
          f"{'GPUs one core feeds':>20}")
    for kind in args.kinds:
        cold_wall, cold_cpu = bench(kind, args.samples)
        _warm_wall, warm_cpu = bench(kind, args.samples)  # same answers again: caches warm
        print(f"{kind:8} {cold_cpu:>12.1f} {cold_wall:>12.1f} {warm_cpu:>12.1f} "
              f"{cold_cpu / GPU_SAMPLES_PER_S:>20.0f}", flush=True)
    from df_ray.core.parsing.math_kind import canonical_math

    # math-verify alone: canonical_math on fresh symbolic answers (what the lru_cache hides).
    answers = [math_answer(50_000 + i, 2) for i in range(args.samples)]
    c = time.process_time()
    for a in answers:
        canonical_math(a)
    per = (time.process_time() - c) / len(answers)
    nums = [f"{(i + 1) / 7:.5f}" for i in range(args.samples)]
    c = time.process_time()
    for a in nums:
        canonical_math(a + "0")
    per_num = (time.process_time() - c) / len(nums)
    print(f"# canonical_math, fresh symbolic answer (sympy/math-verify path): {per * 1e3:.2f} ms; "
          f"fresh plain number (exact Fraction path): {per_num * 1e3:.3f} ms")
    for kind in args.profile or []:
        pr = cProfile.Profile()
        rng = random.Random(7)
        data = [make_outputs(kind, 200_000 + i, rng) for i in range(args.samples)]
        pr.enable()
        for i, (outs, coord) in enumerate(data):
            one_sample(kind, 200_000 + i, outs, coord, None)
        pr.disable()
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(18)
        print(f"# cProfile, {kind}, {args.samples} cold samples, top 18 by cumulative time:")
        for line in s.getvalue().splitlines():
            if line.strip() and ("(" in line or "ncalls" in line):
                print("#   " + line.rstrip()[:150])
    return 0


if __name__ == "__main__":
    sys.exit(main())
