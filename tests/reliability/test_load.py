"""Load: 1,000 samples through the full pipeline (jobs/perf/load_10k.py at a smaller size):
scripted engines, batch_size 64, concurrency 4, every sample graded exactly once, and the
driver's peak RSS within a stated bound.

The bound: the driver holds the loaded samples and one JSON row per sample before it
streams them (df_ray/pipeline/runner.py, ``rows = [...]``), a few KB per sample, on top of
Ray's and MLflow's own footprint (~300-500 MB). 1,000 samples must stay under 1.5 GB.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import REPO, cli_env

pytestmark = pytest.mark.slow

N = 1000
PEAK_RSS_BOUND_MB = 1536


def test_1000_samples_all_accounted_for(tmp_path):
    out = tmp_path / "figures.json"
    cmd = [sys.executable, str(REPO / "jobs/perf/load_10k.py"), "--samples", str(N),
           "--out", str(tmp_path / "work"), "--json", str(out)]
    r = subprocess.run(cmd, cwd=REPO, env=cli_env(), capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    (f,) = json.loads(out.read_text())
    print(json.dumps(f))  # the figures, in the test log
    assert f["samples"] == f["graded"] == f["rows"] == f["unique_ids"] == N
    assert f["fresh_calls"] == 4 * N and f["failed_calls"] == 0
    assert f["rss_peak_mb"] < PEAK_RSS_BOUND_MB, f
