"""The sweep driver's CPU per result row and per engine request, by thread, in steady state.

    PYTHONPATH=$PWD .venv/bin/python jobs/perf/driver_cpu.py --samples 2000
    PYTHONPATH=$PWD .venv/bin/python jobs/perf/driver_cpu.py --baseline <other checkout> \
        --repeat 3                  # A/B: the two checkouts alternately, a process per run
    ... --engine simulated --batch-size 16      # cluster_scale.py's engines and batches

What runs: the sweep of ``load_10k.py`` (MMLU-Pro-shaped questions, DarkForest with 3 agents
and a coordinator; 4 engine requests and one result row per sample), on scripted engines that
answer at once (batch_size 64, concurrency 4) or ``--engine simulated`` (H100-like timing,
one replica per backbone, one stage actor), through ``run_sweep`` as ``df-ray run`` runs it,
in a fresh process per run, which is therefore the driver.

Measured: the driver's CPU from the first graded table it receives to the last (steady
state: Ray's start, the engines' and the stage's start, the metrics, MLflow and the cache's
fold at the end left out), over the rows in between; by thread (``/proc/self/task``, named by
their Python threads: the main thread, which splits each graded table by configuration and
writes it; the pump that drains Ray Data's iterator (``results pump``); Ray Data's streaming
executor and its ``iter_threaded`` prefetcher; ``other``: Ray's own C++ threads and threads
that ended), less this script's own sampler and marks. The whole run's CPU beside it.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[2]
#: The checkout a run imports df_ray from (``--baseline`` runs set it), else this one.
TREE = Path(os.environ.get("DF_RAY_PERF_TREE", HERE))
sys.path.insert(0, str(TREE))
sys.path.insert(1, str(HERE))

REQUESTS_PER_ROW = 4
TICK_S = 0.2


def _ticks(tid: int) -> int:
    try:
        fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return -1
    return int(fields[11]) + int(fields[12])  # utime + stime (fields 14 and 15)


def _role(name: str) -> str:
    if name == "MainThread":
        return "main"
    for prefix, role in (("StreamingExecutor", "ray-data executor"),
                         ("df-ray-progress", "progress"), ("df-ray-results", "results pump"),
                         ("DriverCpuSampler", "sampler")):
        if name.startswith(prefix):
            return role
    return "python:" + name.split("-")[0].split(" ")[0]


class ThreadCpu(threading.Thread):
    """Each Python thread's CPU seconds, the last value read while it lived."""

    def __init__(self) -> None:
        super().__init__(daemon=True, name="DriverCpuSampler")
        self.hz = os.sysconf("SC_CLK_TCK")
        self.seen: dict[int, tuple[str, int]] = {}
        self.start_ticks: dict[int, int] = {}
        self._halt = threading.Event()
        self._read()
        self.start_ticks = {tid: t for tid, (_, t) in self.seen.items()}
        self.cpu0 = _cpu_s()

    def _read(self) -> None:
        for t in threading.enumerate():
            if t.native_id is None:
                continue
            ticks = _ticks(t.native_id)
            if ticks >= 0:
                self.seen[t.native_id] = (t.name, ticks)

    def run(self) -> None:
        while not self._halt.wait(TICK_S):
            self._read()

    def by_role(self) -> dict[str, float]:
        """CPU seconds by role since the sampler started, ``other`` included."""
        self._read()
        out: dict[str, float] = {}
        for tid, (name, ticks) in self.seen.items():
            role = _role(name)
            out[role] = out.get(role, 0.0) + (ticks - self.start_ticks.get(tid, 0)) / self.hz
        out["other"] = _cpu_s() - self.cpu0 - sum(out.values())
        return out

    def stop(self) -> dict[str, float]:
        self._halt.set()
        self.join()
        return self.by_role()


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _backbone(name: str, engine: str) -> dict:
    if engine == "simulated":  # cluster_scale.py's H100-like timing, one replica each
        return {"kind": "simulated", "model": f"sim-{name}", "engine_args": {
            "capacity": 256, "step_s": 0.02, "mean_tokens": 70.0, "sigma": 1.0}}
    return {"kind": "scripted", "model": f"m{name}", "script": "majority", "max_batch_size": 64}


def run_one(n: int, out: Path, engine: str, batch_size: int) -> dict:
    from df_ray.config import SweepConfig
    from df_ray.pipeline.runner import Runner, init_ray, run_sweep
    from jobs.perf.load_10k import darkforest_base

    base = darkforest_base("driver", n, out, lambda m: _backbone(m, engine), batch_size,
                           4 if engine == "scripted" else 1)
    sweep = SweepConfig.model_validate({"name": "driver", "base": base})
    init_ray()
    sampler = ThreadCpu()
    marks: list[tuple[float, int, dict[str, float]]] = []  # (time, rows before, CPU by role)
    own = {"s": 0.0, "rows": 0}  # the marks' own CPU (main thread), taken out of its figure
    stream = Runner._stream_batches
    tables: list = []  # the graded tables, for --replay

    def marked(self, *args):  # a mark as each graded table arrives
        for table in stream(self, *args):
            c = time.thread_time()
            marks.append((time.time(), own["rows"], {**sampler.by_role(), "gc": gc_s["s"]}))
            own["s"] += time.thread_time() - c
            marks[-1][2]["main"] -= own["s"]
            tables.append(table)
            yield table
            own["rows"] += table.num_rows

    Runner._stream_batches = marked
    gc_s = {"s": 0.0, "t": 0.0, "n": 0}

    def gc_clock(phase: str, info: dict) -> None:  # the cyclic GC's CPU, every thread
        if phase == "start":
            gc_s["t"] = time.thread_time()
        else:
            gc_s["s"] += time.thread_time() - gc_s["t"]
            gc_s["n"] += info.get("generation") == 2

    gc.callbacks.append(gc_clock)
    sampler.start()
    t0 = time.time()
    (res,) = run_sweep(sweep, progress=lambda m: None)
    wall = time.time() - t0
    whole = sampler.stop()
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.concat_tables(tables), out / "graded.parquet")
    (t1, r1, first), (t2, r2, last) = marks[0], marks[-1]
    steady = {k: v - first.get(k, 0.0) for k, v in last.items()}
    return {"samples": n, "graded": int(res.metrics["n_samples"]),
            "fresh_calls": int(res.metrics["fresh_calls"]), "wall_s": wall,
            "whole": whole, "steady": steady, "steady_rows": r2 - r1, "steady_s": t2 - t1,
            "tables": len(marks), "results": str(res.samples_path)}


def _spawn(tree: Path, n: int, out: Path, a: argparse.Namespace) -> dict:
    f = out / f"n{n}.json"
    env = {**os.environ, "DF_RAY_PERF_TREE": str(tree), "PYTHONPATH": str(tree)}
    subprocess.run([sys.executable, __file__, "--one", str(n), "--out", str(out),
                    "--engine", a.engine, "--batch-size", str(a.batch_size)],
                   check=True, env=env, cwd=tree)
    return json.loads(f.read_text())


def _cpu(roles: dict[str, float]) -> float:
    """The driver's CPU seconds, less this script's sampler thread (``gc``: the cyclic
    garbage collector's share of the threads', already counted in them)."""
    return sum(v for k, v in roles.items() if k not in ("sampler", "gc"))


def _report(label: str, r: dict) -> float:
    rows, secs, st = r["steady_rows"], r["steady_s"], r["steady"]
    ms = 1e3 * _cpu(st) / rows
    print(f"{label}: {ms:.3f} CPU-ms per row, {ms / REQUESTS_PER_ROW:.3f} per engine request "
          f"in steady state ({rows} rows from the first graded table to the last, "
          f"{secs:.1f} s, {1e3 * _cpu(st) / secs:.0f} CPU-ms per second); whole run "
          f"{_cpu(r['whole']):.1f} CPU-s over {r['wall_s']:.1f} s, {r['tables']} tables")
    print("   steady state, CPU-ms per row by thread: " + ", ".join(
        f"{k} {1e3 * v / rows:.3f}" for k, v in sorted(st.items())
        if k != "sampler" and abs(v) >= 5e-4 * rows / 1e3))
    return ms


def replay(graded: Path, rows_per_table: int, configs: int, repeat: int = 5) -> float:
    """The main thread's CPU-ms per row in ``Runner._graded_into`` (this tree's), over the
    recorded graded rows cut into tables of ``rows_per_table`` rows per configuration, each
    row once per configuration (a fused group's tables), no Ray: the best of ``repeat``."""
    from types import SimpleNamespace

    import pyarrow as pa
    import pyarrow.parquet as pq

    from df_ray.config import SweepConfig
    from df_ray.pipeline.results import ResultsFile
    from df_ray.pipeline.runner import Runner

    rows = pq.read_table(graded)
    n, col = rows.num_rows, rows.schema.get_field_index("config")
    per = pa.concat_tables([rows.set_column(col, "config", pa.array([k] * n, pa.int64()))
                            for k in range(configs)])
    tables = []
    for i in range(0, n, rows_per_table):  # each table: its rows, once per configuration
        j = min(n, i + rows_per_table)
        tables.append(per.take([k * n + r for r in range(i, j) for k in range(configs)]))
    sweep = SweepConfig.model_validate({"name": "replay", "base": {
        "name": "r", "benchmark": "mmlu_pro", "source": str(graded),
        "backbones": {"b": {"kind": "scripted", "model": "m"}},
        "agents": [{"id": f"a{i}", "backbone": "b"} for i in (1, 2, 3)],
        "coordinator": {"id": "coord", "backbone": "b"},
        "method_args": {"ablation": "no_calibration"}, "calibration": {"auto_fit": False},
        "cache_root": str(graded.parent / "replay-cache"),
        "results_dir": str(graded.parent / "replay-results")},
        "runs": [{"name": f"c{k}"} for k in range(configs)]})
    runner = Runner.__new__(Runner)  # the driver's loop alone: no engines, no Ray
    runner.engines = SimpleNamespace(pool=SimpleNamespace(
        supervisor=SimpleNamespace(deaths=[], check=lambda: None), stats=lambda: []))
    runner.say, runner.tracker, runner._faults_seen = (lambda m: None), None, set()
    runner._stream_batches = lambda members, samples: iter(tables)
    best = float("inf")
    for _ in range(repeat):
        outs = [ResultsFile(c, "replay") for c in sweep.expand()]
        c = time.thread_time()
        runner._graded_into([None] * configs, [None] * n, outs)
        best = min(best, time.thread_time() - c)
    return 1e3 * best / (n * configs)


def _spawn_replay(tree: Path, graded: Path, rows: int, configs: int) -> float:
    env = {**os.environ, "DF_RAY_PERF_TREE": str(tree), "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, __file__, "--replay", str(graded), "--rows",
                          str(rows), "--configs", str(configs)], check=True, env=env,
                         cwd=tree, capture_output=True, text=True).stdout
    return float(out.split()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=2000)
    p.add_argument("--baseline", type=Path, help="another checkout, run alternately")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--out", type=Path, help="work folder (default: a fresh temporary one)")
    p.add_argument("--engine", choices=("scripted", "simulated"), default="scripted",
                   help="scripted: answers at once; simulated: cluster_scale.py's engines")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--one", type=int, help=argparse.SUPPRESS)
    p.add_argument("--replay", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--rows", type=int, help=argparse.SUPPRESS)
    p.add_argument("--configs", type=int, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.replay:
        print(f"{replay(a.replay, a.rows, a.configs):.4f}")
        return 0
    if a.one:
        fig = run_one(a.one, a.out / f"w{a.one}", a.engine, a.batch_size)
        (a.out / f"n{a.one}.json").write_text(json.dumps(fig))
        return 0
    from jobs.perf.common import header

    header("the sweep driver's CPU per result row and per engine request")
    out = a.out or Path(tempfile.mkdtemp(prefix="df_ray_driver_cpu_"))
    trees = [("baseline", a.baseline.resolve()), ("this", HERE)] if a.baseline \
        else [("this", HERE)]
    ok, figures = True, {label: [] for label, _ in trees}
    for rep in range(a.repeat):
        for label, tree in trees:
            r = _spawn(tree, a.samples, out / f"{label}{rep}", a)
            ok &= r["graded"] == r["samples"]
            figures[label].append(_report(f"{label} (run {rep + 1})", r))
            sys.stdout.flush()
    for label, ms in figures.items():
        print(f"{label}: CPU-ms per row {', '.join(f'{m:.3f}' for m in ms)} "
              f"(median {sorted(ms)[len(ms) // 2]:.3f})")
    graded = out / f"{trees[-1][0]}0" / f"w{a.samples}" / "graded.parquet"
    print("the main thread's loop alone (Runner._graded_into on the recorded rows, no Ray, "
          "best of 5), CPU-ms per row:")
    for rows, configs in ((256, 1), (64, 1), (16, 1), (16, 8)):
        print(f"   {rows} rows per configuration per table, {configs} configuration(s): " + ", ".join(
            f"{label} {_spawn_replay(tree, graded, rows, configs):.4f}" for label, tree in trees))
    print("every sample graded once" if ok else "SAMPLES MISSING")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
