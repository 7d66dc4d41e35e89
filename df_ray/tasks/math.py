"""MATH (competition mathematics), graded by answer equivalence through math-verify.

Splits:

- ``test``: MATH-500 (``HuggingFaceH4/MATH-500``, split ``test``, 500 problems), in data-set
  order.
- ``calibration``: problems of the full MATH test set (``EleutherAI/hendrycks_math``, all
  seven subject configs, split ``test``) that are *not* in MATH-500, deterministically
  shuffled with the seed; the first ``calibration_size`` (default 150).

``source=`` accepts, instead of the hub, a local file or folder with rows in any of these
schemas: GoA's aligned files (a JSON list of ``{question, gold_answer}``, e.g.
``MATH_test.json``), MATH-500's (``problem``, ``answer``, optional ``unique_id``,
``subject``, ``level``) or hendrycks_math's (``problem``, ``solution``: the answer is the
last ``\\boxed{}`` of the solution). For the calibration split a local source is the
candidate pool; problems in the test set are removed from it, the test set being taken
from ``test_source`` (constructor; default: the hub's MATH-500) so that calibration never
overlaps test.

Sample ids are content hashes of the problem text (``math/<16 hex>``), so the same problem
has the same id whichever source it came from.

Reference extraction and metric: math-verify (huggingface/Math-Verify), the checker of the
Open LLM Leaderboard's MATH tasks and lighteval: ``parse`` the model output (last
``\\boxed{}``, else "final answer is ...", else the last expression) and
``verify(parse(gold), parse(answer))``; exact match after answer equivalence, averaged.
df_ray extracts with ``df_ray.core.parsing.math_kind`` (explicit markers first, as
math-verify; see there for the rules and how its keys relate to math-verify) and grades
with the same ``verify``; the differential test ``tests/core/test_reference_agreement.py``
compares the two extractions on a corpus of model-style outputs.

Grading: ``math_verify.verify(parse(gold), parse(answer))``, repeating decimals
(``0.\\overline{3}``) first rewritten to fractions (math-verify reads them as ``0``).
math-verify's own timeouts use ``signal.alarm``, which only works on the main thread, so
df_ray calls it without them inside ``call_bounded`` (an alarm on the main thread, a killable
helper process elsewhere): a comparison that runs past its bound is wrong, with reason
``timeout``. Answers longer than ``MAX_ANSWER_CHARS`` are wrong. ``Grade.detail`` says why
(``math-verify: equal``, ``canonical keys equal``, ``timeout: ...``).
"""

from __future__ import annotations

from typing import Any

from df_ray.core.types import Observation, ParseSpec
from df_ray.tasks import _common as C
from df_ray.tasks.answer_instruction import FINAL_BOXED, answer_instruction, reasoned_prompt
from df_ray.tasks.base import BaseTask, DataSchemaError, Grade, Sample, Split

MATH500 = "HuggingFaceH4/MATH-500"
HENDRYCKS = "EleutherAI/hendrycks_math"
HENDRYCKS_CONFIGS = ("algebra", "counting_and_probability", "geometry", "intermediate_algebra",
                     "number_theory", "prealgebra", "precalculus")
MAX_ANSWER_CHARS = 2000


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) with balanced braces."""
    idx = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if idx < 0:
        return None
    i = text.find("{", idx)
    if i < 0:
        # "\boxed 5" form
        rest = text[idx:].split(None, 1)
        return rest[1].split("$")[0].strip() if len(rest) > 1 else None
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1:j]
    return None


def _rows_to_samples(rows: list[dict], file: str) -> list[Sample]:
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise DataSchemaError(f"{file}: row {i}: expected an object, got "
                                  f"{type(row).__name__}")
        meta: dict[str, Any] = {}
        if "question" in row or "gold_answer" in row:  # GoA schema
            problem = C.field(row, "question", str, file=file, index=i)
            gold = C.field(row, "gold_answer", (str, int, float), file=file, index=i)
        elif "answer" in row:  # MATH-500 schema
            problem = C.field(row, "problem", str, file=file, index=i)
            gold = C.field(row, "answer", (str, int, float), file=file, index=i)
            for k in ("unique_id", "subject", "level"):
                if row.get(k) is not None:
                    meta[k] = row[k]
        else:  # hendrycks_math schema
            problem = C.field(row, "problem", str, file=file, index=i)
            solution = C.field(row, "solution", str, file=file, index=i)
            boxed = last_boxed(solution)
            if boxed is None:
                raise DataSchemaError(f"{file}: row {i}: field 'solution' has no \\boxed answer")
            gold = boxed
            for k in ("type", "level"):
                if row.get(k) is not None:
                    meta["subject" if k == "type" else k] = row[k]
        out.append(Sample(id=C.text_id("math", problem), task="math", question=problem,
                          gold=str(gold), meta=meta))
    return C.dedupe_ids(out)


def _load_local(source: str, limit: int | None = None) -> list[Sample]:
    """The samples of a local file or folder, one per id; ``limit``: the first ``limit``,
    the file read no further than they need (``C.load_prefix``)."""
    return C.load_prefix(lambda n: C.load_local(source, _rows_to_samples, n), limit, source)


class MathTask(BaseTask):
    name = "math"
    kind = "math"
    data_source = "hub HuggingFaceH4/MATH-500 (+ EleutherAI/hendrycks_math for calibration)"
    #: The hub repositories it loads (a run records the commit each resolved to).
    hub_repos = (MATH500, HENDRYCKS)
    data_hint = ("fetch those data sets into the Hugging Face cache, or pass source=<GoA's "
                 "MATH_test.json or a MATH-500 file>")

    def __init__(self, *, calibration_size: int = 150, test_source: str | None = None):
        """Its options, a configuration's ``benchmark_args``.

        Args:
            calibration_size: problems of the full MATH test set, not in MATH-500, in the
                calibration split.
            test_source: where the test set is read to remove it from a local calibration pool
                (None: the hub's MATH-500).
        """
        self.calibration_size = calibration_size
        self.test_source = test_source

    # ------------------------------------------------------------------ loading
    def _test(self, source: str | None, limit: int | None = None) -> list[Sample]:
        C.check_source(source)
        if C.is_local(source):
            return _load_local(source, limit)  # type: ignore[arg-type]
        ds = C.load_hub_dataset(MATH500, split="test")
        return _rows_to_samples(C.dataset_rows(ds), f"{MATH500}:test")

    def _pool(self, source: str | None) -> list[Sample]:
        C.check_source(source)
        if C.is_local(source):
            return _load_local(source)  # type: ignore[arg-type]
        pool: list[Sample] = []
        for cfg in HENDRYCKS_CONFIGS:
            ds = C.load_hub_dataset(HENDRYCKS, cfg, split="test")
            pool.extend(_rows_to_samples(C.dataset_rows(ds), f"{HENDRYCKS}/{cfg}:test"))
        return C.dedupe_ids(pool)

    def held_out_pool(self, source: str) -> list[Sample]:
        """Every sample of ``source`` as candidates for a calibration split (the run removes
        its test samples from them)."""
        return self._pool(source)

    def load(self, split: Split, *, source: str | None = None, limit: int | None = None,
             seed: int = 0) -> list[Sample]:
        if split == "test":  # the file's order: a limit reads its first rows only
            return C.apply_limit(self._test(source, limit), limit)
        if split != "calibration":
            raise ValueError(f"unknown split {split!r}")
        test_ids = {s.id for s in self._test(self.test_source)}
        pool = [s for s in self._pool(source) if s.id not in test_ids]
        chosen = C.seeded_order(pool, lambda s: s.id, seed, "math-cal")[: self.calibration_size]
        return C.apply_limit(chosen, limit)

    # ------------------------------------------------------------------ prompting
    def parse_spec(self, sample: Sample) -> ParseSpec:
        return ParseSpec(kind="math")

    def answer_instructions(self) -> str:
        return answer_instruction("Put your final answer in \\boxed{} (only the final answer, "
                                  "simplified, in LaTeX).")

    def problem_statement(self, sample: Sample) -> str:
        return f"Solve the following math problem.\n\n{sample.question}"

    def agent_prompt(self, sample: Sample) -> str:
        return reasoned_prompt(self.problem_statement(sample), FINAL_BOXED)

    def gold_key(self, sample: Sample) -> str | None:
        try:
            from df_ray.core.parsing import canonicalize
        except ImportError:  # parsing not available yet
            return C.normalize_ws(sample.gold)
        return canonicalize(sample.gold, self.parse_spec(sample))

    # ------------------------------------------------------------------ grading
    def grade(self, sample: Sample, answer: Observation | None) -> Grade:
        if answer is None or not answer.valid:
            why = answer.reason if answer is not None and answer.reason else "no valid answer"
            return Grade(False, {"em": 0.0}, why)
        pred = answer.extracted if answer.extracted is not None else answer.answer
        if pred is None or not str(pred).strip():
            return Grade(False, {"em": 0.0}, "empty answer")
        ok, why = math_verdict(sample.gold, str(pred))
        if not ok and answer.answer is not None and answer.answer == self.gold_key(sample):
            ok, why = True, "canonical keys equal"
        if not ok:
            why = f"{why}: {pred!s:.200} != {sample.gold}"
        return Grade(ok, {"em": float(ok)}, why)


def _wrap(expr: str) -> str:
    s = expr.strip()
    if "\\boxed" in s or s.startswith("$"):
        return s
    return f"\\boxed{{{s}}}"


def mv_equal(gold: str, pred: str) -> bool:
    """math-verify's ``verify(parse(gold), parse(pred))`` without its signal timeouts (callers
    bound it: ``math_verdict``), repeating decimals rewritten to fractions first."""
    from math_verify import parse, verify

    from df_ray.core.parsing.math_kind import rewrite_repeating

    g = parse(_wrap(rewrite_repeating(gold)), parsing_timeout=None)  # type: ignore[arg-type]
    p = parse(_wrap(rewrite_repeating(pred)), parsing_timeout=None)  # type: ignore[arg-type]
    if not g or not p:
        return False
    return bool(verify(g, p, timeout_seconds=None))  # type: ignore[arg-type]


def math_verdict(gold: str, pred: str) -> tuple[bool, str]:
    """``(equal, reason)``: math-verify's verdict, bounded in time on any thread."""
    from df_ray.core.parsing._bounded import ParseTimeout, call_bounded
    from df_ray.core.parsing.math_kind import SYMPY_TIMEOUT_S, warm

    if len(pred) > MAX_ANSWER_CHARS:
        return False, f"answer longer than {MAX_ANSWER_CHARS} characters"
    if C.normalize_ws(gold) == C.normalize_ws(pred):
        return True, "same text as the gold answer"
    warm()
    try:
        ok = bool(call_bounded(mv_equal, gold, pred, timeout_s=2 * SYMPY_TIMEOUT_S))
    except ParseTimeout:
        return False, "timeout: math-verify ran past its bound"
    except Exception as e:
        return False, f"math-verify error: {type(e).__name__}"
    return ok, "math-verify: equal" if ok else "math-verify: not equal"


def math_equal(gold: str, pred: str) -> bool:
    """Whether ``pred`` equals ``gold`` as math-verify sees it (bounded on any thread)."""
    return math_verdict(gold, pred)[0]
