"""A stage's held cache writes (WriteBehind): answers are served while held, written as one
part when a batch ends, never a failed call, and what is held when the run is interrupted
is written by the interrupt's flush; a batch's end whose answers are all journaled by their
replicas writes no part, until one is not, `FLUSH_S` passes or the run is interrupted."""

from __future__ import annotations

import threading

from df_ray.engines import ChatRequest, Message
from df_ray.engines.base import Completion
from df_ray.pipeline.cache import GenerationCache
from df_ray.pipeline.cache.write_behind import WriteBehind
from tests.helpers import cache_parts


def req(i: int) -> ChatRequest:
    return ChatRequest(model="m", messages=(Message("user", f"q{i}"),), seed=i)


def test_held_answers_are_served_and_written_as_one_part(tmp_path):
    cache = GenerationCache(str(tmp_path / "c"))
    wb = WriteBehind(cache)
    sink = wb.sink([req(0), req(1), req(2)])
    sink.add(0, Completion("a \ud800", 3, 2, finish_reason="stop"))
    sink.add(1, Completion("", 0, 0, error="engine error: boom"))
    sink.add(2, Completion("c", 1, 1))
    sink.flush()  # the round's end: still held
    assert cache_parts(tmp_path / "c") == []
    assert req(0).key() in wb and req(1).key() not in wb
    assert wb.get(req(0).key()) == Completion("a \ufffd", 3, 2, finish_reason="stop")
    wb.flush()
    assert len(cache_parts(tmp_path / "c")) == 1 and wb.pending == {}
    again = GenerationCache(str(tmp_path / "c"))
    assert again.get(req(0).key()) == wb.get(req(0).key())
    assert again.get(req(2).key()) == Completion("c", 1, 1)
    assert req(1).key() not in again


def test_batches_ending_together_lose_nothing(tmp_path):
    cache = GenerationCache(str(tmp_path / "c"))
    wb = WriteBehind(cache)

    def batch(b: int) -> None:
        for i in range(20):
            wb.put_many([(req(100 * b + i), Completion(f"t{b}-{i}", 1, 1))])
        wb.flush()
        assert all(req(100 * b + i).key() in cache for i in range(20))

    threads = [threading.Thread(target=batch, args=(b,)) for b in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(GenerationCache(str(tmp_path / "c"))) == 160
    assert 1 <= len(cache_parts(tmp_path / "c")) <= 8


def test_an_interrupt_writes_what_is_held(tmp_path):
    flushes = []
    wb = WriteBehind(GenerationCache(str(tmp_path / "c")),
                     on_interrupt=lambda owner, fn: flushes.append(fn))
    wb.put_many([(req(1), Completion("x", 1, 1))])
    flushes[0]()  # what df_ray.pipeline.signals does on SIGINT / SIGTERM
    assert req(1).key() in GenerationCache(str(tmp_path / "c"))


def test_a_batch_end_holding_only_journaled_answers_writes_no_part(tmp_path, monkeypatch):
    journaled = {req(0).key(), req(1).key()}
    wb = WriteBehind(GenerationCache(str(tmp_path / "c")), journaled=journaled)
    wb.put_many([(req(0), Completion("a", 1, 1)), (req(1), Completion("b", 1, 1))])
    wb.flush(batch_end=True)
    assert cache_parts(tmp_path / "c") == []  # on disk in their journals already
    assert wb.get(req(1).key()) == Completion("b", 1, 1)  # and still served
    wb.put_many([(req(2), Completion("c", 1, 1))])  # not journaled: all three go now
    wb.flush(batch_end=True)
    assert len(cache_parts(tmp_path / "c")) == 1 and wb.pending == {}
    assert journaled == set()
    again = GenerationCache(str(tmp_path / "c"))
    assert [again.get(req(i).key()).text for i in range(3)] == ["a", "b", "c"]


def test_journaled_answers_are_written_once_flush_s_passes_or_on_a_full_flush(tmp_path,
                                                                               monkeypatch):
    import df_ray.pipeline.cache.write_behind as W

    journaled = {req(0).key()}
    wb = WriteBehind(GenerationCache(str(tmp_path / "c")), journaled=journaled)
    wb.put_many([(req(0), Completion("a", 1, 1))])
    monkeypatch.setattr(W, "FLUSH_S", 0.0)  # as if 30 s had passed since the last part
    wb.flush(batch_end=True)
    assert len(cache_parts(tmp_path / "c")) == 1 and journaled == set()
    monkeypatch.setattr(W, "FLUSH_S", 3600.0)
    journaled.add(req(1).key())  # as the engine client adds it when its answer comes
    wb.put_many([(req(1), Completion("b", 1, 1))])
    wb.flush(batch_end=True)
    assert len(cache_parts(tmp_path / "c")) == 1
    wb.flush()  # an interrupt's, or the last: everything held
    assert len(cache_parts(tmp_path / "c")) == 2 and wb.pending == {}


def test_a_batch_end_reads_a_mark_that_came_after_its_answer(tmp_path):
    """A held answer not journaled when it came makes a batch's end write, unless its mark
    has come since; marks are checked as answers come, not per held answer at each end."""
    journaled: set[str] = set()
    wb = WriteBehind(GenerationCache(str(tmp_path / "c")), journaled=journaled)
    wb.put_many([(req(0), Completion("a", 1, 1)), (req(1), Completion("b", 1, 1))])
    assert wb.unjournaled == {req(0).key(), req(1).key()}
    journaled.update({req(0).key(), req(1).key()})  # their marks, late
    wb.flush(batch_end=True)
    assert cache_parts(tmp_path / "c") == [] and wb.unjournaled == set()
    wb.put_many([(req(0), Completion("a2", 1, 1))])  # held already: the first stays
    wb.put_many([(req(2), Completion("c", 1, 1))])  # no mark ever
    wb.flush(batch_end=True)
    assert len(cache_parts(tmp_path / "c")) == 1 and wb.unjournaled == set()
    again = GenerationCache(str(tmp_path / "c"))
    assert [again.get(req(i).key()).text for i in range(3)] == ["a", "b", "c"]
