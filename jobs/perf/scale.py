"""How driver memory (peak RSS), the generation cache (bytes on disk, parts, entries) and wall
time grow with the sample count: DarkForest, scripted engines (no latency), local Ray, a fresh
cache per size. Each size runs in its own process (peak RSS is per process), twice: a cold run
(every call goes to an engine and into the cache) and a warm rerun from that cache (every call
a hit, as in a resumed job or a shared sweep).

    .venv/bin/python jobs/perf/scale.py                      # 100, 1,000, 10,000
    .venv/bin/python jobs/perf/scale.py --sizes 100 1000 --timeout 900
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from jobs.perf.common import header, math_samples, peak_rss_mb, scripted_config, start_ray


def child(n: int, tmp: str) -> dict:
    from df_ray.pipeline.cache import GenerationCache
    from df_ray.pipeline.runner import Runner, shared_backbones

    start_ray()
    cfg = scripted_config(tmp, script="majority", batch_size=32, concurrency=2)
    samples = math_samples(n, prefix="sc")
    rss0 = peak_rss_mb()
    out = {"n": n, "rss_start_mb": rss0}
    runner = Runner(shared_backbones([cfg]), tracker=None, progress=lambda m: None)
    try:
        _ = runner.pool
        for phase in ("cold", "warm"):
            t = time.perf_counter()
            m = runner.run(cfg, samples).metrics
            out[f"{phase}_wall_s"] = time.perf_counter() - t
            out[f"{phase}_fresh"] = m["fresh_calls"]
            out[f"{phase}_rss_mb"] = peak_rss_mb()
            if phase == "cold":
                root = Path(cfg.cache_root)
                parts = list(root.glob("part-*.parquet"))
                out["cache_bytes"] = sum(p.stat().st_size for p in parts)
                out["cache_parts"] = len(parts)
                out["cache_entries"] = len(GenerationCache(cfg.cache_root))
                res = Path(cfg.results_dir)
                out["results_bytes"] = sum(p.stat().st_size for p in res.rglob("*.parquet"))
    finally:
        runner.shutdown()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000])
    ap.add_argument("--timeout", type=float, default=1800, help="per size, seconds")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--tmp", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print("RESULT " + json.dumps(child(args.child, args.tmp)), flush=True)
        return 0
    header("scale: driver peak RSS, cache size and wall time vs samples (scripted engines)")
    print(f"{'samples':>8} {'cold s':>8} {'warm s':>8} {'cold/s':>7} {'RSS MB':>7} "
          f"{'cache MB':>9} {'parts':>6} {'entries':>8} {'B/entry':>8} {'results MB':>10}")
    rows = []
    for n in args.sizes:
        with tempfile.TemporaryDirectory(prefix="dfperf-scale-") as tmp:
            try:
                out = subprocess.run([sys.executable, __file__, "--child", str(n), "--tmp", tmp],
                                     capture_output=True, text=True, timeout=args.timeout,
                                     env={**os.environ})
            except subprocess.TimeoutExpired:
                print(f"{n:>8} did not finish within {args.timeout:.0f} s on this machine")
                continue
        line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
        if line is None:
            print(f"{n:>8} failed:\n{out.stderr[-2000:]}")
            continue
        r = json.loads(line[7:])
        rows.append(r)
        print(f"{n:>8} {r['cold_wall_s']:>8.1f} {r['warm_wall_s']:>8.1f} "
              f"{n / r['cold_wall_s']:>7.1f} {r['warm_rss_mb']:>7.0f} "
              f"{r['cache_bytes'] / 1e6:>9.2f} {r['cache_parts']:>6} {r['cache_entries']:>8} "
              f"{r['cache_bytes'] / max(r['cache_entries'], 1):>8.0f} "
              f"{r['results_bytes'] / 1e6:>10.2f}", flush=True)
        assert r["warm_fresh"] == 0, "the warm rerun made fresh calls"
    if len(rows) >= 2:
        a, b = rows[-2], rows[-1]
        k = b["n"] / a["n"]
        print(f"# growth {a['n']} -> {b['n']} (x{k:.0f}): cold wall x"
              f"{b['cold_wall_s'] / a['cold_wall_s']:.1f}, RSS x{b['warm_rss_mb'] / a['warm_rss_mb']:.2f}, "
              f"cache bytes x{b['cache_bytes'] / a['cache_bytes']:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
