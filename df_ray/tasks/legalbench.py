"""LegalBench: legal classification tasks, graded by normalized exact match.

Data: ``nguha/legalbench``, one config per task. The hub repository is script-based, which
``datasets`` >= 4 refuses to run, so we load its parquet conversion
(``revision="refs/convert/parquet"``), split ``test``. Rows have ``answer`` (the label),
``index`` and task-specific input columns (``text``, ``question``, ``contract``,
``description``, ...); every string column other than ``answer``, ``index`` and ``slice``
is shown to the agent as "Column: value".

``source=`` may instead name a local folder in the parquet conversion's layout
(``<task>/test/*.parquet``, or ``<task>/*.parquet``, ``<task>.parquet``, ``<task>.jsonl``,
``<task>.json``) or a single file whose rows carry a ``task`` column.

Default tasks (``DEFAULT_TASKS``, ten single-label classification tasks of different
shapes, all scored by exact match in LegalBench's own evaluation): abercrombie,
canada_tax_court_outcomes, consumer_contracts_qa, definition_classification,
function_of_decision_section, hearsay, international_citizenship_questions,
personal_jurisdiction, proa, ucc_v_common_law. Pass ``tasks=[...]`` to choose others.

Labels: per task, the sorted set of distinct ``answer`` values in its loaded rows
(``Sample.meta["labels"]``, used for ``ParseSpec.labels``).

Splits: 500 test + 100 calibration rows, stratified over the tasks (spread evenly, a task
with too few rows gives its remainder to the others), from each task's rows ordered by
sha256(seed, id); disjoint by construction. Ids: ``legalbench/<task>/<index>``.

Metric: normalized exact match (lower-case, punctuation removed, whitespace collapsed),
i.e. accuracy. Where LegalBench's official metric differs: its classification tasks report
*balanced* accuracy over the same normalized exact match; ``rule_qa`` is graded by hand;
``sara_numeric`` (within 10%), ``successor_liability`` and the ``ssla_*`` extraction tasks
(F1), ``definition_extraction`` (stemmed match) and ``citation_prediction_open``
(containment) use other metrics. Those are excluded from the default list; exact match on
them would not be LegalBench's number.
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from pathlib import Path

from df_ray.core.types import Observation, ParseSpec
from df_ray.tasks import _common as C
from df_ray.tasks.base import DataSchemaError, Grade, Sample, Split
from df_ray.tasks.prompts import answer_instruction

HUB = "nguha/legalbench"
PARQUET_REVISION = "refs/convert/parquet"
DEFAULT_TASKS: tuple[str, ...] = (
    "abercrombie", "canada_tax_court_outcomes", "consumer_contracts_qa",
    "definition_classification", "function_of_decision_section", "hearsay",
    "international_citizenship_questions", "personal_jurisdiction", "proa",
    "ucc_v_common_law",
)
NON_EXACT_MATCH_TASKS = ("rule_qa", "sara_numeric", "successor_liability",
                         "definition_extraction", "citation_prediction_open",
                         "ssla_company_defendants", "ssla_individual_defendants",
                         "ssla_plaintiff")
NON_INPUT_COLUMNS = frozenset({"answer", "index", "slice", "task", "label"})

INSTRUCTIONS = {
    "abercrombie": "Classify the mark's distinctiveness for the product under the "
                   "Abercrombie framework.",
    "canada_tax_court_outcomes": "Classify the outcome of the Canadian Tax Court appeal "
                                 "described.",
    "consumer_contracts_qa": "Answer the question about the consumer contract.",
    "definition_classification": "Does the sentence define a legal term?",
    "function_of_decision_section": "Classify the function of this section of a judicial "
                                    "decision.",
    "hearsay": "Is the evidence described hearsay?",
    "international_citizenship_questions": "Answer the question about citizenship law.",
    "personal_jurisdiction": "Does the court have personal jurisdiction over the defendant?",
    "proa": "Does the statute contain a private right of action?",
    "ucc_v_common_law": "Is the contract governed by the UCC or by common law?",
}

_PUNCT = str.maketrans("", "", string.punctuation)


def normalize_label(text: str | None) -> str:
    """LegalBench's normalisation: punctuation removed, stripped, lower-cased (plus
    whitespace collapsed)."""
    if text is None:
        return ""
    return re.sub(r"\s+", " ", str(text).translate(_PUNCT)).strip().lower()


def _title(col: str) -> str:
    return col.replace("_", " ").strip().capitalize()


def _rows_to_samples(rows: list[dict], file: str, task: str | None) -> list[Sample]:
    parsed = []
    for i, row in enumerate(rows):
        t = task if task is not None else C.field(row, "task", str, file=file, index=i)
        answer = C.field(row, "answer", (str, int), file=file, index=i)
        index = C.field(row, "index", (int, str), file=file, index=i, default=i)
        inputs = {k: v for k, v in row.items() if k not in NON_INPUT_COLUMNS
                  and isinstance(v, str) and v.strip()}
        if not inputs:
            raise DataSchemaError(f"{file}: row {i}: no input text field (expected e.g. "
                                  "'text' or 'question')")
        parsed.append((t, str(answer).strip(), index, inputs))
    labels: dict[str, set[str]] = {}
    for t, a, _, _ in parsed:
        labels.setdefault(t, set()).add(a)
    out = []
    for t, a, index, inputs in parsed:
        body = "\n\n".join(f"{_title(k)}: {v.strip()}" for k, v in inputs.items())
        out.append(Sample(id=f"legalbench/{t}/{index}", task="legalbench", question=body,
                          gold=a, meta={"legalbench_task": t,
                                        "labels": sorted(labels[t])}))
    return C.dedupe_ids(out)


class LegalBenchTask:
    name = "legalbench"
    kind = "label"

    def __init__(self, *, tasks: Sequence[str] = DEFAULT_TASKS, test_size: int = 500,
                 calibration_size: int = 100):
        self.tasks = tuple(tasks)
        self.test_size = test_size
        self.calibration_size = calibration_size

    def _hub_task(self, task: str) -> list[Sample]:
        ds = C.load_hub_dataset(HUB, task, split="test", revision=PARQUET_REVISION)
        return _rows_to_samples(C.dataset_rows(ds), f"{HUB}/{task}:test", task)

    def _local_task(self, folder: Path, task: str) -> list[Sample]:
        sub = folder / task
        files: list[Path] = []
        if sub.is_dir():
            test_dir = sub / "test"
            files = C.data_files(test_dir) if test_dir.is_dir() else [
                f for f in C.data_files(sub) if "train" not in f.name.lower()]
        else:
            files = [f for f in C.data_files(folder) if f.name.split(".")[0] == task]
        if not files:
            raise FileNotFoundError(f"no data for LegalBench task {task!r} under {folder}")
        out: list[Sample] = []
        for f in files:
            out.extend(_rows_to_samples(C.read_rows(f), str(f), task))
        return out

    def _all(self, source: str | None) -> list[Sample]:
        C.check_source(source)
        if C.is_local(source) and Path(source).is_file():  # type: ignore[arg-type]
            rows = _rows_to_samples(C.read_rows(source), str(source), None)  # type: ignore[arg-type]
            return [s for s in rows if s.meta["legalbench_task"] in self.tasks]
        out: list[Sample] = []
        for task in self.tasks:
            if C.is_local(source):
                out.extend(self._local_task(Path(source), task))  # type: ignore[arg-type]
            else:
                out.extend(self._hub_task(task))
        return C.dedupe_ids(out)

    def load(self, split: Split, *, source: str | None = None, limit: int | None = None,
             seed: int = 0) -> list[Sample]:
        if split not in ("test", "calibration"):
            raise ValueError(f"unknown split {split!r}")
        test, cal = C.stratified_split(self._all(source), lambda s: s.meta["legalbench_task"],
                                       seed, n_test=self.test_size,
                                       n_calibration=self.calibration_size, salt="legalbench")
        return C.apply_limit(test if split == "test" else cal, limit)

    def parse_spec(self, sample: Sample) -> ParseSpec:
        return ParseSpec(kind="label", labels=tuple(sample.meta["labels"]))

    def answer_instructions(self) -> str:
        return answer_instruction("Give the line 'Answer: <label>' where <label> is exactly "
                                  "one of the allowed labels.")

    def agent_prompt(self, sample: Sample) -> str:
        task = sample.meta["legalbench_task"]
        instr = INSTRUCTIONS.get(task, "Answer the following legal classification question.")
        labels = ", ".join(sample.meta["labels"])
        return (f"{instr}\n\n{sample.question}\n\nAllowed labels: {labels}\n\n"
                + answer_instruction("Reason step by step. Then give your final answer on a "
                                     "line of the form 'Answer: <label>' using exactly one of "
                                     "the allowed labels."))

    def gold_key(self, sample: Sample) -> str | None:
        try:
            from df_ray.core.parsing import canonicalize
        except ImportError:
            return normalize_label(sample.gold)
        return canonicalize(sample.gold, self.parse_spec(sample))

    def grade(self, sample: Sample, answer: Observation | None) -> Grade:
        if answer is None or not answer.valid:
            return Grade(False, {"em": 0.0}, "no valid answer")
        gold = normalize_label(sample.gold)
        cands = [answer.answer, answer.extracted]
        ok = any(c is not None and normalize_label(c) == gold for c in cands)
        return Grade(ok, {"em": float(ok)}, "" if ok else f"{answer.answer} != {sample.gold}")
