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
