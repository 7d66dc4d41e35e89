"""User names as folder names under ``users/``, and whose cache entries a user reads
(``cache_read_from``). No imports of the rest of df_ray, so the configuration, the cache and
the storage layers can all use it without an import cycle or an upward import."""

from __future__ import annotations

import getpass
import os
from collections.abc import Sequence


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


#: Comma-separated opt-in to other writers' cache entries, added to a configuration's
#: ``cache_read_from`` (user names, ``*`` or roots).
READ_FROM_ENV = "DF_RAY_CACHE_READ_FROM"


def is_root(item: str) -> bool:
    """Whether a ``cache_read_from`` item is a root (a path or URI) rather than a user name."""
    return "://" in item or "/" in item or os.sep in item or item.startswith("~")


def check_read_from(items: Sequence[str]) -> list[str]:
    """``cache_read_from`` items as given, or a one-line ValueError naming a bad one: each is
    ``*``, a user name (as ``DF_RAY_USER`` takes) or a root (a path or URI)."""
    out = []
    for item in items:
        item = str(item).strip()
        if not item:
            raise ValueError("cache_read_from: an empty item (give a user name, '*' or a root)")
        if item != "*" and not is_root(item):
            validate_user(item, "cache_read_from")
        out.append(item)
    return out


def read_from_env() -> list[str]:
    """The opt-in ``DF_RAY_CACHE_READ_FROM`` gives (empty when unset)."""
    raw = os.environ.get(READ_FROM_ENV, "")
    return check_read_from([x for x in raw.split(",") if x.strip()])
