"""lm-evaluation-harness's own answer filters for MMLU-Pro and GPQA, run as the harness runs them.

The regexes are read from the installed ``lm_eval`` package's task configs
(``tasks/mmlu_pro/_default_template_yaml``: ``custom-extract``;
``tasks/gpqa/cot_zeroshot/_gpqa_cot_zeroshot_yaml``: ``strict-match`` and
``flexible-extract``) and applied with the harness's filter classes (``RegexFilter``,
``MultiChoiceRegexFilter``, ``take_first``). Only ``lm_eval.filters`` is imported (the
package is installed without its model dependencies).

A filtered answer is turned into a letter the way the harness scores it: ``exact_match``
with ``ignore_case`` and ``ignore_punctuation`` against the target (a letter for MMLU-Pro,
``(X)`` for GPQA), so a filtered ``(b)`` or ``B`` counts as ``B`` and ``[invalid]`` or
``(B) Paris`` as no answer.
"""

from __future__ import annotations

import string
from importlib import resources
from typing import Any

import yaml


class _Loader(yaml.SafeLoader):
    pass


_Loader.add_multi_constructor("!", lambda loader, suffix, node: None)


def _task_config(*parts: str) -> dict[str, Any]:
    path = resources.files("lm_eval").joinpath("tasks", *parts)
    return yaml.load(path.read_text(), Loader=_Loader)


def _filters(cfg: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return {f["name"]: f["filter"] for f in cfg["filter_list"]}


MMLU_PRO_FILTERS = _filters(_task_config("mmlu_pro", "_default_template_yaml"))
GPQA_FILTERS = _filters(_task_config("gpqa", "cot_zeroshot", "_gpqa_cot_zeroshot_yaml"))


def _letter(filtered: str, n_options: int) -> str | None:
    s = filtered.lower().translate(str.maketrans("", "", string.punctuation)).strip()
    letters = "abcdefghij"[:n_options]
    return s.upper() if len(s) == 1 and s in letters else None


def _filter_many(steps: list[dict[str, Any]], texts: list[str], docs: list[dict[str, Any]],
                 n: int) -> list[str | None]:
    """The filter chain over a batch, as the harness applies it (one response per doc)."""
    from lm_eval.filters import build_filter_ensemble

    comps = [(s["function"], {k: v for k, v in s.items() if k != "function"}) for s in steps]
    resps: Any = [[t] for t in texts]
    for make in build_filter_ensemble("reference", comps).filters:
        resps = list(make().apply(resps, docs))
    return [_letter(r if isinstance(r, str) else r[0], n) for r in resps]


def mmlu_pro_custom_extract(texts: list[str]) -> list[str | None]:
    return _filter_many(MMLU_PRO_FILTERS["custom-extract"], texts, [{} for _ in texts], 10)


def gpqa_strict_match(texts: list[str]) -> list[str | None]:
    return _filter_many(GPQA_FILTERS["strict-match"], texts, [{"choices": []} for _ in texts], 4)


def gpqa_flexible_extract(texts: list[str], choices: list[list[str]]) -> list[str | None]:
    return _filter_many(GPQA_FILTERS["flexible-extract"], texts,
                        [{"choices": c} for c in choices], 4)
