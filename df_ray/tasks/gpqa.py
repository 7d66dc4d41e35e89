"""GPQA diamond: 4-option graduate-level science questions, accuracy on the letter.

Data: ``Idavidrein/gpqa`` (gated: accept the terms on https://huggingface.co/datasets/Idavidrein/gpqa
and export ``HF_TOKEN``), configs ``gpqa_diamond`` (198 rows, the test split) and
``gpqa_main`` (448 rows; those not in diamond form the calibration pool), split ``train``.
Fields used: ``Question``, ``Correct Answer``, ``Incorrect Answer 1..3``, ``Record ID``
(optional ``Subdomain``, ``High-level domain``). ``source=`` may instead name a local file
(the data set's CSV, JSON or parquet) or a folder holding ``gpqa_diamond.*`` and
``gpqa_main.*``; for the calibration split a single local file is the main pool, and
diamond rows are removed from it using ``test_source`` (constructor) or, failing that, the
hub.

GoA's schema (``GPQA_test.json`` of UNITES-Lab/GoA, the 198 diamond questions the paper
aligns with): ``question`` with the options inlined as ``The options are: (A) ... (D) ...``
in GoA's fixed order, ``gold_answer`` the letter; the order is kept, ids are content hashes
(``gpqa/<16 hex>``) and ``question_key`` is the question without its options, so a
calibration split from the hub's gpqa_main drops these questions by text. A single GoA
file is a test split; its calibration split comes from the hub or ``calibration_source``.

Options: the correct and the three incorrect answers are shuffled per question with a
``random.Random`` seeded by sha256(global seed, Record ID): deterministic across processes
and machines, different between questions. ``gold`` is the letter of the correct answer.

Default (no ``source``): test = GoA's ``GPQA_test.json`` at the pinned GoA commit
(``df_ray.tasks.goa``: fetched once, cached, SHA-256 checked), in its order with its option
order; calibration from the hub as below (the run also removes GoA's questions by text).
``source="hub"``: the hub's diamond as test.

Splits: test = all diamond rows in data-set order; calibration = main rows not in
diamond (by Record ID and by question text), ordered by sha256(seed, id), the first
``calibration_size`` (100).

Reference extraction: lm-evaluation-harness's ``gpqa_diamond_cot_zeroshot`` filters:
``strict-match`` (``(?<=The answer is )(.*)(?=.)``, the first match) and ``flexible-extract``
(the last ``(X)`` in the output, then the option texts), scored by ``exact_match`` ignoring
case and punctuation. df_ray reads letters with the MMLU-Pro cascade
(``df_ray.core.parsing.choice_kind``, A-D), which agrees with ``strict-match`` wherever it finds a
letter (``tests/core/test_reference_agreement.py``); ``flexible-extract`` picks letters out of
option-by-option analyses and contradicts ``strict-match`` on the same outputs, so it is
reported there, not followed. Metric: accuracy.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

from df_ray.core.types import Observation, ParseSpec
from df_ray.tasks import _common as C
from df_ray.tasks.answer_instruction import answer_instruction, final_choice, reasoned_prompt
from df_ray.tasks.base import DataSchemaError, Grade, Sample, Split
from df_ray.tasks.goa import GoADataTask
from df_ray.tasks.mmlu_pro import _GOA_OPTIONS, count_inline_options, grade_letter, render_options

HUB = "Idavidrein/gpqa"
HUB_PAGE = "https://huggingface.co/datasets/Idavidrein/gpqa"
FIELDS = ("Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2",
          "Incorrect Answer 3", "Record ID")


class GatedDatasetError(RuntimeError):
    """A gated hub data set was requested without credentials."""


def hf_token() -> str | None:
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        v = os.environ.get(var, "").strip()
        if v:
            return v
    return None


def shuffle_options(correct: str, incorrect: list[str], record_id: str,
                    seed: int) -> tuple[list[str], str]:
    """(options in shuffled order, letter of the correct one): deterministic per question."""
    rng = random.Random(C.stable_int("gpqa-options", seed, record_id))
    options = [correct, *incorrect]
    order = list(range(len(options)))
    rng.shuffle(order)
    shuffled = [options[i] for i in order]
    return shuffled, C.letters(len(options))[order.index(0)]


def _goa_row(row: dict, file: str, index: int) -> Sample:
    """A row of GoA's ``GPQA_test.json``: ``question`` with the four options inlined in GoA's
    fixed order ("... The options are: (A) ... (D) ..."), ``gold_answer`` their letter. The
    order is kept as GoA published it (not shuffled: the paper's runs saw this order)."""
    q = C.field(row, "question", str, file=file, index=index)
    gold = C.field(row, "gold_answer", str, file=file, index=index).strip().upper()
    n = count_inline_options(q)
    if n != 4:
        raise DataSchemaError(f"{file}: row {index}: field 'question' inlines {n} options "
                              "(A), (B), ...; GoA's GPQA rows inline 4")
    if gold not in C.letters(4):
        raise DataSchemaError(f"{file}: row {index}: field 'gold_answer' {gold!r} is not one "
                              "of A, B, C, D")
    stem = _GOA_OPTIONS.split(q, maxsplit=1)[0].strip()
    return Sample(id=C.text_id("gpqa", q), task="gpqa", question=q.strip(), gold=gold,
                  meta={"n_options": 4, "option_order": "goa",
                        "question_key": C.stable_hash(C.normalize_ws(stem))[:16]})


def _rows_to_samples(rows: list[dict], file: str, seed: int) -> list[Sample]:
    out = []
    for i, row in enumerate(rows):
        if isinstance(row, dict) and "gold_answer" in row and "Record ID" not in row:
            out.append(_goa_row(row, file, i))
            continue
        v = {k: C.field(row, k, str, file=file, index=i) for k in FIELDS}
        question = v["Question"].strip()
        incorrect = [v[f"Incorrect Answer {j}"].strip() for j in (1, 2, 3)]
        options, gold = shuffle_options(v["Correct Answer"].strip(), incorrect,
                                        v["Record ID"], seed)
        meta = {"n_options": 4, "record_id": v["Record ID"], "options": options,
                "question_key": C.stable_hash(C.normalize_ws(question))[:16]}
        for k in ("Subdomain", "High-level domain"):
            if isinstance(row.get(k), str):
                meta[k.lower().replace(" ", "_").replace("-", "_")] = row[k]
        out.append(Sample(id=f"gpqa/{v['Record ID']}", task="gpqa",
                          question=f"{question}\n\nOptions:\n{render_options(options)}",
                          gold=gold, meta=meta))
    return C.dedupe_ids(out)


class GPQATask(GoADataTask):
    name = "gpqa"
    kind = "choice"
    hub_name = HUB
    data_source = ("GoA's GPQA_test.json (UNITES-Lab/GoA at the pinned commit; calibration: "
                   "hub Idavidrein/gpqa, gated: HF_TOKEN)")
    data_hint = ("run once with internet access (GoA's file is fetched and cached under "
                 "$DF_RAY_HOME/data/goa); for calibration accept the terms on "
                 "huggingface.co/datasets/Idavidrein/gpqa and export HF_TOKEN, or pass "
                 "source=<folder with gpqa_diamond.csv and gpqa_main.csv>")

    def __init__(self, *, calibration_size: int = 100, test_source: str | None = None):
        """Its options, a configuration's ``benchmark_args``.

        Args:
            calibration_size: main-pool questions (not in diamond) in the calibration split.
            test_source: where the diamond test rows are read to remove them from a local
                calibration pool (None: the hub).
        """
        self.calibration_size = calibration_size
        self.test_source = test_source

    def _hub(self, config: str, seed: int) -> list[Sample]:
        token = hf_token()
        if token is None:
            raise GatedDatasetError(
                f"GPQA is a gated data set: accept its terms on {HUB_PAGE} with your Hugging "
                "Face account, then export HF_TOKEN=<a read token> (or pass "
                "source=<local gpqa_diamond.csv / folder>).")
        ds = C.load_hub_dataset(HUB, config, split="train", token=token)
        return _rows_to_samples(C.dataset_rows(ds), f"{HUB}/{config}:train", seed)

    def _local(self, source: str, config: str, seed: int, limit: int | None = None
               ) -> list[Sample]:
        p = Path(source)
        if p.is_dir():
            f = C.find_file(p, [rf"{config}\b", config])
            if f is None:
                raise FileNotFoundError(f"no {config}.* file under {p}")
            p = f
        # each row's options are shuffled by its own id and the seed: a prefix reads the same
        return C.load_prefix(lambda n: _rows_to_samples(C.read_rows(p, n), str(p), seed),
                             limit, p)

    def _split(self, config: str, source: str | None, seed: int, limit: int | None = None
               ) -> list[Sample]:
        C.check_source(source)
        if C.is_local(source):
            return self._local(source, config, seed, limit)  # type: ignore[arg-type]
        return self._hub(config, seed)

    def held_out_pool(self, source: str) -> list[Sample]:
        """Every sample of ``source`` as candidates for a calibration split (the run removes
        its test samples from them)."""
        return self._split("gpqa_main", source, 0)

    def load(self, split: Split, *, source: str | None = None, limit: int | None = None,
             seed: int = 0) -> list[Sample]:
        if split == "test":
            if source is None:  # the paper's data: GoA's file at the pinned commit
                from df_ray.tasks.goa import goa_file

                return C.apply_limit(self._local(str(goa_file("gpqa")), "gpqa_diamond", seed,
                                                 limit), limit)
            return C.apply_limit(self._split("gpqa_diamond", source, seed, limit), limit)
        if split != "calibration":
            raise ValueError(f"unknown split {split!r}")
        pool = self._split("gpqa_main", source, seed)
        if source is not None and Path(source).is_dir():
            test_src: str | None = source
        else:
            test_src = self.test_source
        test = self._split("gpqa_diamond", test_src, seed)
        ids = {s.id for s in test}
        keys = {s.meta["question_key"] for s in test}
        pool = [s for s in pool if s.id not in ids and s.meta["question_key"] not in keys]
        chosen = C.seeded_order(pool, lambda s: s.id, seed, "gpqa-cal")[: self.calibration_size]
        return C.apply_limit(chosen, limit)

    def parse_spec(self, sample: Sample) -> ParseSpec:
        return ParseSpec(kind="choice", n_options=4)

    def answer_instructions(self) -> str:
        return answer_instruction("Give the line 'Answer: X' where X is A, B, C or D.")

    def problem_statement(self, sample: Sample) -> str:
        return ("Answer the following multiple-choice science question (options A-D)."
                f"\n\n{sample.question}")

    def agent_prompt(self, sample: Sample) -> str:
        return reasoned_prompt(self.problem_statement(sample), final_choice("ABCD"))

    def gold_key(self, sample: Sample) -> str | None:
        return sample.gold

    def grade(self, sample: Sample, answer: Observation | None) -> Grade:
        return grade_letter(sample, answer)
