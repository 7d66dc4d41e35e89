"""Crash journals: an answer is on disk, in its run's cache root, once its engine has it.

A stage holds its cache writes until its batches end (`write_behind`), so a lost stage (or
a lost head, which runs the stages) loses the answers it held, and the engines on the worker
nodes go on answering requests nobody will receive. A journal keeps both, from the side that
survives the head: each engine replica appends every answer it finishes for a run (the
request's key and the row a cache part holds for it, checksum included) to a journal file of
its own in the run's cache root, written (not fsynced) once per batch of answers the engine
finished together, before they are sent. A request carries where its answer is journaled
(``(root, user)``, the run's cache root and the user it writes as): a replica of a shared
service (``kind: serve``) writes each user's answers into that user's root, under that
user's name, as the user's own stage would.

Layout: ``<root>/journal-<host>~<pid>-<id>.jsonl``, a header line (the writer's user, host,
pid and time) then one JSON row of :data:`entries.SCHEMA` per answer. A writer creates its
file under a temporary name, takes an exclusive ``flock`` on it, writes the header and
renames it, and holds the lock until it closes the file or its process ends (a kill
included): a journal that can be locked is finished, and its writer never touches it again.

Readers (every opening of a cache, so a run's lookups, ``df-ray cache`` commands and
compaction) index the root's journals beside its parts, finished or not, with the same trust
rules: a line that is not whole (a write cut by a kill), not JSON, or whose checksum does not
match is skipped and counted, never fatal. Folding (at a run's end, and by a compaction)
writes the entries of every finished journal that the root does not hold yet as one part and
deletes the journal, under its lock; a live writer's journal is left. A journal over
`MAX_JOURNAL_BYTES` is refused like an oversized row group (writers start a new file at
`ROTATE_BYTES`).

Journals need a root on a local or mounted file system (an object store cannot append): a
root given as a URI, or one the replica's node does not have (not shared with it), is not
journaled, and its answers are written by the stage alone.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from df_ray.engines.base import ChatRequest, Completion
from df_ray.pipeline.cache.entries import (
    MAX_ENTRY_BYTES,
    MAX_GROUP_BYTES,
    CacheEntry,
    Oversized,
    entry_checksum,
    entry_of,
    mb,
)
from df_ray.pipeline.cache.parts import TMP_PREFIX, Provenance
from df_ray.pipeline.writers import writer_tag

log = logging.getLogger(__name__)

PREFIX = "journal-"
SUFFIX = ".jsonl"
HEADER = "df_ray_journal"

#: A writer starts a new journal once its file holds this much.
ROTATE_BYTES = 16 * 2**20
#: A journal larger than this is not read (one line says so), like an oversized row group.
MAX_JOURNAL_BYTES = MAX_GROUP_BYTES

#: Where a request's answer is journaled: its run's cache root (a local path) and the user
#: the run writes as.
Target = tuple[str, str]


def target_of(root: str, user: str) -> Target | None:
    """The journal target of a cache root, or None for a root that cannot hold one (a URI)."""
    if "://" in root:
        return None
    return os.path.abspath(os.path.expanduser(root)), user


def is_journal(name: str) -> bool:
    return name.startswith(PREFIX) and name.endswith(SUFFIX)


def journal_paths(root: str) -> list[str]:
    """The journals of a local root, finished or not."""
    try:
        with os.scandir(root) as it:
            return sorted(e.path for e in it if is_journal(e.name) and e.is_file())
    except (FileNotFoundError, NotADirectoryError):
        return []


# -- writing (an engine replica)


class JournalWriter:
    """One journal file, locked by this process until `close` (see the module docstring)."""

    def __init__(self, target: Target) -> None:
        root, user = target
        if not os.path.isdir(root):  # not shared with this node: nothing to write to
            raise FileNotFoundError(f"no folder {root} on {socket.gethostname()}")
        name = f"{PREFIX}{writer_tag()}-{uuid.uuid4().hex[:12]}{SUFFIX}"
        tmp, self.path = os.path.join(root, f"{TMP_PREFIX}{name}"), os.path.join(root, name)
        self.fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o666)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
            head = {HEADER: 1, "user": user, "host": socket.gethostname(),
                    "pid": os.getpid(), "time": time.time()}
            self._write(json.dumps(head).encode() + b"\n")
            os.rename(tmp, self.path)
        except BaseException:
            os.close(self.fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        self.size = 0
        self._held: list[bytes] = []

    def append(self, request: ChatRequest, completion: Completion, now: float) -> None:
        """Hold one answer's row (written by `flush`); a failed call or an entry larger than
        the cache takes is not journaled."""
        if completion.error is not None:
            return
        _, row = entry_of(request, completion, now)
        line = json.dumps(row, ensure_ascii=False, separators=(",", ":"))
        data = line.encode("utf-8", "surrogatepass") + b"\n"
        if len(data) <= MAX_ENTRY_BYTES:
            self._held.append(data)

    def flush(self) -> None:
        """Write what is held, in one write."""
        if self._held:
            data, self._held = b"".join(self._held), []
            self._write(data)
            self.size += len(data)

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]

    def close(self) -> None:
        """Write what is held, release the lock: the journal is finished."""
        try:
            self.flush()
        finally:
            os.close(self.fd)


@dataclass
class Journals:
    """A replica's open journals, one per target; a target it cannot write to is said once
    and not journaled."""

    writers: dict[Target, JournalWriter | None] = field(default_factory=dict)

    def writer(self, target: Target) -> JournalWriter | None:
        if target in self.writers:
            return self.writers[target]
        try:
            w: JournalWriter | None = JournalWriter(target)
        except OSError as e:
            log.warning("not journaling answers for %s: %s (its stage still writes them)",
                        target[0], e)
            w = None
        self.writers[target] = w
        return w

    def write(self, items: list[tuple[Target, ChatRequest, Completion]]) -> set[Target]:
        """Journal answers (each under its target) and write them, one write per journal;
        the targets whose answers are on disk now. Never raises: a journal is a spare copy,
        and the answers must still go out (their stage writes those of other targets)."""
        try:
            return self._write(items)
        except Exception:
            log.exception("journaling %d answer(s) failed; their stage still writes them",
                          len(items))
            return set()

    def _write(self, items: list[tuple[Target, ChatRequest, Completion]]) -> set[Target]:
        now = time.time()
        touched: set[Target] = set()
        written: set[Target] = set()
        for target, request, completion in items:
            w = self.writer(target)
            if w is not None:
                w.append(request, completion, now)
                touched.add(target)
        for target in touched:
            w = self.writers[target]
            try:
                w.flush()
            except OSError as e:  # the root filled or went away: the stage still writes them
                log.warning("journal %s: %s; not journaling answers for %s any more",
                            w.path, e, target[0])
                self._drop(target)
                continue
            written.add(target)
            if w.size >= ROTATE_BYTES:
                self._drop(target)
        return written

    def _drop(self, target: Target) -> None:
        w = self.writers.pop(target, None)
        if w is not None:
            with contextlib.suppress(OSError):
                w.close()

    def close(self, target: Target | None = None) -> None:
        """Finish ``target``'s journal, or every journal (a replica's graceful end, or its
        run's); a later answer for a finished target starts a new one."""
        for t in [target] if target is not None else list(self.writers):
            self._drop(t)


# -- reading (a cache)


@dataclass
class JournalRead:
    provenance: Provenance
    keys: list[str]
    entries: list[CacheEntry]
    rows: list[dict[str, Any]]
    skipped: int  # lines not whole, not JSON, or whose checksum does not match


def read_journal(path: str, max_entry_bytes: int = MAX_ENTRY_BYTES,
                 max_bytes: int = MAX_JOURNAL_BYTES) -> JournalRead:
    """A journal's verified rows (`Oversized` when the file is larger than ``max_bytes``,
    ``ValueError`` when it has no journal header)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size > max_bytes:
            raise Oversized(f"it holds {mb(size)}")
        data = f.read(max_bytes + 1)
        uid = os.fstat(f.fileno()).st_uid
    lines = data.split(b"\n")
    torn = lines.pop()  # what follows the last newline: a write cut short
    try:
        head = json.loads(lines[0]) if lines else None
    except ValueError:
        head = None
    if not isinstance(head, dict) or head.get(HEADER) != 1:
        raise ValueError("not a journal (no header line)")
    prov = Provenance(head.get("user"), head.get("host"), head.get("pid"), head.get("time"),
                      uid)
    out = JournalRead(prov, [], [], [], 1 if torn else 0)
    for line in lines[1:]:
        row = _row(line, max_entry_bytes)
        if row is None:
            out.skipped += 1
            continue
        out.keys.append(row["key"])
        out.entries.append(CacheEntry(row["text"], row["prompt_tokens"],
                                      row["completion_tokens"], row["finish_reason"]))
        out.rows.append(row)
    return out


def _row(line: bytes, max_entry_bytes: int) -> dict[str, Any] | None:
    """One journal line as a verified row, or None."""
    if len(line) > max_entry_bytes + 4096:
        return None
    try:
        r = json.loads(line.decode("utf-8", "surrogatepass"))
        k, t, p, c, f = (r["key"], r["text"], int(r["prompt_tokens"]),
                         int(r["completion_tokens"]), r.get("finish_reason"))
        ok = (isinstance(k, str) and isinstance(t, str)
              and r.get("checksum") == entry_checksum(k, t, p, c, f))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if not ok or len(t.encode("utf-8", "surrogatepass")) > max_entry_bytes:
        return None
    return {"key": k, "model": str(r.get("model") or ""), "revision": str(r.get("revision")
            or ""), "seed": int(r.get("seed") or 0), "text": t, "prompt_tokens": p,
            "completion_tokens": c, "created": float(r.get("created") or 0.0),
            "finish_reason": f, "checksum": r["checksum"]}


@contextlib.contextmanager
def finished(path: str) -> Iterator[bool]:
    """Whether the journal is finished (its writer closed it or is gone), holding its lock
    meanwhile so that it can be deleted; False (nothing held) while a writer holds it."""
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)
