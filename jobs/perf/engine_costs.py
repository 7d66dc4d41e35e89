"""What an engine replica's process costs, part by part: df_ray's own work per request (the
answer streams, with and without the crash journal, in one process without Ray), and what Ray
charges the replica: per second idle (a bare async actor beside an idle simulated replica,
per thread), per actor call (``EngineActor.submit``'s shape) and per streamed object (an
answer stream's yield).

    PYTHONPATH=$PWD .venv/bin/python jobs/perf/engine_costs.py

The Ray figures are the replica process's CPU from /proc (the idle floor taken out of the
per-call and per-yield ones), so on a loaded machine they include what the load adds to each
wake-up.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pickle
import sys
import tempfile
import time
from concurrent.futures import Future
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from jobs.perf.common import header, start_ray

PROMPT = " ".join(["word"] * 200)
ANSWER = "The answer is (B). " + " ".join(["pad"] * 70)


class Instant:
    """An engine that answers every request at once: what is left is df_ray's own work."""

    model = "instant"

    def submit(self, request):
        from df_ray.engines.base import Completion

        f: Future = Future()
        f.set_result(Completion(ANSWER, 210, 75, finish_reason="stop"))
        return f

    def count_tokens(self, text: str) -> int:
        return 1


def streams_cpu_us(n: int, journal: bool) -> float:
    """CPU-µs per request of a replica's answer streams (submit, answer, journal, stream),
    requests and answers pickled as Ray would; no Ray."""
    from df_ray.engines.base import ChatRequest, Message
    from df_ray.engines.batching import Replica
    from df_ray.pipeline.answer_streams import AnswerStreams

    reqs = [ChatRequest(model="m", messages=(Message("user", f"Q{i}: {PROMPT}"),), seed=i)
            for i in range(n)]
    items = [(i, r.to_dict(), r.key()) for i, r in enumerate(reqs)]
    target = (tempfile.mkdtemp(prefix="df-ray-journal-"), "perf") if journal else None
    streams = AnswerStreams(Replica(Instant(), 64, recent=0))

    async def run() -> int:
        async def feed() -> None:
            for j in range(0, n, 64):
                streams.submit("s", pickle.loads(pickle.dumps(items[j:j + 64])), target)
                await asyncio.sleep(0.001)

        task = asyncio.create_task(feed())
        got = 0
        async for out in streams.stream("s", coalesce_s=0.005, idle_s=0.05):
            pickle.dumps(out)
            got += len(out)
        await task
        return got

    c0 = time.process_time()
    got = asyncio.run(run())
    streams.journals.close()
    return (time.process_time() - c0) / got * 1e6


def thread_cpu_ns(pid: int) -> dict[str, int]:
    """CPU-ns of each thread of ``pid`` so far, by thread name (/proc's schedstat)."""
    out: dict[str, int] = {}
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            name = Path(f"/proc/{pid}/task/{t}/comm").read_text().strip()
            ns = int(Path(f"/proc/{pid}/task/{t}/schedstat").read_text().split()[0])
        except OSError:
            continue
        out[name] = out.get(name, 0) + ns
    return out


def ray_costs(seconds: float, calls: int) -> None:
    import ray

    from df_ray.engines import make_spec
    from df_ray.pipeline.engine_pool import EnginePool

    @ray.remote(max_concurrency=8192)
    class Bare:
        async def pid(self) -> int:
            return os.getpid()

        async def submit(self, session, items, journal=None) -> int:
            return len(items)

        async def answers(self, n: int, per: int):
            d = {"text": ANSWER, "prompt_tokens": 210, "completion_tokens": 75, "error": None,
                 "finish_reason": "stop"}
            for i in range(n):
                await asyncio.sleep(0.005)
                yield [(i * per + j, d) for j in range(per)]

    start_ray()
    spec = make_spec(kind="simulated", model="sim", replicas=1,
                     engine_args={"capacity": 256, "step_s": 0.02, "mean_tokens": 70})
    pool = EnginePool({"b": spec})
    try:
        pool.wait_ready()
        bare = Bare.remote()
        pids = {"replica": int(pool.stats()[0]["pid"]), "bare actor": ray.get(bare.pid.remote())}
        time.sleep(2.0)
        before = {k: thread_cpu_ns(p) for k, p in pids.items()}
        time.sleep(seconds)
        for k, p in pids.items():
            d = {n: (v - before[k].get(n, 0)) / 1e6 / seconds
                 for n, v in thread_cpu_ns(p).items()}
            top = ", ".join(f"{n} {v:.2f}" for n, v in sorted(d.items(), key=lambda x: -x[1])[:4])
            print(f"idle {k}: {sum(d.values()):.2f} CPU-ms per second ({top})")
        floor = sum(thread_cpu_ns(pids["bare actor"]).values())
        per_call_and_yield(bare, pids["bare actor"], floor, seconds, calls)
    finally:
        pool.shutdown()
        ray.shutdown()


def per_call_and_yield(bare, pid: int, floor_ns: int, seconds: float, calls: int) -> None:
    import ray

    t0 = time.time()
    time.sleep(seconds / 2)
    rate = (sum(thread_cpu_ns(pid).values()) - floor_ns) / (time.time() - t0)  # ns/s idle
    item = ({"model": "sim", "messages": [{"role": "user", "content": PROMPT}],
             "sampling": {"temperature": 0.7, "top_p": 1.0, "max_tokens": 512, "stop": []},
             "seed": 1, "revision": None}, "k" * 64)

    def extra_ms(run) -> float:
        c0, t = sum(thread_cpu_ns(pid).values()), time.time()
        n = run()
        used = sum(thread_cpu_ns(pid).values()) - c0 - rate * (time.time() - t)
        return used / 1e6 / n

    for per in (1, 16):
        def submits(per=per) -> int:
            refs = []
            for i in range(calls):
                refs.append(bare.submit.remote("s", [(i, *item)] * per, None))
                if len(refs) > 16:
                    ray.get(refs.pop(0))
                time.sleep(0.005)
            ray.get(refs)
            return calls
        print(f"an actor call carrying {per} request(s): {extra_ms(submits):.3f} CPU-ms "
              "in the actor")
    for per in (1, 5, 20):
        def yields(per=per) -> int:
            for ref in bare.answers.options(num_returns="streaming").remote(calls, per):
                ray.get(ref)
            return calls
        print(f"a streamed object of {per} answer(s): {extra_ms(yields):.3f} CPU-ms in the actor")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=8000)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--calls", type=int, default=500)
    a = p.parse_args()
    header("Engine replica costs: df_ray's per request, Ray's per second, call and yield")
    for journal in (False, True):
        print(f"answer streams, journal {'on' if journal else 'off'}: "
              f"{streams_cpu_us(a.requests, journal):.1f} CPU-us per request (no Ray)")
    ray_costs(a.seconds, a.calls)
    return 0


if __name__ == "__main__":
    sys.exit(main())
