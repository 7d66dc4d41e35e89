from __future__ import annotations

import multiprocessing as mp

import pytest

from df_ray.engines.base import ChatRequest, Completion, Message, SamplingParams
from df_ray.pipeline.cache import GenerationCache


def req(i: int, seed: int = 0, model: str = "m") -> ChatRequest:
    return ChatRequest(model=model, messages=(Message("user", f"question {i}"),),
                       sampling=SamplingParams(temperature=0.5), seed=seed)


def test_key_covers_model_messages_sampling_seed():
    base = req(1)
    assert base.key() == req(1).key()
    assert base.key() != req(2).key()
    assert base.key() != req(1, seed=1).key()
    assert base.key() != req(1, model="other").key()
    other_sampling = ChatRequest(model="m", messages=base.messages,
                                 sampling=SamplingParams(temperature=0.6), seed=0)
    assert base.key() != other_sampling.key()
    assert ChatRequest.from_dict(base.to_dict()) == base


def test_put_get_persist_and_errors_not_cached(tmp_path):
    c = GenerationCache(str(tmp_path))
    wrote = c.put_many([(req(1), Completion("one", 3, 1)),
                        (req(2), Completion("", 0, 0, error="context_length_exceeded"))])
    assert wrote == 1
    again = GenerationCache(str(tmp_path))
    assert again.get(req(1).key()) == Completion("one", 3, 1)
    assert again.get(req(2).key()) is None
    assert len(again) == 1


def test_refresh_sees_other_writers_and_skips_corrupt_parts(tmp_path):
    a, b = GenerationCache(str(tmp_path)), GenerationCache(str(tmp_path))
    b.put_many([(req(5), Completion("five", 1, 1))])
    (tmp_path / "part-0-corrupt.parquet").write_bytes(b"not parquet")
    assert a.get(req(5).key()) is None
    a.refresh()
    assert a.get(req(5).key()).text == "five"


def _writer(root: str, start: int) -> None:
    c = GenerationCache(root)
    for j in range(10):
        c.put_many([(req(start + j * 100 + k), Completion(f"t{start + j * 100 + k}", 1, 1))
                    for k in range(5)])


@pytest.mark.slow  # four spawned writer processes
def test_concurrent_writers_never_corrupt(tmp_path):
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), s * 1000)) for s in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    c = GenerationCache(str(tmp_path))
    assert len(c) == 4 * 10 * 5
    for s in range(4):
        for j in range(10):
            for k in range(5):
                i = s * 1000 + j * 100 + k
                assert c.get(req(i).key()).text == f"t{i}"
    assert not list(tmp_path.glob(".tmp-*"))
    kept = c.compact()
    assert kept == 200 and c.compaction["parts"] == 40
    assert len(list(tmp_path.glob("part-*.parquet"))) == 1
    assert len(GenerationCache(str(tmp_path))) == 200


def test_compact_above_merges_only_a_root_over_its_limit(tmp_path):
    from df_ray.pipeline.cache import compact_above, count_parts

    c = GenerationCache(str(tmp_path))
    for j in range(5):  # one part per write
        c.put_many([(req(j * 10 + k), Completion(f"t{j * 10 + k}", 1, 1)) for k in range(3)])
    assert count_parts(str(tmp_path)) == 5
    assert compact_above(str(tmp_path), 0) is None  # 0: never
    assert compact_above(str(tmp_path), 5) is None  # not above the limit
    assert count_parts(str(tmp_path)) == 5
    figures = compact_above(str(tmp_path), 4)
    assert figures is not None and figures["parts"] == 5 and figures["entries"] == 15
    assert count_parts(str(tmp_path)) == 1
    again = GenerationCache(str(tmp_path))
    assert len(again) == 15
    for j in range(5):
        for k in range(3):
            assert again.get(req(j * 10 + k).key()).text == f"t{j * 10 + k}"


def test_a_run_compacts_its_cache_root_above_cache_compact_parts(tmp_path, ray_local):
    from df_ray.config import SweepConfig
    from df_ray.pipeline.cache import count_parts
    from df_ray.pipeline.runner import run_sweep
    from tests.helpers import base_config, write_mmlu_goa

    source = write_mmlu_goa(tmp_path / "mmlu.json", 6)
    base = base_config(tmp_path, source, batch_size=1, concurrency=1)
    root = base["cache_root"]

    def run(limit: int, seed: int = 0) -> tuple[object, list[str]]:
        said: list[str] = []
        sweep = SweepConfig.model_validate({"name": "compact", "runs": [{"seed": seed}],
                                            "base": {**base, "cache_compact_parts": limit}})
        (result,) = run_sweep(sweep, tracker=None, progress=said.append)
        return result, said

    # a stage writes the answers of the batches that end together as one part, so how many
    # parts one run writes depends on timing: three runs of other seeds write at least three
    for seed in (1, 2, 0):
        first, said = run(0, seed)  # never compacted
        assert first.metrics["fresh_calls"] > 0
        assert not [m for m in said if "compacted" in m]
    parts = count_parts(root)
    assert parts >= 3, parts
    entries = len(GenerationCache(root))
    second, said = run(parts - 1)
    assert second.metrics["fresh_calls"] == 0
    assert count_parts(root) == 1
    assert f"cache {root}: compacted, {parts} parts (more than {parts - 1}) merged into one " \
           f"holding {entries} calls" in said
    third, said = run(parts - 1)
    assert third.metrics["fresh_calls"] == 0  # no call lost
    assert count_parts(root) == 1 and len(GenerationCache(root)) == entries
    assert not [m for m in said if "compacted" in m]  # one part is not above the limit
