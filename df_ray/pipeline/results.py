"""A configuration's results file: graded rows streamed to Parquet, metrics accumulated.

Integrity: ``samples.parquet`` is written with a CRC on every Parquet page, and its SHA-256
goes into ``samples.parquet.sha256`` beside it and into the MLflow run (tag
``df_ray.samples_sha256``); :func:`read_results` verifies both the pages and the digest, and a
file that fails is refused with the path and what to do, never read. A writer killed before
its rename leaves a ``.samples-<host>~<pid>-*.parquet.tmp``; the next writer of the same
configuration removes those of dead writers.

Schema: the generic ``ResultRow`` columns, then the columns of the configuration's method
(``Method.result_columns``), so that the configurations of a fused pipeline each get a file
of their own method's schema. A rerun never reads an earlier ``samples.parquet`` back: a
configuration not finished in MLflow is run again (its calls come from the generation
cache) and its file replaced whole, so a file of an older schema is simply rewritten;
readers (``df-ray report``, the answers a small run prints) select columns by name.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from df_ray.config import RunConfig
from df_ray.evaluation.metrics import MetricsAccumulator
from df_ray.evaluation.scoring import arrow_schema
from df_ray.methods import method_class
from df_ray.pipeline.file_errors import naming
from df_ray.pipeline.rows import METHOD_COLUMNS
from df_ray.pipeline.writers import is_abandoned, writer_tag

#: The generic columns of ``samples.parquet`` (the ``ResultRow`` fields), every method's.
RESULT_SCHEMA = arrow_schema()


def results_schema(cfg: RunConfig) -> pa.Schema:
    """The schema of a configuration's ``samples.parquet``: the generic columns, then its
    method's."""
    return arrow_schema(method_class(cfg.method).result_columns)


#: Rows a `ResultsFile` keeps in memory as written (`ResultsFile.head`).
HEAD_ROWS = 5

#: Bytes of rows a `ResultsFile` buffers before it writes them as one row group. Parquet's
#: cost per write is mostly per row group: a stage call's few rows per configuration (a fused
#: sweep's tables split over its configurations) cost the driver 0.24 ms a row written one
#: table at a time, 0.006 ms at 1 MiB. Buffering loses nothing a killed run keeps: its
#: temporary file is never read back (the next writer removes it, and a rerun takes its
#: calls from the generation cache).
WRITE_BYTES = 1 << 20


class ResultsFile:
    """One configuration's graded rows: metrics accumulated, rows streamed to a temporary
    Parquet file that becomes ``samples.parquet`` once every sample is in."""

    def __init__(self, cfg: RunConfig, sweep: str,
                 provenance: dict[str, str] | None = None) -> None:
        self.cfg = cfg
        self.dir = results_path(cfg, sweep)
        self.dir.mkdir(parents=True, exist_ok=True)
        remove_stale_tmp(self.dir)
        # Each writer its own temporary file: concurrent runs of one configuration never
        # truncate each other's (the last rename wins, and every renamed file is whole).
        self.tmp = self.dir / f".samples-{writer_tag()}-{uuid.uuid4().hex[:12]}.parquet.tmp"
        self.schema = results_schema(cfg)
        if provenance:  # what the run loaded (df_ray.pipeline.pins reads it back)
            from df_ray.pipeline.pins import METADATA_KEY

            self.schema = self.schema.with_metadata(
                {METADATA_KEY: json.dumps(provenance, sort_keys=True).encode()})
        self.acc = MetricsAccumulator(method_class(cfg.method).metrics)
        self.writer: pq.ParquetWriter | None = None
        self.sha256: str | None = None  # the committed file's digest (commit)
        #: The first `HEAD_ROWS` rows written, as in the file: what the CLI shows of a small
        #: run without reading the file it has just written.
        self.head: pa.Table | None = None
        self._pending: list[pa.Table] = []  # rows not yet written (`WRITE_BYTES`)
        self._pending_bytes = 0

    def add(self, table: pa.Table) -> None:
        """Add stage output rows of this configuration (the generic columns and
        ``method_columns``, the method's as JSON)."""
        own = ([json.loads(v) if v else {} for v in table.column(METHOD_COLUMNS).to_pylist()]
               if METHOD_COLUMNS in table.column_names else [{}] * table.num_rows)
        for row, extra in zip(table.to_pylist(), own, strict=True):
            self.acc.add({**row, **extra})
        table = table.select(RESULT_SCHEMA.names).cast(RESULT_SCHEMA)
        for name in self.schema.names[len(RESULT_SCHEMA):]:
            table = table.append_column(
                self.schema.field(name),
                pa.array([e.get(name) for e in own], type=self.schema.field(name).type))
        if self.head is None:
            self.head = table.slice(0, HEAD_ROWS)
        elif self.head.num_rows < HEAD_ROWS:
            self.head = pa.concat_tables(
                [self.head, table.slice(0, HEAD_ROWS - self.head.num_rows)])
        self._pending.append(table)
        self._pending_bytes += table.nbytes
        if self._pending_bytes >= WRITE_BYTES:
            self._write()

    def _write(self) -> None:
        """Write the buffered rows as one row group."""
        if not self._pending:
            return
        table = pa.concat_tables(self._pending)
        self._pending, self._pending_bytes = [], 0
        with naming(self.tmp):
            if self.writer is None:
                self.writer = pq.ParquetWriter(self.tmp, self.schema, write_page_checksum=True)
            self.writer.write_table(table)

    def close(self) -> None:
        self._write()
        if self.writer is not None:
            with naming(self.tmp):
                self.writer.close()
            self.writer = None

    def commit(self) -> Path:
        path = self.dir / "samples.parquet"
        if not self.tmp.exists():  # no sample at all: an empty, well-formed file
            with naming(self.tmp):
                pq.write_table(self.schema.empty_table(), self.tmp, write_page_checksum=True)
        digest = file_sha256(self.tmp)
        side_tmp = self.dir / f".samples-{writer_tag()}-{uuid.uuid4().hex[:12]}.sha256.tmp"
        side_tmp.write_text(digest + "\n")
        os.replace(self.tmp, path)
        os.replace(side_tmp, self.dir / "samples.parquet.sha256")
        self.sha256 = digest
        return path


class CorruptResultsError(RuntimeError):
    """A results file whose content does not match its checksum."""


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify_results(path: str | Path, expected: str | None = None) -> None:
    """Raise :class:`CorruptResultsError` naming ``path`` when its SHA-256 differs from
    ``expected`` (default: the ``.sha256`` file beside it; no check when there is none)."""
    path = Path(path)
    if expected is None:
        side = path.with_name(path.name + ".sha256")
        try:
            expected = side.read_text().strip() or None
        except OSError:
            expected = None
    if expected is None:
        return
    got = file_sha256(path)
    if got != expected:
        raise CorruptResultsError(
            f"{path}: its content does not match its checksum (sha256 {got[:12]}..., "
            f"recorded {expected[:12]}...): the file was changed or damaged after it was "
            "written; rerun its configuration with a fresh results_dir to rewrite it")


def read_results(path: str | Path, columns: list[str] | None = None,
                 expected_sha256: str | None = None) -> pa.Table:
    """A results file's rows, verified (its digest, then every page's CRC)."""
    verify_results(path, expected_sha256)
    try:
        return pq.read_table(path, columns=columns, page_checksum_verification=True)
    except (OSError, pa.ArrowException) as e:
        raise CorruptResultsError(f"{path}: cannot be read ({type(e).__name__}: {e}); rerun "
                                  "its configuration to rewrite it") from None


def results_path(cfg: RunConfig, sweep: str) -> Path:
    """``<results_dir>/<sweep>/<name>-<fingerprint>``, never outside ``results_dir``."""
    root = Path(cfg.results_dir)
    out = root / safe_name(sweep) / f"{safe_name(cfg.name)}-{cfg.fingerprint()}"
    if not os.path.abspath(out).startswith(os.path.abspath(root) + os.sep):
        raise ValueError(f"results path {out} is outside results_dir {root}")
    return out


def remove_stale_tmp(directory: Path) -> int:
    """Remove the ``.samples-*.tmp`` files of writers that are gone (`writers.is_abandoned`)."""
    n = 0
    now = time.time()
    for p in directory.glob(".samples-*.tmp"):
        tag = p.name[len(".samples-"):].rsplit("-", 1)[0]
        try:
            if not is_abandoned(tag, p.stat().st_mtime, now):
                continue
            p.unlink()
            n += 1
        except OSError:
            pass
    return n


def safe_name(name: str) -> str:
    """A file-name-safe form of a name: no path separator, NUL or leading dot (``..`` is
    ``_.``), at most 80 characters."""
    out = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:80]
    if not out or out.startswith("."):
        out = "_" + out[1:] if out else "_"
    return out
