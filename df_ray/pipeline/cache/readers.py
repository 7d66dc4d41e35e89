"""Readers across users: whose parts a cache trusts, and which copy of a key it serves.

Writers and trust. A cache replays the parts of its own root written under its own ``user``
(and those without provenance, written before it was kept), and, on a local or mounted file
system, owned by its own uid; other writers' parts are not read (counted in
``foreign_skipped``, said once when the cache opens) unless ``read_from`` opts in: a user
name, ``*``, or another root (read only). The default root is per user (``df_ray.storage``).
A user name is not authenticated, so the separation between users who share one uid (jobs of
one Ray cluster) is as good as the names they run under; between uids it holds.

Conflicts. A key (a public hash of the request) may have copies in several parts. Copies are
compared by their verified content, never by a part's name or listing order: one content is
served; where own copies differ (two concurrent runs on a non-deterministic engine), the one
with the smallest content checksum is served and the conflict reported (a warning naming the
key and every copy's part and writer; ``conflicts``); a copy from an opted-in writer that
differs from any other copy is refused, so that key is served from the own copy, or not at
all (its call is made again).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from df_ray.pipeline.cache.entries import CacheEntry
from df_ray.pipeline.cache.parts import Part, Provenance
from df_ray.user_names import READ_FROM_ENV, check_read_from, is_root, read_from_env

log = logging.getLogger(__name__)

__all__ = ["READ_FROM_ENV", "Conflict", "check_read_from", "choose", "is_root",
           "read_from_env", "trust", "warn_foreign"]


@dataclass(frozen=True, slots=True)
class Conflict:
    """One key whose parts hold different verified contents. ``chosen`` is the content
    checksum that is served (None: refused, the call is made again); ``variants`` (content
    checksum, part, provenance) every content found, own parts first."""

    key: str
    chosen: str | None
    variants: tuple[tuple[str, str, str], ...]


def euid() -> int | None:
    return os.geteuid() if hasattr(os, "geteuid") else None


def trust(prov: Provenance, in_own_root: bool, user: str,
          read_users: Collection[str]) -> bool | None:
    """True: an own part; False: another writer's, opted in; None: not to be read."""
    if not in_own_root:
        return False  # a root read on opt-in
    if (prov.user is None or prov.user == user) and (prov.uid is None or prov.uid == euid()):
        return True
    other = prov.user if prov.user is not None else f"uid {prov.uid}"
    return False if ("*" in read_users or other in read_users) else None


def warn_foreign(root: str, skipped: Mapping[str, Provenance]) -> None:
    """Say once that other writers' parts of ``root`` were not read, and how to opt in."""
    if not skipped:
        return
    writers = sorted({p.describe().split(" on ")[0] for p in skipped.values()})
    log.warning("generation cache %s: %d part(s) written by other users (%s) not read; "
                "opt in with cache_read_from (or DF_RAY_CACHE_READ_FROM) to replay them",
                root, len(skipped), ", ".join(writers)[:200])


Copies = dict[str, tuple[CacheEntry, Part]]


def choose(key: str, own: Copies, foreign: Copies) -> tuple[CacheEntry | None, Conflict | None]:
    """The entry served for ``key`` (copies by content checksum): the one content of its
    copies; where they differ, the own content with the smallest content checksum (never a
    part's name or order), and never another writer's content that differs from any other
    copy. With the conflict, when there is one (said in a warning)."""
    variants = {**foreign, **own}
    if len(variants) <= 1:
        return (next(iter(variants.values()))[0] if variants else None), None
    chosen = min(own) if own else None
    listed = tuple((s, p.path, ("own: " if p.own else "another writer's: ")
                    + p.provenance.describe())
                   for s, (_, p) in [*sorted(own.items()), *sorted(
                       (s, v) for s, v in foreign.items() if s not in own)])
    where = "; ".join(f"{s[:12]} in {path.rsplit('/', 1)[-1]} ({who})"
                      for s, path, who in listed)
    conflict = Conflict(key, chosen, listed)
    if chosen is None:
        log.warning("generation cache: entry %s has %d different contents in parts of "
                    "other writers (%s): refused; its call will be made again",
                    key, len(variants), where[:600])
        return None, conflict
    log.warning("generation cache: entry %s has %d different contents (%s): serving "
                "%s, the own content with the smallest checksum%s", key, len(variants),
                where[:600], chosen[:12],
                "; other writers' differing contents refused" if set(foreign) - set(own)
                else "")
    return own[chosen][0], conflict
