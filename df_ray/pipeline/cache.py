"""The generation cache: every LLM call, keyed by its content hash, stored as Parquet.

It is the mechanism behind both resume and sweep sharing: a configuration that repeats calls
of an earlier one, or a job rerun after a kill, finds them here and pays nothing.

Layout: ``<root>/part-<time>-<uuid>.parquet``. Each writer only ever creates new files (written
under a temporary name and renamed), so any number of processes and machines can write to
one root concurrently without locks and a reader never sees a half-written file. The root is
a local folder or any pyarrow filesystem URI (``s3://...``, ``gs://...``, ``hdfs://...``).
Failed calls are not cached: a rerun retries them.

Writers and trust. Every part records its provenance in its Parquet footer (the writer's user
name, host, pid and time: :func:`part_provenance`). A cache replays the parts of its own root
written under its own ``user`` (and those without provenance, written before it was kept),
and, on a local or mounted file system, owned by its own uid; other writers' parts are not
read (counted in ``foreign_skipped``, said once when the cache opens) unless ``read_from``
opts in: a user name, ``*``, or another root (read only). The default root is per user
(``df_ray.storage``). A user name is not authenticated, so the separation between users who
share one uid (jobs of one Ray cluster) is as good as the names they run under; between
uids it holds.

Conflicts. A key (a public hash of the request) may have copies in several parts. Copies are
compared by their verified content, never by a part's name or listing order: one content is
served; where own copies differ (two concurrent runs on a non-deterministic engine), the one
with the smallest content checksum is served and the conflict reported (a warning naming the
key and every copy's part and writer; ``conflicts``); a copy from an opted-in writer that
differs from any other copy is refused, so that key is served from the own copy, or not at
all (its call is made again).

Reads are lazy and bounded: opening a root reads each part's footer and its keys only
(``MAX_FOOTER_BYTES``, ``MAX_KEYS_BYTES``); an entry's row group is read when one of its keys
is first asked for, and refused with one line, before it is read, when the part's metadata
says it holds more than ``MAX_GROUP_BYTES``; an entry over ``MAX_ENTRY_BYTES`` is neither
served nor written. Writers end row groups at ``GROUP_TARGET_BYTES`` of text. (The sizes come
from the part's own metadata: a part crafted to misstate them is refused only once read.)

Integrity: every entry carries a checksum of its content (key, text, token counts), and every
Parquet page its CRC; both are verified on read. A part that cannot be read, or an entry whose
checksum does not match, is never used: it is dropped with a warning naming the part (and the
entry), and its call is made again. Parts written before checksums existed are read as they
are (``legacy_parts`` counts them).

``compact`` (``df-ray cache compact``) merges the user's own parts into one, beside running
writers: it deletes only the parts it read and verified, so a part written meanwhile stays,
and a reader that lists the root while it runs finds either the old parts or the merged one.
Every differing copy of a key is kept in the merged part (a conflict is never settled by
deleting a copy); other writers' parts and parts too large to read stay where they are. It also
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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from df_ray.engines.base import ChatRequest, Completion, valid_text
from df_ray.pipeline.file_errors import naming
from df_ray.pipeline.writers import is_abandoned, writer_tag

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

#: Read bounds. An entry's text larger than this is neither served nor written.
MAX_ENTRY_BYTES = 8 * 2**20
#: The uncompressed bytes of one row group's read columns (from the part's metadata) that a
#: read may take; a larger row group is refused before it is read.
MAX_GROUP_BYTES = 64 * 2**20
#: The keys of one row group, likewise (read when a part is indexed).
MAX_KEYS_BYTES = 16 * 2**20
#: A part's Parquet footer (its schema and row-group metadata).
MAX_FOOTER_BYTES = 16 * 2**20
#: Writers end a row group once it holds this much text (so a read stays well under the bound).
GROUP_TARGET_BYTES = 4 * 2**20


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


@dataclass(frozen=True, slots=True)
class Conflict:
    """One key whose parts hold different verified contents. ``chosen`` is the content
    checksum that is served (None: refused, the call is made again); ``variants`` (content
    checksum, part, provenance) every content found, own parts first."""

    key: str
    chosen: str | None
    variants: tuple[tuple[str, str, str], ...]


@dataclass(slots=True)
class _Part:
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


@dataclass(slots=True)
class _Slot:
    #: (part, row group, row) of every copy of the key
    locs: list[tuple[_Part, int, int]]
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
    every other copy of their key (see the module docstring)."""

    def __init__(self, root: str, *, user: str | None = None,
                 read_from: Sequence[str] = (), max_entry_bytes: int | None = None,
                 max_group_bytes: int | None = None) -> None:
        self.root = root
        self.fs, self.path = _filesystem(root)
        self.fs.create_dir(self.path, recursive=True)
        if user is None:
            from df_ray.user_names import current_user

            user = current_user()
        self.user = user
        self.read_users = frozenset(r for r in read_from if not _is_root(r))
        self.read_roots: list[tuple[pafs.FileSystem, str]] = [
            _filesystem(r) for r in read_from if _is_root(r)]
        self.max_entry_bytes = max_entry_bytes or MAX_ENTRY_BYTES
        self.max_group_bytes = max_group_bytes or MAX_GROUP_BYTES
        self._entries: dict[str, _Slot] = {}
        self._seen_parts: set[str] = set()
        self._part_of: dict[str, _Part] = {}
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
        self._listed_at = float("-inf")
        self._lock = threading.RLock()
        # a writer killed before its rename left a temporary part: the next opener removes it
        with contextlib.suppress(OSError):
            self.remove_stale_tmp()
        self.refresh()
        if self.foreign_skipped:
            writers = sorted({p.describe().split(" on ")[0]
                              for p in self.foreign_skipped.values()})
            log.warning("generation cache %s: %d part(s) written by other users (%s) not read; "
                        "opt in with cache_read_from (or DF_RAY_CACHE_READ_FROM) to replay them",
                        root, len(self.foreign_skipped), ", ".join(writers)[:200])

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()

    def _parts(self) -> list[str]:
        return _list_parts(self.fs, self.path)

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
            listed += [(fs, p, False) for p in _list_parts(fs, path)]
        for fs, part, in_own_root in listed:
            if part in self._seen_parts:
                continue
            added += self._index_part(fs, part, in_own_root)
        return added

    def _trust(self, prov: Provenance, in_own_root: bool) -> bool | None:
        """True: an own part; False: another writer's, opted in; None: not to be read."""
        if in_own_root:
            mine = (prov.user is None or prov.user == self.user) and (
                prov.uid is None or prov.uid == _euid())
            if mine:
                return True
            other = prov.user if prov.user is not None else f"uid {prov.uid}"
            return False if ("*" in self.read_users or other in self.read_users) else None
        return False  # a root read on opt-in

    def _index_part(self, fs: pafs.FileSystem, part: str, in_own_root: bool) -> int:
        """Index one part's keys (never its texts); how many new keys it brought."""
        try:
            pf, prov = _open_part(fs, part)
            names = pf.schema_arrow.names
            if any(c not in names for c in _READ[:4]):  # not a part of this cache
                self._seen_parts.add(part)
                return 0
            trust = self._trust(prov, in_own_root)
            if trust is None:
                self._seen_parts.add(part)
                self.foreign_skipped[part] = prov
                return 0
            meta = pf.metadata
            idx = names.index("key")
            keys: list[list[str | None]] = []
            for g in range(meta.num_row_groups):
                size = meta.row_group(g).column(idx).total_uncompressed_size
                if size > MAX_KEYS_BYTES:
                    raise _Oversized(f"its keys in row group {g} take {_mb(size)}")
                keys.append(pf.read_row_group(g, columns=["key"]).column(0).to_pylist())
        except FileNotFoundError:
            return 0  # a compaction deleted it: the merged part holds its entries
        except _Oversized as e:
            self._seen_parts.add(part)
            self.oversized.append((part, str(e)))
            log.warning("generation cache: part %s not read: %s (more than a read may take); "
                        "its calls will be made again", part, e)
            return 0
        except (OSError, pa.ArrowException) as e:
            # A part that cannot be read (a bit flipped on disk, a truncation by a foreign
            # writer that bypassed the rename) is never used: its calls are made again.
            if fs.get_file_info(part).type != pafs.FileType.File:
                return 0
            self._seen_parts.add(part)
            self.bad_parts.append(part)
            log.warning("generation cache: skipping unreadable part %s (%s: %s); its calls "
                        "will be made again", part, type(e).__name__, str(e)[:200])
            return 0
        with_sum = "checksum" in names
        if not with_sum:
            self.legacy_parts += 1
        rows = tuple(len(k) for k in keys)
        p = _Part(fs, part, trust, prov, rows, with_sum, keys)
        self._part_of[part] = p
        self._seen_parts.add(part)
        added = 0
        for g, group_keys in enumerate(keys):
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

    def _group(self, part: _Part, g: int) -> list[CacheEntry | None] | None:
        """The verified entries of one row group (None where refused), read once and
        bounded in size; None when the part is gone (a compaction merged it)."""
        got = part.loaded.get(g)
        if got is not None:
            return got
        fs = part.fs
        try:
            pf, _ = _open_part(fs, part.path)
            names = pf.schema_arrow.names
            cols = [c for c in (*_READ, "checksum") if c in names]
            rg = pf.metadata.row_group(g)
            size = sum(rg.column(j).total_uncompressed_size for j in range(rg.num_columns)
                       if rg.column(j).path_in_schema in cols)
            if size > self.max_group_bytes:
                raise _Oversized(f"row group {g} holds {_mb(size)}, more than the "
                                 f"{_mb(self.max_group_bytes)} a read may take")
            d = pf.read_row_group(g, columns=cols).to_pydict()
        except FileNotFoundError:
            part.gone = True
            return None
        except _Oversized as e:
            self.oversized.append((part.path, str(e)))
            log.warning("generation cache: part %s: %s; its %d calls will be made again",
                        part.path, e, part.group_rows[g])
            part.damaged = True
            got = part.loaded[g] = [None] * part.group_rows[g]
            return got
        except (OSError, pa.ArrowException) as e:
            if fs.get_file_info(part.path).type != pafs.FileType.File:
                part.gone = True
                return None
            if part.path not in self.bad_parts:
                self.bad_parts.append(part.path)
            log.warning("generation cache: skipping unreadable part %s (%s: %s); its calls "
                        "will be made again", part.path, type(e).__name__, str(e)[:200])
            part.damaged = True
            got = part.loaded[g] = [None] * part.group_rows[g]
            return got
        n = len(d["key"])
        finish = d.get("finish_reason") or [None] * n
        got = []
        for i in range(n):
            k, t, p, c, f = (d["key"][i], d["text"][i], d["prompt_tokens"][i],
                             d["completion_tokens"][i], finish[i])
            if part.with_sum and (k is None or t is None or p is None or c is None
                                  or d["checksum"][i] != entry_checksum(k, t, p, c, f)):
                self.bad_entries.append((part.path, str(k)))
                log.warning("generation cache: dropping entry %s of part %s: its checksum "
                            "does not match its content; its call will be made again",
                            k, part.path)
                got.append(None)
                continue
            if t is None or p is None or c is None:
                got.append(None)
                continue
            size = len(t.encode("utf-8", "surrogatepass"))
            if size > self.max_entry_bytes:
                self.oversized.append((part.path, f"entry {k}: {_mb(size)}"))
                log.warning("generation cache: entry %s of part %s holds %s, more than the %s "
                            "an entry may: not used; its call will be made again",
                            k, part.path, _mb(size), _mb(self.max_entry_bytes))
                got.append(None)
                continue
            got.append(CacheEntry(t, int(p), int(c), f))
        part.loaded[g] = got
        return got

    def _resolve(self, key: str) -> CacheEntry | None:
        slot = self._entries.get(key)
        if slot is None:
            return None
        if slot.resolved:
            return slot.value
        for attempt in range(2):
            own: dict[str, tuple[CacheEntry, _Part]] = {}
            foreign: dict[str, tuple[CacheEntry, _Part]] = {}
            for part, g, r in slot.locs:
                group = None if part.gone else self._group(part, g)
                e = group[r] if group is not None else None
                if e is not None:
                    (own if part.own else foreign).setdefault(_content(key, e), (e, part))
            if any(p.gone for p, _, _ in slot.locs) and attempt == 0:
                slot.locs = [loc for loc in slot.locs if not loc[0].gone]
                self._refresh(0.0)  # the merged part that replaced them
                continue
            break
        slot.value = self._choose(key, own, foreign)
        slot.resolved = True
        return slot.value

    def _choose(self, key: str, own: dict[str, tuple[CacheEntry, _Part]],
                foreign: dict[str, tuple[CacheEntry, _Part]]) -> CacheEntry | None:
        """The entry served for ``key``: the one content of its copies; where they differ,
        the own content with the smallest content checksum (never a part's name or order),
        and never another writer's content that differs from any other copy."""
        variants = {**{s: v for s, v in foreign.items()}, **own}
        if len(variants) <= 1:
            return next(iter(variants.values()))[0] if variants else None
        chosen = min(own) if own else None
        listed = tuple((s, p.path, ("own: " if p.own else "another writer's: ")
                        + p.provenance.describe())
                       for s, (_, p) in [*sorted(own.items()), *sorted(
                           (s, v) for s, v in foreign.items() if s not in own)])
        self.conflicts.append(Conflict(key, chosen, listed))
        where = "; ".join(f"{s[:12]} in {path.rsplit('/', 1)[-1]} ({who})"
                          for s, path, who in listed)
        if chosen is None:
            log.warning("generation cache: entry %s has %d different contents in parts of "
                        "other writers (%s): refused; its call will be made again",
                        key, len(variants), where[:600])
            return None
        log.warning("generation cache: entry %s has %d different contents (%s): serving "
                    "%s, the own content with the smallest checksum%s", key, len(variants),
                    where[:600], chosen[:12],
                    "; other writers' differing contents refused" if set(foreign) - set(own)
                    else "")
        return own[chosen][0]

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
            text = valid_text(comp.text)
            if len(text.encode("utf-8", "surrogatepass")) > self.max_entry_bytes:
                log.warning("generation cache: not caching call %s: its text is larger than "
                            "the %s an entry may hold", key, _mb(self.max_entry_bytes))
                continue
            entry = CacheEntry(text, comp.prompt_tokens, comp.completion_tokens,
                               comp.finish_reason)
            entries.append((key, entry))
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
            part, locs = self._write(rows)
            for (key, entry), (g, r) in zip(entries, locs, strict=True):
                slot = self._entries.setdefault(key, _Slot([]))
                slot.locs.append((part, g, r))
                slot.value, slot.resolved = entry, True
        return len(rows)

    def _write(self, rows: list[dict]) -> tuple[_Part, list[tuple[int, int]]]:
        """Write ``rows`` as a new part (row groups of at most ``GROUP_TARGET_BYTES`` of text,
        the writer's provenance in its footer); the part and each row's (group, row)."""
        name = f"part-{time.time_ns()}-{uuid.uuid4().hex[:12]}.parquet"
        final = f"{self.path}/{name}"
        tmp = f"{self.path}/{_TMP_PREFIX}{writer_tag()}-{name}"
        prov = Provenance(self.user, socket.gethostname(), os.getpid(), time.time())
        schema = SCHEMA.with_metadata(_provenance_metadata(prov))
        groups: list[list[dict]] = [[]]
        size = 0
        for row in rows:
            n = len(row["text"].encode("utf-8", "surrogatepass"))
            if groups[-1] and size + n > GROUP_TARGET_BYTES:
                groups.append([])
                size = 0
            groups[-1].append(row)
            size += n
        try:
            with naming(tmp), pq.ParquetWriter(tmp, schema, filesystem=self.fs,
                                  write_page_checksum=True) as w:
                for grp in groups:
                    w.write_table(pa.Table.from_pylist(grp, schema=schema),
                                  row_group_size=len(grp))
            self.fs.move(tmp, final)
        except BaseException:
            with contextlib.suppress(OSError):
                self.fs.delete_file(tmp)
            raise
        self._seen_parts.add(final)
        part = _Part(self.fs, final, True, prov, tuple(len(g) for g in groups), True,
                     [[row["key"] for row in grp] for grp in groups])
        self._part_of[final] = part
        return part, [(g, r) for g, grp in enumerate(groups) for r in range(len(grp))]

    def compact(self) -> int:
        """Merge this user's verified parts of the root into one; safe beside running writers
        (see the module docstring). Returns the keys kept; ``self.compaction`` holds the
        figures: ``entries`` kept, ``parts`` merged, ``dropped`` entries (bad checksum),
        ``unreadable`` parts (left where they are), ``conflicts`` keys whose different
        contents are all kept, ``foreign`` parts of other writers and ``oversized`` parts
        (both left where they are) and ``tmp_removed`` temporary files of dead writers."""
        with self._lock:
            self.compaction = self._compact()
            return self.compaction["entries"]

    def _compact(self) -> dict[str, int]:
        tmp_removed = self.remove_stale_tmp()
        self._refresh(0.0)
        dropped_before = len(self.bad_entries)
        unreadable_before = len(self.bad_parts)
        # every own part of the root, whole: a part with a refused row group stays as it is
        read: list[_Part] = []
        for path in self._parts():
            part = self._part_of.get(path)
            if part is None or not part.own or part.gone or part.damaged:
                continue
            groups = [self._group(part, g) for g in range(len(part.group_rows))]
            if part.gone or part.damaged or any(g is None for g in groups):
                continue
            read.append(part)
        merged: dict[tuple[str, str], CacheEntry] = {}
        for part in read:
            for g, keys in enumerate(part.keys):
                for k, e in zip(keys, part.loaded[g], strict=True):
                    if e is not None and k is not None:
                        merged.setdefault((k, _content(k, e)), e)
        keys = {k for k, _ in merged}
        conflicts = len(merged) - len(keys)
        figures = {"parts": len(read), "dropped": len(self.bad_entries) - dropped_before,
                   "unreadable": len(self.bad_parts) - unreadable_before,
                   "tmp_removed": tmp_removed, "conflicts": conflicts,
                   "foreign": len(self.foreign_skipped) + sum(
                       1 for p in self._part_of.values() if not p.own and not p.gone
                       and p.path.startswith(self.path.rstrip("/") + "/")),
                   "oversized": sum(1 for p in self._part_of.values() if p.damaged
                                    and not p.gone and p.path not in self.bad_parts),
                   "entries": len(keys)}
        if len(read) <= 1 and figures["dropped"] == 0:
            return figures
        # Model, revision, seed and creation time ride along from the parts that have them.
        extra: dict[str, dict] = {}
        for part in read:
            try:
                t = pq.read_table(part.path, filesystem=self.fs,
                                  columns=["key", "model", "revision", "seed", "created"])
            except (OSError, pa.ArrowException):
                continue
            for row in t.to_pylist():
                extra.setdefault(row["key"], row)
        rows = []
        for (k, _), e in sorted(merged.items()):
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
            new, _ = self._write(rows)
        for part in read:
            # another compaction may have got there first: its merged part holds the entries
            with contextlib.suppress(FileNotFoundError):
                self.fs.delete_file(part.path)
            part.gone = True
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
        """Delete the temporary files of writers that died before their rename: on this
        machine, those whose process is gone; elsewhere, those older than ``writers.STALE_TMP_S``."""
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


class _Oversized(Exception):
    pass


def _content(key: str, e: CacheEntry) -> str:
    """An entry's content checksum, computed from its verified content (not the stored one)."""
    return entry_checksum(key, e.text, e.prompt_tokens, e.completion_tokens, e.finish_reason)


def _mb(n: int) -> str:
    return f"{n / 2**20:.1f} MB"


def _euid() -> int | None:
    return os.geteuid() if hasattr(os, "geteuid") else None


def _is_root(item: str) -> bool:
    """Whether a ``read_from`` item is a root (a path or URI) rather than a user name."""
    return "://" in item or "/" in item or os.sep in item or item.startswith("~")


def _list_parts(fs: pafs.FileSystem, path: str) -> list[str]:
    sel = pafs.FileSelector(path, recursive=False, allow_not_found=True)
    return sorted(i.path for i in fs.get_file_info(sel)
                  if i.type == pafs.FileType.File and i.base_name.startswith("part-")
                  and i.base_name.endswith(".parquet"))


def _provenance_metadata(p: Provenance) -> dict[bytes, bytes]:
    return {b"df_ray.writer.user": (p.user or "").encode(),
            b"df_ray.writer.host": (p.host or "").encode(),
            b"df_ray.writer.pid": str(p.pid or 0).encode(),
            b"df_ray.writer.time": repr(p.time or 0.0).encode()}


def _open_part(fs: pafs.FileSystem, path: str) -> tuple[pq.ParquetFile, Provenance]:
    """A part's footer (bounded: a footer larger than ``MAX_FOOTER_BYTES`` is refused before
    it is parsed) and its provenance."""
    f = fs.open_input_file(path)
    size = f.size()
    if size >= 12:
        tail = f.read_at(8, size - 8)
        footer = int.from_bytes(tail[:4], "little")
        if tail[4:] == b"PAR1" and footer > MAX_FOOTER_BYTES:
            raise _Oversized(f"its footer takes {_mb(footer)}")
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
    fs, p = _filesystem(path)
    return _open_part(fs, p)[1]


#: Comma-separated opt-in to other writers' entries, added to a configuration's
#: ``cache_read_from`` (user names, ``*`` or roots).
READ_FROM_ENV = "DF_RAY_CACHE_READ_FROM"


def check_read_from(items: Sequence[str]) -> list[str]:
    """``cache_read_from`` items as given, or a one-line ValueError naming a bad one: each is
    ``*``, a user name (as ``DF_RAY_USER`` takes) or a root (a path or URI)."""
    from df_ray.user_names import validate_user

    out = []
    for item in items:
        item = str(item).strip()
        if not item:
            raise ValueError("cache_read_from: an empty item (give a user name, '*' or a root)")
        if item != "*" and not _is_root(item):
            validate_user(item, "cache_read_from")
        out.append(item)
    return out


def read_from_env() -> list[str]:
    """The opt-in ``DF_RAY_CACHE_READ_FROM`` gives (empty when unset)."""
    raw = os.environ.get(READ_FROM_ENV, "")
    return check_read_from([x for x in raw.split(",") if x.strip()])


def open_cache(cfg) -> GenerationCache:
    """The generation cache of a (resolved) RunConfig: its ``cache_root`` as its
    ``cache_user``, reading other writers as its ``cache_read_from`` allows."""
    return GenerationCache(cfg.cache_root, user=getattr(cfg, "cache_user", None),
                           read_from=getattr(cfg, "cache_read_from", ()) or ())


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


def _tmp_is_stale(rest: str, mtime, now: float) -> bool:
    """Whether a temporary part named ``<host>~<pid>-part-...`` (or an older unnamed one)
    belongs to a writer that is gone."""
    tag = rest.split("-part-", 1)[0] if "-part-" in rest else ""
    return is_abandoned(tag, mtime.timestamp() if mtime is not None else None, now)
