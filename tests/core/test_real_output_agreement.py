"""Differential tests on real model text: df_ray's extraction against the references'.

Corpora: ``tests/fixtures/reference_corpus/real_*.jsonl``, the answers real instruct models
(Qwen2.5-Coder-0.5B-Instruct, SmolLM2-135M-Instruct, run by df_ray's embedded engine) gave
under df_ray's prompts, rebuilt from generation caches by ``real_outputs.py`` there:

- ``real_humaneval.jsonl``: the agents' answers in the committed cpu_humaneval cache;
- ``real_math.jsonl``, ``real_mmlu_pro.jsonl``: the chain-of-thought probe
  (``jobs/configs/cpu_parser_probe.yaml``) on MATH-500 and MMLU-Pro questions of GoA's files.

References: the same as ``test_reference_agreement.py`` (MMLU-Pro script, lm-eval's filters,
math-verify), plus MATH's own ``last_boxed_only_string``/``is_equiv`` and GoA's HumanEval
extraction (``tests/reference/goa_humaneval.py``). Every disagreement falls in a named,
documented class (the corpus README's table lists each one and the rule df_ray follows);
any other is a failure. Run with ``-s`` to see the figures.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest

from df_ray.core.parsing import parse
from df_ray.core.parsing._text import fenced_blocks
from df_ray.core.parsing.code_kind import defines, normalize_code
from df_ray.core.types import ParseSpec
from tests.core.test_reference_agreement import (
    CORPUS,
    _report,
    _rows,
)
from tests.reference import goa_humaneval


@pytest.mark.parametrize(("name", "least"), [("real_humaneval.jsonl", 80)])
def test_real_corpus_holds_answers_not_questions(name: str, least: int) -> None:
    """Each corpus has real rows of both models, with no question text in them."""
    rows = _rows(name)
    assert len(rows) >= least
    assert len({r["id"] for r in rows}) == len(rows)
    assert all(set(r) == {"id", "model", "agent", "sample", "benchmark", "spec", "gold",
                          "text", "key"} for r in rows)
    assert {r["model"] for r in rows} == {"qwen25-coder-0.5b-instruct", "smollm2-135m-instruct"}


def _python_blocks(text: str) -> int:
    return sum(1 for lang, body, _closed in fenced_blocks(text)
               if lang in ("python", "") and body.strip())


def _without_dropped_lines(code: str) -> str:
    return "\n".join(ln for ln in code.split("\n") if not goa_humaneval.drops_line(ln)).strip()


def _code_class(text: str, entry_point: str) -> str:
    """How df_ray's program compares with GoA's extraction of the same answer."""
    obs = parse(text, ParseSpec("code", entry_point=entry_point))
    ref = goa_humaneval.extract_completion(text)
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
