"""Config input that cannot take the process down: each bad file exits 2 with one line
naming the file and the problem."""

from __future__ import annotations

import re

import pytest

from df_ray.cli import main
from df_ray.config import MAX_CONFIGURATIONS, ConfigError, load_config

BASE = """name: t
base:
  benchmark: math
  backbones: {a: {kind: scripted}}
  agents: [{id: a1, backbone: a}]
  coordinator: {id: c, backbone: a}
"""


# Lines the session's in-process Ray forwards from its own processes ("(pid=gcs_server) ...",
# "(raylet) ...", an earlier test's actor: "(MapWorker(...) pid=123) ...") can land on stderr
# at any time; they are not df-ray's output.
_RAY_FORWARDED = re.compile(r"^(\x1b\[[0-9;]*m)?\((pid=|raylet|gcs_server|.*\bpid=\d+\))")


def _one_line_error(path, capsys) -> str:
    assert main(["validate", "--config", str(path)]) == 2
    lines = [ln for ln in capsys.readouterr().err.strip().splitlines()
             if not _RAY_FORWARDED.match(ln)]
    err = "\n".join(lines)
    assert len(lines) == 1, err
    assert str(path) in err
    return err


def test_non_utf8(tmp_path, capsys):
    p = tmp_path / "bad.yaml"
    p.write_bytes(b"name: \xff\xfe\n")
    assert "UTF-8" in _one_line_error(p, capsys)


def test_overlong_integer(tmp_path, capsys):
    p = tmp_path / "int.yaml"
    p.write_text("seed: " + "9" * 50_000 + "\n")
    assert "integer is too long" in _one_line_error(p, capsys)


@pytest.mark.slow  # YAML 5,000 levels deep: tens of seconds under load
def test_deep_nesting(tmp_path, capsys):
    p = tmp_path / "deep.yaml"
    p.write_text("x: " + "[" * 5000 + "]" * 5000 + "\n")
    assert "nested" in _one_line_error(p, capsys)


def test_method_args_nesting_is_bounded(tmp_path, capsys):
    p = tmp_path / "margs.yaml"
    p.write_text(BASE + "  method_args: " + "{a: " * 12 + "1" + "}" * 12 + "\n")
    assert "method_args" in _one_line_error(p, capsys)


def test_directory(tmp_path, capsys):
    assert "is a directory" in _one_line_error(tmp_path, capsys)


def test_oversized_file(tmp_path, capsys):
    p = tmp_path / "big.yaml"
    p.write_text("# " + "x" * (2 * 1024 * 1024) + "\n")
    assert "limit" in _one_line_error(p, capsys)


def test_alias_bomb(tmp_path, capsys):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i-1}"] * 10) + "]")
    p = tmp_path / "bomb.yaml"
    p.write_text("\n".join(lines) + "\n")
    _one_line_error(p, capsys)


def test_grid_product_is_refused_before_expansion(tmp_path, capsys):
    p = tmp_path / "grid.yaml"
    p.write_text(BASE + "grid:\n" + "".join(
        f"  k{i}: [{', '.join(str(j) for j in range(100))}]\n" for i in range(6)))
    err = _one_line_error(p, capsys)
    assert str(100 ** 6) in err and "100 x 100" in err
    with pytest.raises(ConfigError, match=str(MAX_CONFIGURATIONS)):
        load_config(p)
