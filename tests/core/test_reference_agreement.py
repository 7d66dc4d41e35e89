"""Differential tests: df_ray reads and grades answers as each benchmark's own evaluation does.

Corpora: ``tests/fixtures/reference_corpus/*.jsonl``, model-style outputs written by
``make_corpus.py`` beside them (hundreds per answer kind). References:

- MMLU-Pro: the official script's regex cascade (``tests/reference/mmlu_pro_official.py``)
  and lm-evaluation-harness's ``mmlu_pro`` ``custom-extract`` filter;
- GPQA: lm-evaluation-harness's ``gpqa_*_cot_zeroshot`` ``strict-match`` filter (its
  ``flexible-extract`` filter is reported, not asserted: it takes the last ``(X)`` anywhere,
  contradicting strict-match on the same outputs, e.g. on option-by-option analyses);
- MATH: math-verify's ``parse`` + ``verify``;
- FinQA: the official ``evaluate.py`` (``tests/reference/finqa_official.py``) scoring the
  program each output was written to carry.

The rule: wherever the reference finds an answer, df_ray finds the same one. The exceptions,
each counted and bounded here: the MMLU-Pro script's last-resort guess (the last standalone
capital A-J anywhere, often the article "A"), where df_ray may abstain or read an explicit
marker the script's regexes miss (``Answer: c``); and math outputs whose ``\\boxed{`` is never
closed, which df_ray refuses (reason recorded) where math-verify reads the fragment.
Run with ``-s`` to see the agreement figures.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path

import pytest

from df_ray.core.parsing import parse
from df_ray.core.parsing._text import box_positions, strip_confidence_lines
from df_ray.core.parsing.math_kind import last_box_group
from df_ray.core.types import ParseSpec
from df_ray.tasks.base import Sample
from df_ray.tasks.finqa import FinQATask
from tests.reference import finqa_official, mmlu_pro_official

CORPUS = Path(__file__).parents[1] / "fixtures" / "reference_corpus"
EXPLICIT_RULES = {"answer_is", "answer_colon", "marker", "boxed", "option_correct"}


def _rows(name: str) -> list[dict]:
    with open(CORPUS / name) as f:
        return [json.loads(line) for line in f]


def _report(title: str, stats: Counter) -> None:
    print(f"\n{title}: " + ", ".join(f"{k}={v}" for k, v in sorted(stats.items())))


def test_corpora_are_large_and_current() -> None:
    """The committed corpora are what make_corpus.py writes (regenerate after editing it)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_corpus", CORPUS / "make_corpus.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    assert len(_rows("choice_mmlu_pro.jsonl")) >= 300
    assert len(_rows("choice_gpqa.jsonl")) >= 300
    assert len(_rows("math.jsonl")) >= 300
    assert len(_rows("finqa.jsonl")) >= 200
    again = mod.choice_rows(500, 10, seed=13)
    assert [json.loads(json.dumps(r, sort_keys=True)) for r in again] == \
        _rows("choice_mmlu_pro.jsonl")


def _choice_differential(rows: list[dict], n_options_of) -> tuple[Counter, list]:
    """Agreement of df_ray's choice reading with the MMLU-Pro script and lm-eval's filters."""
    lm = pytest.importorskip("tests.reference.lm_eval_filters",
                             reason="lm-eval is a test dependency (scripts/setup.sh)")
    stats: Counter = Counter()
    failures = []
    texts = [r["text"] for r in rows]
    lm_mmlu = lm.mmlu_pro_custom_extract(texts)
    lm_strict = lm.gpqa_strict_match(texts)
    lm_flex = lm.gpqa_flexible_extract(texts, [r.get("options", []) for r in rows])
    for i, r in enumerate(rows):
        text = r["text"]
        n_options = n_options_of(r)
        obs = parse(text, ParseSpec("choice", n_options=n_options))
        ours = obs.answer
        official, level = mmlu_pro_official.extract_answer_with_level(text)
        if official is not None and level < 3 and official in "ABCDEFGHIJ"[:n_options]:
            stats["official_regex:" + ("agree" if ours == official else "DIFFER")] += 1
            if ours != official:
                failures.append(("official", official, ours, obs.rule, text))
        elif official is not None and level == 3:
            if ours == official:
                stats["official_guess:agree"] += 1
            elif ours is None:
                stats["official_guess:df_ray_abstains"] += 1
            elif obs.rule in EXPLICIT_RULES:
                stats["official_guess:df_ray_reads_marker"] += 1
            else:
                stats["official_guess:DIFFER"] += 1
                failures.append(("official guess", official, ours, obs.rule, text))
        else:
            stats["official_none:" + ("df_ray_finds" if ours else "none")] += 1
        for name, ref in (("lm_eval_mmlu_pro", lm_mmlu[i]), ("lm_eval_gpqa_strict", lm_strict[i])):
            if ref is None or ref not in "ABCDEFGHIJ"[:n_options]:
                stats[f"{name}:none" + (":df_ray_finds" if ours else "")] += 1
            elif ref == ours:
                stats[f"{name}:agree"] += 1
            else:
                stats[f"{name}:DIFFER"] += 1
                failures.append((name, ref, ours, obs.rule, text))
        flex = lm_flex[i]
        if flex is not None:
            stats["lm_eval_gpqa_flexible(report only):" +
                  ("agree" if flex == ours else "differ")] += 1
    return stats, failures


@pytest.mark.parametrize(("corpus", "n_options"), [("choice_mmlu_pro.jsonl", 10),
                                                   ("choice_gpqa.jsonl", 4)])
def test_choice_agrees_with_mmlu_pro_script_and_lm_eval(corpus: str, n_options: int) -> None:
    rows = _rows(corpus)
    stats, failures = _choice_differential(rows, lambda r: n_options)
    _report(f"{corpus} ({len(rows)} outputs)", stats)
    assert not failures, failures[:5]
    # df_ray abstains on the guess only where the output has no answer marker at all
    assert stats["official_guess:df_ray_abstains"] <= 0.15 * len(rows)


def _math_differential(rows: list[dict], *, confidence_class: bool = False
                       ) -> tuple[Counter, list]:
    """Agreement of df_ray's math reading with math-verify's. ``confidence_class``: an
    output where math-verify reads the reported confidence (``Confidence: \\(\\boxed{0.9}\\)``)
    and, without it, what df_ray reads is counted as such instead of failing."""
    from math_verify import parse as mv_parse
    from math_verify import verify

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    stats: Counter = Counter()
    failures = []
    for r in rows:
        ref = mv_parse(r["text"])
        # df_ray's one departure (math_kind.last_box_group): boxes with other text between
        # them are a self-correction, read as the last group (MATH's last_boxed_only_string),
        # where math-verify reads every box together; compare with math-verify on that group
        body = strip_confidence_lines(r["text"])
        group = last_box_group(body)
        if group is not None and box_positions(body)[0][0] < group[0]:
            stats["several_boxes:last_group"] += 1
            ref = mv_parse(body[group[0]:group[1]])
        obs = parse(r["text"], ParseSpec("math"))
        if not ref:
            stats["reference_none:" + ("df_ray_finds" if obs.valid else "none")] += 1
            continue
        if not obs.valid:
            stats["df_ray_refuses:" + obs.reason.split(":")[0]] += 1
            if not obs.reason.startswith("unbalanced braces"):
                failures.append((r["id"], ref, obs.reason, r["text"]))
            continue
        ours = mv_parse(f"${obs.extracted}$")
        # the same text is the same answer (verify can fail on an equation with units)
        same = (len(ref) > 1 and ref[1] == obs.extracted) or (
            bool(ours) and (verify(ref, ours) or verify(ours, ref)))
        if not same and confidence_class and body != r["text"]:
            plain = mv_parse(body)
            if plain and ours and (verify(plain, ours) or verify(ours, plain)):
                stats["reference_reads_the_confidence"] += 1
                continue
        stats["agree" if same else "DIFFER"] += 1
        if not same:
            failures.append((r["id"], ref, obs.extracted, r["text"]))
    return stats, failures


@pytest.mark.slow  # the whole MATH reference corpus through math-verify
def test_math_agrees_with_math_verify() -> None:
    stats, failures = _math_differential(_rows("math.jsonl"))
    _report("math.jsonl (math-verify)", stats)
    assert not failures, failures[:5]


def _finqa_sample(r: dict) -> Sample:
    return Sample(id=r["id"], task="finqa", question="", gold=str(r["exe_ans"]),
                  meta={"program": r["gold_program"], "exe_ans": r["exe_ans"],
                        "table": r["table"]})


@pytest.mark.slow  # the whole FinQA reference corpus through the official evaluation
def test_finqa_agrees_with_the_official_evaluation() -> None:
    task = FinQATask()
    stats: Counter = Counter()
    failures = []
    for r in _rows("finqa.jsonl"):
        obs = parse(r["text"], task.parse_spec(_finqa_sample(r)))
        grade = task.grade(_finqa_sample(r), obs)
        if r["program"] is None:  # a bare answer: the official evaluation scores no program
            stats["bare:" + ("no_credit" if not grade.correct else "CREDIT")] += 1
            if grade.correct or grade.scores["prog_acc"]:
                failures.append(("bare answer got credit", r["text"]))
            continue
        pred = finqa_official.program_tokenization(r["program"])
        gold = finqa_official.program_tokenization(r["gold_program"])
        invalid, value = finqa_official.eval_program(pred, r["table"])
        ref_exec = invalid == 0 and value == r["exe_ans"]
        ref_prog = finqa_official.equal_program(gold, pred)
        for metric, ref_ok, ours_ok in (("exec", ref_exec, bool(grade.scores["exec_acc"])),
                                        ("prog", ref_prog, bool(grade.scores["prog_acc"]))):
            if ref_ok == ours_ok:
                stats[f"{metric}:agree"] += 1
            elif ref_ok:
                stats[f"{metric}:DIFFER(official credits, df_ray not)"] += 1
                failures.append((metric, r["variant"], r["phrasing"], obs.reason, r["text"]))
            else:
                stats[f"{metric}:df_ray_lenient"] += 1
        if r["variant"] in ("truncated", "unknown_op", "nested"):
            stats[f"malformed:{'invalid' if not obs.valid else 'VALID'}"] += 1
            if obs.valid:
                failures.append(("malformed program read as valid", r["program"], r["text"]))
        elif obs.valid and obs.rule not in ("program_marker", "fenced_program", "program_line"):
            failures.append(("program not read as a program", obs.rule, r["text"]))
    _report("finqa.jsonl (official evaluate.py)", stats)
    assert not failures, failures[:5]
