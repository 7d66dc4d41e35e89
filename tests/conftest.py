"""Shared fixtures: one local Ray for the whole session (starting Ray costs seconds), and a
method run through the in-process driver; what they build on is in ``tests/helpers.py``."""

from __future__ import annotations

import os

import pytest

# Property tests run derandomized (the same examples on every run and machine, so a run's
# outcome never depends on luck); HYPOTHESIS_PROFILE=explore draws fresh random examples, to
# look for new failures (pin what it finds as an explicit example).
from hypothesis import settings as _hyp_settings

_hyp_settings.register_profile("derandomized", derandomize=True, database=None)
_hyp_settings.register_profile("explore", derandomize=False)
_hyp_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "derandomized"))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
# Offline, LegalBench's official base_prompt.txt files cannot be fetched: the suite builds
# df_ray's own LegalBench prompts unless a test asks for the official ones with fixture
# prompts (tests/tasks/test_legalbench_prompts.py).
os.environ.setdefault("DF_RAY_LEGALBENCH_PROMPTS", "ours")


#: Fixtures that start Ray: a test that uses one is in the slow tier whatever its marks say.
RAY_FIXTURES = {"ray_local"}
#: Marks that put a test in the slow tier: ``embedded`` loads a packaged model.
SLOW_MARKS = {"embedded"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """``-m "not slow"`` (the fast tier) leaves out every test that starts Ray or loads a
    real model; the others that take long are marked ``slow`` where they are defined."""
    for item in items:
        if (RAY_FIXTURES & set(getattr(item, "fixturenames", ()))
                or SLOW_MARKS & {m.name for m in item.iter_markers()}):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def ray_local():
    import ray

    from df_ray.pipeline.runner import init_ray

    os.environ.pop("RAY_ADDRESS", None)
    init_ray()
    yield ray
    ray.shutdown()


@pytest.fixture
def run_method():
    """``run_method(name, script, method_args=..., samples=..., cfg=..., calibration=...)``:
    :func:`tests.helpers.run_method`."""
    from tests.helpers import run_method

    return run_method


_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_FROZEN = os.path.join(_REPO, "calibration")


def _frozen_files() -> set[str]:
    return set(os.listdir(_FROZEN)) if os.path.isdir(_FROZEN) else set()


_FROZEN_AT_START = _frozen_files()


def pytest_sessionfinish(session, exitstatus):
    """A test that fits a calibration into the repository's own calibration/ (a relative
    ``calibration.dir`` run from the repo root) fails the session, naming the files."""
    new = sorted(_frozen_files() - _FROZEN_AT_START)
    if new:
        print(f"\nERROR: the tests wrote {new} into {_FROZEN}: give every test configuration "
              "that fits a calibration its own calibration.dir (tmp_path)")
        session.exitstatus = 1
