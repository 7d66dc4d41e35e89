"""LegalBench: legal reasoning tasks, graded by normalized exact match.

Tasks. LegalBench has 162 tasks. The paper stratifies over all of them that exact match
grades (154): the eight whose official metric is something else are excluded
(``NON_EXACT_MATCH_TASKS``: ``rule_qa``, graded by hand; ``sara_numeric``, within 10%;
``successor_liability`` and the three ``ssla_*`` tasks, F1 over extracted items;
``definition_extraction``, stemmed match; ``citation_prediction_open``, containment).
Exact match on them would not be LegalBench's number. The task list is not written down
here: it is every task the source holds (the hub's subsets, or a local copy's), minus
those eight. Pass ``tasks=[...]`` to choose others.

Data: ``nguha/legalbench``, one subset per task. The hub repository is script-based, which
``datasets`` >= 4 refuses to run, and its parquet conversion (branch
``refs/convert/parquet``, laid out ``<task>/<split>/0000.parquet``) is one ``default``
configuration to ``datasets``, not one per task. So the branch is fetched as files
(``huggingface_hub.snapshot_download``, the tasks' folders only when ``tasks`` names them; from
the cache when offline) and each task's files are read by path with
``datasets.load_dataset("parquet", data_files=...)``, as a local copy in that layout is; a
run's ``data_revision`` pins a commit of the branch: split ``test`` for the questions, split
``train`` (LegalBench's few-shot examples, a handful per task; some tasks have none) for the
examples. Rows have ``answer`` (the label), ``index`` and task-specific input
columns (``text``, ``question``, ``contract``, ...); every string column other than
``answer``, ``index`` and ``slice`` is shown to the agent as "Column: value".

``source=`` may instead name a local copy:
- a folder with one sub-folder per task, in the parquet conversion's layout
  (``<task>/test/*.parquet`` and ``<task>/train/*.parquet``) or the LegalBench GitHub
  repository's (``tasks/<task>/test.tsv`` and ``train.tsv``; point ``source`` at ``tasks/``),
  or files ``<task>.<ext>`` with ``<task>_train.<ext>`` beside them;
- a single file whose rows carry a ``task`` column, and optionally ``split`` (``train``
  rows are the few-shot examples, every other row a question).

Prompt (default, ``prompts="zero_shot"``): LegalBench's own prompt without its few-shot
examples: the task's ``tasks/<task>/base_prompt_wo_example.txt`` where LegalBench has one (35
tasks), else its ``base_prompt.txt`` with the example blocks taken out (the instruction, then
the query block: :func:`without_examples`). ``prompts="official"``: the whole
``base_prompt.txt``, with its own few-shot examples, in the agents' calls. Both at the pinned
commit ``PROMPTS_COMMIT`` of HazyResearch/legalbench, filled as LegalBench's
``generate_prompts`` fills them (every ``{{column}}`` replaced by the row's value). The
template's final answer cue (``A:``, ``Label:``, ``Answer:``, ``OUTCOME:``, ``Supportive?``,
``... FINAL ANSWER:``, ``Governed by:``: :func:`strip_cue`) gives way to the allowed labels
and df_ray's answer format ("reason, then 'Answer: <label>'"). Whichever the variant, the
few-shot examples are the agents' alone: the coordinator and every baseline's later calls
(``problem_statement``) read the example-free prompt. Why zero-shot is the default: the
paper's 1.9k tokens per DarkForest sample is about 475 a call; the few-shot prompt alone
averages about 970 tokens, so three agents reading it already spend 1.5x the paper's figure
(docs/experiments.md has the estimates of both variants). The prompt file is read from a local copy
of the repository's ``tasks/`` folder when ``source`` points there, else from
``$DF_RAY_HOME/data/legalbench/<commit>/``, fetched there once on a machine with internet
access; offline without it the load stops and says what to fetch. Each sample records where
its prompt came from (``meta["prompt_origin"]``, logged as ``provenance.prompt_origin``).

Prompt with ``prompts="ours"`` (or ``DF_RAY_LEGALBENCH_PROMPTS=ours``): the task's
instruction (``instruction``: ours, one per task, written from the
task's definition in LegalBench; a family of tasks such as ``cuad_*`` shares a template that
names the task's own category), up to ``few_shot`` (4) of the task's train examples with
their answers, the case, and the allowed labels. Labels, per task: the sorted set of
distinct answers over the task's loaded rows, test and train (``Sample.meta["labels"]``,
used for ``ParseSpec.labels``).

Splits: 500 test + 100 calibration rows, stratified over the tasks (spread evenly; a task
with too few rows gives its remainder to the others), from each task's rows ordered by
sha256 of the row id; disjoint by construction, and the same for every run seed. With
154 tasks that is about 3 test rows per task. Ids: ``legalbench/<task>/<index>``.

Metric: normalized exact match (lower-case, punctuation removed, whitespace collapsed),
i.e. accuracy, as the paper reports. LegalBench's own evaluation reports *balanced*
accuracy per task over the same normalized match.

Reference extraction: LegalBench's ``evaluation.py`` (HazyResearch/legalbench) compares
the whole generation with the answer after ``normalize`` (punctuation removed, stripped,
lower-cased); it does no extraction beyond that (its prompts ask for the label alone).
df_ray reads the label after ``Answer:``/``Label:`` or from the last line
(``df_ray.core.parsing.label_kind``), so an answer that the reference scores right (the label
alone) is read the same, and a label followed by an explanation is read too.
"""

from __future__ import annotations

import os
import re
import string
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from df_ray.core.types import Observation, ParseSpec
from df_ray.tasks import _common as C
from df_ray.tasks.answer_instruction import FINAL_LABEL, answer_instruction, reasoned_prompt
from df_ray.tasks.base import (
    BaseTask,
    DataSchemaError,
    DataUnavailable,
    Grade,
    OneSourceSplits,
    Sample,
    Split,
)

HUB = "nguha/legalbench"
PARQUET_REVISION = "refs/convert/parquet"
#: Tasks LegalBench grades with something other than exact match (excluded; 162 - 8 = 154).
NON_EXACT_MATCH_TASKS = ("rule_qa", "sara_numeric", "successor_liability",
                         "definition_extraction", "citation_prediction_open",
                         "ssla_company_defendants", "ssla_individual_defendants",
                         "ssla_plaintiff")
NON_INPUT_COLUMNS = frozenset({"answer", "index", "slice", "task", "label", "split"})
#: Few-shot examples per prompt (LegalBench's train split; ours: a bound on prompt length).
FEW_SHOT = 4
#: Characters of one few-shot example's input kept in the prompt (long contracts are cut).
EXAMPLE_CHARS = 1500

#: One instruction per task outside the families below (our words).
INSTRUCTIONS = {
    "abercrombie": "Classify the mark's distinctiveness for the product under the "
                   "Abercrombie spectrum (generic, descriptive, suggestive, arbitrary or "
                   "fanciful).",
    "canada_tax_court_outcomes": "Say whether the Tax Court of Canada allowed or dismissed "
                                 "the appeal described.",
    "citation_prediction_classification": "Does the cited case support the legal statement?",
    "consumer_contracts_qa": "Answer the yes/no question about the consumer contract "
                             "(terms of service) excerpt.",
    "contract_qa": "Answer the yes/no question about the contract clause.",
    "corporate_lobbying": "Is the proposed bill relevant to the company, given its "
                          "business description?",
    "definition_classification": "Does the sentence from a judicial opinion define a legal "
                                 "term?",
    "function_of_decision_section": "Classify the function of this section of a judicial "
                                    "decision (facts, procedural history, issue, rule, "
                                    "analysis, conclusion or decree).",
    "hearsay": "Hearsay is an out-of-court statement offered to prove the truth of what it "
               "asserts. Is the evidence described hearsay?",
    "insurance_policy_interpretation": "Does the insurance policy cover the claim described, "
                                       "or is it ambiguous?",
    "international_citizenship_questions": "Answer the yes/no question about a country's "
                                           "citizenship law.",
    "intra_rule_distinguishing": "Is the rule's element satisfied by the facts described?",
    "jcrew_blocker": "Does the loan-agreement clause contain a J.Crew blocker (a restriction "
                     "on moving intellectual property to unrestricted subsidiaries)?",
    "legal_reasoning_causality": "Does the court's reasoning rely on statistical evidence "
                                 "to establish causation?",
    "nys_judicial_ethics": "Answer the yes/no question on New York judicial ethics.",
    "oral_argument_question_purpose": "Classify the purpose of the justice's question at "
                                      "oral argument.",
    "overruling": "Does the sentence overrule a previous case?",
    "personal_jurisdiction": "Does the court have personal jurisdiction over the defendant?",
    "privacy_policy_entailment": "Does the privacy-policy passage entail the description "
                                 "of a data practice?",
    "privacy_policy_qa": "Is the privacy-policy passage relevant to answering the question?",
    "proa": "Does the statute contain a private right of action?",
    "sara_entailment": "Does the tax statute entail the statement about the case?",
    "scalr": "Choose the holding that best answers the legal question from the Supreme "
             "Court case.",
    "telemarketing_sales_rule": "Does the conduct described violate the Telemarketing Sales "
                                "Rule?",
    "textualism_tool_dictionaries": "Does the court use a dictionary to interpret a term in "
                                    "the passage?",
    "textualism_tool_plain": "Does the court rely on a term's plain or ordinary meaning in "
                             "the passage?",
    "ucc_v_common_law": "Is the contract governed by the UCC (sale of goods) or by the "
                        "common law (services)?",
    "unfair_tos": "Classify the terms-of-service clause by the kind of unfair term it is, "
                  "or 'Other' if it is fair.",
}

#: Families of tasks: (name prefix, instruction template over the task's own topic).
FAMILIES: tuple[tuple[str, str], ...] = (
    ("cuad_", "Does the contract clause contain a provision of the CUAD category "
              "'{topic}'?"),
    ("maud_", "Answer the question about the merger agreement's '{topic}' provision, "
              "choosing among the options given."),
    ("contract_nli_", "Does the non-disclosure agreement clause support the hypothesis "
                      "about '{topic}'?"),
    ("learned_hands_", "Does the person's post describe a legal issue in the area of "
                       "'{topic}'?"),
    ("opp115_", "Does the privacy-policy clause describe the data practice "
                "'{topic}'?"),
    ("supply_chain_disclosure_best_practice_", "Does the supply-chain disclosure describe "
                                               "the best practice of '{topic}'?"),
    ("supply_chain_disclosure_disclosed_", "Does the supply-chain disclosure disclose the "
                                           "company's '{topic}'?"),
    ("diversity_", "Is diversity of citizenship (complete diversity and the amount in "
                   "controversy) met, so that a federal court has jurisdiction?"),
)

_PUNCT = str.maketrans("", "", string.punctuation)


def instruction(task: str) -> str:
    """The task's instruction: its own, its family's template on its topic, or a generic one
    naming the task."""
    if task in INSTRUCTIONS:
        return INSTRUCTIONS[task]
    for prefix, template in FAMILIES:
        if task.startswith(prefix):
            topic = task[len(prefix):].replace("_", " ").replace("-", " ").strip()
            return template.format(topic=topic)
    name = task.replace("_", " ").strip()
    return f"Answer the following question of the legal task '{name}'."


def normalize_label(text: str | None) -> str:
    """LegalBench's normalisation: punctuation removed, stripped, lower-cased (plus
    whitespace collapsed)."""
    if text is None:
        return ""
    return re.sub(r"\s+", " ", str(text).translate(_PUNCT)).strip().lower()


def _title(col: str) -> str:
    return col.replace("_", " ").strip().capitalize()


def _parse_rows(rows: list[dict], file: str, task: str | None
                ) -> list[tuple[str, str, object, dict[str, str], str]]:
    """(task, answer, index, inputs, split) per row."""
    parsed = []
    for i, row in enumerate(rows):
        t = task if task is not None else C.field(row, "task", str, file=file, index=i)
        answer = C.field(row, "answer", (str, int), file=file, index=i)
        index = C.field(row, "index", (int, str), file=file, index=i, default=i)
        split = str(row.get("split") or "test").strip().lower() if isinstance(row, dict) \
            else "test"
        inputs = {k: v for k, v in row.items() if k not in NON_INPUT_COLUMNS
                  and isinstance(v, str) and v.strip()}
        if not inputs:
            raise DataSchemaError(f"{file}: row {i}: no input text field (expected e.g. "
                                  "'text' or 'question')")
        parsed.append((t, str(answer).strip(), index, inputs, split))
    return parsed


def _body(inputs: dict[str, str], limit: int | None = None) -> str:
    text = "\n\n".join(f"{_title(k)}: {v.strip()}" for k, v in inputs.items())
    if limit is not None and len(text) > limit:
        text = text[:limit].rstrip() + " [...]"
    return text


# ----------------------------------------------------------------------------- prompts

#: LegalBench's official prompts: ``tasks/<task>/base_prompt.txt`` at this commit.
PROMPTS_REPO = "HazyResearch/legalbench"
PROMPTS_COMMIT = "ce482446b8eac4403b6db2c17223af4514bb24e3"
#: ``zero_shot`` (default), ``official`` or ``ours``: which prompts a LegalBenchTask builds.
PROMPTS_ENV = "DF_RAY_LEGALBENCH_PROMPTS"
PROMPT_CHOICES = ("zero_shot", "official", "ours")
DEFAULT_PROMPTS = "zero_shot"
#: LegalBench's own example-free prompt, where a task has one.
ZERO_SHOT_FILE = "base_prompt_wo_example.txt"
_PLACEHOLDER = re.compile(r"\{\{([^{}]+)\}\}")
#: A final answer cue: the last line's tail after its last sentence, ending in ":" (``A:``,
#: ``Label:``, ``Is this bill ...? FINAL ANSWER:``) or a short question that the template's
#: examples answer on the same line (``Supportive? Yes``).
_CUE_COLON = re.compile(r"(?:^|(?<=[.?!]) )([^\n.?!{}]{0,60}:)[ \t]*$")
_CUE_QUESTION = re.compile(r"(?:^|\n)([^\n{}]{1,40}\?)[ \t]*$")


def cue_of(template: str) -> str:
    """The final answer cue of a LegalBench template ("" when it ends with none)."""
    return template.rstrip()[len(strip_cue(template)):].strip()


def strip_cue(text: str, cue: str | None = None) -> str:
    """``text`` (a LegalBench prompt) without its final answer cue, which gives way to
    df_ray's answer format: a last-line tail ending in ":", or a short last-line question that
    the template's examples answer on the same line ("Supportive? Yes"). ``cue``: the cue
    read off the whole template (:func:`cue_of`), for a prompt whose examples were taken
    out."""
    body = text.rstrip()
    if cue:
        return body[: -len(cue)].rstrip() if body.endswith(cue) else body
    m = _CUE_COLON.search(body.rsplit("\n", 1)[-1])
    if m:
        return body[: len(body) - len(m.group(1))].rstrip()
    m = _CUE_QUESTION.search(body)
    if m:
        cue = m.group(1).strip()
        if re.search(r"(?m)^" + re.escape(cue) + r"[ \t]+\S", body[: m.start()]):
            return body[: m.start()].rstrip()
    return body


def _blocks(template: str) -> list[str]:
    return re.split(r"\n[ \t]*\n", template.strip())


def without_examples(template: str) -> str:
    """A ``base_prompt.txt`` without its few-shot examples: the blocks before the first
    example, then the query block (the first block with a ``{{column}}``) and what follows
    it. An example is a block that opens as the query block does (its first line up to the
    first ``{{``: ``Q:``, ``Clause:``, ``Text:``...); a template whose query opens with the
    field itself has its instruction (the first block) kept."""
    bs = _blocks(template)
    q = next((i for i, b in enumerate(bs) if _PLACEHOLDER.search(b)), None)
    if not q:  # no field (fill refuses it) or the query comes first: nothing to take out
        return template
    first = bs[q].lstrip().split("\n", 1)[0]
    m = _PLACEHOLDER.search(first)
    prefix = (first[: m.start()] if m else first).strip()
    if not prefix:
        return "\n\n".join([bs[0], *bs[q:]])
    ex = next((i for i, b in enumerate(bs[:q]) if b.lstrip().startswith(prefix)), q)
    return "\n\n".join([*bs[:ex], *bs[q:]])


class LegalBenchPromptUnavailable(DataUnavailable):
    """A task's official base_prompt.txt is neither local, cached nor fetchable here."""


def prompt_url(task: str) -> str:
    return (f"https://raw.githubusercontent.com/{PROMPTS_REPO}/{PROMPTS_COMMIT}/tasks/"
            f"{task}/base_prompt.txt")


def prompt_cache(task: str) -> Path:
    base = os.environ.get("DF_RAY_HOME") or os.path.join(os.path.expanduser("~"), ".cache",
                                                         "df_ray")
    return Path(base) / "data" / "legalbench" / PROMPTS_COMMIT / task / "base_prompt.txt"


def zero_shot_prompt(task: str, local: Path | None = None) -> tuple[str, str] | None:
    """(template, origin) of LegalBench's own ``base_prompt_wo_example.txt`` for ``task``
    (35 tasks have one), or None: from the local copy when ``local`` is given (its absence
    there is the answer), else the cache, else fetched once beside the cached base prompt
    (a task without one leaves an empty ``.absent`` marker, so every machine that has the
    cache reads the same). Offline with neither: None, and the base prompt's examples are
    taken out instead; the sample's ``prompt_origin`` says which."""
    from df_ray.tasks.goa import offline

    if local is not None:
        f = local / task / ZERO_SHOT_FILE
        return (f.read_text(encoding="utf-8"), str(f)) if f.is_file() else None
    cached = prompt_cache(task).with_name(ZERO_SHOT_FILE)
    absent = cached.with_name(ZERO_SHOT_FILE + ".absent")
    origin = f"{PROMPTS_REPO}@{PROMPTS_COMMIT[:12]}:tasks/{task}/{ZERO_SHOT_FILE}"
    if not cached.is_file() and not absent.is_file() and not offline():
        url = prompt_url(task).rsplit("/", 1)[0] + "/" + ZERO_SHOT_FILE
        cached.parent.mkdir(parents=True, exist_ok=True)
        try:
            with urllib.request.urlopen(url, timeout=60) as r:
                tmp = cached.with_name(f".{ZERO_SHOT_FILE}.{os.getpid()}.tmp")
                tmp.write_bytes(r.read())
                os.replace(tmp, cached)
        except urllib.error.HTTPError as e:
            if e.code == 404:
                absent.touch()
        except OSError:
            pass
    if cached.is_file():
        return cached.read_text(encoding="utf-8"), origin
    return None


def base_prompt(task: str, local: Path | None = None) -> tuple[str, str]:
    """(template, where it came from) of a task's official ``base_prompt.txt``: the local
    copy's ``<local>/<task>/base_prompt.txt`` (the LegalBench repository's ``tasks/``
    layout), else the cache, else fetched once at the pinned commit into the cache
    (atomically), unless offline."""
    from df_ray.tasks.goa import offline

    if local is not None and (local / task / "base_prompt.txt").is_file():
        f = local / task / "base_prompt.txt"
        return f.read_text(encoding="utf-8"), str(f)
    cached = prompt_cache(task)
    origin = f"{PROMPTS_REPO}@{PROMPTS_COMMIT[:12]}:tasks/{task}/base_prompt.txt"
    if cached.is_file():
        return cached.read_text(encoding="utf-8"), origin
    hint = (f"fetch it on a machine with internet access (any df_ray run there does) or "
            f"curl -L --create-dirs -o {cached} {prompt_url(task)}; or point source= at a "
            f"copy of the repository's tasks/ folder; or set {PROMPTS_ENV}=ours for df_ray's "
            "own instructions (not the paper's prompts)")
    if offline():
        raise LegalBenchPromptUnavailable(
            f"LegalBench's prompt for task {task!r} is not cached at {cached} and this machine "
            f"is offline; {hint}")
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_name(f".base_prompt.{os.getpid()}.tmp")
    try:
        try:
            with urllib.request.urlopen(prompt_url(task), timeout=60) as r:
                tmp.write_bytes(r.read())
        except OSError as e:
            raise LegalBenchPromptUnavailable(
                f"cannot fetch {prompt_url(task)}: {e}; {hint}") from None
        os.replace(tmp, cached)
    finally:
        tmp.unlink(missing_ok=True)
    return cached.read_text(encoding="utf-8"), origin


def fill(template: str, inputs: dict[str, str], *, task: str, where: str) -> str:
    """LegalBench's ``generate_prompts``: every ``{{column}}`` replaced by the row's value; a
    placeholder the row has no column for is an error naming it."""
    missing = sorted({m for m in _PLACEHOLDER.findall(template) if m not in inputs})
    if missing:
        raise DataSchemaError(f"{where}: LegalBench task {task!r}: its base prompt needs "
                              f"column(s) {missing}, the row has {sorted(inputs)}")
    if not _PLACEHOLDER.search(template):
        raise DataSchemaError(f"LegalBench task {task!r}: its base prompt has no {{{{...}}}} "
                              "field to fill")
    return _PLACEHOLDER.sub(lambda m: inputs[m.group(1)].strip(), template)


def _build(parsed: list[tuple[str, str, object, dict[str, str], str]],
           few_shot: int, templates: dict[str, tuple[str, str, str, str]] | None = None,
           zero_shot: bool = False) -> list[Sample]:
    labels: dict[str, set[str]] = {}
    examples: dict[str, list[list[str]]] = {}
    for t, a, _, inputs, split in parsed:
        labels.setdefault(t, set()).add(a)
        if split == "train" and len(examples.setdefault(t, [])) < few_shot:
            examples[t].append([_body(inputs, EXAMPLE_CHARS), a])
    out = []
    for t, a, index, inputs, split in parsed:
        if split == "train":
            continue
        meta: dict = {"legalbench_task": t, "labels": sorted(labels[t])}
        if templates is not None:  # LegalBench's own prompt, with and without its examples
            template, origin, bare, bare_origin = templates[t]
            meta["bare_prompt"] = fill(bare, inputs, task=t, where=bare_origin)
            meta["base_prompt"] = (meta["bare_prompt"] if zero_shot
                                   else fill(template, inputs, task=t, where=origin))
            meta["prompt_origin"] = bare_origin if zero_shot else origin
            meta["answer_cue"] = cue_of(template)
        else:
            meta["instruction"] = instruction(t)
            meta["few_shot"] = examples.get(t, [])
        out.append(Sample(id=f"legalbench/{t}/{index}", task="legalbench",
                          question=_body(inputs), gold=a, meta=meta))
    return C.dedupe_ids(out)


def _with_split(rows: list[dict], split: str) -> list[dict]:
    return [{**r, "split": split} for r in rows]


class LegalBenchTask(OneSourceSplits, BaseTask):
    name = "legalbench"
    kind = "label"
    hub_name = HUB
    data_source = "hub nguha/legalbench (parquet conversion, 154 exact-match tasks)"
    data_hint = ("fetch nguha/legalbench (refs/convert/parquet) into the Hugging Face cache, "
                 "or pass source=<a local copy: one folder per task, see "
                 "df_ray/tasks/legalbench.py>")

    def __init__(self, *, tasks: Sequence[str] | None = None, test_size: int = 500,
                 calibration_size: int = 100, few_shot: int = FEW_SHOT,
                 prompts: str | None = None):
        """Its options, a configuration's ``benchmark_args``.

        Args:
            tasks: the LegalBench tasks to sample (None: every exact-match task the source holds).
            test_size: rows in the test split, stratified over the tasks.
            calibration_size: rows in the calibration split, stratified over the tasks.
            few_shot: train examples per task in the prompt (prompts: ours).
            prompts: zero_shot (LegalBench's prompt without its examples), official (its
                base_prompt.txt with them) or ours (df_ray's instructions with few-shot examples);
                None: DF_RAY_LEGALBENCH_PROMPTS, else zero_shot.
        """
        self.tasks = tuple(tasks) if tasks is not None else None
        self.test_size = test_size
        self.calibration_size = calibration_size
        self.few_shot = few_shot
        #: ``zero_shot``: LegalBench's prompt per task without its examples; ``official``:
        #: its base_prompt.txt with them (in the agents' calls); ``ours``: df_ray's
        #: instructions with few-shot examples from the train split.
        self.prompts = prompts or os.environ.get(PROMPTS_ENV, "").strip() or DEFAULT_PROMPTS
        if self.prompts not in PROMPT_CHOICES:
            raise ValueError(f"LegalBench prompts {self.prompts!r}: allowed: "
                             f"{', '.join(PROMPT_CHOICES)} ({PROMPTS_ENV})")

    def cluster(self, sample: Sample) -> str | None:
        """The sample's LegalBench task: the cluster of the report's standard errors."""
        return sample.meta.get("legalbench_task")

    def _templates(self, parsed: list, local: Path | None
                   ) -> dict[str, tuple[str, str, str, str]] | None:
        """task -> (base prompt, its origin, the example-free prompt, its origin)."""
        if self.prompts == "ours":
            return None
        out = {}
        for t in sorted({r[0] for r in parsed}):
            template, origin = base_prompt(t, local)
            own = zero_shot_prompt(t, local)
            bare = own or (without_examples(template), f"{origin} (examples taken out)")
            out[t] = (template, origin, *bare)
        return out

    def _build(self, parsed: list, local: Path | None) -> list[Sample]:
        return _build(parsed, self.few_shot, self._templates(parsed, local),
                      zero_shot=self.prompts == "zero_shot")

    def selected(self, available: Sequence[str]) -> list[str]:
        """The tasks to run out of those a source holds: ``tasks`` if given, else every
        exact-match task."""
        if self.tasks is not None:
            missing = sorted(set(self.tasks) - set(available))
            if missing:
                raise FileNotFoundError(f"LegalBench tasks not in the source: {missing}")
            return list(self.tasks)
        return sorted(t for t in set(available) if t not in NON_EXACT_MATCH_TASKS)

    # ------------------------------------------------------------------ loading
    def _hub(self) -> list[Sample]:
        """The parquet branch's files (the chosen tasks' folders only), read as a local copy
        in its layout is; the prompt files come from their own cache, not the branch."""
        patterns = [f"{t}/*" for t in self.tasks] if self.tasks is not None else None
        folder = C.hub_snapshot(HUB, revision=PARQUET_REVISION, allow_patterns=patterns)
        return self._folder(folder, None)

    @staticmethod
    def _local_layout(folder: Path) -> dict[str, dict[str, list[Path]]]:
        """task -> {"test": files, "train": files} in a local folder."""
        out: dict[str, dict[str, list[Path]]] = {}
        for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
            files = C.data_files(sub)
            if not files:
                continue
            slot = out.setdefault(sub.name, {"test": [], "train": []})
            for f in files:
                rel = f.relative_to(sub).as_posix().lower()
                if "train" in rel:
                    slot["train"].append(f)
                elif "test" in rel or f.parent == sub:
                    slot["test"].append(f)
        for f in sorted(p for p in folder.iterdir() if p.is_file()
                        and p.name.lower().endswith(C.DATA_SUFFIXES)):
            stem = f.name.split(".")[0]
            if stem.endswith("_train"):
                out.setdefault(stem[: -len("_train")], {"test": [], "train": []})["train"].append(f)
            else:
                out.setdefault(stem, {"test": [], "train": []})["test"].append(f)
        return {t: v for t, v in out.items() if v["test"]}

    def _local(self, source: str) -> list[Sample]:
        p = Path(source)
        if p.is_file():
            parsed = _parse_rows(C.read_rows(p), str(p), None)
            keep = set(self.selected(sorted({t for t, *_ in parsed})))
            parsed = [r for r in parsed if r[0] in keep]
            return self._build(parsed, None)
        return self._folder(p, p)

    def _folder(self, p: Path, prompts: Path | None) -> list[Sample]:
        """The tasks of a folder laid out one sub-folder per task (``prompts``: where their
        prompt files are, when the folder holds them)."""
        layout = self._local_layout(p)
        if not layout:
            raise FileNotFoundError(f"no LegalBench task data under {p}")
        parsed = []
        for task in self.selected(sorted(layout)):
            if task not in layout:
                raise FileNotFoundError(f"no data for LegalBench task {task!r} under {p}")
            for split in ("train", "test"):
                for f in layout[task][split]:
                    parsed += _parse_rows(_with_split(C.read_rows(f), split), str(f), task)
        return self._build(parsed, prompts)

    def _all(self, source: str | None) -> list[Sample]:
        C.check_source(source)
        if C.is_local(source):
            return self._local(source)  # type: ignore[arg-type]
        return self._hub()

    def load(self, split: Split, *, source: str | None = None, limit: int | None = None,
             seed: int = 0) -> list[Sample]:
        """``seed`` is accepted for the protocol and ignored: the split is fixed."""
        if split not in ("test", "calibration"):
            raise ValueError(f"unknown split {split!r}")
        if limit is not None and C.is_local(source):
            C.say_whole_read(source, "its splits are stratified over its tasks and its "
                             "labels are every answer a task's rows give")
        test, cal = C.stratified_split(self._all(source), lambda s: s.meta["legalbench_task"],
                                       0, n_test=self.test_size,
                                       n_calibration=self.calibration_size, salt="legalbench")
        return C.apply_limit(test if split == "test" else cal, limit)

    # ------------------------------------------------------------------ prompting
    def parse_spec(self, sample: Sample) -> ParseSpec:
        return ParseSpec(kind="label", labels=tuple(sample.meta["labels"]))

    def answer_instructions(self) -> str:
        return answer_instruction("Give the line 'Answer: <label>' where <label> is exactly "
                                  "one of the allowed labels.")

    def problem_statement(self, sample: Sample) -> str:
        """Instruction, the case and the allowed labels (the few-shot examples are the
        agents' alone: later calls already read the agents' answers). With LegalBench's own
        prompt: its example-free form, filled, without its final answer cue, and the allowed
        labels."""
        labels = ", ".join(sample.meta["labels"])
        bare = sample.meta.get("bare_prompt") or sample.meta.get("base_prompt")
        if bare:
            return f"{strip_cue(bare, sample.meta.get('answer_cue'))}\n\nAllowed labels: {labels}"
        instr = sample.meta.get("instruction") or instruction(sample.meta["legalbench_task"])
        return f"{instr}\n\n{sample.question}\n\nAllowed labels: {labels}"

    def agent_prompt(self, sample: Sample) -> str:
        if sample.meta.get("base_prompt"):
            labels = ", ".join(sample.meta["labels"])
            body = strip_cue(sample.meta["base_prompt"], sample.meta.get("answer_cue"))
            return reasoned_prompt(f"{body}\n\nAllowed labels: {labels}", FINAL_LABEL)
        instr = sample.meta.get("instruction") or instruction(sample.meta["legalbench_task"])
        shots = sample.meta.get("few_shot") or []
        labels = ", ".join(sample.meta["labels"])
        parts = [instr]
        if shots:
            parts.append("Examples:\n\n" + "\n\n".join(f"{body}\nAnswer: {ans}"
                                                        for body, ans in shots))
            parts.append("Now the case to answer:")
        parts += [sample.question, f"Allowed labels: {labels}"]
        return reasoned_prompt("\n\n".join(parts), FINAL_LABEL)

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
