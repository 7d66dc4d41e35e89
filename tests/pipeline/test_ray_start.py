"""Starting Ray: a local start that times out (Ray gives its raylet a fixed 30 s, which a busy
machine can exceed), another failed start, or a cluster that cannot be joined ends the run with
one line naming what was tried and what to do, never a traceback. Ray's own start is replaced
by one that fails the way Ray fails (a real start is the slow tier's)."""

from __future__ import annotations

import pytest

from df_ray.pipeline import runner

TIMEOUT = ("The current node timed out during startup. This could happen because some of the "
           "raylet failed to startup or the GCS has become overloaded.")


class FailingRay:
    """``ray.init`` that raises ``error``."""

    def __init__(self, error: str = TIMEOUT) -> None:
        self.error = error
        self.inits = self.shutdowns = 0

    def init(self, address=None, **kwargs):
        self.inits += 1
        raise Exception(self.error)

    def shutdown(self):
        self.shutdowns += 1


@pytest.mark.parametrize("error", [TIMEOUT, "System error: Failed to connect to GCS. Please "
                                            "check if the GCS server is running."])
def test_a_local_start_that_times_out_says_so_in_one_line(error):
    ray = FailingRay(error)
    with pytest.raises(runner.RayStartError) as e:
        runner._ray_init(ray, "local")
    assert ray.inits == 1 and ray.shutdowns == 1  # the failed start's processes are ended
    msg = str(e.value)
    assert msg.startswith("could not start a local Ray: its processes did not come up within "
                          "Ray's fixed timeouts (" + error.splitlines()[0][:40])
    assert "rerun when the load is lower" in msg and "\n" not in msg


def test_another_start_failure_names_rays_first_line():
    ray = FailingRay("Resource temporarily unavailable\nmore lines")
    with pytest.raises(runner.RayStartError, match=r"^could not start a local Ray: Resource "
                                                   r"temporarily unavailable$"):
        runner._ray_init(ray, "local")


def test_a_cluster_that_cannot_be_joined_is_named():
    ray = FailingRay("Could not find any running Ray instance.")
    with pytest.raises(runner.RayStartError,
                       match=r"could not join the Ray cluster at 10\.0\.0\.9:6379: Could not find"):
        runner._ray_init(ray, "10.0.0.9:6379")


def test_the_cli_prints_one_line_and_exits_1(tmp_path, monkeypatch, capfd):
    import ray

    from df_ray import cli
    from tests.helpers import base_config, write_mmlu_goa, write_sweep

    monkeypatch.setattr(ray, "is_initialized", lambda: False)

    def never(*a, **k):
        raise Exception(TIMEOUT)

    monkeypatch.setattr(ray, "init", never)
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    cfg = write_sweep(tmp_path / "sweep.yaml",
                      base_config(tmp_path, write_mmlu_goa(tmp_path / "mmlu.json", 2)),
                      [{"name": "df"}])
    assert cli.main(["run", "--config", str(cfg)]) == 1
    err = capfd.readouterr().err
    assert "df-ray: Ray error: could not start a local Ray" in err
    assert "Traceback" not in err


class RecordingRay:
    """``ray.init`` that records its arguments and the PYTHONPATH it would give Ray."""

    def __init__(self) -> None:
        self.calls: list[tuple[str | None, dict, str | None]] = []

    def is_initialized(self) -> bool:
        return False

    def init(self, address=None, **kwargs):
        import os

        self.calls.append((address, kwargs, os.environ.get("PYTHONPATH")))

    def shutdown(self):
        pass


@pytest.mark.parametrize("before", [None, "/elsewhere"])
def test_a_local_ray_inherits_the_drivers_path_instead_of_a_job_runtime_env(
        monkeypatch, before):
    """The local Ray's processes get the driver's sys.path by inheritance (no job
    runtime_env, so its idle workers fit the job's actors); the driver's own PYTHONPATH is as
    it was afterwards."""
    import os
    import sys

    import ray
    from ray.data import DataContext

    from df_ray.pipeline import signals

    fake = RecordingRay()
    monkeypatch.setattr(ray, "is_initialized", fake.is_initialized)
    monkeypatch.setattr(ray, "init", fake.init)
    monkeypatch.setattr(signals, "rearm", lambda: None)
    monkeypatch.setattr(DataContext, "get_current", staticmethod(DataContext))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("ARROW_DEFAULT_MEMORY_POOL", "system")
    monkeypatch.setenv("RAY_worker_niceness", "0")
    if before is None:
        monkeypatch.delenv("PYTHONPATH", raising=False)
    else:
        monkeypatch.setenv("PYTHONPATH", before)
    monkeypatch.syspath_prepend("/driver/only")
    runner.init_ray()
    [(address, kwargs, path)] = fake.calls
    assert address == "local" and "runtime_env" not in kwargs
    assert path.split(os.pathsep)[0] == "/driver/only"
    assert path == os.pathsep.join(p for p in sys.path if p)
    assert os.environ.get("PYTHONPATH") == before


def test_a_joined_cluster_gets_no_path_of_the_driver(monkeypatch):
    """Joining a cluster (``ray job submit``: the job's runtime env carries its working dir)
    passes nothing of this process's path."""
    import ray
    from ray.data import DataContext

    from df_ray.pipeline import signals

    fake = RecordingRay()
    monkeypatch.setattr(ray, "is_initialized", fake.is_initialized)
    monkeypatch.setattr(ray, "init", fake.init)
    monkeypatch.setattr(signals, "rearm", lambda: None)
    monkeypatch.setattr(DataContext, "get_current", staticmethod(DataContext))
    monkeypatch.setenv("PYTHONPATH", "/mine")
    runner.init_ray("10.0.0.9:6379")
    [(address, kwargs, path)] = fake.calls
    assert address == "10.0.0.9:6379" and "runtime_env" not in kwargs and path == "/mine"


@pytest.mark.slow
def test_the_local_rays_workers_import_from_the_drivers_path(ray_local):
    """A worker of the local Ray finds what the driver finds on its sys.path (the tests
    package, put there by pytest) and runs with Arrow's system allocator."""
    import os

    @ray_local.remote(num_cpus=0)
    def seen() -> tuple[str | None, bool]:
        import importlib.util

        return (os.environ.get("ARROW_DEFAULT_MEMORY_POOL"),
                importlib.util.find_spec("tests.helpers") is not None)

    assert ray_local.get(seen.remote(), timeout=300) == ("system", True)
