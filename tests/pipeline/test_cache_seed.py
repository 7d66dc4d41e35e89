"""``df-ray cache seed``: a folder of parts (the committed reproduction cache) becomes the own
cache of whoever runs it, served as their own; a folder that is not a cache, or a root that
holds a differing part of the same name, is refused before anything is copied."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from df_ray.pipeline.cache import SCHEMA, GenerationCache, entry_checksum
from df_ray.pipeline.cache.seed import NotACache, seed_root
from tests.helpers import REPO, cli_env

FIXTURE = REPO / "tests" / "fixtures" / "cpu_humaneval" / "generations"


def fixture_keys() -> set[str]:
    keys: set[str] = set()
    for p in FIXTURE.glob("part-*.parquet"):
        keys |= set(pq.read_table(p, columns=["key"]).column("key").to_pylist())
    return keys


def test_the_committed_cache_seeds_a_root_whose_user_replays_every_key(tmp_path):
    root = tmp_path / "users" / "nobody" / "generations"
    r = seed_root(FIXTURE, root, "nobody")
    names = sorted(p.name for p in FIXTURE.glob("part-*.parquet"))
    assert sorted(r.copied) == names and r.present == ()
    assert r.keys_copied == r.keys_total == len(fixture_keys())
    for n in names:  # byte for byte
        assert (root / n).read_bytes() == (FIXTURE / n).read_bytes()
    assert not [p for p in root.iterdir() if p.name.startswith(".")]  # no temporary left
    cache = GenerationCache(str(root), user="nobody")
    assert set(cache.keys()) == fixture_keys() and not cache.foreign_skipped
    key = sorted(fixture_keys())[0]
    assert cache.get(key) is not None
    again = seed_root(FIXTURE, root, "nobody")  # a second seeding copies nothing
    assert again.copied == () and sorted(again.present) == names
    assert again.keys_copied == 0 and again.keys_total == r.keys_total


def test_a_folder_that_is_no_cache_is_refused_and_nothing_is_copied(tmp_path):
    root = tmp_path / "root"
    with pytest.raises(NotACache, match="is not a folder"):
        seed_root(FIXTURE / "no-such", root, "u")
    with pytest.raises(NotACache, match="holds no part-"):
        seed_root(FIXTURE.parent, root, "u")
    bad = tmp_path / "bad"
    shutil.copytree(FIXTURE, bad)
    (bad / "part-0-garbage.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(NotACache, match=r"part-0-garbage\.parquet is not a readable"):
        seed_root(bad, root, "u")
    other = tmp_path / "other"
    other.mkdir()
    pq.write_table(pa.table({"key": ["k"], "value": [1]}), other / "part-1-x.parquet")
    with pytest.raises(NotACache, match="has no text, prompt_tokens, completion_tokens column"):
        seed_root(other, root, "u")
    assert not root.exists()  # every refusal came before anything was written


def test_a_differing_part_of_the_same_name_is_never_replaced(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    first = sorted(FIXTURE.glob("part-*.parquet"))[0]
    (root / first.name).write_bytes(b"someone else's part")
    with pytest.raises(NotACache, match="already exists with other bytes"):
        seed_root(FIXTURE, root, "u")
    assert (root / first.name).read_bytes() == b"someone else's part"
    assert [p.name for p in root.iterdir()] == [first.name]  # nothing else copied either


def _part_of(tmp_path, writer: str):
    src = tmp_path / "src"
    src.mkdir(parents=True)
    schema = SCHEMA.with_metadata({b"df_ray.writer.user": writer.encode()})
    row = {"key": "k1", "model": "m", "revision": "", "seed": 0, "text": "t",
           "prompt_tokens": 1, "completion_tokens": 1, "created": 0.0, "finish_reason": "stop",
           "checksum": entry_checksum("k1", "t", 1, 1, "stop")}
    pq.write_table(pa.Table.from_pylist([row], schema=schema), src / "part-1-alice.parquet")
    return src


def test_a_part_another_writer_wrote_is_copied_and_said(tmp_path):
    r = seed_root(_part_of(tmp_path, "alice"), tmp_path / "root", "bob")
    assert r.copied == ("part-1-alice.parquet",) and r.foreign == {
        "part-1-alice.parquet": "alice"}
    assert "cache_read_from: ['alice']" in r.describe()
    assert "k1" not in GenerationCache(str(tmp_path / "root"), user="bob")  # as said
    assert "k1" in GenerationCache(str(tmp_path / "root"), user="bob", read_from=["alice"])
    assert seed_root(_part_of(tmp_path / "b", "bob"), tmp_path / "b" / "root", "bob").foreign == {}


@pytest.mark.slow  # df-ray subprocesses
def test_cli_seeds_the_homes_own_cache_with_user_unset(tmp_path):
    env = cli_env()
    for var in ("USER", "LOGNAME", "DF_RAY_USER"):
        env.pop(var, None)
    env["DF_RAY_HOME"] = str(tmp_path / "home")
    cmd = [sys.executable, "-m", "df_ray.cli", "cache", "seed"]
    out = subprocess.run([*cmd, str(FIXTURE)], capture_output=True, text=True, timeout=120,
                         cwd=REPO, env=env)
    assert out.returncode == 0, out.stderr
    users = list((tmp_path / "home" / "users").iterdir())
    assert len(users) == 1 and users[0].name  # the login name, never users//
    root = users[0] / "generations"
    n, parts = len(fixture_keys()), len(list(FIXTURE.glob("part-*.parquet")))
    assert out.stdout.strip() == (f"seeded {root}: {parts} of {parts} parts copied ({n} keys), 0 already "
                                  f"there byte for byte; the root now holds the source's "
                                  f"{n} keys")
    # what a run of that user opens: its own cache, every key its own
    who = subprocess.run([sys.executable, "-c", "from df_ray.config import default_cache_root;"
                          "print(default_cache_root())"], capture_output=True, text=True,
                         timeout=60, cwd=REPO, env=env)
    assert who.stdout.strip() == str(root)
    assert set(GenerationCache(str(root), user=users[0].name).keys()) == fixture_keys()
    bad = subprocess.run([*cmd, str(FIXTURE.parent)], capture_output=True, text=True,
                         timeout=120, cwd=REPO, env=env)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip().splitlines() == [
        f"df-ray: cache seed: {FIXTURE.parent} is not a generation cache: it holds no "
        "part-*.parquet file"]
    assert sorted(os.listdir(root)) == sorted(os.listdir(FIXTURE))
