"""Storage that survives a job: relative paths under `ray job submit` resolve against
DF_RAY_HOME (or the job is refused before anything starts), and experiments get the user's
namespace on shared stores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from df_ray.config import ConfigError, RunConfig, load_config
from df_ray.storage import (
    current_user,
    experiment_name,
    in_ray_job,
    resolve_storage,
    seed_calibration,
)

REPO = Path(__file__).resolve().parents[2]


def cfg(**over) -> RunConfig:
    d = {"benchmark": "gpqa", "backbones": {"b": {"kind": "scripted", "model": "m"}},
         "agents": [{"id": "a", "backbone": "b"}], "coordinator": {"id": "c", "backbone": "b"},
         "tracking": {"uri": "sqlite:///mlflow.db", "experiment": "exp"},
         "calibration": {"dir": "calibration"}, "results_dir": "results",
         "cache_root": "cache"}
    d.update(over)
    return RunConfig.model_validate(d)


@pytest.fixture
def clean_env(monkeypatch):
    for v in ("DF_RAY_HOME", "MLFLOW_TRACKING_URI", "DF_RAY_JOB", "RAY_JOB_CONFIG_JSON_ENV_VAR",
              "DF_RAY_USER"):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv("USER", "alice")
    return monkeypatch


def test_job_detection(clean_env):
    assert not in_ray_job()
    clean_env.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", json.dumps({"runtime_env": {}}))
    assert in_ray_job()
    clean_env.setenv("DF_RAY_JOB", "0")
    assert not in_ray_job()


def test_outside_a_job_nothing_moves(clean_env):
    (c,) = resolve_storage([cfg()])
    assert c.results_dir == "results" and c.cache_root == "cache"
    assert c.calibration.dir == "calibration"
    assert c.tracking.uri == "sqlite:///mlflow.db"
    assert c.tracking.experiment == "exp"  # a local store: no namespace


def test_a_job_without_home_is_refused_naming_what_to_set(clean_env):
    with pytest.raises(ConfigError) as e:
        resolve_storage([cfg()], job=True)
    msg = str(e.value)
    for needle in ("DF_RAY_HOME", "MLFLOW_TRACKING_URI", "results_dir", "calibration.dir",
                   "cache_root", "tracking.uri"):
        assert needle in msg
    clean_env.setenv("DF_RAY_HOME", "relative/home")
    with pytest.raises(ConfigError, match="not an absolute path"):
        resolve_storage([cfg()], job=True)


def test_a_job_with_absolute_paths_needs_no_home(clean_env, tmp_path):
    c0 = cfg(results_dir=str(tmp_path / "r"), cache_root=str(tmp_path / "c"),
             calibration={"dir": str(tmp_path / "cal")},
             tracking={"uri": f"sqlite:///{tmp_path}/m.db", "experiment": "exp"})
    (c,) = resolve_storage([c0], job=True)
    assert c.results_dir == str(tmp_path / "r")
    assert c.tracking.uri == f"sqlite:///{tmp_path}/m.db"
    assert c.tracking.experiment == "alice/exp"  # a job: shared cluster, per-user namespace


def test_a_job_resolves_against_home(clean_env, tmp_path):
    home = tmp_path / "home"
    clean_env.setenv("DF_RAY_HOME", str(home))
    (c,) = resolve_storage([cfg()], job=True)
    assert c.results_dir == str(home / "users" / "alice" / "results")
    assert c.cache_root == str(home / "users" / "alice" / "cache")  # per user
    assert c.calibration.dir == str(home / "calibration")
    assert c.tracking.uri == f"sqlite:///{home}/mlflow.db"
    assert c.tracking.experiment == "alice/exp"
    # the lab's server wins over a relative local store
    clean_env.setenv("MLFLOW_TRACKING_URI", "http://mlflow.lab:5000")
    (c,) = resolve_storage([cfg()], job=True)
    assert c.tracking.uri == "http://mlflow.lab:5000"


def test_only_a_relative_store_and_a_server_need_no_home(clean_env, tmp_path):
    clean_env.setenv("MLFLOW_TRACKING_URI", "http://mlflow.lab:5000")
    c0 = cfg(results_dir=str(tmp_path / "r"), cache_root=str(tmp_path / "c"),
             calibration={"dir": str(tmp_path / "cal")})
    (c,) = resolve_storage([c0], job=True)
    assert c.tracking.uri == "http://mlflow.lab:5000"


def test_every_paper_sweep_file_runs_unchanged_on_a_configured_cluster(clean_env, tmp_path):
    clean_env.setenv("DF_RAY_HOME", str(tmp_path / "home"))
    clean_env.setenv("MLFLOW_TRACKING_URI", "http://mlflow.lab:5000")
    files = sorted((REPO / "jobs" / "configs").glob("*.yaml"))
    assert files
    for f in files:
        for c in resolve_storage(load_config(f).expand(), job=True):
            for path in (c.results_dir, c.cache_root, c.calibration.dir):
                assert "://" in path or Path(path).is_absolute(), (f.name, path)
            assert c.tracking.uri.startswith(("http://", "sqlite:////")), (f.name, c.tracking.uri)
            assert "/" in c.tracking.experiment


def test_experiment_namespace_rules(clean_env):
    assert experiment_name("e", "sqlite:///x.db", job=False) == "e"
    assert experiment_name("e", "http://h:5000", job=False) == "alice/e"
    assert experiment_name("e", "sqlite:///x.db", job=True) == "alice/e"
    assert experiment_name("bob/e", "http://h:5000") == "bob/e"  # explicit namespace kept
    assert experiment_name("e", "http://h:5000", per_user=False) == "e"
    assert experiment_name("e", "sqlite:///x.db", per_user=True, job=False) == "alice/e"
    clean_env.setenv("DF_RAY_USER", "carol smith")
    assert current_user() == "carol_smith"
    c0 = cfg(tracking={"uri": "http://h:5000", "experiment": "e", "per_user": False})
    assert resolve_storage([c0])[0].tracking.experiment == "e"


def test_calibration_files_of_the_working_dir_are_seeded_never_overwritten(tmp_path):
    src, dst = tmp_path / "calibration", tmp_path / "shared"
    src.mkdir()
    (src / "a.json").write_text("{}")
    (src / "b.json").write_text("{}")
    dst.mkdir()
    (dst / "b.json").write_text('{"kept": true}')
    assert seed_calibration(src, dst) == 1
    assert (dst / "a.json").read_text() == "{}"
    assert json.loads((dst / "b.json").read_text()) == {"kept": True}
    assert seed_calibration(src, dst) == 0
    assert not list(dst.glob(".*tmp"))
