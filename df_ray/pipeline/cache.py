"""The generation cache: every LLM call, keyed by its content hash, stored as Parquet.

It is the mechanism behind both resume and sweep sharing: a configuration that repeats calls
of an earlier one, or a job rerun after a kill, finds them here and pays nothing.

Layout: ``<root>/part-<time>-<uuid>.parquet``. Each writer only ever creates new files (written
under a temporary name and renamed), so any number of processes and machines can write to
one root concurrently without locks and a reader never sees a half-written file. Duplicate
keys across parts are harmless (first one wins; they hold the same request). The root is a
local folder or any pyarrow filesystem URI (``s3://...``, ``gs://...``, ``hdfs://...``).
Failed calls are not cached: a rerun retries them.

Integrity: every entry carries a checksum of its content (key, text, token counts), and every
Parquet page its CRC; both are verified on read. A part that cannot be read, or an entry whose
checksum does not match, is never used: it is dropped with a warning naming the part (and the
entry), and its call is made again. Parts written before checksums existed are read as they
are (``legacy_parts`` counts them).

``compact`` (``df-ray cache compact``) merges the parts into one, beside running writers: it
deletes only the parts it read and verified, so a part written meanwhile stays, and a reader
that lists the root while it runs finds either the old parts or the merged one. It also
removes the temporary files of writers that were killed before their rename (as does every
opening of the cache: those of dead processes on this machine, others after a day).
A run compacts each of its cache roots at its end when it holds more than the configuration's
``cache_compact_parts`` parts (``compact_above``): a run adds about two parts per batch.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from df_ray.engines.base import ChatRequest, Completion, valid_text
from df_ray.pipeline.file_errors import naming

SCHEMA = pa.schema([
    ("key", pa.string()),
    ("model", pa.string()),
    ("revision", pa.string()),
    ("seed", pa.int64()),
    ("text", pa.string()),
    ("prompt_tokens", pa.int64()),
    ("completion_tokens", pa.int64()),
    ("created", pa.float64()),
    # why the completion ended ("stop", "length"); null in parts written before it was kept
    ("finish_reason", pa.string()),
    ("checksum", pa.string()),
])

log = logging.getLogger(__name__)

#: The columns an entry is read from (the first four are required).
_READ = ("key", "text", "prompt_tokens", "completion_tokens", "finish_reason")

#: A temporary part older than this (seconds) whose writer cannot be asked is abandoned.
STALE_TMP_S = 24 * 3600.0


def entry_checksum(key: str, text: str, prompt_tokens: int, completion_tokens: int,
                   finish_reason: str | None = None) -> str:
    """The checksum an entry is stored with: a hash over everything a reader uses of it."""
    h = hashlib.blake2b(digest_size=16)
    fields = [key, text, str(int(prompt_tokens)), str(int(completion_tokens))]
    if finish_reason is not None:
        fields.append(finish_reason)
    for part in fields:
        b = part.encode("utf-8", "surrogatepass")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


def _filesystem(root: str) -> tuple[pafs.FileSystem, str]:
    if "://" in root:
        return pafs.FileSystem.from_uri(root)
    path = os.path.abspath(os.path.expanduser(root))
    return pafs.LocalFileSystem(), path


@dataclass(frozen=True, slots=True)
class CacheEntry:
    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str | None = None

    def completion(self) -> Completion:
        return Completion(self.text, self.prompt_tokens, self.completion_tokens,
                          finish_reason=self.finish_reason)


class GenerationCache:
    """A content-addressed store of completions. Thread-safe: a stage actor's concurrent
    batches share one."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.fs, self.path = _filesystem(root)
        self.fs.create_dir(self.path, recursive=True)
        self._entries: dict[str, CacheEntry] = {}
        self._seen_parts: set[str] = set()
        #: Parts that could not be read, and entries whose checksum did not match (dropped).
        self.bad_parts: list[str] = []
        self.bad_entries: list[tuple[str, str]] = []
        self.legacy_parts = 0
        self._listed_at = float("-inf")
        self._lock = threading.RLock()
        # a writer killed before its rename left a temporary part: the next opener removes it
        with contextlib.suppress(OSError):
            self.remove_stale_tmp()
        self.refresh()

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()

    def _parts(self) -> list[str]:
        sel = pafs.FileSelector(self.path, recursive=False, allow_not_found=True)
        return sorted(i.path for i in self.fs.get_file_info(sel)
                      if i.type == pafs.FileType.File and i.base_name.startswith("part-")
                      and i.base_name.endswith(".parquet"))

    def refresh(self, min_interval_s: float = 0.0) -> int:
        """Load parts written since the last refresh (by this or any other process).

        With ``min_interval_s`` the root is listed at most that often: a long run's root holds
        thousands of parts, and listing it on every batch is what the run otherwise pays."""
        with self._lock:
            return self._refresh(min_interval_s)

    def _refresh(self, min_interval_s: float) -> int:
        now = time.monotonic()
        if now - self._listed_at < min_interval_s:
            return 0
        self._listed_at = now
        added = 0
        for part in self._parts():
            if part in self._seen_parts:
                continue
            found = self._read_part(part)
            if found is None:
                continue
            for k, entry in found:
                if k not in self._entries:
                    self._entries[k] = entry
                    added += 1
            self._seen_parts.add(part)
        return added

    def _read_part(self, part: str) -> list[tuple[str, CacheEntry]] | None:
        """A part's verified entries; None when it vanished (a compaction deleted it: the
        merged part holds its entries). An unreadable part is skipped with a warning."""
        try:
            names = pq.read_schema(part, filesystem=self.fs).names
            if any(c not in names for c in _READ[:4]):  # not a part of this cache
                self._seen_parts.add(part)
                return []
            with_sum = "checksum" in names
            cols = [c for c in (*_READ, "checksum") if c in names]
            table = pq.read_table(part, filesystem=self.fs, columns=cols,
                                  page_checksum_verification=True)
        except FileNotFoundError:
            return None
        except (OSError, pa.ArrowException) as e:
            # A part that cannot be read (a bit flipped on disk, a truncation by a foreign
            # writer that bypassed the rename) is never used: its calls are made again.
            if self.fs.get_file_info(part).type != pafs.FileType.File:
                return None
            self._seen_parts.add(part)
            self.bad_parts.append(part)
            log.warning("generation cache: skipping unreadable part %s (%s: %s); its calls "
                        "will be made again", part, type(e).__name__, str(e)[:200])
            return []
        d = table.to_pydict()
        if not with_sum:
            self.legacy_parts += 1
        finish = d.get("finish_reason") or [None] * table.num_rows
        out = []
        for i, (k, t, p, c, f) in enumerate(zip(d["key"], d["text"], d["prompt_tokens"],
                                                d["completion_tokens"], finish, strict=True)):
            if with_sum and (k is None or t is None or p is None or c is None
                             or d["checksum"][i] != entry_checksum(k, t, p, c, f)):
                self.bad_entries.append((part, str(k)))
                log.warning("generation cache: dropping entry %s of part %s: its checksum "
                            "does not match its content; its call will be made again",
                            k, part)
                continue
            out.append((k, CacheEntry(t, int(p), int(c), f)))
        return out

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def get(self, key: str) -> Completion | None:
        e = self._entries.get(key)
        return e.completion() if e is not None else None

    def put_many(self, items: Iterable[tuple[ChatRequest, Completion]]) -> int:
        """Persist successful completions as one new part; returns how many were written."""
        with self._lock:
            return self._put_many(items)

    def _put_many(self, items: Iterable[tuple[ChatRequest, Completion]]) -> int:
        rows = []
        now = time.time()
        for req, comp in items:
            if comp.error is not None:
                continue
            key = req.key()
            if key in self._entries:
                continue
            text = valid_text(comp.text)
            self._entries[key] = CacheEntry(text, comp.prompt_tokens, comp.completion_tokens,
                                            comp.finish_reason)
            rows.append({"key": key, "model": valid_text(req.model),
                         "revision": valid_text(req.revision or ""),
                         "seed": req.seed, "text": text,
                         "prompt_tokens": comp.prompt_tokens,
                         "completion_tokens": comp.completion_tokens, "created": now,
                         "finish_reason": comp.finish_reason,
                         "checksum": entry_checksum(key, text, comp.prompt_tokens,
                                                    comp.completion_tokens,
                                                    comp.finish_reason)})
        if rows:
            self._write(pa.Table.from_pylist(rows, schema=SCHEMA))
        return len(rows)

    def _write(self, table: pa.Table) -> None:
        name = f"part-{time.time_ns()}-{uuid.uuid4().hex[:12]}.parquet"
        final = f"{self.path}/{name}"
        tmp = f"{self.path}/{_TMP_PREFIX}{_writer_tag()}-{name}"
        try:
            with naming(tmp):
                pq.write_table(table, tmp, filesystem=self.fs, write_page_checksum=True)
            self.fs.move(tmp, final)
        except BaseException:
            with contextlib.suppress(OSError):
                self.fs.delete_file(tmp)
            raise
        self._seen_parts.add(final)

    def compact(self) -> int:
        """Merge every verified part into one; safe beside running writers (see the module
        docstring). Returns the entries kept; ``self.compaction`` holds the figures:
        ``entries`` kept, ``parts`` merged, ``dropped`` entries (bad checksum),
        ``unreadable`` parts (left where they are) and ``tmp_removed`` temporary files of
        dead writers."""
        with self._lock:
            self.compaction = self._compact()
            return self.compaction["entries"]

    def _compact(self) -> dict[str, int]:
        tmp_removed = self.remove_stale_tmp()
        parts = self._parts()
        merged: dict[str, tuple[str, CacheEntry]] = {}
        read: list[str] = []
        dropped_before = len(self.bad_entries)
        unreadable_before = len(self.bad_parts)
        for part in parts:
            found = self._read_part(part)
            if found is None:
                continue
            if part in self.bad_parts:
                continue
            read.append(part)
            for k, e in found:
                merged.setdefault(k, (k, e))
        figures = {"parts": len(read), "dropped": len(self.bad_entries) - dropped_before,
                   "unreadable": len(self.bad_parts) - unreadable_before,
                   "tmp_removed": tmp_removed}
        if len(read) <= 1 and figures["dropped"] == 0:
            figures["entries"] = len(merged)
            return figures
        # Model, revision, seed and creation time ride along from the parts that have them.
        extra: dict[str, dict] = {}
        for part in read:
            try:
                t = pq.read_table(part, filesystem=self.fs,
                                  columns=["key", "model", "revision", "seed", "created"])
            except (OSError, pa.ArrowException):
                continue
            for row in t.to_pylist():
                extra.setdefault(row["key"], row)
        rows = []
        for k, (_, e) in merged.items():
            x = extra.get(k, {})
            rows.append({"key": k, "model": x.get("model") or "", "revision": x.get("revision")
                         or "", "seed": x.get("seed") or 0, "text": e.text,
                         "prompt_tokens": e.prompt_tokens,
                         "completion_tokens": e.completion_tokens,
                         "created": x.get("created") or 0.0,
                         "finish_reason": e.finish_reason,
                         "checksum": entry_checksum(k, e.text, e.prompt_tokens,
                                                    e.completion_tokens, e.finish_reason)})
        if rows:
            self._write(pa.Table.from_pylist(rows, schema=SCHEMA))
        for part in read:
            # another compaction may have got there first: its merged part holds the entries
            with contextlib.suppress(FileNotFoundError):
                self.fs.delete_file(part)
        for k, (_, e) in merged.items():
            self._entries.setdefault(k, e)
        self._seen_parts = set(self._parts())
        figures["entries"] = len(merged)
        return figures

    def remove_stale_tmp(self) -> int:
        """Delete the temporary files of writers that died before their rename: on this
        machine, those whose process is gone; elsewhere, those older than ``STALE_TMP_S``."""
        sel = pafs.FileSelector(self.path, recursive=False, allow_not_found=True)
        n = 0
        now = time.time()
        for info in self.fs.get_file_info(sel):
            if info.type != pafs.FileType.File or not info.base_name.startswith(_TMP_PREFIX):
                continue
            if not _tmp_is_stale(info.base_name[len(_TMP_PREFIX):], info.mtime, now):
                continue
            try:
                self.fs.delete_file(info.path)
                n += 1
            except OSError:
                pass
        return n


def count_parts(root: str) -> int:
    """The parts a cache root holds now (listed, not read)."""
    fs, path = _filesystem(root)
    sel = pafs.FileSelector(path, recursive=False, allow_not_found=True)
    return sum(1 for i in fs.get_file_info(sel) if i.type == pafs.FileType.File
               and i.base_name.startswith("part-") and i.base_name.endswith(".parquet"))


def compact_above(root: str, max_parts: int) -> dict[str, int] | None:
    """Compact ``root`` (:meth:`GenerationCache.compact`) when it holds more than
    ``max_parts`` parts (0: never); its figures, or None when it was left as it was."""
    if max_parts <= 0 or count_parts(root) <= max_parts:
        return None
    cache = GenerationCache(root)
    cache.compact()
    return cache.compaction


_TMP_PREFIX = ".tmp-"


def _writer_tag() -> str:
    host = "".join(c if c.isalnum() else "_" for c in socket.gethostname())[:40] or "host"
    return f"{host}~{os.getpid()}"


def _tmp_is_stale(rest: str, mtime, now: float) -> bool:
    """Whether a temporary part named ``<host>~<pid>-part-...`` (or an older unnamed one)
    belongs to a writer that is gone."""
    tag = rest.split("-part-", 1)[0] if "-part-" in rest else ""
    host, _, pid = tag.partition("~")
    me = _writer_tag().partition("~")[0]
    if host == me and pid.isdigit():
        return not pid_alive(int(pid))
    age = now - mtime.timestamp() if mtime is not None else float("inf")
    return age > STALE_TMP_S


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
