"""A benchmark from a local file, by configuration alone (lm-evaluation-harness's task YAML is
the model): ``benchmark: file`` and ``benchmark_args`` naming the file and its fields.

    benchmark: file
    benchmark_args: {path: my_questions.jsonl, question_field: question,
                     options_field: choices, answer_field: answer, kind: choice}

Data: a ``.json`` list (or JSON lines), ``.jsonl`` (optionally ``.gz``), ``.csv``/``.tsv`` or
``.parquet`` file, or a folder of them read in path order, streamed (``_common.iter_rows``):
a ``limit`` reads the file's first rows only. The test split is the file's rows in order; a
row given twice (same id, question and answer) is read once, two rows with one id and
different content are refused. There is no calibration split of the file's own: DarkForest's
calibration comes from ``calibration_source=<another file of the same fields>`` (test rows
are removed from it) or a fitted ``calibration.path``.

Kinds (``kind``), each read and graded as the built-in benchmark of that kind:
- ``choice``: ``options_field`` holds the options (a list of strings; in a CSV cell, a JSON
  list), lettered A, B, ... in order; the answer is the letter, the option's 0-based index, or
  the option's text. Accuracy on the letter (as MMLU-Pro and GPQA).
- ``math``: the answer is a math expression; equal as math-verify sees it (as MATH).
- ``label``: the answer is a label; ``options_field``, when given, holds the row's allowed
  labels. Normalized exact match (as LegalBench).
"""

from __future__ import annotations

import errno
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from df_ray.core.parsing.label_kind import normalize_label
from df_ray.core.types import Observation, ParseSpec
from df_ray.tasks import _common as C
from df_ray.tasks.answer_instruction import (
    FINAL_BOXED,
    FINAL_LABEL,
    answer_instruction,
    final_choice,
    reasoned_prompt,
)
from df_ray.tasks.base import BaseTask, DataSchemaError, DataUnavailable, Grade, Sample, Split
from df_ray.tasks.mmlu_pro import grade_letter, normalize_letter, question_key, render_options


class FileArgs(BaseModel):
    """``benchmark_args`` of ``benchmark: file``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str | None = Field(
        None,
        description="the data file (.json list or lines, .jsonl, .csv, .tsv, .parquet; JSON "
                    "may be .gz) or a folder of them, read in path order; the run's `source`, "
                    "when set, is read instead")
    question_field: str = Field(
        "question", description="the field holding the question text an agent is shown")
    options_field: str | None = Field(
        None,
        description="choice: the field holding the options (a list of strings, or a JSON list "
                    "in a CSV cell), lettered A, B, ... in order (unset: options); label: the "
                    "row's allowed labels (optional); math: not used")
    answer_field: str = Field(
        "answer",
        description="the field holding the gold answer: choice: the option's letter, 0-based "
                    "index or text; math: the expression; label: the label")
    id_field: str | None = Field(
        None,
        description="the field holding each row's id (a string or an integer, unique per "
                    "row); unset: ids are hashes of the question and its options")
    kind: Literal["choice", "math", "label"] = Field(
        "choice",
        description="how answers are read and graded: choice (a letter, accuracy), math "
                    "(math-verify equality, as MATH) or label (normalized exact match, as "
                    "LegalBench)")


class FileTask(BaseTask):
    name = "file"
    kind = "choice"
    data_source = "a local file named by benchmark_args.path"
    data_hint = ("set benchmark_args.path (or source) to an existing .json, .jsonl, .csv or "
                 ".parquet file, or a folder of them")
    #: No hub copy: a calibration split comes from ``calibration_source``.
    hub_source = None
    Args = FileArgs

    def __init__(self, *, path: str | None = None, question_field: str = "question",
                 options_field: str | None = None, answer_field: str = "answer",
                 id_field: str | None = None,
                 kind: Literal["choice", "math", "label"] = "choice"):
        try:
            self.args = FileArgs(path=path, question_field=question_field,
                                 options_field=options_field, answer_field=answer_field,
                                 id_field=id_field, kind=kind)
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(x) for x in err["loc"])
            raise ValueError(f"{where}: {err['msg']}") from None
        self.kind = self.args.kind

    # ------------------------------------------------------------------ loading
    def data_location(self, source: str | None) -> tuple[str, str]:
        return f"local {source or self.args.path}", self.data_hint

    def data_provenance(self, source: str | None, revision: str | None) -> tuple[str, str]:
        return source or self.args.path, revision or "file"

    def load(self, split: Split, *, source: str | None = None, limit: int | None = None,
             seed: int = 0) -> list[Sample]:
        """The test split: the file's rows in order (``limit``: its first rows, the file read
        no further than they need). The calibration split of ``source=None`` (the hub's, for
        the other benchmarks) does not exist: DataUnavailable says what to pass."""
        if split not in ("test", "calibration"):
            raise ValueError(f"unknown split {split!r}")
        if split == "calibration":
            if source is None:
                raise DataUnavailable(
                    "benchmark file has no calibration split of its own: pass "
                    "calibration_source=<a file with the same fields> or a fitted "
                    "calibration.path")
            return []  # a calibration source's rows are its test split (held_out_pool)
        where = source or self.args.path
        if where is None:
            raise DataUnavailable(f"benchmark file: no data file: {self.data_hint}")
        if not Path(where).exists():
            raise FileNotFoundError(errno.ENOENT, f"benchmark file: {where} does not exist; "
                                    f"{self.data_hint}", where)
        return C.load_prefix(lambda n: C.load_local(where, self._samples, n), limit, where)

    def _samples(self, rows: list[Any], file: str) -> list[Sample]:
        return C.dedupe_ids(self._sample(row, file, i) for i, row in enumerate(rows))

    def _sample(self, row: Any, file: str, i: int) -> Sample:
        a = self.args
        q = C.field(row, a.question_field, str, file=file, index=i).strip()
        meta: dict[str, Any] = {"question_key": question_key(q)}
        if a.kind == "choice" or (a.kind == "label" and a.options_field and
                                  row.get(a.options_field) is not None):
            options = _options(row, a.options_field or "options", file, i)
            meta["options" if a.kind == "choice" else "labels"] = options
        gold = C.field(row, a.answer_field, (str, int, float), file=file, index=i)
        if a.kind == "choice":
            meta["n_options"] = len(meta["options"])
            gold = _letter(gold, meta["options"], a.answer_field, file, i)
            question = f"{q}\n\nOptions:\n{render_options(meta['options'])}"
        else:
            gold, question = str(gold).strip(), q
        if a.id_field:
            rid = C.field(row, a.id_field, (str, int), file=file, index=i)
            sid = f"file/{rid}"
        else:
            sid = C.text_id("file", question)
        return Sample(id=sid, task="file", question=question, gold=gold, meta=meta)

    # ------------------------------------------------------------------ prompting
    def parse_spec(self, sample: Sample) -> ParseSpec:
        if self.kind == "choice":
            return ParseSpec("choice", n_options=int(sample.meta["n_options"]))
        if self.kind == "label":
            labels = sample.meta.get("labels")
            return ParseSpec("label", labels=tuple(labels)) if labels else ParseSpec("label")
        return ParseSpec("math")

    def answer_instructions(self) -> str:
        return answer_instruction({
            "choice": "Give the line 'Answer: X' where X is the letter of the correct option.",
            "math": "Put your final answer in \\boxed{} (only the final answer, simplified, "
                    "in LaTeX).",
            "label": "Give the line 'Answer: <label>'.",
        }[self.kind])

    def problem_statement(self, sample: Sample) -> str:
        if self.kind == "choice":
            letters = C.letters(int(sample.meta["n_options"]))
            return ("Answer the following multiple-choice question (options "
                    f"{letters[0]}-{letters[-1]}).\n\n{sample.question}")
        labels = sample.meta.get("labels")
        if labels:
            return f"{sample.question}\n\nAllowed labels: {', '.join(labels)}"
        return sample.question

    def agent_prompt(self, sample: Sample) -> str:
        if self.kind == "choice":
            final = final_choice(C.letters(int(sample.meta.get("n_options", 1))))
        elif self.kind == "math":
            final = FINAL_BOXED
        elif sample.meta.get("labels"):
            final = FINAL_LABEL
        else:
            final = "on a line of the form 'Answer: <label>'."
        return reasoned_prompt(self.problem_statement(sample), final)

    # ------------------------------------------------------------------ grading
    def gold_key(self, sample: Sample) -> str | None:
        if self.kind == "choice":
            return sample.gold
        from df_ray.core.parsing import canonicalize

        return canonicalize(sample.gold, self.parse_spec(sample))

    def grade(self, sample: Sample, answer: Observation | None) -> Grade:
        if self.kind == "choice":
            return grade_letter(sample, answer)
        if self.kind == "math":  # MATH's grading (its gold key is this kind's)
            from df_ray.tasks.math import MathTask

            return MathTask().grade(sample, answer)
        if answer is None or not answer.valid:
            return Grade(False, {"em": 0.0}, "no valid answer")
        gold = normalize_label(sample.gold)
        ok = any(c is not None and normalize_label(c) == gold
                 for c in (answer.answer, answer.extracted))
        return Grade(ok, {"em": float(ok)}, "" if ok else f"{answer.answer} != {sample.gold}")


def _options(row: dict, name: str, file: str, i: int) -> list[str]:
    """The options of a row: a list of strings, or a CSV cell holding a JSON list of them."""
    value = row.get(name) if isinstance(row, dict) else None
    if isinstance(value, str) and value.lstrip().startswith("["):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise DataSchemaError(f"{file}: row {i}: field {name!r} is not a JSON list of "
                                  "strings") from None
        row = {name: value}
    options = C.str_list(row, name, file=file, index=i)
    if not 2 <= len(options) <= 26:
        raise DataSchemaError(f"{file}: row {i}: field {name!r} has {len(options)} options; "
                              "a choice question needs 2 to 26")
    return options


def _letter(gold: Any, options: list[str], name: str, file: str, i: int) -> str:
    """The letter of the gold option: given as its letter, its 0-based index or its text."""
    letters = C.letters(len(options))
    if isinstance(gold, int) or (isinstance(gold, str) and gold.strip().isdigit()):
        k = int(gold)
        if 0 <= k < len(options):
            return letters[k]
    elif isinstance(gold, str):
        letter = normalize_letter(gold, len(options))
        if letter is not None:
            return letter
        matches = [j for j, o in enumerate(options) if o.strip() == gold.strip()]
        if len(matches) == 1:
            return letters[matches[0]]
    raise DataSchemaError(f"{file}: row {i}: field {name!r} {gold!r} is neither a letter "
                          f"{letters[0]}-{letters[-1]}, a 0-based index nor the text of one "
                          "of the options")


def _args_doc(model: type[BaseModel]) -> str:
    """A constructor docstring whose ``Args:`` are the model's field descriptions (what
    ``df-ray list`` reads), so that they are written once."""
    lines = [f"Its options, a configuration's ``benchmark_args`` (``{model.__name__}``).", "",
             "Args:"]
    lines += [f"    {name}: {f.description}" for name, f in model.model_fields.items()]
    return "\n".join(lines)


FileTask.__init__.__doc__ = _args_doc(FileArgs)
