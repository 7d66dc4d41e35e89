"""What a replica's answer stream costs per answer at a given answer rate, by how it gathers:
the earlier rule (yield what finished within `COALESCE_S`) against waiting for `YIELD_FILL`
answers (at most `COALESCE_MOST_S`). A backbone's requests over several replicas give each
a share of the rate, so each of its yields carries fewer answers.

    PYTHONPATH=$PWD .venv/bin/python jobs/perf/stream_fill.py

One Ray actor hosts a simulated replica (continuous batching, H100-like timing) and its
answer streams; it is fed requests at the rate asked for and yields its answers to this
process. Printed per variant and rate: answers per streamed object, the actor's CPU per
answer (its process's but the simulated engine's loop, the idle floor taken out) and this
process's (the consumer, Ray's threads included, its idle floor taken out).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from jobs.perf.common import header, start_ray
from jobs.perf.engine_costs import PROMPT, thread_cpu_ns


def streamer_class():
    import ray

    @ray.remote(max_concurrency=64)
    class Streamer:
        def __init__(self) -> None:
            from df_ray.engines import make_engine, make_spec
            from df_ray.engines.batching import Replica
            from df_ray.pipeline.answer_streams import AnswerStreams

            spec = make_spec(kind="simulated", model="sim", engine_args={
                "capacity": 256, "step_s": 0.02, "mean_tokens": 70})
            self.streams = AnswerStreams(Replica(make_engine(spec), spec.batch_size_cap))
            self.n = 0

        async def pid(self) -> int:
            return os.getpid()

        async def answers(self, rate: float, seconds: float, coalesce_s: float, fill: int,
                          most_s: float, per: int = 16):
            """Take ``per`` requests every ``per / rate`` s for ``seconds``; yield how many
            answers each object would carry."""
            from df_ray.engines.base import ChatRequest, Message

            sid = f"s{self.n}"
            self.n += 1

            async def feed() -> None:
                t0 = time.monotonic()
                while time.monotonic() - t0 < seconds:
                    reqs = [ChatRequest(model="sim", seed=self.n * 10**7 + i, messages=(
                        Message("user", f"{sid}-{i}: {PROMPT}"),)) for i in range(per)]
                    self.streams.submit(sid, [(i, r.to_dict(), r.key()) for i, r in
                                              enumerate(reqs, start=self.n * 10**7)])
                    self.n += per
                    await asyncio.sleep(per / rate)

            task = asyncio.create_task(feed())
            async for out in self.streams.stream(sid, coalesce_s, 1.0, fill, most_s):
                yield len(out)
            await task

    return Streamer


def cpu_ms(pid: int | None = None) -> float:
    """CPU-ms so far of this process, or of ``pid`` without its simulated engine's loop (the
    same at a given rate whatever the stream does)."""
    if pid is None:
        return time.process_time() * 1e3
    return sum(v for n, v in thread_cpu_ns(pid).items() if n != "sim-engine") / 1e6


def floors(pid: int, seconds: float = 3.0) -> tuple[float, float]:
    """CPU-ms per second of the actor and of this process while idle."""
    a, b, t = cpu_ms(pid), cpu_ms(), time.time()
    time.sleep(seconds)
    wall = time.time() - t
    return (cpu_ms(pid) - a) / wall, (cpu_ms() - b) / wall


def run(streamer, pid: int, rate: float, seconds: float, variant: tuple,
        floor: tuple[float, float]) -> str:
    import ray

    a0, b0, t0, th0 = cpu_ms(pid), cpu_ms(), time.time(), thread_cpu_ns(pid)
    objects = answers = 0
    for ref in streamer.answers.options(num_returns="streaming").remote(rate, seconds,
                                                                        *variant):
        objects += 1
        answers += ray.get(ref)
    wall = time.time() - t0
    actor = cpu_ms(pid) - a0 - floor[0] * wall
    here = cpu_ms() - b0 - floor[1] * wall
    n = max(answers, 1)
    th = {k: (v - th0.get(k, 0)) / 1e6 / n for k, v in thread_cpu_ns(pid).items()}
    top = ", ".join(f"{k} {v:.3f}" for k, v in sorted(th.items(), key=lambda x: -x[1])[:4])
    return (f"{answers / max(objects, 1):5.1f} answers per object ({objects} objects), "
            f"actor {actor / n:.3f} CPU-ms per answer, this process {here / n:.3f} "
            f"({answers} answers in {wall:.0f} s; the actor's threads, floor in: {top})")


def main() -> int:
    from df_ray.pipeline.answer_streams import COALESCE_MOST_S, COALESCE_S, YIELD_FILL

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rates", type=float, nargs="+", default=[16.0, 40.0],
                   help="answers per second one stream carries (a replica's share)")
    p.add_argument("--seconds", type=float, default=15.0)
    a = p.parse_args()
    header("A replica's answer stream: CPU per answer by how it gathers, at a given rate")
    import ray

    start_ray()
    try:
        streamer = streamer_class().remote()
        pid = ray.get(streamer.pid.remote())
        floor = floors(pid)
        print(f"idle: the actor {floor[0]:.2f}, this process {floor[1]:.2f} CPU-ms per second "
              "(taken out below)")
        variants = {f"within {COALESCE_S:g} s (earlier)": (COALESCE_S, 1, COALESCE_S),
                    f"{YIELD_FILL} answers, at most {COALESCE_MOST_S:g} s (now)":
                        (COALESCE_S, YIELD_FILL, COALESCE_MOST_S)}
        for rate in a.rates:
            for name, v in variants.items():
                print(f"{rate:g} answers/s, {name}: {run(streamer, pid, rate, a.seconds, v, floor)}",
                      flush=True)
    finally:
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
