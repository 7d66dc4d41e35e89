"""docs/extending.md runs: its code blocks headed ``# parity_plugin.py`` are one plugin
module, written here from the page, and its ``# run`` block runs it with
``df_ray.evaluate`` (in a fresh process, so its registry lines are its own) and checks what
the page says it gives."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import cli_env

DOC = Path(__file__).resolve().parents[2] / "docs" / "extending.md"
REPO = DOC.parents[1]


def blocks(header: str) -> list[str]:
    """The page's python blocks whose first line is ``header``, in order."""
    found = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    return [b for b in found if b.splitlines()[0].strip() == header]


def test_the_page_s_plugin_is_one_module_and_its_run_block_runs(tmp_path):
    module = blocks("# parity_plugin.py")
    assert len(module) == 5  # answer kind, benchmark, method, engine kind, registry lines
    (tmp_path / "parity_plugin.py").write_text("\n\n".join(module))
    (run,) = blocks("# run")
    env = {"PYTHONPATH": f"{tmp_path}:{REPO}", "PATH": "/usr/bin:/bin",
           "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", run], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rows, metrics = done.stdout.strip().splitlines()[-2:]
    assert rows == str([(f"n{n}", "yes" if n % 2 == 0 else "no", True) for n in range(6)])
    assert metrics == "1.0 0.5"


def test_every_python_block_of_the_page_is_part_of_the_plugin_or_the_run():
    found = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert all(b.splitlines()[0].strip() in ("# parity_plugin.py", "# run") for b in found)


@pytest.mark.slow
def test_the_page_s_plugin_runs_on_ray_as_the_page_says(tmp_path):
    """The page's parity.yaml beside its plugin, through df-ray run on a local Ray: the
    workers import the plugin from the config's plugins: list, and the run gives the rows
    ``df_ray.evaluate`` gives."""
    (tmp_path / "parity_plugin.py").write_text("\n\n".join(blocks("# parity_plugin.py")))
    (config,) = re.findall(r"```yaml\n# parity.yaml\n(.*?)```", DOC.read_text(), re.S)
    (tmp_path / "parity.yaml").write_text(config)
    env = {**cli_env(), "PYTHONPATH": f"{tmp_path}:{REPO}"}
    done = subprocess.run([sys.executable, "-m", "df_ray.cli", "run", "--config",
                           "parity.yaml"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    row = next(line for line in done.stdout.splitlines()
               if line.startswith("parity-second-look"))
    assert row.split()[1:4] == ["second_look", "6", "100.0"], row
    assert "all 21 LLM calls succeeded" in done.stdout
