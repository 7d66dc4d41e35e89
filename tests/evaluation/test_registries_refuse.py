"""Registries refuse a taken name: a second method, benchmark, engine kind or answer kind
under a name already registered to another target is an error naming both (as Inspect,
lm-eval and Ray refuse); ``replace=True`` replaces on purpose; the same line again is a
no-op."""

from __future__ import annotations

import pytest

from df_ray.core.parsing import KINDS, register_kind
from df_ray.engines import ENGINE_KINDS, register_engine_kind
from df_ray.errors import RegistryError
from df_ray.methods import REGISTRY as METHODS
from df_ray.methods import register_method
from df_ray.tasks import REGISTRY as TASKS
from df_ray.tasks import register_task

CASES = [
    (METHODS, register_method, "single", "method"),
    (TASKS, register_task, "math", "benchmark"),
    (ENGINE_KINDS, register_engine_kind, "scripted", "engine kind"),
    (KINDS, register_kind, "choice", "answer kind"),
]


@pytest.mark.parametrize(("registry", "register", "taken", "what"), CASES,
                         ids=[c[3] for c in CASES])
def test_a_taken_name_is_refused_unless_replaced(monkeypatch, registry, register, taken,
                                                 what):
    held = registry[taken]
    with pytest.raises(RegistryError, match=rf"{what} '{taken}' is already registered "
                                            rf"\({held}\).*replace=True"):
        register(taken, "plugin_module:Other")
    assert registry[taken] == held  # nothing replaced
    register(taken, held)  # the same line again: nothing to refuse
    monkeypatch.setitem(registry, taken, held)  # restored after the test, whatever happens
    register(taken, "plugin_module:Other", replace=True)
    assert registry[taken] == "plugin_module:Other"


@pytest.mark.parametrize(("registry", "register", "taken", "what"), CASES,
                         ids=[c[3] for c in CASES])
def test_a_new_name_is_registered(registry, register, taken, what):
    assert "brand_new" not in registry
    try:
        register("brand_new", "plugin_module:New")
        assert registry["brand_new"] == "plugin_module:New"
    finally:
        registry.pop("brand_new", None)
    with pytest.raises(RegistryError, match="non-empty"):
        register(" ", "plugin_module:New")
