"""Make the plan for an isolation level: which layers this machine gives, each probed by
running a program through the runner (:func:`df_ray.sandbox.runner.probe_plan`).

Kept apart from :mod:`df_ray.sandbox.policy` (levels, detection) so that neither the
policy nor the runner imports the other's caller.
"""

from __future__ import annotations

import logging
import os
import sys

from df_ray.sandbox import cgroup, policy, seccomp
from df_ray.sandbox.policy import INSTALL_HINT, STRICT_LAYERS, Plan, check_level
from df_ray.sandbox.runner import probe_plan

log = logging.getLogger(__name__)


def plan(level: str | None = None, python: str | None = None) -> Plan:
    """How programs will be run at ``level`` with ``python``; probed once per process.

    A strict plan that cannot be had comes back with ``error`` set (the runner then
    refuses every program with that message)."""
    level = check_level(level)
    key = (level, python or sys.executable)
    with policy._lock:
        if key in policy._plan_cache:
            return policy._plan_cache[key]
    p = _make_plan(level, python)
    with policy._lock:
        policy._plan_cache[key] = p
    return p


def _cgroup_status() -> tuple[bool, str]:
    try:
        m = cgroup.manager()
    except cgroup.CgroupUnavailable as e:
        return False, str(e)
    return True, m.describe()


def _make_plan(level: str, python: str | None) -> Plan:
    interp = policy.resolve_interpreter(python)
    if isinstance(interp, str):
        return Plan(level, "plain", None, error=interp)
    root = hasattr(os, "geteuid") and os.geteuid() == 0
    disabled = os.environ.get("DF_RAY_SANDBOX_NO_BWRAP", "") not in ("", "0")
    bwrap, why = (None, "bubblewrap disabled by DF_RAY_SANDBOX_NO_BWRAP") if disabled \
        else policy._bwrap_usable()
    if not sys.platform.startswith("linux"):
        bwrap, why = None, f"kernel namespaces need Linux (this is {sys.platform})"
    has_cg, cg_why = _cgroup_status()
    core = policy.core_pattern_problem(policy.CORE_PATTERN)
    if level == "strict" and core is not None:
        return Plan(level, "bwrap", interp, error=(
            f"sandbox isolation 'strict' is not available: {core}."))
    if bwrap is not None and not has_cg and level == "strict":
        return Plan(level, "bwrap", interp, error=(
            "sandbox isolation 'strict' is not available: no cgroup of its own can be made "
            f"for each sandbox ({cg_why}). To enable it: {cgroup.DELEGATION_HINT}. Or choose "
            "sandbox.isolation: best_effort explicitly (memory then bounded per process by "
            "rlimits only: see docs/sandbox.md)."))
    if bwrap is not None:
        layers = STRICT_LAYERS if root else ("userns", *STRICT_LAYERS)
        if not has_cg:
            layers = tuple(x for x in layers if x != "cgroup")
        if seccomp.build() is not None:
            layers = (*layers, "seccomp")
        cand = Plan(level, "bwrap", interp, layers, root=root, bwrap=bwrap,
                    notes=(cg_why,) if has_cg else (f"no cgroup: {cg_why}",))
        err = probe_plan(cand)
        if err is None:
            return cand
        why = err
    if level == "strict":
        return Plan(level, "bwrap", interp, error=(
            f"sandbox isolation 'strict' is not available: {why}. To enable it: "
            f"{INSTALL_HINT}; unprivileged evaluators also need user namespaces "
            "(sysctl kernel.unprivileged_userns_clone=1 / user.max_user_namespaces>0, and "
            "no AppArmor restriction on them). Or choose sandbox.isolation: best_effort "
            "explicitly (weaker: see docs/sandbox.md)."))
    log.warning("sandbox: isolation 'best_effort' without the strict layers (%s); generated "
                "code is confined by rlimits, namespaces where unshare works and Python audit "
                "hooks only", why)
    unshare = policy._unshare_usable()
    layers = ["rlimits", "audit-hook"]
    if unshare:
        layers += ["netns", "pidns"]
    if has_cg:
        layers.append("cgroup")
    notes = (f"strict unavailable: {why}",)
    backend = "unshare" if unshare else "plain"
    if root:
        cand = Plan(level, backend, interp, (*layers, "uid"), root=True, unshare=unshare,
                    notes=notes)
        if probe_plan(cand) is None:
            return cand
        notes = (*notes, "uid drop unavailable: the interpreter is not readable by other users")
    return Plan(level, backend, interp, tuple(layers), root=root, unshare=unshare, notes=notes)
