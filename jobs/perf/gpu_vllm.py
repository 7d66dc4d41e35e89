"""df_ray's vLLM stage against raw vLLM on one GPU: tokens/s, time to first result, peak GPU
memory. One prepared script for a GPU machine (it exits with a message, status 3, when there is
no GPU or no vLLM).

Paths, each in its own subprocess (so one's GPU memory never counts against the other's):
  raw        : vllm.LLM(...).chat(all prompts, per-request SamplingParams) in one call;
  actor      : df_ray.pipeline.engine_pool.EnginePool (one VLLMEngine in an EngineActor with
               num_gpus=1) + EngineClient.generate(all requests), as a round stage sends them:
               chunks of the backbone's max_batch_size (the EngineSpec default, 32);
  actor-full : the same with max_batch_size = the number of prompts (one chunk: what a
               coalescing engine actor would give vLLM).
Same model, same prompts, same sampling (temperature 0.7, top_p 1, max_tokens, one seed per
request). Tokens/s = completion tokens / wall of the generate call(s); time to first result =
seconds from the call to the first completion the caller can use (offline vLLM returns all at
once; the actor path returns chunk by chunk); peak GPU memory = max nvidia-smi memory.used
sampled every 0.2 s during the path (vLLM reserves gpu_memory_utilization of the card for its
KV cache, so this mostly shows that reservation). Target: actor tokens/s >= 0.9 x raw.

    .venv/bin/python jobs/perf/gpu_vllm.py --model Qwen/Qwen2.5-0.5B-Instruct --prompts 512
    .venv/bin/python jobs/perf/gpu_vllm.py --help
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from jobs.perf.common import header


def prompts(n: int) -> list[str]:
    return [f"Problem {i}: compute {i} * {i + 7} - {3 * i} and explain each step, then give the "
            "final answer as \\boxed{...}." for i in range(n)]


def gpu_present() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return "nvidia-smi not found"
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError) as e:
        return f"nvidia-smi failed: {e}"
    if out.returncode != 0 or "GPU" not in out.stdout:
        return "nvidia-smi lists no GPU"
    return None


class GpuMemPeak:
    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used",
                                      "--format=csv,noheader,nounits"],
                                     capture_output=True, text=True, timeout=5)
                used = sum(int(x) for x in out.stdout.split())
                self.peak = max(self.peak, used)
            except Exception:
                pass
            self._stop.wait(0.2)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *a):
        self._stop.set()
        self._t.join()


def child(path: str, args) -> dict:
    from df_ray.engines.base import ChatRequest, Message, SamplingParams
    from df_ray.engines.spec import EngineSpec

    texts = prompts(args.prompts)
    sampling = SamplingParams(temperature=0.7, top_p=1.0, max_tokens=args.max_tokens)
    reqs = [ChatRequest(args.model, (Message("user", t),), sampling, seed=i)
            for i, t in enumerate(texts)]
    spec_kw = {"kind": "vllm", "model": args.model, "dtype": args.dtype,
               "max_model_len": args.max_model_len,
               "gpu_memory_utilization": args.gpu_memory_utilization}
    with GpuMemPeak() as mem:
        if path == "raw":
            import vllm

            llm = vllm.LLM(model=args.model, dtype=args.dtype, max_model_len=args.max_model_len,
                           gpu_memory_utilization=args.gpu_memory_utilization, seed=0)
            params = [vllm.SamplingParams(n=1, temperature=0.7, top_p=1.0,
                                          max_tokens=args.max_tokens, seed=i)
                      for i in range(len(texts))]
            convs = [[{"role": "user", "content": t}] for t in texts]
            llm.chat(convs[:8], params[:8], use_tqdm=False)  # warm-up (CUDA graphs, kernels)
            t = time.perf_counter()
            outs = llm.chat(convs, params, use_tqdm=False)
            wall = time.perf_counter() - t
            first = wall
            toks = sum(len(o.outputs[0].token_ids) for o in outs)
        else:
            import ray

            from df_ray.pipeline.engine_pool import EnginePool
            from df_ray.pipeline.runner import init_ray

            init_ray()
            mbs = len(reqs) if path == "actor-full" else EngineSpec.model_fields[
                "max_batch_size"].default
            spec = EngineSpec(**spec_kw, max_batch_size=mbs)
            pool = EnginePool({"b": spec})
            pool.wait_ready()
            client = pool.client()
            client.generate(reqs[:8])  # warm-up
            # Time to first result: submit as a stage does, and wait for the first chunk.
            t = time.perf_counter()
            inflight = client._submit(reqs, list(range(len(reqs))))
            ray.wait([ref for _, _, ref in inflight], num_returns=1)
            first = time.perf_counter() - t
            outs = ray.get([ref for _, _, ref in inflight])
            wall = time.perf_counter() - t
            toks = sum(d["completion_tokens"] for chunk in outs for d in chunk)
            pool.shutdown()
    return {"path": path, "tokens": toks, "wall_s": wall, "tok_s": toks / wall,
            "first_result_s": first, "peak_gpu_mib": mem.peak}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--model", default="Qwen/Qwen2.5-0.5B-Instruct",
                    help="HF id or local path (the GPU machine must have it: it has no network)")
    ap.add_argument("--prompts", type=int, default=512)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--max-model-len", type=int, default=2048)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.85)
    ap.add_argument("--paths", nargs="+", default=["raw", "actor", "actor-full"],
                    choices=["raw", "actor", "actor-full"])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print("RESULT " + json.dumps(child(args.child, args)), flush=True)
        return 0
    header("vLLM: df_ray's engine actor vs raw vLLM on one GPU")
    why = gpu_present()
    try:
        import vllm  # noqa: F401
    except Exception as e:
        why = why or f"vLLM is not importable ({type(e).__name__}: {e})"
    if why:
        print(f"gpu_vllm: nothing measured: {why}. Run this on a machine with an NVIDIA GPU "
              "and vLLM installed (pip install vllm).", file=sys.stderr)
        return 3
    results = {}
    for path in args.paths:
        cmd = [sys.executable, __file__, "--child", path, "--model", args.model,
               "--prompts", str(args.prompts), "--max-tokens", str(args.max_tokens),
               "--max-model-len", str(args.max_model_len), "--dtype", args.dtype,
               "--gpu-memory-utilization", str(args.gpu_memory_utilization)]
        env = {**os.environ, "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}
        out = subprocess.run(cmd, capture_output=True, text=True, env=env)
        line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
        if out.returncode != 0 or line is None:
            print(f"{path}: failed (status {out.returncode}):\n{out.stderr[-3000:]}")
            continue
        results[path] = json.loads(line[7:])
        r = results[path]
        print(f"{path:11} {r['tokens']:>8} tok {r['wall_s']:>8.2f} s {r['tok_s']:>9.1f} tok/s "
              f"first result {r['first_result_s']:>7.2f} s  peak GPU {r['peak_gpu_mib']} MiB",
              flush=True)
    if "raw" in results:
        for p in ("actor", "actor-full"):
            if p in results:
                print(f"# {p}/raw tokens/s = {results[p]['tok_s'] / results['raw']['tok_s']:.3f} "
                      "(target >= 0.9)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
