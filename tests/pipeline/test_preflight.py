"""Backbones that no node of the cluster could ever host stop the sweep before any engine
starts: exit 2, naming the backbone, what it asks for and what the cluster has (instead of
waiting the whole ready timeout for replicas that cannot be scheduled)."""

from __future__ import annotations

import pytest

from df_ray.cli import main
from df_ray.engines import make_spec
from df_ray.pipeline.engine_pool import resource_problems
from tests.helpers import base_config, write_mmlu_goa, write_sweep

VLLM = make_spec(kind="vllm", model="Qwen/Qwen2.5-7B-Instruct", replicas=2)
CPU_NODE = {"CPU": 8.0, "memory": 1e10}


def test_a_gpu_backbone_on_a_cluster_without_gpus():
    (msg,) = resource_problems({"qwen": VLLM}, [CPU_NODE])
    assert msg.startswith("backbone 'qwen' (vllm: Qwen/Qwen2.5-7B-Instruct) asks for 1 GPUs "
                          "and 0 CPUs per replica (x2); no node offers that: the cluster has "
                          "0 GPUs and 8 CPUs on 1 node(s)")


def test_replicas_that_fit_one_by_one_but_not_together():
    nodes = [{"CPU": 8.0, "GPU": 1.0}, {"CPU": 8.0}]
    (msg,) = resource_problems({"qwen": VLLM}, nodes)
    assert "ask for 2 GPUs and 0 CPUs together ('qwen' 2 GPUs / 0 CPUs)" in msg
    assert "the cluster has 1 GPUs and 16 CPUs on 2 node(s)" in msg
    assert resource_problems({"qwen": VLLM}, [{"CPU": 8.0, "GPU": 2.0}]) == []


def test_an_embedded_backbone_needs_its_threads_on_one_node():
    emb = make_spec(kind="embedded", model="smollm2-135m-instruct", n_threads=4)
    (msg,) = resource_problems({"smol": emb}, [{"CPU": 2.0}, {"CPU": 2.0}])
    assert "asks for 0 GPUs and 4 CPUs per replica (x1)" in msg
    assert resource_problems({"smol": emb}, [{"CPU": 4.0}]) == []
    # scripted and served backbones ask for nothing
    assert resource_problems({"s": make_spec(kind="scripted", model="m")}, []) == []


@pytest.mark.slow
def test_df_ray_run_refuses_a_vllm_backbone_without_gpus(ray_local, tmp_path, capsys):
    src = write_mmlu_goa(tmp_path / "mmlu.json", 2)
    base = base_config(tmp_path, src)
    base["backbones"]["b1"] = {"kind": "vllm", "model": "Qwen/Qwen2.5-7B-Instruct"}
    path = write_sweep(tmp_path / "sweep.yaml", base, [{"name": "df"}])
    assert main(["run", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "backbone 'b1' (vllm: Qwen/Qwen2.5-7B-Instruct) asks for 1 GPUs" in err
    assert "the cluster has 0 GPUs" in err and "autoscaling: true" in err
    assert "Traceback" not in err
