"""Backbones that no node of the cluster could ever host stop the sweep before any engine
starts: exit 2, naming the backbone, what it asks for and what the cluster has (instead of
waiting the whole ready timeout for replicas that cannot be scheduled)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from df_ray.cli import main
from df_ray.config import load_config
from df_ray.engines import make_spec
from df_ray.pipeline.engine_pool import alone_text, resource_problems, unplaced
from df_ray.pipeline.lifecycle import shared_backbones
from tests.helpers import REPO, base_config, write_mmlu_goa, write_sweep

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
    assert ("1 backbone(s) ask for 2 GPUs and 0 CPUs together (replicas x per replica: "
            "'qwen' 2 x 1 GPUs / 0 CPUs)") in msg
    assert "the cluster has 1 GPUs and 16 CPUs on 2 node(s)" in msg
    assert resource_problems({"qwen": VLLM}, [{"CPU": 8.0, "GPU": 2.0}]) == []


def test_replicas_whose_total_fits_but_that_do_not_pack_onto_the_nodes():
    """Two tensor-parallel replicas of 2 GPUs on three nodes of 1, 1 and 2 GPUs: 4 GPUs of 4,
    but only one replica has a node that holds it."""
    tp2 = make_spec(kind="simulated", model="m", tensor_parallel_size=2, replicas=2)
    nodes = [{"GPU": 1.0}, {"GPU": 1.0}, {"GPU": 2.0}]
    assert unplaced({"tp": tp2}, nodes) == ["tp/1"]
    (msg,) = resource_problems({"tp": tp2}, nodes)
    assert msg.startswith("replicas tp/1 do not fit on the nodes (each replica on one node; "
                          "replicas x per replica: 'tp' 2 x 2 GPUs / 0 CPUs)")
    assert "(GPUs per node: 1, 1, 2)" in msg
    assert resource_problems({"tp": tp2}, [*nodes, {"GPU": 2.0}]) == []


def test_five_backbones_on_fewer_gpus_than_they_ask_for_together():
    """The FinQA 3 -> 5 backbone study, two replicas each, on one 8-GPU node: refused with
    the arithmetic (5 x 2 x 1 = 10 GPUs against 8)."""
    specs = {f"b{i}": make_spec(kind="simulated", model=f"m{i}", num_gpus=1, replicas=2)
             for i in range(5)}
    (msg,) = resource_problems(specs, [{"GPU": 8.0, "CPU": 16.0}])
    assert msg.startswith("5 backbone(s) ask for 10 GPUs and 0 CPUs together")
    assert "'b4' 2 x 1 GPUs / 0 CPUs" in msg and "the cluster has 8 GPUs" in msg


def test_the_finqa_scaling_study_on_fewer_gpus_than_its_backbones_says_what_each_needs():
    """Table 10's sweep file (3, 4 and 5 backbones, one vLLM replica each; the largest
    configuration uses every backbone, so no order of its configurations fits 4 GPUs):
    refused with the arithmetic of the whole sweep and of each configuration alone."""
    configs = load_config(REPO / "jobs/configs/table10_finqa_scaling.yaml").expand()
    per_config = {c.name: c.backbones for c in configs}
    four = [{"GPU": 2.0, "CPU": 8.0}, {"GPU": 2.0, "CPU": 8.0}]
    (msg,) = resource_problems(shared_backbones(configs), four)
    assert msg.startswith("5 backbone(s) ask for 5 GPUs and 0 CPUs together")
    assert "the cluster has 4 GPUs and 16 CPUs on 2 node(s) (GPUs per node: 2, 2)" in msg
    assert alone_text(per_config, four) == (
        "alone, the configurations ask for '3 backbones' 3 GPUs / 0 CPUs (fits), "
        "'4 backbones' 4 GPUs / 0 CPUs (fits), '5 backbones' 5 GPUs / 0 CPUs (does not fit) "
        "(the sweep's engines serve them all at once): run '3 backbones', '4 backbones' as a "
        "sweep of its own, the others with fewer replicas or on more GPUs")
    assert resource_problems(shared_backbones(configs), [*four, {"GPU": 1.0}]) == []
    two = [{"GPU": 2.0}]
    assert alone_text(per_config, two).endswith("none fits alone: lower replicas or run on "
                                                "more GPUs")
    assert alone_text({"3 backbones": per_config["3 backbones"]}, two) == ""


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
    # a model folder of its own: the weights check (a hub model must be cached offline) passes
    model = tmp_path / "Qwen2.5-7B-Instruct"
    model.mkdir()
    base["backbones"]["b1"] = {"kind": "vllm", "model": str(model)}
    path = write_sweep(tmp_path / "sweep.yaml", base, [{"name": "df"}])
    assert main(["run", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"backbone 'b1' (vllm: {model}) asks for 1 GPUs" in err
    assert "the cluster has 0 GPUs" in err and "autoscaling: true" in err
    assert "Traceback" not in err


@pytest.mark.slow
def test_a_finished_sweep_replays_without_the_gpus_it_ran_on(ray_local, tmp_path, capsys):
    """A sweep run on a node with a GPU (a local Ray of its own declaring one) replays on a
    Ray without GPUs: every configuration is finished, so no engine starts and the cluster
    is not checked for them; a configuration not run yet is still refused before its
    engines start."""
    src = write_mmlu_goa(tmp_path / "mmlu.json", 2)
    base = base_config(tmp_path, src)
    base["backbones"]["b1"]["num_gpus"] = 1
    path = write_sweep(tmp_path / "sweep.yaml", base, [{"name": "df"}])
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_OVERRIDE_RESOURCES=json.dumps({"GPU": 1}),
               PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, "-m", "df_ray.cli", "run", "--config", str(path)],
                       env=env, capture_output=True, text=True, timeout=600, cwd=str(REPO))
    assert p.returncode == 0, p.stderr[-4000:]
    assert main(["run", "--config", str(path)]) == 0
    err = capsys.readouterr().err
    assert "df: already finished" in err and "starting engines" not in err
    more = write_sweep(tmp_path / "more.yaml", base,
                       [{"name": "df"}, {"name": "df2", "method_args.disclosure": "permissive"}])
    assert main(["run", "--config", str(more)]) == 2
    err = capsys.readouterr().err
    assert "backbone 'b1' (scripted: " in err and "asks for 1 GPUs" in err
    assert "starting engines" not in err
