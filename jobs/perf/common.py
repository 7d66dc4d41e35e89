"""Shared helpers of the jobs/perf scripts: the header every script prints, synthetic samples,
scripted-engine configurations and a local Ray."""

from __future__ import annotations

import contextlib
import os
import platform
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")


def header(title: str) -> None:
    """Print what produced the figures that follow: the command and the machine."""
    argv = list(sys.argv)
    if argv and Path(argv[0]).is_absolute():
        with contextlib.suppress(ValueError):
            argv[0] = str(Path(argv[0]).resolve().relative_to(ROOT))
    cmd = " ".join(shlex.quote(a) for a in [".venv/bin/python", *argv])
    gpu = "no GPU"
    try:
        import subprocess

        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
        if out.returncode == 0 and out.stdout.strip():
            gpu = out.stdout.strip().replace("\n", ", ")
    except (OSError, subprocess.SubprocessError):
        pass
    print(f"# {title}")
    print(f"# command: {cmd}")
    print(f"# machine: {os.cpu_count()} cores ({platform.processor() or platform.machine()}), "
          f"{gpu}, Python {platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M:%S')}")
    sys.stdout.flush()


def math_samples(n: int, prefix: str = "p"):
    """n synthetic MATH-shaped samples (the scripted engines answer numbers from the prompt)."""
    from df_ray.tasks.base import Sample

    return [Sample(id=f"{prefix}{i:06d}", task="math",
                   question=f"[{prefix}{i}] Compute {i} + {3 * i + 7} and simplify the result.",
                   gold=str(4 * i + 7), meta={}) for i in range(n)]


def scripted_config(tmp: str, *, script: str = "majority", replicas: int = 1,
                    max_batch_size: int = 32, shared_coordinator: bool = True,
                    engine: dict | None = None, **over):
    """DarkForest over three scripted backbones; the coordinator shares the first (as in the
    paper's table configs, where it shares qwen25-7b). ``engine``: every backbone's engine
    fields instead of the scripted one (e.g. ``{"kind": "simulated", "engine_args": ...}``)."""
    from df_ray.config import RunConfig

    def backbone(model: str) -> dict:
        if engine is not None:
            return {"model": model, "replicas": replicas, **engine}
        return {"kind": "scripted", "model": model, "script": script, "replicas": replicas,
                "max_batch_size": max_batch_size}

    backbones = {f"b{i}": backbone(f"m{i}") for i in (1, 2, 3)}
    coord = "b1"
    if not shared_coordinator:
        backbones["bc"] = backbone("mc")
        coord = "bc"
    base = {
        "name": "perf",
        "benchmark": "math",
        "backbones": backbones,
        "agents": [{"id": f"a{i}", "backbone": f"b{i}", "seed": i, "max_tokens": 256}
                   for i in (1, 2, 3)],
        "coordinator": {"id": "coord", "backbone": coord, "temperature": 0.2, "max_tokens": 256},
        "method_args": {"ablation": "no_calibration"},
        "cache_root": f"{tmp}/cache",
        "results_dir": f"{tmp}/results",
        "tracking": {"uri": f"sqlite:///{tmp}/mlflow.db", "experiment": "perf"},
    }
    base.update(over)
    return RunConfig.model_validate(base)


def start_ray() -> None:
    from df_ray.pipeline.runner import init_ray

    os.environ.pop("RAY_ADDRESS", None)
    init_ray()


def peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
