"""The generation cache: every LLM call, keyed by its content hash, stored as Parquet.

It is the mechanism behind both resume and sweep sharing: a configuration that repeats calls
of an earlier one, or a job rerun after a kill, finds them here and pays nothing. Failed calls
are not cached: a rerun retries them.

Its modules, by what they hold:

- :mod:`~df_ray.pipeline.cache.entries`: keys and entries (the schema, an entry and its
  checksum, the bounds a read keeps to);
- :mod:`~df_ray.pipeline.cache.parts`: parts (how one is written, named, listed and read,
  whose it is) and their compaction;
- :mod:`~df_ray.pipeline.cache.readers`: readers across users (whose parts a cache trusts,
  which copy of a key it serves when copies differ);
- :mod:`~df_ray.pipeline.cache.store`: :class:`GenerationCache`, the index over them;
- :mod:`~df_ray.pipeline.cache.journal`: the engines' crash journals (every answer on disk
  as its replica finishes it, read beside the parts, folded into a part at a run's end);
- :mod:`~df_ray.pipeline.cache.seed`: seeding a root from a folder of parts (``df-ray cache
  seed``).
"""

from df_ray.pipeline.cache.entries import (
    GROUP_TARGET_BYTES,
    MAX_ENTRY_BYTES,
    MAX_FOOTER_BYTES,
    MAX_GROUP_BYTES,
    MAX_KEYS_BYTES,
    SCHEMA,
    CacheEntry,
    entry_checksum,
)
from df_ray.pipeline.cache.parts import Provenance, count_parts, part_provenance
from df_ray.pipeline.cache.readers import (
    READ_FROM_ENV,
    Conflict,
    check_read_from,
    is_root,
    read_from_env,
)
from df_ray.pipeline.cache.store import GenerationCache, compact_above, fold_root, open_cache

__all__ = ["GROUP_TARGET_BYTES", "MAX_ENTRY_BYTES", "MAX_FOOTER_BYTES", "MAX_GROUP_BYTES",
           "MAX_KEYS_BYTES", "READ_FROM_ENV", "SCHEMA", "CacheEntry", "Conflict",
           "GenerationCache", "Provenance", "check_read_from", "compact_above", "count_parts",
           "entry_checksum", "fold_root", "is_root", "open_cache", "part_provenance", "read_from_env"]
