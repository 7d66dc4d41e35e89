"""``df-ray show``: every call a configured method would make for one sample, round by round,
before any model runs (the idea of lm-evaluation-harness's ``write_out``).

A scripted engine stands in for every backbone: a scripted backbone answers with its own
script, any other with the responder ``--script`` names, else with the ``majority`` responder
(a seeded, plausible answer) where the sample's answer kind reads its answer, and otherwise
with the kind's own example answer (``df_ray.core.parsing.example_output``: a plugin's kind
says how its answers look). The method, its prompts, its seeds
and its sampling are the configuration's own, run through the evaluation driver as a run
would; only the answers are the stand-in's, so the prompts of later rounds (which quote
earlier answers) show the shape, not a model's words. Nothing is cached or logged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from df_ray.core import Calibration
from df_ray.core.parsing import example_output, parse
from df_ray.core.types import ParseSpec
from df_ray.engines.base import ChatRequest
from df_ray.engines.scripted import ScriptedEngine, majority
from df_ray.evaluation.api import EngineRouter
from df_ray.evaluation.driver import Driver, Member, PlannedCall
from df_ray.evaluation.scoring import ResultRow, finish_and_score
from df_ray.methods.base import CallRecord
from df_ray.tasks.base import Sample

#: The stand-in answer of a backbone that is not scripted.
DEFAULT_SCRIPT = "majority"


class SampleNotFound(KeyError):
    """No sample of that id in the configuration's split; the message names some that are."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class ShownCall:
    """One call of the preview: its round, who made it, the request and the stand-in answer."""

    round: int
    planned: PlannedCall
    record: CallRecord


@dataclass(frozen=True)
class Preview:
    """What ``df-ray show`` prints: the calls in order, the outcome's row, and what stood in."""

    sample: Sample
    calls: list[ShownCall]
    row: ResultRow
    scripts: dict[str, str]
    calibration: str


def stand_ins(cfg: Any, script: str | None = None, answers: ParseSpec | None = None
              ) -> tuple[dict[str, ScriptedEngine], dict[str, str]]:
    """A scripted engine per backbone (see the module docstring) and the script of each;
    ``answers``: the sample's answer kind, which the default stand-in answers in."""
    engines, scripts = {}, {}
    for name, spec in cfg.backbones.items():
        own = getattr(spec, "script", None) if spec.kind == "scripted" else None
        scripts[name] = script or own or DEFAULT_SCRIPT
        responder: Any = scripts[name]
        if scripts[name] == DEFAULT_SCRIPT and answers is not None:
            responder = in_kind(answers)
            scripts[name] += f" (else the {answers.kind} kind's example answer)"
        engines[name] = ScriptedEngine(spec.model, responder)
    return engines, scripts


def in_kind(answers: ParseSpec) -> Callable[[ChatRequest], str]:
    """The ``majority`` responder's answer where ``answers``' kind reads it, else the kind's
    example answer (seeded by the request)."""
    def respond(request: ChatRequest) -> str:
        text = majority(request)
        if parse(text, answers).valid:
            return text
        return example_output(answers, int(request.key()[:8], 16)) or text

    return respond


def preview_calibration(cfg: Any) -> tuple[Calibration | None, str]:
    """The calibration a run of ``cfg`` would find (its file), else an empty one (every factor
    at its Laplace prior): never fitted here. With a line saying which."""
    from df_ray.config import ConfigError
    from df_ray.evaluation.calibration_files import resolve_calibration

    empty = Calibration(benchmark=cfg.benchmark, agents=tuple(cfg.agent_ids()), n_samples=0,
                        fitted_at="")
    found: list[Calibration] = []

    def no_fit(_cfg: Any) -> Calibration:
        found.append(empty)
        return empty

    try:
        cal = resolve_calibration(cfg, no_fit)
    except (ConfigError, ValueError):
        cal = no_fit(cfg)
    if cal is None:
        return None, "none (the method uses no calibration)"
    if found:
        return cal, ("none found, none fitted: every agent and pattern at its Laplace prior "
                     "1/2 (a calibrated run's later prompts may differ)")
    return cal, f"the frozen file fitted on {cal.n_samples} held-out samples"


def find_sample(samples: Sequence[Sample], sample_id: str, where: str) -> Sample:
    for s in samples:
        if s.id == sample_id:
            return s
    some = ", ".join(s.id for s in samples[:5])
    raise SampleNotFound(f"no sample {sample_id!r} in {where} ({len(samples)} samples; the "
                         f"first: {some})")


def preview(cfg: Any, sample_id: str, *, script: str | None = None,
            split: str | None = None) -> Preview:
    """Run the configuration's method over one sample with scripted stand-ins (see the module
    docstring); the sample is looked up by id in the configuration's split (or ``split``)."""
    from df_ray.evaluation.context import load_samples

    split = split or cfg.split
    samples = load_samples(cfg, split=split)
    if cfg.limit and all(s.id != sample_id for s in samples):  # beyond the run's limit
        samples = load_samples(cfg.model_copy(update={"limit": None}), split=split)
    sample = find_sample(samples, sample_id, f"{cfg.benchmark}'s {split} split")
    engines, scripts = stand_ins(cfg, script, cfg.build_task().parse_spec(sample))
    calibration, said = preview_calibration(cfg)
    router = EngineRouter(engines, retries=0)

    def count(agent_id: str, text: str) -> int:
        return router.count_tokens(cfg.agent(agent_id).backbone, text)

    member = Member.from_config(cfg, calibration, count)
    driver = Driver([member], router, keep_plan=True)
    (states,) = driver.run([sample])
    state = states[0]
    calls = [ShownCall(p.round, p, rec)
             for p, rec in zip(driver.planned, state.calls, strict=True)]
    _, row = finish_and_score(state, member.method, member.ctx)
    return Preview(sample, calls, row, scripts, said)


def render(cfg: Any, shown: Preview, width: int = 78) -> list[str]:
    """The preview as the lines ``df-ray show`` prints."""
    agents = ", ".join(a.id for a in cfg.agents)
    coord = f"; coordinator {cfg.coordinator.id}" if cfg.coordinator else ""
    stands = ", ".join(f"{b}: {s}" for b, s in shown.scripts.items())
    out = [f"sample {shown.sample.id} of {cfg.benchmark}, configuration {cfg.name}: method "
           f"{cfg.method} (agents {agents}{coord})",
           f"stand-in answers (no model runs): scripted {stands}",
           f"calibration: {shown.calibration}"]
    rounds = sorted({c.round for c in shown.calls})
    for r in rounds:
        out += ["", f"{'=' * 10} round {r} {'=' * (width - 17 - len(str(r)))}"]
        mine = [c for c in shown.calls if c.round == r]
        for n, c in enumerate(mine, 1):
            out += _call_lines(n, len(mine), c, width)
    if not shown.calls:
        out.append("(the method makes no call for this sample)")
    row = shown.row
    out += ["", f"{'=' * 10} outcome {'=' * (width - 19)}",
            f"final answer: {row.final_answer!r} (gold {shown.sample.gold!r}; "
            f"{'correct' if row.correct else 'not correct'} with the stand-in answers)"]
    if row.failure:
        out.append(f"why not: {row.failure}")
    return out


def _call_lines(n: int, of: int, c: ShownCall, width: int) -> list[str]:
    req = c.planned.call.request
    s = req.sampling
    head = (f"--- call {n}/{of}: {c.planned.call.role} {c.planned.call.agent} -> backbone "
            f"{req.backbone} (model {req.model}; temperature {s.temperature:g}, max_tokens "
            f"{s.max_tokens}, seed {req.seed})")
    out = [head]
    for m in req.messages:
        out += [f"[{m.role}]", m.content]
    answer = (c.record.error and f"(failed: {c.record.error})") or c.record.text
    out += [f"[stand-in answer{' (read from an earlier call)' if c.record.cached else ''}]",
            answer, "-" * min(width, 40)]
    return out


def show(configs: Sequence[Any], sample_id: str, *, name: str | None = None,
         script: str | None = None, split: str | None = None,
         say: Callable[[str], None] = print) -> int:
    """``df-ray show``: print the preview of ``sample_id`` under the configuration ``name``
    (default: the sweep's first); 2 with one line when there is no such sample or name."""
    import sys

    chosen = [c for c in configs if name is None or c.name == name]
    if not chosen:
        print(f"df-ray: no configuration named {name!r}; the sweep's: "
              f"{', '.join(c.name for c in configs)}", file=sys.stderr)
        return 2
    try:
        shown = preview(chosen[0], sample_id, script=script, split=split)
    except SampleNotFound as e:
        print(f"df-ray: {e}", file=sys.stderr)
        return 2
    say("\n".join(render(chosen[0], shown)))
    return 0
