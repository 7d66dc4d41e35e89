"""Registries that keep their promise: a benchmark and an answer kind that df_ray has never
seen, one plugin module (here a temporary one) that registers them when imported, run end
to end with no edit to df_ray, in process and on Ray alike (the config names the plugin;
the plan carries it to every worker), and the generic layers ask the task, not its name,
whether it is sandboxed, what it tags and where its data comes from."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import df_ray
from df_ray.cli import main
from df_ray.core.parsing import KINDS, canonicalize, parse
from df_ray.core.types import ParseSpec
from df_ray.tasks import REGISTRY, data_location, get_task, task_for

PLUGIN = '''
"""Parity: is n even? Answered "Verdict: yes" / "Verdict: no" (the answer kind "verdict")."""

from dataclasses import dataclass

from df_ray.core.parsing import register_kind
from df_ray.core.parsing.kinds import AnswerWords, Found, Invalid, options_of
from df_ray.engines.scripted import last_user_content
from df_ray.tasks import register_task
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


def example(spec, seed):
    """How a verdict looks (what df-ray show's stand-in engines answer)."""
    words = options_of(spec, Options).words
    return f"Verdict: {words[seed % len(words)]}"


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


# ---------------------------------------------------------------- the registry lines


register_task("parity", "parity_plugin:ParityTask")
register_kind("verdict", "parity_plugin")
'''


@pytest.fixture
def plugin_file(tmp_path, monkeypatch):
    """The plugin module in a folder of its own, on this process's path; the registries and
    the record of imported plugins as they were afterwards (it registers itself on import)."""
    from df_ray import plugins

    (tmp_path / "parity_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    # another test's module of the same name, imported earlier in this process, is not ours
    sys.modules.pop("parity_plugin", None)
    before = dict(REGISTRY), dict(KINDS), dict(plugins._loaded)
    yield tmp_path
    for registry, was in zip((REGISTRY, KINDS, plugins._loaded), before, strict=True):
        registry.clear()
        registry.update(was)
    sys.modules.pop("parity_plugin", None)


@pytest.fixture
def plugin(plugin_file):
    """The plugin imported (its registry lines have run)."""
    import parity_plugin  # noqa: F401

    return plugin_file


def config(tmp_path, **over):
    backbones = {f"b{i}": {"kind": "scripted", "model": f"m{i}",
                           "script": "parity_plugin:respond"} for i in (1, 2, 3)}
    cfg = {"name": "parity", "benchmark": "parity", "method": "darkforest",
           "plugins": ["parity_plugin"],
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


def test_a_new_benchmark_runs_end_to_end_with_no_df_ray_edit(plugin_file, tmp_path):
    ev = df_ray.evaluate(config(tmp_path))  # the config's plugins: imported, then validated
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


def test_df_ray_show_answers_in_the_plugin_s_own_kind(plugin_file, tmp_path, capsys):
    """The stand-in engines of ``df-ray show`` answer a plugin's answer kind in its own form
    (the kind's ``example``): every agent's answer is a valid verdict."""
    import yaml

    from df_ray.core.parsing import example_output

    backbones = {f"b{i}": {"kind": "vllm", "model": f"org/m{i}"} for i in (1, 2, 3)}
    path = tmp_path / "parity.yaml"
    path.write_text(yaml.safe_dump(config(tmp_path, backbones=backbones, method="debate",
                                          method_args={"rounds": 1})))
    assert main(["show", "--config", str(path), "--sample", "n3"]) == 0
    out = capsys.readouterr().out
    assert "scripted b1: majority (else the verdict kind's example answer)" in out
    answers = out.split("[stand-in answer]\n")[1:]
    assert len(answers) == 3 and all(a.startswith("Verdict: ") for a in answers)
    assert "final answer: 'yes'" in out or "final answer: 'no'" in out
    spec = ParseSpec("verdict", words=("yes", "no"))
    assert {example_output(spec, s) for s in (0, 1)} == {"Verdict: yes", "Verdict: no"}
    assert all(parse(example_output(spec, s), spec).valid for s in range(4))


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


# ---------------------------------------------------------------- plugins as a way in


def _write_config(folder, name="parity.yaml", **over):
    import yaml

    cfg = config(folder, results_dir=str(folder / "results"), cache_root=str(folder / "cache"),
                 tracking={"uri": f"sqlite:///{folder / 'mlflow.db'}", "experiment": "parity"},
                 batch_size=2, **over)
    path = folder / name
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.slow
def test_a_plugin_named_in_the_config_runs_on_ray_as_in_process(plugin_file, tmp_path,
                                                                 ray_local, monkeypatch,
                                                                 capsys):
    """``df-ray run`` on a local Ray that started before the plugin's folder existed: the
    stage and the engine replicas import the plugin as the plan names it (its folder, its
    module), the driver validates the configuration once and builds its Method once, and
    the rows and accuracy are ``df_ray.evaluate``'s."""
    import pyarrow.parquet as pq

    from df_ray.config import RunConfig
    from df_ray.methods.darkforest import DarkForest
    from tests.helpers import count_constructions

    path = _write_config(tmp_path)
    assert "parity_plugin" not in sys.modules  # the config's plugins: list imports it
    validated = []
    real = RunConfig.model_validate.__func__
    monkeypatch.setattr(RunConfig, "model_validate", classmethod(
        lambda cls, *a, **k: validated.append(cls) or real(cls, *a, **k)))
    built = count_constructions(monkeypatch, method=DarkForest)
    assert main(["run", "--config", str(path)]) == 0, capsys.readouterr().err
    assert (len(validated), built["method"]) == (1, 1)
    (results,) = (tmp_path / "results").rglob("samples.parquet")
    rows = sorted(pq.read_table(results).to_pylist(), key=lambda r: r["sample_id"])
    ev = df_ray.evaluate(config(tmp_path))
    assert [(r["sample_id"], r["final_answer"], r["correct"]) for r in rows] == [
        (r.sample_id, r.final_answer, r.correct) for r in ev.rows]
    assert len(rows) == 6 and all(r["correct"] for r in rows)
    assert ev.metrics["accuracy"] == sum(r["correct"] for r in rows) / len(rows) == 1.0


@pytest.mark.parametrize("named", ["config", "flag"])
@pytest.mark.parametrize(("body", "error"), [
    (None, "ModuleNotFoundError: No module named 'broken_plugin'"),
    ("raise RuntimeError('no licence for parity')", "RuntimeError: no licence for parity")])
def test_a_plugin_that_fails_to_import_stops_the_run_in_one_line(tmp_path, monkeypatch, capsys,
                                                                 named, body, error):
    from df_ray.pipeline import runner

    if body is not None:
        (tmp_path / "broken_plugin.py").write_text(body)
        monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(runner, "init_ray", lambda *a, **k: pytest.fail("Ray was started"))
    monkeypatch.delitem(sys.modules, "broken_plugin", raising=False)
    if named == "config":
        argv = ["run", "--config", str(_write_config(tmp_path, plugins=["broken_plugin"]))]
    else:
        argv = ["run", "--config", str(_write_config(tmp_path, plugins=[])),
                "--plugin", "broken_plugin"]
    assert main(argv) == 2
    out = capsys.readouterr()
    assert out.err.strip().splitlines() == [
        f"df-ray: configuration error: plugin 'broken_plugin' failed to import: {error}"]


def test_an_installed_package_names_its_plugin_by_entry_point(plugin_file, monkeypatch):
    from df_ray import plugins

    info = plugin_file / "parity_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: parity-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[df_ray.plugins]\nparity = parity_plugin\n")
    monkeypatch.setattr(plugins, "_entry_points_done", False)
    assert "parity_plugin" in plugins.entry_point_plugins()
    assert "parity" not in REGISTRY
    assert "parity_plugin" in plugins.load_plugins()
    assert REGISTRY["parity"] == "parity_plugin:ParityTask" and KINDS["verdict"] == "parity_plugin"


def test_the_driver_imports_a_plugin_from_its_working_directory(plugin_file, monkeypatch):
    """As under ``python -m`` (and as a job's working dir on a cluster): the console script's
    own folder is on its path, the working directory is not."""
    from df_ray.plugins import import_roots, load_plugins

    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(plugin_file))])
    monkeypatch.chdir(plugin_file)
    assert "parity_plugin" in load_plugins(["parity_plugin"])
    assert REGISTRY["parity"] == "parity_plugin:ParityTask"
    assert import_roots(["parity_plugin"]) == (str(plugin_file.resolve()),)


def test_a_plan_names_what_it_runs_and_lands_with_its_plugins(plugin_file, monkeypatch):
    """The plan resolves the names once (targets), and a pickled plan imports its plugins
    before anything of it is built: the Task from the plan's target, not a registry."""
    import pickle

    from df_ray.evaluation.plan import resolve

    (plan,) = resolve(config(plugin_file))
    assert plan.task_target == "parity_plugin:ParityTask" and plan.kinds["verdict"] == \
        "parity_plugin"
    assert plan.engines == {"scripted": "df_ray.engines.scripted:ScriptedEngine"}
    assert "parity_plugin" in plan.plugins and plan.plugin_roots
    blob = pickle.dumps(plan)
    # as in a worker of its own: neither the plugin, nor its folder, nor its registry lines
    from df_ray import plugins

    sys.modules.pop("parity_plugin")
    plugins._loaded.pop("parity_plugin")
    REGISTRY.pop("parity")
    KINDS.pop("verdict")
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(plugin_file)])
    landed = pickle.loads(blob)
    assert "parity_plugin" in sys.modules and KINDS["verdict"] == "parity_plugin"
    assert landed.samples == () and landed.method is not plan.method
    REGISTRY["parity"] = "nowhere:Nothing"  # the Task comes from the plan's target
    assert type(landed.task).__name__ == "ParityTask"


@pytest.mark.slow
def test_df_ray_run_imports_a_plugin_from_its_working_directory(tmp_path):
    """The user's way: the plugin file and the config in one folder, ``df-ray run`` started
    there (the console script: the working directory is not on its path), its own local Ray:
    the driver imports the plugin from the working directory and the workers find it."""
    import os
    import shutil
    import subprocess

    import pyarrow.parquet as pq

    (tmp_path / "parity_plugin.py").write_text(PLUGIN)
    _write_config(tmp_path)
    script = shutil.which("df-ray", path=os.path.dirname(sys.executable)) or "df-ray"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    repo = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([repo, *filter(None, [env.get("PYTHONPATH")])])
    proc = subprocess.run([script, "run", "--config", "parity.yaml"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (results,) = (tmp_path / "results").rglob("samples.parquet")
    rows = pq.read_table(results).to_pylist()
    assert len(rows) == 6 and all(r["correct"] for r in rows)
