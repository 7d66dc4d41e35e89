"""GoA's files as the default data of MMLU-Pro and GPQA: the pinned commit, the cache, the
SHA-256 check and the offline refusal (the tests run offline, tests/conftest.py)."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from df_ray.tasks import goa
from df_ray.tasks.gpqa import GPQATask
from df_ray.tasks.mmlu_pro import MMLUProTask

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _cached(monkeypatch, tmp_path, benchmark: str, fixture: str) -> Path:
    """A copy of a fixture in GoA's schema where the cache keeps GoA's file, pinned to the
    fixture's own hash (the real file's hash is pinned in df_ray.tasks.goa)."""
    monkeypatch.setenv("DF_RAY_HOME", str(tmp_path))
    src = FIXTURES / fixture
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    real = goa.FILES[benchmark]
    monkeypatch.setitem(goa.FILES, benchmark, goa.GoAFile(real.path, digest, real.rows))
    dest = goa.cache_dir() / real.name
    dest.parent.mkdir(parents=True)
    shutil.copy(src, dest)
    return dest


def test_the_pin_is_a_commit_and_each_file_has_its_hash():
    assert len(goa.COMMIT) == 40 and int(goa.COMMIT, 16) >= 0
    assert goa.FILES["gpqa"].url == (
        f"https://raw.githubusercontent.com/UNITES-Lab/GoA/{goa.COMMIT}/data/test/GPQA_test.json")
    assert {f.rows for f in goa.FILES.values()} == {2100, 198}
    assert all(len(f.sha256) == 64 for f in goa.FILES.values())


def test_offline_without_a_cached_copy_says_what_to_do(monkeypatch, tmp_path):
    monkeypatch.setenv("DF_RAY_HOME", str(tmp_path))
    with pytest.raises(goa.GoADataUnavailable) as e:
        GPQATask().load("test")
    msg = str(e.value)
    assert "offline" in msg and goa.FILES["gpqa"].url in msg and "source=" in msg


def test_the_default_reads_the_cached_file_and_refuses_a_changed_one(monkeypatch, tmp_path):
    dest = _cached(monkeypatch, tmp_path, "gpqa", "gpqa_goa.json")
    rows = GPQATask().load("test")
    assert [s.gold for s in rows] == ["B", "D", "A"]
    assert rows == GPQATask().load("test", source=str(FIXTURES / "gpqa_goa.json"))
    dest.write_bytes(dest.read_bytes().replace(b"Newton", b"Newtom"))
    with pytest.raises(goa.GoADataUnavailable, match="sha256"):
        GPQATask().load("test")


def test_mmlu_pro_defaults_to_goa_s_file(monkeypatch, tmp_path):
    _cached(monkeypatch, tmp_path, "mmlu_pro", "mmlu_pro_goa.json")
    rows = MMLUProTask().load("test")
    assert rows == MMLUProTask().load("test", source=str(FIXTURES / "mmlu_pro_goa.json"))
