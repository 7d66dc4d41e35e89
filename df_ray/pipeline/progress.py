"""Progress of a running pipeline: one line per fused group of configurations.

On a terminal the line is redrawn in place every second or two; in a job's log (no
terminal) a line is printed every ``DF_RAY_PROGRESS_S`` seconds (default 30). It shows the
samples graded over the total, the calls the engines served and failed, tokens per second,
the ETA and where the Ray dashboard is. The same figures go to MLflow (the sweep's run)
as they arrive, so a lab can watch a sweep from the MLflow UI.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

from df_ray.pipeline.ticker import Ticker

StatsFn = Callable[[], list[dict[str, Any]]]


def dashboard_url() -> str | None:
    """The Ray dashboard's address, when this Ray runs one."""
    try:
        import ray

        url = ray._private.worker.get_dashboard_url()
    except Exception:
        return None
    if not url:
        return None
    return url if "://" in url else f"http://{url}"


def _duration(s: float) -> str:
    s = int(max(0, s))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


class GroupProgress:
    """Progress of one pipeline (one fused group): call ``graded`` as rows come out, ``close``
    at the end. ``stats`` returns the engine replicas' counters (served, failed, tokens)."""

    def __init__(self, label: str, total: int, stats: StatsFn | None = None, *,
                 say: Callable[[str], None] | None = None, live: bool | None = None,
                 stream: TextIO | None = None, interval_s: float | None = None,
                 log_metrics: Callable[[dict[str, float], int], None] | None = None) -> None:
        self.label = label
        self.total = total
        self.stats = stats
        self.say = say
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live
        if interval_s is None:
            interval_s = 1.0 if self.live else float(os.environ.get("DF_RAY_PROGRESS_S", "30"))
        self.interval_s = interval_s
        self.log_metrics = log_metrics
        self.dashboard = dashboard_url()
        self.t0 = time.time()
        self.done = 0
        self.failed_rows = 0  # failed calls in graded rows
        self._base: dict[str, float] | None = None
        self._engine = {"served": 0.0, "failed": 0.0, "tokens": 0.0}
        self._lock = threading.Lock()
        self._ticker = Ticker("df-ray-progress", interval_s, self._tick)
        self._step = 0
        self._width = 0

    # -- lifecycle
    def start(self) -> GroupProgress:
        self._poll()
        self._ticker.start()
        return self

    def close(self) -> None:
        self._ticker.stop(timeout_s=10)
        self._poll()
        self._emit(final=True)

    def graded(self, n: int, failed_calls: int = 0) -> None:
        with self._lock:
            self.done += n
            self.failed_rows += failed_calls

    def _tick(self) -> None:
        self._poll()
        self._emit()

    # -- figures
    def _poll(self) -> None:
        if self.stats is None:
            return
        try:
            rows = self.stats()
        except Exception:
            return
        now = {k: float(sum(r.get(k, 0) for r in rows)) for k in ("served", "failed", "tokens")}
        if self._base is None:
            self._base = now
        for k, v in now.items():
            if v < self._base[k]:  # a replica restarted with fresh counters
                self._base[k] = v
            self._engine[k] = v - self._base[k]

    def figures(self) -> dict[str, float]:
        el = max(time.time() - self.t0, 1e-9)
        with self._lock:
            done, failed_rows = self.done, self.failed_rows
        eta = (self.total - done) * el / done if done else float("nan")
        return {"samples_graded": float(done), "samples_total": float(self.total),
                "calls_served": self._engine["served"],
                "calls_failed": max(self._engine["failed"], float(failed_rows)),
                "tokens_per_s": self._engine["tokens"] / el, "eta_s": eta,
                "elapsed_s": el}

    def line(self) -> str:
        f = self.figures()
        eta = "–" if f["eta_s"] != f["eta_s"] else _duration(f["eta_s"])
        dash = self.dashboard or "off"
        return (f"{self.label}: {int(f['samples_graded'])}/{int(f['samples_total'])} samples "
                f"graded | calls {int(f['calls_served'])} served, {int(f['calls_failed'])} "
                f"failed | {f['tokens_per_s']:.0f} tok/s | {_duration(f['elapsed_s'])} elapsed, "
                f"ETA {eta} | dashboard {dash}")

    def _emit(self, final: bool = False) -> None:
        text = self.line()
        if self.log_metrics is not None:
            f = self.figures()
            with contextlib.suppress(Exception):
                self.log_metrics({f"progress.{k}": v for k, v in f.items() if v == v},
                                 self._step)
            self._step += 1
        if self.live:
            pad = " " * max(0, self._width - len(text))
            self.stream.write("\r[df-ray] " + text + pad + ("\n" if final else ""))
            self.stream.flush()
            self._width = len(text)
        elif self.say is not None:
            self.say(text)
