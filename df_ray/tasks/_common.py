"""Shared plumbing for the benchmark loaders: reading rows, schema checks, deterministic
ordering and stratified splits, and the Hugging Face hub access point.

Everything here is deterministic across processes and machines: orderings come from
SHA-256 of (seed, id), never from Python's salted ``hash()``.
"""

from __future__ import annotations

import contextvars
import csv
import gzip
import hashlib
import io
import itertools
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from df_ray.tasks.base import DataSchemaError, Sample

# The hub access point (df_ray.tasks.hub), as the loaders reach it: ``C.load_hub_dataset``.
from df_ray.tasks.hub import HubUnavailable as HubUnavailable
from df_ray.tasks.hub import hub_offline as hub_offline
from df_ray.tasks.hub import hub_snapshot as hub_snapshot
from df_ray.tasks.hub import load_hub_dataset as load_hub_dataset
from df_ray.tasks.hub import pinned as pinned
from df_ray.tasks.hub import pinned_revision as pinned_revision

_MISSING = object()

log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------- hashing


def stable_hash(*parts: object) -> str:
    """Hex SHA-256 of the parts joined by a separator (stable across processes)."""
    h = hashlib.sha256()
    for p in parts:
        h.update(str(p).encode("utf-8"))
        h.update(b"\x1f")
    return h.hexdigest()


def stable_int(*parts: object) -> int:
    return int(stable_hash(*parts)[:16], 16)


def text_id(prefix: str, text: str) -> str:
    """A content-derived id: ``prefix/<16 hex>`` of the whitespace-normalised text."""
    return f"{prefix}/{stable_hash(normalize_ws(text))[:16]}"


def normalize_ws(text: str) -> str:
    return re.sub(r"\s+", " ", str(text)).strip()


def seeded_order(items: Sequence[Any], key: Callable[[Any], str], seed: int,
                 salt: str = "") -> list[Any]:
    """Items sorted by sha256(salt, seed, key(item)): a deterministic shuffle."""
    return sorted(items, key=lambda it: (stable_hash(salt, seed, key(it)), key(it)))


def allocate(total: int, capacities: dict[str, int]) -> dict[str, int]:
    """Spread ``total`` as evenly as possible over strata, never above a stratum's capacity
    (water filling; leftovers go to strata in sorted name order)."""
    alloc = {k: 0 for k in capacities}
    remaining = min(total, sum(capacities.values()))
    open_ = sorted(k for k, c in capacities.items() if c > 0)
    while remaining > 0 and open_:
        share = max(1, remaining // len(open_))
        for k in list(open_):
            if remaining == 0:
                break
            take = min(share, capacities[k] - alloc[k], remaining)
            alloc[k] += take
            remaining -= take
            if alloc[k] >= capacities[k]:
                open_.remove(k)
    return alloc


def stratified_split(samples: Sequence[Sample], stratum: Callable[[Sample], str], seed: int,
                     *, n_test: int | None = None, per_stratum_test: int | None = None,
                     n_calibration: int, salt: str = "") -> tuple[list[Sample], list[Sample]]:
    """Disjoint (test, calibration) stratified over ``stratum``.

    Each stratum is shuffled deterministically (sha256 of seed and id); test takes the first
    rows of each stratum (``per_stratum_test`` each, or ``n_test`` spread evenly), calibration
    the next ones (``n_calibration`` spread evenly over what is left). Each returned list is
    ordered by stratum name, then by the seeded order inside the stratum, interleaved
    round-robin so that a ``limit`` prefix stays stratified.
    """
    by: dict[str, list[Sample]] = {}
    for s in samples:
        by.setdefault(stratum(s), []).append(s)
    shuffled = {k: seeded_order(v, lambda s: s.id, seed, salt) for k, v in by.items()}
    if per_stratum_test is not None:
        test_alloc = {k: min(per_stratum_test, len(v)) for k, v in shuffled.items()}
    else:
        test_alloc = allocate(n_test if n_test is not None else 0,
                              {k: len(v) for k, v in shuffled.items()})
    rest_caps = {k: len(v) - test_alloc[k] for k, v in shuffled.items()}
    cal_alloc = allocate(n_calibration, rest_caps)
    test = {k: v[: test_alloc[k]] for k, v in shuffled.items()}
    cal = {k: v[test_alloc[k]: test_alloc[k] + cal_alloc[k]] for k, v in shuffled.items()}
    return round_robin(test), round_robin(cal)


def round_robin(groups: dict[str, list[Sample]]) -> list[Sample]:
    out: list[Sample] = []
    keys = sorted(groups)
    i = 0
    while True:
        added = False
        for k in keys:
            if i < len(groups[k]):
                out.append(groups[k][i])
                added = True
        if not added:
            return out
        i += 1


def apply_limit(samples: list[Sample], limit: int | None) -> list[Sample]:
    if limit is None:
        return samples
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    return samples[:limit]


#: Set while `load_prefix` reads a prefix: `dedupe_ids` (wherever a loader calls it) does
#: not say the repeats it finds, so a prefix read again whole says them once.
_QUIET_REPEATS: contextvars.ContextVar[bool] = contextvars.ContextVar("quiet_repeats",
                                                                      default=False)


def dedupe_ids(samples: Iterable[Sample]) -> list[Sample]:
    """One sample per id. A repeated id with the same content (question and gold answer) is
    the same row given twice: the first is kept, and the repeats are said once. A repeated
    id with different content cannot be both: a `DataSchemaError` naming the ids."""
    first: dict[str, Sample] = {}
    out = []
    repeats: list[str] = []
    conflicts: list[str] = []
    for s in samples:
        kept = first.get(s.id)
        if kept is None:
            first[s.id] = s
            out.append(s)
        elif (kept.question, kept.gold) == (s.question, s.gold):
            repeats.append(s.id)
        elif s.id not in conflicts:
            conflicts.append(s.id)
    if conflicts:
        shown = ", ".join(repr(c) for c in conflicts[:5])
        more = f" and {len(conflicts) - 5} more" if len(conflicts) > 5 else ""
        raise DataSchemaError(
            f"{len(conflicts)} id(s) appear more than once with different content (question "
            f"or gold answer): {shown}{more}; give each row its own id, or remove the wrong "
            "copy")
    if repeats and not _QUIET_REPEATS.get():
        ids = list(dict.fromkeys(repeats))
        log.warning("data: %d repeated row(s) with the same id and content were read once "
                    "(%s%s)", len(repeats), ", ".join(repr(r) for r in ids[:5]),
                    " ..." if len(ids) > 5 else "")
    return out


def uniquify_ids(samples: Iterable[Sample]) -> list[Sample]:
    """For content-hash ids: keep repeated rows, the n-th repeat of an id gets ``#n``."""
    seen: dict[str, int] = {}
    out = []
    for s in samples:
        n = seen.get(s.id, 0) + 1
        seen[s.id] = n
        out.append(s if n == 1 else Sample(id=f"{s.id}#{n}", task=s.task, question=s.question,
                                           gold=s.gold, meta=s.meta))
    return out


def base_id(sample_id: str) -> str:
    return sample_id.split("#", 1)[0]


# ----------------------------------------------------------------------------- schema


def field(row: Any, name: str, types: type | tuple[type, ...], *, file: str, index: int,
          default: Any = _MISSING) -> Any:
    """``row[name]`` checked against ``types``; DataSchemaError naming file, row and field."""
    if not isinstance(row, dict):
        raise DataSchemaError(
            f"{file}: row {index}: expected an object with field {name!r}, got "
            f"{type(row).__name__}")
    if name not in row or row[name] is None:
        if default is not _MISSING:
            return default
        raise DataSchemaError(f"{file}: row {index}: missing field {name!r}")
    value = row[name]
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise DataSchemaError(
            f"{file}: row {index}: field {name!r} has type bool, expected "
            f"{_type_names(types)}")
    if not isinstance(value, types):
        raise DataSchemaError(
            f"{file}: row {index}: field {name!r} has type {type(value).__name__}, expected "
            f"{_type_names(types)}")
    return value


def str_list(row: dict, name: str, *, file: str, index: int) -> list[str]:
    value = field(row, name, (list, tuple), file=file, index=index)
    if hasattr(value, "tolist"):
        value = value.tolist()
    for j, v in enumerate(value):
        if not isinstance(v, str):
            raise DataSchemaError(
                f"{file}: row {index}: field {name!r}[{j}] has type {type(v).__name__}, "
                "expected str")
    return list(value)


def _type_names(types: type | tuple[type, ...]) -> str:
    ts = types if isinstance(types, tuple) else (types,)
    return " or ".join(t.__name__ for t in ts)


# ----------------------------------------------------------------------------- reading




def dataset_rows(ds: Any) -> list[dict]:
    """Rows of a ``datasets.Dataset`` (or any iterable of mappings) as plain dicts."""
    if hasattr(ds, "to_list"):
        return list(ds.to_list())
    return [dict(r) for r in ds]


def read_rows(path: str | os.PathLike[str], limit: int | None = None) -> list[dict]:
    """Rows of a local data file.

    ``.json`` (a list of objects, or JSON lines), ``.jsonl`` (optionally ``.gz``), ``.csv``
    (all values strings) and ``.parquet`` (read through ``datasets.load_dataset("parquet")``,
    the same code path the hub parquet conversions take).

    ``limit``: the first ``limit`` rows of :func:`iter_rows`, which streams every format: the
    memory a limited read takes does not grow with the file, and rows past the limit are
    neither read nor checked.
    """
    p = _data_file(path)
    if limit is not None:
        if limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        return list(itertools.islice(iter_rows(p), limit)) if limit else []
    name = p.name.lower()
    if name.endswith(".parquet"):
        return _read_parquet(p)
    if name.endswith((".csv", ".tsv")):
        return list(iter_rows(p))
    opener = gzip.open if name.endswith(".gz") else open
    try:
        with opener(p, "rt", encoding="utf-8") as f:  # type: ignore[operator]
            text = f.read()
    except UnicodeDecodeError as e:
        raise _not_utf8(p, e) from None
    except (OSError, EOFError) as e:
        raise _not_gzip(p, e) from None
    stripped = text.lstrip()
    if name.endswith((".json", ".json.gz")) and stripped.startswith("["):
        data = _json(text, p)
        if not isinstance(data, list):
            raise DataSchemaError(f"{p}: expected a JSON list of rows")
        return data
    if name.endswith((".json", ".json.gz")) and stripped.startswith("{") and "\n" not in \
            stripped.strip():
        return [_json(text, p)]
    return list(_json_lines(text.splitlines(), p))


def iter_rows(path: str | os.PathLike[str], columns: Sequence[str] | None = None
              ) -> Iterator[Any]:
    """The rows of a local data file one at a time, in the file's order, holding no more
    than a row (a Parquet batch) at a time: JSON lines and CSV line by line, Parquet batch by
    batch (pyarrow; ``columns``: only these columns, for Parquet alone), a JSON list parsed
    incrementally (``ijson``). Stop iterating and the file is read no further."""
    p = _data_file(path)
    name = p.name.lower()
    if name.endswith(".parquet"):
        yield from _parquet_rows(p, columns)
        return
    if name.endswith((".csv", ".tsv")):
        try:
            with p.open(newline="", encoding="utf-8") as f:
                yield from (dict(r) for r in csv.DictReader(
                    f, delimiter="\t" if name.endswith(".tsv") else ","))
        except UnicodeDecodeError as e:
            raise _not_utf8(p, e) from None
        return
    opener = gzip.open if name.endswith(".gz") else open
    try:
        with opener(p, "rb") as f:  # type: ignore[operator]
            if name.endswith((".json", ".json.gz")) and _first_byte(f) == b"[":
                yield from _json_list(f, p)
            else:
                yield from _json_lines(io.TextIOWrapper(f, encoding="utf-8"), p)
    except UnicodeDecodeError as e:
        raise _not_utf8(p, e) from None
    except (OSError, EOFError) as e:
        raise _not_gzip(p, e) from None


def _data_file(path: str | os.PathLike[str]) -> Path:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"data file not found: {p}")
    return p


def _not_gzip(p: Path, e: OSError | EOFError) -> Exception:
    if p.name.lower().endswith(".gz") and not isinstance(e, FileNotFoundError):
        return DataSchemaError(f"{p}: not a readable gzip file ({e})")
    return e


def _first_byte(f: Any) -> bytes:
    """The first byte of binary file ``f`` that is not whitespace; ``f`` is left where it
    was."""
    return f.peek(256).lstrip(b" \t\r\n")[:1]


def _json_list(f: Any, p: Path) -> Iterator[Any]:
    """The elements of the JSON list in binary file ``f``, parsed incrementally (``ijson``,
    its C backend where built): one element in memory at a time."""
    import ijson

    n = 0  # elements read
    try:
        for value in ijson.items(f, "item", use_float=True):
            n += 1
            yield value
    except ijson.JSONError as e:
        arg = e.args[0] if e.args else ""
        what = (arg.decode("utf-8", "replace") if isinstance(arg, bytes) else str(arg)).strip()
        if "invalid bytes in UTF8" in what:
            raise DataSchemaError(
                f"{p}: not UTF-8 text (element {n + 1}); convert the file to UTF-8 (e.g. "
                "iconv -f latin1 -t utf-8)") from None
        if "premature EOF" in what or not what:
            what = "the list is not closed"
        raise DataSchemaError(f"{p}: not valid JSON: {what.splitlines()[0]} (after element "
                              f"{n})") from None
    except ValueError as e:  # an integer past Python's integer-string limit
        raise DataSchemaError(f"{p}: element {n + 1}: {_big_int(e)}") from None
    except RecursionError:
        raise DataSchemaError(f"{p}: JSON nested too deeply to read") from None


def first_line_of(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__


def _json_lines(lines: Iterable[str], p: Path) -> Iterator[Any]:
    """JSON lines (blank lines skipped), one row at a time: the lines after the last row
    taken are never read from ``lines`` (a file object is read no further)."""
    for i, line in enumerate(lines):
        if line.strip():
            yield _json(line, p, f"line {i + 1}: ")


def _json(text: str, p: Path, where: str = "") -> Any:
    """``json.loads(text)``; a `DataSchemaError` naming the file (and line) for text that is
    not JSON, or holds a number Python will not read (an integer of more than 4,300 digits,
    the interpreter's integer-string limit)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise DataSchemaError(f"{p}: {where}not valid JSON: {e}") from None
    except ValueError as e:  # int("9" * 5000): Python's integer-string conversion limit
        raise DataSchemaError(f"{p}: {where}{_big_int(e)}") from None
    except RecursionError:
        raise DataSchemaError(f"{p}: {where}JSON nested too deeply to read") from None


def _big_int(e: ValueError) -> str:
    if "digits" in str(e):
        return (f"holds an integer of more than {sys.get_int_max_str_digits():,} digits, "
                "which Python will not read (sys.set_int_max_str_digits); quote it as a "
                "string or remove it")
    return f"not valid JSON: {e}"


def _not_utf8(p: Path, e: UnicodeDecodeError) -> DataSchemaError:
    return DataSchemaError(
        f"{p}: not UTF-8 text: byte 0x{e.object[e.start]:02x} at offset {e.start} cannot be "
        "decoded; convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8)")


def _read_parquet(p: Path) -> list[dict]:
    try:
        import datasets
    except ImportError:  # pragma: no cover - datasets is part of the system extra
        return list(_parquet_rows(p))
    return dataset_rows(datasets.load_dataset("parquet", data_files=str(p), split="train"))


#: Rows a Parquet batch holds at most (a row group may hold many more).
PARQUET_BATCH = 1024
#: Bytes a streamed Parquet read buffers at a time.
PARQUET_BUFFER = 1 << 20


def _parquet_rows(p: Path, columns: Sequence[str] | None = None) -> Iterator[dict]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        # a buffered stream, not pre-buffered: a batch reads the pages it needs, not its
        # whole column chunk (a file written in one row group holds all its rows in one)
        f = pq.ParquetFile(p, buffer_size=PARQUET_BUFFER, pre_buffer=False)
    except pa.ArrowInvalid as e:
        raise DataSchemaError(f"{p}: not a readable Parquet file ({first_line_of(e)})"
                              ) from None
    with f:
        for batch in f.iter_batches(batch_size=PARQUET_BATCH,
                                    columns=list(columns) if columns else None):
            yield from batch.to_pylist()


DATA_SUFFIXES = (".json", ".jsonl", ".json.gz", ".jsonl.gz", ".parquet", ".csv", ".tsv")


def data_files(folder: Path) -> list[Path]:
    """Data files in a folder (recursively), sorted by path."""
    return sorted(p for p in folder.rglob("*") if p.is_file()
                  and p.name.lower().endswith(DATA_SUFFIXES))


def load_local(source: str, rows_to_samples: Callable[[list[dict], str], list[Sample]],
               limit: int | None = None) -> list[Sample]:
    """Samples of a local file, or of every data file under a folder (sorted by path);
    ``limit``: the first rows only, the files read no further than they need
    (``read_rows``)."""
    p = Path(source)
    files = [p] if p.is_file() else data_files(p)
    if not files:
        raise FileNotFoundError(f"no data files under {p}")
    out: list[Sample] = []
    for f in files:
        left = None if limit is None else limit - len(out)
        if left == 0:
            break
        out.extend(rows_to_samples(read_rows(f, left), str(f)))
    return out


def say_whole_read(source: str, why: str) -> None:
    """Say in one line that a limited read reads all of ``source`` (a file or folder), why,
    and how big it is."""
    p = Path(source)
    size = sum(f.stat().st_size for f in ([p] if p.is_file() else data_files(p)))
    log.warning("data: %s (%.1f MB) is read whole even with a limit: %s", p, size / 1e6, why)


def load_prefix(load: Callable[[int | None], list[Sample]], limit: int | None,
                source: str | os.PathLike[str] | None = None) -> list[Sample]:
    """``load(limit)``'s samples, one per id (``dedupe_ids``), the first ``limit`` of them:
    a prefix read first, the whole file only when repeated rows left it short (said in one
    line naming ``source``, the file or folder read, and its size)."""
    if limit is None:
        return dedupe_ids(load(None))
    token = _QUIET_REPEATS.set(True)  # a prefix's repeats are said by the whole read
    try:
        got = dedupe_ids(load(limit))
    finally:
        _QUIET_REPEATS.reset(token)
    if len(got) < limit:  # repeats inside the prefix (or a short file): read everything
        short = len(got)
        got = dedupe_ids(load(None))
        if len(got) > short and source is not None:  # not a short file: repeats
            say_whole_read(str(source), f"rows repeated among its first {limit} left fewer "
                           f"than {limit} samples")
    return got[:limit]


def find_file(folder: Path, patterns: Sequence[str]) -> Path | None:
    """First data file in ``folder`` whose lower-cased name matches one of the regexes
    (patterns tried in order)."""
    files = data_files(folder)
    for pat in patterns:
        for f in files:
            if re.search(pat, f.name.lower()):
                return f
    return None


def is_local(source: str | None) -> bool:
    return source is not None and Path(source).exists()


def check_source(source: str | None, hub_names: Sequence[str] = ("hf", "hub")) -> None:
    if source is None or source in hub_names:
        return
    if not Path(source).exists():
        raise FileNotFoundError(f"source {source!r} is neither an existing file or folder "
                                f"nor one of {sorted(hub_names)}")


def letters(n: int) -> str:
    return "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[:n]
