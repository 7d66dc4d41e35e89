"""MMLU-Pro: multiple choice with up to 10 options (A-J), accuracy on the letter.

Data: ``TIGER-Lab/MMLU-Pro`` split ``test`` (12,032 rows: ``question_id``, ``question``,
``options`` (list of up to 10 strings), ``answer`` (letter), ``answer_index``,
``category``, ...). ``source=`` may instead name a local file/folder in that schema or in
GoA's sampled schema (``question`` with the options inlined as ``(A) ... (J)``,
``gold_answer`` letter, optional ``category``; e.g. ``MMLU_Pro_sampled_test.json``).

Default (no ``source``): the paper's data. ``test`` is GoA's ``MMLU_Pro_sampled_test.json``
at the pinned GoA commit (``df_ray.tasks.goa``: fetched once and cached, SHA-256 checked;
2,100 rows, 150 per category); ``calibration`` is ``calibration_size`` (150) rows of the
hub's test split outside GoA's file (matched by question text without the options),
stratified by category.

``source="hub"`` or a file (seeded, stratified by category, disjoint by construction): each
category's rows are shuffled by sha256(seed, id); ``test`` takes the first
``per_category_test`` (150; 14 categories -> 2,100 rows), ``calibration`` the next ones,
``calibration_size`` (150) spread evenly over the categories. GoA's sampled file already
holds exactly 150 rows per category, so it yields the same 2,100 test rows and an empty
calibration split (a run then takes its calibration split from the hub or
``calibration_source``).

Ids: ``mmlu_pro/<question_id>``, or a content hash when the source has no id (GoA).
``ParseSpec.n_options`` is the row's actual option count (some rows have fewer than 10).

Reference extraction: the benchmark's evaluation script (TIGER-AI-Lab/MMLU-Pro,
``evaluate_from_api.py``): the first ``answer is \\(?([A-J])\\)?``, else the first line with
``[aA]nswer:\\s*([A-J])``, else a guess (the last standalone capital A-J); and
lm-evaluation-harness's ``mmlu_pro`` task (``custom-extract``: the first regex only, then
``exact_match``). df_ray's choice parser (``df_ray.core.parsing.choice_kind``) applies the two
regexes first, exactly, then reads what they miss and never guesses; the differential test
``tests/core/test_reference_agreement.py`` checks both references. Metric: accuracy.
"""

from __future__ import annotations

import re

from df_ray.core.types import Observation, ParseSpec
from df_ray.tasks import _common as C
from df_ray.tasks.answer_instruction import answer_instruction
from df_ray.tasks.base import BaseTask, DataSchemaError, Grade, Sample, Split

HUB = "TIGER-Lab/MMLU-Pro"
_INLINE = re.compile(r"\(([A-Z])\)\s")
#: Where GoA's files start the inlined options ("... The options are: (A) ...").
_GOA_OPTIONS = re.compile(r"\s*The options are:")


def question_key(stem: str) -> str:
    """The same problem's key in every schema (the question without its options), so that a
    calibration split from one source can drop the test problems of another."""
    return C.stable_hash(C.normalize_ws(stem))[:16]


def render_options(options: list[str]) -> str:
    return "\n".join(f"({letter}) {opt}" for letter, opt in zip(C.letters(len(options)),
                                                               options, strict=False))


#: MMLU-Pro's most options per question (A-J).
MAX_OPTIONS = 10


def count_inline_options(question: str) -> int:
    """Number of consecutive ``(A) (B) ...`` markers inlined in a GoA question, at most
    ``MAX_OPTIONS``: a "(K) " further on is the question's own text, not an option."""
    found = set(_INLINE.findall(question + " "))
    n = 0
    for letter in C.letters(MAX_OPTIONS):
        if letter not in found:
            break
        n += 1
    return n


def _rows_to_samples(rows: list[dict], file: str) -> list[Sample]:
    out = []
    for i, row in enumerate(rows):
        if isinstance(row, dict) and "gold_answer" in row:  # GoA sampled schema
            q = C.field(row, "question", str, file=file, index=i)
            gold = C.field(row, "gold_answer", str, file=file, index=i).strip().upper()
            cat = C.field(row, "category", str, file=file, index=i, default="all")
            n = count_inline_options(q) or 10
            sid = C.text_id("mmlu_pro", q)
            question = q
            stem = _GOA_OPTIONS.split(q, maxsplit=1)[0]
        else:
            qid = C.field(row, "question_id", (int, str), file=file, index=i)
            q = C.field(row, "question", str, file=file, index=i)
            options = C.str_list(row, "options", file=file, index=i)
            gold = C.field(row, "answer", str, file=file, index=i).strip().upper()
            cat = C.field(row, "category", str, file=file, index=i, default="all")
            n = len(options)
            sid = f"mmlu_pro/{qid}"
            question = f"{q}\n\nOptions:\n{render_options(options)}"
            stem = q
        if not n or gold not in C.letters(n):
            raise DataSchemaError(f"{file}: row {i}: field 'answer' {gold!r} is not one of "
                                  f"the {n} option letters")
        out.append(Sample(id=sid, task="mmlu_pro", question=question, gold=gold,
                          meta={"category": cat, "n_options": n,
                                "question_key": question_key(stem)}))
    # native ids: a repeated id is the same row; content ids: repeated rows are kept
    return C.uniquify_ids(C.dedupe_ids([s for s in out if "/" in s.id and
                                        not _is_hash_id(s.id)]) +
                          [s for s in out if _is_hash_id(s.id)])


def _is_hash_id(sid: str) -> bool:
    return bool(re.fullmatch(r"mmlu_pro/[0-9a-f]{16}", sid))


class MMLUProTask(BaseTask):
    name = "mmlu_pro"
    kind = "choice"
    hub_name = HUB

    def data_provenance(self, source: str | None, revision: str | None) -> tuple[str, str]:
        if source is None:  # the paper's data: GoA's file at its pinned commit
            from df_ray.tasks.goa import data_provenance

            return data_provenance(self.name)
        return super().data_provenance(source, revision)
    data_source = ("GoA's MMLU_Pro_sampled_test.json (UNITES-Lab/GoA at the pinned commit; "
                   "calibration: hub TIGER-Lab/MMLU-Pro)")
    data_hint = ("run once with internet access (GoA's file is fetched and cached under "
                 "$DF_RAY_HOME/data/goa), fetch TIGER-Lab/MMLU-Pro into the Hugging Face "
                 "cache, or pass source=<a local MMLU-Pro file> and "
                 "calibration_source=<held-out rows>")

    def __init__(self, *, per_category_test: int = 150, calibration_size: int = 150):
        self.per_category_test = per_category_test
        self.calibration_size = calibration_size

    def _paper(self, split: Split, seed: int) -> list[Sample]:
        """The default: GoA's sampled test file at the pinned commit (``df_ray.tasks.goa``);
        calibration: ``calibration_size`` hub rows outside it (by question text), stratified
        by category."""
        from df_ray.tasks.goa import goa_file

        goa = C.load_local(str(goa_file("mmlu_pro")), _rows_to_samples)
        test, _ = C.stratified_split(goa, lambda s: s.meta["category"], seed,
                                     per_stratum_test=self.per_category_test, n_calibration=0,
                                     salt="mmlu_pro")
        if split == "test":
            return test
        keys = {s.meta["question_key"] for s in goa}
        pool = [s for s in self._all("hub") if s.meta["question_key"] not in keys]
        _, cal = C.stratified_split(pool, lambda s: s.meta["category"], seed,
                                    per_stratum_test=0, n_calibration=self.calibration_size,
                                    salt="mmlu_pro")
        return cal

    def _all(self, source: str | None) -> list[Sample]:
        C.check_source(source)
        if C.is_local(source):
            return C.load_local(source, _rows_to_samples)  # type: ignore[arg-type]
        ds = C.load_hub_dataset(HUB, split="test")
        return _rows_to_samples(C.dataset_rows(ds), f"{HUB}:test")

    def held_out_pool(self, source: str) -> list[Sample]:
        """Every sample of ``source`` as candidates for a calibration split (the run removes
        its test samples from them)."""
        return self._all(source)

    def load(self, split: Split, *, source: str | None = None, limit: int | None = None,
             seed: int = 0) -> list[Sample]:
        if split not in ("test", "calibration"):
            raise ValueError(f"unknown split {split!r}")
        if source is None:
            return C.apply_limit(self._paper(split, seed), limit)
        test, cal = C.stratified_split(self._all(source), lambda s: s.meta["category"], seed,
                                       per_stratum_test=self.per_category_test,
                                       n_calibration=self.calibration_size, salt="mmlu_pro")
        return C.apply_limit(test if split == "test" else cal, limit)

    def parse_spec(self, sample: Sample) -> ParseSpec:
        return ParseSpec(kind="choice", n_options=int(sample.meta.get("n_options", 10)))

    def answer_instructions(self) -> str:
        return answer_instruction("Give the line 'Answer: X' where X is the letter of the "
                                  "correct option.")

    def problem_statement(self, sample: Sample) -> str:
        letters = C.letters(int(sample.meta.get("n_options", 10)))
        return ("Answer the following multiple-choice question (options "
                f"{letters[0]}-{letters[-1]}).\n\n{sample.question}")

    def agent_prompt(self, sample: Sample) -> str:
        n = int(sample.meta.get("n_options", 10))
        letters = C.letters(n)
        return (f"{self.problem_statement(sample)}\n\n"
                + answer_instruction("Reason step by step. Then give your final answer on a "
                                     "line of the form 'Answer: X' where X is one of "
                                     f"{', '.join(letters)}."))

    def gold_key(self, sample: Sample) -> str | None:
        return sample.gold

    def grade(self, sample: Sample, answer: Observation | None) -> Grade:
        return grade_letter(sample, answer)


def normalize_letter(value: str | None, n_options: int) -> str | None:
    if value is None:
        return None
    s = value.strip().strip("()[]. :").upper()
    if len(s) == 1 and s in C.letters(n_options):
        return s
    return None


def grade_letter(sample: Sample, answer: Observation | None) -> Grade:
    if answer is None or not answer.valid:
        return Grade(False, {"acc": 0.0}, "no valid answer")
    n = int(sample.meta.get("n_options", 26))
    pred = normalize_letter(answer.answer, n)
    if pred is None and answer.extracted is not None:
        pred = normalize_letter(answer.extracted, n)
    ok = pred is not None and pred == sample.gold
    return Grade(ok, {"acc": float(ok)}, "" if ok else f"{pred} != {sample.gold}")
