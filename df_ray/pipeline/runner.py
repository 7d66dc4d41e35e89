"""Running configurations: engines up once, samples streamed through the method's rounds with
Ray Data, metrics accumulated on the driver, one MLflow run per configuration.

The order of things is chosen so that nothing computed is lost: every configuration is
validated, every benchmark split loaded and the tracking store reached before an engine
starts; completions are persisted to the generation cache batch by batch as they arrive;
a configuration's MLflow run is written only once its samples are all graded, so a killed job
leaves no half runs, and its rerun skips finished configurations and replays cached calls.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from df_ray.config import ConfigError, RunConfig, SweepConfig, check_engine_args_of
from df_ray.core import Calibration
from df_ray.engines.spec import EngineSpec
from df_ray.evaluation.calibration_files import (
    check_calibration,
    extend_with_guardrail_fit,
    fit_and_save,
    resolve_calibration,
)
from df_ray.evaluation.context import (
    check_held_out,
    load_calibration_samples,
    load_samples,
    samples_fingerprint,
)
from df_ray.evaluation.driver import record_from_dict
from df_ray.evaluation.guardrail_calibration import fit_metrics as guardrail_fit_metrics
from df_ray.evaluation.guardrail_calibration import fit_params as guardrail_fit_params
from df_ray.evaluation.plan import RunPlan, resolve, samples_key
from df_ray.pipeline.error_text import first_line
from df_ray.pipeline.graph import MAX_BATCHES_IN_FLIGHT, stage_plan, stream_batches
from df_ray.pipeline.lifecycle import EngineLifecycle, shared_backbones
from df_ray.pipeline.outcome import failed_call_rate, judge
from df_ray.pipeline.pins import resolved_commits
from df_ray.pipeline.progress import GroupProgress
from df_ray.pipeline.results import RESULT_SCHEMA, ResultsFile
from df_ray.tasks.base import Sample

log = logging.getLogger(__name__)

__all__ = ["MAX_BATCHES_IN_FLIGHT", "RESULT_SCHEMA", "RayStartError", "RunResult", "Runner",
           "init_ray", "load_samples", "pipeline_groups", "preflight", "run_sweep", "samples_key",
           "shared_backbones", "stage_plan"]


@dataclass
class RunResult:
    config: RunConfig
    metrics: dict[str, float]
    samples_path: str
    run_id: str | None = None
    skipped: bool = False
    #: Why the configuration FAILED (too many failed calls, see `max_error_rate`), or None.
    failure: str | None = None
    #: The first distinct call errors of the configuration.
    errors: list[str] = field(default_factory=list)
    #: Workers (engine replicas, stage actors) that died while its pipeline ran.
    worker_deaths: list[str] = field(default_factory=list)
    #: Its first rows as written to ``samples_path`` (`ResultsFile.head`); None when skipped.
    head: Any = field(default=None, repr=False)


def _say(msg: str) -> None:
    print(f"[df-ray] {msg}", file=sys.stderr, flush=True)


#: What Ray says when its processes did not come up in time on a busy machine (the raylet's
#: registration within a fixed 30 s, the driver's first connection to the GCS).
_START_TIMEOUTS = ("timed out during startup", "Failed to connect to GCS")


class RayStartError(RuntimeError):
    """Ray could not be started or joined; ``str()`` is the one-line message."""


def _ray_init(ray, address: str | None, **kwargs: Any) -> None:
    """``ray.init``; its failure a `RayStartError` that says what was tried and what to do.
    A failed start is not retried in this process: what a failed ``ray.init`` leaves behind
    is Ray's, and a fresh process (the rerun the message asks for) starts clean."""
    try:
        ray.init(address=address, **kwargs)
    except Exception as e:
        with contextlib.suppress(Exception):
            ray.shutdown()  # the processes of the failed start
        if address != "local":
            raise RayStartError(f"could not join the Ray cluster at {address}: "
                                f"{first_line(e)}") from e
        if any(s in str(e) for s in _START_TIMEOUTS):
            raise RayStartError(
                f"could not start a local Ray: its processes did not come up within Ray's "
                f"fixed timeouts ({first_line(e)}); the machine is too busy: rerun when the "
                "load is lower, or start Ray yourself with `ray start --head` and pass its "
                "address in RAY_ADDRESS") from e
        raise RayStartError(f"could not start a local Ray: {first_line(e)}") from e


@contextlib.contextmanager
def _workers_path():
    """This process's ``sys.path`` as the PYTHONPATH of the local Ray it starts meanwhile
    (its processes inherit it: the workers import df_ray, the plugins and the scripts' own
    modules from where this process does), restored after.

    Inherited, not a job ``runtime_env``: the idle workers Ray starts ahead with its node
    then fit the job's actors, which take them instead of a new process each (a worker's
    start, importing Ray, is seconds of CPU); with a job runtime_env they stay idle beside
    the job's own workers."""
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before


def init_ray(address: str | None = None) -> None:
    """Join a cluster (``address`` or RAY_ADDRESS, as under ``ray job submit``) or start an
    embedded local Ray. Failing, a `RayStartError`."""
    import ray

    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS")
    # Arrow's bundled jemalloc (with its background thread) under the many threads of a stage
    # actor: glibc aborted a stage worker on a corrupted mutex
    # (tpp.c: __pthread_tpp_change_priority); df_ray changes no thread or process priority.
    # The system allocator has no such state; df_ray's tables are small.
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    if address:
        _ray_init(ray, address, log_to_driver=True)
    else:
        # Ray starts workers at nice 15: on a laptop or a shared node the engine actors then
        # lose the CPU to everything else (measured under load: embedded engine in its actor
        # 0.22x the same engine in the driver; 1.13x with niceness 0).
        os.environ.setdefault("RAY_worker_niceness", "0")
        # Logical CPUs: stage actors mostly wait on engines, so allow more than the cores.
        # address="local": always a new Ray of our own, never a cluster someone started on
        # this machine with `ray start` (which a bare ray.init() would join silently).
        with _workers_path():
            _ray_init(ray, "local", num_cpus=max(8, os.cpu_count() or 1),
                      include_dashboard=False, log_to_driver=True)
    from df_ray.pipeline import signals

    signals.rearm()  # ray.init set its own SIGTERM handler (sys.exit)
    from ray.data import DataContext

    ctx = DataContext.get_current()
    # One progress line per pipeline instead (df_ray.pipeline.progress); Ray Data would say
    # at warning level that its own bars are off.
    ctx.enable_progress_bars = False
    logging.getLogger("ray.data._internal.progress").setLevel(logging.ERROR)
    ctx.print_on_execution_start = False
    # A stage's exception as itself (Ray's task error carries it as its cause), not Ray
    # Data's UserCodeException "from" it: the chain does not survive the trip from the stage
    # actor, and an engine failure a stage raised (a token count's) must reach the run whole.
    if hasattr(ctx, "raise_original_map_exception"):
        ctx.raise_original_map_exception = True
    # Ray Data fails a dataset that moves no block for 30 minutes; a batch of real-model calls
    # on a busy CPU (or a long-context GPU sweep) legitimately takes longer than that. Every
    # engine call is bounded by its backbone's request_timeout_s (the engine cancels a late
    # request; a replica that answers nothing is restarted),
    # so the stage cannot stall silently: the engines' own deadlines police it instead.
    if hasattr(ctx, "execution_no_progress_timeout_s"):
        ctx.execution_no_progress_timeout_s = -1
    # Ray Data polls a map task's memory (its process's USS) from a thread of its own every
    # second for its stats: a thread started per stage call, and a poll per second per batch
    # in flight, for a figure df_ray never reads. None: no poll (DataContext's documented off).
    if hasattr(ctx, "memory_usage_poll_interval_s"):
        ctx.memory_usage_poll_interval_s = None


def calibration_metrics(calibration: Calibration | None) -> dict[str, float]:
    """What the configuration's calibration cost when it was fitted (its file records it):
    held-out samples, LLM calls and tokens in total and per held-out sample. Paid once per
    benchmark and agent set, whichever configurations then share the file."""
    if calibration is None:  # NaN: every configuration carries the same metric names
        return dict.fromkeys(("calibration_samples", "calibration_calls", "calibration_tokens",
                              "calibration_tokens_per_sample"), float("nan"))
    n = calibration.n_samples
    return {"calibration_samples": float(n),
            "calibration_calls": float(calibration.fit_calls),
            "calibration_tokens": float(calibration.fit_tokens),
            "calibration_tokens_per_sample": calibration.fit_tokens / n if n else 0.0}


#: A hash of exactly the samples a configuration ran (ids, questions, golds, in order): the
#: same fingerprint the calibration file records of its held-out samples.
dataset_fingerprint = samples_fingerprint


def provenance(cfg: RunConfig, samples: Sequence[Sample]) -> dict[str, str]:
    """What a configuration ran, for MLflow: each backbone's model and revision (``unpinned``:
    the hub's main at engine start), the data set's fingerprint, source and revision (as the
    task names them: ``Task.data_provenance``; GoA's file and pinned commit for MMLU-Pro and
    GPQA by default), and the prompts' version (the declared version and a hash of the first
    sample's prompts)."""
    from df_ray.methods.prompt_templates import PROMPT_VERSION
    from df_ray.tasks.base import problem_statement

    task = cfg.build_task()
    source, revision = task.data_provenance(cfg.source, cfg.data_revision)
    out = {"provenance.dataset_fingerprint": dataset_fingerprint(samples),
           "provenance.dataset_n": str(len(samples)),
           "provenance.dataset_source": source,
           "provenance.dataset_revision": revision,
           "provenance.prompt_version": PROMPT_VERSION}
    if samples:
        blob = task.agent_prompt(samples[0]) + "\x00" + problem_statement(task, samples[0])
        out["provenance.prompt_fingerprint"] = hashlib.sha256(blob.encode()).hexdigest()[:16]
        origin = samples[0].meta.get("prompt_origin") if isinstance(samples[0].meta, dict) \
            else None
        if origin:  # a benchmark's own prompt file (LegalBench's base_prompt.txt)
            out["provenance.prompt_origin"] = str(origin)
    for name, spec in sorted(cfg.backbones.items()):
        out[f"provenance.model.{name}"] = spec.model
        out[f"provenance.model_revision.{name}"] = spec.revision or "unpinned"
    out.update(resolved_commits(cfg, task))
    return out


def check_writable(directory: str, field: str) -> None:
    """Refuse, naming the field, a directory that cannot be created or written."""
    if "://" in directory:
        return  # remote filesystems are checked by their first write
    try:
        os.makedirs(directory, exist_ok=True)
        probe = os.path.join(directory, f".df_ray-write-probe-{os.getpid()}")
        with open(probe, "w") as f:
            f.write("ok")
        os.unlink(probe)
    except OSError as e:
        raise ConfigError(f"{field} {directory!r} is not writable ({e.strerror or e}); make "
                          f"it writable or set {field} to a folder you can write") from None


def check_outputs(configs: Sequence[RunConfig], sweep: str) -> None:
    """Refuse, before Ray starts, a configuration whose results cannot be written where they
    go: something that is not a folder in the way of its results folder, or a folder where
    its ``samples.parquet`` (or the checksum beside it) goes, found only after every call
    otherwise."""
    from pathlib import Path

    from df_ray.pipeline.results import results_path

    for cfg in configs:
        if "://" in cfg.results_dir:
            continue
        folder = results_path(cfg, sweep)
        here = Path(cfg.results_dir)
        for part in folder.relative_to(here).parts:
            here = here / part
            if here.exists() and not here.is_dir():
                raise ConfigError(f"{cfg.name}: {here} is in the way of the results folder "
                                  f"{folder} (it is a file); move it aside")
        for name in ("samples.parquet", "samples.parquet.sha256"):
            out = folder / name
            if out.exists() and not out.is_file():
                raise ConfigError(f"{cfg.name}: {out} is a folder, where the results file "
                                  "goes; move it aside")


def check_weights(configs: Sequence[RunConfig]) -> None:
    """Refuse, before any engine starts, backbones whose hub weights cannot load here (gated
    without HF_TOKEN, not cached while offline): every one at once, one line each."""
    from df_ray.engines.hub_models import weight_problems

    problems = weight_problems({n: s for c in configs for n, s in c.backbones.items()})
    if problems:
        raise ConfigError("\n".join(problems))


def preflight(configs: Sequence[RunConfig | RunPlan]) -> list[RunPlan]:
    """Everything that can fail without an engine fails here: data, calibration files,
    methods, engine arguments, the results and cache folders. ``configs``: resolved plans
    (``df_ray.evaluation.plan.resolve``), or validated configurations, planned here. Returns
    the plans with their samples (loaded once per samples key) and the calibration file
    found, which the runner and the stage take as they are."""
    plans = [c if isinstance(c, RunPlan) else RunPlan.of(c) for c in configs]
    configs = [p.cfg for p in plans]
    loaded: dict[tuple, list[Sample]] = {}
    check_engine_args_of(configs)
    check_weights(configs)
    for d in sorted({c.results_dir for c in configs}):
        check_writable(d, "results_dir")
    for d in sorted({c.cache_root for c in configs}):
        check_writable(d, "cache_root")
    held_out: dict[tuple, Any] = {}
    found: dict[int, Calibration | None] = {}

    def calibration_split(cfg: RunConfig):
        key = (*samples_key(cfg), cfg.calibration_source, cfg.calibration.limit)
        if key not in held_out:
            held_out[key] = load_calibration_samples(cfg)
        return held_out[key]

    for plan in plans:
        cfg = plan.cfg
        if plan.task.sandboxed:  # generated code runs only at its isolation level
            from df_ray.sandbox import plan as sandbox_plan

            refused = sandbox_plan(cfg.sandbox.isolation).error
            if refused:
                raise ConfigError(f"{cfg.name}: {refused}")
        key = samples_key(cfg)
        if key not in loaded:
            try:
                samples = load_samples(cfg)
            except FileNotFoundError as e:
                where = e.filename or str(e)
                raise ConfigError(f"{cfg.name}: the {cfg.benchmark} data {where!s} does not "
                                  "exist; fix source (or --source BENCHMARK=PATH) or fetch "
                                  "the data set") from None
            if not samples:
                raise ConfigError(f"{cfg.name}: the {cfg.benchmark} {cfg.split} split is empty")
            loaded[key] = samples
        found[id(cfg)] = check_calibration(cfg, calibration_split)
    # a file found here is the one the run uses (not looked for again); a fit due is done
    # when the configuration runs (an earlier configuration's fit may be the file it finds)
    return [dataclasses.replace(p, samples=loaded[p.key], calibration=found[id(p.cfg)])
            for p in plans]


class Runner:
    """Runs configurations over one pool of engines (started lazily, once)."""

    def __init__(self, backbones: dict, tracker=None,
                 progress: Callable[[str], None] = _say,
                 engines: Mapping[str, str] | None = None,
                 before_start: Callable[[Mapping[str, EngineSpec]], None] | None = None
                 ) -> None:
        self.backbones = backbones
        self.tracker = tracker
        self.say = progress
        # engines: the plans' engine-kind targets, which the replicas build from
        self.engines = EngineLifecycle(backbones, say=progress, engines=engines,
                                       before_start=before_start)
        self._capacities: dict[str, int] | None = None  # what the running engines hold
        self._roots: set[tuple[str, str | None]] = set()  # cache roots run, with their users
        # Workers that died before this runner started are not its to report.
        self._faults_seen: set = set()
        self._new_faults()

    @property
    def pool(self):
        return self.engines.pool

    def shutdown(self) -> None:
        """Stop the engines, then fold their journals of every cache root run into parts."""
        self.engines.shutdown()
        fold_journals(sorted(self._roots, key=str), self.say)
        self._roots.clear()

    # ------------------------------------------------------------------ calibration
    def calibration_for(self, plan: RunPlan) -> Calibration | None:
        """The plan's calibration (its method's capability); a missing one is fitted
        through the pipeline when calibration.auto_fit allows it."""
        return resolve_calibration(plan.cfg, lambda cfg: self.fit(plan))

    def with_calibration(self, plan: RunPlan) -> RunPlan:
        """The plan with its calibration: the file preflight loaded, else the one
        ``calibration_for`` finds or fits now (an earlier configuration's fit may be it)."""
        if plan.calibration is not None:
            return plan
        return plan.with_calibration(self.calibration_for(plan))

    def fit(self, plan: RunPlan) -> Calibration:
        """Fit the plan's calibration on its held-out split, through the pipeline (the
        plan as it is: its Method, Task and plugins), and freeze it."""
        cfg = plan.cfg
        held_out = load_calibration_samples(cfg)
        check_held_out(cfg, held_out)
        samples = held_out.samples

        def run_held_out(c: RunConfig, cal: Calibration, s: Sequence[Sample]):
            # the guardrail fit's coordinator pass is a configuration of its own
            held = plan if c is cfg else RunPlan.of(c)
            return self._stream([held.with_calibration(cal)], s)

        def held_out_records() -> list:
            return [record_from_dict(json.loads(row["record"]))
                    for row in self._stream([plan], samples, for_calibration=True)]

        extended = extend_with_guardrail_fit(cfg, held_out, run_held_out, held_out_records,
                                             self.say)
        if extended is not None:  # a frozen file's counts, with a guardrail fit added
            return extended
        self.say(f"no calibration file matches {cfg.benchmark} with agents {cfg.agent_ids()}: "
                 f"fitting one on {len(samples)} held-out samples ({held_out.origin})")
        records = []
        tokens = calls = 0
        for row in self._stream([plan], samples, for_calibration=True):
            if len(records) % max(1, len(samples) // 10) == 0:
                self.say(f"calibration: {len(records)}/{len(samples)} samples")
            records.append(record_from_dict(json.loads(row["record"])))
            tokens += int(row.get("tokens") or 0)
            calls += int(row.get("n_calls") or 0)
        return fit_and_save(cfg, records, say=self.say, held_out=held_out,
                            tokens=tokens, calls=calls, run_held_out=run_held_out)

    # ------------------------------------------------------------------ running
    def _stream(self, members: Sequence[RunPlan],
                samples: Sequence[Sample], for_calibration: bool = False):
        """Yield output rows (dicts) as they come out of the pipeline."""
        for batch in self._stream_batches(members, samples, for_calibration):
            yield from batch.to_pylist()

    def _stream_batches(self, members: Sequence[RunPlan],
                        samples: Sequence[Sample], for_calibration: bool = False):
        """Yield output batches (pyarrow tables): ``df_ray.pipeline.graph.stream_batches``
        over this runner's engines, stopped at once by an engine failure."""
        from df_ray.pipeline.engine_health import EngineFailure, until_failure

        pool = self.pool
        if self._capacities is None:
            self._capacities = pool.capacities()
        try:
            yield from until_failure(stream_batches(pool.handles, members, samples,
                                                    for_calibration, self._capacities),
                                     lambda: pool.failure)
        except Exception as e:
            # A stage's engine failure (e.g. a token count whose retries ran out) arrives
            # wrapped in Ray's task errors: the run stops with its one line.
            failure = pool.failure or EngineFailure.found_in(e)
            if failure is not None and failure is not e:
                raise failure from None
            raise

    def run(self, cfg: RunConfig, samples: Sequence[Sample] | None = None,
            sweep: str = "sweep") -> RunResult:
        samples = list(samples) if samples is not None else load_samples(cfg)
        return self.run_many([cfg], samples, sweep=sweep)[0]

    def run_many(self, cfgs: Sequence[RunConfig | RunPlan], samples: Sequence[Sample],
                 sweep: str = "sweep", metric_names: Sequence[str] = ()) -> list[RunResult]:
        """Run configurations that share their samples and cache root through one pipeline.

        Each configuration keeps its own results file and MLflow run, written once all its
        samples are graded; finished ones are skipped. With a tracker the configurations are
        claimed first (``Tracker.claim``): a concurrent run of the same sweep waits here, then
        skips what the other finished. ``metric_names`` (the metrics of the sweep's methods)
        are logged NaN by a configuration whose method has not got them. ``cfgs``: resolved
        plans (``preflight``), or configurations, planned here."""
        plans = [c if isinstance(c, RunPlan) else RunPlan.of(c, samples) for c in cfgs]
        cfgs = [p.cfg for p in plans]
        if len({c.cache_root for c in cfgs}) > 1:
            raise ValueError("run_many: the configurations must share one cache root")
        self._roots.update((c.cache_root, getattr(c, "cache_user", None)) for c in cfgs)
        claim = getattr(self.tracker, "claim", None)
        with (claim(cfgs, say=self.say) if claim is not None else _nullcontext()):
            return self._run_many(plans, samples, sweep, metric_names)

    def _run_many(self, plans: Sequence[RunPlan], samples: Sequence[Sample],
                  sweep: str, metric_names: Sequence[str] = ()) -> list[RunResult]:
        out: dict[int, RunResult] = {}
        todo: list[int] = []
        for i, plan in enumerate(plans):
            done = self.tracker.finished_run(plan.cfg) if self.tracker is not None else None
            if done is not None:
                self.say(f"{plan.name}: already finished (MLflow run {done.info.run_id}); "
                         "skipping")
                out[i] = RunResult(plan.cfg, dict(done.data.metrics), "", done.info.run_id,
                                   skipped=True)
            else:
                todo.append(i)
        if todo:
            samples = list(samples)
            members = [self.with_calibration(plans[i]) for i in todo]
            for p in members:
                self.say(f"{p.name}: {p.cfg.method} on {len(samples)} {p.cfg.benchmark} "
                         "samples")
            outs = [ResultsFile(p.cfg, sweep, provenance(p.cfg, samples)) for p in members]
            wall, busy, deaths = self._graded_into(members, samples, outs)
            walls = own_wall_times(wall, busy)
            for plan, f, i, own in zip(members, outs, todo, walls, strict=True):
                out[i] = self._finished(plan, f, samples, (own, wall), deaths, metric_names)
        return [out[i] for i in range(len(plans))]

    def _graded_into(self, members: Sequence[RunPlan], samples: Sequence[Sample],
                     outs: Sequence[ResultsFile]) -> tuple[float, list[float], list[str]]:
        """Stream the configurations' graded rows into their results files; the wall time,
        each configuration's stage time and the workers that died meanwhile."""
        from df_ray.pipeline import faults

        t0 = time.time()
        busy = [0.0] * len(outs)
        pool = self.pool
        deaths_before = len(pool.supervisor.deaths)
        restarts_before = faults.stage_restarts()
        label = outs[0].cfg.name if len(outs) == 1 else f"{len(outs)} configurations"
        progress = GroupProgress(
            label, len(samples) * len(outs), pool.stats, say=self.say,
            live=self.say is _say and sys.stderr.isatty(),
            log_metrics=getattr(self.tracker, "log_progress", None)).start()
        try:
            for table in self._stream_batches(members, samples):
                for k, rows in by_config(table):
                    outs[k].add(rows)
                    if "busy_s" in rows.column_names:
                        busy[k] += pc.sum(rows.column("busy_s")).as_py() or 0.0
                progress.graded(table.num_rows, pc.sum(table.column("n_errors")).as_py() or 0)
        finally:
            progress.close()
            for f in outs:
                f.close()
        wall = time.time() - t0
        failure = pool.supervisor.check()
        if failure is not None:  # e.g. a crash loop noticed as the last rows came out
            raise failure
        deaths = [d.describe() for d in pool.supervisor.deaths[deaths_before:]]
        stage_faults = [f for f in self._new_faults() if not f.label.startswith("engine-")]
        deaths += [f"{f.label} (pid {f.pid}) died: {f.describe()}" for f in stage_faults]
        # a SIGKILLed stage (the OOM killer) leaves no fault report: Ray's restarts count it
        deaths += faults.unreported_stage_deaths(faults.stage_restarts() - restarts_before,
                                                 len(stage_faults))
        for d in deaths:
            self.say(f"worker died during the run: {d}")
        return wall, busy, deaths

    def _finished(self, plan: RunPlan, f: ResultsFile, samples: Sequence[Sample],
                  walls: tuple[float, float], deaths: list[str],
                  metric_names: Sequence[str]) -> RunResult:
        """One configuration's results file committed, its metrics completed, judged and
        logged (``walls``: its own wall time and its group's)."""
        cfg, calibration = plan.cfg, plan.calibration
        own, wall = walls
        path = f.commit()
        metrics = f.acc.result()
        metrics["wall_time_s"] = own
        metrics["group_wall_time_s"] = wall
        metrics["samples_per_s"] = f.acc.n / own if own > 0 else 0.0
        if f.acc.n != len(samples):
            raise RuntimeError(f"{cfg.name}: {len(samples)} samples in, {f.acc.n} graded")
        metrics["failed_call_rate"] = failed_call_rate(metrics)
        metrics.update(calibration_metrics(calibration))
        metrics.update(guardrail_fit_metrics(cfg, calibration))
        for a in [*cfg.agent_ids(), *([cfg.coordinator.id] if cfg.coordinator else [])]:
            # every agent named, NaN for one the method never called: the configurations
            # of a sweep carry the same metric names
            metrics.setdefault(f"truncation_rate.{a}", float("nan"))
        for k in metric_names:  # another method's metric, NaN here (same names)
            metrics.setdefault(k, float("nan"))
        metrics["worker_deaths"] = float(len(deaths))
        errors = list(f.acc.first_errors)
        failure = judge(cfg, metrics, errors)
        run_id = None
        if self.tracker is not None:
            run_id = self.tracker.log_run(cfg, metrics, path, calibration,
                                          params={**provenance(cfg, samples),
                                                  **guardrail_fit_params(cfg, calibration)},
                                          failure=failure,
                                          samples_sha256=getattr(f, "sha256", None))
        if failure:
            self.say(f"{cfg.name}: FAILED: {failure}")
        return RunResult(cfg, metrics, str(path), run_id, failure=failure, errors=errors,
                         worker_deaths=deaths, head=f.head)

    def _new_faults(self):
        """Fatal signals of this job's workers not reported yet (this node's fault logs)."""
        from df_ray.pipeline import faults

        new = [f for f in faults.read_faults() if (f.label, f.pid) not in self._faults_seen]
        self._faults_seen.update((f.label, f.pid) for f in new)
        return new


def own_wall_times(wall: float, busy: Sequence[float]) -> list[float]:
    """Each configuration's own wall time in a fused pipeline: the group's wall time split in
    proportion to the stage time spent on each configuration (planning and parsing its
    rounds, the engine time of the calls it paid for, grading its answers). A configuration
    whose every call was paid by another (all cached) costs only its CPU work; one alone in
    its pipeline gets the whole wall time."""
    total = math.fsum(busy)
    if len(busy) == 1:
        return [wall]
    if total <= 0:
        return [wall / len(busy)] * len(busy)
    return [wall * b / total for b in busy]


def run_sweep(sweep: SweepConfig, *, address: str | None = None, tracker: Any = "default",
              progress: Callable[[str], None] = _say,
              plugins: Sequence[str] = (), where: str | None = None) -> list[RunResult]:
    """Resolve (plugins imported, storage resolved, each configuration validated once),
    preflight, start engines once, run every configuration, log each to MLflow. ``plugins``:
    modules to import besides those the sweep names (``--plugin``); ``where``: the sweep's
    file, named in its errors."""
    # Under `ray job submit`, relative paths resolve against DF_RAY_HOME (or the job is refused
    # here, before anything starts); the experiment gets the user's namespace on shared stores.
    plans = resolve(sweep, plugins=plugins, where=where)
    configs = [p.cfg for p in plans]
    sweep = sweep.with_configs(configs)  # the tracker reads them: not validated again
    plans = preflight(plans)
    check_outputs(configs, sweep.name)
    if tracker == "default":
        from df_ray.tracking import Tracker

        first = configs[0].tracking
        tracker = Tracker(first.uri, first.experiment, results_dir=configs[0].results_dir)
    init_ray(address)
    runner = Runner(shared_backbones(configs), tracker=tracker, progress=progress,
                    engines={k: t for p in plans for k, t in p.engines.items()},
                    before_start=resource_check(configs))
    metric_names = method_metric_names(configs)
    results = []
    try:
        ctx = tracker.sweep(sweep, head=ray_head()) if tracker is not None else _nullcontext()
        with ctx:
            if getattr(tracker, "lost_head", None):
                progress(lost_head_line(tracker.lost_head, configs))
            for group in pipeline_groups(plans, fuse=sweep.fuse):
                results += runner.run_many(group, group[0].samples,
                                           sweep=sweep.name, metric_names=metric_names)
            failed = [r.config.name for r in results if r.failure]
            if failed and tracker is not None:
                tracker.mark_sweep_failed(f"{len(failed)} configuration(s) FAILED: "
                                          + ", ".join(failed))
    finally:
        runner.shutdown()
    compact_caches(configs, progress)
    return results


def ray_head() -> dict[str, str]:
    """The Ray cluster this job runs on, as the sweep's run records it (its head's GCS
    address and the cluster's session); empty when Ray does not say."""
    import ray

    from df_ray.tracking import HEAD_TAG, SESSION_TAG

    try:
        ctx = ray.get_runtime_context()
        return {HEAD_TAG: str(ctx.gcs_address), SESSION_TAG: ctx.get_session_name()}
    except Exception:
        return {}


def lost_head_line(lost: Mapping[str, str], configs: Sequence[RunConfig]) -> str:
    """What a job says when its sweep's last run never ended on another Ray cluster (a head
    lost with the job's driver): where it ran and what this run resumes from."""
    from df_ray.tracking import HEAD_TAG, SESSION_TAG

    roots = ", ".join(sorted({c.cache_root for c in configs}))
    return (f"the sweep's previous run never ended: it ran on the Ray head at "
            f"{lost.get(HEAD_TAG, '?')} (session {lost.get(SESSION_TAG, '?')}), lost with its "
            f"head or killed; resuming: finished configurations are skipped and every call in "
            f"the cache at {roots} is replayed, not made again")


def resource_check(configs: Sequence[RunConfig]
                   ) -> Callable[[Mapping[str, EngineSpec]], None] | None:
    """What runs before the sweep's engines start (if they start: a sweep whose every
    configuration is finished replays without them, on any machine): the live cluster's
    check that it can hold every replica, which names each configuration's own needs; None
    when a configuration lets the cluster add nodes on demand (``autoscaling``)."""
    if any(c.autoscaling for c in configs):
        return None
    from df_ray.pipeline.engine_pool import check_resources

    per_config = {c.name: c.backbones for c in configs}
    return lambda specs: check_resources(specs, per_config)


def method_metric_names(configs: Sequence[RunConfig]) -> list[str]:
    """The metrics the methods of ``configs`` declare (``Method.metrics``): every
    configuration of a sweep logs them all, NaN those of another method."""
    from df_ray.methods import method_class

    names: dict[str, None] = {}
    for cfg in configs:
        names.update(dict.fromkeys(method_class(cfg.method).metrics))
    return list(names)


def by_config(table: pa.Table) -> Iterator[tuple[int, pa.Table]]:
    """A graded table's rows split by their configuration (``config``), in the order of
    the table within each, each column in one chunk (Ray Data's batches chain its blocks:
    every later step would pay per chunk)."""
    table = table.combine_chunks()
    col = table.column("config")
    bounds = pc.min_max(col)
    if bounds["min"] == bounds["max"]:
        yield bounds["min"].as_py(), table
        return
    for k in pc.unique(col).to_pylist():
        yield k, table.filter(pc.equal(col, k))


def fold_journals(roots: Sequence[tuple[str, str | None]], say: Callable[[str], None]) -> None:
    """Fold the engines' finished journals of cache roots (with the user each is written
    as) into their parts (`df_ray.pipeline.cache.journal`): after a clean end they hold only
    answers the stages wrote too. A fold that fails loses nothing: the journals stay, and are
    read."""
    from df_ray.pipeline.cache import fold_root

    for root, user in roots:
        try:
            fold_root(root, user)
        except (OSError, pa.ArrowException) as e:
            say(f"cache {root}: engine journals not folded ({type(e).__name__}: {e}); they "
                "are read as they are, and the next run or `df-ray cache compact` folds them")


def compact_caches(configs: Sequence[RunConfig], say: Callable[[str], None]) -> None:
    """Compact every cache root of the run that holds more than ``cache_compact_parts`` parts
    (the smallest non-zero limit of the configurations that share it). A compaction that
    fails loses nothing and stops nothing: the parts stay as they were."""
    from df_ray.pipeline.cache import compact_above

    limits: dict[str, int] = {}
    for c in configs:
        if c.cache_compact_parts:
            limits[c.cache_root] = min(limits.get(c.cache_root, c.cache_compact_parts),
                                       c.cache_compact_parts)
    for root, limit in sorted(limits.items()):
        try:
            f = compact_above(root, limit)
        except (OSError, pa.ArrowException) as e:
            say(f"cache {root}: not compacted ({type(e).__name__}: {e}); its parts are kept, "
                "`df-ray cache compact` merges them later")
            continue
        if f is not None:
            say(f"cache {root}: compacted, {f['parts']} parts (more than {limit}) merged into "
                f"one holding {f['entries']} calls")


def pipeline_groups(configs: Sequence[Any], fuse: bool = True) -> list[list[Any]]:
    """Consecutive configurations (or their plans) over the same samples and cache root share
    one pipeline (``fuse``); otherwise each runs alone. Order is kept: results come back in
    sweep order."""
    groups: list[list[Any]] = []
    for cfg in configs:
        if fuse and groups and _group_key(groups[-1][0]) == _group_key(cfg):
            groups[-1].append(cfg)
        else:
            groups.append([cfg])
    return groups


def _group_key(cfg: Any) -> tuple:
    cfg = cfg.cfg if isinstance(cfg, RunPlan) else cfg
    return (*samples_key(cfg), cfg.cache_root)


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *a):
        return False
