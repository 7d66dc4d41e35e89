"""The cluster configs a lab copies (cluster/) are valid for the tools that read them:
the Ray cluster launcher config against Ray's own JSON schema (and Ray's own preparation
for `ray up`), the KubeRay RayCluster manifest by structure (no CRD schema offline), the
job runtime env through Ray's RuntimeEnv, and the example sweep through df_ray's loader.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import jsonschema
import pytest
import ray
import yaml

from df_ray.config import load_config

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "cluster"
EXAMPLE = REPO / "jobs" / "configs" / "cluster_example.yaml"


def _yaml(path: Path):
    return yaml.safe_load(path.read_text())


def _ray_schema() -> dict:
    path = Path(ray.autoscaler.__file__).parent / "ray-schema.json"
    assert path.is_file(), f"Ray's cluster config schema is missing: {path}"
    return json.loads(path.read_text())


# ----------------------------------------------------------------------------- ray up


@pytest.fixture(scope="module")
def launcher_config() -> dict:
    return _yaml(CLUSTER / "ray-cluster.yaml")


def test_ray_cluster_yaml_matches_rays_schema(launcher_config):
    jsonschema.validate(launcher_config, _ray_schema())


def test_ray_schema_check_has_teeth(launcher_config):
    broken = copy.deepcopy(launcher_config)
    broken["head_start_commands"] = ["ray start --head"]  # misspelt key
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, _ray_schema())
    broken = copy.deepcopy(launcher_config)
    del broken["provider"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, _ray_schema())


def test_ray_cluster_yaml_survives_rays_own_preparation(launcher_config):
    """What `ray up` does before it connects anywhere: the local provider's preparation
    (which refuses node types of its own), defaults, then the schema again."""
    from ray.autoscaler._private.util import prepare_config, validate_config

    prepared = prepare_config(copy.deepcopy(launcher_config))
    validate_config(prepared)
    assert prepared["provider"]["type"] == "local"
    node_type = prepared["available_node_types"][prepared["head_node_type"]]
    assert node_type["min_workers"] == node_type["max_workers"] == \
        len(launcher_config["provider"]["worker_ips"])


def test_ray_cluster_yaml_content(launcher_config):
    c = launcher_config
    assert c["provider"]["type"] == "local"
    assert c["provider"]["head_ip"] and c["provider"]["worker_ips"]
    assert c["auth"]["ssh_user"]
    setup = "\n".join(c["setup_commands"])
    assert re.search(r"pip install .*df_ray\[[^\]]*vllm[^\]]*\]", setup), setup
    head = "\n".join(c["head_start_ray_commands"])
    assert "ray start --head" in head and re.search(r"--num-gpus=\d", head)
    # the job API has no authentication: loopback only, reached through `ray dashboard`
    assert "--dashboard-host=127.0.0.1" in head and "0.0.0.0" not in head
    workers = "\n".join(c["worker_start_ray_commands"])
    assert "--address=$RAY_HEAD_IP:6379" in workers and "--num-gpus" in workers
    # The repository goes to the nodes without virtual envs or results.
    assert c["file_mounts"]
    assert {".git", ".venv", "results", "mlruns"} <= set(c["rsync_exclude"])


# ----------------------------------------------------------------------------- KubeRay


@pytest.fixture(scope="module")
def raycluster() -> dict:
    docs = list(yaml.safe_load_all((CLUSTER / "kuberay-raycluster.yaml").read_text()))
    clusters = [d for d in docs if d and d.get("kind") == "RayCluster"]
    assert len(clusters) == 1
    return clusters[0]


def _containers(group: dict) -> list[dict]:
    containers = group["template"]["spec"]["containers"]
    assert containers, "a pod template needs a container"
    return containers


def _gpus(resources: dict, part: str) -> int:
    return int(resources.get(part, {}).get("nvidia.com/gpu", 0))


def test_raycluster_structure(raycluster):
    rc = raycluster
    assert rc["apiVersion"] == "ray.io/v1"
    assert rc["metadata"]["name"]
    spec = rc["spec"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", spec["rayVersion"])
    installed = ".".join(ray.__version__.split(".")[:2])
    assert spec["rayVersion"].startswith(installed + "."), (
        f"rayVersion {spec['rayVersion']} vs the Ray this repository tests with "
        f"({ray.__version__}): the image, the CRD field and clients should agree")
    groups = [spec["headGroupSpec"], *spec["workerGroupSpecs"]]
    for g in groups:
        # KubeRay passes rayStartParams to `ray start` verbatim: string values only.
        assert all(isinstance(v, str) for v in g["rayStartParams"].values()), g["rayStartParams"]
        for c in _containers(g):
            assert c["name"] and c["image"]
    names = [g["groupName"] for g in spec["workerGroupSpecs"]]
    assert len(names) == len(set(names)) and all(names)
    head = _containers(spec["headGroupSpec"])[0]
    ports = {p["containerPort"] for p in head["ports"]}
    assert {6379, 8265} <= ports
    images = {c["image"] for g in groups for c in _containers(g)}
    assert len(images) == 1, f"head and workers must run the same image: {images}"


def test_raycluster_gpu_groups(raycluster):
    """Pods advertise to Ray exactly the GPUs they hold: one (one engine per pod) in one
    group, four on one node in another (a tensor-parallel engine's GPUs)."""
    spec = raycluster["spec"]
    head = spec["headGroupSpec"]
    assert all(_gpus(c.get("resources", {}), "limits") == 0 for c in _containers(head))
    assert head["rayStartParams"].get("num-gpus") == "0"
    gpu_groups = [g for g in spec["workerGroupSpecs"]
                  if any(_gpus(c.get("resources", {}), "limits") for c in _containers(g))]
    sizes = []
    for g in gpu_groups:
        (c,) = _containers(g)  # one container per worker pod: Ray's
        res = c["resources"]
        n = _gpus(res, "limits")
        if "nvidia.com/gpu" in res.get("requests", {}):
            assert _gpus(res, "requests") == n
        assert g["rayStartParams"].get("num-gpus") == str(n), g["groupName"]
        assert 0 <= g["minReplicas"] <= g["replicas"] <= g["maxReplicas"]
        sizes.append(n)
    assert sorted(sizes) == [1, 4], sizes


def test_raycluster_environment(raycluster):
    spec = raycluster["spec"]
    for g in [spec["headGroupSpec"], *spec["workerGroupSpecs"]]:
        for c in _containers(g):
            env = {e["name"]: e for e in c.get("env", [])}
            assert env["MLFLOW_TRACKING_URI"]["value"].startswith(("http://", "https://"))
            assert env["DF_RAY_HOME"]["value"].startswith("/")
            assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"]["key"]
            assert "value" not in env["HF_TOKEN"], "a token in the manifest itself"
            if env.get("RAY_AUTH_MODE", {}).get("value") == "token":
                assert env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]["key"]
            mounts = {m["name"] for m in c.get("volumeMounts", [])}
            volumes = {v["name"] for v in g["template"]["spec"].get("volumes", [])}
            assert mounts <= volumes, f"mounts without a volume: {mounts - volumes}"


# ----------------------------------------------------------------------------- runtime env


@pytest.fixture(scope="module")
def runtime_env_data() -> dict:
    return _yaml(CLUSTER / "runtime_env.yaml")


def test_runtime_env_accepted_by_ray(runtime_env_data):
    from ray.runtime_env import RuntimeEnv

    env = RuntimeEnv(**runtime_env_data)
    assert env.get("env_vars")["DF_RAY_HOME"]
    assert all(isinstance(v, str) for v in runtime_env_data["env_vars"].values())
    for key in ("HF_HOME", "DF_RAY_HOME"):
        assert key in runtime_env_data["env_vars"]
    assert any(k.startswith("VLLM_") for k in runtime_env_data["env_vars"])
    # Dependencies are baked into the nodes (see the file's header), secrets are not here.
    assert not {"pip", "conda", "uv"} & set(runtime_env_data)
    secret = re.compile(r"(^|_)(TOKEN|SECRET|PASSWORD|API_KEY|ACCESS_KEY)(_|$)")
    assert not [k for k in runtime_env_data["env_vars"] if secret.search(k)]
    assert {".git", ".venv", "results", "mlruns"} <= set(runtime_env_data["excludes"])


def test_runtime_env_excludes_keep_the_upload_small(runtime_env_data):
    """Walk this repository as Ray packs a --working-dir (without .gitignore's help)."""
    try:
        from ray._private.runtime_env.packaging import (
            GCS_STORAGE_MAX_SIZE,
            _dir_travel,
            _get_excludes,
        )
    except ImportError as e:  # a private API: skip rather than fail on a Ray change
        pytest.skip(f"Ray's packaging internals moved: {e}")
    files: dict[str, int] = {}

    def handler(p: Path) -> None:
        if p.is_file():
            files[str(p.relative_to(REPO))] = p.stat().st_size

    _dir_travel(REPO, [_get_excludes(REPO, runtime_env_data["excludes"])], handler,
                include_gitignore=False)
    assert "jobs/sweep.py" in files and "df_ray/config.py" in files
    leaked = [f for f in files if f.split("/")[0] in {".git", ".venv", "results", "mlruns"}
              or f.split("/")[0].startswith(".venv")]
    assert not leaked, leaked[:10]
    total = sum(files.values())
    assert total < GCS_STORAGE_MAX_SIZE // 4, f"{total / 2**20:.0f} MiB would be uploaded"


# ----------------------------------------------------------------------------- example sweep


def test_cluster_example_config():
    sweep = load_config(EXAMPLE)
    configs = sweep.expand()
    assert len(configs) >= 1
    for cfg in configs:
        assert cfg.benchmark == "math" and cfg.method == "darkforest"
        assert len(cfg.backbones) == 3
        assert len({s.model for s in cfg.backbones.values()}) == 3
        for name, spec in cfg.backbones.items():
            assert spec.kind == "vllm", name
            assert "/" in spec.model, f"{name}: a Hugging Face id"
            assert spec.resolved_num_gpus == 1 and spec.tensor_parallel_size == 1, name
        agent_backbones = {a.backbone for a in cfg.agents}
        assert agent_backbones == set(cfg.backbones)  # every backbone has an agent
        assert cfg.coordinator is not None and cfg.coordinator.backbone in agent_backbones
        assert cfg.tracking.uri.startswith(("http://", "https://"))
        # The job's cwd is a throwaway copy: where results go must be absolute or a URI.
        for path in (cfg.cache_root, cfg.results_dir, cfg.calibration.dir):
            assert path.startswith("/") or "://" in path, path
    # The whole sweep shares one set of engines: one GPU per backbone replica.
    gpus = sum(s.resolved_num_gpus * s.replicas for s in configs[0].backbones.values())
    assert gpus == 3


def test_cluster_example_fits_the_kuberay_cluster(raycluster):
    configs = load_config(EXAMPLE).expand()
    need = sum(s.resolved_num_gpus * s.replicas for s in configs[0].backbones.values())
    have = sum(g["maxReplicas"] * int(g["rayStartParams"].get("num-gpus", "0"))
               for g in raycluster["spec"]["workerGroupSpecs"])
    assert need <= have


def test_readme_commands_name_real_files():
    readme = (CLUSTER / "README.md").read_text()
    assert "ray job submit" in readme and "--runtime-env cluster/runtime_env.yaml" in readme
    for rel in re.findall(r"(?<![\w/])((?:cluster|jobs|tests)/[\w./-]+\.(?:ya?ml|py))\b", readme):
        assert (REPO / rel).is_file(), f"cluster/README.md names a missing file: {rel}"
