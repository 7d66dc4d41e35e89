"""Memory of a limited load against a full one: the MATH test split from a generated local
file (JSON lines and a JSON list, ``--mb`` megabytes each), peak Python allocations measured
with tracemalloc, in one run.

    PYTHONPATH=$PWD .venv/bin/python jobs/perf/limit_read.py --mb 20 --limit 4
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path


def write(path: Path, mb: float, as_list: bool) -> int:
    row = {"problem": "Compute $x$ where " + "x + 1 = 2, " * 40, "solution": "$\\boxed{1}$",
           "answer": "1", "subject": "Algebra", "level": 1}
    n = int(mb * 1e6 / (len(json.dumps(row)) + 40))
    rows = ({**row, "problem": f"{i}: {row['problem']}", "unique_id": f"test/algebra/{i}.json"}
            for i in range(n))
    with path.open("w") as f:
        if as_list:
            f.write("[\n" + ",\n".join(json.dumps(r) for r in rows) + "\n]\n")
        else:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    return n


def peak(fn) -> tuple[float, float, int]:
    tracemalloc.start()
    t = time.perf_counter()
    out = fn()
    dt = time.perf_counter() - t
    _, top = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return top / 1e6, dt, len(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=20.0)
    ap.add_argument("--limit", type=int, default=4)
    a = ap.parse_args(argv)
    from df_ray.tasks import get_task

    task = get_task("math")
    tmp = Path(tempfile.mkdtemp())
    print("| file | rows | MB | load | samples | peak MB | peak / file MB | seconds |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, as_list in (("rows.jsonl", False), ("rows.json", True)):
        p = tmp / name
        n = write(p, a.mb, as_list)
        size = p.stat().st_size / 1e6
        for label, limit in ((f"limit {a.limit}", a.limit), ("whole", None)):
            mb, dt, k = peak(lambda p=p, limit=limit: task.load("test", source=str(p),
                                                                limit=limit))
            print(f"| {name} | {n} | {size:.1f} | {label} | {k} | {mb:.1f} | "
                  f"{mb / size:.2f} | {dt:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
