"""Run untrusted Python (LLM-written code) under kernel-level confinement.

Two calls:

- :func:`run_tests` grades a program: the program runs in one process, the tests in
  another that calls the program's entry point through a pipe (arguments and results
  cross as plain data) and compares in its own memory. ``passed`` means the tests' process
  exited with status 0; the program cannot write that fact.
- :func:`run_untrusted` runs a program and reports how it ended (``passed`` = exit status
  0). A program chooses its own exit status: use it for reporting, not grading.

Both return a :class:`SandboxResult` with ``status`` one of ``passed``, ``failed``,
``timeout`` or ``error`` (the sandbox could not run it, e.g. the isolation level's layers
are missing: the detail says what to install). ``isolation`` is ``strict`` (default, or
``$DF_RAY_SANDBOX_ISOLATION``) or ``best_effort``; see :mod:`df_ray.sandbox.policy` and the
``docs/sandbox.md`` for what each layer guarantees.
"""

from __future__ import annotations

from df_ray.sandbox.planner import plan
from df_ray.sandbox.policy import (
    LEVELS,
    SandboxUnavailable,
    check_level,
    default_level,
)
from df_ray.sandbox.runner import Limits, SandboxResult, SandboxStatus, execute


def _limits(timeout_s, memory_mb, cpu_s, file_size_mb, max_output_bytes, nofile, nproc):
    return Limits(timeout_s=timeout_s, memory_mb=memory_mb, cpu_s=cpu_s,
                  file_size_mb=file_size_mb, max_output_bytes=max_output_bytes,
                  nofile=nofile, nproc=nproc)


def run_untrusted(code: str, *, timeout_s: float = 10.0, memory_mb: int = 1024,
                  cpu_s: int | None = None, file_size_mb: int = 16,
                  max_output_bytes: int = 64 * 1024, nofile: int = 64, nproc: int | None = None,
                  isolation: str | None = None, python: str | None = None) -> SandboxResult:
    """Run ``code`` as a program; ``passed`` iff it exited with status 0."""
    p = plan(check_level(isolation), python)
    return execute(p, "program", code, None,
                   _limits(timeout_s, memory_mb, cpu_s, file_size_mb, max_output_bytes,
                           nofile, nproc))


def run_tests(program: str, *, tests: str, entry_point: str, prelude: str = "",
              call: str | None = None, timeout_s: float = 10.0, memory_mb: int = 1024,
              cpu_s: int | None = None, file_size_mb: int = 16,
              max_output_bytes: int = 64 * 1024, nofile: int = 64, nproc: int | None = None,
              isolation: str | None = None, python: str | None = None,
              seed: int | None = None) -> SandboxResult:
    """Grade ``program`` (untrusted) by ``tests`` (trusted source defining e.g. ``check``).

    The tests run after ``prelude`` (trusted helpers, e.g. a HumanEval prompt) with
    ``entry_point`` bound to a proxy of the program's function; ``call`` (default
    ``check(<entry_point>)``) runs last. ``passed`` only when it raises nothing.
    ``seed``: for runs whose outputs must repeat (behaviour keys): the program's process
    seeds ``random`` with it before the program loads, and str hashing (set order) is fixed
    by ``PYTHONHASHSEED``; None (default) leaves both random, as a grader does."""
    harness = {"entry_point": entry_point, "prelude": prelude, "tests": tests,
               "call": call if call is not None else f"check({entry_point})"}
    p = plan(check_level(isolation), python)
    return execute(p, "tests", program, harness,
                   _limits(timeout_s, memory_mb, cpu_s, file_size_mb, max_output_bytes,
                           nofile, nproc), seed=seed)


__all__ = ["LEVELS", "Limits", "SandboxResult", "SandboxStatus", "SandboxUnavailable",
           "check_level", "default_level", "plan", "run_tests", "run_untrusted"]
