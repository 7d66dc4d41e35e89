"""Behavioural candidates for HumanEval: programs keyed by what they do on the prompt's own
examples (execution agreement, as CodeT, MBR-exec and AlphaCode cluster programs).

For one sample the inputs are :func:`df_ray.tasks.humaneval_examples.prompt_inputs` of its
prompt (never the hidden tests in ``meta["test"]``). Each valid program runs once in the
sandbox on all of them (one sandboxed process per program, through
``df_ray.sandbox.run_tests``): the program in its process, a trusted harness in the other
calling its entry point through the sandbox's pipe, so arguments and results cross as plain
data. The harness prints one line per input, prefixed by a per-run nonce the program never
sees (the harness is read after the program's process starts), so a program cannot forge
another's outputs by printing.

Key: ``beh:`` + the first 16 hex of sha256 over the outputs, each the canonical ``repr`` of
the value (sets and dict items sorted by their repr, floats rounded to 6 decimals, as
HumanEval's checks compare with a tolerance) or ``raise <ExceptionType>``; inputs the
sandbox's time limit cut off are ``timeout``. A program that fails to load (syntax, import,
no entry point) or raises on every input is an invalid observation (``reason`` says why),
not a cluster.

Runs are cached by (program, inputs) in a :class:`BehaviourCache` (a folder of small JSON
files under the cache root): a rerun does no sandbox work, and two agents (or the
coordinator) writing the same program pay once.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from df_ray.core.types import Observation
from df_ray.tasks.humaneval_examples import CallInput, PromptInputs, prompt_inputs

__all__ = ["KEY_PREFIX", "Behaviour", "BehaviourCache", "BehaviourKeyer", "canonical_repr",
           "harness_source"]

KEY_PREFIX = "beh:"
#: Bumped when what a key means changes (the harness, the canonical form, the seed): old
#: entries of the cache are then not reused.
VERSION = 2
#: The program's ``random`` and str hashing are seeded with this in every behaviour run, so a
#: program whose outputs are random (``sorted(x, key=lambda _: random.randint(0, 1))``) gets
#: the same key in every computation.
SEED = 0


@dataclass(frozen=True, slots=True)
class Behaviour:
    """A program's outputs on a sample's inputs, its key (None: invalid) and why."""

    key: str | None
    outputs: tuple[str, ...]
    reason: str = ""
    seconds: float = 0.0
    cached: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "outputs": list(self.outputs), "reason": self.reason,
                "seconds": self.seconds}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Behaviour:
        return cls(d.get("key"), tuple(d.get("outputs") or ()), str(d.get("reason", "")),
                   float(d.get("seconds", 0.0)), cached=True)


# ------------------------------------------------------------------------ the canonical form
# The harness runs this same function inside the sandbox (its source is sent with it), so it
# may use the standard library only and must not depend on anything of this module's.


def canonical_repr(v, _depth=0):  # no annotations: the harness runs this source as is
    """``repr`` of a result with the order-free containers sorted and floats rounded."""
    if _depth > 50:
        return "..."
    d = _depth + 1
    if isinstance(v, bool) or v is None:
        return repr(v)
    if isinstance(v, float):
        if v != v:
            return "nan"
        if v in (float("inf"), float("-inf")):
            return repr(v)
        r = round(v, 6)
        return repr(r + 0.0)  # -0.0 -> 0.0
    if isinstance(v, int | str | bytes):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(canonical_repr(x, d) for x in v) + "]"
    if isinstance(v, tuple):
        return "(" + ", ".join(canonical_repr(x, d) for x in v) + ("," if len(v) == 1 else "") + ")"
    if isinstance(v, set | frozenset):
        return "{" + ", ".join(sorted(canonical_repr(x, d) for x in v)) + "}"
    if isinstance(v, dict):
        items = sorted((canonical_repr(k, d), canonical_repr(x, d)) for k, x in v.items())
        return "{" + ", ".join(f"{k}: {x}" for k, x in items) + "}"
    return type(v).__name__


def _function_source(fn: Callable[..., Any]) -> str:
    import inspect

    return inspect.getsource(fn)


def harness_source(inputs: Sequence[CallInput], entry_point: str, nonce: str) -> str:
    """The trusted harness: calls ``entry_point`` on each input, prints one line per input,
    ``<nonce> <index> ok <canonical repr>`` or ``<nonce> <index> raise <type name>``."""
    calls = ",\n    ".join(f"lambda: {entry_point}({i.source()})" for i in inputs)
    return (
        "import sys as _sys\n"
        + _function_source(canonical_repr)
        + f"\n_CALLS = [\n    {calls},\n]\n"
        + "def _df_ray_behaviour():\n"
        + "    for _i, _call in enumerate(_CALLS):\n"
        + "        try:\n"
        + "            _out = 'ok ' + canonical_repr(_call())\n"
        + "        except BaseException as _e:\n"
        + "            _name = str(_e).split(':', 1)[0] if type(_e).__name__ == 'CandidateError'"
        + " else type(_e).__name__\n"
        + "            _out = 'raise ' + (_name if _name.isidentifier() else 'Error')\n"
        + f"        print({nonce!r}, _i, _out.replace('\\n', ' '), flush=True)\n"
    )


# ------------------------------------------------------------------------------ the cache


class BehaviourCache:
    """Behaviours on disk: ``<root>/<2 hex>/<hash>.json``, written atomically (a temporary
    file renamed into place), so concurrent writers of the same entry are harmless."""

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root)

    @staticmethod
    def key(program: str, inputs: Sequence[CallInput], entry_point: str) -> str:
        blob = json.dumps([VERSION, entry_point, program, [i.source() for i in inputs]])
        return hashlib.sha256(blob.encode()).hexdigest()

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> Behaviour | None:
        try:
            return Behaviour.from_dict(json.loads(self._path(key).read_text()))
        except (OSError, ValueError, TypeError, AttributeError):
            return None

    def put(self, key: str, behaviour: Behaviour) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "w") as f:
            json.dump(behaviour.to_dict(), f)
        os.replace(tmp, path)


# ------------------------------------------------------------------------------ running


def _outputs_key(outputs: Sequence[str]) -> str:
    return KEY_PREFIX + hashlib.sha256("\n".join(outputs).encode()).hexdigest()[:16]


def _read_outputs(stdout: str, nonce: str, n: int) -> list[str | None]:
    got: list[str | None] = [None] * n
    for line in stdout.splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[0] == nonce and parts[1].isdigit():
            i = int(parts[1])
            if 0 <= i < n and got[i] is None:
                got[i] = parts[2]
    return got


@dataclass
class BehaviourKeyer:
    """Re-keys a sample's code observations by behaviour (see the module docstring).

    ``program_of(sample, code)`` builds the program that runs (the task's
    ``build_program``); ``cache`` is None for no cache. ``spent_s`` and ``runs`` accumulate
    the sandbox wall time and the sandbox runs made (cache hits cost none)."""

    program_of: Callable[[Any, str], str]
    cache: BehaviourCache | None = None
    timeout_s: float = 5.0
    memory_mb: int = 1024
    isolation: str | None = None
    spent_s: float = 0.0
    runs: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def inputs(self, sample: Any) -> PromptInputs:
        return prompt_inputs(sample.meta["prompt"], sample.meta["entry_point"])

    def behaviour(self, sample: Any, code: str) -> Behaviour:
        """The behaviour of ``code`` (the agent's extracted program) on ``sample``."""
        entry = sample.meta["entry_point"]
        inputs = self.inputs(sample).inputs
        program = self.program_of(sample, code)
        ckey = BehaviourCache.key(program, inputs, entry)
        if self.cache is not None:
            hit = self.cache.get(ckey)
            if hit is not None:
                return hit
        got = self._run(sample, program, inputs)
        if self.cache is not None and got.reason != "sandbox error":
            self.cache.put(ckey, got)
        return got

    def _run(self, sample: Any, program: str, inputs: Sequence[CallInput]) -> Behaviour:
        from df_ray.sandbox import run_tests

        entry = sample.meta["entry_point"]
        nonce = secrets.token_hex(12)
        t = time.perf_counter()
        res = run_tests(program, tests=harness_source(inputs, entry, nonce), entry_point=entry,
                        prelude=sample.meta["prompt"], call="_df_ray_behaviour()",
                        timeout_s=self.timeout_s, memory_mb=self.memory_mb,
                        max_output_bytes=1 << 20, isolation=self.isolation, seed=SEED)
        seconds = time.perf_counter() - t
        with self._lock:
            self.spent_s += seconds
            self.runs += 1
        if res.status == "error":
            return Behaviour(None, (), "sandbox error", seconds)
        lines = _read_outputs(res.stdout, nonce, len(inputs))
        if 'File "<tests>"' in res.stderr or 'File "<call>"' in res.stderr:
            raise RuntimeError(f"the behaviour harness failed on {sample.id}: "
                               f"{res.stderr.strip().splitlines()[-1]}")
        if all(x is None for x in lines):
            why = "timeout" if res.status == "timeout" else "the program failed to load"
            return Behaviour(None, (), why, seconds)
        outputs = tuple("timeout" if x is None else x for x in lines)
        if all(not o.startswith("ok ") for o in outputs):
            return Behaviour(None, outputs, "raised on every input", seconds)
        return Behaviour(_outputs_key(outputs), outputs, "", seconds)

    def rekey(self, sample: Any, observations: Sequence[Observation]
              ) -> tuple[list[Observation], float]:
        """The observations with behaviour keys, and the sandbox seconds their behaviours
        took (as recorded when they ran: a cached one costs its first run's). A valid
        program's key is its behaviour's; one that fails to load or raises on every input
        becomes invalid (its program is kept in ``extracted``, the reason in ``reason``).
        Invalid observations stay so. Identical programs of one sample count once."""
        def code_of(o: Observation) -> str | None:
            code = o.extracted if o.extracted is not None else o.answer
            return code if o.valid and code and code.strip() else None

        codes = list(dict.fromkeys(c for c in map(code_of, observations) if c is not None))
        if len(codes) > 1:  # one sandbox each, side by side
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(len(codes)) as pool:
                got = dict(zip(codes, pool.map(lambda c: self.behaviour(sample, c), codes),
                               strict=True))
        else:
            got = {c: self.behaviour(sample, c) for c in codes}
        out = []
        for o in observations:
            code = code_of(o)
            if code is None:
                out.append(o)
                continue
            b = got[code]
            if b.key is None:
                if b.reason == "sandbox error":
                    raise RuntimeError(f"the sandbox could not run {sample.id}'s program of "
                                       f"{o.agent} for its behaviour key")
                out.append(Observation.invalid(o.agent, raw=o.raw, confidence=o.confidence,
                                               extracted=o.extracted, rule=o.rule,
                                               reason=f"behaviour: {b.reason}"))
            else:
                out.append(replace(o, answer=b.key))
        return out, sum(b.seconds for b in got.values())


def is_behaviour_key(key: str | None) -> bool:
    return isinstance(key, str) and key.startswith(KEY_PREFIX)

