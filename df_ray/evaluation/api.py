"""``df_ray.evaluate``: a method on a benchmark's samples in this process, without Ray.

Two ways to say what to run::

    import df_ray

    # a configuration (a RunConfig, a mapping, or a YAML run/sweep file), resolved as a job
    # resolves it (df_ray.evaluation.plan.resolve: its plugins imported, each configuration
    # validated once): its engines are built here from its backbones, its samples loaded
    # from its benchmark unless given
    ev = df_ray.evaluate("my_run.yaml", samples=None)

    # or the pieces: a method (name or instance), a task (name or instance) and one engine
    # per agent (a mapping agent id -> engine; "coordinator" names the coordinator's)
    ev = df_ray.evaluate(("darkforest", "mmlu_pro", {"a1": e1, "a2": e2, "a3": e3,
                                                     "coordinator": ec}), samples)
    ev.rows[0].final_answer, ev.outcomes[0].decision, ev.metrics["accuracy"]

The loop is the evaluation driver the Ray pipeline runs (``df_ray.evaluation.driver``), with
the same guarded finish and scoring: a sample whose ``plan``, ``finish`` or grading raises is
its error row, counted against ``max_error_rate`` (``Evaluation.failure``); an engine that
raises on a batch has its requests tried alone, so one bad request is one failed call; an
engine failure (``df_ray.errors.EngineFailure``, e.g. a token count that raises) stops the
evaluation; with a ``cache``, answers are written to it as they arrive, so a rerun after a
failure makes none of them again. Only the scheduling differs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from df_ray.engines.base import ChatRequest, Completion, SamplingParams
from df_ray.errors import EngineFailure
from df_ray.evaluation.driver import Driver, Member, record_from_dict, record_to_dict
from df_ray.evaluation.metrics import MetricsAccumulator, failure_reason
from df_ray.evaluation.plan import RunPlan, resolve
from df_ray.evaluation.scoring import ResultRow, describe_exception
from df_ray.methods.base import AgentView, Method, MethodContext, Outcome, SampleState
from df_ray.tasks.base import Sample, Task


@dataclass
class Evaluation:
    """One configuration's in-process result: per sample its final state, the method's
    outcome (None for a sample whose ``plan``, ``finish`` or grading raised: its row is an
    error row) and the graded row, plus the run metrics. ``failure``: why the configuration
    FAILED (more failed calls than its ``max_error_rate``, sample errors counted), as a job
    would say it; ``errors``: its first distinct call errors."""

    name: str
    states: list[SampleState]
    outcomes: list[Outcome | None]
    rows: list[ResultRow]
    metrics: dict[str, float] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    failure: str | None = None

    @property
    def accuracy(self) -> float:
        return self.metrics.get("accuracy", float("nan"))


class EngineRouter:
    """An engine client over several engines (backbone name -> engine): each request goes to
    the engine of the backbone its call is bound to (``ChatRequest.backbone``); one engine
    serving several backbones gets their requests in one batch.

    The isolation of the Ray path's engine client, in this process: an engine that raises on
    a batch has each of its requests tried alone (``retries`` more times), and a request that
    still raises is one failed call (``engine error: ...``), not the batch's; an engine whose
    token count raises is an ``EngineFailure`` (the run stops, as a job's does). Answers
    reach the driver's cache as each engine's batch returns (``on_answer``). In process the
    driver runs rounds one after the other (``Driver.run``), so it has no
    ``generate_rolling``: its engines answer a whole batch at a time anyway."""

    #: ``generate`` takes ``on_answer``: the driver then caches answers as they come.
    answers_as_they_come = True

    def __init__(self, engines: Mapping[str, Any], retries: int = 2) -> None:
        self.engines = dict(engines)
        self.retries = retries

    def generate(self, requests: Sequence[ChatRequest],
                 on_answer: Callable[[int, Completion], None] | None = None
                 ) -> list[Completion]:
        out: list[Completion | None] = [None] * len(requests)
        groups: dict[int, list[int]] = {}
        for i, r in enumerate(requests):
            groups.setdefault(id(self.engines[self._backbone(r)]), []).append(i)
        for idx in groups.values():
            engine = self.engines[self._backbone(requests[idx[0]])]
            try:
                answers = list(engine.generate([requests[i] for i in idx]))
            except EngineFailure:
                raise
            except Exception:  # one request may be the cause: each alone, the rest answered
                answers = [self._alone(engine, requests[i]) for i in idx]
            for i, c in zip(idx, answers, strict=True):
                out[i] = c
                if on_answer is not None and c.error is None:
                    on_answer(i, c)
        return out  # type: ignore[return-value]

    def _alone(self, engine: Any, request: ChatRequest) -> Completion:
        error = "engine failed"
        for _ in range(self.retries + 1):
            try:
                (c,) = engine.generate([request])
                return c
            except EngineFailure:
                raise
            except Exception as e:
                error = describe_exception("engine error", e)
        return Completion("", 0, 0, error=error)

    def count_tokens(self, backbone: str, text: str) -> int:
        """``text``'s tokens with ``backbone``'s engine; its failure an ``EngineFailure``."""
        engine = self.engines[backbone]
        try:
            return int(engine.count_tokens(text))
        except EngineFailure:
            raise
        except Exception as e:
            raise EngineFailure(backbone, str(getattr(engine, "model", backbone)), 0,
                                "local", describe_exception("a token count failed", e)
                                ) from None

    def _backbone(self, request: ChatRequest) -> str:
        if request.backbone in self.engines:
            return request.backbone
        raise KeyError(f"no engine for backbone {request.backbone!r} (model {request.model!r}); "
                       f"engines: {sorted(self.engines)}")


def evaluate(config: Any, samples: Sequence[Sample] | None = None, *,
             engines: Mapping[str, Any] | None = None, calibration: Any = None,
             cache: Any = None) -> Evaluation | list[Evaluation]:
    """Run a configuration (or the pieces ``(method, task, engines)``) over ``samples`` in
    this process; see the module docstring. A sweep gives one Evaluation per configuration.

    ``config`` may be a resolved plan (``df_ray.evaluation.plan.RunPlan``, as
    ``df_ray.pipeline.runner.preflight`` returns): its Method, samples and calibration are
    used as they are. ``engines``: with a configuration, live engines by backbone name
    (default: built from the configuration's backbones). ``calibration``: a Calibration to
    use instead of the configuration's file policy. ``cache``: a generation cache (e.g.
    ``df_ray.pipeline.cache.GenerationCache``) to read and fill."""
    if isinstance(config, tuple):
        method, task, agent_engines = config
        return _evaluate_pieces(method, task, agent_engines, samples, calibration, cache)
    from df_ray.config import SweepConfig

    # a file or a sweep gives one Evaluation per configuration
    many = isinstance(config, SweepConfig | str | Path) or (
        isinstance(config, Mapping) and "base" in config)
    out = [_evaluate_plan(p, samples if samples is not None else (list(p.samples) or None),
                          engines, calibration if calibration is not None else p.calibration,
                          cache) for p in resolve(config)]
    return out if many else out[0]


def _evaluate_plan(plan: RunPlan, samples: Sequence[Sample] | None,
                   engines: Mapping[str, Any] | None, calibration: Any, cache: Any
                   ) -> Evaluation:
    cfg = plan.cfg
    from df_ray.engines import make_engine
    from df_ray.evaluation.calibration_files import (
        extend_with_guardrail_fit,
        fit_and_save,
        resolve_calibration,
    )
    from df_ray.evaluation.context import check_held_out, load_calibration_samples, load_samples
    from df_ray.evaluation.guardrail_calibration import run_in_process
    from df_ray.evaluation.scoring import spent_tokens

    if engines is None:
        engines = {name: make_engine(spec, plan.engines.get(spec.kind))
                   for name, spec in cfg.backbones.items()}

    client = EngineRouter(engines, retries=cfg.max_request_retries)

    def count(agent_id: str, text: str) -> int:
        return client.count_tokens(cfg.agent(agent_id).backbone, text)

    if calibration is None:
        def fit(c: Any) -> Any:
            held_out = load_calibration_samples(c)
            check_held_out(c, held_out)
            run_held_out = run_in_process(client, cache, count)
            member = Member.from_plan(plan, count, for_calibration=True)
            driver = Driver([member], client, cache)

            def records_of(rows: Any) -> list:
                return [record_from_dict(record_to_dict(r))
                        for _, r in driver.calibration_records(rows)]

            extended = extend_with_guardrail_fit(
                c, held_out, run_held_out, lambda: records_of(driver.run(held_out.samples)))
            if extended is not None:  # a frozen file's counts, with a guardrail fit added
                return extended
            rows = driver.run(held_out.samples)
            states = [st for sts in rows for st in sts]
            return fit_and_save(c, records_of(rows),
                                held_out=held_out,
                                tokens=sum(spent_tokens(st.calls) for st in states),
                                calls=sum(len(st.calls) for st in states),
                                run_held_out=run_held_out)

        calibration = resolve_calibration(cfg, fit)
    if samples is None:
        samples = load_samples(cfg)
    member = Member.from_plan(plan.with_calibration(calibration), count)
    return _run(cfg.name, Driver([member], client, cache), samples, cfg.max_error_rate)


def _evaluate_pieces(method: Method | str, task: Task | str, agent_engines: Mapping[str, Any],
                     samples: Sequence[Sample] | None, calibration: Any, cache: Any
                     ) -> Evaluation:
    from df_ray.methods import get_method
    from df_ray.tasks import get_task

    if isinstance(method, str):
        method = get_method(method)
    if isinstance(task, str):
        task = get_task(task)
    if samples is None:
        raise ValueError("evaluate((method, task, engines), samples): samples are required")
    # Each agent its own seed, so agents on one engine still sample independently.
    views = {aid: AgentView(id=aid, model=str(getattr(e, "model", aid)), revision=None,
                            sampling=SamplingParams(), seed=i, backbone=aid)
             for i, (aid, e) in enumerate(agent_engines.items())}
    router = EngineRouter(agent_engines)
    ctx = MethodContext(task=task, agents=[v for a, v in views.items() if a != "coordinator"],
                        coordinator=views.get("coordinator"), settings=None,
                        calibration=calibration,
                        count_tokens=_counter(router))
    return _run(getattr(method, "name", "method"),
                Driver([Member(method, ctx)], router, cache), samples, DEFAULT_MAX_ERROR_RATE)


#: ``max_error_rate`` of an evaluation of pieces (a RunConfig's default).
DEFAULT_MAX_ERROR_RATE = 0.1


def _counter(router: EngineRouter) -> Callable[[str, str], int]:
    def count(agent_id: str, text: str) -> int:
        if agent_id in router.engines:
            return router.count_tokens(agent_id, text)
        return len(text.split())
    return count


def _run(name: str, driver: Driver, samples: Sequence[Sample],
         max_error_rate: float) -> Evaluation:
    """The driver's rounds over ``samples``, then the one guarded finish; metrics and the
    verdict on failed calls as a job's (``df_ray.pipeline.outcome.judge``)."""
    rows = driver.run(list(samples))
    finished = driver.outcomes(rows)
    acc = MetricsAccumulator(type(driver.members[0].method).metrics)
    for _, _, r in finished:
        acc.add(r.to_dict())
    metrics = acc.result()
    return Evaluation(name=name, states=[states[0] for states in rows],
                      outcomes=[o for _, o, _ in finished], rows=[r for _, _, r in finished],
                      metrics=metrics, errors=list(acc.first_errors),
                      failure=failure_reason(max_error_rate, metrics, acc.first_errors))
