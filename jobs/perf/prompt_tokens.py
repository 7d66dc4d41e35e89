"""Per-call tokens of DarkForest's prompts against the paper's figures, per benchmark and
prompt variant: the real prompts df_ray renders, counted with a real tokenizer.

Every benchmark's DarkForest run goes through df_ray's own driver on its fixture samples (or
``--source BENCH=PATH`` for the real data: GoA's files, a LegalBench ``tasks/`` copy), with a
scripted engine whose every answer is ``--completion`` tokens long (a stated length, not a
measured one: the answers are filler text with a valid final line). Each request's messages
are rendered as Qwen2.5's chat template renders them (ChatML, with Qwen2.5's default system
turn when the request has none) and counted with the Qwen2.5 tokenizer, read from the
packaged Qwen2.5-Coder-0.5B GGUF through llama-cpp-python (``vocab_only``: no weights
loaded); Qwen2.5-7B-Instruct, the agents' general model and the coordinator, shares that
vocabulary. ``--chars4`` counts characters / 4 instead (no model needed).

Printed per benchmark and variant: the mean prompt tokens of an agent call and of the
coordinator's call (the evidence included), the mean evidence tokens (T_cross), the estimated
tokens per call and per DarkForest sample (3 agents + the coordinator, each prompt plus
``--completion``), and the paper's per-sample figure with its per-call quarter.

    PYTHONPATH=$PWD .venv/bin/python jobs/perf/prompt_tokens.py
    PYTHONPATH=$PWD .venv/bin/python jobs/perf/prompt_tokens.py --completion 400 \\
        --source mmlu_pro=$DF_RAY_HOME/data/goa/MMLU_Pro_sampled_test.json --limit 50

MMLU-Pro's ``official`` variant needs its validation examples: the fixture copy
(``tests/fixtures/mmlu_pro_validation.json``, short synthetic examples) unless
``--mmlu-pro-validation`` names a copy of the hub's split; with the fixture the script also
prints the prompt with its examples scaled to the hub's measured mean (about 4,100
characters for a category's five examples) so that the figure is the real prompt's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
SOURCES = {"math": "math500.jsonl", "humaneval": "humaneval.jsonl", "mmlu_pro": "mmlu_pro.json",
           "gpqa": ".", "finqa": "finqa", "legalbench": "legalbench_tasks"}
#: The paper's DarkForest tokens per sample (DESIGN section 4).
PAPER = {"math": 4700, "humaneval": 1500, "mmlu_pro": 5900, "gpqa": 3200, "finqa": 4500,
         "legalbench": 1900}
#: Prompt variants measured: (label, benchmark_args, environment).
VARIANTS: dict[str, list[tuple[str, dict, dict]]] = {
    "mmlu_pro": [("ours", {}, {}), ("official (5-shot CoT)", {"prompt": "official"}, {})],
    "legalbench": [("zero_shot", {}, {}),
                   ("official (few-shot)", {}, {"DF_RAY_LEGALBENCH_PROMPTS": "official"})],
}
#: The hub validation split's five examples per category, mean characters as the official
#: prompt formats them (measured over the 70 rows of TIGER-Lab/MMLU-Pro ``validation``).
HUB_SHOT_CHARS = 4100
QWEN_DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."


def counter(chars4: bool):
    if chars4:
        return lambda text: max(1, round(len(text) / 4))
    from llama_cpp import Llama

    from df_ray.engines.llama_cpp import model_path

    llm = Llama(model_path=str(model_path("qwen25-coder-0.5b-instruct")), vocab_only=True,
                verbose=False)
    return lambda text: len(llm.tokenize(text.encode("utf-8"), add_bos=False, special=True))


def chatml(messages: Sequence) -> str:
    msgs = list(messages)
    text = ""
    if not msgs or msgs[0].role != "system":
        text += f"<|im_start|>system\n{QWEN_DEFAULT_SYSTEM}<|im_end|>\n"
    for m in msgs:
        text += f"<|im_start|>{m.role}\n{m.content}<|im_end|>\n"
    return text + "<|im_start|>assistant\n"


def filler_answer(kind: str, n_words: int):
    """A responder: ``n_words`` words of filler and a final line the task's parser reads."""
    pad = " ".join(["step"] * max(0, n_words - 6))
    final = {"choice": "Answer: B", "math": "Answer: \\boxed{2}", "label": "Answer: Yes",
             "code": "```python\ndef f(x):\n    return x\n```",
             "finqa": "Answer: add(1, 2)"}.get(kind, "Answer: B")

    def respond(request) -> str:
        return f"{pad}\n{final}\nConfidence: 0.8"
    return respond


def measure(bench: str, args: dict, env: dict, source: str, limit: int, completion: int,
            count) -> dict:
    from df_ray.config import RunConfig
    from df_ray.engines.scripted import ScriptedEngine
    from df_ray.evaluation import Driver, Member, build_context
    from df_ray.methods import get_method

    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        cfg = RunConfig.model_validate({
            "benchmark": bench, "method": "darkforest", "benchmark_args": args,
            "backbones": {f"b{i}": {"kind": "scripted", "model": f"m{i}"} for i in "123c"},
            "agents": [{"id": f"a{i}", "backbone": f"b{i}"} for i in "123"],
            "coordinator": {"id": "coord", "backbone": "bc"},
            "method_args": {"ablation": "no_calibration", "guardrail": {"enabled": False}}})
        task = cfg.build_task()
        samples = task.load("test", source=source, limit=limit)
        method = get_method("darkforest", **cfg.method_args)
        ctx = build_context(cfg, None, lambda agent, text: count(text))
        # the completion's words, so that its tokens are about ``completion``
        engine = ScriptedEngine("scripted", filler_answer(task.kind, int(completion * 0.75)))
        driver = Driver([Member(method, ctx)], engine)
        rows = driver.run(samples)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    agent = [count(chatml(r.messages)) for r in engine.calls if r.model != "mc"]
    coord = [count(chatml(r.messages)) for r in engine.calls if r.model == "mc"]
    t_cross = [st.data.get("t_cross") for states in rows for st in states[:1]
               if isinstance(st.data.get("t_cross"), int | float)]
    return {"n": len(samples), "agent": statistics.mean(agent),
            "coord": statistics.mean(coord) if coord else 0.0,
            "t_cross": statistics.mean(t_cross) if t_cross else None}


def fixture_validation(validation: str) -> str:
    """The MMLU-Pro validation file to use: the fixture's math examples standing for every
    category (a temporary copy) when ``validation`` is the fixture, else ``validation``."""
    if validation != str(FIXTURES / "mmlu_pro_validation.json"):
        return validation
    import json
    import tempfile

    rows = [r for r in json.loads(Path(validation).read_text()) if r["category"] == "math"]
    cats = ["biology", "business", "chemistry", "computer science", "economics",
            "engineering", "health", "history", "law", "math", "other", "philosophy",
            "physics", "psychology"]
    tmp = Path(tempfile.mkdtemp()) / "validation.json"
    tmp.write_text(json.dumps([{**r, "category": c} for c in cats for r in rows]))
    return str(tmp)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--completion", type=int, default=300,
                    help="stated completion tokens of every call (default 300)")
    ap.add_argument("--limit", type=int, default=20, help="samples per benchmark")
    ap.add_argument("--source", action="append", default=[], metavar="BENCH=PATH")
    ap.add_argument("--mmlu-pro-validation", default=str(FIXTURES / "mmlu_pro_validation.json"))
    ap.add_argument("--chars4", action="store_true", help="characters / 4, no tokenizer")
    ap.add_argument("--benchmarks", default=",".join(SOURCES))
    a = ap.parse_args(argv)
    sources = {b: str(FIXTURES / p) for b, p in SOURCES.items()}
    for item in a.source:
        b, _, p = item.partition("=")
        sources[b] = p
    fixture_shots = a.mmlu_pro_validation == str(FIXTURES / "mmlu_pro_validation.json")
    os.environ["DF_RAY_MMLU_PRO_VALIDATION"] = fixture_validation(a.mmlu_pro_validation)
    count = counter(a.chars4)
    print(f"completion: {a.completion} tokens a call (stated); tokenizer: "
          f"{'chars/4' if a.chars4 else 'Qwen2.5 (GGUF vocab)'}")
    print("| benchmark | prompt | samples | agent prompt | coordinator prompt | T_cross | "
          "per call | per DarkForest sample | paper per sample (per call) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for bench in a.benchmarks.split(","):
        for label, bargs, env in VARIANTS.get(bench, [("default", {}, {})]):
            m = measure(bench, bargs, env, sources[bench], a.limit, a.completion, count)
            agent = m["agent"]
            note = ""
            if bench == "mmlu_pro" and bargs and fixture_shots:
                from df_ray.tasks.mmlu_pro import COT_INITIAL_PROMPT, MMLUProTask, cot_header

                shots = MMLUProTask(prompt="official").examples()
                fixture_chars = statistics.mean(
                    len(cot_header(c, ex)) - len(COT_INITIAL_PROMPT.replace("{$}", c)) - 1
                    for c, ex in shots.items())
                agent += (HUB_SHOT_CHARS - fixture_chars) / 4
                note = " (shots scaled to the hub's)"
            per_sample = 3 * (agent + a.completion) + m["coord"] + a.completion
            t = f"{m['t_cross']:.0f}" if m["t_cross"] is not None else "–"
            print(f"| {bench} | {label}{note} | {m['n']} | {agent:.0f} | {m['coord']:.0f} | {t} | "
                  f"{agent + a.completion:.0f} | {per_sample:.0f} | {PAPER[bench]} "
                  f"({PAPER[bench] / 4:.0f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
