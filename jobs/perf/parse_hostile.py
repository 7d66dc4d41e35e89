"""Parse time of hostile outputs against their size: nested ``\\boxed{`` (the fault campaign's
superlinear case), unclosed boxes and long brace runs, per answer kind, at 8 KB to 200 KB
(the parsers' input cap, ``MAX_TEXT_CHARS``). Prints CPU seconds per parse; a linear (or
capped) parser grows at most in proportion to the size. Plain Python, no Ray.

    .venv/bin/python jobs/perf/parse_hostile.py
    .venv/bin/python jobs/perf/parse_hostile.py --sizes 8 16 32 --kinds choice
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from df_ray.core import ParseSpec, parse
from df_ray.core.parsing.math_kind import warm

SPECS = {"choice": ParseSpec("choice", n_options=4), "math": ParseSpec("math"),
         "label": ParseSpec("label", labels=("Yes", "No")), "finqa": ParseSpec("finqa"),
         "code": ParseSpec("code", entry_point="f")}


def hostile(kind: str, kb: int) -> str:
    n = kb * 1024
    if kind == "nested":
        k = n // 8
        return "\\boxed{" * k + "C" + "}" * k
    if kind == "unclosed":
        return ("\\boxed{" * (n // 7))[:n]
    return ("{" * (n // 2)) + ("}" * (n // 2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[8, 16, 32, 64, 195])
    ap.add_argument("--kinds", nargs="+", default=list(SPECS))
    ap.add_argument("--inputs", nargs="+", default=["nested", "unclosed", "braces"])
    args = ap.parse_args()
    warm()
    print(f"{'input':<9} {'kind':<7} " + " ".join(f"{s:>7} KB" for s in args.sizes))
    for inp in args.inputs:
        for kind in args.kinds:
            cells = []
            for kb in args.sizes:
                text = hostile(inp, kb)
                t = time.process_time()
                obs = parse(text, SPECS[kind])
                dt = time.process_time() - t
                cells.append(f"{dt:8.3f}s" + ("" if obs.valid else "*"))
            print(f"{inp:<9} {kind:<7} " + " ".join(f"{c:>10}" for c in cells))
    print("(* = invalid observation: no answer, or the time limit as its reason)")


if __name__ == "__main__":
    main()
