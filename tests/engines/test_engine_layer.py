"""The engines layer holds at run time: looking up any engine kind's spec in a fresh process
loads no module above the engines layer (its errors live in ``df_ray.errors``, below it)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from df_ray.engines.spec import ENGINE_KINDS

#: The layers above the engines: none may be imported to validate a backbone's spec.
ABOVE = ("df_ray.config", "df_ray.methods", "df_ray.tasks", "df_ray.evaluation",
         "df_ray.pipeline", "df_ray.tracking", "df_ray.reporting", "df_ray.cli",
         "df_ray.experiments", "df_ray.storage", "df_ray.sandbox", "df_ray.analysis")


@pytest.mark.parametrize("kind", sorted(ENGINE_KINDS))
def test_an_engine_kinds_spec_imports_nothing_above_the_engines(kind):
    script = (
        "import json, sys\n"
        "from df_ray.engines.spec import spec_class\n"
        "try:\n"  # validated, and refused (a bare model for a kind that needs more) too
        f"    spec_class({kind!r}).model_validate({{'kind': {kind!r}, 'model': 'm'}})\n"
        "except ValueError:\n"
        "    pass\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('df_ray'))))\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    above = [m for m in loaded if m.startswith(ABOVE)]
    assert above == [], f"engine kind {kind!r} loads {above}"
    # the kind's own module is loaded (a served kind's lives in the serving layer)
    assert ENGINE_KINDS[kind].split(":")[0] in loaded
