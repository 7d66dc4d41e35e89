"""What opening a generation cache root costs a fresh process: an oversized entry, and a large
root read lazily (keys first).

    .venv/bin/python jobs/perf/cache_bounds.py [--entry-mb 150] [--entries 20000]

Prints, for a root holding one entry of ``--entry-mb`` MB (a real part, valid checksum) beside
a small one: the fresh process's peak RSS growth from opening the root and asking for both
keys (the big one is refused in one line, never read). Then, for a root of ``--entries``
entries (2 KB each, in parts of 500): the open time (keys only), the first get's time and the
peak RSS growth after opening and after reading every entry.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

_MEASURE = textwrap.dedent("""
    import sys, time
    from df_ray.pipeline.cache import GenerationCache
    def status(field):
        with open("/proc/self/status") as f:
            return next(int(ln.split()[1]) for ln in f if ln.startswith(field)) // 1024
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak (VmHWM) restarts from the current size
    base = status("VmRSS")
    t = time.perf_counter()
    c = GenerationCache(sys.argv[1], user="perf")
    opened = time.perf_counter() - t
    keys = c.keys()
    t = time.perf_counter()
    c.get(keys[0])
    first = time.perf_counter() - t
    if len(sys.argv) > 2:
        c.get(keys[1])
    after_open = status("VmHWM") - base
    if sys.argv[2] == "all":
        for k in keys:
            c.get(k)
    print(len(keys), f"{opened:.3f}", f"{first:.4f}", after_open, status("VmHWM") - base)
""")


def measure(root: Path, mode: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", _MEASURE, str(root), mode], capture_output=True,
                         text=True, cwd=REPO, check=True)
    return out.stdout.split()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--entry-mb", type=int, default=150)
    ap.add_argument("--entries", type=int, default=20000)
    a = ap.parse_args()
    import pyarrow as pa
    import pyarrow.parquet as pq

    from df_ray.engines.base import ChatRequest, Completion, Message
    from df_ray.pipeline.cache import SCHEMA, GenerationCache, entry_checksum

    def req(i: int) -> ChatRequest:
        return ChatRequest(model="m", messages=(Message("user", f"q{i}"),), seed=i)

    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "big"
        big.mkdir()
        text = "x" * (a.entry_mb * 2**20)
        key = req(0).key()
        pq.write_table(pa.Table.from_pylist([{
            "key": key, "model": "m", "revision": "", "seed": 0, "text": text,
            "prompt_tokens": 1, "completion_tokens": 1, "created": 0.0, "finish_reason": None,
            "checksum": entry_checksum(key, text, 1, 1)}], schema=SCHEMA),
            big / "part-0-big.parquet", compression="lz4")
        del text
        GenerationCache(str(big), user="perf").put_many([(req(1), Completion("small", 1, 1))])
        n, _, _, grew, _ = measure(big, "first")
        print(f"root with one {a.entry_mb} MB entry and a small one ({n} keys): fresh process "
              f"peak RSS +{grew} MB after opening it and asking both (the big one refused)")

        many = Path(tmp) / "many"
        c = GenerationCache(str(many), user="perf")
        body = "y" * 2000
        for s in range(0, a.entries, 500):
            c.put_many([(req(i), Completion(f"{i} {body}", 10, 500))
                        for i in range(s, min(s + 500, a.entries))])
        n, opened, first, grew_open, grew_all = measure(many, "all")
        print(f"root of {n} entries in {-(-a.entries // 500)} parts: opened (keys only) in "
              f"{opened} s, first get {first} s; peak RSS +{grew_open} MB after opening, "
              f"+{grew_all} MB after reading every entry")


if __name__ == "__main__":
    main()
