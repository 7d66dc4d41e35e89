"""notebooks/analysis.ipynb executes top to bottom on a small logged sweep (nbclient)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.reporting.logged_sweep import make_logged_sweep

nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "analysis.ipynb"
ROOT = NOTEBOOK.parents[1]


def _kernel_name() -> str:
    """The python3 kernel when it runs this interpreter (jupyter_client swaps a bare
    "python" in its argv for sys.executable); else a kernel spec installed into a temp dir."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        spec = KernelSpecManager().get_kernel_spec("python3")
        if spec.argv and spec.argv[0] in ("python", "python3", sys.executable):
            return "python3"
    except NoSuchKernel:
        pass
    from ipykernel.kernelspec import install

    install(user=False, prefix=sys.prefix, kernel_name="python3")
    return "python3"


@pytest.mark.slow
def test_analysis_notebook_executes(tmp_path, monkeypatch):
    uri, exp, _ = make_logged_sweep(tmp_path)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    params = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(params) == 1, "the notebook needs one cell tagged 'parameters'"
    params[0].source += (f"\nTRACKING_URI = {uri!r}\nEXPERIMENT = {exp!r}\n"
                         f"OUT_DIR = {str(tmp_path / 'nb_report')!r}\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name=_kernel_name(),
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    outputs = "\n".join(
        o.get("text", "") + str(o.get("data", {}).get("text/plain", ""))
        + str(o.get("data", {}).get("text/markdown", ""))
        for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert not any(o.get("output_type") == "error"
                   for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "overrides: 3 of 20 samples" in outputs
    assert "correct override" in outputs and "wrong override" in outputs
    assert any("image/png" in o.get("data", {})
               for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert (tmp_path / "nb_report" / f"{exp}_table.csv").is_file()
