from __future__ import annotations

import threading

import pytest

from df_ray.core.types import Observation
from df_ray.tasks import _common as C
from df_ray.tasks.base import DataSchemaError, Sample
from df_ray.tasks.math import MathTask, last_boxed, math_equal

GRADER_TABLE = [
    ("\\frac{1}{2}", "0.5", True),
    ("\\frac{1}{2}", "1/2", True),
    ("\\frac{1}{2}", "\\dfrac12", True),
    ("\\frac{1}{2}", "\\frac{1}{3}", False),
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3, \\pi/2)", True),
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3, \\pi)", False),
    ("5\\sqrt{2}", "\\sqrt{50}", True),
    ("10", "10.0", True),
    ("10", "\\boxed{10}", True),
    ("x^2+2x+1", "(x+1)^2", True),
    ("(-2,2)", "(-2, 2)", True),
    ("\\text{(C)}", "\\text{(C)}", True),
    ("3", "4", False),
    ("2", "", False),
]


@pytest.mark.parametrize(("gold", "pred", "ok"), GRADER_TABLE)
def test_grader_table(gold, pred, ok):
    assert math_equal(gold, pred) is ok


def _sample(gold):
    return Sample(id="m", task="math", question="q", gold=gold)


def test_grade_uses_extracted_answer_and_rejects_invalid():
    t = MathTask()
    s = _sample("\\frac{3}{4}")
    assert t.grade(s, Observation(agent="a", answer="3/4", extracted="0.75")).correct
    assert not t.grade(s, Observation(agent="a", answer="1", extracted="1")).correct
    assert not t.grade(s, None).correct
    assert not t.grade(s, Observation.invalid("a")).correct
    assert not t.grade(s, Observation(agent="a", answer="x", extracted="9" * 5000)).correct


def test_grading_off_the_main_thread_works():
    t = MathTask()
    s = _sample("\\frac{1}{2}")
    out = {}

    def work():
        out["good"] = t.grade(s, Observation(agent="a", answer="", extracted="0.5")).correct
        out["bad"] = t.grade(s, Observation(agent="a", answer="", extracted="2")).correct

    th = threading.Thread(target=work)
    th.start()
    th.join(60)
    assert out == {"good": True, "bad": False}


def test_last_boxed():
    assert last_boxed("a \\boxed{1} then \\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert last_boxed("no box") is None
    assert last_boxed("\\boxed 5$") == "5"


def test_loaders_on_each_schema(fixtures):
    t = MathTask(test_source=str(fixtures / "math500.jsonl"))
    goa = t.load("test", source=str(fixtures / "math_goa.json"))
    m500 = t.load("test", source=str(fixtures / "math500.jsonl"))
    assert len(goa) == 4 and len(m500) == 3
    # the same problem has the same id whichever schema it came from
    assert goa[0].id == m500[0].id
    assert m500[0].meta["unique_id"] == "test/prealgebra/1.json"
    cal = t.load("calibration", source=str(fixtures / "hendrycks_math.jsonl"))
    assert len(cal) == 5  # the MATH-500 problem was removed from the pool
    assert not {s.id for s in cal} & {s.id for s in m500}
    assert {s.gold for s in cal} == {"21", "4", "10", "\\frac34", "6"}
    assert [s.id for s in t.load("calibration", source=str(fixtures / "hendrycks_math.jsonl"),
                                 seed=0)] == [s.id for s in cal]
    assert t.load("test", source=str(fixtures / "math_goa.json"), limit=2) == goa[:2]
    p = t.agent_prompt(goa[0])
    assert "\\boxed" in p and "Confidence" in p and goa[0].question in p


def test_calibration_needs_a_known_test_set_offline(fixtures):
    with pytest.raises(C.HubUnavailable):
        MathTask().load("calibration", source=str(fixtures / "hendrycks_math.jsonl"))


def test_schema_errors_name_file_row_field(tmp_path):
    f = tmp_path / "bad.json"
    f.write_text('[{"question": "q", "gold_answer": "1"}, {"question": 3, "gold_answer": "1"}]')
    with pytest.raises(DataSchemaError, match=r"bad\.json.*row 1.*'question'.*int"):
        MathTask().load("test", source=str(f))
    f.write_text('[{"problem": "q"}]')
    with pytest.raises(DataSchemaError, match=r"row 0.*'solution'"):
        MathTask().load("test", source=str(f))


def test_gold_key_matches_the_parser():
    from df_ray.core.parsing import parse

    t = MathTask()
    s = _sample("\\frac{1}{2}")
    obs = parse("so the answer is \\boxed{\\frac12}\nConfidence: 0.7", t.parse_spec(s), "a")
    assert obs.answer == t.gold_key(s)
    assert t.grade(s, obs).correct


def test_offline_cache_miss_names_the_cache_folder():
    """Offline, `datasets` is asked (it reads its own cache); a miss is one line naming the
    data set, the cache folder it looked in and the command that fills it."""
    import datasets.config

    with pytest.raises(C.HubUnavailable) as e:
        MathTask().load("test")
    msg = str(e.value)
    assert "\n" not in msg and "HuggingFaceH4/MATH-500" in msg
    assert str(datasets.config.HF_DATASETS_CACHE) in msg
    assert "datasets.load_dataset('HuggingFaceH4/MATH-500', split='test')" in msg
