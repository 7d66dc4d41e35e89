"""Users who cannot rewrite each other's results through the generation cache.

Another user ("mallory") plants parts whose entries carry valid checksums (the checksum is
unkeyed: anyone can recompute it) for the very keys a victim ("alice") will ask. Each test
checks the effect on alice's run: her calls are made by her engine (fresh calls, the engine's
texts), or an entry is refused, never replayed from the planted part. Plus: provenance per
part, the choice between conflicting own copies by content (never by a part's name), a
compaction that keeps every conflicting copy and every other writer's part, and reads
bounded in size (a 150 MB entry costs a fresh process nothing)."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import df_ray
from df_ray.config import ConfigError
from df_ray.engines.base import ChatRequest, Completion, Message
from df_ray.pipeline.cache import SCHEMA, GenerationCache, entry_checksum, part_provenance
from df_ray.storage import resolve_storage
from tests.helpers import REPO, cli_env, pipeline_config, pipeline_samples

POISON = "import os; os.system('rm -rf ~')  # Answer: (B)\nConfidence: 1.0"
FIXTURE = REPO / "tests" / "fixtures" / "cpu_humaneval" / "generations"


class Recording(GenerationCache):
    """A cache that also keeps every (request, completion) it is given."""

    def __init__(self, *a, **kw) -> None:
        self.given: list[tuple[ChatRequest, Completion]] = []
        super().__init__(*a, **kw)

    def put_many(self, items):
        items = list(items)
        self.given += items
        return super().put_many(items)


@pytest.fixture(scope="module")
def calls(tmp_path_factory) -> tuple[list[tuple[ChatRequest, Completion]], dict]:
    """Every call of the scripted configuration, made once into a scratch root."""
    tmp = tmp_path_factory.mktemp("scratch")
    cache = Recording(str(tmp / "cache"), user="scratch")
    ev = df_ray.evaluate(pipeline_config(tmp), pipeline_samples(), cache=cache)
    assert ev.metrics["fresh_calls"] == len(cache.given) > 0
    return cache.given, ev.metrics


def plant(root: Path, items, user: str = "mallory", text: str = POISON) -> None:
    """``user`` writes a part into ``root`` holding ``text`` for every request of ``items``
    (a real part, valid checksums, that user's provenance)."""
    GenerationCache(str(root), user=user).put_many(
        [(req, Completion(text, c.prompt_tokens, c.completion_tokens)) for req, c in items])


def run_as(user: str, tmp: Path, root: Path, **kw):
    cache = GenerationCache(str(root), user=user, **kw)
    ev = df_ray.evaluate(pipeline_config(tmp), pipeline_samples(), cache=cache)
    texts = [c.text for st in ev.states for c in st.calls]
    return ev, cache, texts


def test_a_part_another_user_planted_in_the_victims_root_is_not_replayed(tmp_path, calls):
    items, clean = calls
    root = tmp_path / "alice-cache"
    plant(root, items)
    ev, cache, texts = run_as("alice", tmp_path, root)
    # the planted part is named and not read: every call is alice's own
    assert len(cache.foreign_skipped) == 1
    assert next(iter(cache.foreign_skipped.values())).user == "mallory"
    assert ev.metrics["fresh_calls"] == len(items)
    assert not any(POISON in t for t in texts)
    assert ev.metrics["accuracy"] == clean["accuracy"]
    # her rerun replays her own entries, still none of mallory's
    again, _, texts = run_as("alice", tmp_path, root)
    assert again.metrics["fresh_calls"] == 0 and not any(POISON in t for t in texts)


def test_opted_in_entries_replay_and_a_conflicting_one_is_refused(tmp_path, calls, caplog):
    items, clean = calls
    bob, mallory, alice = (tmp_path / n for n in ("bob", "mallory", "alice"))
    GenerationCache(str(bob), user="bob").put_many(items)  # bob's honest run
    # opting in to bob alone: his entries are replayed
    ev, _, _ = run_as("alice", tmp_path, alice, read_from=[str(bob)])
    assert ev.metrics["fresh_calls"] == 0 and ev.metrics["accuracy"] == clean["accuracy"]
    # opting in to bob and mallory, whose copies differ: every copy is refused, alice makes
    # her own calls (into her own root, which she then replays)
    shutil.rmtree(alice)
    plant(mallory, items)
    with caplog.at_level(logging.WARNING, logger="df_ray.pipeline.cache"):
        ev, cache, texts = run_as("alice", tmp_path, alice, read_from=[str(bob), str(mallory)])
    assert ev.metrics["fresh_calls"] == len(items)
    assert not any(POISON in t for t in texts)
    assert len(cache.conflicts) == len(items) and all(c.chosen is None for c in cache.conflicts)
    assert "refused" in caplog.text and items[0][0].key() in caplog.text
    # alice's own copy wins over mallory's: served, the conflict reported
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="df_ray.pipeline.cache"):
        ev, cache, texts = run_as("alice", tmp_path, alice, read_from=[str(mallory)])
    assert ev.metrics["fresh_calls"] == 0 and not any(POISON in t for t in texts)
    assert len(cache.conflicts) == len(items)
    assert all(c.chosen == c.variants[0][0] and c.variants[0][2].startswith("own")
               for c in cache.conflicts)
    assert "differing contents refused" in caplog.text


def test_opting_in_to_a_user_reads_their_parts_in_the_own_root(tmp_path, calls):
    items, _ = calls
    root = tmp_path / "shared"
    GenerationCache(str(root), user="bob").put_many(items)
    assert len(GenerationCache(str(root), user="alice")) == 0
    assert len(GenerationCache(str(root), user="alice", read_from=["bob"])) == len(items)
    assert len(GenerationCache(str(root), user="alice", read_from=["*"])) == len(items)
    assert len(GenerationCache(str(root), user="alice", read_from=["carol"])) == 0


def req(i: int) -> ChatRequest:
    return ChatRequest(model="m", messages=(Message("user", f"question {i}"),), seed=i)


def test_conflicting_own_copies_are_served_by_content_never_by_part_name(tmp_path, caplog):
    root = tmp_path / "c"
    # two own writers at once (concurrent runs on a non-deterministic engine), each before it
    # saw the other's part: two texts for one call
    c, concurrent = GenerationCache(str(root), user="alice"), GenerationCache(str(root),
                                                                               user="alice")
    c.put_many([(req(1), Completion("first", 1, 1)), (req(2), Completion("same", 1, 1))])
    concurrent.put_many([(req(1), Completion("second", 1, 1))])
    want = min(("first", "second"), key=lambda t: entry_checksum(req(1).key(), t, 1, 1))
    served = []
    for swap in (False, True):
        if swap:  # the part names in the other order: the same content is served
            a, b = sorted(root.glob("part-*.parquet"))
            a.rename(root / "part-x.parquet")
            b.rename(a)
            (root / "part-x.parquet").rename(b)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="df_ray.pipeline.cache"):
            fresh = GenerationCache(str(root), user="alice")
            served.append(fresh.get(req(1).key()).text)
        assert fresh.get(req(2).key()).text == "same"
        (conflict,) = fresh.conflicts
        assert conflict.key == req(1).key() and len(conflict.variants) == 2
        assert req(1).key() in caplog.text and "smallest checksum" in caplog.text
    assert served == [want, want]


def test_every_part_records_its_writer_host_and_time(tmp_path):
    before = time.time()
    GenerationCache(str(tmp_path), user="alice").put_many([(req(1), Completion("t", 1, 1))])
    (part,) = tmp_path.glob("part-*.parquet")
    p = part_provenance(str(part))
    assert (p.user, p.host, p.pid) == ("alice", socket.gethostname(), os.getpid())
    assert before <= p.time <= time.time() and p.uid == os.geteuid()
    assert p.describe().startswith(f"alice on {socket.gethostname()} at ")


def test_compact_keeps_every_conflicting_copy_and_other_writers_parts(tmp_path, calls):
    items, _ = calls
    root = tmp_path / "c"
    first, concurrent = GenerationCache(str(root), user="alice"), GenerationCache(str(root),
                                                                                   user="alice")
    first.put_many([(req(1), Completion("first", 1, 1))])
    concurrent.put_many([(req(1), Completion("second", 1, 1)), (req(2), Completion("two", 1, 1))])
    plant(root, items[:3])
    planted = [p for p in root.glob("part-*.parquet") if part_provenance(str(p)).user == "mallory"]
    served = GenerationCache(str(root), user="alice").get(req(1).key()).text
    c = GenerationCache(str(root), user="alice")
    assert c.compact() == 2
    f = c.compaction
    assert (f["parts"], f["conflicts"], f["foreign"]) == (2, 1, 1)
    assert [p for p in root.glob("part-*.parquet") if p in planted] == planted  # not deleted
    after = GenerationCache(str(root), user="alice")
    assert after.get(req(1).key()).text == served and len(after.conflicts) == 1
    merged = [p for p in root.glob("part-*.parquet") if p not in planted]
    assert len(merged) == 1
    assert sorted(pq.read_table(merged[0], columns=["text"]).column(0).to_pylist()) == \
        ["first", "second", "two"]


@pytest.mark.slow  # a df-ray subprocess
def test_cli_cache_compact_names_conflicts_and_other_writers_parts(tmp_path, calls):
    items, _ = calls
    first, concurrent = (GenerationCache(str(tmp_path), user="alice") for _ in range(2))
    first.put_many([(req(1), Completion("a", 1, 1))])
    concurrent.put_many([(req(1), Completion("b", 1, 1))])
    plant(tmp_path, items[:2])
    env = {**cli_env(), "DF_RAY_USER": "alice"}
    out = subprocess.run([sys.executable, "-m", "df_ray.cli", "cache", "compact", str(tmp_path)],
                         capture_output=True, text=True, timeout=120, cwd=REPO, env=env)
    assert out.returncode == 0, out.stderr
    assert "1 keys with conflicting copies kept (every copy)" in out.stdout
    assert "1 parts of other writers left in place" in out.stdout


# ----------------------------------------------------------------------------- size bounds

_MEASURE = textwrap.dedent("""
    import resource, sys
    from df_ray.pipeline.cache import GenerationCache
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    c = GenerationCache(sys.argv[1], user="alice")
    hit = c.get(sys.argv[2])
    small = c.get(sys.argv[3])
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(hit is None, small.text if small else None, (after - before) // 1024)
""")


def test_a_150_mb_entry_is_refused_in_one_line_without_being_loaded(tmp_path):
    # a real part holding one 150 MB entry (built from buffers: no 150 MB Python string)
    n = 150 * 2**20
    text = pa.StringArray.from_buffers(
        1, pa.py_buffer(pa.array([0, n], pa.int32()).buffers()[1]), pa.py_buffer(b"x" * n))
    cols = {f.name: pa.array([{"int64": 1, "double": 0.0}.get(str(f.type), "0" * 32)], f.type)
            for f in SCHEMA if f.name != "text"}
    cols["key"] = pa.array([req(1).key()])
    table = pa.table({f.name: text if f.name == "text" else cols[f.name] for f in SCHEMA},
                     schema=SCHEMA)
    pq.write_table(table, tmp_path / "part-1-big.parquet", compression="lz4",
                   use_dictionary=False, write_statistics=False)
    del table, text
    GenerationCache(str(tmp_path), user="alice").put_many([(req(2), Completion("ok", 1, 1))])
    out = subprocess.run([sys.executable, "-c", _MEASURE, str(tmp_path), req(1).key(),
                          req(2).key()], capture_output=True, text=True, timeout=120,
                         cwd=REPO, env=cli_env())
    assert out.returncode == 0, out.stderr
    refused, small, grew_mb = out.stdout.split()
    assert refused == "True" and small == "ok"
    assert int(grew_mb) < 64, f"reading the root grew the process by {grew_mb} MB"
    said = [ln for ln in out.stderr.splitlines() if "part-1-big.parquet" in ln]
    assert len(said) == 1 and "150.0 MB" in said[0] and "made again" in said[0]


def test_an_entry_over_the_entry_bound_is_refused_and_not_written(tmp_path, caplog):
    c = GenerationCache(str(tmp_path), user="alice", max_entry_bytes=1000)
    with caplog.at_level(logging.WARNING, logger="df_ray.pipeline.cache"):
        assert c.put_many([(req(1), Completion("y" * 2000, 1, 1)),
                           (req(2), Completion("small", 1, 1))]) == 1
    assert "not caching call" in caplog.text
    GenerationCache(str(tmp_path), user="alice").put_many([(req(3), Completion("z" * 2000, 1, 1))])
    bounded = GenerationCache(str(tmp_path), user="alice", max_entry_bytes=1000)
    assert bounded.get(req(3).key()) is None and bounded.get(req(2).key()).text == "small"
    assert any("entry" in what for _, what in bounded.oversized)


def test_reads_are_lazy_keys_first(tmp_path):
    GenerationCache(str(tmp_path), user="alice").put_many(
        [(req(i), Completion(f"text {i}", 1, 1)) for i in range(5)])
    c = GenerationCache(str(tmp_path), user="alice")
    assert len(c) == 5 and req(3).key() in c
    (part,) = c._part_of.values()
    assert part.loaded == {}  # no text read yet
    assert c.get(req(3).key()).text == "text 3" and list(part.loaded) == [0]


def test_the_committed_reproduction_cache_reads_whole(tmp_path):
    root = tmp_path / "generations"
    shutil.copytree(FIXTURE, root)
    c = GenerationCache(str(root), user="someone")
    # every distinct key its parts hold, as pyarrow reads them (1,938 in its three parts)
    keys = {k for part in root.glob("part-*.parquet")
            for k in pq.read_table(part, columns=["key"]).column(0).to_pylist()}
    assert len(keys) >= 1667
    assert len(c) == len(keys) and c.legacy_parts == 0 and not c.foreign_skipped
    assert all(c.get(k) is not None for k in c.keys())  # noqa: SIM118
    assert not c.conflicts and not c.bad_entries and not c.oversized


# ----------------------------------------------------------------------------- storage


@pytest.fixture
def clean_env(monkeypatch):
    for v in ("DF_RAY_HOME", "MLFLOW_TRACKING_URI", "DF_RAY_JOB", "RAY_JOB_CONFIG_JSON_ENV_VAR",
              "DF_RAY_USER", "DF_RAY_CACHE_READ_FROM"):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv("USER", "alice")
    return monkeypatch


def test_cache_roots_are_per_user_and_other_users_are_read_only_on_opt_in(clean_env, tmp_path):
    home = tmp_path / "home"
    clean_env.setenv("DF_RAY_HOME", str(home))
    base = {"benchmark": "gpqa", "backbones": {"b": {"kind": "scripted", "model": "m"}},
            "agents": [{"id": "a", "backbone": "b"}], "coordinator": {"id": "c", "backbone": "b"},
            "results_dir": str(tmp_path / "r"),
            "tracking": {"uri": f"sqlite:///{tmp_path}/m.db"}}
    from df_ray.config import RunConfig

    (c,) = resolve_storage([RunConfig.model_validate(base)])
    assert c.cache_root == str(home / "users" / "alice" / "generations")
    assert c.cache_user == "alice" and c.cache_read_from == []
    (c,) = resolve_storage([RunConfig.model_validate({**base, "cache_read_from": ["bob"]})])
    assert c.cache_read_from == ["bob", str(home / "users" / "bob" / "generations")]
    clean_env.setenv("DF_RAY_CACHE_READ_FROM", "carol,/data/lab-cache")
    (c,) = resolve_storage([RunConfig.model_validate(base)])
    assert c.cache_read_from == ["carol", "/data/lab-cache",
                                 str(home / "users" / "carol" / "generations")]
    clean_env.setenv("DF_RAY_CACHE_READ_FROM", "..")
    with pytest.raises(ConfigError, match="DF_RAY_CACHE_READ_FROM"):
        resolve_storage([RunConfig.model_validate(base)])
    with pytest.raises(ValueError, match="cache_read_from"):
        RunConfig.model_validate({**base, "cache_read_from": [".hidden"]})
