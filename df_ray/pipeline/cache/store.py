"""The cache itself: an index of the root's parts by key, read lazily and verified, and the
writes of new parts (see the package docstring for what it is for)."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs

from df_ray.engines.base import ChatRequest, Completion
from df_ray.pipeline.cache import journal as J
from df_ray.pipeline.cache import parts as P
from df_ray.pipeline.cache import readers
from df_ray.pipeline.cache.entries import (
    MAX_ENTRY_BYTES,
    MAX_GROUP_BYTES,
    MAX_KEYS_BYTES,
    READ_COLUMNS,
    CacheEntry,
    Oversized,
    entry_of,
    filesystem,
    mb,
    verified_entries,
)
from df_ray.pipeline.cache.parts import Part, Provenance
from df_ray.pipeline.cache.readers import Conflict

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Slot:
    #: (part, row group, row) of every copy of the key
    locs: list[tuple[Part, int, int]]
    value: CacheEntry | None = None
    resolved: bool = False


class GenerationCache:
    """A content-addressed store of completions. Thread-safe: a stage actor's concurrent
    batches share one.

    ``user`` (default: :func:`df_ray.storage.current_user`) is who this process writes as and
    whose parts of ``root`` it trusts; ``read_from`` opts in to other writers: user names
    (their parts in ``root``, and their own roots under ``DF_RAY_HOME`` when the caller
    resolved them into paths), ``"*"`` (every writer's parts in ``root``), or roots (a path
    or URI, read-only). Entries read through an opt-in are served only where they agree with
    every other copy of their key (:mod:`df_ray.pipeline.cache.readers`).
    ``index_journals=False`` leaves the engines' journals unread (one opened to fold them
    reads each once, there)."""

    def __init__(self, root: str, *, user: str | None = None,
                 read_from: Sequence[str] = (), max_entry_bytes: int | None = None,
                 max_group_bytes: int | None = None, index_journals: bool = True) -> None:
        self.root = root
        self.fs, self.path = filesystem(root)
        self.fs.create_dir(self.path, recursive=True)
        if user is None:
            from df_ray.user_names import current_user

            user = current_user()
        self.user = user
        self.read_users = frozenset(r for r in read_from if not readers.is_root(r))
        self.read_roots: list[tuple[pafs.FileSystem, str]] = [
            filesystem(r) for r in read_from if readers.is_root(r)]
        self.max_entry_bytes = max_entry_bytes or MAX_ENTRY_BYTES
        self.max_group_bytes = max_group_bytes or MAX_GROUP_BYTES
        self._entries: dict[str, _Slot] = {}
        self._seen_parts: set[str] = set()
        self._part_of: dict[str, Part] = {}
        #: Parts that could not be read, and entries whose checksum did not match (dropped).
        self.bad_parts: list[str] = []
        self.bad_entries: list[tuple[str, str]] = []
        #: Row groups and entries refused for their size: (part, what).
        self.oversized: list[tuple[str, str]] = []
        #: Keys whose copies disagree (see :class:`Conflict`).
        self.conflicts: list[Conflict] = []
        #: Parts of other writers that were not read (no opt-in): path -> provenance.
        self.foreign_skipped: dict[str, Provenance] = {}
        self.legacy_parts = 0
        #: Journals read (`df_ray.pipeline.cache.journal`) and their lines skipped (not
        #: whole, not JSON, or not matching their checksum).
        self.journals: dict[str, Part | None] = {}
        self.journal_lines_skipped = 0
        self._listed_at = float("-inf")
        self._lock = threading.RLock()
        # a writer killed before its rename left a temporary part: the next opener removes it
        with contextlib.suppress(OSError):
            self.remove_stale_tmp()
        self.refresh()
        if index_journals:  # not to fold them (`fold_root`): that reads each journal itself
            self.read_journals()
        readers.warn_foreign(root, self.foreign_skipped)

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()

    def _parts(self) -> list[str]:
        return P.list_parts(self.fs, self.path)

    def refresh(self, min_interval_s: float = 0.0) -> int:
        """Index parts written since the last refresh (by this or any other process): their
        keys only; an entry's text is read when it is first asked for.

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
        listed = [(self.fs, p, True) for p in self._parts()]
        for fs, path in self.read_roots:
            listed += [(fs, p, False) for p in P.list_parts(fs, path)]
        for fs, part, in_own_root in listed:
            if part in self._seen_parts:
                continue
            added += self._index_part(fs, part, in_own_root)
        return added

    def _unreadable(self, fs: pafs.FileSystem, path: str, e: BaseException) -> bool:
        """Record a part that cannot be read (a bit flipped on disk, a truncation by a foreign
        writer that bypassed the rename): never used, its calls made again. False when the
        part is gone instead (a compaction merged it)."""
        if fs.get_file_info(path).type != pafs.FileType.File:
            return False
        if path not in self.bad_parts:
            self.bad_parts.append(path)
        log.warning("generation cache: skipping unreadable part %s (%s: %s); its calls "
                    "will be made again", path, type(e).__name__, str(e)[:200])
        return True

    def _read_keys(self, fs: pafs.FileSystem, part: str,
                   in_own_root: bool) -> Part | None:
        """A part to index, with its keys (never its texts); None for a part not to index
        (another writer's without an opt-in, or not a cache part)."""
        pf, prov = P.open_part(fs, part)
        names = pf.schema_arrow.names
        if any(c not in names for c in READ_COLUMNS[:4]):  # not a part of this cache
            return None
        trust = readers.trust(prov, in_own_root, self.user, self.read_users)
        if trust is None:
            self.foreign_skipped[part] = prov
            return None
        meta, idx = pf.metadata, names.index("key")
        keys: list[list[str | None]] = []
        for g in range(meta.num_row_groups):
            size = meta.row_group(g).column(idx).total_uncompressed_size
            if size > MAX_KEYS_BYTES:
                raise Oversized(f"its keys in row group {g} take {mb(size)}")
            keys.append(pf.read_row_group(g, columns=["key"]).column(0).to_pylist())
        return Part(fs, part, trust, prov, tuple(len(k) for k in keys), "checksum" in names,
                    keys)

    def _index_part(self, fs: pafs.FileSystem, part: str, in_own_root: bool) -> int:
        """Index one part's keys (never its texts); how many new keys it brought."""
        try:
            p = self._read_keys(fs, part, in_own_root)
        except FileNotFoundError:
            return 0  # a compaction deleted it: the merged part holds its entries
        except Oversized as e:
            self._seen_parts.add(part)
            self.oversized.append((part, str(e)))
            log.warning("generation cache: part %s not read: %s (more than a read may take); "
                        "its calls will be made again", part, e)
            return 0
        except (OSError, pa.ArrowException) as e:
            if self._unreadable(fs, part, e):
                self._seen_parts.add(part)
            return 0
        self._seen_parts.add(part)
        if p is None:
            return 0
        if not p.with_sum:
            self.legacy_parts += 1
        self._part_of[part] = p
        return self._add_keys(p)

    def _add_keys(self, p: Part) -> int:
        """Index a part's keys; how many were new."""
        added = 0
        for g, group_keys in enumerate(p.keys):
            for r, k in enumerate(group_keys):
                if k is None:
                    continue
                slot = self._entries.get(k)
                if slot is None:
                    self._entries[k] = _Slot([(p, g, r)])
                    added += 1
                else:
                    slot.locs.append((p, g, r))
        return added

    def read_journals(self) -> int:
        """Index the journals (`df_ray.pipeline.cache.journal`) of the root, and of local
        roots read on opt-in, not read yet, finished or still written: their entries are
        read whole (a journal is small) and verified line by line. How many keys they
        brought."""
        with self._lock:
            added = 0
            for fs, root, own_root in [(self.fs, self.path, True),
                                       *((fs, p, False) for fs, p in self.read_roots)]:
                if not isinstance(fs, pafs.LocalFileSystem):
                    continue  # an object store holds no journal
                for path in J.journal_paths(root):
                    if path not in self.journals:
                        added += self._index_journal(path, own_root)
            return added

    def _index_journal(self, path: str, in_own_root: bool) -> int:
        try:
            j = J.read_journal(path, self.max_entry_bytes, self.max_group_bytes)
        except FileNotFoundError:
            return 0  # folded meanwhile: the part it became is listed by the next refresh
        except Oversized as e:
            self.journals[path] = None
            self.oversized.append((path, str(e)))
            log.warning("generation cache: journal %s not read: %s (more than a read may "
                        "take); its calls will be made again", path, e)
            return 0
        except (OSError, ValueError) as e:
            self.journals[path] = None
            self.bad_parts.append(path)
            log.warning("generation cache: skipping unreadable journal %s (%s)", path, e)
            return 0
        self.journal_lines_skipped += j.skipped
        trust = readers.trust(j.provenance, in_own_root, self.user, self.read_users)
        if trust is None:
            self.journals[path] = None
            self.foreign_skipped[path] = j.provenance
            return 0
        p = Part(pafs.LocalFileSystem(), path, trust, j.provenance, (len(j.keys),), True,
                 [list(j.keys)], loaded={0: list(j.entries)})
        self.journals[path] = p
        return self._add_keys(p)

    def _in_parts(self, key: str) -> bool:
        """Whether one of the root's own parts (not a journal) holds a verified entry of
        ``key``."""
        slot = self._entries.get(key)
        for part, g, r in slot.locs if slot is not None else ():
            if part.own and not part.gone and part.path not in self.journals:
                group = self._group(part, g)
                if group is not None and group[r] is not None:
                    return True
        return False

    def fold_journals(self) -> int:
        """Fold every finished journal of this user in the root into one part (the entries
        its parts do not hold yet) and delete them; a journal still written is left. How
        many journals were folded."""
        paths = J.journal_paths(self.path) if isinstance(self.fs, pafs.LocalFileSystem) else []
        if not paths:
            return 0
        with self._lock, contextlib.ExitStack() as held:
            self._refresh(0.0)
            folded, rows = [], {}
            for path in paths:
                if not held.enter_context(J.finished(path)):
                    continue
                try:
                    j = J.read_journal(path, self.max_entry_bytes, self.max_group_bytes)
                except (OSError, ValueError, Oversized):
                    continue  # left where it is (said when it was read)
                if readers.trust(j.provenance, True, self.user, ()) is not True:
                    continue
                folded.append(path)
                for key, row in zip(j.keys, j.rows, strict=True):
                    if key not in rows and not self._in_parts(key):
                        rows[key] = row
            if rows:
                part, _ = self._write(list(rows.values()))
                self._add_keys(part)
            for path in folded:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
                if self.journals.get(path) is not None:
                    self.journals[path].gone = True
            return len(folded)

    def _read_group(self, part: Part, g: int) -> dict[str, list]:
        """Row group ``g``'s read columns, refused (Oversized) before it is read when its
        metadata says it holds more than a read may take."""
        pf, _ = P.open_part(part.fs, part.path)
        names = pf.schema_arrow.names
        cols = [c for c in (*READ_COLUMNS, "checksum") if c in names]
        rg = pf.metadata.row_group(g)
        size = sum(rg.column(j).total_uncompressed_size for j in range(rg.num_columns)
                   if rg.column(j).path_in_schema in cols)
        if size > self.max_group_bytes:
            raise Oversized(f"row group {g} holds {mb(size)}, more than the "
                            f"{mb(self.max_group_bytes)} a read may take")
        return pf.read_row_group(g, columns=cols).to_pydict()

    def _group(self, part: Part, g: int) -> list[CacheEntry | None] | None:
        """The verified entries of one row group (None where refused), read once and
        bounded in size; None when the part is gone (a compaction merged it)."""
        got = part.loaded.get(g)
        if got is not None:
            return got
        try:
            d = self._read_group(part, g)
        except FileNotFoundError:
            part.gone = True
            return None
        except Oversized as e:
            self.oversized.append((part.path, str(e)))
            log.warning("generation cache: part %s: %s; its %d calls will be made again",
                        part.path, e, part.group_rows[g])
            return part.refuse_group(g)
        except (OSError, pa.ArrowException) as e:
            if not self._unreadable(part.fs, part.path, e):
                part.gone = True
                return None
            return part.refuse_group(g)
        got = []
        for k, e in zip(d["key"], verified_entries(d, part.with_sum, self.max_entry_bytes),
                        strict=True):
            if e == "checksum":
                self.bad_entries.append((part.path, str(k)))
                log.warning("generation cache: dropping entry %s of part %s: its checksum "
                            "does not match its content; its call will be made again",
                            k, part.path)
            elif isinstance(e, str):
                size = e.removeprefix("size ")
                self.oversized.append((part.path, f"entry {k}: {size}"))
                log.warning("generation cache: entry %s of part %s holds %s, more than the %s "
                            "an entry may: not used; its call will be made again",
                            k, part.path, size, mb(self.max_entry_bytes))
            got.append(e if isinstance(e, CacheEntry) else None)
        part.loaded[g] = got
        return got

    def _resolve(self, key: str) -> CacheEntry | None:
        slot = self._entries.get(key)
        if slot is None:
            return None
        if slot.resolved:
            return slot.value
        for attempt in range(2):
            own: readers.Copies = {}
            foreign: readers.Copies = {}
            for part, g, r in slot.locs:
                group = None if part.gone else self._group(part, g)
                e = group[r] if group is not None else None
                if e is not None:
                    (own if part.own else foreign).setdefault(e.checksum(key), (e, part))
            if any(p.gone for p, _, _ in slot.locs) and attempt == 0:
                slot.locs = [loc for loc in slot.locs if not loc[0].gone]
                self._refresh(0.0)  # the merged part that replaced them
                continue
            break
        slot.value, conflict = readers.choose(key, own, foreign)
        if conflict is not None:
            self.conflicts.append(conflict)
        slot.resolved = True
        return slot.value

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def keys(self) -> list[str]:
        """Every key indexed (own parts and opted-in ones)."""
        return list(self._entries)

    def get(self, key: str) -> Completion | None:
        if key not in self._entries:
            return None
        with self._lock:
            e = self._resolve(key)
        return e.completion() if e is not None else None

    def put_many(self, items: Iterable[tuple[ChatRequest, Completion]]) -> int:
        """Persist successful completions as one new part; returns how many were written."""
        with self._lock:
            return self._put_many(items)

    def _put_many(self, items: Iterable[tuple[ChatRequest, Completion]]) -> int:
        rows = []
        entries: list[tuple[str, CacheEntry]] = []
        now = time.time()
        for req, comp in items:
            if comp.error is not None:
                continue
            key = req.key()
            if key in self._entries and self._resolve(key) is not None:
                continue
            entry, row = entry_of(req, comp, now)
            if len(entry.text.encode("utf-8", "surrogatepass")) > self.max_entry_bytes:
                log.warning("generation cache: not caching call %s: its text is larger than "
                            "the %s an entry may hold", key, mb(self.max_entry_bytes))
                continue
            entries.append((key, entry))
            rows.append(row)
        if rows:
            part, locs = self._write(rows)
            for (key, entry), (g, r) in zip(entries, locs, strict=True):
                slot = self._entries.setdefault(key, _Slot([]))
                slot.locs.append((part, g, r))
                slot.value, slot.resolved = entry, True
        return len(rows)

    def _write(self, rows: list[dict]) -> tuple[Part, list[tuple[int, int]]]:
        """Write ``rows`` as a new part (:func:`parts.write_part`) and index it."""
        part, locs = P.write_part(self.fs, self.path, self.user, rows)
        self._seen_parts.add(part.path)
        self._part_of[part.path] = part
        return part, locs

    def compact(self) -> int:
        """Merge this user's verified parts of the root into one; safe beside running writers
        (:mod:`df_ray.pipeline.cache.parts`). Returns the keys kept; ``self.compaction`` holds
        the figures: ``entries`` kept, ``parts`` merged, ``journals`` folded first (finished
        ones: `fold_journals`), ``dropped`` entries (bad checksum),
        ``unreadable`` parts (left where they are), ``conflicts`` keys whose different
        contents are all kept, ``foreign`` parts of other writers and ``oversized`` parts
        (both left where they are) and ``tmp_removed`` temporary files of dead writers."""
        with self._lock:
            self.compaction = self._compact()
            return self.compaction["entries"]

    def _whole_own_parts(self) -> list[Part]:
        """Every own part of the root, read whole and verified (a part with a refused row
        group stays as it is)."""
        read: list[Part] = []
        for path in self._parts():
            part = self._part_of.get(path)
            if part is None or not part.own or part.gone or part.damaged:
                continue
            groups = [self._group(part, g) for g in range(len(part.group_rows))]
            if part.gone or part.damaged or any(g is None for g in groups):
                continue
            read.append(part)
        return read

    def _left_alone(self) -> dict[str, int]:
        """Parts a compaction leaves where they are: other writers' in this root, too large."""
        inside = self.path.rstrip("/") + "/"
        return {"foreign": len(self.foreign_skipped) + sum(
                    1 for p in self._part_of.values()
                    if not p.own and not p.gone and p.path.startswith(inside)),
                "oversized": sum(1 for p in self._part_of.values()
                                 if p.damaged and not p.gone and p.path not in self.bad_parts)}

    def _compact(self) -> dict[str, int]:
        tmp_removed = self.remove_stale_tmp()
        journals = self.fold_journals()
        self._refresh(0.0)
        dropped_before, unreadable_before = len(self.bad_entries), len(self.bad_parts)
        read = self._whole_own_parts()
        merged = P.merged_entries(read)
        keys = {k for k, _ in merged}
        figures = {"parts": len(read), "dropped": len(self.bad_entries) - dropped_before,
                   "unreadable": len(self.bad_parts) - unreadable_before,
                   "tmp_removed": tmp_removed, "journals": journals, "conflicts": len(merged) - len(keys),
                   **self._left_alone(), "entries": len(keys)}
        if len(read) <= 1 and figures["dropped"] == 0:
            return figures
        rows = P.merged_rows(self.fs, read, merged)
        if rows:
            new, _ = self._write(rows)
        P.delete_parts(self.fs, read)
        # the index follows the root: the merged part in place of the parts it holds
        for slot in self._entries.values():
            slot.locs = [loc for loc in slot.locs if not loc[0].gone]
        if rows:
            self._seen_parts.discard(new.path)
            self._part_of.pop(new.path, None)
        self._refresh(0.0)
        self._entries = {k: s for k, s in self._entries.items() if s.locs or s.resolved}
        return figures

    def remove_stale_tmp(self) -> int:
        """Delete the temporary files of writers that died before their rename
        (:func:`parts.remove_stale_tmp`)."""
        return P.remove_stale_tmp(self.fs, self.path)


def open_cache(cfg) -> GenerationCache:
    """The generation cache of a (resolved) RunConfig: its ``cache_root`` as its
    ``cache_user``, reading other writers as its ``cache_read_from`` allows."""
    return GenerationCache(cfg.cache_root, user=getattr(cfg, "cache_user", None),
                           read_from=getattr(cfg, "cache_read_from", ()) or ())


def fold_root(root: str, user: str | None = None) -> int:
    """Fold the finished journals of ``root`` (`GenerationCache.fold_journals`), when it
    holds any; how many were folded."""
    target = J.target_of(root, user or "")  # None for a root that holds no journal
    if target is None or not J.journal_paths(target[0]):
        return 0
    return GenerationCache(root, user=user, index_journals=False).fold_journals()


def compact_above(root: str, max_parts: int) -> dict[str, int] | None:
    """Compact ``root`` (:meth:`GenerationCache.compact`) when it holds more than
    ``max_parts`` parts (0: never); its figures, or None when it was left as it was."""
    if max_parts <= 0 or P.count_parts(root) <= max_parts:
        return None
    cache = GenerationCache(root)
    cache.compact()
    return cache.compaction
