"""The cache's keys and entries: the Parquet schema a part holds, an entry and its checksum,
and the bounds a read keeps to.

Integrity: every entry carries a checksum of its content (key, text, token counts), and every
Parquet page its CRC; both are verified on read. An entry whose checksum does not match is
never used: it is dropped with a warning naming the part and the entry, and its call is made
again. Parts written before checksums existed are read as they are.

Reads are bounded: opening a root reads each part's footer and its keys only
(``MAX_FOOTER_BYTES``, ``MAX_KEYS_BYTES``); an entry's row group is read when one of its keys
is first asked for, and refused with one line, before it is read, when the part's metadata
says it holds more than ``MAX_GROUP_BYTES``; an entry over ``MAX_ENTRY_BYTES`` is neither
served nor written. Writers end row groups at ``GROUP_TARGET_BYTES`` of text. (The sizes come
from the part's own metadata: a part crafted to misstate them is refused only once read.)
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs

from df_ray.engines.base import ChatRequest, Completion, valid_text

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

#: The columns an entry is read from (the first four are required).
READ_COLUMNS = ("key", "text", "prompt_tokens", "completion_tokens", "finish_reason")

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


@dataclass(frozen=True, slots=True)
class CacheEntry:
    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str | None = None

    def completion(self) -> Completion:
        return Completion(self.text, self.prompt_tokens, self.completion_tokens,
                          finish_reason=self.finish_reason)

    def checksum(self, key: str) -> str:
        """This entry's content checksum under ``key``, computed from its verified content
        (not the stored one): copies of a key are compared by it."""
        return entry_checksum(key, self.text, self.prompt_tokens, self.completion_tokens,
                              self.finish_reason)

    def row(self, key: str, model: str = "", revision: str = "", seed: int = 0,
            created: float = 0.0) -> dict:
        """The entry as a row of :data:`SCHEMA`, with its checksum."""
        return {"key": key, "model": model, "revision": revision, "seed": seed,
                "text": self.text, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "created": created,
                "finish_reason": self.finish_reason, "checksum": self.checksum(key)}


def entry_of(req: ChatRequest, comp: Completion, created: float) -> tuple[CacheEntry, dict]:
    """A successful call as the entry it caches and the row that stores it."""
    entry = CacheEntry(valid_text(comp.text), comp.prompt_tokens, comp.completion_tokens,
                       comp.finish_reason)
    return entry, entry.row(req.key(), valid_text(req.model), valid_text(req.revision or ""),
                            req.seed, created)


def verified_entries(d: dict[str, list], with_sum: bool, max_entry_bytes: int,
                     ) -> list[CacheEntry | str | None]:
    """A row group's columns as entries: a ``CacheEntry`` where it is whole and verified, a
    reason (``"checksum"``, or ``"size <MB>"`` over ``max_entry_bytes``) where it is refused,
    None where a part written before checksums lacks a field."""
    n = len(d["key"])
    finish = d.get("finish_reason") or [None] * n
    out: list[CacheEntry | str | None] = []
    for i in range(n):
        k, t, p, c, f = (d["key"][i], d["text"][i], d["prompt_tokens"][i],
                         d["completion_tokens"][i], finish[i])
        if with_sum and (k is None or t is None or p is None or c is None
                         or d["checksum"][i] != entry_checksum(k, t, p, c, f)):
            out.append("checksum")
        elif t is None or p is None or c is None:
            out.append(None)
        elif (size := len(t.encode("utf-8", "surrogatepass"))) > max_entry_bytes:
            out.append(f"size {mb(size)}")
        else:
            out.append(CacheEntry(t, int(p), int(c), f))
    return out


class Oversized(Exception):
    """Something a read would take is larger than its bound (the message says what)."""


def mb(n: int) -> str:
    return f"{n / 2**20:.1f} MB"


def filesystem(root: str) -> tuple[pafs.FileSystem, str]:
    """The pyarrow file system and path of a root (a local folder or a URI)."""
    if "://" in root:
        return pafs.FileSystem.from_uri(root)
    path = os.path.abspath(os.path.expanduser(root))
    return pafs.LocalFileSystem(), path
