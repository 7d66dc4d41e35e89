"""The MMLU-Pro answer extraction, transcribed from the benchmark's evaluation script.

Source: TIGER-AI-Lab/MMLU-Pro, ``evaluate_from_api.py`` (also ``evaluate_from_local.py``),
functions ``extract_answer`` -> ``extract_again`` -> ``extract_final`` (MIT License). The three
regexes and their order are kept exactly; the prints were dropped. ``level`` reports which of
the three found the letter (3 is the last-resort guess: the last standalone capital A-J).
"""

from __future__ import annotations

import re


def extract_answer_with_level(text: str) -> tuple[str | None, int]:
    match = re.search(r"answer is \(?([A-J])\)?", text)
    if match:
        return match.group(1), 1
    match = re.search(r".*[aA]nswer:\s*([A-J])", text)
    if match:
        return match.group(1), 2
    match = re.search(r"\b[A-J]\b(?!.*\b[A-J]\b)", text, re.DOTALL)
    if match:
        return match.group(0), 3
    return None, 0


def extract_answer(text: str) -> str | None:
    return extract_answer_with_level(text)[0]
