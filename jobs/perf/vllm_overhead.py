"""df_ray's vLLM engine against vLLM itself: what df_ray adds around ``vllm.LLM``.

Paths, same model, same prompts, same sampling (temperature 0.7, top_p 1, max_tokens, one
seed per request):
  raw    : ``vllm.LLM.chat`` (or ``LLM.generate`` for a model without a chat template) with
           every prompt in one call, per-request ``vllm.SamplingParams`` built here;
  engine : ``df_ray.engines.vllm.VLLMEngine.generate`` in this process, on the same
           ``vllm.LLM`` object as raw (so rounds interleave and the ratio is taken within a
           round);
  actor  : the same engine inside the pipeline's EngineActor (Ray), called through
           EngineClient.generate as a stage does. On CPU a second ``vllm.LLM`` lives in the
           actor while the first stays up, so its rounds interleave with raw rounds too; on a
           GPU the in-process engine is closed first (the actor needs the memory) and the
           actor's rounds are compared with the raw rounds measured before.
  actor-chunked : as actor, but the client sends chunks of ``max_batch_size`` (the EngineSpec
           default, 32), as a round stage with a small batch_size does; on a GPU, where vLLM
           wants hundreds of sequences at once, this shows what the chunking costs.
Peak GPU memory (GPU only) = max nvidia-smi memory.used during the rounds. Tokens/s = completion tokens / wall of the call; time to first result = seconds from the call
to the first completion the caller holds (offline vLLM returns everything at once, so it is
the wall; the actor returns chunk by chunk). Ratios are medians over rounds of path/raw within
the round. Target: engine and actor >= 0.9 of raw. ``--profile`` runs the engine path under
cProfile and prints where the time outside ``LLM.chat``/``LLM.generate`` goes.

CPU (the vLLM tier's venv; with no --model a tiny random Llama is built locally, as
tests/engines/test_vllm_cpu.py does; a real small model needs its files on disk):
    PYTHONPATH=$PWD .venv-vllm/bin/python jobs/perf/vllm_overhead.py --prompts 64 --rounds 3
GPU (was jobs/perf/gpu_vllm.py; a GPU model id switches to bfloat16 and one GPU per actor):
    PYTHONPATH=$PWD .venv/bin/python jobs/perf/vllm_overhead.py \\
        --model Qwen/Qwen2.5-0.5B-Instruct --prompts 512 --max-tokens 256 --device gpu
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from jobs.perf.common import header

CPU_ENV = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",  # in-process engine core
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB
    "VLLM_CPU_OMP_THREADS_BIND": "all",
    "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
    "VLLM_TARGET_DEVICE": "cpu",
    # Two vLLM engines share the cores here (raw/engine in this process, the actor's in its
    # own), one idle while the other runs. With OpenMP's default spin-wait, the idle one's
    # threads keep spinning into the other's round and the path measured after it loses the
    # CPU: actor/raw read 0.76 with spinning, 1.12 without, on the same workload. A
    # deployment has one engine per process and set of cores.
    "OMP_WAIT_POLICY": "PASSIVE",
}

WORDS = ["the cat sat on the mat", "a dog ran in the park", "what is two plus two",
         "the answer is four", "please think step by step", "user assistant system hello world"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} {{ eos_token }} "
    "{% endfor %}{% if add_generation_prompt %}assistant :{% endif %}"
)


class GpuMemPeak:
    """Peak of nvidia-smi's memory.used (MiB, all GPUs), sampled every 0.2 s while open.
    vLLM reserves gpu_memory_utilization of the card for its KV cache: this mostly shows
    that reservation."""

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
                self.peak = max(self.peak, sum(int(x) for x in out.stdout.split()))
            except Exception:
                pass
            self._stop.wait(0.2)

    def __enter__(self):
        if shutil.which("nvidia-smi"):
            self._t.start()
        return self

    def __exit__(self, *a):
        self._stop.set()
        if self._t.is_alive():
            self._t.join()


def build_tiny_llama(out: str) -> str:
    """A 2-layer random Llama with a word-level tokenizer and a chat template (CPU tests)."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.train_from_iterator(
        WORDS * 3, trainers.WordLevelTrainer(special_tokens=["<unk>", "<s>", "</s>", "<pad>", ":"]))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>", pad_token="<pad>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(fast), hidden_size=128, intermediate_size=256,
                      num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                      max_position_embeddings=512, bos_token_id=fast.bos_token_id,
                      eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id,
                      tie_word_embeddings=False)
    LlamaForCausalLM(cfg).to(torch.float32).save_pretrained(out)
    return out


def prompts(n: int, tiny: bool) -> list[str]:
    if tiny:  # words the tiny tokenizer knows
        return [" ".join(WORDS[(i + j) % len(WORDS)] for j in range(1 + i % 4)) for i in range(n)]
    return [f"Problem {i}: compute {i} * {i + 7} - {3 * i} and explain each step, then give the "
            "final answer as \\boxed{...}." for i in range(n)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--model", help="HF id or local path; default: a tiny random Llama built "
                    "here (CPU)")
    ap.add_argument("--device", choices=["cpu", "gpu"], default=None,
                    help="default: gpu when --model is given and CUDA is available, else cpu")
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--max-model-len", type=int, default=None,
                    help="default 256 for the tiny model, 2048 otherwise")
    ap.add_argument("--dtype", default=None, help="default float32 on CPU, bfloat16 on GPU")
    ap.add_argument("--max-num-seqs", type=int, default=None,
                    help="vLLM's max_num_seqs (default: vLLM's own; 64 on CPU)")
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.85)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--paths", nargs="+", default=["engine", "actor", "actor-chunked"],
                    choices=["engine", "actor", "actor-chunked"])
    ap.add_argument("--profile", action="store_true",
                    help="profile one engine round: where df_ray's own time goes")
    args = ap.parse_args(argv)

    gpu = args.device == "gpu"
    if args.device is None and args.model:
        try:
            import torch

            gpu = bool(torch.cuda.is_available())
        except Exception:
            gpu = False
    if not gpu:
        for k, v in CPU_ENV.items():
            os.environ.setdefault(k, v)
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    header("vLLM: df_ray's engine (in process and in its EngineActor) vs vllm.LLM itself")
    try:
        import vllm
    except Exception as e:
        print(f"vllm_overhead: nothing measured: vLLM is not importable ({type(e).__name__}: "
              f"{e}); run it in the vLLM venv (.ci/install-vllm-cpu.sh)", file=sys.stderr)
        return 3

    from df_ray.engines.base import ChatRequest, Message, SamplingParams
    from df_ray.engines.spec import EngineSpec
    from df_ray.engines.vllm import VLLMEngine

    tiny = args.model is None
    model = args.model or build_tiny_llama(tempfile.mkdtemp(prefix="tiny-llama-"))
    dtype = args.dtype or ("bfloat16" if gpu else "float32")
    max_len = args.max_model_len or (256 if tiny else 2048)
    engine_args: dict = {}
    if not gpu:
        engine_args["enforce_eager"] = True
        engine_args["max_num_seqs"] = args.max_num_seqs or 64
    elif args.max_num_seqs:
        engine_args["max_num_seqs"] = args.max_num_seqs
    texts = prompts(args.prompts, tiny)
    sampling = SamplingParams(temperature=0.7, top_p=1.0, max_tokens=args.max_tokens)
    reqs = [ChatRequest(model, (Message("user", t),), sampling, seed=i)
            for i, t in enumerate(texts)]
    spec_kw = dict(kind="vllm", model=model, dtype=dtype, max_model_len=max_len,
                   gpu_memory_utilization=args.gpu_memory_utilization,
                   num_gpus=1 if gpu else 0, engine_args=engine_args,
                   max_batch_size=len(reqs))
    spec = EngineSpec(**spec_kw)
    print(f"# model {'tiny random Llama (local)' if tiny else model}, {dtype}, "
          f"{'GPU' if gpu else 'CPU'}, {len(reqs)} prompts x max_tokens {args.max_tokens}, "
          f"temperature 0.7, seed per request; {args.rounds} rounds", flush=True)

    t = time.perf_counter()
    engine = VLLMEngine(spec)
    print(f"# engine start (in process) {time.perf_counter() - t:.1f}s", flush=True)
    llm = engine.llm
    params = [vllm.SamplingParams(n=1, temperature=0.7, top_p=1.0, max_tokens=args.max_tokens,
                                  seed=i) for i in range(len(texts))]
    convs = [[{"role": "user", "content": x}] for x in texts]

    def run_raw() -> tuple[int, float]:
        if engine.prompt_format == "chat":
            outs = llm.chat(convs, params, use_tqdm=False)
        else:
            from df_ray.engines.completion_prompt import render_completion_prompt

            outs = llm.generate([render_completion_prompt(r.messages) for r in reqs], params,
                                use_tqdm=False)
        return sum(len(o.outputs[0].token_ids) for o in outs), -1.0

    def run_engine() -> tuple[int, float]:
        return sum(c.completion_tokens for c in engine.generate(reqs)), -1.0

    paths = {"raw": run_raw}
    if "engine" in args.paths:
        paths["engine"] = run_engine
    pool = None
    actor_paths = [p for p in args.paths if p.startswith("actor")]
    rates: dict[str, list[float]] = {}
    firsts: dict[str, list[float]] = {}

    def rounds(fns: dict, n: int) -> None:
        for fn in fns.values():  # warm-up
            fn()
        for rnd in range(n):
            line = []
            for name, fn in fns.items():
                t0 = time.perf_counter()
                toks, first = fn()
                wall = time.perf_counter() - t0
                rates.setdefault(name, []).append(toks / wall)
                firsts.setdefault(name, []).append(first if first >= 0 else wall)
                line.append(f"{name} {toks / wall:.1f} tok/s ({toks} tok, first result "
                            f"{firsts[name][-1]:.2f}s)")
            print(f"round {rnd}: " + "; ".join(line), flush=True)

    if args.profile:
        prof = cProfile.Profile()
        run_engine()
        prof.enable()
        t0 = time.perf_counter()
        run_engine()
        wall = time.perf_counter() - t0
        prof.disable()
        st = pstats.Stats(prof)
        inner = sum(v[3] for k, v in st.stats.items()
                    if k[2] in ("chat", "generate") and "vllm" in k[0] and "entrypoints" in k[0])
        print(f"# profile of one engine round: {wall:.3f}s wall, {inner:.3f}s inside "
              f"vllm.LLM.chat/generate, {wall - inner:.3f}s df_ray around it "
              f"({1e3 * (wall - inner) / len(reqs):.2f} ms a request)")
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(
            r"df_ray|apply_chat_template|encode|from_dict|to_dict", 12)
        lines = [x for x in buf.getvalue().splitlines()
                 if x.strip() and not x.startswith(("   Ordered", "   List"))]
        print("\n".join("#   " + x for x in lines[:40]))

    if gpu:
        with GpuMemPeak() as mem:
            rounds(paths, args.rounds)
        print(f"# peak GPU memory, in process: {mem.peak} MiB", flush=True)
        if actor_paths:
            engine.close()
            paths = {}
    if actor_paths:
        try:
            import ray
        except ImportError:
            print("# actor paths skipped: Ray is not installed in this venv", flush=True)
            actor_paths = []
    if actor_paths:
        from df_ray.pipeline.engine_pool import EnginePool

        if not ray.is_initialized():  # as df_ray's embedded Ray (runner.init_ray), lighter
            os.environ.setdefault("RAY_worker_niceness", "0")
            ray.init(num_cpus=max(8, os.cpu_count() or 1), include_dashboard=False,
                     runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(
                         p for p in sys.path if p)}})
        t = time.perf_counter()
        pool = EnginePool({"b": spec})
        pool.wait_ready()
        print(f"# engine start (actor) {time.perf_counter() - t:.1f}s", flush=True)
        chunk = EngineSpec.model_fields["max_batch_size"].default
        for p in actor_paths:
            size = len(reqs) if p == "actor" else chunk
            client = pool.client()
            client.specs = {"b": spec.model_copy(update={"max_batch_size": size})}

            def run_actor(client=client) -> tuple[int, float]:
                t0 = time.perf_counter()
                inflight = client._submit(reqs, list(range(len(reqs))))
                ray.wait([ref for _, _, ref in inflight], num_returns=1)
                first = time.perf_counter() - t0
                outs = ray.get([ref for _, _, ref in inflight])
                return sum(d["completion_tokens"] for part in outs for d in part), first

            paths[p] = run_actor
    if paths:
        with GpuMemPeak() as mem:
            rounds(paths, args.rounds)
        if gpu:
            print(f"# peak GPU memory, actor: {mem.peak} MiB", flush=True)
    if pool is not None:
        pool.shutdown()
    med = {k: statistics.median(v) for k, v in rates.items()}
    print("# median tokens/s: " + ", ".join(f"{k} {v:.1f}" for k, v in med.items()))
    print("# median time to first result (s): "
          + ", ".join(f"{k} {statistics.median(v):.2f}" for k, v in firsts.items()))
    for name in rates:
        if name == "raw":
            continue
        if len(rates[name]) == len(rates["raw"]) and not gpu:
            ratios = [a / b for a, b in zip(rates[name], rates["raw"][-len(rates[name]):],
                                            strict=True)]
        else:  # different phases (GPU): medians
            ratios = [med[name] / med["raw"]]
        print(f"# {name}/raw tokens/s: {statistics.median(ratios):.3f} (rounds: "
              f"{', '.join(f'{r:.2f}' for r in ratios)}; target >= 0.9)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
