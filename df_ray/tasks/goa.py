"""Graph-of-Agents' published evaluation files, the data the DarkForest paper aligns with.

The files are read at a pinned commit of UNITES-Lab/GoA and verified by their SHA-256. On a
machine with internet access the first use fetches each file once into
``$DF_RAY_HOME/data/goa/<commit>/`` (``~/.cache/df_ray`` without DF_RAY_HOME): written under
a temporary name, verified, then renamed, so a reader never sees half a file. Offline
(``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE`` / ``DF_RAY_OFFLINE`` set) nothing is fetched:
put the file there yourself, or pass ``source=<a local copy>``.

Pinned: commit ``c9def0082e43bb737dd97d998db381842e444908`` (2026-04-21; the test files
are unchanged since GoA's first public commit fa34d494).

| benchmark | file | rows | schema |
| --- | --- | --- | --- |
| mmlu_pro | data/test/MMLU_Pro_sampled_test.json | 2,100 (150 per category) | question (options inlined), gold_answer, category |
| gpqa | data/test/GPQA_test.json | 198 (GPQA diamond) | question (options inlined, GoA's order), gold_answer |
"""

from __future__ import annotations

import hashlib
import os
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from df_ray.tasks._common import hub_offline
from df_ray.tasks.base import BaseTask, DataUnavailable

REPO = "UNITES-Lab/GoA"
COMMIT = "c9def0082e43bb737dd97d998db381842e444908"
#: How long one download may take before it is given up (seconds).
FETCH_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class GoAFile:
    path: str  # inside the repository
    sha256: str
    rows: int

    @property
    def url(self) -> str:
        return f"https://raw.githubusercontent.com/{REPO}/{COMMIT}/{self.path}"

    @property
    def name(self) -> str:
        return Path(self.path).name


FILES: dict[str, GoAFile] = {
    "mmlu_pro": GoAFile("data/test/MMLU_Pro_sampled_test.json",
                        "0a2e778d9c9b3043f52e8c6dd3de235392ba080f1fc13a399bcd7a584548536d", 2100),
    "gpqa": GoAFile("data/test/GPQA_test.json",
                    "c7c635828b137af32bb9a447a016d10e6f349a65be43abbf057e8ee07fe5f683", 198),
}


class GoADataUnavailable(DataUnavailable):
    """GoA's file is not cached and cannot be fetched here; the message says what to do."""


def cache_dir() -> Path:
    base = os.environ.get("DF_RAY_HOME") or os.path.join(os.path.expanduser("~"), ".cache",
                                                         "df_ray")
    return Path(base) / "data" / "goa" / COMMIT


def offline() -> bool:
    return hub_offline() or os.environ.get("DF_RAY_OFFLINE", "").strip().lower() in {
        "1", "true", "yes", "on"}


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def data_provenance(benchmark: str) -> tuple[str, str]:
    """(source, revision) of a run on the benchmark's GoA file, as its provenance records."""
    return describe(benchmark), f"{REPO}@{COMMIT}"


def describe(benchmark: str) -> str:
    """Where a benchmark's GoA file comes from, in words (provenance, messages)."""
    f = FILES[benchmark]
    return f"GoA {REPO}@{COMMIT[:12]}:{f.path}"


def goa_file(benchmark: str) -> Path:
    """The local path of the benchmark's GoA file at the pinned commit, fetched once when it
    is not cached; its SHA-256 checked either way."""
    f = FILES[benchmark]
    dest = cache_dir() / f.name
    hint = (f"fetch it on a machine with internet access (any df_ray run there does), or "
            f"curl -L -o {dest} {f.url}, or pass source=<a local copy of {f.name}>")
    if dest.is_file():
        got = _sha256(dest)
        if got != f.sha256:
            raise GoADataUnavailable(f"{dest}: sha256 {got}, expected {f.sha256} ({f.path} "
                                     f"at {REPO}@{COMMIT[:12]}); delete it and {hint}")
        return dest
    if offline():
        raise GoADataUnavailable(f"{describe(benchmark)} is not cached at {dest} and this "
                                 f"machine is offline; {hint}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        try:
            with urllib.request.urlopen(f.url, timeout=FETCH_TIMEOUT_S) as r, \
                    tmp.open("wb") as out:
                while chunk := r.read(1 << 20):
                    out.write(chunk)
        except OSError as e:
            raise GoADataUnavailable(f"cannot fetch {f.url}: {e}; {hint}") from None
        got = _sha256(tmp)
        if got != f.sha256:
            raise GoADataUnavailable(f"{f.url}: sha256 {got}, expected {f.sha256}; not used")
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest


class GoADataTask(BaseTask):
    """A benchmark whose default test data (``source`` None) is the paper's: GoA's file at
    the pinned commit, recorded as such in a run's provenance."""

    def data_provenance(self, source: str | None, revision: str | None) -> tuple[str, str]:
        if source is None:
            return data_provenance(self.name)
        return super().data_provenance(source, revision)
