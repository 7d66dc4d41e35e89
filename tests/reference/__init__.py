"""Reference implementations the differential tests compare df_ray against.

Where the reference is a package (math-verify, lm-evaluation-harness) the tests import it;
where it is a small script that is not on PyPI (the MMLU-Pro evaluation script, FinQA's
``evaluate.py``) a faithful transcription of its extraction/scoring functions lives here, with
its source cited at the top of the module.
"""
