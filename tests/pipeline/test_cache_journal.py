"""The engines' crash journals (df_ray.pipeline.cache.journal): an answer journaled by its
replica is served by a cache opened on its root, finished or not; a torn or damaged line is
skipped, never fatal; a finished journal folds into one part and is deleted, a live one is
left; another writer's journal is neither read nor folded; a replica's answer streams
journal every answer before it is sent."""

from __future__ import annotations

import asyncio
import os

from df_ray.engines import make_engine
from df_ray.engines.base import ChatRequest, Completion, Message, SamplingParams
from df_ray.engines.batching import Replica
from df_ray.pipeline.answer_streams import AnswerStreams
from df_ray.pipeline.cache import GenerationCache
from df_ray.pipeline.cache import journal as J
from df_ray.pipeline.cache import parts as P


def req(i: int) -> ChatRequest:
    return ChatRequest(model="m", messages=(Message("user", f"question {i}"),),
                       sampling=SamplingParams(temperature=0.5), seed=i)


def comp(i: int) -> Completion:
    return Completion(f"answer {i} é", 3, 2, finish_reason="stop")


def journal_of(root, user: str, n: int, start: int = 0) -> J.Journals:
    js = J.Journals()
    js.write([((str(root), user), req(i), comp(i)) for i in range(start, start + n)])
    return js


def test_a_live_journal_is_served_and_a_finished_one_folds_into_one_part(tmp_path):
    GenerationCache(str(tmp_path), user="ann").put_many([(req(0), comp(0))])  # a part
    js = journal_of(tmp_path, "ann", 5)
    js.write([((str(tmp_path), "ann"), req(9), Completion("", 0, 0, error="x"))])  # not kept
    [path] = J.journal_paths(str(tmp_path))
    c = GenerationCache(str(tmp_path), user="ann")
    assert [c.get(req(i).key()) for i in range(5)] == [comp(i) for i in range(5)]
    assert c.get(req(9).key()) is None and c.journal_lines_skipped == 0
    assert c.fold_journals() == 0 and os.path.exists(path)  # its writer holds it
    js.close()
    assert c.fold_journals() == 1 and J.journal_paths(str(tmp_path)) == []
    parts = P.list_parts(c.fs, c.path)
    assert len(parts) == 2  # the first part and the folded one, which skips entry 0
    again = GenerationCache(str(tmp_path), user="ann")
    assert [again.get(req(i).key()) for i in range(5)] == [comp(i) for i in range(5)]
    assert len(again) == 5 and again.journals == {}
    assert c.get(req(3).key()) == comp(3)  # the folding cache serves them too


def test_a_torn_or_damaged_line_is_skipped_not_fatal(tmp_path):
    js = journal_of(tmp_path, "ann", 3)
    path = js.writers[(str(tmp_path), "ann")].path
    with open(path, "ab") as f:
        f.write(b"not json\n")
        f.write(b'{"key": "k", "text": "t", "prompt_tokens": 1, "completion_tokens": 1, '
                b'"checksum": "wrong"}\n')
    js.write([((str(tmp_path), "ann"), req(3), comp(3))])
    with open(path, "ab") as f:
        f.write(b'{"key": "torn at a kill", "te')  # a write cut short
    c = GenerationCache(str(tmp_path), user="ann")
    assert [c.get(req(i).key()) for i in range(4)] == [comp(i) for i in range(4)]
    assert c.journal_lines_skipped == 3 and len(c) == 4
    js.close()
    assert GenerationCache(str(tmp_path), user="ann").compact() == 4
    assert c.bad_parts == [] and J.journal_paths(str(tmp_path)) == []


def test_a_compaction_folds_finished_journals_first(tmp_path):
    GenerationCache(str(tmp_path), user="ann").put_many([(req(0), comp(0))])
    GenerationCache(str(tmp_path), user="ann").put_many([(req(1), comp(1))])
    journal_of(tmp_path, "ann", 4).close()
    c = GenerationCache(str(tmp_path), user="ann")
    assert c.compact() == 4
    assert c.compaction["journals"] == 1 and c.compaction["parts"] == 3
    assert len(P.list_parts(c.fs, c.path)) == 1 and J.journal_paths(str(tmp_path)) == []


def test_another_writers_journal_is_neither_read_nor_folded(tmp_path):
    journal_of(tmp_path, "bob", 2).close()
    c = GenerationCache(str(tmp_path), user="ann")
    assert c.get(req(0).key()) is None and len(c.foreign_skipped) == 1
    assert c.fold_journals() == 0 and len(J.journal_paths(str(tmp_path))) == 1
    opted = GenerationCache(str(tmp_path), user="ann", read_from=["bob"])
    assert opted.get(req(1).key()) == comp(1)


def test_a_root_the_replica_does_not_have_is_not_journaled(tmp_path, caplog):
    js = journal_of(tmp_path / "not here", "ann", 2)
    assert js.writers == {(str(tmp_path / "not here"), "ann"): None}
    assert not (tmp_path / "not here").exists()
    assert J.target_of("s3://bucket/cache", "ann") is None


def test_a_replicas_streams_journal_every_answer_before_it_is_sent(tmp_path):
    engine = make_engine({"kind": "simulated", "model": "sim", "engine_args": {
        "capacity": 16, "step_s": 0.001, "mean_tokens": 5}})
    streams = AnswerStreams(Replica(engine, 16))
    reqs = [ChatRequest(model="sim", messages=(Message("user", f"Q{i}?"),), seed=i)
            for i in range(20)]
    target = (str(tmp_path), "ann")

    async def run():
        streams.submit("s", [(i, r.to_dict(), r.key()) for i, r in enumerate(reqs)], target)
        got = {}
        async for out in streams.stream("s", coalesce_s=0.005, idle_s=0.1):
            on_disk = GenerationCache(str(tmp_path), user="ann")
            for tag, d in out:  # each answer was on disk before it came, and says so
                assert d.pop("journaled") is True
                assert on_disk.get(reqs[tag].key()) == Completion(**d)
                got[tag] = d
        return got

    got = asyncio.run(run())
    assert sorted(got) == list(range(20))
    streams.journals.close()
    assert GenerationCache(str(tmp_path), user="ann").fold_journals() == 1


def test_a_served_replica_journals_each_callers_answers_in_its_own_root(tmp_path):
    """The per-call path of the actor and the Serve deployment (``replica_answers``): each
    caller's answers go to the journal its call names, under its user; a call without one
    is not journaled. A call that asks (``mark``) has each answer on disk marked so; one
    that does not (an earlier df_ray's client) gets the answers as they were, and a journal
    that cannot be written marks nothing."""
    from df_ray.pipeline.engine_health import replica_answers

    engine = make_engine({"kind": "simulated", "model": "sim", "engine_args": {
        "capacity": 8, "step_s": 0.001, "mean_tokens": 5}})
    replica, journals = Replica(engine, 8), J.Journals()
    ann, bob = tmp_path / "ann", tmp_path / "bob"
    ann.mkdir()
    bob.mkdir()
    reqs = [ChatRequest(model="sim", messages=(Message("user", f"Q{i}?"),), seed=i)
            for i in range(8)]

    async def run():
        return await asyncio.gather(
            replica_answers(replica, [r.to_dict() for r in reqs[:3]], (str(ann), "ann"),
                            journals, mark=True),
            replica_answers(replica, [r.to_dict() for r in reqs[3:5]], (str(bob), "bob"),
                            journals),
            replica_answers(replica, [reqs[5].to_dict()], None, journals, mark=True),
            replica_answers(replica, [r.to_dict() for r in reqs[6:]],
                            (str(tmp_path / "gone"), "ann"), journals, mark=True))

    a, b, c, d = asyncio.run(run())
    assert [x.pop("journaled") for x in a] == [True] * 3
    assert not any("journaled" in x for x in b + c + d)
    journals.close()
    got_ann = GenerationCache(str(ann), user="ann")
    got_bob = GenerationCache(str(bob), user="bob")
    assert [got_ann.get(r.key()) for r in reqs[:3]] == [Completion(**d) for d in a]
    assert [got_bob.get(r.key()) for r in reqs[3:5]] == [Completion(**d) for d in b]
    assert len(got_ann) == 3 and len(got_bob) == 2  # nobody's answer in the other's root
    assert GenerationCache(str(bob), user="ann").get(reqs[3].key()) is None  # bob's name


def test_closing_one_target_finishes_its_journal_alone(tmp_path):
    ann, bob = tmp_path / "ann", tmp_path / "bob"
    ann.mkdir()
    bob.mkdir()
    js = J.Journals()
    js.write([((str(ann), "ann"), req(0), comp(0)), ((str(bob), "bob"), req(1), comp(1))])
    js.close((str(ann), "ann"))
    assert GenerationCache(str(ann), user="ann").fold_journals() == 1
    assert GenerationCache(str(bob), user="bob").fold_journals() == 0  # still written
    js.write([((str(ann), "ann"), req(2), comp(2))])  # a new journal for a later answer
    [path] = J.journal_paths(str(ann))
    js.close()
    c = GenerationCache(str(ann), user="ann")
    assert c.fold_journals() == 1 and not os.path.exists(path)
    assert [c.get(req(i).key()) for i in (0, 2)] == [comp(0), comp(2)]
