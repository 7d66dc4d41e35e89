"""Differential tests on real model text: df_ray's extraction against the references'.

Corpora: ``tests/fixtures/reference_corpus/real_*.jsonl``, the answers real instruct models
(Qwen2.5-Coder-0.5B-Instruct, SmolLM2-135M-Instruct, run by df_ray's embedded engine) gave
under df_ray's prompts, rebuilt from generation caches by ``real_outputs.py`` there:

- ``real_humaneval.jsonl``: the agents' answers in the committed cpu_humaneval cache;
- ``real_math.jsonl``, ``real_mmlu_pro.jsonl``: the chain-of-thought probe
  (``jobs/configs/cpu_parser_probe.yaml``) on MATH-500 and MMLU-Pro questions of GoA's files.

References: the same as ``test_reference_agreement.py`` (MMLU-Pro script, lm-eval's filters,
math-verify), plus MATH's own ``last_boxed_only_string``/``is_equiv`` and GoA's HumanEval
extraction (``tests/reference/goa_extraction.py``). Every disagreement falls in a named,
documented class (the corpus README's table lists each one and the rule df_ray follows);
any other is a failure. Run with ``-s`` to see the figures.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest

from df_ray.core.parsing import parse
from df_ray.core.parsing._text import box_positions, fenced_blocks, strip_confidence_lines
from df_ray.core.parsing.code_kind import defines, normalize_code
from df_ray.core.parsing.math_kind import last_box_group
from df_ray.core.types import ParseSpec
from tests.core.test_reference_agreement import (
    CORPUS,
    _choice_differential,
    _math_differential,
    _report,
    _rows,
)
from tests.reference import goa_extraction

QWEN, SMOL = "qwen25-coder-0.5b-instruct", "smollm2-135m-instruct"


@pytest.mark.parametrize(("name", "least", "models"), [
    ("real_humaneval.jsonl", 400, {QWEN, SMOL}),
    ("real_math.jsonl", 50, {QWEN, SMOL}),
    ("real_mmlu_pro.jsonl", 50, {QWEN, SMOL}),
])
def test_real_corpus_holds_answers_not_questions(name: str, least: int, models: set) -> None:
    """Each corpus has real rows of its models, and no question text."""
    rows = _rows(name)
    assert len(rows) >= least
    assert len({r["id"] for r in rows}) == len(rows)
    assert all(set(r) == {"id", "model", "agent", "sample", "benchmark", "spec", "gold",
                          "text", "key"} for r in rows)
    assert {r["model"] for r in rows} == models


def test_real_choice_agrees_with_mmlu_pro_script_and_lm_eval() -> None:
    rows = _rows("real_mmlu_pro.jsonl")
    stats, failures = _choice_differential(rows, lambda r: r["spec"]["n_options"])
    for r in rows:  # GoA's reading, reported only: its last-capital fallback reads words
        ours = parse(r["text"], ParseSpec("choice", n_options=r["spec"]["n_options"])).answer
        goa = goa_extraction.alphabet_choice(r["text"], r["spec"]["n_options"])
        stats["goa_alphabet_choice(report only):" + ("agree" if goa == ours else "differ")] += 1
    _report(f"real_mmlu_pro.jsonl ({len(rows)} outputs)", stats)
    assert not failures, failures[:5]


def test_real_math_agrees_with_math_verify() -> None:
    rows = _rows("real_math.jsonl")
    stats, failures = _math_differential(rows, confidence_class=True)
    _report(f"real_math.jsonl ({len(rows)} outputs, math-verify)", stats)
    assert not failures, failures[:5]


def _same_math(a: str, b: str) -> bool:
    from math_verify import parse as mv_parse
    from math_verify import verify

    x, y = mv_parse(f"${a}$"), mv_parse(f"${b}$")
    return bool(x) and bool(y) and (verify(x, y) or verify(y, x))


def _hendrycks_differential(rows: list[dict]) -> tuple[Counter, list]:
    """Agreement of df_ray's math reading with MATH's own last-box extraction."""
    from tests.reference import hendrycks_math

    stats: Counter = Counter()
    failures = []
    for r in rows:
        text = r["text"]
        ref = hendrycks_math.extract(text)
        obs = parse(text, ParseSpec("math"))
        if ref is None:
            stats["reference_none:" + (f"df_ray_reads_{obs.rule}" if obs.valid else "none")] += 1
            continue
        if not obs.valid:
            stats["df_ray_refuses:" + obs.reason.split(":")[0]] += 1
            failures.append((r["id"], ref, obs.reason, text[-300:]))
            continue
        if hendrycks_math.is_equiv(ref, obs.extracted) or _same_math(ref, obs.extracted):
            stats["agree"] += 1
            continue
        body = strip_confidence_lines(text)
        if body != text:  # the last box is the reported confidence's
            plain = hendrycks_math.extract(body)
            if plain is None or hendrycks_math.is_equiv(plain, obs.extracted) \
                    or _same_math(plain, obs.extracted):
                stats["reference_reads_the_confidence" + ("" if plain else ":then_none")] += 1
                continue
        group = last_box_group(strip_confidence_lines(text))
        if group is not None and len(box_positions(text[group[0]:group[1]])) > 1:
            stats["adjacent_boxes:df_ray_reads_the_group"] += 1
            continue
        stats["DIFFER"] += 1
        failures.append((r["id"], ref, obs.extracted, text[-300:]))
    return stats, failures


def test_real_math_agrees_with_the_math_reference_last_box() -> None:
    rows = _rows("real_math.jsonl")
    stats, failures = _hendrycks_differential(rows)
    _report(f"real_math.jsonl ({len(rows)} outputs, MATH last_boxed_only_string)", stats)
    assert not failures, failures[:5]


def _python_blocks(text: str) -> int:
    return sum(1 for lang, body, _closed in fenced_blocks(text)
               if lang in ("python", "") and body.strip())


def _without_dropped_lines(code: str) -> str:
    return "\n".join(ln for ln in code.split("\n") if not goa_extraction.drops_line(ln)).strip()


def _code_class(text: str, entry_point: str) -> str:
    """How df_ray's program compares with GoA's extraction of the same answer."""
    obs = parse(text, ParseSpec("code", entry_point=entry_point))
    ref = goa_extraction.extract_completion(text)
    ref_key = normalize_code(ref)
    ref_ok = ref_key is not None and defines(ref, entry_point)
    ours = obs.extracted if obs.valid else None
    if ours is None:
        return "both_no_program" if not ref_ok else "DIFFER(df_ray finds no program)"
    if ref_ok and normalize_code(ours) == ref_key:
        return "agree"
    if normalize_code(_without_dropped_lines(ours)) == ref_key and ref_key is not None:
        return "goa_drops_print_lines"
    if not ref_ok and re.match(r"\s*```", ref) and "```" not in text[text.find("```") + 3:]:
        return "unclosed_fence:goa_keeps_the_fence_line"
    if not ref_ok and ref_key is None and _without_dropped_lines(ours) in ref:
        return "goa_print_drop_breaks_syntax"
    if _python_blocks(text) > 1:
        return ("several_blocks:goa_first_lacks_entry_point" if not ref_ok
                else "several_blocks:df_ray_last_defining")
    return "DIFFER"


def test_real_code_agrees_with_goa_extraction() -> None:
    """HumanEval: df_ray's program is GoA's wherever GoA reads a program that defines the
    entry point, except in the named classes (README: real-output disagreements)."""
    rows = _rows("real_humaneval.jsonl")
    stats: Counter = Counter()
    failures = []
    for r in rows:
        cls = _code_class(r["text"], r["spec"]["entry_point"])
        stats[cls] += 1
        if cls.startswith("DIFFER"):
            failures.append((r["id"], cls, r["text"][-400:]))
    _report(f"real_humaneval.jsonl ({len(rows)} outputs, GoA extraction)", stats)
    assert not failures, failures[:5]
    assert stats["agree"] >= len(rows) // 2


def test_code_classes_are_told_apart() -> None:
    """The classes above on small texts of each kind (so a class cannot swallow a real
    disagreement unnoticed)."""
    fn = "def f(x):\n    return x + 1\n"
    assert _code_class(f"```python\n{fn}```", "f") == "agree"
    assert _code_class(f"```python\n{fn}print(f(1))\n```", "f") == "goa_drops_print_lines"
    assert _code_class(f"```python\n{fn}", "f") == "unclosed_fence:goa_keeps_the_fence_line"
    assert _code_class("```python\ndef f(x):\n    if x:\n        print(x)\n    return x\n```",
                       "f") == "goa_print_drop_breaks_syntax"
    assert _code_class(f"```python\ndef g():\n    pass\n```\nThen:\n```python\n{fn}```",
                       "f") == "several_blocks:goa_first_lacks_entry_point"
    assert _code_class(f"```python\n{fn}```\nBetter:\n```python\n{fn.replace('1', '2')}```",
                       "f") == "several_blocks:df_ray_last_defining"
    assert _code_class("no code here", "f") == "both_no_program"
    assert _code_class(f"```python\n{fn}```", "g") == "both_no_program"


@pytest.mark.parametrize("name", ["real_humaneval.jsonl"])
def test_rebuild_from_the_committed_cache_is_identical(name: str, tmp_path) -> None:
    """real_outputs.py rebuilds the HumanEval corpus byte for byte from the committed cache."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("real_outputs", CORPUS / "real_outputs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    root = Path(__file__).parents[2]
    mod.main(["--config", str(root / "jobs/configs/cpu_humaneval.yaml"),
              "--cache", str(root / "tests/fixtures/cpu_humaneval/generations"),
              "--out", str(tmp_path)])
    assert (tmp_path / name).read_bytes() == (CORPUS / name).read_bytes()
