"""A quiet first run: no runpy warning from a module run as a script; Ray's
token-authentication warning gone at its cause (df_ray states the mode Ray would pick,
RAY_AUTH_MODE=token, before Ray is imported); Ray's error-level line about Ray Data's
constructor arguments explained in one line of df_ray's own."""

from __future__ import annotations

import subprocess
import sys

import pytest

from df_ray.pipeline.lifecycle import OBJECT_STORE_NOTE
from tests.helpers import base_config, cli_env, run_to_end, write_mmlu_goa, write_sweep

PROBE = ("import os; from df_ray.pipeline.local_ray import token_auth_for_local_ray as t; "
         "print(t({address!r}), os.environ.get('RAY_AUTH_MODE'))")


@pytest.mark.parametrize("address, env, says", [
    (None, {}, "True token"),                              # a local Ray of df_ray's own
    ("ray://head:10001", {}, "False None"),                # joins a cluster: its own mode
    (None, {"RAY_ADDRESS": "auto"}, "False None"),         # likewise (ray job submit)
    (None, {"RAY_AUTH_MODE": "disabled"}, "False disabled"),  # the user's choice stands
])
def test_a_local_ray_gets_its_auth_mode_said(address, env, says):
    base = {k: v for k, v in cli_env().items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
    out = subprocess.run([sys.executable, "-c", PROBE.format(address=address)],
                         env={**base, **env}, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == says


@pytest.mark.parametrize("module, rc", [
    ("df_ray.engines.models", 2),   # scripts/setup.sh runs it (here: its usage line)
    ("df_ray.reporting.paper", 0),  # docs/experiments.md is rendered by it
])
def test_a_module_run_as_a_script_warns_nothing(module, rc):
    """The package of a module that also runs as a script (``python -m``) has not imported
    it, so runpy has no RuntimeWarning for a newcomer's first screen."""
    done = subprocess.run([sys.executable, "-m", module], capture_output=True, text=True,
                          env=cli_env())
    assert done.returncode == rc, done.stderr
    assert "Warning" not in done.stderr, done.stderr


@pytest.mark.slow
def test_a_run_prints_no_token_warning_and_explains_ray_s_object_store_line(tmp_path,
                                                                           monkeypatch):
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)  # as on a newcomer's shell
    src = write_mmlu_goa(tmp_path / "mmlu.json", 2)
    sweep = write_sweep(tmp_path / "sweep.yaml", base_config(tmp_path, src), [{"name": "a"}])
    log = tmp_path / "run.log"
    assert run_to_end(["run", "--config", str(sweep)], log, None, 600) == 0, log.read_text()
    text = log.read_text(errors="replace")
    assert "Token authentication" not in text, text
    if "constructor arguments in the object store" in text:  # Ray's line, where Ray logs it
        assert text.index(OBJECT_STORE_NOTE) < text.index("constructor arguments in the object")
