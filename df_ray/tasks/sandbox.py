"""Compatibility alias: the sandbox is the :mod:`df_ray.sandbox` package."""

from df_ray.sandbox import SandboxResult, SandboxStatus, run_tests, run_untrusted

__all__ = ["SandboxResult", "SandboxStatus", "run_tests", "run_untrusted"]
