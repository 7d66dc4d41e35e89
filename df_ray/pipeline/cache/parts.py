"""The cache's parts and their compaction.

Layout: ``<root>/part-<time>-<uuid>.parquet``. Each writer only ever creates new files
(written under a temporary name and renamed), so any number of processes and machines can
write to one root concurrently without locks and a reader never sees a half-written file.
The root is a local folder or any pyarrow filesystem URI (``s3://...``, ``gs://...``,
``hdfs://...``). Every part records its provenance in its Parquet footer (the writer's user
name, host, pid and time: :func:`part_provenance`). A part that cannot be read is never used:
it is dropped with a warning naming it, and its calls are made again.

``compact`` (``df-ray cache compact``) merges the user's own parts into one, beside running
writers: it deletes only the parts it read and verified, so a part written meanwhile stays,
and a reader that lists the root while it runs finds either the old parts or the merged one.
Every differing copy of a key is kept in the merged part (a conflict is never settled by
deleting a copy); other writers' parts and parts too large to read stay where they are. It
also removes the temporary files of writers that were killed before their rename (as does
every opening of the cache: those of dead processes on this machine, others after a day).
A run compacts each of its cache roots at its end when it holds more than the configuration's
``cache_compact_parts`` parts (``compact_above``): a run adds about two parts per batch.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from df_ray.pipeline.cache.entries import (
    GROUP_TARGET_BYTES,
    MAX_FOOTER_BYTES,
    SCHEMA,
    CacheEntry,
    Oversized,
    filesystem,
    mb,
)
from df_ray.pipeline.file_errors import naming
from df_ray.pipeline.writers import is_abandoned, writer_tag

TMP_PREFIX = ".tmp-"


@dataclass(frozen=True, slots=True)
class Provenance:
    """Who wrote a part: the writer's user name, host, pid and time (from the part's Parquet
    footer; None in parts written before it was recorded) and, on a local or mounted file
    system, the file's owner uid."""

    user: str | None = None
    host: str | None = None
    pid: int | None = None
    time: float | None = None
    uid: int | None = None

    def describe(self) -> str:
        if self.user is None:
            who = f"uid {self.uid}" if self.uid is not None else "an unknown writer"
            return f"{who} (no provenance recorded)"
        when = (datetime.fromtimestamp(self.time, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                if self.time is not None else "?")
        return f"{self.user} on {self.host or '?'} at {when}"

    def metadata(self) -> dict[bytes, bytes]:
        """The provenance as a part's footer records it."""
        return {b"df_ray.writer.user": (self.user or "").encode(),
                b"df_ray.writer.host": (self.host or "").encode(),
                b"df_ray.writer.pid": str(self.pid or 0).encode(),
                b"df_ray.writer.time": repr(self.time or 0.0).encode()}


@dataclass(slots=True)
class Part:
    """One indexed part: where it is, whose it is, its keys per row group and the verified
    entries of the row groups read so far."""

    fs: pafs.FileSystem
    path: str
    own: bool  # written by this user into this cache's own root (else: opted-in foreign)
    provenance: Provenance
    group_rows: tuple[int, ...]
    with_sum: bool
    #: the key of every row, per row group (None where a row has none)
    keys: list[list[str | None]] = field(default_factory=list)
    gone: bool = False
    #: a row group was refused (unreadable, or larger than a read may take)
    damaged: bool = False
    #: verified entries per row group (None where refused), loaded on first use
    loaded: dict[int, list[CacheEntry | None]] = field(default_factory=dict)

    def refuse_group(self, g: int) -> list[CacheEntry | None]:
        """Row group ``g`` refused whole: none of its entries is used."""
        self.damaged = True
        got = self.loaded[g] = [None] * self.group_rows[g]
        return got


def is_part(info: pafs.FileInfo) -> bool:
    return (info.type == pafs.FileType.File and info.base_name.startswith("part-")
            and info.base_name.endswith(".parquet"))


def list_parts(fs: pafs.FileSystem, path: str) -> list[str]:
    sel = pafs.FileSelector(path, recursive=False, allow_not_found=True)
    return sorted(i.path for i in fs.get_file_info(sel) if is_part(i))


def count_parts(root: str) -> int:
    """The parts a cache root holds now (listed, not read)."""
    fs, path = filesystem(root)
    return len(list_parts(fs, path))


def open_part(fs: pafs.FileSystem, path: str) -> tuple[pq.ParquetFile, Provenance]:
    """A part's footer (bounded: a footer larger than ``MAX_FOOTER_BYTES`` is refused before
    it is parsed) and its provenance."""
    f = fs.open_input_file(path)
    size = f.size()
    if size >= 12:
        tail = f.read_at(8, size - 8)
        footer = int.from_bytes(tail[:4], "little")
        if tail[4:] == b"PAR1" and footer > MAX_FOOTER_BYTES:
            raise Oversized(f"its footer takes {mb(footer)}")
    pf = pq.ParquetFile(f, page_checksum_verification=True)
    md = pf.metadata.metadata or {}

    def text(k: str) -> str | None:
        v = md.get(f"df_ray.writer.{k}".encode())
        return v.decode("utf-8", "replace") if v else None

    uid = None
    if isinstance(fs, pafs.LocalFileSystem):
        with contextlib.suppress(OSError):
            uid = os.stat(path).st_uid
    pid, at = text("pid"), text("time")
    prov = Provenance(text("user"), text("host"), int(pid) if pid and pid.isdigit() else None,
                      _float(at), uid)
    return pf, prov


def _float(v: str | None) -> float | None:
    try:
        return float(v) if v else None
    except ValueError:
        return None


def part_provenance(path: str) -> Provenance:
    """Who wrote the part at ``path`` (a local path or URI)."""
    fs, p = filesystem(path)
    return open_part(fs, p)[1]


def row_groups(rows: list[dict]) -> list[list[dict]]:
    """``rows`` in row groups of at most ``GROUP_TARGET_BYTES`` of text (one row may be more)."""
    groups: list[list[dict]] = [[]]
    size = 0
    for row in rows:
        n = len(row["text"].encode("utf-8", "surrogatepass"))
        if groups[-1] and size + n > GROUP_TARGET_BYTES:
            groups.append([])
            size = 0
        groups[-1].append(row)
        size += n
    return groups


def write_part(fs: pafs.FileSystem, root: str, user: str,
               rows: list[dict]) -> tuple[Part, list[tuple[int, int]]]:
    """Write ``rows`` as a new part of ``root`` (under a temporary name, then renamed; the
    writer's provenance in its footer); the part and each row's (row group, row)."""
    name = f"part-{time.time_ns()}-{uuid.uuid4().hex[:12]}.parquet"
    final = f"{root}/{name}"
    tmp = f"{root}/{TMP_PREFIX}{writer_tag()}-{name}"
    prov = Provenance(user, socket.gethostname(), os.getpid(), time.time())
    schema = SCHEMA.with_metadata(prov.metadata())
    groups = row_groups(rows)
    try:
        with naming(tmp), pq.ParquetWriter(tmp, schema, filesystem=fs,
                                           write_page_checksum=True) as w:
            for grp in groups:
                w.write_table(pa.Table.from_pylist(grp, schema=schema), row_group_size=len(grp))
        fs.move(tmp, final)
    except BaseException:
        with contextlib.suppress(OSError):
            fs.delete_file(tmp)
        raise
    part = Part(fs, final, True, prov, tuple(len(g) for g in groups), True,
                [[row["key"] for row in grp] for grp in groups])
    return part, [(g, r) for g, grp in enumerate(groups) for r in range(len(grp))]


def remove_stale_tmp(fs: pafs.FileSystem, root: str) -> int:
    """Delete the temporary files of writers that died before their rename: on this machine,
    those whose process is gone; elsewhere, those older than ``writers.STALE_TMP_S``."""
    sel = pafs.FileSelector(root, recursive=False, allow_not_found=True)
    n = 0
    now = time.time()
    for info in fs.get_file_info(sel):
        if info.type != pafs.FileType.File or not info.base_name.startswith(TMP_PREFIX):
            continue
        if not tmp_is_stale(info.base_name[len(TMP_PREFIX):], info.mtime, now):
            continue
        try:
            fs.delete_file(info.path)
            n += 1
        except OSError:
            pass
    return n


def tmp_is_stale(rest: str, mtime, now: float) -> bool:
    """Whether a temporary part named ``<host>~<pid>-part-...`` (or an older unnamed one)
    belongs to a writer that is gone."""
    tag = rest.split("-part-", 1)[0] if "-part-" in rest else ""
    return is_abandoned(tag, mtime.timestamp() if mtime is not None else None, now)


# -- compaction


def merged_entries(read: Iterable[Part]) -> dict[tuple[str, str], CacheEntry]:
    """Every verified entry of the parts read, once per (key, content checksum): differing
    copies of a key are all kept."""
    merged: dict[tuple[str, str], CacheEntry] = {}
    for part in read:
        for g, keys in enumerate(part.keys):
            for k, e in zip(keys, part.loaded[g], strict=True):
                if e is not None and k is not None:
                    merged.setdefault((k, e.checksum(k)), e)
    return merged


def merged_rows(fs: pafs.FileSystem, read: Iterable[Part],
                merged: dict[tuple[str, str], CacheEntry]) -> list[dict]:
    """The merged part's rows; model, revision, seed and creation time ride along from the
    parts that have them."""
    extra: dict[str, dict] = {}
    for part in read:
        try:
            t = pq.read_table(part.path, filesystem=fs,
                              columns=["key", "model", "revision", "seed", "created"])
        except (OSError, pa.ArrowException):
            continue
        for row in t.to_pylist():
            extra.setdefault(row["key"], row)
    rows = []
    for (k, _), e in sorted(merged.items()):
        x = extra.get(k, {})
        rows.append(e.row(k, x.get("model") or "", x.get("revision") or "",
                          x.get("seed") or 0, x.get("created") or 0.0))
    return rows


def delete_parts(fs: pafs.FileSystem, parts: Iterable[Part]) -> None:
    """Delete merged parts (another compaction may have got there first: its merged part
    holds the entries)."""
    for part in parts:
        with contextlib.suppress(FileNotFoundError):
            fs.delete_file(part.path)
        part.gone = True
