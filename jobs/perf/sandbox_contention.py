"""Sandboxes under contention: many graders at once on few cores, and a CPU-hogging neighbour.

1. ``--graders N`` correct, CPU-bound answers graded at once (each needs ``--work`` seconds of
   CPU, limit ``--timeout``): how many pass, their wall time, CPU time and the time the
   runner did not count because the sandbox was waiting for a CPU (cgroup ``cpu.pressure``).
2. The same correct answer graded alone, then beside a neighbour whose program starts 30
   spinning processes: its wall time and verdict (the neighbour's cgroup holds it to its CPU
   quota and weight).
3. The cost of the cgroup layer: a trivial answer graded with and without it (best_effort
   without the cgroup is the comparison), mean wall time over ``--repeat`` runs.

Run from the repository root: ``.venv/bin/python jobs/perf/sandbox_contention.py``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from jobs.perf.common import header

TESTS = "def check(candidate):\n    assert candidate(2) == 4\n"


def busy(work_s: float) -> str:
    return ("import time\n"
            "def f(x):\n"
            f"    end = time.process_time() + {work_s}\n"
            "    n = 0\n"
            "    while time.process_time() < end:\n"
            "        n += 1\n"
            "    return x * 2\n")


SPINNER = ("import os\nfor _ in range(29):\n    if os.fork() == 0:\n        break\n"
           "while True:\n    pass\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--graders", type=int, default=16)
    ap.add_argument("--work", type=float, default=0.5, help="CPU seconds each answer needs")
    ap.add_argument("--timeout", type=float, default=3.0)
    ap.add_argument("--repeat", type=int, default=10)
    a = ap.parse_args()

    from df_ray.sandbox import plan, policy, run_tests, run_untrusted

    header("sandbox contention")
    p = plan("strict")
    if p.error:
        sys.exit(p.error)
    print(f"layers: {' '.join(p.layers)}; {p.notes[0] if p.notes else ''}")
    print(f"cores: {os.cpu_count()}")

    def grade(_):
        return run_tests(busy(a.work), tests=TESTS, entry_point="f", timeout_s=a.timeout)

    with ThreadPoolExecutor(a.graders) as ex:
        t = time.monotonic()
        res = list(ex.map(grade, range(a.graders)))
        wall = time.monotonic() - t
    passed = sum(r.status == "passed" for r in res)
    print(f"\n1. {a.graders} graders at once, each {a.work}s of CPU, limit {a.timeout}s: "
          f"{passed}/{a.graders} passed in {wall:.1f}s")
    print(f"   per sandbox wall s: median {statistics.median(r.duration_s for r in res):.2f}, "
          f"max {max(r.duration_s for r in res):.2f}; CPU s: median "
          f"{statistics.median(r.cpu_time_s or 0 for r in res):.2f}")
    waits = [r.cpu_wait_s for r in res if r.cpu_wait_s is not None]
    if waits:
        rest = [max(0.0, r.duration_s - (r.cpu_time_s or 0) - (r.cpu_wait_s or 0)) / r.duration_s
                for r in res if r.cpu_wait_s is not None]
        print(f"   waiting for a CPU (not counted) s: median {statistics.median(waits):.2f}; "
              f"wall time neither CPU nor counted waiting: median "
              f"{100 * statistics.median(rest):.1f}%, max {100 * max(rest):.1f}%")
    for r in res:
        if r.status != "passed":
            print(f"   {r.status}: {r.detail}")

    alone = grade(0)
    with ThreadPoolExecutor(2) as ex:
        spin = ex.submit(run_untrusted, SPINNER, timeout_s=max(8.0, 3 * a.timeout))
        time.sleep(1.0)
        beside = grade(0)
        spin_res = spin.result()
    print(f"\n2. one answer alone: {alone.status} in {alone.duration_s:.2f}s; beside a "
          f"30-process spinner: {beside.status} in {beside.duration_s:.2f}s "
          f"(spinner: {spin_res.status}, {spin_res.cpu_time_s or 0:.1f}s of CPU in "
          f"{spin_res.duration_s:.1f}s)")

    trivial = "def f(x):\n    return x * 2\n"
    strict = [run_tests(trivial, tests=TESTS, entry_point="f").duration_s
              for _ in range(a.repeat)]
    os.environ["DF_RAY_SANDBOX_NO_CGROUP"] = "1"
    policy.reset_cache()
    weak = [run_tests(trivial, tests=TESTS, entry_point="f", isolation="best_effort").duration_s
            for _ in range(a.repeat)]
    print(f"\n3. a trivial answer, mean of {a.repeat}: {statistics.mean(strict) * 1000:.0f} ms "
          f"with the cgroup layer, {statistics.mean(weak) * 1000:.0f} ms without it")


if __name__ == "__main__":
    main()
