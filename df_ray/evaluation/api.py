"""``df_ray.evaluate``: a method on a benchmark's samples in this process, without Ray.

Two ways to say what to run::

    import df_ray

    # a configuration (a RunConfig, a mapping, or a YAML run/sweep file): its engines are
    # built here from its backbones, its samples loaded from its benchmark unless given
    ev = df_ray.evaluate("my_run.yaml", samples=None)

    # or the pieces: a method (name or instance), a task (name or instance) and one engine
    # per agent (a mapping agent id -> engine; "coordinator" names the coordinator's)
    ev = df_ray.evaluate(("darkforest", "mmlu_pro", {"a1": e1, "a2": e2, "a3": e3,
                                                     "coordinator": ec}), samples)
    ev.rows[0].final_answer, ev.outcomes[0].decision, ev.metrics["accuracy"]

The loop is the evaluation driver the Ray pipeline runs (``df_ray.evaluation.driver``), with
the same scoring; only the scheduling differs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from df_ray.engines.base import ChatRequest, Completion, SamplingParams
from df_ray.evaluation.driver import Driver, Member, record_from_dict, record_to_dict
from df_ray.evaluation.metrics import MetricsAccumulator
from df_ray.evaluation.scoring import ResultRow
from df_ray.methods.base import AgentView, Method, MethodContext, Outcome, SampleState
from df_ray.tasks.base import Sample, Task


@dataclass
class Evaluation:
    """One configuration's in-process result: per sample its final state, the method's
    outcome and the graded row, plus the run metrics."""

    name: str
    states: list[SampleState]
    outcomes: list[Outcome]
    rows: list[ResultRow]
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def accuracy(self) -> float:
        return self.metrics.get("accuracy", float("nan"))


class EngineRouter:
    """An engine client over several engines (backbone name -> engine): each request goes to
    the engine of the backbone its call is bound to (``ChatRequest.backbone``); one engine
    serving several backbones gets their requests in one batch."""

    def __init__(self, engines: Mapping[str, Any]) -> None:
        self.engines = dict(engines)

    def generate(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        out: list[Completion | None] = [None] * len(requests)
        groups: dict[int, list[int]] = {}
        for i, r in enumerate(requests):
            groups.setdefault(id(self.engines[self._backbone(r)]), []).append(i)
        for idx in groups.values():
            engine = self.engines[self._backbone(requests[idx[0]])]
            for i, c in zip(idx, engine.generate([requests[i] for i in idx]), strict=True):
                out[i] = c
        return out  # type: ignore[return-value]

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

    ``engines``: with a configuration, live engines by backbone name (default: built from
    the configuration's backbones). ``calibration``: a Calibration to use instead of the
    configuration's file policy. ``cache``: a generation cache (e.g.
    ``df_ray.pipeline.cache.GenerationCache``) to read and fill."""
    if isinstance(config, tuple):
        method, task, agent_engines = config
        return _evaluate_pieces(method, task, agent_engines, samples, calibration, cache)
    from df_ray.config import RunConfig, SweepConfig, load_config

    if isinstance(config, str | Path):
        config = load_config(config)
    elif isinstance(config, Mapping):
        config = RunConfig.model_validate(config)
    if isinstance(config, SweepConfig):
        return [_evaluate_config(c, samples, engines, calibration, cache)
                for c in config.expand()]
    return _evaluate_config(config, samples, engines, calibration, cache)


def _evaluate_config(cfg: Any, samples: Sequence[Sample] | None, engines: Mapping[str, Any] | None,
                     calibration: Any, cache: Any) -> Evaluation:
    from df_ray.engines import make_engine
    from df_ray.evaluation.calibration_files import fit_and_save, resolve_calibration
    from df_ray.evaluation.context import check_held_out, load_calibration_samples, load_samples
    from df_ray.evaluation.scoring import spent_tokens

    if engines is None:
        engines = {name: make_engine(spec) for name, spec in cfg.backbones.items()}

    def count(agent_id: str, text: str) -> int:
        return engines[cfg.agent(agent_id).backbone].count_tokens(text)

    client = EngineRouter(engines)
    if calibration is None:
        def fit(c: Any) -> Any:
            held_out = load_calibration_samples(c)
            check_held_out(c, held_out)
            member = Member.from_config(c, None, count, for_calibration=True)
            driver = Driver([member], client, cache)
            rows = driver.run(held_out.samples)
            recs = driver.calibration_records(rows)
            states = [st for sts in rows for st in sts]
            return fit_and_save(c, [record_from_dict(record_to_dict(r)) for _, r in recs],
                                held_out=held_out,
                                tokens=sum(spent_tokens(st.calls) for st in states),
                                calls=sum(len(st.calls) for st in states))

        calibration = resolve_calibration(cfg, fit)
    if samples is None:
        samples = load_samples(cfg)
    member = Member.from_config(cfg, calibration, count)
    return _run(cfg.name, Driver([member], client, cache), samples)


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
    by_id = dict(agent_engines)
    ctx = MethodContext(task=task, agents=[v for a, v in views.items() if a != "coordinator"],
                        coordinator=views.get("coordinator"), settings=None,
                        calibration=calibration,
                        count_tokens=_counter(by_id))
    return _run(getattr(method, "name", "method"),
                Driver([Member(method, ctx)], EngineRouter(by_id), cache), samples)


def _counter(engines: Mapping[str, Any]) -> Callable[[str, str], int]:
    def count(agent_id: str, text: str) -> int:
        e = engines.get(agent_id)
        return e.count_tokens(text) if e is not None else len(text.split())
    return count


def _run(name: str, driver: Driver, samples: Sequence[Sample]) -> Evaluation:
    rows = driver.run(list(samples))
    finished = driver.outcomes(rows)
    acc = MetricsAccumulator(type(driver.members[0].method).metrics)
    for _, _, r in finished:
        acc.add(r.to_dict())
    return Evaluation(name=name, states=[states[0] for states in rows],
                      outcomes=[o for _, o, _ in finished], rows=[r for _, _, r in finished],
                      metrics=acc.result())
