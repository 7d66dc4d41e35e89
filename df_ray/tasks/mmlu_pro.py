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

Prompts (``prompt``, a benchmark option: ``benchmark_args: {prompt: ...}``):

- ``ours`` (the class default): df_ray's zero-shot prompt, the question and its options
  followed by "Reason step by step" and df_ray's answer line (with its confidence line).
- ``official``: MMLU-Pro's own 5-shot chain-of-thought prompt, as its
  ``evaluate_from_local.py`` builds it (TIGER-AI-Lab/MMLU-Pro, ``generate_cot_prompt``,
  ``format_cot_example``, ``cot_prompt_lib/initial_prompt.txt``, Apache-2.0): the
  instruction naming the category and asking to "finish your answer with 'the answer is
  (X)'", the first ``shots`` (5) validation examples of the sample's category with their
  worked answers (``cot_content``, its "A: Let's think step by step." written "Answer:"),
  then the question with its options as ``A. ...`` lines and "Answer: Let's think step by
  step." The examples come from the hub's ``validation`` split (70 rows, 5 per category),
  or from ``validation_source=<a local copy in the hub's schema>`` (else
  ``$DF_RAY_MMLU_PRO_VALIDATION``); "N/A" options are
  dropped from the examples, as ``preprocess`` drops them. The examples reach only the
  agents' first calls (``agent_prompt``), never ``problem_statement`` (the coordinator's
  and the baselines' later calls). The paper's MMLU-Pro sweeps run it: their 5.9k tokens
  per DarkForest sample is ~1.5k a call, which this prompt (~1.2k tokens before the
  completion) meets and ``ours`` (~0.3k) does not (docs/experiments.md).
  Remaining differences from the reference: it prompts base and chat models alike with the
  raw text and greedy decoding (temperature 0, ``max_tokens`` 2048, stop "Question:"); here
  the text is the agents' user turn, sampled at the agents' temperature and the benchmark's
  budget (2048) with no stop string; the reference drops examples while the prompt exceeds
  2,048 tokens of its model's tokenizer (none of the 70 does), ours keeps all 5; the
  prompt asks for no confidence (the parser's 0.5).

Reference extraction: the benchmark's evaluation script (TIGER-AI-Lab/MMLU-Pro,
``evaluate_from_api.py``): the first ``answer is \\(?([A-J])\\)?``, else the first line with
``[aA]nswer:\\s*([A-J])``, else a guess (the last standalone capital A-J); and
lm-evaluation-harness's ``mmlu_pro`` task (``custom-extract``: the first regex only, then
``exact_match``). df_ray's choice parser (``df_ray.core.parsing.choice_kind``) applies the two
regexes first, exactly, then reads what they miss and never guesses; the differential test
``tests/core/test_reference_agreement.py`` checks both references. Metric: accuracy.
"""

from __future__ import annotations

import os
import re

from df_ray.core.types import Observation, ParseSpec
from df_ray.tasks import _common as C
from df_ray.tasks.answer_instruction import answer_instruction, final_choice, reasoned_prompt
from df_ray.tasks.base import DataSchemaError, DataUnavailable, Grade, Sample, Split
from df_ray.tasks.goa import GoADataTask

HUB = "TIGER-Lab/MMLU-Pro"
#: The prompt variants (``benchmark_args: {prompt: ...}``).
PROMPTS = ("ours", "official")
#: MMLU-Pro's ``cot_prompt_lib/initial_prompt.txt`` (TIGER-AI-Lab/MMLU-Pro, Apache-2.0),
#: verbatim; ``{$}`` is the category.
COT_INITIAL_PROMPT = ('The following are multiple choice questions (with answers) about {$}. '
                      'Think step by step and then finish your answer with "the answer is (X)" '
                      'where X is the correct letter choice.\n\n\n')
#: A local copy of the hub's ``validation`` split for the ``official`` prompt, when a
#: configuration's ``validation_source`` names none (offline machines, the tests).
VALIDATION_ENV = "DF_RAY_MMLU_PRO_VALIDATION"
#: ``evaluate_from_local.py``'s ``--ntrain`` default: worked examples per prompt.
COT_SHOTS = 5
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


def inline_options(question: str, n: int) -> list[str]:
    """The ``n`` options inlined in a GoA question (``... The options are: (A) x (B) y.``),
    each up to the next marker; the sentence's closing period is not the last option's."""
    tail = _GOA_OPTIONS.split(question, maxsplit=1)[-1]
    starts = []
    pos = 0
    for letter in C.letters(n):
        i = tail.find(f"({letter}) ", pos)
        if i < 0:
            break
        starts.append(i)
        pos = i + 4
    out = [tail[a + 4:b].strip() for a, b in zip(starts, [*starts[1:], len(tail)], strict=True)]
    if out and out[-1].endswith("."):
        out[-1] = out[-1][:-1]
    return out


def format_cot_example(stem: str, options: list[str], cot: str | None) -> str:
    """One block of MMLU-Pro's CoT prompt (``format_cot_example``): a worked example when
    ``cot`` is given, else the question to answer."""
    text = f"Question:\n{stem}\nOptions:\n"
    text += "".join(f"{letter}. {opt}\n" for letter, opt in zip(C.letters(len(options)), options,
                                                                strict=True))
    if cot is not None:
        return text + cot.replace("A: Let's think step by step.",
                                  "Answer: Let's think step by step.") + "\n\n"
    return text + "Answer: Let's think step by step."


def cot_header(category: str, examples: list[dict]) -> str:
    """The instruction and the worked examples before the question (``generate_cot_prompt``)."""
    head = COT_INITIAL_PROMPT.replace("{$}", category) + "\n"
    for ex in examples:
        opts = [o for o in ex["options"] if o != "N/A"]
        head += format_cot_example(ex["question"], opts, ex["cot_content"])
    return head


def validation_examples(rows: list[dict], file: str, shots: int = COT_SHOTS
                        ) -> dict[str, list[dict]]:
    """The first ``shots`` validation rows of each category (the hub's ``validation`` schema:
    ``question``, ``options``, ``cot_content``, ``category``), in file order."""
    out: dict[str, list[dict]] = {}
    for i, row in enumerate(rows):
        ex = {"question": C.field(row, "question", str, file=file, index=i),
              "options": C.str_list(row, "options", file=file, index=i),
              "cot_content": C.field(row, "cot_content", str, file=file, index=i),
              "category": C.field(row, "category", str, file=file, index=i)}
        if not ex["cot_content"].strip():
            raise DataSchemaError(f"{file}: row {i}: field 'cot_content' is empty: not a "
                                  "validation example with a worked answer")
        got = out.setdefault(ex["category"], [])
        if len(got) < shots:
            got.append(ex)
    return out


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
            options = inline_options(q, n)
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
                                "question_key": question_key(stem), "stem": stem.strip(),
                                "options": options}))
    # native ids: a repeated id is the same row; content ids: repeated rows are kept
    return C.uniquify_ids(C.dedupe_ids([s for s in out if "/" in s.id and
                                        not _is_hash_id(s.id)]) +
                          [s for s in out if _is_hash_id(s.id)])


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__


def _is_hash_id(sid: str) -> bool:
    return bool(re.fullmatch(r"mmlu_pro/[0-9a-f]{16}", sid))


class MMLUProTask(GoADataTask):
    name = "mmlu_pro"
    kind = "choice"
    hub_name = HUB
    data_source = ("GoA's MMLU_Pro_sampled_test.json (UNITES-Lab/GoA at the pinned commit; "
                   "calibration: hub TIGER-Lab/MMLU-Pro)")
    data_hint = ("run once with internet access (GoA's file is fetched and cached under "
                 "$DF_RAY_HOME/data/goa), fetch TIGER-Lab/MMLU-Pro into the Hugging Face "
                 "cache, or pass source=<a local MMLU-Pro file> and "
                 "calibration_source=<held-out rows>")

    def __init__(self, *, per_category_test: int = 150, calibration_size: int = 150,
                 prompt: str = "ours", validation_source: str | None = None,
                 shots: int = COT_SHOTS):
        """Its options, a configuration's ``benchmark_args``.

        Args:
            per_category_test: test questions per category (14 categories).
            calibration_size: questions in the calibration split (the next ones per category).
            prompt: ours (df_ray's zero-shot prompt) or official (MMLU-Pro's own 5-shot chain-of-
                thought prompt with the category's validation examples).
            validation_source: a local copy of the validation split (the official prompt's examples;
                None: $DF_RAY_MMLU_PRO_VALIDATION, else the hub).
            shots: validation examples per category in the official prompt.
        """
        if prompt not in PROMPTS:
            raise ValueError(f"prompt {prompt!r} is not one of {', '.join(PROMPTS)}")
        if isinstance(shots, bool) or not isinstance(shots, int) or shots < 1:
            raise ValueError(f"shots must be a whole number >= 1, not {shots!r}")
        self.per_category_test = per_category_test
        self.calibration_size = calibration_size
        self.prompt = prompt
        self.validation_source = validation_source
        self.shots = shots
        self._examples: dict[str, list[dict]] | None = None

    def run_tags(self) -> dict[str, str]:
        return {"df_ray.mmlu_pro.prompt": self.prompt}

    def examples(self) -> dict[str, list[dict]]:
        """The worked examples per category of the ``official`` prompt (loaded once)."""
        if self._examples is None:
            src = self.validation_source or os.environ.get(VALIDATION_ENV) or None
            C.check_source(src)
            if C.is_local(src):
                rows, where = C.read_rows(src), str(src)  # type: ignore[arg-type]
            else:
                try:
                    rows = C.dataset_rows(C.load_hub_dataset(HUB, split="validation"))
                except Exception as e:
                    raise DataUnavailable(
                        f"MMLU-Pro's official prompt needs its validation split ({HUB}:"
                        f"validation) and cannot load it: {_first_line(e)}; fetch it into the "
                        "Hugging Face cache, or pass benchmark_args validation_source=<a local "
                        f"copy> (or set {VALIDATION_ENV})") from None
                where = f"{HUB}:validation"
            self._examples = validation_examples(rows, where, self.shots)
        return self._examples

    def _prompted(self, samples: list[Sample]) -> list[Sample]:
        """``samples`` with the ``official`` prompt's header in their meta (so a stage on
        another node needs no copy of the validation split)."""
        if self.prompt != "official":
            return samples
        shots = self.examples()
        out = []
        for s in samples:
            cat = s.meta.get("category", "all")
            if cat not in shots:
                raise DataSchemaError(
                    f"MMLU-Pro official prompt: no validation examples of category {cat!r} "
                    f"(the validation split has {', '.join(sorted(shots)) or 'none'})")
            out.append(Sample(id=s.id, task=s.task, question=s.question, gold=s.gold,
                              meta={**s.meta, "cot_header": cot_header(cat, shots[cat]),
                                    "cot_shots": self.shots}))
        return out

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
        return self._prompted(self._all(source))

    def load(self, split: Split, *, source: str | None = None, limit: int | None = None,
             seed: int = 0) -> list[Sample]:
        if split not in ("test", "calibration"):
            raise ValueError(f"unknown split {split!r}")
        if source is None:
            return self._prompted(C.apply_limit(self._paper(split, seed), limit))
        if limit is not None and C.is_local(source):
            C.say_whole_read(source, "its test and calibration splits are stratified by "
                             "category over every row")
        test, cal = C.stratified_split(self._all(source), lambda s: s.meta["category"], seed,
                                       per_stratum_test=self.per_category_test,
                                       n_calibration=self.calibration_size, salt="mmlu_pro")
        return self._prompted(C.apply_limit(test if split == "test" else cal, limit))

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
        if self.prompt == "official":
            return self.official_prompt(sample)
        n = int(sample.meta.get("n_options", 10))
        letters = C.letters(n)
        return reasoned_prompt(self.problem_statement(sample), final_choice(letters))

    def official_prompt(self, sample: Sample) -> str:
        """MMLU-Pro's 5-shot CoT prompt for ``sample`` (its header from ``load``, else built
        here from the validation examples)."""
        header = sample.meta.get("cot_header")
        if header is None or sample.meta.get("cot_shots") != self.shots:
            header = self._prompted([sample])[0].meta["cot_header"]
        options = sample.meta.get("options")
        stem = sample.meta.get("stem")
        if not options or stem is None:
            raise DataSchemaError(f"{sample.id}: no stem and options in the sample's meta: "
                                  "load it with MMLUProTask.load")
        return header + format_cot_example(stem, list(options), None)

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
