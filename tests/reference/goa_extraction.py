"""Graph-of-Agents' answer extraction, the rules the DarkForest paper's scores were read with,
restated here (UNITES-Lab/GoA ``utils.py``, MIT License).

Multiple choice (``get_alphabet_choice``): the last letter among the first ``n`` capitals
that a ``)`` follows, else the last of those capitals anywhere in the text (inside words
too: no word boundary).

HumanEval (``extract_human_eval_completion``):

GoA first looks for an answer inside JSON (its agents may answer as a JSON object); df_ray's
prompts ask for a fenced block, and the corpora hold no JSON answers, so only the steps that
read fenced and plain text are restated. On such text the rule is:

1. the first ```` ```python ```` block that is closed (non-greedy), stripped;
2. else, when the text does not start like code (``from``/``import``/``def``/``class`` or
   whitespace), the first closed unlabelled block whose text has ``def``/``return``/``for``/
   ``if``;
3. else the whole text;

then every line that starts (after indentation) with ``print(`` or is a ``# Test cases``
comment is dropped, wherever it is (inside a function body too), and the result stripped.
"""

from __future__ import annotations

import re

_PY_BLOCK = re.compile(r"```python\s*\n(.*?)```", re.DOTALL)
_ANY_BLOCK = re.compile(r"```\s*\n(.*?)```", re.DOTALL)
_CODE_START = re.compile(r"\s*(from |import |def |class |\s)")
_CODE_WORD = re.compile(r"\b(def |return |for |if )")
_TEST_CASES = re.compile(r"^#\s*Test cases", re.IGNORECASE)


def extract_completion(text: str) -> str:
    code = text
    block = _PY_BLOCK.search(code)
    if block:
        code = block.group(1).strip()
    if not _CODE_START.match(code):
        plain = _ANY_BLOCK.search(code)
        if plain and _CODE_WORD.search(plain.group(1).strip()):
            code = plain.group(1).strip()
    kept = [ln for ln in code.split("\n")
            if not ln.strip().startswith("print(") and not _TEST_CASES.match(ln.strip())]
    return "\n".join(kept).strip()


def alphabet_choice(text: str, n_options: int) -> str | None:
    letters = "".join(chr(65 + i) for i in range(n_options))
    found = re.findall(f"([{letters}])\\)", text) or re.findall(f"([{letters}])", text)
    return found[-1] if found else None


def drops_line(line: str) -> bool:
    """Whether the rule's last step drops this line."""
    return line.strip().startswith("print(") or bool(_TEST_CASES.match(line.strip()))
