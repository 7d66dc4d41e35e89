"""FinQA (text-only): numerical reasoning over a financial report, answered as a program.

Data: the original FinQA JSON files from the FinQA GitHub repository
(https://github.com/czyssrs/FinQA), e.g.
https://raw.githubusercontent.com/czyssrs/FinQA/main/dataset/test.json (1,147 rows) and
https://raw.githubusercontent.com/czyssrs/FinQA/main/dataset/dev.json (883 rows)
(``train.json`` likewise). Each file is a JSON list of ``{id, pre_text: [str], post_text:
[str], table: [[str]], qa: {question, program, exe_ans}}``. There is no maintained hub copy
in this schema, so the data is read from a local copy of the official release: ``source=``
(a folder holding ``test.json`` and ``dev.json``, or a single file used for whichever split
is requested), by default ``$DF_RAY_HOME/data/finqa`` (``~/.cache/df_ray/data/finqa``
without DF_RAY_HOME). To fetch it::

    mkdir -p ${DF_RAY_HOME:-~/.cache/df_ray}/data/finqa && cd $_
    for f in train dev test; do
      curl -LO https://raw.githubusercontent.com/czyssrs/FinQA/main/dataset/$f.json
    done

Splits: ``test`` = 300 rows of test.json, ``calibration`` = 100 rows of dev.json, each the
first rows in sha256(id) order (disjoint by construction; ids present in both files are
dropped from calibration). The run seed never changes them.

Prompt: the pre-text, the table rendered as a pipe table, the post-text and the question;
the answer is a program in FinQA's DSL (explained briefly with an example in the prompt).

Reference metric: the official FinQA evaluation (czyssrs/FinQA, ``code/evaluate/evaluate.py``),
which scores a predicted *program*:

- execution accuracy (``eval_program``): the program runs on the table, its result is
  rounded to 5 decimals (``round(res, 5)``; yes/no kept) and must equal ``exe_ans`` exactly;
  a malformed program (unknown operation, bad structure) scores 0;
- program accuracy (``equal_program``): symbolic equivalence: the gold program's arguments
  become symbols, the prediction may use only those, and both programs' sympy-simplified
  expressions must be equal.

df_ray grades the same way (``df_ray.core.parsing.finqa_kind``: ``execute_program``,
``program_key``, ``programs_equivalent``). ``Grade.correct`` is execution accuracy;
``scores`` has ``exec_acc``, ``prog_acc`` and ``value_acc``. Where df_ray differs: a bare
number is a valid answer for the belief (keyed by value, so it clusters with programs that
execute to it) but, as in the official evaluation, earns no execution or program credit;
``value_acc`` (df_ray only) reports whether the answer's value, program or number, matches.
df_ray's executor is more lenient about surface form than the official string handling:
``$5``, ``1,234`` arguments, table rows matched case- and space-insensitively, numbers
identified by value in program accuracy, and ``exe_ans`` itself rounded to 5 decimals before
the comparison; ``tests/core/test_reference_agreement.py`` checks that whatever the official
evaluation counts correct df_ray counts correct too. Extraction from a free-text answer (the
official script reads a model's token sequence, not prose) is df_ray's own: see
``df_ray.core.parsing.finqa_kind``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from df_ray.core.types import Observation, ParseSpec
from df_ray.tasks import _common as C
from df_ray.tasks.answer_instruction import answer_instruction, reasoned_prompt
from df_ray.tasks.base import BaseTask, DataSchemaError, Grade, Sample, Split


def default_source() -> Path:
    """Where the official FinQA release is looked for when no source is given."""
    base = os.environ.get("DF_RAY_HOME") or os.path.join(os.path.expanduser("~"), ".cache",
                                                         "df_ray")
    return Path(base) / "data" / "finqa"


FETCH_HINT = ("fetch: mkdir -p $DF_RAY_HOME/data/finqa && for f in train dev test; do curl -L "
              "-o $DF_RAY_HOME/data/finqa/$f.json https://raw.githubusercontent.com/czyssrs/"
              "FinQA/main/dataset/$f.json; done")

DSL_HELP = """\
Write the answer as a program in this language: a comma-separated list of steps
`op(arg1, arg2)`. Operations: add, subtract, multiply, divide, exp, greater (numbers, yes/no
answer), and table_sum, table_average, table_max, table_min (argument: a table row name,
then `none`). Arguments are numbers (write 5.3 rather than $5.3 or 5.3%), constants such as
const_100 or const_1000, or #k, the result of step k (counting from 0).
Example: "what is the percentage change in revenue from 2008 (5735) to 2009 (5829)?"
Program: subtract(5829, 5735), divide(#0, 5735)"""


def render_table(table: list[list[str]]) -> str:
    """A pipe table; the first row is the header."""
    if not table:
        return "(no table)"
    width = max(len(r) for r in table)
    rows = [[str(c).strip().replace("|", "/") for c in r] + [""] * (width - len(r))
            for r in table]
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * width]
    lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    return "\n".join(lines)


def _text(lines: list[str]) -> str:
    return "\n".join(s.strip() for s in lines if s.strip() and s.strip() != ".")


def _rows_to_samples(rows: list[dict], file: str) -> list[Sample]:
    out = []
    for i, row in enumerate(rows):
        rid = C.field(row, "id", str, file=file, index=i)
        pre = C.str_list(row, "pre_text", file=file, index=i)
        post = C.str_list(row, "post_text", file=file, index=i)
        table = C.field(row, "table", list, file=file, index=i)
        for j, r in enumerate(table):
            if not isinstance(r, list) or not all(isinstance(c, str) for c in r):
                raise DataSchemaError(f"{file}: row {i}: field 'table'[{j}] must be a list "
                                      "of strings")
        qa = C.field(row, "qa", dict, file=file, index=i)
        question = C.field(qa, "question", str, file=file, index=i)
        program = C.field(qa, "program", str, file=file, index=i)
        exe_ans = C.field(qa, "exe_ans", (int, float, str), file=file, index=i)
        text = (f"{_text(pre)}\n\nTable:\n{render_table(table)}\n\n{_text(post)}\n\n"
                f"Question: {question}")
        out.append(Sample(id=f"finqa/{rid}", task="finqa", question=text,
                          gold=str(exe_ans),
                          meta={"program": program, "exe_ans": exe_ans, "table": table,
                                "question_only": question}))
    return C.dedupe_ids(out)


class FinQATask(BaseTask):
    name = "finqa"
    kind = "finqa"
    #: FinQA has no hub copy: its default source is the official release's folder.
    hub_source = None
    data_source = "the official FinQA release"
    data_hint = ("fetch dataset/train.json, dev.json and test.json of "
                 "github.com/czyssrs/FinQA into $DF_RAY_HOME/data/finqa (see df_ray/tasks/finqa.py), "
                 "or pass source=<that folder>")

    def __init__(self, *, test_size: int = 300, calibration_size: int = 100):
        """Its options, a configuration's ``benchmark_args``.

        Args:
            test_size: rows of test.json in the test split (first in sha256(id) order).
            calibration_size: rows of dev.json in the calibration split (same order).
        """
        self.test_size = test_size
        self.calibration_size = calibration_size

    def cluster(self, sample: Sample) -> str:
        """The sample's report (its FinQA id without the question's ``-<n>``): questions on
        one filing share a cluster of the report's standard errors."""
        return sample.id.rpartition("-")[0] or sample.id


    def data_location(self, source: str | None) -> tuple[str, str]:
        if source is not None and source not in self.remote_sources:
            return f"local {source}", self.data_hint
        return f"local {default_source()}", self.data_hint
    def _file(self, source: str | None, split: Split) -> Path:
        source = source if source is not None else str(default_source())
        if not Path(source).exists():
            raise FileNotFoundError(
                f"FinQA data not found at {source}: put the official release's "
                "dataset/test.json and dev.json (https://github.com/czyssrs/FinQA/tree/main/"
                f"dataset) there, or set source=<folder or file>; {FETCH_HINT}")
        p = Path(source)
        if p.is_file():
            return p
        want = "test" if split == "test" else "dev"
        f = C.find_file(p, [rf"^{want}\.json$", rf"{want}"])
        if f is None:
            raise FileNotFoundError(f"no {want}.json under {p}")
        return f

    def _rows(self, source: str | None, split: Split) -> list[Sample]:
        f = self._file(source, split)
        return _rows_to_samples(C.read_rows(f), str(f))

    def held_out_pool(self, source: str) -> list[Sample]:
        """Every sample of ``source`` as candidates for a calibration split (the run removes
        its test samples from them)."""
        return self._rows(source, "calibration")

    def load(self, split: Split, *, source: str | None = None, limit: int | None = None,
             seed: int = 0) -> list[Sample]:
        seed = 0  # the split is fixed: the run seed changes sampling, not the data
        if split == "test":
            rows = C.seeded_order(self._rows(source, "test"), lambda s: s.id, seed, "finqa")
            return C.apply_limit(rows[: self.test_size], limit)
        if split != "calibration":
            raise ValueError(f"unknown split {split!r}")
        pool = self._rows(source, "calibration")
        source = source if source is not None else str(default_source())
        if Path(source).is_dir():
            test_ids = {s.id for s in self.load("test", source=source, seed=seed)}
            pool = [s for s in pool if s.id not in test_ids]
        rows = C.seeded_order(pool, lambda s: s.id, seed, "finqa-cal")
        return C.apply_limit(rows[: self.calibration_size], limit)

    def parse_spec(self, sample: Sample) -> ParseSpec:
        table = tuple(tuple(str(c) for c in r) for r in sample.meta["table"])
        return ParseSpec(kind="finqa", table=table)

    def answer_instructions(self) -> str:
        return answer_instruction(
            "Give the line 'Answer: <program>' where <program> is the calculation in the "
            "program language (e.g. 'Answer: subtract(5829, 5735), divide(#0, 5735)').")

    def problem_statement(self, sample: Sample) -> str:
        return ("Read the following excerpt of a financial report and answer the question.\n\n"
                f"{sample.question}\n\n{DSL_HELP}")

    def agent_prompt(self, sample: Sample) -> str:
        return reasoned_prompt(self.problem_statement(sample),
                               "on a line of the form 'Answer: <program>'.")

    def gold_key(self, sample: Sample) -> str | None:
        from df_ray.core.parsing.finqa_kind import program_key

        return program_key(sample.meta["exe_ans"])

    def grade(self, sample: Sample, answer: Observation | None) -> Grade:
        zero = {"exec_acc": 0.0, "prog_acc": 0.0, "value_acc": 0.0}
        if answer is None or not answer.valid:
            why = answer.reason if answer is not None and answer.reason else "no valid answer"
            return Grade(False, zero, why)
        from df_ray.core.parsing.finqa_kind import (
            ProgramError,
            execute_program,
            number_key,
            parse_program,
            program_key,
            programs_equivalent,
        )

        text = (answer.extracted if answer.extracted is not None else answer.answer) or ""
        text = text.strip()
        gold = self.gold_key(sample)
        table = [list(r) for r in sample.meta["table"]]
        try:
            parse_program(text)
            is_program = True
        except ProgramError:
            is_program = False
        if not is_program:
            # The official evaluation executes programs only: a bare number earns no
            # execution credit. df_ray still reports whether its value matches (value_acc).
            key = number_key(text)
            if key is None and answer.answer is not None:
                key = answer.answer
            value_ok = key is not None and key == gold
            return Grade(False, {**zero, "value_acc": float(value_ok)},
                         f"bare answer {text[:60]!r}: no program, so no execution credit "
                         f"(its value {'matches' if value_ok else 'does not match'} {gold})")
        try:
            pred_key: str | None = program_key(execute_program(text, table))
            exec_note = ""
        except ProgramError as e:
            pred_key, exec_note = None, f"program error: {e}"
        except Exception as e:  # a malformed answer must not crash the grader
            pred_key, exec_note = None, f"program error: {e!r}"
        exec_ok = pred_key is not None and pred_key == gold
        prog_ok = programs_equivalent(sample.meta["program"], text)
        why = (exec_note or f"executes to {pred_key} ({'=' if exec_ok else '!='} {gold})")
        why += "; program " + ("symbolically equal to" if prog_ok else "differs from") + \
            " the gold program"
        return Grade(exec_ok, {"exec_acc": float(exec_ok), "prog_acc": float(prog_ok),
                               "value_acc": float(exec_ok)}, why)


_NUM = re.compile(r"^[-+]?\$?\s*[-+]?(\d{1,3}(,\d{3})+|\d+)?(\.\d+)?\s*%?$")


def bare_number(text: str) -> float | None:
    """A plain numeric answer ('12.5', '-3', '1,234', '$5', '12%' -> 0.12), else None."""
    s = text.strip().rstrip(".")
    if not s or not _NUM.match(s) or not re.search(r"\d", s):
        return None
    pct = s.endswith("%")
    s = s.replace("$", "").replace(",", "").replace("%", "").replace(" ", "")
    try:
        v = float(s)
    except ValueError:
        return None
    return v / 100.0 if pct else v
