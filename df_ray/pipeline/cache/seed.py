"""Seeding a cache root from a folder of parts (``df-ray cache seed``).

A committed or shared generation cache (``tests/fixtures/cpu_humaneval/generations``, a
colleague's folder) becomes the own cache of whoever runs the command: its parts are copied
into the root a run of theirs replays (by default ``$DF_RAY_HOME/users/<user>/generations``,
the user as ``df_ray.user_names.current_user`` resolves it, so it works with ``USER`` unset).

Nothing is lost or changed: every source part is checked first (a Parquet part with the
cache's key and text columns), and nothing is copied when one is not, or when the root holds
a part of the same name with other bytes; a part already there byte for byte is left as it
is; each copy is written under a temporary name and linked to its final name, which never
replaces a file. A part whose footer names another writer is copied as it is, and said: a
run replays it only with that writer in ``cache_read_from`` (df_ray.pipeline.cache.readers).
"""

from __future__ import annotations

import contextlib
import filecmp
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs

from df_ray.pipeline.cache.entries import READ_COLUMNS, Oversized
from df_ray.pipeline.cache.parts import TMP_PREFIX, open_part
from df_ray.pipeline.writers import writer_tag

__all__ = ["NotACache", "SeedReport", "seed_root"]

#: The columns a part must have to be a generation cache's part.
_REQUIRED = READ_COLUMNS[:4]


class NotACache(ValueError):
    """The source is not a generation cache, or seeding it would replace a differing part
    (the message says which, in one line)."""


@dataclass(frozen=True)
class SeedReport:
    """What a seeding did: parts copied and already there, the distinct keys of the copied
    parts and of every source part, and the writers other than ``user`` the parts name."""

    root: str
    copied: tuple[str, ...]
    present: tuple[str, ...]
    keys_copied: int
    keys_total: int
    foreign: dict[str, str]  # part name -> the writer its footer names

    def describe(self) -> str:
        parts = len(self.copied) + len(self.present)
        text = (f"seeded {self.root}: {len(self.copied)} of {parts} parts copied "
                f"({self.keys_copied} keys), {len(self.present)} already there byte for "
                f"byte; the root now holds the source's {self.keys_total} keys")
        if self.foreign:
            writers = sorted(set(self.foreign.values()))
            text += (f"; {len(self.foreign)} part(s) name another writer ({', '.join(writers)}): "
                     f"a run replays them only with cache_read_from: {writers}")
        return text


def _part_keys(path: Path) -> tuple[set[str], str | None]:
    """The keys of a source part and the writer its footer names, or NotACache."""
    try:
        pf, prov = open_part(pafs.LocalFileSystem(), str(path))
        names = set(pf.schema_arrow.names)
        missing = [c for c in _REQUIRED if c not in names]
        if missing:
            raise NotACache(f"{path} is not a generation cache part: it has no "
                            f"{', '.join(missing)} column")
        keys = pf.read(columns=["key"]).column("key").to_pylist()
    except (OSError, pa.ArrowException, Oversized) as e:
        raise NotACache(f"{path} is not a readable generation cache part: "
                        f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    return {k for k in keys if k is not None}, prov.user


def source_parts(source: Path) -> list[Path]:
    """The parts of a source folder, or NotACache saying why it is none."""
    if not source.is_dir():
        raise NotACache(f"{source} is not a folder (give a generation cache's folder of "
                        "part-*.parquet files)")
    parts = sorted(p for p in source.iterdir() if p.is_file() and p.name.startswith("part-")
                   and p.name.endswith(".parquet"))
    if not parts:
        raise NotACache(f"{source} is not a generation cache: it holds no part-*.parquet file")
    return parts


def _copy(part: Path, root: Path) -> None:
    """Copy ``part`` into ``root`` under its name: a temporary file first, then a hard link
    to the final name (which fails rather than replace a file written meanwhile)."""
    tmp = root / f"{TMP_PREFIX}{writer_tag()}-{part.name}"
    try:
        shutil.copyfile(part, tmp)
        os.link(tmp, root / part.name)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def seed_root(source: str | os.PathLike, root: str | os.PathLike, user: str) -> SeedReport:
    """Copy the parts of the folder ``source`` into the local cache root ``root`` (created if
    missing). ``user``: whose root it is (to name the parts written by others). Raises
    NotACache, before anything is copied, when a source part is not a cache part or a part of
    the same name in ``root`` has other bytes."""
    src = Path(os.path.expanduser(str(source))).resolve()
    dest = Path(os.path.expanduser(str(root))).resolve()
    if src == dest:
        raise NotACache(f"{src} is the root being seeded: give another folder")
    parts = source_parts(src)
    keys: dict[str, set[str]] = {}
    foreign: dict[str, str] = {}
    present = []
    for p in parts:
        keys[p.name], writer = _part_keys(p)
        if writer is not None and writer != user:
            foreign[p.name] = writer
        there = dest / p.name
        if there.exists():
            if not filecmp.cmp(p, there, shallow=False):
                raise NotACache(f"{there} already exists with other bytes than {p}: nothing "
                                "seeded (remove or rename one of them)")
            present.append(p.name)
    dest.mkdir(parents=True, exist_ok=True)
    copied = [p.name for p in parts if p.name not in present]
    for p in parts:
        if p.name in copied:
            _copy(p, dest)
    return SeedReport(str(dest), tuple(copied), tuple(present),
                      len(set().union(*(keys[n] for n in copied))),
                      len(set().union(*keys.values())), foreign)
