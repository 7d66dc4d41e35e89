"""User names as folder names under ``users/`` (no imports of the rest of df_ray, so the
cache and storage layers can both use it without an import cycle)."""

from __future__ import annotations

import getpass
import os


def current_user() -> str:
    """Who runs this: ``DF_RAY_USER``, else ``USER``, else the login name."""
    explicit = os.environ.get("DF_RAY_USER", "").strip()
    if explicit:
        return validate_user(explicit)
    for var in ("USER", "LOGNAME"):
        v = os.environ.get(var, "").strip()
        if v:
            return safe_user(v)
    try:
        return safe_user(getpass.getuser())
    except (KeyError, OSError):  # no passwd entry (containers)
        return "anonymous"


def validate_user(name: str, where: str = "DF_RAY_USER") -> str:
    """``name`` as a user's folder name (characters other than letters, digits, ``.``, ``_``
    and ``-`` become ``_``), or a one-line ValueError for a name that would leave
    ``users/``: a path separator, ``.``, ``..`` or a leading dot."""
    if "/" in name or "\\" in name or name.startswith(".") or "\0" in name:
        raise ValueError(f"{where}={name!r} is not a valid user name: no path separators, "
                         "no '.' or '..', not starting with '.'")
    return safe_user(name)


def safe_user(name: str) -> str:
    out = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:64].lstrip(".")
    return out or "anonymous"
