"""Fault table rows of the fourth fault campaign (docs/faults.md), each through a real
``df-ray`` process: one ``df-ray: ...`` line naming the problem, its documented exit status,
no traceback, found before Ray where it can be."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from df_ray.core.calibration import CHECKSUM_FIELD, content_checksum
from tests.helpers import REPO, base_config, cli_env, one_line, write_mmlu_goa

pytestmark = pytest.mark.slow  # df-ray subprocesses


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "df_ray.cli", *args], cwd=REPO,
                          env=cli_env(), capture_output=True, text=True, timeout=timeout)


def _write(tmp_path: Path, base: dict, name: str = "faults") -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"name": name, "base": base, "runs": [{}]}))
    return path


@pytest.fixture
def base(tmp_path):
    src = write_mmlu_goa(tmp_path / "mmlu.json", 3)
    return base_config(tmp_path, src)


def _calibration(**agent_a1: object) -> dict:
    stats = {a: {"n_valid": 4, "n_correct": 2} for a in ("a1", "a2", "a3")}
    stats["a1"].update(agent_a1)
    return {"schema_version": 1, "benchmark": "mmlu_pro", "agents": ["a1", "a2", "a3"],
            "n_samples": 4, "fitted_at": "2025-01-01T00:00:00+00:00", "gamma": 0.5,
            "agent_stats": stats, "patterns": {}, "pairs": {}}


@pytest.mark.parametrize("checksummed", [False, True])
@pytest.mark.parametrize("edit, says", [
    ({"n_valid": -5}, "field 'agent_stats.a1.n_valid' is -5: counts cannot be negative"),
    ({"n_correct": 9}, "field 'agent_stats.a1.n_correct' is 9, more than "
                       "'agent_stats.a1.n_valid' (4)"),
    ({"n_valid": 2.5}, "field 'agent_stats.a1.n_valid' is 2.5: counts must be whole"),
    ({"n_valid": "1e999"}, "field 'agent_stats.a1.n_valid' is inf"),
])
def test_impossible_calibration_is_refused_with_the_field(tmp_path, base, edit, says,
                                                          checksummed):
    data = _calibration(**edit)
    text = json.dumps(data)
    if edit.get("n_valid") == "1e999":  # a JSON number Python reads as inf
        text = text.replace('"1e999"', "1e999")
        data = json.loads(text)
    if checksummed:  # a file that was written so, not changed after its fit
        data[CHECKSUM_FIELD] = content_checksum(data)
        text = json.dumps(data).replace('"n_valid": Infinity', '"n_valid": 1e999')
    path = tmp_path / "cal.json"
    path.write_text(text)
    base["method_args"] = {}  # full DarkForest: it reads the calibration
    base["calibration"]["path"] = str(path)
    out = _cli("run", "--config", str(_write(tmp_path, base)))
    one_line(out, 2, "calibration.path", "cal.json", says)
    assert "Ray" not in out.stdout + out.stderr  # refused before Ray starts


def test_a_calibration_of_impossible_size_is_refused(tmp_path, base):
    data = _calibration()
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(data).replace('"n_samples": 4', '"n_samples": 1e999'))
    base["method_args"] = {}
    base["calibration"]["path"] = str(path)
    one_line(_cli("run", "--config", str(_write(tmp_path, base))), 2,
             "cal.json", "field 'n_samples' is inf")
