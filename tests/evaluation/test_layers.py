"""The layers: no import cycle between df_ray's modules (deferred imports included), and the
evaluation layer runs without Ray, MLflow or an engine backend."""

from __future__ import annotations

import ast
import itertools
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "df_ray"


def _module(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, modules: set[str], strings: bool = True) -> set[str]:
    """df_ray modules a module imports, anywhere in it (inside functions too), or (with
    ``strings``) names in a string (``"df_ray.x.y"``, ``"df_ray.x.y:Class"``: what a
    registry or a helper process imports by name)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif strings and isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = [node.value.split(":")[0]]
        for n in names:
            if n in modules:
                out.add(n)
    return out


#: Deferred imports (inside a function) that close a loop on purpose (none: the sandbox's
#: planner, not its policy, probes what the runner can do on this machine), and modules named
#: in a string that import the module naming them.
DEFERRED_LOOPS: set[tuple[str, str]] = {
    # engine kinds are listed by name in engines.spec, whose modules import it
    ("df_ray.engines.spec", "df_ray.engines.llama_cpp"),
    ("df_ray.engines.spec", "df_ray.engines.openai_http"),
    ("df_ray.engines.spec", "df_ray.engines.vllm"),
    ("df_ray.engines.spec", "df_ray.engines.simulated"),
    ("df_ray.engines.spec", "df_ray.engines.scripted"),
    ("df_ray.engines.spec", "df_ray.serving.engine"),
    # the pool providers too (the serving layer's client)
    ("df_ray.engines.spec", "df_ray.serving.client")}


def import_graph() -> dict[str, set[str]]:
    files = {_module(p): p for p in PACKAGE.rglob("*.py")}
    mods = set(files)
    return {m: {n for n in _imports(p, mods) if n != m and (m, n) not in DEFERRED_LOOPS}
            for m, p in files.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            # a package's __init__ importing its own submodules is not a cycle
            if n.startswith(m + "."):
                continue
            if state.get(n) == 1:
                return [*stack[stack.index(n):], n]
            if state.get(n) is None and (c := visit(n)):
                return c
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if state.get(m) is None and (c := visit(m)):
            return c
    return None


def test_no_import_cycles():
    graph = import_graph()
    assert "df_ray.pipeline.runner" not in graph["df_ray.pipeline.stages"]
    assert "df_ray.core.calibration" not in graph["df_ray.core.belief"]
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def room(module: str) -> str:
    """A module's room, as the house is drawn: a module at df_ray's top level, or a folder
    under it whole (``df_ray.pipeline.runner`` is in ``df_ray.pipeline``)."""
    return ".".join(module.split(".")[:2])


def room_arrows() -> dict[tuple[str, str], set[tuple[str, str]]]:
    """(room, room it imports) -> the module imports that draw that arrow: imports only
    (anywhere in a module), as the house's floors are measured."""
    files = {_module(p): p for p in PACKAGE.rglob("*.py")}
    arrows: dict[tuple[str, str], set[tuple[str, str]]] = {}
    for m, p in files.items():
        for n in _imports(p, set(files), strings=False):
            if room(m) != room(n):
                arrows.setdefault((room(m), room(n)), set()).add((m, n))
    return arrows


def test_no_room_imports_a_room_above_it():
    """Every room stands on a floor above all the rooms it imports: no loop of rooms, so no
    arrow climbs a floor. A failure names the loop and the imports that close it."""
    arrows = room_arrows()
    graph: dict[str, set[str]] = {}
    for a, b in arrows:
        graph.setdefault(a, set()).add(b)
    loop = _cycle(graph)
    if loop is not None:
        through = [f"{m} imports {n}" for a, b in itertools.pairwise(loop)
                   for m, n in sorted(arrows[a, b])]
        pytest.fail(f"rooms in a loop: {' -> '.join(loop)}; through {'; '.join(through)}")


def test_the_room_check_sees_an_import_that_climbs():
    """The check above fails on one upward import: the configuration importing the pipeline
    (which imports the configuration) is a loop of rooms."""
    arrows = room_arrows()
    assert ("df_ray.config", "df_ray.pipeline") not in arrows
    assert ("df_ray.pipeline", "df_ray.config") in arrows
    graph: dict[str, set[str]] = {}
    for a, b in [*arrows, ("df_ray.config", "df_ray.pipeline")]:
        graph.setdefault(a, set()).add(b)
    loop = _cycle(graph)
    assert loop is not None and {"df_ray.config", "df_ray.pipeline"} <= set(loop)


def test_evaluation_imports_no_cluster_stack():
    script = ("import sys, df_ray, df_ray.evaluation, df_ray.evaluation.calibration_files\n"
              "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
              "{'ray', 'mlflow', 'vllm', 'llama_cpp', 'torch'})\n"
              "print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
