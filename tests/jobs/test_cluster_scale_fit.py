"""The cost of each extra request that `jobs/perf/cluster_scale.py` fits over several jobs:
the slope and its interval against scipy's regression, the fit on requests and wall together
against numpy's least squares and scipy's t quantile, and the fits recovering known costs."""

from __future__ import annotations

import argparse

import numpy as np
import pytest
from scipy import stats

from jobs.perf.cluster_scale import (
    RAY_NODES,
    ROLES,
    fit_request_and_second,
    fit_slope,
    marginal_fit,
)


def test_fit_slope_matches_scipy_linregress() -> None:
    x = [700, 700, 1400, 1400, 2100, 2100]
    y = [3.1, 3.4, 4.0, 4.5, 5.2, 5.3]
    slope, lo, hi = fit_slope(x, y)
    ref = stats.linregress(x, y)
    half = stats.t.ppf(0.975, len(x) - 2) * ref.stderr
    assert slope == pytest.approx(ref.slope, rel=1e-9)
    assert (lo, hi) == pytest.approx((ref.slope - half, ref.slope + half), rel=1e-9)


def _job(requests: int, wall: float, ms: dict[str, float], idle: dict[str, float]) -> dict:
    """A job's whole CPU (seconds): 5 s fixed per role plus ``ms`` per request, and the idle
    cluster's CPU per second over ``wall`` on Ray's processes."""
    cpu = {k: 5.0 + ms[k] * requests / 1000.0 for k in ("stage", "engine", "driver")}
    for k in RAY_NODES:
        cpu[k] = 5.0 + ms[k] * requests / 1000.0 + idle[k] * wall
    cpu["ray"] = cpu["ray_head"] + cpu["ray_workers"]
    return {"gpus": 4, "requests": requests, "wall": wall, "cpu": cpu, "idle": idle,
            "step_s": 0.02}


def test_marginal_fit_recovers_the_cost_per_request_and_per_second(capsys) -> None:
    ms = {"stage": 0.5, "engine": 0.2, "driver": 0.1, "ray_head": 0.15, "ray_workers": 0.05}
    idle = {"ray_head": 0.1, "ray_workers": 0.04}  # CPU-s per second
    # walls that do not grow in step with the requests: a loaded machine's
    walls = [30.0, 41.0, 38.0, 52.0, 47.0]
    runs = [_job(n, w, ms, idle) for n, w in zip([600, 900, 1200, 1800, 2100], walls,
                                                   strict=True)]
    a = argparse.Namespace(head_cores=16)
    m = marginal_fit(runs, a)
    per_request = sum(ms.values())
    assert m["net"] == pytest.approx(per_request, rel=1e-6)  # the costs per second taken out
    assert m["net_ci"] == pytest.approx((per_request, per_request), abs=1e-6)
    # without taking them out, the walls' noise is in the slope, and in a wide interval
    assert m["gross"] != pytest.approx(per_request, rel=1e-3)
    assert m["ci"][0] < m["gross"] < m["ci"][1]
    out = capsys.readouterr().out
    assert "fitted over 5 jobs" in out
    assert all(f"{k} " in out for k in ROLES)


def test_fit_on_requests_and_wall_matches_numpy_least_squares() -> None:
    n = [2000, 5200, 8400, 2000, 5200, 8400]
    w = [31.9, 39.0, 43.1, 45.5, 53.8, 59.8]
    y = [38.9, 46.5, 50.1, 38.4, 47.3, 50.5]
    (b, blo, bhi), (c, clo, chi) = fit_request_and_second(n, w, y)
    x = np.column_stack([np.ones(len(n)), n, w])
    coef, rss, *_ = np.linalg.lstsq(x, np.array(y), rcond=None)
    se = np.sqrt(np.diag(rss[0] / (len(n) - 3) * np.linalg.inv(x.T @ x)))
    half = stats.t.ppf(0.975, len(n) - 3) * se
    assert (b, c) == pytest.approx((coef[1], coef[2]), rel=1e-9)
    assert (blo, bhi) == pytest.approx((coef[1] - half[1], coef[1] + half[1]), rel=1e-9)
    assert (clo, chi) == pytest.approx((coef[2] - half[2], coef[2] + half[2]), rel=1e-9)


def test_marginal_fit_tells_costs_per_request_from_costs_per_second(capsys) -> None:
    """Jobs at two engine speeds (the same requests, other walls): the costs per request are
    recovered without assuming an idle rate, though the cluster spends per second while a job
    runs (0.09 CPU-s) less than it does idle after it (0.14)."""
    ms = {"stage": 0.5, "engine": 0.2, "driver": 0.1, "ray_head": 0.15, "ray_workers": 0.05}
    running = {"ray_head": 0.06, "ray_workers": 0.03}  # CPU-s per second while a job runs
    idle = {"ray_head": 0.1, "ray_workers": 0.04}  # ... and idle after it
    runs = []
    for step, walls in ((0.02, [32.0, 39.0, 43.5]), (0.04, [45.0, 54.5, 60.0])):
        for n, w in zip([2000, 5200, 8400], walls, strict=True):
            r = _job(n, w, ms, running)
            r["idle"], r["step_s"] = idle, step
            runs.append(r)
    m = marginal_fit(runs, argparse.Namespace(head_cores=16))
    per_request = sum(ms.values())
    assert m["apart"] == pytest.approx((per_request, per_request, per_request), abs=1e-6)
    assert m["net"] < per_request - 0.05  # the idle rate taken out over-corrects
    out = capsys.readouterr().out
    assert "per second of wall 90 [90, 90]" in out
    assert "after each job, the mean: 140" in out
