"""The one-line exception text the run summary, the engine pool and the serving status show."""

from df_ray.pipeline.error_text import first_line, last_line


def test_first_line_of_a_multi_line_error():
    e = RuntimeError("\n  engine died: CUDA error\nTraceback (most recent call last):\n  ...")
    assert first_line(e) == "engine died: CUDA error"
    assert first_line(e, typed=True) == "RuntimeError: engine died: CUDA error"


def test_an_error_without_text_is_named_by_its_type():
    assert first_line(TimeoutError()) == "TimeoutError"
    assert first_line(ValueError("   \n  "), typed=True) == "ValueError"


def test_the_line_is_cut_to_the_limit():
    assert first_line(OSError("x" * 500), limit=200) == "x" * 200
    assert first_line(OSError("x" * 500), typed=True) == "OSError: " + "x" * 300


def test_last_line_is_a_ray_errors_cause():
    e = RuntimeError("ray::EngineActor.generate()\n  File \"x.py\", line 3\nValueError: bad prompt\n")
    assert last_line(e) == "ValueError: bad prompt"
    assert last_line(OSError("y" * 500)) == "y" * 300
    assert last_line(TimeoutError()) == "TimeoutError"
