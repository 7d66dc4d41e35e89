"""Peak memory of `df-ray validate --data` with `limit: 4` over generated data files of each
format (a JSON list, JSON lines, CSV, Parquet) at two sizes, and what each further MB of file
costs: a limited read streams, so the cost stays well under 1 MB per MB.

Each figure is the peak resident memory of one `df-ray validate --data` process (its own
interpreter, so nothing carries over), read from the kernel when it exits. The files are
written in a temporary folder and removed afterwards.

    PYTHONPATH=$PWD .venv/bin/python jobs/perf/limit_read.py --sizes 32 128
    PYTHONPATH=$PWD .venv/bin/python jobs/perf/limit_read.py --benchmark file --sizes 32 128
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, header

FORMATS = ("json", "jsonl", "csv", "parquet")


def rows(n: int):
    """MATH-schema rows, each with its own random text, so that Parquet's compression keeps the file near its size."""
    rng = random.Random(0)
    for i in range(n):
        pad = rng.randbytes(200).hex()
        yield {"problem": f"{i}: Compute $x$ where x + 1 = 2 ({pad})", "solution": "$\\boxed{1}$",
               "answer": "1", "subject": "Algebra", "level": "1",
               "unique_id": f"test/algebra/{i}.json"}


def write(path: Path, mb: float) -> int:
    """A data file of about ``mb`` megabytes in ``path``'s format; its row count."""
    n = int(mb * 1e6 / (len(json.dumps(next(rows(1)))) + 3))
    fmt = path.suffix[1:]
    if fmt == "parquet":  # pyarrow's default row groups: this file is one row group
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(list(rows(n))), path)
        return n
    with path.open("w", newline="") as f:
        if fmt == "csv":
            import csv

            w = csv.DictWriter(f, fieldnames=list(next(rows(1))))
            w.writeheader()
            w.writerows(rows(n))
        elif fmt == "jsonl":
            f.writelines(json.dumps(r) + "\n" for r in rows(n))
        else:
            f.write("[\n")
            for i, r in enumerate(rows(n)):
                f.write(("" if i == 0 else ",\n") + json.dumps(r))
            f.write("\n]\n")
    return n


def write_apart(path: Path, mb: float) -> int:
    """``write`` in a process of its own: a child's peak memory counts what its parent held
    when it forked, so this process must stay small."""
    out = subprocess.run([sys.executable, __file__, "--write", str(path), str(mb)],
                         check=True, capture_output=True, text=True)
    return int(out.stdout.strip())


def config(tmp: Path, data: Path, benchmark: str) -> Path:
    base = {
        "name": "limit", "benchmark": benchmark, "limit": 4,
        "backbones": {b: {"kind": "scripted", "model": f"m{b}"} for b in ("b1", "b2", "b3")},
        "agents": [{"id": f"a{i}", "backbone": f"b{i}"} for i in (1, 2, 3)],
        "coordinator": {"id": "coord", "backbone": "b1"},
        "method_args": {"ablation": "no_calibration"},
        "cache_root": str(tmp / "cache"), "results_dir": str(tmp / "results"),
        "tracking": {"uri": f"sqlite:///{tmp}/mlflow.db", "experiment": "perf"},
    }
    if benchmark == "file":  # the same rows, named by configuration
        base["benchmark_args"] = {"path": str(data), "question_field": "problem",
                                  "answer_field": "answer", "id_field": "unique_id",
                                  "kind": "math"}
    else:
        base["source"] = str(data)
    path = tmp / f"{data.name}.yaml"
    path.write_text(yaml.safe_dump({"name": "limit", "base": base, "runs": [{}]}))
    return path


def validate_peak(cfg: Path) -> tuple[float, str]:
    """(peak resident MB of `df-ray validate --data --config cfg`, its data line)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1"}
    cmd = [str(ROOT / ".venv" / "bin" / "df-ray"), "validate", "--data", "--config", str(cfg)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    out = proc.stdout.read() if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"df-ray validate failed:\n{out[-2000:]}")
    line = next((ln.strip() for ln in out.splitlines() if ln.strip().startswith("data ")), "")
    return usage.ru_maxrss / 1024.0, line


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=float, nargs=2, default=[32.0, 128.0], metavar="MB")
    ap.add_argument("--benchmark", choices=("math", "file"), default="math")
    ap.add_argument("--formats", nargs="+", choices=FORMATS, default=list(FORMATS))
    ap.add_argument("--write", nargs=2, metavar=("PATH", "MB"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.write:
        print(write(Path(a.write[0]), float(a.write[1])))
        return 0
    header(f"df-ray validate --data, limit 4, benchmark {a.benchmark}: peak memory by file "
           "size")
    tmp = Path(tempfile.mkdtemp(prefix="limit_read_"))
    print("| format | file MB | rows | peak MB | samples |")
    print("| --- | --- | --- | --- | --- |")
    slopes = {}
    try:
        for fmt in a.formats:
            got = []
            for mb in a.sizes:
                data = tmp / f"rows_{int(mb)}.{fmt}"
                n = write_apart(data, mb)
                size = data.stat().st_size / 1e6
                peak, line = validate_peak(config(tmp, data, a.benchmark))
                data.unlink()
                got.append((size, peak))
                print(f"| {fmt} | {size:.1f} | {n:,} | {peak:.0f} | {line} |", flush=True)
            (s0, p0), (s1, p1) = got
            slopes[fmt] = (p1 - p0) / (s1 - s0)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    for fmt, slope in slopes.items():
        print(f"{fmt}: {slope:+.3f} MB of peak memory per further MB of file")
    return 0


if __name__ == "__main__":
    sys.exit(main())
