"""Several users of one machine or cluster: what one can do to another's files, checked by
the effect (a file overwritten or not, a folder written outside ``users/``, a model file
hashed again)."""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
from pathlib import Path

import pytest

from df_ray.engines import models
from df_ray.storage import current_user, seed_calibration, validate_user
from df_ray.tracking import locks


def test_a_planted_symlink_does_not_make_a_lock_overwrite_another_file(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    d = tmp_path / "locks"
    d.mkdir()
    (d / "sweep.lock").symlink_to(victim)
    with pytest.raises(OSError), locks.exclusive(d, ["sweep"]):
        pass
    assert victim.read_text() == "precious"


def test_a_lock_folder_that_is_a_link_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(locks.LockDirError, match="link"), locks.exclusive(link, ["a"]):
        pass
    assert not list(real.iterdir())


def test_temporary_lock_folders_are_per_user_and_private():
    d = locks.lock_dir("http://tracking:5000")
    assert d.parent.name == f"df_ray-locks-{os.getuid()}"
    with locks.exclusive(d, ["x"]):
        pass
    assert (d.parent.stat().st_mode & 0o077) == 0 or d.parent.stat().st_uid == os.getuid()
    assert ((d / "x.lock").stat().st_mode & 0o777) == 0o600


@pytest.mark.parametrize("name", ["..", ".", "../alice", "a/b", ".hidden", "a\\b"])
def test_user_names_that_leave_users_are_refused(name, monkeypatch):
    with pytest.raises(ValueError, match="not a valid user name"):
        validate_user(name)
    monkeypatch.setenv("DF_RAY_USER", name)
    with pytest.raises(ValueError, match="DF_RAY_USER"):
        current_user()


def test_ordinary_user_names_are_kept(monkeypatch):
    monkeypatch.setenv("DF_RAY_USER", "alice.b-2")
    assert current_user() == "alice.b-2"


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"})


def test_a_modified_calibration_file_is_not_seeded_and_a_differing_one_is_reported(
        tmp_path, caplog):
    repo = tmp_path / "checkout"
    src = repo / "calibration"
    src.mkdir(parents=True)
    (src / "a.json").write_text('{"k": 2}')
    (src / "b.json").write_text('{"k": 1}')
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "x")
    (src / "a.json").write_text('{"k": 999}')  # modified in this checkout
    (src / "c.json").write_text('{"k": 3}')  # untracked
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "b.json").write_text('{"k": "other"}')
    with caplog.at_level(logging.WARNING, logger="df_ray.storage"):
        assert seed_calibration(src, shared) == 0
    assert not (shared / "a.json").exists() and not (shared / "c.json").exists()
    assert (shared / "b.json").read_text() == '{"k": "other"}'
    text = caplog.text
    assert "differs from this job's copy" in text and "b.json" in text
    assert "differs from the committed file" in text


def test_a_model_rewritten_in_place_with_its_mtime_restored_is_hashed_again(tmp_path):
    data = b"pinned model bytes" * 100
    path = tmp_path / "m.gguf"
    path.write_bytes(data)
    import dataclasses

    model = dataclasses.replace(next(iter(models.CHUNKED_MODELS.values())), size=len(data),
                                sha256=hashlib.sha256(data).hexdigest())
    models.verify(model, path)
    st = path.stat()
    evil = bytearray(data)
    evil[0] ^= 1
    with open(path, "r+b") as f:  # same inode, same size
        f.write(bytes(evil))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_mtime_ns == st.st_mtime_ns and path.stat().st_ino == st.st_ino
    with pytest.raises(models.ModelIntegrityError, match="sha256"):
        models.verify(model, path)
