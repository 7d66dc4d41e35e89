"""The generation cache: every LLM call, keyed by its content hash, stored as Parquet.

It is the mechanism behind both resume and sweep sharing: a configuration that repeats calls
of an earlier one, or a job rerun after a kill, finds them here and pays nothing.

Layout: ``<root>/part-<time>-<uuid>.parquet``. Each writer only ever creates new files (written
under a temporary name and renamed), so any number of processes and machines can write to
one root concurrently without locks and a reader never sees a half-written file. Duplicate
keys across parts are harmless (first one wins; they hold the same request). ``compact``
merges parts. The root is a local folder or any pyarrow filesystem URI (``s3://...``,
``gs://...``, ``hdfs://...``). Failed calls are not cached: a rerun retries them.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from df_ray.engines.base import ChatRequest, Completion

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
])


#: The columns an entry is read from (the first four are required).
_READ = ("key", "text", "prompt_tokens", "completion_tokens", "finish_reason")


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
        self._listed_at = float("-inf")
        self._lock = threading.RLock()
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
            try:
                table = pq.read_table(part, filesystem=self.fs)
            except (OSError, pa.ArrowInvalid):
                # A part that cannot be read (e.g. truncated by a crash of a foreign writer
                # that bypassed the rename) is skipped, not fatal: its calls are redone.
                self._seen_parts.add(part)
                continue
            cols = {name: table.column(name).to_pylist() for name in _READ
                    if name in table.column_names}
            if any(name not in cols for name in _READ[:4]):  # not a part of this cache
                self._seen_parts.add(part)
                continue
            finish = cols.get("finish_reason") or [None] * table.num_rows
            for k, t, p, c, f in zip(cols["key"], cols["text"], cols["prompt_tokens"],
                                     cols["completion_tokens"], finish, strict=True):
                if k not in self._entries:
                    self._entries[k] = CacheEntry(t, int(p), int(c), f)
                    added += 1
            self._seen_parts.add(part)
        return added

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
            self._entries[key] = CacheEntry(comp.text, comp.prompt_tokens, comp.completion_tokens,
                                            comp.finish_reason)
            rows.append({"key": key, "model": req.model, "revision": req.revision or "",
                         "seed": req.seed, "text": comp.text,
                         "prompt_tokens": comp.prompt_tokens,
                         "completion_tokens": comp.completion_tokens, "created": now,
                         "finish_reason": comp.finish_reason})
        if rows:
            self._write(pa.Table.from_pylist(rows, schema=SCHEMA))
        return len(rows)

    def _write(self, table: pa.Table) -> None:
        name = f"part-{time.time_ns()}-{uuid.uuid4().hex[:12]}.parquet"
        final = f"{self.path}/{name}"
        tmp = f"{self.path}/.tmp-{name}"
        pq.write_table(table, tmp, filesystem=self.fs)
        self.fs.move(tmp, final)
        self._seen_parts.add(final)

    def compact(self) -> int:
        """Merge all parts into one (safe while nobody else writes); returns entries kept."""
        with self._lock:
            return self._compact()

    def _compact(self) -> int:
        parts = self._parts()
        if len(parts) <= 1:
            return len(self._entries)
        tables = []
        for part in parts:
            try:
                table = pq.read_table(part, filesystem=self.fs)
            except (OSError, pa.ArrowInvalid):
                continue
            if "finish_reason" not in table.column_names:  # a part written before it was kept
                table = table.append_column("finish_reason",
                                            pa.nulls(table.num_rows, pa.string()))
            tables.append(table.select(SCHEMA.names).cast(SCHEMA))
        merged = pa.concat_tables(tables)
        keys = merged.column("key").to_pylist()
        first: dict[str, int] = {}
        for i, k in enumerate(keys):
            first.setdefault(k, i)
        merged = merged.take(sorted(first.values()))
        self._write(merged)
        for part in parts:
            self.fs.delete_file(part)
        self._seen_parts = set(self._parts())
        return merged.num_rows


def lookup(cache: GenerationCache, requests: Sequence[ChatRequest]) -> list[Completion | None]:
    return [cache.get(r.key()) for r in requests]
