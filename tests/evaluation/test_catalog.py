"""Config you can discover: every configuration field and method argument has a
description; ``df-ray list`` names every registered method, benchmark, engine kind and answer
kind, ``df-ray list NAME`` what each takes; docs/running.md's configuration reference is the
one the models generate."""

from __future__ import annotations

from pathlib import Path

import pytest

from df_ray import catalog
from df_ray.cli import main
from df_ray.methods import REGISTRY as METHODS
from df_ray.methods import method_class

RUNNING = Path(__file__).resolve().parents[2] / "docs" / "running.md"


def test_every_config_field_has_a_description():
    for model in catalog.config_models():
        for name, f in model.model_fields.items():
            assert f.description, f"{model.__name__}.{name} has no description="


def test_df_ray_list_names_everything_registered(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    for section, reg in catalog.registries().items():
        assert f"{section}:" in lines
        for name in reg:
            line = next((x for x in lines if x.split()[:1] == [name]), None)
            assert line is not None, (section, name)
            assert len(line.split(None, 1)) == 2, f"{name}: no one-line description"


@pytest.mark.parametrize("name", sorted({n for reg in catalog.registries().values()
                                         for n in reg}))
def test_df_ray_list_name_says_what_it_takes(capsys, name):
    assert main(["list", name]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{name} (")
    if name in METHODS:
        for arg, f in method_class(name).Args.model_fields.items():
            assert f"    {arg} (" in out and f.description in out, (name, arg)


def test_df_ray_list_of_an_unknown_name_is_one_line(capsys):
    assert main(["list", "nonesuch"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'nonesuch'" in err and "darkforest" in err


def test_the_docs_config_reference_is_the_generated_one():
    text = RUNNING.read_text()
    begin = text.index(catalog.REFERENCE_BEGIN)
    end = text.index(catalog.REFERENCE_END) + len(catalog.REFERENCE_END)
    assert text[begin:end] == catalog.config_reference(), (
        "docs/running.md's configuration reference is out of date: regenerate it with "
        "`python -m df_ray.catalog`")


def described_fields(tree, path=""):
    """Every field entry (a mapping with a type and a default) in ``df-ray list --json``'s
    output, with where it is and its description."""
    if isinstance(tree, dict):
        if "type" in tree and "default" in tree:
            yield path, tree.get("description", "")
        for key, value in tree.items():
            yield from described_fields(value, f"{path}.{key}" if path else key)


def test_df_ray_list_json_describes_every_field():
    """Everything ``df-ray list --json`` emits, walked: every field has a description (a
    fresh process, so only what df_ray itself registers is listed)."""
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "df_ray.cli", "list", "--json"],
                         capture_output=True, text=True, check=True).stdout
    data = json.loads(out)
    fields = list(described_fields(data))
    missing = [where for where, desc in fields if not desc]
    assert not missing, f"fields without a description: {', '.join(missing)}"
    sections = {where.split(".")[0] for where, _ in fields}
    assert sections == {"config", "methods", "benchmarks", "engine kinds", "answer kinds"}
    for where in ("config.EngineSpec.replicas", "engine kinds.vllm.fields.dtype",
                  "benchmarks.humaneval.benchmark_args.candidates",
                  "answer kinds.choice.options.n_options",
                  "methods.darkforest.method_args.guardrail.fields.tau_p"):
        assert where in dict(fields), where


def test_a_field_without_a_description_is_found(monkeypatch):
    """The walk above finds an undescribed field: a benchmark whose argument has none."""
    from df_ray import tasks
    from df_ray.tasks.base import BaseTask

    class Quiet(BaseTask):
        kind = "choice"

        def __init__(self, *, size: int = 3, shuffle: bool = False):
            """A toy.

            Args:
                size: how many
                    (of them).
            """

    import types

    mod = types.ModuleType("quiet_task_for_catalog")
    mod.Quiet = Quiet
    monkeypatch.setitem(__import__("sys").modules, mod.__name__, mod)
    monkeypatch.setitem(tasks.REGISTRY, "quiet", f"{mod.__name__}:Quiet")
    found = dict(described_fields(catalog.as_json()))
    assert found["benchmarks.quiet.benchmark_args.size"] == "how many (of them)"
    assert found["benchmarks.quiet.benchmark_args.shuffle"] == ""
