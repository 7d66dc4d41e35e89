"""A configuration's results file: graded rows streamed to Parquet, metrics accumulated."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from df_ray.config import RunConfig
from df_ray.evaluation.metrics import MetricsAccumulator
from df_ray.evaluation.scoring import arrow_schema

#: The Parquet schema of ``samples.parquet`` (the ``ResultRow`` fields).
RESULT_SCHEMA = arrow_schema()


class ResultsFile:
    """One configuration's graded rows: metrics accumulated, rows streamed to a temporary
    Parquet file that becomes ``samples.parquet`` once every sample is in."""

    def __init__(self, cfg: RunConfig, sweep: str) -> None:
        self.cfg = cfg
        self.dir = Path(cfg.results_dir) / safe_name(sweep) / f"{safe_name(cfg.name)}-{cfg.fingerprint()}"
        self.dir.mkdir(parents=True, exist_ok=True)
        # Each writer its own temporary file: concurrent runs of one configuration never
        # truncate each other's (the last rename wins, and every renamed file is whole).
        self.tmp = self.dir / f".samples-{os.getpid()}-{uuid.uuid4().hex[:12]}.parquet.tmp"
        self.acc = MetricsAccumulator()
        self.writer: pq.ParquetWriter | None = None

    def add(self, table: pa.Table) -> None:
        for row in table.to_pylist():
            self.acc.add(row)
        table = table.select(RESULT_SCHEMA.names).cast(RESULT_SCHEMA)
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.tmp, RESULT_SCHEMA)
        self.writer.write_table(table)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    def commit(self) -> Path:
        path = self.dir / "samples.parquet"
        if not self.tmp.exists():  # no sample at all: an empty, well-formed file
            pq.write_table(RESULT_SCHEMA.empty_table(), self.tmp)
        os.replace(self.tmp, path)
        return path


def safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:80]
