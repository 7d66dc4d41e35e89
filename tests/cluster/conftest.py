"""The simulated cluster fixture: a Ray head and one worker node on this machine
(`jobs.perf.sim_cluster.SimCluster`: each node a `ray start --block` of its own, with its own
--temp-dir and ports), each declaring 2 GPUs it does not have; stopped by pid at the end."""

from __future__ import annotations

import pytest

from jobs.perf.sim_cluster import SimCluster


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    """Head (node 0: 4 CPUs for the job's driver and stages, 2 GPUs) and worker (node 1: 2
    GPUs, no CPU); a test that loses node 1 starts it again with ``revive``."""
    cluster = SimCluster(tmp_path_factory.mktemp("two-nodes"), [2, 2], head_cpus=4,
                         worker_cpus=0)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
