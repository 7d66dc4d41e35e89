"""The method core is plain Python: importing it pulls in no cluster, engine or data stack."""

from __future__ import annotations

import subprocess
import sys

FORBIDDEN = ("ray", "mlflow", "vllm", "llama_cpp", "torch", "datasets", "pandas", "pyarrow")

SCRIPT = f"""
import sys
import df_ray.core
import df_ray.core.belief, df_ray.core.calibration, df_ray.core.disclosure
import df_ray.core.guardrail, df_ray.core.voting
bad = sorted(m for m in sys.modules
             if m.split(".")[0] in {FORBIDDEN!r})
print("\\n".join(bad))
sys.exit(1 if bad else 0)
"""


def test_core_imports_no_heavy_dependencies():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, f"forbidden modules imported:\n{proc.stdout}{proc.stderr}"


def test_core_public_api():
    import df_ray.core as core

    for name in ("Observation", "ParseSpec", "Cluster", "Belief", "Decision", "parse",
                 "canonicalize", "extract_confidence", "BeliefConfig", "build_belief",
                 "Calibration", "CalibrationRecord", "fit_calibration", "load_calibration",
                 "GuardrailConfig", "decide", "needs_coordinator", "is_trusted", "disclose",
                 "Evidence", "majority_vote", "weighted_vote"):
        assert name in core.__all__ and hasattr(core, name), name
