"""The MATH benchmark's own answer extraction and equivalence, as lm-evaluation-harness ships
them (``lm_eval/tasks/hendrycks_math/utils.py``: ``last_boxed_only_string``,
``remove_boxed``, ``is_equiv`` with ``strip_string``, from hendrycks/math).

The module is loaded from the installed ``lm_eval`` package by its file, without importing
``lm_eval.tasks`` (whose package import needs the harness's metric dependencies).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType


def _load() -> ModuleType:
    spec = importlib.util.find_spec("lm_eval")
    if spec is None or spec.origin is None:
        raise ImportError("lm-eval is a test dependency (scripts/setup.sh)")
    path = Path(spec.origin).parent / "tasks" / "hendrycks_math" / "utils.py"
    mod_spec = importlib.util.spec_from_file_location("lm_eval_hendrycks_math_utils", path)
    mod = importlib.util.module_from_spec(mod_spec)  # type: ignore[arg-type]
    mod_spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


_MOD = _load()


def extract(text: str) -> str | None:
    """The answer MATH's evaluation reads: the last ``\\boxed{...}`` (or ``\\boxed x``,
    ``\\fbox{...}``) without its wrapper; None when there is none or it is never closed."""
    boxed = _MOD.last_boxed_only_string(text)
    if boxed is None:
        return None
    try:
        return _MOD.remove_boxed(boxed)
    except AssertionError:
        return None


def is_equiv(a: str, b: str) -> bool:
    return bool(_MOD.is_equiv(a, b))
