"""Rows that move on as soon as their own calls are answered, through the real engine client
and stage on a local Ray with scripted engines: the same rows and cache as round by round,
a sample's coordinator call sent while another sample's agent call is still held by its
engine, a run stopped mid-batch with nothing left in flight, and an added call through the
client's fault path.

Agent a1's backbone takes one request at a time, in the order they came: the responder below
holds the last sample's a1 call (it waits on a file), after the others' were answered."""

from __future__ import annotations

import hashlib
import re
import time
from pathlib import Path

import pytest

from df_ray.config import RunConfig
from df_ray.engines.base import ChatRequest, Message, SamplingParams
from df_ray.engines.scripted import last_user_content
from df_ray.evaluation import Driver, Member
from df_ray.evaluation.plan import RunPlan
from df_ray.methods.base import MethodArgsError
from df_ray.methods.darkforest import DarkForest
from df_ray.pipeline.cache import GenerationCache
from df_ray.pipeline.cache.write_behind import WriteBehind
from df_ray.pipeline.engine_pool import EnginePool
from df_ray.tasks.base import Sample
from tests.helpers import uncalibrated

pytestmark = pytest.mark.slow

SCRIPT = "tests.pipeline.test_rolling_ray:respond"
GATE = re.compile(r"gate=(\S+)")
HOLD = re.compile(r"hold=(\S+)")
HOLD_S = 60.0  # the most the held call waits (only a stage that never sends the call does)


def respond(request: ChatRequest) -> str:
    """Answers fixed by the model and the prompt, agreeing on some samples only. A prompt
    naming a gate folder: s0's coordinator call writes ``coordinator-s0`` in it as it
    arrives; the a1 call (model m1) of a sample whose question says ``hold=NAME`` is held
    until NAME is in the folder, and writes in ``held`` whether it came (``HOLD_S``)."""
    text = "\n".join(m.content for m in request.messages)
    gate = GATE.search(text)
    if gate is not None:
        folder = Path(gate.group(1))
        if request.model == "mc" and "[s0]" in text:
            (folder / "coordinator-s0").touch()
        hold = HOLD.search(last_user_content(request))
        if request.model == "m1" and hold is not None:
            (folder / "held").write_text(_wait_for(folder, hold.group(1)))
    h = hashlib.sha256(f"{request.model}|{last_user_content(request)}".encode()).digest()
    return f"Reasoning.\nAnswer: {'BBBC'[h[0] % 4]}\nConfidence: 0.{5 + h[1] % 5}"


def _wait_for(folder: Path, name: str) -> str:
    deadline = time.monotonic() + HOLD_S
    while time.monotonic() < deadline:
        if (folder / name).exists():
            return name
        time.sleep(0.05)
    return "nothing"


def config(tmp_path: Path, method: str = "darkforest", **over) -> RunConfig:
    spec = {"kind": "scripted", "script": SCRIPT}
    d = {"name": over.pop("name", method), "benchmark": "mmlu_pro", "method": method,
         "backbones": {"bhold": {**spec, "model": "m1", "max_batch_size": 1},
                       "b2": {**spec, "model": "m2"}, "b3": {**spec, "model": "m3"},
                       "bc": {**spec, "model": "mc"}},
         "agents": [{"id": "a1", "backbone": "bhold"}, {"id": "a2", "backbone": "b2"},
                    {"id": "a3", "backbone": "b3"}],
         "coordinator": {"id": "coord", "backbone": "bc"},
         "cache_root": str(tmp_path / "cache"), "results_dir": str(tmp_path / "results"),
         "batch_size": 16, **over}
    d["method_args"] = uncalibrated(method, over.get("method_args"))
    return RunConfig.model_validate(d)


def samples(n: int, gate: Path | None = None, hold: str = "") -> list[Sample]:
    """``n`` samples; with a gate folder, the last one's a1 call held until ``hold``."""
    def where(i: int) -> str:
        if gate is None:
            return ""
        return f" gate={gate}" + (f" hold={hold}" if i == n - 1 else "")

    return [Sample(id=f"s{i}", task="mmlu_pro", question=f"[s{i}]{where(i)} Which option "
                   f"fits item {i}? (A) one (B) two (C) three (D) four", gold="B",
                   meta={"n_options": 4, "category": "math"}) for i in range(n)]


@pytest.fixture(scope="module")
def pool(ray_local, tmp_path_factory):
    p = EnginePool(config(tmp_path_factory.mktemp("pool")).backbones)
    p.wait_ready(120)
    yield p
    p.shutdown()


def _cache_rows(root: Path) -> list[dict]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    parts = sorted(root.rglob("*.parquet"))
    table = pa.concat_tables([pq.read_table(p) for p in parts]).drop_columns(["created"])
    return sorted(table.to_pylist(), key=lambda r: r["key"])


def _run(pool, cfgs, root: Path, rolling: bool):
    members = [Member.from_config(c) for c in cfgs]
    cache = WriteBehind(GenerationCache(str(root)))
    driver = Driver(members, pool.client(), cache)
    rows = driver.new_rows(samples(12))
    if rolling:
        driver.run_rows(rows)
    else:
        for r in range(driver.rounds):
            driver.run_round(r, rows)
    cache.flush()
    return ([[st.to_dict() for st in sts] for sts in rows],
            [(m, row.to_dict()) for m, row in driver.finish(rows)], _cache_rows(root))


def test_rolling_rows_through_the_engine_client_are_the_round_by_rounds(pool, tmp_path):
    # DarkForest eager and lazy and Debate share the agents' first calls
    cfgs = [config(tmp_path), config(tmp_path, name="lazy", method_args={"lazy": True}),
            config(tmp_path, "debate")]
    before = _run(pool, cfgs, tmp_path / "a", rolling=False)
    assert any(c["cached"] for sts in before[0] for st in sts for c in st["calls"])
    assert _run(pool, cfgs, tmp_path / "b", rolling=True) == before


def test_a_samples_coordinator_call_goes_while_another_samples_call_is_held(pool, tmp_path):
    from df_ray.pipeline.graph import stream_batches

    gate = tmp_path / "gate"
    gate.mkdir()
    cfg = config(tmp_path)
    out = list(stream_batches(pool.handles, [RunPlan.of(cfg)],
                              samples(2, gate, hold="coordinator-s0")))
    assert sum(t.num_rows for t in out) == 2
    # s1's held a1 call was released by s0's coordinator call, not by waiting it out
    assert (gate / "held").read_text() == "coordinator-s0"


class _StopsOnS1(DarkForest):
    def plan(self, round, state, ctx):
        if round == 1 and state.sample.id == "s1":
            raise MethodArgsError("darkforest: stop on s1")
        return super().plan(round, state, ctx)


def test_a_run_stopped_mid_batch_leaves_nothing_in_flight(pool, tmp_path):
    gate = tmp_path / "gate"
    gate.mkdir()
    member = Member.from_config(config(tmp_path))
    member.method.__class__ = _StopsOnS1
    client = pool.client()
    driver = Driver([member], client, WriteBehind(GenerationCache(str(tmp_path / "c"))))
    # s2's a1 call is held by its replica while s1's first round ends and its plan stops
    with pytest.raises(MethodArgsError, match="stop on s1"):
        driver.run_rows(driver.new_rows(samples(3, gate, hold="release")))
    assert not (gate / "held").exists()  # it was still in flight
    assert all(n == 0 for loads in client.outstanding().values() for n in loads)
    (gate / "release").touch()
    after = ChatRequest(model="m1", messages=(Message("user", "after the stop"),),
                        sampling=SamplingParams(max_tokens=16), backbone="bhold")
    (again,) = client.generate([after])
    assert again.error is None


def test_a_call_added_to_the_serve_goes_through_the_fault_path(ray_local, tmp_path):
    # The coordinator's replica exits on its second request, a call added to the serve when
    # its sample's agents answered: it meets the replica gone, is retried on the restarted
    # replica, and the rows are whole
    cfg = config(tmp_path)
    backbones = {**cfg.backbones, "bc": cfg.backbones["bc"].model_copy(update={
        "engine_args": {"exit_on_call": [2], "fault_marker": str(tmp_path / "exited")}})}
    pool = EnginePool(backbones)
    try:
        pool.wait_ready(120)
        driver = Driver([Member.from_config(cfg)], pool.client(retries=2))
        rows = driver.new_rows(samples(4))
        driver.run_rows(rows)
    finally:
        pool.shutdown()
    assert (tmp_path / "exited").exists()
    calls = [c for sts in rows for st in sts for c in st.calls]
    assert len(calls) == 16 and all(c.error is None for c in calls)
    assert sum(c.role == "coordinator" for c in calls) == 4
