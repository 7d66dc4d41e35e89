"""Where engine replicas go: one replica's Ray resources and placement-group bundle, and
whether a cluster's nodes can hold every replica of a sweep's backbones (checked before any
engine starts). Imports no Ray."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from df_ray.engines.spec import EngineSpec


def _actor_options(spec: EngineSpec) -> dict[str, Any]:
    """Ray resources of one replica, as its kind's spec gives them (vLLM: one engine per
    GPU, times the tensor parallel size; embedded: the CPU threads it computes with)."""
    return dict(spec.ray_resources())


def _amount(x: float) -> str:
    return f"{x:g}"


def bundle_text(bundle: Mapping[str, float]) -> str:
    return " and ".join(f"{_amount(v)} {k}s" for k, v in bundle.items()) or "nothing"


def gpus_text(nodes: Sequence[Mapping[str, float]]) -> str:
    per_node = ", ".join(_amount(float(n.get("GPU", 0))) for n in nodes)
    return (f"{_amount(sum(float(n.get('GPU', 0)) for n in nodes))} GPUs on {len(nodes)} live "
            f"node(s): {per_node or 'none'} per node")


def replica_bundle(spec: EngineSpec) -> dict[str, float]:
    """One replica's placement-group bundle (Ray's ``GPU``/``CPU`` keys; empty for a replica
    that holds neither): a tensor-parallel replica's GPUs are one bundle, so one node."""
    opts = _actor_options(spec)
    bundle = {"GPU": float(opts["num_gpus"]), "CPU": float(opts["num_cpus"])}
    return {k: v for k, v in bundle.items() if v > 0}


def unplaced(specs: Mapping[str, EngineSpec],
             nodes: Sequence[Mapping[str, float]]) -> list[str]:
    """The replicas (``backbone/i``) that do not fit when every replica is put, largest
    first, on the node with the most GPUs (then CPUs) left that holds it: replicas no node
    can take together although the cluster's totals would hold them."""
    free = [{"GPU": float(n.get("GPU", 0)), "CPU": float(n.get("CPU", 0))} for n in nodes]
    todo = sorted(((replica_bundle(s), f"{name}/{i}") for name, s in specs.items()
                   for i in range(s.replicas)),
                  key=lambda t: (-t[0].get("GPU", 0.0), -t[0].get("CPU", 0.0)))
    left: list[str] = []
    for bundle, label in todo:
        if not bundle:
            continue
        fits = [f for f in free if all(f[k] >= v for k, v in bundle.items())]
        if not fits:
            left.append(label)
            continue
        best = max(fits, key=lambda f: (f["GPU"], f["CPU"]))
        for k, v in bundle.items():
            best[k] -= v
    return left


def resource_problems(specs: Mapping[str, EngineSpec],
                      nodes: Sequence[Mapping[str, float]]) -> list[str]:
    """Why the backbones' replicas could never all start on a cluster of these nodes (each
    node's resources, as ``ray.nodes()`` gives them): a replica no node can hold, more GPUs
    or CPUs asked for together than the cluster has, or replicas that do not pack onto the
    nodes (`unplaced`). Empty when they fit."""
    problems: list[str] = []
    total_gpu = sum(float(n.get("GPU", 0)) for n in nodes)
    total_cpu = sum(float(n.get("CPU", 0)) for n in nodes)
    per_node = ", ".join(f"{_amount(float(n.get('GPU', 0)))}" for n in nodes)
    has = (f"the cluster has {_amount(total_gpu)} GPUs and {_amount(total_cpu)} CPUs on "
           f"{len(nodes)} node(s) (GPUs per node: {per_node or 'none'})")
    want_gpu = want_cpu = 0.0
    for name, spec in specs.items():
        opts = _actor_options(spec)
        gpu, cpu = float(opts["num_gpus"]), float(opts["num_cpus"])
        want_gpu += gpu * spec.replicas
        want_cpu += cpu * spec.replicas
        if gpu == 0 and cpu == 0:
            continue
        fits = any(float(n.get("GPU", 0)) >= gpu and float(n.get("CPU", 0)) >= cpu
                   for n in nodes)
        if not fits:
            problems.append(f"backbone {name!r} ({spec.kind}: {spec.model}) asks for "
                            f"{_amount(gpu)} GPUs and {_amount(cpu)} CPUs per replica "
                            f"(x{spec.replicas}); no node offers that: {has}")
    if problems:
        return problems
    asks = ", ".join(f"{n!r} {s.replicas} x {_amount(float(_actor_options(s)['num_gpus']))}"
                     f" GPUs / {_amount(float(_actor_options(s)['num_cpus']))} CPUs"
                     for n, s in specs.items())
    if want_gpu > total_gpu or want_cpu > total_cpu:
        problems.append(f"{len(specs)} backbone(s) ask for {_amount(want_gpu)} GPUs and "
                        f"{_amount(want_cpu)} CPUs together (replicas x per replica: {asks}); "
                        f"{has}")
    else:
        left = unplaced(specs, nodes)
        if left:
            problems.append(f"replicas {', '.join(left)} do not fit on the nodes (each replica "
                            f"on one node; replicas x per replica: {asks}); {has}")
    return problems


def alone_text(per_config: Mapping[str, Mapping[str, EngineSpec]],
               nodes: Sequence[Mapping[str, float]]) -> str:
    """For a sweep whose backbones do not fit together (``per_config``: each configuration's
    own backbones): what each configuration asks for alone and whether that fits the nodes,
    and what to do. A sweep's engines serve all its configurations at once, and a sweep whose
    largest configuration uses every backbone (the FinQA 3 -> 5 backbone study) fits in no
    order. Empty for a sweep of one configuration."""
    if len(per_config) < 2:
        return ""
    asks, fit = [], []
    for name, specs in per_config.items():
        gpu = sum(float(_actor_options(s)["num_gpus"]) * s.replicas for s in specs.values())
        cpu = sum(float(_actor_options(s)["num_cpus"]) * s.replicas for s in specs.values())
        ok = not resource_problems(specs, nodes)
        fit += [name] if ok else []
        asks.append(f"{name!r} {_amount(gpu)} GPUs / {_amount(cpu)} CPUs "
                    f"({'fits' if ok else 'does not fit'})")
    if len(fit) == len(per_config):
        then = "each fits alone: run them as sweeps of their own"
    elif fit:
        then = (f"run {', '.join(map(repr, fit))} as a sweep of its own, the others with "
                "fewer replicas or on more GPUs")
    else:
        then = "none fits alone: lower replicas or run on more GPUs"
    return (f"alone, the configurations ask for {', '.join(asks)} (the sweep's engines serve "
            f"them all at once): {then}")
