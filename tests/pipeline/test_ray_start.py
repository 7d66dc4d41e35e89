"""Starting Ray: a local start that times out (Ray gives its raylet a fixed 30 s, which a busy
machine can exceed) is tried again; one that keeps failing, or a cluster that cannot be
joined, ends the run with one line naming what was tried, never a traceback. Ray's own start
is replaced by one that fails the way Ray fails (the start itself is the slow tier's)."""

from __future__ import annotations

import pytest

from df_ray.pipeline import runner

TIMEOUT = ("The current node timed out during startup. This could happen because some of the "
           "raylet failed to startup or the GCS has become overloaded.")


class FlakyRay:
    """``ray.init`` that times out ``failures`` times, then starts."""

    def __init__(self, failures: int, error: str = TIMEOUT) -> None:
        self.failures, self.error = failures, error
        self.inits = self.shutdowns = 0
        self.up = False

    def init(self, address=None, **kwargs):
        self.inits += 1
        if self.inits <= self.failures:
            raise Exception(self.error)
        self.up = True

    def shutdown(self):
        self.shutdowns += 1

    def is_initialized(self):
        return self.up


def test_a_local_start_that_times_out_once_is_tried_again(capsys):
    ray = FlakyRay(failures=1)
    runner._ray_init(ray, "local", num_cpus=8)
    assert ray.up and ray.inits == 2 and ray.shutdowns == 1
    assert "trying again (2 of 3)" in capsys.readouterr().err


def test_a_local_start_that_keeps_timing_out_says_so_in_one_line():
    ray = FlakyRay(failures=99)
    with pytest.raises(runner.RayStartError) as e:
        runner._ray_init(ray, "local")
    assert ray.inits == runner.RAY_START_ATTEMPTS == 3 and ray.shutdowns == 3
    msg = str(e.value)
    assert "raylet did not register within Ray's fixed 30 s, 3 times" in msg
    assert "\n" not in msg


def test_another_start_failure_is_not_retried():
    ray = FlakyRay(failures=1, error="Resource temporarily unavailable\nmore lines")
    with pytest.raises(runner.RayStartError, match=r"could not start a local Ray: Resource "
                                                   r"temporarily unavailable$"):
        runner._ray_init(ray, "local")
    assert ray.inits == 1


def test_a_cluster_that_cannot_be_joined_is_named():
    ray = FlakyRay(failures=1, error="Could not find any running Ray instance.")
    with pytest.raises(runner.RayStartError,
                       match=r"could not join the Ray cluster at 10\.0\.0\.9:6379: Could not find"):
        runner._ray_init(ray, "10.0.0.9:6379")
    assert ray.inits == 1


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
