"""The cost of each extra request that `jobs/perf/cluster_scale.py` fits over several jobs:
the slope and its interval against scipy's regression, and the fit recovering known costs."""

from __future__ import annotations

import argparse

import pytest
from scipy import stats

from jobs.perf.cluster_scale import RAY_NODES, ROLES, fit_slope, marginal_fit


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
    return {"gpus": 4, "requests": requests, "wall": wall, "cpu": cpu, "idle": idle}


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
