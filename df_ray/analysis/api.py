"""``df_ray.analysis.analyze``: every question a finished sweep's generation cache can answer,
with no new LLM call.

Per benchmark of the sweep (one run seed: the smallest unless ``seed`` is given), the
*pool* is its DarkForest configuration with the most agents (the paper's defaults
preferred: full belief, guardrail on, a coordinator). Over the pool's cached answers on the
test split and on the calibration split, and the configurations' ``samples.parquet``:

1. the compute-matched frontier (``frontier``),
2. every agent subset with its calibration refitted, leave-one-out, Shapley values
   (``subsets``),
3. the guardrail's threshold grid on the test and held-out splits, and the setting
   Learn-then-Test chooses on held-out data (``thresholds``),
4. generation that stops as soon as the guardrail trusts z* (``early_stop``).

A section that needs calls the cache lacks is left out with one line naming them; the
others are computed. Nothing here calls an engine, except with ``fresh``: then the
subsets' missing coordinator calls are made, once, through the generation cache
(``df_ray.analysis.fresh``), and the sections are computed over them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from df_ray.analysis.cached import CachedPool, load_pool
from df_ray.analysis.frontier import (
    FrontierSection,
    frontier_plot,
    frontier_section,
    read_point,
    self_consistency_configs,
    self_consistency_curve,
)
from df_ray.analysis.subsets import SubsetEvaluator, SubsetSection, SubsetSettings, subset_section

#: Every subset up to 10 agents, a seeded sample beyond (``SubsetSettings``).
DEFAULT_SUBSETS = SubsetSettings()


class AnalysisError(ValueError):
    """The sweep cannot be analysed at all (no configuration, no cache); one line says why."""


@dataclass
class BenchmarkAnalysis:
    benchmark: str
    seed: int
    pool: str
    agents: list[str]
    n_test: int
    n_held_out: int
    frontier: FrontierSection | None = None
    subsets: SubsetSection | None = None
    thresholds: Any = None
    early_stop: Any = None
    lines: list[str] = field(default_factory=list)
    calls_used: dict[str, int] = field(default_factory=dict)
    fresh_calls: int = 0  # LLM calls made (--fresh), cached
    fresh_failed: int = 0  # ... answered with an error, not cached
    seconds: float = 0.0


@dataclass
class Analysis:
    sweep: str
    benchmarks: list[BenchmarkAnalysis]
    #: The sweep's configurations as resolved for the analysis (storage as the run's).
    configs: list[Any] = field(default_factory=list, repr=False)

    def to_markdown(self) -> str:
        from df_ray.analysis.output import to_markdown

        return to_markdown(self)

    def write(self, out_dir: str | Path) -> list[Path]:
        from df_ray.analysis.output import write

        return write(self, Path(out_dir))


def _is_reference(cfg: Any) -> tuple:
    args = cfg.build_method().args
    g = getattr(args, "guardrail", None)
    return (cfg.method == "darkforest", not getattr(args, "belief_only", False),
            getattr(args, "ablation", "full") == "full",
            bool(g is None or g.enabled), getattr(args, "disclosure", "strict") == "strict",
            cfg.coordinator is not None, len(cfg.agents))


def choose_pool(configs: Sequence[Any]) -> Any:
    """The configuration whose agents are analysed: DarkForest at the paper's defaults with
    the most agents (the first of the sweep among equals)."""
    best = max(range(len(configs)), key=lambda i: (_is_reference(configs[i]), -i))
    return configs[best]


def _as_darkforest(cfg: Any) -> Any:
    if cfg.method == "darkforest":
        return cfg
    from df_ray.config import RunConfig

    d = cfg.model_dump(mode="json")
    d.update(method="darkforest", method_args={})
    return RunConfig.model_validate(d)


def _frozen_calibration(cfg: Any) -> tuple[Any, str | None]:
    from df_ray.evaluation.calibration_files import find_calibration, needs_calibration

    if not needs_calibration(cfg):
        return None, None
    from df_ray.core import load_calibration

    path = cfg.calibration.path or find_calibration(cfg.calibration.dir, cfg.benchmark,
                                                   cfg.agent_ids(), cfg.agent_identities())
    if path is None:
        return None, None
    try:
        return load_calibration(path, agents=cfg.agent_ids(), benchmark=cfg.benchmark), str(path)
    except (OSError, ValueError):
        return None, None


def open_cache(root: str) -> Any:
    import os

    from df_ray.pipeline.cache import GenerationCache

    if "://" not in root and not os.path.isdir(os.path.expanduser(root)):
        raise AnalysisError(f"no generation cache at {root}: the sweep's cache_root (set "
                            "DF_RAY_HOME as the sweep ran, or --set cache_root=...)")
    return GenerationCache(root)


def analyze(config: Any, *, seed: int | None = None, benchmarks: Sequence[str] | None = None,
            subsets: SubsetSettings = DEFAULT_SUBSETS, grid: Any = None,
            max_wrong_override: float = 0.05, delta: float = 0.1,
            say: Callable[[str], None] = lambda m: None, fresh: bool = False,
            engines: dict[str, Any] | None = None) -> Analysis:
    """Analyse a finished sweep (a SweepConfig, RunConfig or sweep file) from its cache and
    results files; see the module docstring. ``fresh``: make the missing coordinator calls
    of the subsets (on ``engines``, live engines by backbone name, when given; else the
    coordinator's backbone is started in this process)."""
    from df_ray.config import RunConfig, SweepConfig, load_config
    from df_ray.evaluation.plan import resolve

    if isinstance(config, str | Path):
        config = load_config(config, expand=False)
    if isinstance(config, RunConfig):  # its storage resolved as the run resolved it
        config = SweepConfig.model_validate({"name": config.name,
                                             "base": config.model_dump(mode="json")})
    configs = [p.cfg for p in resolve(config)]
    out = []
    names = benchmarks or list(dict.fromkeys(c.benchmark for c in configs))
    for bench in names:
        of = [c for c in configs if c.benchmark == bench]
        if not of:
            raise AnalysisError(f"the sweep {config.name!r} has no configuration of "
                                f"benchmark {bench!r}")
        s = min(c.seed for c in of) if seed is None else seed
        same_seed = [c for c in of if c.seed == s]
        if not same_seed:
            raise AnalysisError(f"{bench}: no configuration of run seed {s} (seeds: "
                                f"{sorted({c.seed for c in of})})")
        out.append(analyze_benchmark(config.name, same_seed, subsets=subsets, grid=grid,
                                     max_wrong_override=max_wrong_override, delta=delta,
                                     say=say, fresh=fresh, engines=engines))
    return Analysis(config.name, out, configs)


def analyze_benchmark(sweep_name: str, configs: Sequence[Any], *,
                      subsets: SubsetSettings = DEFAULT_SUBSETS, grid: Any = None,
                      max_wrong_override: float = 0.05, delta: float = 0.1,
                      say: Callable[[str], None] = lambda m: None,
                      pool: CachedPool | None = None, cache: Any = None, fresh: bool = False,
                      engines: dict[str, Any] | None = None) -> BenchmarkAnalysis:
    """One benchmark's sections, over configurations of one run seed."""
    t0 = time.perf_counter()
    pool_cfg = _as_darkforest(choose_pool(list(configs)))
    cache = cache if cache is not None else open_cache(pool_cfg.cache_root)
    say(f"{pool_cfg.benchmark}: pool {pool_cfg.name} ({', '.join(pool_cfg.agent_ids())}), "
        f"run seed {pool_cfg.seed}; reading {len(cache)} cached calls")
    pool = pool or load_pool(pool_cfg, cache)
    res = BenchmarkAnalysis(pool_cfg.benchmark, pool_cfg.seed, pool_cfg.name, pool.agents,
                            len(pool.test.samples), len(pool.held_out.samples))
    frozen, frozen_path = _frozen_calibration(pool_cfg)
    maker = None
    if fresh and pool_cfg.coordinator is not None:
        from df_ray.analysis.fresh import FreshCalls

        maker = FreshCalls(pool_cfg, cache, say, engines)
    ev = SubsetEvaluator(pool, frozen, subsets, fresh=maker)
    try:
        _sections(res, ev, pool, pool_cfg, frozen, frozen_path, configs, sweep_name, cache,
                  grid, max_wrong_override, delta, say)
    finally:
        if maker is not None:
            maker.close()
            res.fresh_calls, res.fresh_failed = maker.made, maker.failed
    res.seconds = time.perf_counter() - t0
    return res


def _sections(res: BenchmarkAnalysis, ev: SubsetEvaluator, pool: CachedPool, pool_cfg: Any,
              frozen: Any, frozen_path: str | None, configs: Sequence[Any], sweep_name: str,
              cache: Any, grid: Any, max_wrong_override: float, delta: float,
              say: Callable[[str], None]) -> None:
    if frozen is not None and pool.records and not pool.missing.count("calibration"):
        from df_ray.core import fit_calibration

        mine = fit_calibration(pool.records, agents=pool.agents, benchmark=pool_cfg.benchmark)
        if (dict(mine.agent_stats) != dict(frozen.agent_stats)
                or dict(mine.pattern_stats) != dict(frozen.pattern_stats)):
            res.lines.append(f"the calibration refitted on the cached calibration calls "
                             f"differs from the frozen file {frozen_path}: the full pool uses "
                             "the file (as its run did), subsets their refits")
    res.calls_used = {"agent (test)": sum(len(st.calls) for st in pool.test.states),
                      "agent (calibration split)": sum(len(r.observations)
                                                       for r in pool.records)}
    # 2. subsets (first: the frontier draws the pool-size curves from it)
    if pool.missing.count("agent") or pool.missing.count("calibration"):
        for what in ("agent", "calibration"):
            if pool.missing.count(what):
                res.lines.append(f"subsets, thresholds, early stop: not computed: "
                                 f"{pool.missing.line(what)}")
    else:
        say(f"{pool_cfg.benchmark}: subsets")
        res.subsets = subset_section(ev)
        res.lines += res.subsets.lines
    # 1. frontier
    say(f"{pool_cfg.benchmark}: frontier")
    points, lines = [], []
    for c in configs:
        p = read_point(c, sweep_name)
        if p is None:
            lines.append(f"{c.name}: no samples.parquet (not run, or not finished): not on "
                         "the frontier")
        else:
            points.append(p)
    identities = pool_cfg.agent_identities()
    sc_cfgs, sc_lines = self_consistency_configs(configs, identities)
    lines += sc_lines
    curves = []
    for c in sc_cfgs:
        curve = self_consistency_curve(c, cache, pool.test.samples, pool.grader, pool.missing)
        what = f"Self-Consistency sample ({c.name})"
        if curve is None:
            lines.append(f"{c.name}: no k-curve: {pool.missing.line(what)}")
        else:
            curves.append(curve)
            res.calls_used[f"Self-Consistency samples ({c.name})"] = \
                len(curve.per_sample[1]) * curve.samples
    by_size = res.subsets.by_size if res.subsets is not None else pd.DataFrame()
    ref = pool_cfg.name if any(p.name == pool_cfg.name for p in points) else next(
        (p.name for p in points if p.method == "darkforest"), None)
    res.frontier = frontier_section(points, curves, by_size, ref)
    res.frontier.lines = lines + res.frontier.lines
    # 3, 4: thresholds and early stop
    if res.subsets is not None:
        from df_ray.analysis.early_stop import early_stop_section
        from df_ray.analysis.thresholds import threshold_section

        say(f"{pool_cfg.benchmark}: thresholds")
        res.thresholds = threshold_section(ev, grid=grid, max_wrong_override=max_wrong_override,
                                           delta=delta)
        res.lines += res.thresholds.lines
        say(f"{pool_cfg.benchmark}: early stop")
        res.early_stop = early_stop_section(ev)
        res.lines += res.early_stop.lines
    res.calls_used["coordinator"] = sum(1 for (s, _), v in ev._coord_obs.items()
                                        if v is not None and s == tuple(pool.agents))


def plot_frontier(res: BenchmarkAnalysis, path: Path) -> Path | None:
    if res.frontier is None:
        return None
    return frontier_plot(res.frontier, path, f"{res.benchmark}: accuracy against tokens "
                                             f"(run seed {res.seed})")
