"""Registries that keep their promise: a benchmark and an answer kind that df_ray has never
seen, each one module (here one temporary module) plus one registry line, run end to end
with no edit to df_ray, and the generic layers ask the task, not its name, whether it is
sandboxed, what it tags and where its data comes from."""

from __future__ import annotations

import pytest

import df_ray
from df_ray.cli import main
from df_ray.core.parsing import KINDS, canonicalize, parse
from df_ray.core.types import ParseSpec
from df_ray.tasks import REGISTRY, data_location, get_task, task_for

PLUGIN = '''
"""Parity: is n even? Answered "Verdict: yes" / "Verdict: no" (the answer kind "verdict")."""

from dataclasses import dataclass

from df_ray.core.parsing.kinds import AnswerWords, Found, Invalid, options_of
from df_ray.engines.scripted import last_user_content
from df_ray.tasks.answer_instruction import answer_instruction
from df_ray.tasks.base import BaseTask, Grade, Sample


# ---------------------------------------------------------------- the answer kind "verdict"


@dataclass(frozen=True)
class Options:
    words: tuple = ("yes", "no")


def parse(text, spec):
    words = options_of(spec, Options).words
    for line in reversed(text.splitlines()):
        if line.lower().startswith("verdict:"):
            word = line.split(":", 1)[1].strip().lower()
            if word in words:
                return Found(word, 1.0, word, "verdict")
            return Invalid(f"{word!r} is not one of {words}", "verdict", word)
    return Invalid("no verdict")


def canonicalize(answer, spec):
    word = answer.strip().lower()
    return word if word in options_of(spec, Options).words else None


def words(spec):
    """What methods say about a verdict (the kind's own words)."""
    allowed = options_of(spec, Options).words
    example = ("Is 7 even?", "7 = 2 * 3 + 1.\\nVerdict: yes",
               [("7 = 2 * 3 + 1.", "looks good"), ("Verdict: yes", "wrong! 7 is odd")],
               "7 = 2 * 3 + 1.\\nVerdict: no")
    return AnswerWords(noun="a verdict word: " + " or ".join(allowed),
                       options=allowed,
                       critique_focus="Check the parity of n digit by digit before the verdict.",
                       feedback_examples=(example,))


# ---------------------------------------------------------------- the benchmark "parity"


class ParityTask(BaseTask):
    name = "parity"
    kind = "verdict"
    data_source = "generated (n = 0..5; calibration 100..105)"
    data_hint = "nothing to fetch"

    def load(self, split, *, source=None, limit=None, seed=0):
        start = 0 if split == "test" else 100
        rows = [Sample(id=f"n{n}", task="parity", question=f"Is {n} even?",
                       gold="yes" if n % 2 == 0 else "no") for n in range(start, start + 6)]
        return rows[:limit] if limit else rows

    def parse_spec(self, sample):
        from df_ray.core.types import ParseSpec

        return ParseSpec("verdict", words=("yes", "no"))

    def answer_instructions(self):
        return answer_instruction("End with a line 'Verdict: yes' or 'Verdict: no'.")

    def agent_prompt(self, sample):
        return f"{sample.question}\\n{self.answer_instructions()}"

    def gold_key(self, sample):
        return sample.gold

    def grade(self, sample, answer):
        ok = answer is not None and answer.valid and answer.answer == sample.gold
        return Grade(ok, {"accuracy": float(ok)}, "the verdict" if ok else "not the verdict")


# ---------------------------------------------------------------- a scripted responder


def respond(request):
    """Right for m1 and m2 (with confidence), always "yes" for m3."""
    n = int(last_user_content(request).split("Is ", 1)[1].split(" ", 1)[0])
    if request.model == "m3":
        return "I think so.\\nVerdict: yes\\nConfidence: 0.6"
    return f"{n} mod 2 = {n % 2}.\\nVerdict: {'no' if n % 2 else 'yes'}\\nConfidence: 0.9"
'''


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    (tmp_path / "parity_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    # the registry lines: one per registry
    monkeypatch.setitem(REGISTRY, "parity", "parity_plugin:ParityTask")
    monkeypatch.setitem(KINDS, "verdict", "parity_plugin")
    return tmp_path


def config(tmp_path, **over):
    backbones = {f"b{i}": {"kind": "scripted", "model": f"m{i}",
                           "script": "parity_plugin:respond"} for i in (1, 2, 3)}
    cfg = {"name": "parity", "benchmark": "parity", "method": "darkforest",
           "method_args": {"ablation": "no_calibration"}, "backbones": backbones,
           "agents": [{"id": f"a{i}", "backbone": f"b{i}"} for i in (1, 2, 3)],
           "coordinator": {"id": "coord", "backbone": "b3"},
           "calibration": {"dir": str(tmp_path / "calibration"), "auto_fit": False}}
    cfg.update(over)
    return cfg


def test_a_new_answer_kind_parses_and_canonicalizes(plugin):
    spec = ParseSpec("verdict", words=("yes", "no"))
    obs = parse("Even.\nVerdict: YES\nConfidence: 0.8", spec, agent="a1")
    assert (obs.valid, obs.answer, obs.rule, obs.confidence) == (True, "yes", "verdict", 0.8)
    bad = parse("Verdict: maybe", spec)
    assert not bad.valid and bad.reason == "'maybe' is not one of ('yes', 'no')"
    assert canonicalize(" No ", spec) == "no" and canonicalize("perhaps", spec) is None
    # an option the kind does not declare is an invalid observation naming the kind
    assert "parser error" in parse("Verdict: yes", ParseSpec("verdict", colour="red")).reason
    unknown = parse("Verdict: yes", ParseSpec("nonesuch"))
    assert not unknown.valid and "unknown answer kind 'nonesuch'" in unknown.reason


def test_a_new_benchmark_runs_end_to_end_with_no_df_ray_edit(plugin, tmp_path):
    ev = df_ray.evaluate(config(tmp_path))
    assert [r.sample_id for r in ev.rows] == [f"n{n}" for n in range(6)]
    # a1 and a2 are right and agree: the guardrail trusts them over a3 and the coordinator
    assert [r.final_answer for r in ev.rows] == ["yes", "no", "yes", "no", "yes", "no"]
    assert ev.metrics["accuracy"] == 1.0
    assert all(r.correct for r in ev.rows)


def test_the_generic_layers_ask_the_task(plugin, tmp_path, capsys):
    task = get_task("parity")
    assert task.sandboxed is False and task.run_tags() == {}
    assert data_location("parity", None) == ("generated (n = 0..5; calibration 100..105)",
                                             "nothing to fetch")
    assert data_location("parity", "/data/p.json")[0] == "local /data/p.json"
    # df-ray validate: the config and its data, with the benchmark the registry line added
    import yaml

    path = tmp_path / "parity.yaml"
    path.write_text(yaml.safe_dump(config(tmp_path)))
    assert main(["validate", "--config", str(path), "--data"]) == 0, capsys.readouterr().err


def test_the_sandboxed_benchmark_says_so_itself():
    from df_ray.config import RunConfig

    cfg = RunConfig.model_validate({
        "benchmark": "humaneval", "sandbox": {"isolation": "best_effort"},
        "backbones": {"b": {"kind": "scripted", "model": "m"}},
        "agents": [{"id": "a1", "backbone": "b"}], "coordinator": {"id": "c", "backbone": "b"}})
    task = task_for(cfg)
    assert task.sandboxed and task.isolation == "best_effort"
    tags = task.run_tags()
    assert tags["df_ray.sandbox.isolation"] == "best_effort" and "df_ray.sandbox.layers" in tags
    assert not any(get_task(n).sandboxed for n in REGISTRY if n != "humaneval")



@pytest.mark.parametrize(("method", "args"), [
    ("goa_mean", {}), ("reconcile", {}), ("self_refine", {}),
    ("self_refine", {"protocol": "df_ray"})])
def test_a_new_answer_kind_is_prompted_in_its_own_words(plugin, tmp_path, method, args):
    """GoA's first answer, ReConcile's JSON answer field and Self-Refine's critique say what
    the new kind's module says (its ``words``), never multiple-choice or math wording; an
    invalid ReConcile answer is replaced by one of the kind's own valid answers."""
    import parity_plugin

    from df_ray.engines.scripted import ScriptedEngine

    cfg = config(tmp_path, method=method, method_args=args)
    engines = {name: ScriptedEngine(spec["model"], parity_plugin.respond)
               for name, spec in cfg["backbones"].items()}
    ev = df_ray.evaluate(cfg, engines=engines)
    texts = [m.content for e in engines.values() for r in e.calls for m in r.messages
             if m.role == "user"]
    joined = "\n".join(texts)
    assert texts
    for other in ("answer choices", "mathematical expression", "A,B,C,D", "\\boxed",
                  "Redo each calculation", "the chosen letter", "Solve the following math"):
        assert other not in joined, (method, other)
    if method == "goa_mean":
        assert '"answer": "<a verdict word: yes or no>"' in joined
    elif method == "reconcile":
        assert 'Only place a verdict word: yes or no in the "answer" field.' in joined
        # the replies are not JSON: each is replaced by one of the kind's own answers
        finals = {r.final_answer for r in ev.rows}
        assert finals <= {"yes", "no"} and finals
    elif args:  # df_ray's critique: the kind's focus
        assert "Check the parity of n digit by digit before the verdict." in joined
    else:  # the reference's few-shot feedback: the kind's own example
        assert "Is 7 even?" in joined and "wrong! 7 is odd" in joined
    assert len(ev.rows) == 6 and ev.failure is None
